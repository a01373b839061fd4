//! Subprocesses in the session sandbox: the Bash tool and operator commands share one runner.
//!
//! The runner starts `bash -c` (or `sh -c`) in its own process group (or hands the command to a spare bash already
//! started, see `spare_shell`), streams stdout and stderr live as `exec_command_output_delta` events, and on exit,
//! time-out or interrupt kills the whole group, so a command's background children never outlive it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde::Deserialize;
use service_ipc::{EventPayload, ExecStream, ToSupervisor};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{resolve, spare_shell, ToolCtx, ToolResult};
use crate::conn::Outbox;

/// Bash time-out when the model gives none.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest time-out the model may ask for.
const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Time-out of operator commands.
const OPERATOR_TIMEOUT: Duration = Duration::from_secs(600);
/// Output kept for the model; the rest still streams as events but is cut from the result.
const OUTPUT_CAP: usize = 64 * 1024;
/// Output streamed as events per command; past it one `exec_command_output_truncated` event is sent and the rest is
/// read and dropped, so a flood neither fills the journal nor blocks the command on a full pipe.
pub const LIVE_OUTPUT_CAP: usize = 1024 * 1024;

#[derive(Deserialize)]
pub struct BashArgs {
    command: String,
    timeout_ms: Option<u64>,
}

/// One command to run.
pub struct ExecRequest {
    /// Turn id for the events; None for operator commands.
    pub turn_id: Option<String>,
    /// Tool call id; None for operator commands.
    pub call_id: Option<String>,
    /// Id of this command's events.
    pub exec_id: String,
    /// Shell command line.
    pub command: String,
    /// Working directory.
    pub cwd: PathBuf,
    /// Time limit.
    pub timeout: Duration,
    /// A descriptor the command inherits (a CodeAct program's tool channel); such a command never runs in a
    /// spare shell, whose descriptors were fixed when it started.
    pub inherit: Option<Inherit>,
}

/// A descriptor a command inherits under its own number, and the variables that tell the command which it is.
pub struct Inherit {
    /// The descriptor; the worker's copy is closed once the command has started.
    pub fd: OwnedFd,
    /// Variables added to the command's environment.
    pub env: Vec<(String, String)>,
}

/// How a command ended.
#[derive(Debug)]
pub struct ExecOutcome {
    /// Exit code; None when killed by a signal or not started.
    pub exit_code: Option<i32>,
    /// The time-out killed it.
    pub timed_out: bool,
    /// An interrupt killed it.
    pub interrupted: bool,
    /// Combined stdout and stderr in arrival order, cut at the cap.
    pub output: String,
    /// Bytes cut from `output`.
    pub omitted: usize,
    /// Bytes sent as output events.
    pub streamed: usize,
    /// Set once the live output passed [`LIVE_OUTPUT_CAP`].
    pub truncated: bool,
    /// Why it could not start, if it could not.
    pub spawn_error: Option<String>,
}

/// The Bash tool.
pub async fn bash(args: BashArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    let timeout = args
        .timeout_ms
        .map(Duration::from_millis)
        .unwrap_or(DEFAULT_TIMEOUT)
        .min(MAX_TIMEOUT);
    let req = ExecRequest {
        turn_id: Some(ctx.turn_id.to_string()),
        call_id: Some(ctx.call_id.to_string()),
        exec_id: uuid::Uuid::new_v4().to_string(),
        command: args.command,
        cwd: ctx.cwd.to_path_buf(),
        timeout,
        inherit: None,
    };
    let o = run(ctx.outbox, req, ctx.cancel).await;
    if let Some(e) = o.spawn_error {
        return ToolResult::error(e);
    }
    let mut text = o.output;
    if o.omitted > 0 {
        text.push_str(&format!("\n[{} bytes of output omitted]", o.omitted));
    }
    let ok = o.exit_code == Some(0);
    if o.timed_out {
        text.push_str(&format!(
            "\n[killed: the command ran longer than {} ms]",
            timeout.as_millis()
        ));
    } else if o.interrupted {
        text.push_str("\n[killed: the turn was interrupted]");
    } else if !ok {
        match o.exit_code {
            Some(code) => text.push_str(&format!("\n[exit code {code}]")),
            None => text.push_str("\n[killed by a signal]"),
        }
    }
    if ok {
        ToolResult::ok(text)
    } else {
        ToolResult::error(text)
    }
}

