//! Starting a worker's first process (bwrap, or the worker on the host) without copying the supervisor.
//!
//! The standard library forks whenever a command changes its user or runs code before `exec`, as a root
//! supervisor's sandboxes need (their own uid, rlimits). A fork copies the supervisor's page tables while it holds
//! its memory map's lock, which stalls every other thread that faults meanwhile, and each page the supervisor writes
//! afterwards is copied once more. In `serve` with 300 sessions that was a median 0.87 ms per sandbox start inside
//! `clone` alone, one start at a time. Here the child is made as `posix_spawn` makes it: `clone(CLONE_VM |
//! CLONE_VFORK)`, so it borrows the supervisor's memory, on a stack of its own, until its `execve`, while the thread
//! that spawned it waits. The child makes only raw system calls on data prepared before the clone: no allocation,
//! no lock, and `setuid` and its kin as system calls, since glibc's wrappers would signal the supervisor's threads.
//!
//! The child is watched through a pidfd: its exit makes the descriptor readable, and `waitid` on it reaps only it.

use std::ffi::{CString, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;

use nix::libc;
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus};
use tokio::io::unix::AsyncFd;

/// A process to start.
#[derive(Debug, Clone, Default)]
pub struct ProcessSpec {
    /// The executable, by path.
    pub program: PathBuf,
    /// The arguments after the program's name.
    pub args: Vec<OsString>,
    /// The whole environment: nothing else is passed on.
    pub env: Vec<(OsString, OsString)>,
    /// The working directory.
    pub cwd: PathBuf,
    /// The uid and gid to run as, with no supplementary groups; None keeps the supervisor's.
    pub user: Option<(u32, u32)>,
    /// rlimits set (soft and hard) before it runs.
    pub rlimits: Vec<(libc::__rlimit_resource_t, u64)>,
    /// SIGKILL when the thread that started it exits.
    pub die_with_parent: bool,
    /// Confinement it enters after its change of user and before `execve` (the Landlock backend).
    pub confinement: Option<std::sync::Arc<Confinement>>,
}

/// A Landlock rule set and a seccomp filter, made by the supervisor, that a child applies to itself before it
/// runs anything: `no_new_privs`, then the rule set, then the filter.
pub struct Confinement {
    /// The rule set's descriptor (see `landlock_restrict_self(2)`).
    pub ruleset: OwnedFd,
    /// The compiled filter.
    pub filter: Vec<libc::sock_filter>,
}

impl std::fmt::Debug for Confinement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confinement")
            .field("ruleset", &self.ruleset)
            .field("filter_len", &self.filter.len())
            .finish()
    }
}

impl ProcessSpec {
    /// A process of `program` with no arguments, no environment, in `/`.
    pub fn new(program: impl Into<PathBuf>) -> ProcessSpec {
        ProcessSpec {
            program: program.into(),
            cwd: PathBuf::from("/"),
            ..ProcessSpec::default()
        }
    }

    /// Adds an argument.
    pub fn arg(&mut self, arg: impl Into<OsString>) -> &mut ProcessSpec {
        self.args.push(arg.into());
        self
    }

    /// Sets variable `name` (replacing an earlier value).
    pub fn env(
        &mut self,
        name: impl Into<OsString>,
        value: impl Into<OsString>,
    ) -> &mut ProcessSpec {
        let name = name.into();
        self.env.retain(|(n, _)| *n != name);
        self.env.push((name, value.into()));
        self
    }
}

/// Where the child's standard streams go; its stderr is the supervisor's.
pub struct Stdio<'a> {
    /// Its stdin.
    pub stdin: BorrowedFd<'a>,
    /// Its stdout.
    pub stdout: BorrowedFd<'a>,
}

/// Everything the child reads, made before the clone.
struct Prepared {
    program: CString,
    _argv: Vec<CString>,
    argv: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp: Vec<*const libc::c_char>,
    cwd: CString,
    user: Option<(libc::uid_t, libc::gid_t)>,
    rlimits: Vec<(libc::__rlimit_resource_t, libc::rlimit)>,
    die_with_parent: bool,
    /// The rule set's descriptor and the filter's program, when the child confines itself.
    confinement: Option<(RawFd, libc::sock_fprog)>,
    _confinement: Option<std::sync::Arc<Confinement>>,
    stdin: RawFd,
    stdout: RawFd,
    inherit: Vec<RawFd>,
}

