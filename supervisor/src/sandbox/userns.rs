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
use std::os::fd::OwnedFd;
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use super::identity::HostId;

/// A new user namespace owned by `id`, whose root is `id` and whose 1 is host root: a descriptor for `--userns`.
pub fn make(id: HostId) -> io::Result<OwnedFd> {
    // A process that waits on its stdin, as the user, in a namespace of its own.
    let mut command = std::process::Command::new("cat");
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .uid(id.uid)
        .gid(id.gid);
    // SAFETY: unshare(2) is a system call, async-signal-safe, and touches no memory of the parent.
    unsafe {
        command.pre_exec(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWUSER).map_err(io::Error::from)
        });
    }
    let mut child = command.spawn()?;
    let proc = std::path::PathBuf::from(format!("/proc/{}", child.id()));
    let made = std::fs::write(proc.join("setgroups"), "deny")
        .and_then(|()| std::fs::write(proc.join("uid_map"), format!("0 {} 1\n1 0 1\n", id.uid)))
        .and_then(|()| std::fs::write(proc.join("gid_map"), format!("0 {} 1\n1 0 1\n", id.gid)))
        .and_then(|()| {
            std::fs::File::options()
                .read(true)
                .open(proc.join("ns/user"))
                .map(OwnedFd::from)
        });
    drop(child.stdin.take());
    let _ = child.kill();
    let _ = child.wait();
    made
}