/// An operator command: `exec_command_*` events only, then `CommandFinished`.
pub async fn operator_command(
    outbox: Outbox,
    workspace: PathBuf,
    exec_id: String,
    command: String,
    cwd: Option<String>,
    cancel: CancellationToken,
) {
    let cwd = cwd.map(|c| resolve(&workspace, &c)).unwrap_or(workspace);
    let req = ExecRequest {
        turn_id: None,
        call_id: None,
        exec_id: exec_id.clone(),
        command,
        cwd,
        timeout: OPERATOR_TIMEOUT,
        inherit: None,
    };
    let outcome = run(&outbox, req, &cancel).await;
    outbox
        .send(ToSupervisor::CommandFinished {
            exec_id,
            exit_code: outcome.exit_code,
        })
        .await;
}

pub(crate) fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

/// Runs one command to its end, emitting `exec_command_begin`, output deltas and `exec_command_end`.
pub async fn run(out: &Outbox, mut req: ExecRequest, cancel: &CancellationToken) -> ExecOutcome {
    let started = Instant::now();
    let exec_id = req.exec_id.clone();
    out.event(EventPayload::ExecCommandBegin {
        turn_id: req.turn_id.clone(),
        exec_id: exec_id.clone(),
        call_id: req.call_id.clone(),
        command: req.command.clone(),
        cwd: req.cwd.display().to_string(),
    })
    .await;

    let mut outcome = ExecOutcome {
        exit_code: None,
        timed_out: false,
        interrupted: false,
        output: String::new(),
        omitted: 0,
        streamed: 0,
        truncated: false,
        spawn_error: None,
    };
    let spawned = match req.inherit.take() {
        Some(inherit) => spawn_inheriting(&req, inherit),
        None => match spare_shell::take(&req.command, &req.cwd).await {
            Some(child) => Ok(child),
            None => {
                let mut command = tokio::process::Command::new(shell());
                command.arg("-c").arg(&req.command).current_dir(&req.cwd);
                configure(&mut command).and_then(|()| crate::leftovers::spawn(&mut command))
            }
        },
    };
    spare_shell::refill(shell(), configure);
    match spawned {
        Ok(child) => supervise(out, &req, child, cancel, &mut outcome).await,
        Err(e) => {
            let message = format!("cannot start the command in {}: {e}", req.cwd.display());
            out.event(EventPayload::ExecCommandOutputDelta {
                turn_id: req.turn_id.clone(),
                exec_id: exec_id.clone(),
                stream: ExecStream::Stderr,
                chunk: format!("{message}\n"),
            })
            .await;
            outcome.spawn_error = Some(message);
        }
    }
    out.event(EventPayload::ExecCommandEnd {
        turn_id: req.turn_id.clone(),
        exec_id,
        exit_code: outcome.exit_code,
        duration_ms: started.elapsed().as_millis() as u64,
        timed_out: outcome.timed_out,
    })
    .await;
    outcome
}