fn c_string(bytes: &[u8], what: &str) -> std::io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{what} holds a NUL byte"),
        )
    })
}

fn null_terminated(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

impl Prepared {
    fn new(
        spec: &ProcessSpec,
        stdio: &Stdio<'_>,
        inherit: &[BorrowedFd<'_>],
    ) -> std::io::Result<Prepared> {
        let program = c_string(spec.program.as_os_str().as_bytes(), "the program's path")?;
        let argv: Vec<CString> = std::iter::once(Ok(program.clone()))
            .chain(
                spec.args
                    .iter()
                    .map(|a| c_string(a.as_bytes(), "an argument")),
            )
            .collect::<std::io::Result<_>>()?;
        let envp: Vec<CString> = spec
            .env
            .iter()
            .map(|(n, v)| {
                let mut pair = n.as_bytes().to_vec();
                pair.push(b'=');
                pair.extend_from_slice(v.as_bytes());
                c_string(&pair, "an environment variable")
            })
            .collect::<std::io::Result<_>>()?;
        Ok(Prepared {
            argv: null_terminated(&argv),
            envp: null_terminated(&envp),
            _argv: argv,
            _envp: envp,
            program,
            cwd: c_string(spec.cwd.as_os_str().as_bytes(), "the working directory")?,
            user: spec.user,
            rlimits: spec
                .rlimits
                .iter()
                .map(|&(r, v)| {
                    (
                        r,
                        libc::rlimit {
                            rlim_cur: v,
                            rlim_max: v,
                        },
                    )
                })
                .collect(),
            die_with_parent: spec.die_with_parent,
            confinement: spec.confinement.as_ref().map(|c| {
                (
                    c.ruleset.as_raw_fd(),
                    libc::sock_fprog {
                        len: c.filter.len() as libc::c_ushort,
                        filter: c.filter.as_ptr().cast_mut(),
                    },
                )
            }),
            _confinement: spec.confinement.clone(),
            stdin: stdio.stdin.as_raw_fd(),
            stdout: stdio.stdout.as_raw_fd(),
            inherit: inherit.iter().map(|fd| fd.as_raw_fd()).collect(),
        })
    }
}

/// The child's stack: it runs only [`in_child`], a few frames of system calls.
const CHILD_STACK: usize = 64 * 1024;

/// Starts `spec` as the leader of a new process group, with `stdio`, and with `inherit` open at their numbers
/// (every other descriptor of the supervisor is close-on-exec, and stays closed for it). Must run inside a tokio
/// runtime, which watches the child's exit.
///
/// The child's parent is the calling thread, not the process: `die_with_parent`, and bwrap's `--die-with-parent`
/// (which bwrap applies to itself), kill it when that thread exits. Call this from a thread that lives as long as
/// the child should, such as a runtime's worker; a thread of tokio's blocking pool exits after 10 s idle.
pub fn spawn(
    spec: &ProcessSpec,
    stdio: Stdio<'_>,
    inherit: &[BorrowedFd<'_>],
) -> std::io::Result<Child> {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let prepared = Prepared::new(spec, &stdio, inherit)?;
    let mut stack = vec![0u8; CHILD_STACK];
    let mut failed: libc::c_int = 0;
    let failed_at: *mut libc::c_int = &mut failed;
    // No handler of the supervisor's may run in the child, which shares its memory: every signal is blocked
    // across the clone, and the child resets every handler before it unblocks them.
    let mut mask = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut mask),
    )?;
    let flags = nix::sched::CloneFlags::CLONE_VM | nix::sched::CloneFlags::CLONE_VFORK;
    // SAFETY: with CLONE_VFORK this thread waits until the child has called execve or _exit, so `prepared`,
    // `stack` and `failed` outlive its use of them; the child only makes async-signal-safe system calls on them
    // (see `in_child`) and never returns into this function's frames.
    let cloned = unsafe {
        nix::sched::clone(
            Box::new(|| in_child(&prepared, failed_at)),
            &mut stack,
            flags,
            Some(libc::SIGCHLD),
        )
    };
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&mask), None);
    let pid = cloned?;
    // SAFETY: the child has exec'd or exited by now (CLONE_VFORK); nothing else writes `failed`.
    let errno = unsafe { std::ptr::read_volatile(failed_at) };
    if errno != 0 {
        let _ = nix::sys::wait::waitpid(pid, None);
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    // The child is ours and not reaped, so its pid names it until we wait for it.
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if fd < 0 {
        let e = std::io::Error::last_os_error();
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        let _ = nix::sys::wait::waitpid(pid, None);
        return Err(std::io::Error::other(format!(
            "cannot watch the new process (pidfd_open needs Linux 5.3): {e}"
        )));
    }
    // SAFETY: pidfd_open returned a new descriptor that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(fd as RawFd) };
    // SAFETY: the descriptor is owned by what is registered, and stays open with it.
    let pidfd = unsafe { AsyncFd::register_with_interest(pidfd, tokio::io::Interest::READABLE) }?;
    Ok(Child {
        pid: pid.as_raw() as u32,
        pidfd: Some(pidfd),
        status: None,
    })
}

