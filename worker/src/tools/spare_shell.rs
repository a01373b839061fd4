//! A `bash` started ahead of time, so a command does not wait for the shell to start.
//!
//! Starting bash costs about 1 ms (measured: `bash -c true` 1.81 ms against 0.99 ms for dash's `sh -c true` and
//! 0.85 ms for `/usr/bin/true`), more than everything else the runner does for a short command. From a session's
//! first command on, the worker keeps spare bashes waiting on their stdin; the next command is handed to one as its
//! directory and text (NUL-terminated), and the spare `cd`s there, points stdin at `/dev/null` and `eval`s the text.
//! Their stdin is one end of a socket pair, not a pipe: a pipe can be reopened through `/proc/<pid>/fd/0` by any
//! process of the same user, which would let a command write the next command into a spare; a socket cannot be
//! opened that way. Each spare is confined like any command (its own pid namespace, so `$$` is 1).
//! Exit status, output streams, process group, environment, `$0` and `$$` behave as with `bash -c`; the one visible
//! difference is that a syntax error is reported as `bash: eval: line N` instead of `bash: -c: line N`. Sessions
//! that never run a command never start a spare.
//!
//! Spares pay off only when commands come in quick succession: a model's next command comes a reply later, seconds
//! with a real model, where bash's 1 ms is noise, and two waiting shells (four processes, with their reapers) per
//! session took most of the memory of 300 live sessions after one tool turn each. So a session's first command
//! starts none; a command that starts within [`BACK_TO_BACK`] of the previous one (a script, a CodeAct program,
//! a scripted model, an operator's commands) starts them, and from then on a replacement is asked for as each
//! command starts, by a thread of its own. The first spares start [`FIRST_START_AFTER`] later. Two spares are
//! kept: with one, commands sent back to back reached it while it was still starting (bash needs about 1 ms before
//! it reads its stdin) and waited for it; the oldest of two has had a whole command's time to get ready. An idle
//! spare costs about 0.3 MiB of private memory (3 MiB RSS, mostly shared with every bash), and two processes (the
//! shell and its reaper): after `spare_shell_idle_ms` without a command (30 s unless the supervisor says) the spares
//! are let go, so an idle session is back to two processes, and it takes commands back to back again to start them.
//! Only bash gets a spare: the hand-over uses `read -d`.

use std::collections::VecDeque;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use std::io::Write;
use std::os::unix::net::UnixStream;

use tokio::process::{Child, Command};

/// What the spare runs: read the directory and the command, then become that command's shell. Before the
/// command runs, `BASH_EXECUTION_STRING` is made the command (as `bash -c` sets it) and our names are unset.
const HANDOVER: &str = r#"IFS= read -r -d "" __service_dir && IFS= read -r -d "" __service_cmd || exit 126
exec </dev/null
cd -- "$__service_dir" || exit 126
eval 'BASH_EXECUTION_STRING=$__service_cmd; unset -v __service_dir __service_cmd; '"$__service_cmd""#;

/// Longest command handed to the spare. bash's `read` takes a pipe one byte per system call, so beyond a few KiB
/// reading the command would cost more than starting a shell for it.
const MAX_HANDOVER: usize = 4096;

/// How many spares a worker keeps.
const SPARES: usize = 2;

/// How long after the command that first finds commands back to back (again, after the spares were let go) the
/// first spares start. A one-shot `run` has its answer a few milliseconds after its last command, and two shells
/// starting then (four processes, with their reapers) took the CPU it needed on a 2-core machine: about 1.1 ms (7%)
/// of the one-shot. Replacements of taken spares start at once, so commands sent back to back keep finding one.
const FIRST_START_AFTER: Duration = Duration::from_millis(10);

/// Whether spares were started since the worker started or last let them go.
static WARM: AtomicBool = AtomicBool::new(false);

/// Commands that start within this of the previous one's start come back to back: they start spares.
const BACK_TO_BACK: Duration = Duration::from_secs(1);

/// When the last command started.
static LAST_COMMAND: Mutex<Option<std::time::Instant>> = Mutex::new(None);

/// Milliseconds without a command after which the spares are let go (see [`set_idle`]).
static IDLE_MS: AtomicU64 = AtomicU64::new(service_ipc::config::default_spare_shell_idle_ms());

/// Sets the time without a command after which the spares are let go, from the worker's configuration.
pub fn set_idle(idle: Duration) {
    IDLE_MS.store(idle.as_millis().max(1) as u64, Ordering::Relaxed);
}

/// A started spare and our end of its stdin.
type Spare = (Child, UnixStream);