/// Starts `req`'s shell with `inherit.fd` left open across exec; the worker's copy closes once it has started.
fn spawn_inheriting(req: &ExecRequest, inherit: Inherit) -> std::io::Result<tokio::process::Child> {
    let mut command = tokio::process::Command::new(shell());
    command
        .arg("-c")
        .arg(&req.command)
        .current_dir(&req.cwd)
        .envs(inherit.env);
    let fd = inherit.fd.as_raw_fd();
    // SAFETY: fcntl is async-signal-safe, and `fd` stays open in the worker until the spawn has returned. Clearing
    // close-on-exec in the child alone keeps every other command of the worker from inheriting it.
    unsafe {
        command.pre_exec(move || {
            if nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    configure(&mut command)?;
    let child = crate::leftovers::spawn(&mut command);
    drop(inherit.fd);
    child
}

/// Everything about a command's shell but its arguments and directory: stdin from /dev/null, stdout and stderr
/// piped, and [`confine_process`].
fn configure(command: &mut tokio::process::Command) -> std::io::Result<()> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    confine_process(command)
}

/// What every process the worker starts for the session gets (commands and MCP servers alike): its own process
/// group, death with the worker, the egress proxy variables, and the confinement of `confine` (its own pid
/// namespace and the seccomp filter).
pub fn confine_process(command: &mut tokio::process::Command) -> std::io::Result<()> {
    own_group(command);
    command.envs(crate::egress::env().iter().map(|(k, v)| (k, v)));
    crate::confine::confine(command, crate::confine::strictness()).map_err(std::io::Error::other)
}

/// A process group of its own, killed when dropped, and death with the process that started it (the worker, or
/// the supervisor for the operator's host hooks).
pub fn own_group(command: &mut tokio::process::Command) {
    command.process_group(0).kill_on_drop(true);
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_PDEATHSIG) is async-signal-safe. It makes the shell die with a parent killed outright
    // (its own group is killed by us on every other path).
    unsafe {
        command.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
}

async fn supervise(
    out: &Outbox,
    req: &ExecRequest,
    mut child: tokio::process::Child,
    cancel: &CancellationToken,
    outcome: &mut ExecOutcome,
) {
    let pgid = child.id().map(|id| nix::unistd::Pid::from_raw(id as i32));
    let (tx, mut rx) = mpsc::channel::<(ExecStream, Vec<u8>)>(64);
    if let Some(stdout) = child.stdout.take() {
        tokio::spawn(pump(stdout, ExecStream::Stdout, tx.clone()));
    }
    if let Some(stderr) = child.stderr.take() {
        tokio::spawn(pump(stderr, ExecStream::Stderr, tx.clone()));
    }
    drop(tx);

    let mut decoders = [Utf8Carry::default(), Utf8Carry::default()];
    let deadline = tokio::time::sleep(req.timeout);
    tokio::pin!(deadline);
    let mut status = None;
    let mut pipes_open = true;
    // Under Landlock a command has no PID namespace whose end kills what it left: the worker kills what it adopted
    // once the shell has exited (`leftovers`), and the pipes are read for a short while after that, not until they
    // close, in case something still holds them.
    let leftovers = tokio::time::sleep(Duration::from_secs(86_400));
    tokio::pin!(leftovers);
    while status.is_none() || pipes_open {
        tokio::select! {
            _ = &mut leftovers, if status.is_some() => pipes_open = false,
            chunk = rx.recv(), if pipes_open => match chunk {
                Some((stream, bytes)) => {
                    let text = decoders[stream as usize].push(&bytes);
                    emit_output(out, req, outcome, stream, text).await;
                }
                None => pipes_open = false,
            },
            s = child.wait(), if status.is_none() => {
                status = Some(s.ok());
                // The shell is gone; its leftovers would hold the pipes open forever.
                kill_group(pgid);
                if crate::confine::strictness() == crate::confine::Strictness::Landlock {
                    // What escaped the group was handed to the worker: it goes now, and with it the pipes.
                    let _ = tokio::task::spawn_blocking(crate::leftovers::kill_adopted).await;
                    leftovers
                        .as_mut()
                        .reset(tokio::time::Instant::now() + LEFTOVER_GRACE);
                }
            }
            _ = &mut deadline, if status.is_none() => {
                outcome.timed_out = true;
                kill_group(pgid);
            }
            _ = cancel.cancelled(), if status.is_none() && !outcome.interrupted => {
                outcome.interrupted = true;
                kill_group(pgid);
            }
        }
    }
    for (i, stream) in [ExecStream::Stdout, ExecStream::Stderr]
        .into_iter()
        .enumerate()
    {
        let rest = decoders[i].finish();
        emit_output(out, req, outcome, stream, rest).await;
    }
    outcome.exit_code = status.flatten().and_then(|s| s.code());
}

async fn emit_output(
    out: &Outbox,
    req: &ExecRequest,
    outcome: &mut ExecOutcome,
    stream: ExecStream,
    text: String,
) {
    if text.is_empty() {
        return;
    }
    if outcome.truncated {
        outcome.omitted += text.len();
        return;
    }
    let mut text = text;
    let mut just_truncated = false;
    if outcome.streamed + text.len() > LIVE_OUTPUT_CAP {
        let mut cut = LIVE_OUTPUT_CAP - outcome.streamed;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        outcome.omitted += text.len() - cut;
        text.truncate(cut);
        outcome.truncated = true;
        just_truncated = true;
    }
    outcome.streamed += text.len();
    let room = OUTPUT_CAP.saturating_sub(outcome.output.len());
    if room >= text.len() {
        outcome.output.push_str(&text);
    } else {
        let mut cut = room;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        outcome.output.push_str(&text[..cut]);
        outcome.omitted += text.len() - cut;
    }
    if !text.is_empty() {
        out.event(EventPayload::ExecCommandOutputDelta {
            turn_id: req.turn_id.clone(),
            exec_id: req.exec_id.clone(),
            stream,
            chunk: text,
        })
        .await;
    }
    if just_truncated {
        out.event(EventPayload::ExecCommandOutputTruncated {
            turn_id: req.turn_id.clone(),
            exec_id: req.exec_id.clone(),
            limit_bytes: LIVE_OUTPUT_CAP as u64,
        })
        .await;
    }
}

/// How long a command's pipes are still read after its shell has exited, under Landlock (see `supervise`).
const LEFTOVER_GRACE: Duration = Duration::from_millis(250);

pub(crate) fn kill_group(pgid: Option<nix::unistd::Pid>) {
    if let Some(pgid) = pgid {
        // ESRCH (already gone) is the expected case after a clean exit.
        let _ = nix::sys::signal::killpg(pgid, nix::sys::signal::Signal::SIGKILL);
    }
}

async fn pump(
    mut pipe: impl tokio::io::AsyncRead + Unpin,
    stream: ExecStream,
    tx: mpsc::Sender<(ExecStream, Vec<u8>)>,
) {
    let mut buf = vec![0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if tx.send((stream, buf[..n].to_vec())).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Decodes a byte stream as UTF-8 across chunk boundaries; invalid bytes become U+FFFD.
#[derive(Default)]
struct Utf8Carry {
    pending: Vec<u8>,
}

impl Utf8Carry {
    fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    out.push_str(s);
                    self.pending.clear();
                    return out;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        // An incomplete sequence at the end: keep it for the next chunk.
                        None => {
                            self.pending.drain(..valid);
                            return out;
                        }
                        Some(bad) => {
                            out.push('\u{FFFD}');
                            self.pending.drain(..valid + bad);
                        }
                    }
                }
            }
        }
    }

    fn finish(&mut self) -> String {
        let rest = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Carry;

    #[test]
    fn utf8_split_across_chunks_is_reassembled() {
        let text = "héllo ✓";
        let bytes = text.as_bytes();
        let mut carry = Utf8Carry::default();
        let mut out = String::new();
        for b in bytes {
            out.push_str(&carry.push(&[*b]));
        }
        out.push_str(&carry.finish());
        assert_eq!(out, text);
    }

    #[test]
    fn invalid_bytes_become_replacement_characters() {
        let mut carry = Utf8Carry::default();
        assert_eq!(carry.push(&[b'a', 0xff, b'b']), "a\u{FFFD}b");
    }
}
