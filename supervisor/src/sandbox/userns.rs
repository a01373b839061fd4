//! The user namespace of sandboxes that run as another host user than the supervisor (see [`super::identity`]).
//!
//! bwrap started as that user with `--unshare-user` would map the sandbox's root onto it, but its setup (the bind
//! mounts) would then resolve every host path with that user's rights: bwrap 0.8 re-resolves even a `--bind-fd`
//! descriptor by its path, and the store (0700) or `/root` are closed to it. So the supervisor makes the
//! namespace: a process running as the user unshares it (the user owns it), and the supervisor, as root, writes its
//! maps: the namespace's root is the user, and its uid and gid 1 are host root. bwrap, started as the user, joins
//! it (`--userns`). Its setup holds every capability there, which reaches root's files because root is mapped,
//! and drops them all but `CAP_SETFCAP` before the worker starts. The worker runs as the namespace's root, that is
//! as the user, with no new privileges (bwrap sets `NO_NEW_PRIVS`: a setuid file of root's gives no uid 1, and no
//! file capability applies), so root's files are as closed to it as to any other process of that user; nothing in
//! the sandbox holds `CAP_SETUID` to become uid 1.
//!
//! One namespace per user, made at the first start and kept by the launcher: each sandbox of that user joins it
//! and makes its own pid, mount, network, IPC and UTS namespaces inside it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};

use nix::sys::signal::{SigSet, SigmaskHow};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{ForkResult, Gid, Uid};

use super::identity::HostId;

/// A new user namespace owned by `id`, whose root is `id` and whose 1 is host root: a descriptor for `--userns`.
pub fn make(id: HostId) -> io::Result<OwnedFd> {
    make_then(id, |_| ())
}

/// [`make`], calling `meanwhile` with the child's pid once the namespace is mapped, while the child still lives.
fn make_then(id: HostId, meanwhile: impl FnOnce(nix::unistd::Pid)) -> io::Result<OwnedFd> {
    // The child says when its namespace exists on `ready`, and lives until `hold` closes.
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    let (hold_r, hold_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
    // The child runs no program: an exec, and its search of PATH, would almost double the cost (0.86 against
    // 0.47 ms), which each one-shot `run` that starts a sandbox pays.
    // SAFETY: the child calls only async-signal-safe system calls and allocates nothing (see `unshare_as`).
    let child = match unsafe { nix::unistd::fork() }? {
        ForkResult::Child => {
            drop((ready_r, hold_w));
            unshare_as(id, ready_w, hold_r)
        }
        ForkResult::Parent { child } => child,
    };
    drop((ready_w, hold_r));
    let made = announced(&ready_r).then(|| {
        let proc = std::path::PathBuf::from(format!("/proc/{child}"));
        std::fs::write(proc.join("setgroups"), "deny")
            .and_then(|()| std::fs::write(proc.join("uid_map"), format!("0 {} 1\n1 0 1\n", id.uid)))
            .and_then(|()| std::fs::write(proc.join("gid_map"), format!("0 {} 1\n1 0 1\n", id.gid)))
            .and_then(|()| {
                std::fs::File::options()
                    .read(true)
                    .open(proc.join("ns/user"))
                    .map(OwnedFd::from)
            })
    });
    if matches!(made, Some(Ok(_))) {
        meanwhile(child);
    }
    drop(hold_w);
    let status = waitpid(child, None);
    made.unwrap_or_else(|| {
        Err(match status {
            Ok(WaitStatus::Exited(_, code)) if code > 0 => io::Error::from_raw_os_error(code),
            _ => io::Error::other("the process making it ended first"),
        })
    })
}

/// Whether the child said that its namespace exists; when it did not, its exit code is the errno of the step that
/// failed.
fn announced(ready: &OwnedFd) -> bool {
    let mut byte = [0u8; 1];
    loop {
        match nix::unistd::read(ready, &mut byte) {
            Ok(1) => return true,
            Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) | Err(_) => return false,
        }
    }
}

