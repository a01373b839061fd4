//! Resource limits of a confined worker and everything it starts.
//!
//! Where the supervisor may create cgroups (v1 `pids`/`memory`/`cpu` hierarchies, or v2 with those controllers
//! enabled), each worker gets its own cgroup with `pids.max`, a memory limit and a CPU quota, and where v1 mounts
//! `cpuacct` apart from `cpu`, a `cpuacct` cgroup that counts its CPU time ([`CpuCounter`]). `RLIMIT_CORE` is 0 in
//! any case; `RLIMIT_AS` is the memory backstop only where no memory cgroup could be made: it limits address space,
//! not memory, and runtimes that reserve large ranges up front fail under it (Node's V8 aborted with "Failed to
//! reserve virtual memory for CodeRange" under the default 512 MiB, so an MCP server from npm could not start).
//! rlimits alone cannot stop a fork storm of root
//! processes (the kernel exempts root from `RLIMIT_NPROC`), hence the cgroup. Which limits were applied is reported
//! by [`Limits::describe`].
//!
//! The cgroups are made and their limits written while bwrap starts ([`Limits::prepare`]). On cgroup v1 the worker
//! then moves itself in: the supervisor sends it a descriptor of each cgroup's `tasks` file over its socket
//! ([`Limits::handles`]), and before any other thread starts, before its hello, it writes `0` into each. Moving
//! a process by its pid takes the kernel's global threadgroup lock, whose first taker waits for an RCU grace period
//! (5-15 ms on the bench machine, against 0.25 ms when another move came just before); a thread moving itself skips
//! that lock (0.06 ms). The supervisor does not take the worker's word for it: once the worker has connected (its
//! pid comes from the socket's peer credentials), it checks the move and makes any that was not made, by pid
//! ([`Limits::enter`]), before it hands the worker any configuration. On v2, which has no `tasks` file, that
//! move by pid is the only one; [`warm_up`] starts its grace period early there, on a thread of its own (and in a
//! `run`, 10 ms in, see [`warm_up_after`]), so the worker's move finds it over or under way.
//!
//! The worker gets its configuration only once it is inside its limits: the configuration starts its MCP servers,
//! and a process forked before the move would stay outside the session's cgroups (a bundle's MCP server could then
//! fork past `pids.max`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

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

/// One worker's limits, and the cgroups made for it; those are removed when this is dropped (after the worker has
/// exited).
#[derive(Debug)]
pub struct Limits {
    name: String,
    budget: Budget,
    dirs: Mutex<Vec<PathBuf>>,
    /// Whether one of `dirs` limits memory.
    memory_cgroup: AtomicBool,
    /// [`Limits::prepare`] has run.
    prepared: std::sync::Once,
    /// The rlimits were set in the sandbox's first process before it ran ([`Limits::spawn_rlimits`]), so
    /// [`Limits::enter`] leaves them.
    rlimits_inherited: AtomicBool,
}

impl Limits {
    /// The limits for the worker of `session_id`; nothing is created until [`Limits::prepare`].
    pub fn new(session_id: &str, budget: Budget) -> Limits {
        Limits {
            name: format!("service-rs-{session_id}"),
            budget,
            dirs: Mutex::new(Vec::new()),
            memory_cgroup: AtomicBool::new(false),
            prepared: std::sync::Once::new(),
            rlimits_inherited: AtomicBool::new(false),
        }
    }

    /// The rlimits the worker needs, for the process that becomes its sandbox to set on itself before it runs
    /// bwrap, which passes them on: no core dumps, and a bound on the address space where no cgroup bounds memory.
    /// For a sandbox that runs as another user than the supervisor, which may not set a limit on another user's
    /// process without `CAP_SYS_RESOURCE` (which a container's root often lacks). Makes the cgroups first, to know
    /// about memory; [`Limits::enter`] then sets no rlimit.
    pub fn spawn_rlimits(&self) -> Vec<(nix::libc::__rlimit_resource_t, u64)> {
        self.prepare();
        self.rlimits_inherited.store(true, Ordering::Relaxed);
        let mut limits = vec![(nix::libc::RLIMIT_CORE, 0)];
        if !self.memory_cgroup.load(Ordering::Relaxed) {
            limits.push((nix::libc::RLIMIT_AS, self.memory_bytes()));
        }
        limits
    }

    fn memory_bytes(&self) -> u64 {
        self.budget.memory_mb.saturating_mul(1024 * 1024)
    }