/// The child between the clone and `execve`. Any failure is written to `failed` and ends it with status 127.
///
/// SAFETY (for the caller): runs on the clone's stack in the supervisor's memory, with every signal blocked.
fn in_child(p: &Prepared, failed: *mut libc::c_int) -> isize {
    // SAFETY: only system calls on memory prepared before the clone; `failed` is valid (see `spawn`).
    unsafe {
        let fail = || -> ! {
            *failed = *libc::__errno_location();
            if *failed == 0 {
                *failed = libc::EINVAL;
            }
            libc::_exit(127)
        };
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        for signal in 1..65 {
            // SIGKILL, SIGSTOP and glibc's own signals refuse; that is fine.
            libc::sigaction(signal, &default, std::ptr::null_mut());
        }
        if libc::setpgid(0, 0) != 0 {
            fail();
        }
        if p.die_with_parent
            && libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0
        {
            fail();
        }
        // A descriptor already at its place keeps close-on-exec through dup2: clear the flag instead.
        let place = |fd: RawFd, at: RawFd| match fd == at {
            true => libc::fcntl(at, libc::F_SETFD, 0) == 0,
            false => libc::dup2(fd, at) == at,
        };
        if !place(p.stdin, 0) || !place(p.stdout, 1) {
            fail();
        }
        for &fd in &p.inherit {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                fail();
            }
        }
        if libc::chdir(p.cwd.as_ptr()) != 0 {
            fail();
        }
        for (resource, limit) in &p.rlimits {
            if libc::setrlimit(*resource, limit) != 0 {
                fail();
            }
        }
        if let Some((uid, gid)) = p.user {
            // Raw system calls: they change this process only (glibc's wrappers would signal every thread of
            // the memory the child shares).
            if libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<libc::gid_t>()) != 0
                || libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
            {
                fail();
            }
        }
        if let Some((ruleset, filter)) = &p.confinement {
            // The order matters: both the rule set and the filter need `no_new_privs` from a process without
            // CAP_SYS_ADMIN, and the filter must not refuse the calls that come before it.
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(libc::SYS_landlock_restrict_self, *ruleset, 0u32) != 0
                || libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0u32,
                    filter as *const libc::sock_fprog,
                ) != 0
            {
                fail();
            }
            // The rule set's descriptor is close-on-exec: the worker does not keep it.
        }
        let none: libc::sigset_t = std::mem::zeroed();
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        libc::execve(p.program.as_ptr(), p.argv.as_ptr(), p.envp.as_ptr());
        fail()
    }
}

/// A started process, watched through its pidfd. Dropped before it was reaped, it is killed and reaped in the
/// background.
pub struct Child {
    pid: u32,
    pidfd: Option<AsyncFd<OwnedFd>>,
    status: Option<ExitStatus>,
}

impl Child {
    /// Its pid, until it has been reaped.
    pub fn id(&self) -> Option<u32> {
        self.status.is_none().then_some(self.pid)
    }