/// Closes every descriptor from 3 on but `keep`, in the child. A fork copies every descriptor of the process,
/// close-on-exec or not, and this child runs no program: it would hold another thread's `hold` write end while it
/// lives, so that thread's child would wait for it, and if that child holds this one's, both wait forever (seen
/// with two runtimes in one process making namespaces at once).
fn close_all_but(keep: [RawFd; 2]) -> nix::Result<()> {
    let (low, high) = (keep[0].min(keep[1]), keep[0].max(keep[1]));
    let mut first = 3;
    for fd in [low, high] {
        if fd > first {
            close_range(first, fd - 1)?;
        }
        first = first.max(fd + 1);
    }
    close_range(first, RawFd::MAX)
}

/// `close_range(2)` over `first..=last`: one system call, async-signal-safe.
fn close_range(first: RawFd, last: RawFd) -> nix::Result<()> {
    // SAFETY: close_range takes plain integers and only closes descriptors; none of the ones it closes is used
    // again by this child.
    let done =
        unsafe { nix::libc::syscall(nix::libc::SYS_close_range, first as u32, last as u32, 0u32) };
    match nix::errno::Errno::result(done) {
        // Before Linux 5.9 the descriptors stay, which is safe where one launcher makes the namespaces one at a
        // time, as in every command of service-rs.
        Ok(_) | Err(nix::errno::Errno::ENOSYS) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The child: becomes `id`, unshares a user namespace (which `id` then owns), says so, and waits for `hold` to
/// close. Signals are blocked: the handlers are the supervisor's, and must not run in a copy of it. It stays not
/// dumpable, as the supervisor is (`hardening`).
fn unshare_as(id: HostId, ready: OwnedFd, hold: OwnedFd) -> ! {
    let step = (|| {
        close_all_but([ready.as_raw_fd(), hold.as_raw_fd()])?;
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::all()), None)?;
        nix::unistd::setgroups(&[])?;
        nix::unistd::setgid(Gid::from_raw(id.gid))?;
        nix::unistd::setuid(Uid::from_raw(id.uid))?;
        // A change of uid makes a process dumpable where `fs.suid_dumpable` is 1, and this one holds a copy of the
        // supervisor's memory (its keys): closed again to that user's `ptrace` and `/proc/<pid>/mem`.
        nix::sys::prctl::set_dumpable(false)?;
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER)?;
        nix::unistd::write(&ready, &[1])?;
        // Every signal is blocked, so the read ends only when `hold` closes.
        nix::unistd::read(&hold, &mut [0u8; 1])?;
        Ok::<(), nix::errno::Errno>(())
    })();
    let code = match step {
        Ok(()) => 0,
        Err(e) => e as i32,
    };
    // SAFETY: `_exit` runs no destructor or `atexit` handler of the supervisor, whose copy this is.
    unsafe { nix::libc::_exit(code) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;

    /// `ioctl(NS_GET_OWNER_UID)`: the uid that owns a user namespace.
    const NS_GET_OWNER_UID: nix::libc::c_ulong = 0xb704;

    #[test]
    fn a_namespace_made_for_a_user_is_its_own_and_leaves_no_process_behind() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("not root; skipped");
            return;
        }
        let ns = make(HostId {
            uid: 65534,
            gid: 65534,
        })
        .unwrap();
        let ours = std::fs::metadata("/proc/self/ns/user").unwrap();
        let made = std::fs::File::from(ns.try_clone().unwrap())
            .metadata()
            .unwrap();
        assert_ne!(
            made.ino(),
            ours.ino(),
            "the descriptor is of our own namespace"
        );
        let mut owner: nix::libc::uid_t = u32::MAX;
        // SAFETY: NS_GET_OWNER_UID writes one uid_t through the pointer.
        let got = unsafe { nix::libc::ioctl(ns.as_raw_fd(), NS_GET_OWNER_UID, &mut owner) };
        assert_eq!(
            got,
            0,
            "not a user namespace: {}",
            io::Error::last_os_error()
        );
        assert_eq!(owner, 65534, "the user does not own its namespace");
        let tid = nix::unistd::gettid();
        let children = std::fs::read_to_string(format!("/proc/self/task/{tid}/children")).unwrap();
        assert_eq!(
            children.trim(),
            "",
            "the process that made it is still there"
        );
        assert!(
            nix::unistd::Uid::effective().is_root(),
            "the supervisor's own ids changed"
        );
    }

    /// Kills every child of this process's threads: a hung helper blocks every other signal, and holds the test
    /// run's output open, so the run would hang rather than fail.
    fn kill_children() {
        let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
            return;
        };
        for task in tasks.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for pid in children.split_whitespace().filter_map(|p| p.parse().ok()) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }

    #[test]
    fn namespaces_made_at_once_on_several_threads_all_arrive() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("not root; skipped");
            return;
        }
        let (done, arrived) = std::sync::mpsc::channel();
        let given_up = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let threads = 8;
        for _ in 0..threads {
            let (done, given_up) = (done.clone(), given_up.clone());
            std::thread::spawn(move || {
                for _ in 0..25 {
                    if given_up.load(std::sync::atomic::Ordering::SeqCst) {
                        return;
                    }
                    let made = make(HostId {
                        uid: 65534,
                        gid: 65534,
                    });
                    if done
                        .send(made.map(drop).map_err(|e| e.to_string()))
                        .is_err()
                    {
                        return;
                    }
                }
            });
        }
        for n in 0..threads * 25 {
            match arrived.recv_timeout(std::time::Duration::from_secs(20)) {
                Ok(made) => made.unwrap(),
                // The helpers hung, each holding the others' pipes; the threads stay blocked in `waitpid`.
                Err(e) => {
                    // No thread makes another once its hung helper is killed.
                    given_up.store(true, std::sync::atomic::Ordering::SeqCst);
                    kill_children();
                    panic!("{n} namespaces arrived, then none for 20 s: {e}")
                }
            }
        }
    }

    #[test]
    fn the_helper_running_as_the_sandbox_user_holds_none_of_the_supervisors_descriptors() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("not root; skipped");
            return;
        }
        // A file the supervisor has open, as it has its store's and its keys'.
        let secret = tempfile::NamedTempFile::new().unwrap();
        let mut held = None;
        make_then(
            HostId {
                uid: 65534,
                gid: 65534,
            },
            |child| {
                let fds = std::fs::read_dir(format!("/proc/{child}/fd")).unwrap();
                held = Some(
                    fds.flatten()
                        .filter(|fd| {
                            fd.file_name()
                                .to_str()
                                .is_some_and(|n| n.parse::<u32>().is_ok_and(|n| n > 2))
                        })
                        .map(|fd| std::fs::read_link(fd.path()).unwrap_or_default())
                        .collect::<Vec<_>>(),
                );
            },
        )
        .unwrap();
        let held = held.unwrap();
        assert!(
            !held.iter().any(|link| link == secret.path()),
            "the helper holds the supervisor's open file: {held:?}"
        );
        assert_eq!(
            held.len(),
            2,
            "the helper holds more than its two pipes: {held:?}"
        );
    }

    #[test]
    fn the_sandbox_user_cannot_read_the_helpers_copy_of_the_supervisor() {
        if !nix::unistd::Uid::effective().is_root() {
            eprintln!("not root; skipped");
            return;
        }
        let id = HostId {
            uid: 65534,
            gid: 65534,
        };
        let mut seen = None;
        make_then(id, |child| {
            // A process of the sandbox user goes for the helper, which runs as that user too and holds the
            // supervisor's environment and memory: its variables, its memory, its descriptors.
            let attack = format!(
                "p=/proc/{child}; test -d $p && echo alive; \\
                 head -c 64 $p/environ 2>/dev/null | grep -q . && echo environ; \\
                 (exec 3<$p/mem) 2>/dev/null && echo mem; \\
                 ls $p/fd 2>/dev/null | grep -q . && echo fd; \\
                 grep -q . $p/maps 2>/dev/null && echo maps; true"
            );
            let out = std::process::Command::new("/bin/sh")
                .args(["-c", &attack])
                .uid(id.uid)
                .gid(id.gid)
                .output()
                .unwrap();
            seen = Some(String::from_utf8_lossy(&out.stdout).into_owned());
        })
        .unwrap();
        assert_eq!(
            seen.as_deref(),
            Some("alive\n"),
            "the sandbox user got into the helper"
        );
    }
}
