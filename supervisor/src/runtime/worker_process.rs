//! A worker's process as the supervisor started it (bwrap, or the worker itself on the host), the leader of its own
//! process group, and killed with that group.
//!
//! Killed alone, bwrap can leave its sandbox's first process behind for good: that child waits on an eventfd for
//! bwrap to write its uid map, before it asks to die with its parent or leaves the group (`--new-session`), and an
//! eventfd gives no end of file (containers/bubblewrap#633). A spare sandbox stopped as `mcp serve` exited left
//! one in CI, holding the test's stderr open, so the test waited for it until it was killed by hand. Until the child
//! leaves, it is in bwrap's process group, so SIGKILL goes to the group. Later, the sandbox has its own session and
//! dies with its parent, its cgroups or its closed socket, as before.
//!
//! The group is signalled only while its leader has not been reaped: a reaped leader's pid may name another group.

use std::process::ExitStatus;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::process_spawn::Child;

/// A started worker process, leader of its own process group; the group is killed when this is killed or dropped.
pub(crate) struct WorkerProcess {
    child: Child,
}

impl WorkerProcess {
    /// Takes charge of `child`, which [`super::process_spawn::spawn`] started as the leader of a new process group.
    pub(crate) fn new(child: Child) -> WorkerProcess {
        WorkerProcess { child }
    }

    /// Its exit status, if it has exited.
    pub(crate) fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        self.child.try_wait()
    }

    /// Waits for it to exit.
    pub(crate) async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        self.child.wait().await
    }

    /// Sends SIGKILL to its process group, and to it.
    pub(crate) fn start_kill(&mut self) {
        self.kill_group();
        let _ = self.child.start_kill();
    }

    /// Kills its process group and waits for it to exit.
    pub(crate) async fn kill(&mut self) {
        self.start_kill();
        let _ = self.child.wait().await;
    }

    fn kill_group(&self) {
        // `id` is None once the leader was reaped; until then its pid (the group's id) is not reused.
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

impl Drop for WorkerProcess {
    /// A worker dropped unkilled (a start given up, a runtime dropped) takes its group with it; the child, dropped
    /// next, reaps the leader.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill_group();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, AsRawFd, OwnedFd};
    use std::time::{Duration, Instant};

    /// Starts bwrap with `--userns-block-fd`, so that it stops before it writes the uid map while its child waits
    /// for it: the window in which bwrap killed alone leaves the child behind. Returns bwrap, the child's pid (from
    /// `--info-fd`) and the end that would let bwrap go on.
    async fn bwrap_held_before_its_uid_map() -> Option<(Child, i32, OwnedFd)> {
        if std::process::Command::new("bwrap")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("bwrap is not installed; skipped");
            return None;
        }
        let (block_read, block_write) = nix::unistd::pipe().unwrap();
        let (info_read, info_write) = nix::unistd::pipe().unwrap();
        let mut command = crate::runtime::process_spawn::ProcessSpec::new(
            crate::sandbox::find_bwrap().expect("bwrap in PATH"),
        );
        for arg in [
            "--unshare-user",
            "--unshare-pid",
            "--die-with-parent",
            "--userns-block-fd",
            &block_read.as_raw_fd().to_string(),
            "--info-fd",
            &info_write.as_raw_fd().to_string(),
            "--ro-bind",
            "/",
            "/",
            "true",
        ] {
            command.arg(arg);
        }
        let null = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/null")
            .unwrap();
        let stdio = crate::runtime::process_spawn::Stdio {
            stdin: null.as_fd(),
            stdout: null.as_fd(),
        };
        let child = crate::runtime::process_spawn::spawn(
            &command,
            stdio,
            &[block_read.as_fd(), info_write.as_fd()],
        )
        .unwrap();
        drop((block_read, info_write));
        // bwrap writes the child's pid, then blocks on the other pipe.
        let mut info = String::new();
        let mut file = std::fs::File::from(info_read);
        let deadline = Instant::now() + Duration::from_secs(5);
        while !info.contains('}') && Instant::now() < deadline {
            let mut buf = [0u8; 256];
            let n = std::io::Read::read(&mut file, &mut buf).unwrap();
            if n == 0 {
                break;
            }
            info.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
        let pid = serde_json::from_str::<serde_json::Value>(&info)
            .ok()
            .and_then(|v| v["child-pid"].as_i64())
            .and_then(|p| i32::try_from(p).ok())
            .unwrap_or_else(|| panic!("no child pid in bwrap's info: {info:?}"));
        Some((child, pid, block_write))
    }

    /// Kills bwrap's child if a test leaves it behind, so that a failure does not leave it waiting forever.
    struct Reap(i32);

    impl Drop for Reap {
        fn drop(&mut self) {
            let comm =
                std::fs::read_to_string(format!("/proc/{}/comm", self.0)).unwrap_or_default();
            if alive(self.0) && comm.trim() == "bwrap" {
                let _ = nix::sys::signal::kill(Pid::from_raw(self.0), Signal::SIGKILL);
            }
        }
    }

    fn alive(pid: i32) -> bool {
        // A zombie is gone for this purpose: it holds nothing open.
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            !s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    }

    async fn gone_within(pid: i32, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while alive(pid) {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        true
    }

    #[tokio::test]
    async fn killing_a_worker_process_kills_the_sandbox_child_bwrap_left_waiting_for_its_uid_map() {
        let Some((child, inner, _held)) = bwrap_held_before_its_uid_map().await else {
            return;
        };
        let _reap = Reap(inner);
        assert!(alive(inner), "bwrap's child is not there to be left behind");
        let mut worker = WorkerProcess::new(child);
        worker.kill().await;
        assert!(
            gone_within(inner, Duration::from_secs(2)).await,
            "bwrap's child {inner} outlived the worker process"
        );
    }

    #[tokio::test]
    async fn dropping_a_worker_process_kills_the_sandbox_child_bwrap_left_waiting_for_its_uid_map()
    {
        let Some((child, inner, _held)) = bwrap_held_before_its_uid_map().await else {
            return;
        };
        let _reap = Reap(inner);
        assert!(alive(inner), "bwrap's child is not there to be left behind");
        drop(WorkerProcess::new(child));
        assert!(
            gone_within(inner, Duration::from_secs(2)).await,
            "bwrap's child {inner} outlived the dropped worker process"
        );
    }
}
