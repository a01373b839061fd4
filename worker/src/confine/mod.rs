//! Confinement of every tool process, applied between fork and exec of the command's shell.
//!
//! The worker shares its sandbox with the commands it runs, so those commands are the first attacker it meets.
//! Three layers keep them off the worker:
//! - the worker is not dumpable (set by the binary's hardening before anything runs), which stops `ptrace`,
//!   `pidfd_getfd` and `/proc/<pid>/{mem,fd}` from a sibling process of the same user;
//! - [`seccomp`]: tool processes cannot call `ptrace`, `process_vm_*`, `pidfd_*`, `kcmp` or the keyring;
//! - one pid namespace per command: the command's shell is pid 1 of a namespace of its own, so when it exits the
//!   kernel kills everything it started, `setsid` and double-forked daemons included. A namespace needs a user
//!   namespace of its own inside the sandbox; in a sandbox the command is uid and gid [`COMMAND_UID`] there, mapped
//!   onto the worker's (the sandbox's root, so the same host user), and gets no capabilities (the bounding and
//!   ambient sets are emptied before exec). On the host a command keeps its own uid.
//! - one IPC namespace per command, for the same reason: System V shared memory, semaphores and message queues and
//!   POSIX message queues outlive the process that made them, so in the sandbox's namespace they would be state
//!   that no file and no process shows. In the command's own, they end with it, as its processes do, and a command
//!   cannot reach another's or an MCP server's. What a command leaves for later is a file.
//!
//! The runner's handle on a command is a small reaper process: the child of the worker that made the namespaces,
//! waits for the shell and exits with its status (or re-raises the signal that killed it). Killing the reaper kills
//! the shell (`PR_SET_PDEATHSIG`), and the shell's death empties the namespace.

pub mod seccomp;

use std::ffi::CString;
use std::sync::OnceLock;

use nix::libc;
use seccompiler::BpfProgram;

/// A sandboxed command's uid and gid in its own user namespace, mapped onto the worker's (the sandbox's root).
pub const COMMAND_UID: u32 = 1000;

/// Everything the pre-exec hook needs, made before fork: after fork only async-signal-safe calls are allowed, so
/// nothing in the hook allocates.
struct Prepared {
    filter: BpfProgram,
    uid_map: CString,
    gid_map: CString,
}

fn prepared() -> Result<&'static Prepared, String> {
    static PREPARED: OnceLock<Result<Prepared, String>> = OnceLock::new();
    PREPARED
        .get_or_init(|| {
            let filter = seccomp::tool_filter(strictness() == Strictness::Landlock)
                .map_err(|e| e.to_string())?;
            // SAFETY: getuid/getgid cannot fail.
            let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
            // In a sandbox the worker is its namespace's root, and a command is uid 1000 of its own; on the host a
            // command keeps its uid.
            let inside = match strictness() {
                Strictness::Required => |_: u32| COMMAND_UID,
                Strictness::BestEffort | Strictness::Landlock => |id: u32| id,
            };
            let map =
                |id: u32| CString::new(format!("{} {id} 1", inside(id))).map_err(|e| e.to_string());
            Ok(Prepared {
                filter,
                uid_map: map(uid)?,
                gid_map: map(gid)?,
            })
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// How strictly a command is confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strictness {
    /// In a sandbox: a namespace that cannot be made is an error, and the command does not start.
    Required,
    /// On the host (`danger_full_access`): the namespace is made where the host allows it, else skipped.
    BestEffort,
    /// Under Landlock (no namespaces, see the supervisor's `sandbox::landlock`): no namespace is made, since
    /// containers refuse them, and the command may not make an `AF_UNIX` socket, which Landlock does not confine.
    Landlock,
}

/// Adds the confinement to `command`'s pre-exec hooks. Fails when the seccomp filter cannot be built.
pub fn confine(
    command: &mut tokio::process::Command,
    strictness: Strictness,
) -> Result<(), String> {
    let prep = prepared()?;
    // SAFETY: the hook makes only async-signal-safe system calls (unshare, open, write, close, fork, waitpid,
    // prctl, seccomp, kill, _exit) on data prepared before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || in_child(prep, strictness));
    }
    Ok(())
}