/// The spares of this worker, oldest first.
static SPARES_READY: Mutex<VecDeque<Spare>> = Mutex::new(VecDeque::new());

/// Hands `command` to the oldest live spare, to run in `cwd`; None when there is no live spare (or the command
/// cannot be handed over), and the caller starts a shell as usual.
pub async fn take(command: &str, cwd: &Path) -> Option<Child> {
    // The spare starts in `/`: a relative directory would mean something else to it than to a new shell.
    if command.len() > MAX_HANDOVER || command.contains('\0') || !cwd.is_absolute() || !cwd.is_dir()
    {
        return None;
    }
    let (child, mut stdin) = loop {
        let (mut child, stdin) = SPARES_READY.lock().ok()?.pop_front()?;
        if matches!(child.try_wait(), Ok(None)) {
            break (child, stdin);
        }
    };
    let mut payload = cwd.as_os_str().as_bytes().to_vec();
    payload.push(0);
    payload.extend_from_slice(command.as_bytes());
    payload.push(0);
    // The payload fits the socket's buffer, so this blocking write does not wait. Dropping our end after it is the
    // spare's end of input; a spare that died meanwhile fails the write.
    stdin.write_all(&payload).ok()?;
    drop(stdin);
    Some(child)
}

/// Called as each command starts: asks for spares up to `SPARES` once commands come back to back (see the module's
/// notes). The fork and exec happen on a thread of their own, so neither the command that just started nor the
/// events of the runtime's thread wait for them, and the spare starts up on the other core while the current
/// command runs.
pub fn refill(shell: &'static str, configure: Configure) {
    if !shell.ends_with("bash") {
        return;
    }
    let now = std::time::Instant::now();
    let previous = LAST_COMMAND
        .lock()
        .map(|mut last| last.replace(now))
        .unwrap_or(None);
    let back_to_back = previous.is_some_and(|p| now.duration_since(p) < BACK_TO_BACK);
    if !back_to_back && !WARM.load(Ordering::Relaxed) {
        return;
    }
    static SPAWNER: OnceLock<Option<SyncSender<()>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (tx, rx) = sync_channel::<()>(1);
        // The thread lives as long as the worker: `PR_SET_PDEATHSIG` follows the thread that forked the child.
        std::thread::Builder::new()
            .name("spare-shell".into())
            .spawn(move || {
                let _context = runtime.enter();
                loop {
                    let idle = Duration::from_millis(IDLE_MS.load(Ordering::Relaxed));
                    match rx.recv_timeout(idle) {
                        Ok(()) => {
                            if !WARM.load(Ordering::Relaxed) {
                                std::thread::sleep(FIRST_START_AFTER);
                            }
                            start(shell, configure);
                        }
                        Err(RecvTimeoutError::Timeout) => let_go(),
                        Err(RecvTimeoutError::Disconnected) => return,
                    }
                }
            })
            .ok()?;
        Some(tx)
    });
    if let Some(tx) = spawner {
        // A request already queued covers this one.
        let _ = tx.try_send(());
    }
}

/// Starts spares until there are `SPARES`. Only the spawner thread adds spares, so the count cannot overshoot; the
/// lock is not held while a shell starts, so a command can take a ready spare meanwhile.
fn start(shell: &'static str, configure: Configure) {
    while SPARES_READY.lock().is_ok_and(|ready| ready.len() < SPARES) {
        let Ok((ours, theirs)) = UnixStream::pair() else {
            return;
        };
        let mut command = Command::new(shell);
        command.arg("-c").arg(HANDOVER).current_dir("/");
        if configure(&mut command).is_err() {
            return;
        }
        command.stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)));
        let Ok(child) = crate::leftovers::spawn(&mut command) else {
            return;
        };
        let Ok(mut ready) = SPARES_READY.lock() else {
            return;
        };
        ready.push_back((child, ours));
        WARM.store(true, Ordering::Relaxed);
    }
}

/// Lets every waiting spare go: dropping its handle kills its reaper (`kill_on_drop`), which tokio reaps, and the
/// shell dies with it (`PR_SET_PDEATHSIG`); the worker, the sandbox's pid 1, reaps the shell (see `orphans`).
fn let_go() {
    WARM.store(false, Ordering::Relaxed);
    let spares = SPARES_READY
        .lock()
        .map(|mut ready| std::mem::take(&mut *ready))
        .unwrap_or_default();
    drop(spares);
}

/// How the runner prepares a shell's command (pipes, process group, confinement).
pub type Configure = fn(&mut Command) -> std::io::Result<()>;