    /// Creates the cgroups where possible and writes their limits, once. Blocking; a cgroup that cannot be made or
    /// limited is left out (rlimits still apply).
    pub fn prepare(&self) {
        self.prepared.call_once(|| self.make());
    }

    fn make(&self) {
        let memory_bytes = self.memory_bytes();
        let quota = u64::from(self.budget.cpu.max(1)) * 100_000;
        let mut made = Vec::new();
        for (controller, base) in own_cgroups() {
            let files: Vec<(&str, String)> = match controller.as_str() {
                "pids" => vec![("pids.max", PIDS_MAX.to_string())],
                "memory" => vec![("memory.limit_in_bytes", memory_bytes.to_string())],
                "cpu" => vec![
                    ("cpu.cfs_period_us", "100000".into()),
                    ("cpu.cfs_quota_us", quota.to_string()),
                ],
                // No limit: it counts the CPU time a turn's usage reports (v1 hierarchies where it is not
                // mounted with `cpu`).
                "cpuacct" => Vec::new(),
                "" => vec![
                    ("pids.max", PIDS_MAX.to_string()),
                    ("memory.max", memory_bytes.to_string()),
                    ("cpu.max", format!("{quota} 100000")),
                ],
                _ => continue,
            };
            let dir = base.join(&self.name);
            // `cpu` and `cpuacct` mounted together are one directory.
            if made.contains(&dir) {
                continue;
            }
            if std::fs::create_dir(&dir).is_err() && !dir.is_dir() {
                continue;
            }
            // v2: keep whichever controllers are enabled; v1: all files must be written.
            let written: Vec<&str> = files
                .iter()
                .filter(|(f, v)| std::fs::write(dir.join(f), v).is_ok())
                .map(|(f, _)| *f)
                .collect();
            let useful = if controller.is_empty() {
                !written.is_empty()
            } else {
                written.len() == files.len()
            };
            if useful {
                if written.iter().any(|f| f.starts_with("memory.")) {
                    self.memory_cgroup.store(true, Ordering::Relaxed);
                }
                made.push(dir);
            } else {
                let _ = std::fs::remove_dir(&dir);
            }
        }
        if let Ok(mut dirs) = self.dirs.lock() {
            dirs.extend(made);
        }
    }

    /// The `tasks` file of each cgroup v1 made here, opened for the worker to move itself (see
    /// `service_worker::conn::enter_cgroups`). A worker holding them can only move its own threads into its own
    /// cgroups: a pid written there names a process of the writer's pid namespace (the sandbox's), and a file gives
    /// no way to its directory or to other cgroups. v2 has no `tasks` file; [`Limits::enter`] moves the worker there.
    pub fn handles(&self) -> Vec<std::fs::File> {
        self.dirs()
            .iter()
            .filter_map(|dir| {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("tasks"))
                    .ok()
            })
            .collect()
    }

    /// Makes sure process `pid` is in every cgroup [`Limits::prepare`] made, moving it into those it has not moved
    /// itself into, and sets its rlimits. Blocking. A cgroup counts as entered when its `tasks` lists `pid` and,
    /// read after that, the process has one thread: a thread made later is made inside, and no thread can leave.
    pub fn enter(&self, pid: u32) -> std::io::Result<()> {
        let dirs = self.dirs();
        let listed: Vec<bool> = dirs
            .iter()
            .map(|dir| lists(&dir.join("tasks"), pid))
            .collect();
        let alone = listed.contains(&true) && threads(pid) == Some(1);
        for (dir, listed) in dirs.iter().zip(listed) {
            if !(listed && alone) {
                std::fs::write(dir.join("cgroup.procs"), pid.to_string())?;
            }
        }
        if self.rlimits_inherited.load(Ordering::Relaxed) {
            return Ok(());
        }
        if !self.memory_cgroup.load(Ordering::Relaxed) {
            set_rlimit(pid, nix::libc::RLIMIT_AS, self.memory_bytes())?;
        }
        set_rlimit(pid, nix::libc::RLIMIT_CORE, 0)
    }

    /// Removes the cgroups once the worker's processes have left them, trying for up to `within`. bwrap's own exit
    /// comes before the kernel has reaped the processes of its pid namespace, and a cgroup with a process in it
    /// cannot be removed: dropping the limits right after the worker's exit left every session's cgroups behind.
    pub async fn release(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let busy = {
                let Ok(mut dirs) = self.dirs.lock() else {
                    return;
                };
                dirs.retain(|dir| std::fs::remove_dir(dir).is_err() && dir.exists());
                !dirs.is_empty()
            };
            if !busy || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The cgroups made so far.
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.dirs.lock().map(|d| d.clone()).unwrap_or_default()
    }

    /// What is enforced, for logs and docs.
    pub fn describe(&self) -> String {
        let dirs = self.dirs.lock().map(|d| d.clone()).unwrap_or_default();
        let groups: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        if groups.is_empty() {
            format!(
                "rlimits only (address space {} bytes); no cgroup could be created",
                self.memory_bytes()
            )
        } else {
            let rlimits = if self.memory_cgroup.load(Ordering::Relaxed) {
                "no core dumps"
            } else {
                "rlimits (address space and no core dumps)"
            };
            format!("cgroups {} and {rlimits}", groups.join(", "))
        }
    }
}