    /// Its exit status, if it has exited (reaping it).
    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        if self.status.is_none() {
            if let Some(fd) = &self.pidfd {
                self.status = reap(fd.get_ref().as_fd(), WaitPidFlag::WNOHANG)?;
            }
        }
        Ok(self.status)
    }

    /// Waits for it to exit.
    pub async fn wait(&mut self) -> std::io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let Some(fd) = &self.pidfd else {
            return Err(std::io::Error::other("the process is not watched"));
        };
        let status = exited(fd).await?;
        self.status = Some(status);
        Ok(status)
    }

    /// Sends it SIGKILL, unless it has been reaped.
    pub fn start_kill(&mut self) -> std::io::Result<()> {
        match (self.status, &self.pidfd) {
            (None, Some(fd)) => signal_kill(fd.get_ref().as_fd()),
            _ => Ok(()),
        }
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.status.is_some() {
            return;
        }
        let Some(fd) = self.pidfd.take() else {
            return;
        };
        let _ = signal_kill(fd.get_ref().as_fd());
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn(async move { exited(&fd).await })),
            Err(_) => {
                let fd = fd.into_inner();
                let _ = std::thread::Builder::new()
                    .name("reap".into())
                    .spawn(move || reap(fd.as_fd(), WaitPidFlag::empty()));
            }
        }
    }
}

/// Reaps the process of `pidfd` once it has exited: its pidfd becomes readable then.
async fn exited(pidfd: &AsyncFd<OwnedFd>) -> std::io::Result<ExitStatus> {
    loop {
        if let Some(status) = reap(pidfd.get_ref().as_fd(), WaitPidFlag::WNOHANG)? {
            return Ok(status);
        }
        pidfd.readable().await?.clear_ready();
    }
}

/// SIGKILL through the pidfd, which cannot name another process.
fn signal_kill(pidfd: BorrowedFd<'_>) -> std::io::Result<()> {
    // SAFETY: pidfd_send_signal takes a descriptor, a signal, a null siginfo and flags.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            libc::SIGKILL,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    match sent {
        0 => Ok(()),
        _ => match std::io::Error::last_os_error() {
            // Exited already, not yet reaped.
            e if e.raw_os_error() == Some(libc::ESRCH) => Ok(()),
            e => Err(e),
        },
    }
}