/// Runs in the forked child, before exec.
fn in_child(prep: &Prepared, strictness: Strictness) -> std::io::Result<()> {
    // SAFETY: see `confine`.
    unsafe {
        if strictness == Strictness::BestEffort {
            // The worker is not dumpable (`hardening`), so its `/proc/self` files are root's: a worker that is not
            // root could not write the new namespace's uid_map. On the host that is every user's worker; the
            // command is dumpable from its exec on anyway, and until then runs only this hook.
            libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
        }
        if strictness == Strictness::Landlock {
            // Nothing to unshare: the domain the worker runs in confines the command as it is.
        } else if libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWIPC) == 0
        {
            map_ids(prep)?;
            // Not dumpable again: the reaper forked next is a copy of the worker's memory, and the command, of
            // the same user, must not read it through /proc.
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            become_reaper_of_pid_one()?;
            // From here we are the command's shell, pid 1 of its namespace.
            drop_capabilities();
        } else if strictness == Strictness::Required {
            return Err(std::io::Error::last_os_error());
        }
        if seccompiler::apply_filter(&prep.filter).is_err() {
            return Err(std::io::Error::other("cannot apply the seccomp filter"));
        }
    }
    Ok(())
}

/// Maps our uid and gid onto themselves in the new user namespace, so files keep their owner.
unsafe fn map_ids(prep: &Prepared) -> std::io::Result<()> {
    write_file(c"/proc/self/setgroups", b"deny")?;
    write_file(c"/proc/self/uid_map", prep.uid_map.as_bytes())?;
    write_file(c"/proc/self/gid_map", prep.gid_map.as_bytes())
}

unsafe fn write_file(path: &std::ffi::CStr, data: &[u8]) -> std::io::Result<()> {
    let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let written = libc::write(fd, data.as_ptr().cast(), data.len());
    libc::close(fd);
    if written != data.len() as isize {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Forks the namespace's pid 1. The parent becomes the reaper and never returns; the child returns and goes on
/// to exec the command.
unsafe fn become_reaper_of_pid_one() -> std::io::Result<()> {
    match libc::fork() {
        -1 => Err(std::io::Error::last_os_error()),
        0 => {
            // Die with the reaper, so killing the runner's handle ends the whole namespace. (The reaper is outside
            // our namespace, so getppid() says 0 and cannot tell whether it died before this line; if it did, the
            // runner's kill of the process group, which we share, still reaches us.)
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        }
        shell => {
            // The reaper holds no descriptor, so pipes and the spawn's status pipe see only the shell's copies.
            libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
            let mut status = 0;
            loop {
                let r = libc::waitpid(shell, &mut status, 0);
                if r == shell {
                    break;
                }
                if r == -1 && *libc::__errno_location() != libc::EINTR {
                    libc::_exit(127);
                }
            }
            if libc::WIFSIGNALED(status) {
                let sig = libc::WTERMSIG(status);
                libc::signal(sig, libc::SIG_DFL);
                libc::kill(libc::getpid(), sig);
                libc::_exit(128 + sig);
            }
            libc::_exit(libc::WEXITSTATUS(status))
        }
    }
}

/// Empties the capability bounding set, so a shell that is uid 0 in its namespace gets no capability at exec.
unsafe fn drop_capabilities() {
    for cap in 0..64 {
        libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0);
    }
    libc::prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
        0,
        0,
        0,
    );
}

static STRICTNESS: OnceLock<Strictness> = OnceLock::new();

/// Sets how strictly this worker confines its commands, once, from its configuration.
pub fn set_strictness(strictness: Strictness) {
    let _ = STRICTNESS.set(strictness);
}

/// How strictly commands are confined: [`Strictness::Required`] unless the worker was told it runs on the host.
pub fn strictness() -> Strictness {
    STRICTNESS.get().copied().unwrap_or(Strictness::Required)
}