/// Whether every cgroup [`Limits::prepare`] makes on this host is v1, where a worker moves itself in without the
/// global lock: then nothing needs [`warm_up`].
pub fn workers_move_themselves() -> bool {
    static ALL_V1: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ALL_V1.get_or_init(|| {
        own_cgroups()
            .iter()
            .all(|(controller, _)| !controller.is_empty())
    })
}

/// Keeps the kernel's cgroup migration lock warm, on a thread of its own, until the guard is dropped or `at_most`
/// has passed. Call it after making the cgroups: a migration waits for the grace period holding the cgroup mutex,
/// which `mkdir` in a cgroup hierarchy needs too (measured: the mkdirs then took 12-14 ms instead of 0.1 ms).
/// Every 2 ms this process rewrites its own pid into its own cgroup (of the first hierarchy it belongs to), which
/// takes the lock and changes nothing. The first write waits out the RCU grace period; the next ones
/// keep the lock from going back to its idle state, which would make the worker's move wait a whole period again.
/// Failure only means the move will wait.
///
/// One thread serves every guard alive at once: with a thread per worker start, 16 sessions starting together
/// made 16 threads each migrating the whole multi-threaded server every 2 ms, 3% of all CPU on the scale bench's
/// cold turns, for a lock one of them already kept warm.
pub fn warm_up(at_most: Duration) -> WarmUp {
    warm_up_after(Duration::ZERO, at_most)
}

/// [`warm_up`], with its first write `delay` from now: for a process that may well end before it needs the lock.
/// Until then the thread only sleeps, which does not hold up the process's exit, as a write waiting out the grace
/// period would.
pub fn warm_up_after(delay: Duration, at_most: Duration) -> WarmUp {
    let now = Instant::now();
    let (from, until) = (now + delay, now + at_most);
    let mut state = warmer();
    state.holders += 1;
    state.until = Some(state.until.map_or(until, |u| u.max(until)));
    state.from = Some(state.from.map_or(from, |f| f.min(from)));
    if !state.running && !state.unavailable {
        state.running = std::thread::Builder::new()
            .name("cgroup-warm-up".into())
            .spawn(keep_warm)
            .is_ok();
    }
    WarmUp(())
}

/// Time between two writes of the warm-up thread.
const WARM_EVERY: Duration = Duration::from_millis(2);

/// What the one warm-up thread serves.
struct Warmer {
    /// Guards alive.
    holders: usize,
    /// The latest `at_most` of those guards.
    until: Option<Instant>,
    /// The earliest first write any of them asked for.
    from: Option<Instant>,
    /// Whether the thread runs.
    running: bool,
    /// Set when this process has no cgroup it can write to: no thread is started again.
    unavailable: bool,
}

fn warmer() -> std::sync::MutexGuard<'static, Warmer> {
    static WARMER: Mutex<Warmer> = Mutex::new(Warmer {
        holders: 0,
        until: None,
        from: None,
        running: false,
        unavailable: false,
    });
    // The state stays consistent across a panic (plain counters), so a poisoned lock is still usable.
    WARMER.lock().unwrap_or_else(|e| e.into_inner())
}

/// The warm-up thread: writes until no guard is left or the latest deadline has passed.
fn keep_warm() {
    let procs = own_cgroups()
        .into_iter()
        .next()
        .map(|(_, dir)| dir.join("cgroup.procs"));
    let pid = std::process::id().to_string();
    let mut failed = procs.is_none();
    loop {
        let early = {
            let mut state = warmer();
            let now = Instant::now();
            let over = state.until.is_none_or(|u| now >= u);
            if failed || state.holders == 0 || over {
                state.running = false;
                state.until = None;
                state.from = None;
                state.unavailable |= failed;
                return;
            }
            state
                .from
                .and_then(|f| f.checked_duration_since(now))
                .filter(|d| !d.is_zero())
        };
        if let Some(early) = early {
            std::thread::sleep(early.min(WARM_EVERY));
            continue;
        }
        failed = procs
            .as_ref()
            .is_none_or(|procs| std::fs::write(procs, &pid).is_err());
        #[cfg(test)]
        tests::WRITES.fetch_add(1, Ordering::Relaxed);
        if !failed {
            std::thread::sleep(WARM_EVERY);
        }
    }
}

