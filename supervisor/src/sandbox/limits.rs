//! Resource limits of a confined worker and everything it starts.
//!
//! Where the supervisor may create cgroups (v1 `pids`/`memory`/`cpu` hierarchies, or v2 with those controllers
//! enabled), each worker gets its own cgroup with `pids.max`, a memory limit and a CPU quota, joined before bwrap
//! starts. rlimits are set in any case: `RLIMIT_AS` per process as a memory backstop and `RLIMIT_CORE` 0. rlimits
//! alone cannot stop a fork storm of root processes (the kernel exempts root from `RLIMIT_NPROC`), hence the
//! cgroup. Which limits were applied is reported by [`Limits::describe`].

use std::ffi::CString;
use std::path::{Path, PathBuf};

/// Processes (and threads) a worker's cgroup may hold.
pub const PIDS_MAX: u64 = 512;

/// The limits to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// CPU cores.
    pub cpu: u32,
    /// Memory in MiB.
    pub memory_mb: u64,
}

/// Cgroups created for one worker; removed when dropped (after the worker has exited).
#[derive(Debug)]
pub struct Limits {
    dirs: Vec<PathBuf>,
    procs: Vec<CString>,
    memory_bytes: u64,
}

impl Limits {
    /// Creates this worker's cgroups where possible.
    pub fn create(session_id: &str, budget: Budget) -> Limits {
        let memory_bytes = budget.memory_mb.saturating_mul(1024 * 1024);
        let mut limits = Limits {
            dirs: Vec::new(),
            procs: Vec::new(),
            memory_bytes,
        };
        let name = format!("service-rs-{session_id}");
        let quota = u64::from(budget.cpu.max(1)) * 100_000;
        for (controller, base) in own_cgroups() {
            let files: Vec<(&str, String)> = match controller.as_str() {
                "pids" => vec![("pids.max", PIDS_MAX.to_string())],
                "memory" => vec![("memory.limit_in_bytes", memory_bytes.to_string())],
                "cpu" => vec![
                    ("cpu.cfs_period_us", "100000".into()),
                    ("cpu.cfs_quota_us", quota.to_string()),
                ],
                "" => vec![
                    ("pids.max", PIDS_MAX.to_string()),
                    ("memory.max", memory_bytes.to_string()),
                    ("cpu.max", format!("{quota} 100000")),
                ],
                _ => continue,
            };
            let dir = base.join(&name);
            if std::fs::create_dir(&dir).is_err() && !dir.is_dir() {
                continue;
            }
            // v2: keep whichever controllers are enabled; v1: all files must be written.
            let written = files
                .iter()
                .filter(|(f, v)| std::fs::write(dir.join(f), v).is_ok())
                .count();
            let useful = if controller.is_empty() {
                written > 0
            } else {
                written == files.len()
            };
            match (
                useful,
                CString::new(dir.join("cgroup.procs").as_os_str().as_encoded_bytes()),
            ) {
                (true, Ok(procs)) => {
                    limits.procs.push(procs);
                    limits.dirs.push(dir);
                }
                _ => {
                    let _ = std::fs::remove_dir(&dir);
                }
            }
        }
        limits
    }

    /// What is enforced, for logs and docs.
    pub fn describe(&self) -> String {
        let groups: Vec<String> = self.dirs.iter().map(|d| d.display().to_string()).collect();
        if groups.is_empty() {
            format!(
                "rlimits only (address space {} bytes); no cgroup could be created",
                self.memory_bytes
            )
        } else {
            format!("cgroups {} and rlimits", groups.join(", "))
        }
    }

    /// Runs in the forked child before exec: joins the cgroups and sets the rlimits. Only async-signal-safe calls
    /// (open, write, close, setrlimit) on memory prepared before the fork.
    pub fn apply_in_child(&self) -> std::io::Result<()> {
        use nix::fcntl::{open, OFlag};
        use nix::sys::resource::{setrlimit, Resource};
        use nix::sys::stat::Mode;
        for procs in &self.procs {
            let fd = open(
                procs.as_c_str(),
                OFlag::O_WRONLY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )?;
            nix::unistd::write(&fd, b"0")?;
        }
        setrlimit(Resource::RLIMIT_AS, self.memory_bytes, self.memory_bytes)?;
        setrlimit(Resource::RLIMIT_CORE, 0, 0)?;
        Ok(())
    }
}

impl Drop for Limits {
    fn drop(&mut self) {
        for dir in &self.dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// This process's cgroup directory per controller: v1 entries by controller name, the v2 one with an empty name.
fn own_cgroups() -> Vec<(String, PathBuf)> {
    let Ok(text) = std::fs::read_to_string("/proc/self/cgroup") else {
        return Vec::new();
    };
    let root = Path::new("/sys/fs/cgroup");
    let mut out = Vec::new();
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let rel = path.trim_start_matches('/');
        if controllers.is_empty() {
            if root.join("cgroup.controllers").is_file() {
                out.push((String::new(), root.join(rel)));
            }
            continue;
        }
        for c in controllers.split(',') {
            let mount = [root.join(c), root.join(controllers)]
                .into_iter()
                .find(|m| m.is_dir());
            if let Some(mount) = mount {
                out.push((c.to_string(), mount.join(rel)));
            }
        }
    }
    out
}