/// Reaps the process of `pidfd` if it has exited (or, without WNOHANG, once it has).
fn reap(pidfd: BorrowedFd<'_>, flags: WaitPidFlag) -> std::io::Result<Option<ExitStatus>> {
    loop {
        match nix::sys::wait::waitid(Id::PIDFd(pidfd), WaitPidFlag::WEXITED | flags) {
            Ok(WaitStatus::Exited(_, code)) => {
                return Ok(Some(ExitStatus::from_raw((code & 0xff) << 8)))
            }
            Ok(WaitStatus::Signaled(_, signal, core)) => {
                let core = if core { 0x80 } else { 0 };
                return Ok(Some(ExitStatus::from_raw(signal as i32 | core)));
            }
            Ok(_) => return Ok(None),
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stdio_null() -> (OwnedFd, OwnedFd) {
        let null = std::fs::File::open("/dev/null").unwrap();
        let out = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/null")
            .unwrap();
        (null.into(), out.into())
    }

    #[tokio::test]
    async fn a_spawned_process_gets_its_environment_and_the_inherited_descriptors_only() {
        let (stdin, _) = stdio_null();
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let kept = std::fs::File::open("/dev/null").unwrap();
        let (kept_fd, read_fd) = (kept.as_raw_fd(), read.as_raw_fd());
        let mut spec = ProcessSpec::new("/bin/sh");
        spec.arg("-c")
            .arg(format!(
                "echo \"$ONLY:$HOME:$(pwd)\"; [ -e /proc/self/fd/{kept_fd} ] && echo kept; \
                 [ -e /proc/self/fd/{read_fd} ] || echo closed"
            ))
            .env("ONLY", "this");
        spec.cwd = PathBuf::from("/tmp");
        let stdio = Stdio {
            stdin: stdin.as_fd(),
            stdout: write.as_fd(),
        };
        let mut child = spawn(&spec, stdio, &[kept.as_fd()]).unwrap();
        drop(write);
        let status = child.wait().await.unwrap();
        assert!(status.success(), "{status:?}");
        assert_eq!(child.id(), None, "a reaped child has no pid");
        let out = std::io::read_to_string(std::fs::File::from(read)).unwrap();
        assert_eq!(out, "this::/tmp\nkept\nclosed\n");
        let flags = nix::fcntl::fcntl(&kept, nix::fcntl::FcntlArg::F_GETFD).unwrap();
        assert_ne!(
            flags & libc::FD_CLOEXEC,
            0,
            "the inherited descriptor lost close-on-exec here"
        );
    }

    #[tokio::test]
    async fn a_process_spawned_by_root_for_another_user_has_only_that_users_ids_and_its_rlimits() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("not root; skipped");
            return;
        }
        let (stdin, _) = stdio_null();
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
        let mut spec = ProcessSpec::new("/bin/sh");
        spec.arg("-c")
            .arg("id -u; id -g; id -G; ulimit -c; ulimit -n");
        spec.user = Some((65534, 65534));
        spec.rlimits = vec![(libc::RLIMIT_CORE, 0), (libc::RLIMIT_NOFILE, 77)];
        let stdio = Stdio {
            stdin: stdin.as_fd(),
            stdout: write.as_fd(),
        };
        let mut child = spawn(&spec, stdio, &[]).unwrap();
        drop(write);
        assert!(child.wait().await.unwrap().success());
        let out = std::io::read_to_string(std::fs::File::from(read)).unwrap();
        assert_eq!(out, "65534\n65534\n65534\n0\n77\n");
        assert!(
            nix::unistd::Uid::effective().is_root(),
            "the supervisor's own ids changed"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn processes_spawned_at_the_same_time_inherit_only_their_own_descriptor() {
        const N: usize = 12;
        let pairs: Vec<_> = (0..N)
            .map(|_| std::os::unix::net::UnixStream::pair().unwrap())
            .collect();
        let numbers: Vec<RawFd> = pairs.iter().map(|(_, theirs)| theirs.as_raw_fd()).collect();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(N));
        let mut started = Vec::new();
        for (_, theirs) in pairs {
            let barrier = barrier.clone();
            let fd = theirs.as_raw_fd();
            started.push(tokio::task::spawn_blocking(move || {
                let (stdin, _) = stdio_null();
                let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap();
                let mut spec = ProcessSpec::new("/bin/sh");
                spec.arg("-c").arg("ls /proc/self/fd");
                barrier.wait();
                let stdio = Stdio {
                    stdin: stdin.as_fd(),
                    stdout: write.as_fd(),
                };
                let child = spawn(&spec, stdio, &[theirs.as_fd()]).unwrap();
                (fd, child, read)
            }));
        }
        for task in started {
            let (own, mut child, read) = task.await.unwrap();
            assert!(child.wait().await.unwrap().success());
            let listed: Vec<RawFd> = std::io::read_to_string(std::fs::File::from(read))
                .unwrap()
                .split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect();
            assert!(
                listed.contains(&own),
                "its own descriptor {own} is missing: {listed:?}"
            );
            let foreign: Vec<_> = numbers
                .iter()
                .filter(|n| **n != own && listed.contains(n))
                .collect();
            assert!(
                foreign.is_empty(),
                "inherited another process's socket: {foreign:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_missing_program_is_an_error_of_spawn() {
        let (stdin, stdout) = stdio_null();
        let spec = ProcessSpec::new("/nonexistent/program");
        let err = spawn(
            &spec,
            Stdio {
                stdin: stdin.as_fd(),
                stdout: stdout.as_fd(),
            },
            &[],
        )
        .err()
        .expect("spawned a missing program");
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    }

    #[tokio::test]
    async fn a_dropped_child_is_killed_and_its_status_reported_by_a_kill() {
        let (stdin, stdout) = stdio_null();
        let mut spec = ProcessSpec::new("/bin/sleep");
        spec.arg("30");
        let stdio = || Stdio {
            stdin: stdin.as_fd(),
            stdout: stdout.as_fd(),
        };
        let mut killed = spawn(&spec, stdio(), &[]).unwrap();
        assert_eq!(killed.try_wait().unwrap(), None);
        killed.start_kill().unwrap();
        let status = killed.wait().await.unwrap();
        assert_eq!(status.signal(), Some(libc::SIGKILL));

        let dropped = spawn(&spec, stdio(), &[]).unwrap();
        let pid = dropped.id().unwrap();
        drop(dropped);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while std::path::Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                std::time::Instant::now() < deadline,
                "the dropped child {pid} is still there"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }
}