/// Ends its share of [`warm_up`] when dropped.
pub struct WarmUp(());

impl Drop for WarmUp {
    fn drop(&mut self) {
        let mut state = warmer();
        state.holders = state.holders.saturating_sub(1);
    }
}

/// Age after which an empty `service-rs-*` cgroup counts as left behind: a younger one may belong to a worker
/// another supervisor is starting right now (its cgroups are made while bwrap starts, before the worker enters).
const STALE_AFTER: Duration = Duration::from_secs(60);

/// Removes the cgroups that supervisors killed outright could not remove (every worker of theirs leaves its
/// cgroups): any empty `service-rs-*` cgroup beside ours older than [`STALE_AFTER`]. Once per process, on a
/// thread of its own; a cgroup with a process in it cannot be removed, so a live worker's never is.
pub fn sweep_stale() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("cgroup-sweep".into())
            .spawn(|| {
                for (_, base) in own_cgroups() {
                    let Ok(entries) = std::fs::read_dir(&base) else {
                        continue;
                    };
                    for entry in entries.flatten() {
                        let ours = entry
                            .file_name()
                            .to_string_lossy()
                            .starts_with("service-rs-");
                        let stale = entry
                            .metadata()
                            .and_then(|m| m.modified())
                            .ok()
                            .and_then(|t| t.elapsed().ok())
                            .is_some_and(|age| age > STALE_AFTER);
                        if ours && stale {
                            let _ = std::fs::remove_dir(entry.path());
                        }
                    }
                }
            });
    });
}

/// Has `dirs` (worker cgroups) removed once their processes are gone, by a child forked for it that outlives this
/// process: for a process about to exit without waiting for its workers (a one-shot `run`). The child tries for
/// about 2 s; what it cannot remove, the next `serve` does. A fork and no exec: starting a binary would cost more
/// than the wait it saves.
pub fn release_after_exit(dirs: &[PathBuf]) {
    use std::os::unix::ffi::OsStrExt;
    let paths: Vec<std::ffi::CString> = dirs
        .iter()
        .filter_map(|d| std::ffi::CString::new(d.as_os_str().as_bytes()).ok())
        .collect();
    if paths.is_empty() {
        return;
    }
    let mut left = vec![true; paths.len()];
    // SAFETY: after the fork the child only makes async-signal-safe system calls on memory prepared before it
    // (`paths`, `left`), allocates nothing, takes no lock and leaves with `_exit`.
    if let Ok(nix::unistd::ForkResult::Child) = unsafe { nix::unistd::fork() } {
        unsafe { remove_in_child(&paths, &mut left) }
    }
}

/// The forked child of [`release_after_exit`]: its own session (a terminal's Ctrl-C is not for it), none of the
/// parent's descriptors (a shell reading the parent's output must see it end), then `rmdir` every 2 ms until done.
unsafe fn remove_in_child(paths: &[std::ffi::CString], left: &mut [bool]) -> ! {
    use nix::libc;
    libc::setsid();
    libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32);
    let pause = libc::timespec {
        tv_sec: 0,
        tv_nsec: 2_000_000,
    };
    for _ in 0..1000 {
        let mut busy = false;
        for (path, left) in paths.iter().zip(left.iter_mut()) {
            if *left {
                let gone = libc::rmdir(path.as_ptr()) == 0
                    || nix::errno::Errno::last() != nix::errno::Errno::EBUSY;
                *left = !gone;
                busy |= !gone;
            }
        }
        if !busy {
            break;
        }
        libc::nanosleep(&pause, std::ptr::null_mut());
    }
    libc::_exit(0)
}

