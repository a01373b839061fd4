//! Reaping what a worker inherits when it is pid 1 of its sandbox.
//!
//! bwrap starts the worker as the sandbox's pid 1 (`--as-pid-1`), so an idle session is two processes (bwrap's
//! monitor and the worker), not three. The price is init's duty: a process whose parent dies is handed to the
//! worker. Tokio reaps the children the worker spawned, and only those; the others are a command's shell whose
//! reaper was killed (an interrupt, a time-out) before the shell, which `PR_SET_PDEATHSIG` then kills. Left
//! unreaped, each would hold a pid of the session's `pids` cgroup until the session ends.
//!
//! The worker tells them apart without keeping a list: every process it spawns lives in the worker's own pid
//! namespace, and an orphaned shell lives in a namespace below it (it was pid 1 of its command's namespace), so
//! its `NSpid` has more than one entry. Only zombies of that kind are reaped; the worker's own children stay for
//! tokio to wait on.

use std::path::Path;

use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// Starts reaping inherited zombies on every `SIGCHLD`, when this process is pid 1 of its namespace.
pub fn start() {
    if std::process::id() != 1 {
        return;
    }
    let Ok(mut sigchld) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
    else {
        return;
    };
    tokio::spawn(async move {
        while sigchld.recv().await.is_some() {
            reap_inherited(Path::new("/proc"));
        }
    });
}

/// Reaps every zombie child of this process that it did not spawn itself; returns how many.
pub fn reap_inherited(proc: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(proc) else {
        return 0;
    };
    let own = std::process::id().to_string();
    let mut reaped = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        if is_inherited_zombie(&status, &own) {
            // WNOHANG: a pid that was reused or reaped meanwhile is no longer ours to wait for.
            if waitpid(Pid::from_raw(pid), Some(WaitPidFlag::WNOHANG)).is_ok() {
                reaped += 1;
            }
        }
    }
    reaped
}

/// Whether a `/proc/<pid>/status` describes a zombie child of `parent` from a pid namespace below ours.
fn is_inherited_zombie(status: &str, parent: &str) -> bool {
    let field = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
            .map(str::trim)
    };
    let zombie = field("State").is_some_and(|s| s.starts_with('Z'));
    let ours = field("PPid") == Some(parent);
    let nested = field("NSpid").is_some_and(|s| s.split_whitespace().count() > 1);
    zombie && ours && nested
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(state: &str, ppid: u32, nspid: &str) -> String {
        format!("Name:\tbash\nState:\t{state}\nTgid:\t7\nPid:\t7\nPPid:\t{ppid}\nNSpid:\t{nspid}\n")
    }

    #[test]
    fn an_orphaned_shell_from_a_nested_namespace_is_reaped() {
        assert!(is_inherited_zombie(&status("Z (zombie)", 1, "7\t1"), "1"));
    }

    #[test]
    fn the_workers_own_children_are_left_for_tokio() {
        // A reaper the worker spawned: same namespace, so one NSpid entry, zombie or not.
        assert!(!is_inherited_zombie(&status("Z (zombie)", 1, "7"), "1"));
        assert!(!is_inherited_zombie(
            &status("S (sleeping)", 1, "7\t1"),
            "1"
        ));
        assert!(!is_inherited_zombie(&status("Z (zombie)", 5, "7\t1"), "1"));
    }
}