/// Sets both limits of `resource` of process `pid` to `value`.
fn set_rlimit(
    pid: u32,
    resource: nix::libc::__rlimit_resource_t,
    value: u64,
) -> std::io::Result<()> {
    let limit = nix::libc::rlimit {
        rlim_cur: value,
        rlim_max: value,
    };
    let pid =
        nix::libc::pid_t::try_from(pid).map_err(|_| std::io::Error::other("pid out of range"))?;
    // SAFETY: prlimit only reads `limit`, which lives across the call; the old-limit pointer is null, so nothing is
    // written.
    let rc = unsafe { nix::libc::prlimit(pid, resource, &limit, std::ptr::null_mut()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

impl Drop for Limits {
    fn drop(&mut self) {
        let dirs = self.dirs.get_mut().map(std::mem::take).unwrap_or_default();
        for dir in dirs {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// Whether the cgroup file `tasks` lists thread `tid` (false when there is no such file, as in v2).
fn lists(tasks: &Path, tid: u32) -> bool {
    let tid = tid.to_string();
    std::fs::read_to_string(tasks).is_ok_and(|text| text.lines().any(|l| l.trim() == tid))
}

/// The number of threads of process `pid`, from `/proc`.
fn threads(pid: u32) -> Option<u32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|n| n.trim().parse().ok())
}

/// This process's cgroup directory per controller: v1 entries by controller name, the v2 one with an empty name.
/// The file of a worker's cgroups that counts their CPU time, found once when the worker starts, read at each turn's
/// end.
#[derive(Debug, Clone)]
pub enum CpuCounter {
    /// v1's `cpuacct.usage`: nanoseconds.
    V1(PathBuf),
    /// v2's `cpu.stat`: its `usage_usec` line.
    V2(PathBuf),
}

impl CpuCounter {
    /// The counter among the cgroups `dirs`; None when none counts CPU.
    pub fn find(dirs: &[PathBuf]) -> Option<CpuCounter> {
        dirs.iter().find_map(|dir| {
            let v1 = dir.join("cpuacct.usage");
            if v1.is_file() {
                return Some(CpuCounter::V1(v1));
            }
            // A v1 `cpu` cgroup has a `cpu.stat` too, without `usage_usec`.
            let v2 = dir.join("cpu.stat");
            let counts = std::fs::read_to_string(&v2).is_ok_and(|s| s.contains("usage_usec "));
            counts.then_some(CpuCounter::V2(v2))
        })
    }

    /// The CPU time spent so far; None once the cgroup is gone.
    pub fn read(&self) -> Option<Duration> {
        match self {
            CpuCounter::V1(path) => std::fs::read_to_string(path)
                .ok()?
                .trim()
                .parse()
                .ok()
                .map(Duration::from_nanos),
            CpuCounter::V2(path) => std::fs::read_to_string(path)
                .ok()?
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|us| us.trim().parse().ok())
                .map(Duration::from_micros),
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Writes of the warm-up thread, made or tried, by every test of this binary.
    pub(super) static WRITES: AtomicUsize = AtomicUsize::new(0);

    /// The tests of the one warm-up thread, one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    fn warm_up_threads() -> usize {
        std::fs::read_dir("/proc/self/task")
            .map(|tasks| {
                tasks
                    .flatten()
                    .filter(|t| {
                        std::fs::read_to_string(t.path().join("comm"))
                            .is_ok_and(|c| c.trim() == "cgroup-warm-up")
                    })
                    .count()
            })
            .unwrap_or(0)
    }

    #[test]
    fn guards_alive_together_share_one_warm_up_thread_which_ends_after_the_last() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let guards: Vec<WarmUp> = (0..3).map(|_| warm_up(Duration::from_secs(5))).collect();
        std::thread::sleep(Duration::from_millis(20));
        let writable = !warmer().unavailable;
        assert_eq!(warm_up_threads(), usize::from(writable));
        drop(guards);
        // Another test of this binary may hold a guard of its own; the thread then rightly lives on.
        let deadline = Instant::now() + Duration::from_secs(2);
        while warm_up_threads() > 0 && warmer().holders == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        if warmer().holders == 0 {
            assert_eq!(warm_up_threads(), 0);
        }
    }

    #[test]
    fn a_delayed_warm_up_moves_nothing_before_its_delay_and_stops_with_its_guard() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let before = WRITES.load(Ordering::Relaxed);
        let guard = warm_up_after(Duration::from_millis(500), Duration::from_secs(5));
        std::thread::sleep(Duration::from_millis(50));
        // No guard of another test asked for an earlier start (the earliest start is kept while a guard lives).
        if warmer().from.is_some_and(|f| f > Instant::now()) {
            assert_eq!(WRITES.load(Ordering::Relaxed), before);
        }
        drop(guard);
        let deadline = Instant::now() + Duration::from_secs(2);
        while warmer().running && warmer().holders == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        if warmer().holders == 0 {
            assert!(!warmer().running, "the thread outlived its last guard");
        }
    }
}
