//! The bubblewrap command line: a pure function from a resolved profile and the session's paths to the argument
//! vector, so the whole vector can be checked in a test.
//!
//! Mount order (bwrap applies arguments in order, and a later mount may sit inside an earlier one):
//! 1. namespaces and lifecycle: `--die-with-parent --as-pid-1 --new-session --unshare-all --unshare-user --uid 0
//!    --gid 0 --cap-drop ALL --cap-add CAP_SETFCAP`. With `--as-pid-1` the worker is the sandbox's pid 1 and bwrap
//!    adds no init of its own, so a session is two processes; the worker reaps what it inherits
//!    (`service_worker::orphans`). The network namespace is always the sandbox's own (loopback only): sharing the
//!    host's would hand sandboxed code every loopback service of the host, this server's API among them. The worker
//!    is the namespace's uid [`SANDBOX_UID`] (0, the host user who started bwrap) with one capability,
//!    `CAP_SETFCAP`, and no new privileges (bwrap sets `NO_NEW_PRIVS`): it gives every command a user and pid
//!    namespace of its own, where the command is uid 1000 and has no capability. Both are needed to write that
//!    namespace's maps: a non-dumpable process can open its own `/proc/self/uid_map` only when it is its user
//!    namespace's root, and a map onto the parent's uid 0 needs `CAP_SETFCAP` when the namespace is made. As uid
//!    1000 of the sandbox's namespace, a worker of a supervisor run by a normal user could start no command. A
//!    sandbox that runs as another host user than the supervisor joins a namespace the supervisor made instead
//!    (`--userns FD` and every other namespace unshared, see [`super::userns`]);
//! 2. environment: `--clearenv` and the minimal variables;
//! 3. kernel filesystems: `/proc`, `/dev` with a tmpfs `/dev/shm`, a tmpfs `/tmp`;
//! 4. host system tools, as the profile resolved them (`/etc` as one snapshot bind, then the network files over it);
//! 5. the worker binary, read-only, at [`WORKER_EXE`];
//! 6. the bundle, read-only, at [`BUNDLE_DIR`] (by descriptor, see [`super::host_dir`]), the operator's hook
//!    scripts, read-only, at [`OPERATOR_HOOKS_DIR`] when the store has them, and the egress proxy's
//!    socket, read-only (connecting to a socket needs no write access to its mount), at [`crate::egress::SOCKET_IN_SANDBOX`] when the sandbox may reach hosts;
//! 7. the workspace at [`WORKSPACE_DIR`], read-only or read-write, by descriptor (`--ro-bind-fd`, `--bind-fd`:
//!    the directory opened without following a link is the one bound, see [`super::host_dir`]), then `--remount-ro /dev --remount-ro /`: the
//!    root and `/dev` bwrap made (tmpfs the sandbox user owns, holding the mount points and the symlinks) become
//!    read-only;
//! 8. `--chdir` into the workspace, then the worker command with its inherited socket descriptor (`--ipc-fd`):
//!    no host directory is bound for the IPC, so nothing host-backed is writable in `read_only`. Its cgroups come
//!    over that socket too (`--enter-cgroups`), as descriptors of their `tasks` files; no cgroup file is mounted.
//!
//! Anything not mounted does not exist inside: the host home, `$SERVICE_HOME`, other sessions, `/var`, `/root`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::profile::Mount;

/// The worker binary inside the sandbox.
pub const WORKER_EXE: &str = "/run/service/worker";
/// The bundle inside the sandbox.
pub const BUNDLE_DIR: &str = service_ipc::BUNDLE_IN_SANDBOX;
/// The operator's hook scripts inside the sandbox.
pub const OPERATOR_HOOKS_DIR: &str = "/operator-hooks";
/// The workspace inside the sandbox.
pub const WORKSPACE_DIR: &str = service_ipc::WORKSPACE_IN_SANDBOX;
/// The uid and gid of the worker in the sandbox's user namespace: the host user who started bwrap, mapped onto
/// the namespace's root (commands are uid 1000 in namespaces of their own, see `service_worker::confine`).
pub const SANDBOX_UID: &str = "0";
/// The worker's PATH inside the sandbox.
pub const SANDBOX_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// Host paths of one worker's sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPaths {
    /// The worker binary (`service-worker`, or `service-rs`).
    pub exe: PathBuf,
    /// The worker's inherited socket descriptor.
    pub ipc_fd: i32,
    /// The session or spare it serves, shown in process listings.
    pub label: String,
    /// Inherited descriptor of the bundle root (see [`super::host_dir`]).
    pub bundle_fd: i32,
    /// Inherited descriptor of the session's workspace (see [`super::host_dir`]).
    pub workspace_fd: i32,
    /// Inherited descriptor of the user namespace to join, when the sandbox runs as another host user than the
    /// supervisor (see [`super::userns`]); None: bwrap makes one whose root is the supervisor's user.
    pub userns_fd: Option<i32>,
    /// The egress proxy's socket, when the sandbox may reach hosts through it.
    pub egress: Option<PathBuf>,
    /// Inherited descriptor of the operator's hook scripts (`$SERVICE_HOME/hooks`), when that directory exists.
    pub operator_hooks_fd: Option<i32>,
}

/// What the sandbox allows beyond its mounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Permissions {
    /// Mount the workspace read-write.
    pub workspace_writable: bool,
}

fn push(args: &mut Vec<OsString>, items: &[&str]) {
    args.extend(items.iter().map(OsString::from));
}

fn push_mount(args: &mut Vec<OsString>, flag: &str, a: &Path, b: &Path) {
    args.push(flag.into());
    args.push(a.into());
    args.push(b.into());
}

fn push_fd_mount(args: &mut Vec<OsString>, flag: &str, fd: i32, dest: &str) {
    args.push(flag.into());
    args.push(fd.to_string().into());
    args.push(dest.into());
}

/// The bwrap arguments (without the `bwrap` program itself) that run the worker.
pub fn args(
    mounts: &[Mount],
    paths: &HostPaths,
    perms: Permissions,
    lang: &str,
    term: &str,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    push(
        &mut a,
        &["--die-with-parent", "--as-pid-1", "--new-session"],
    );
    match paths.userns_fd {
        None => push(&mut a, &["--unshare-all", "--unshare-user"]),
        // `--unshare-all` but for the user namespace, which is joined instead.
        Some(fd) => {
            a.push("--userns".into());
            a.push(fd.to_string().into());
            push(
                &mut a,
                &[
                    "--unshare-ipc",
                    "--unshare-pid",
                    "--unshare-net",
                    "--unshare-uts",
                    "--unshare-cgroup-try",
                ],
            );
        }
    }
    push(&mut a, &["--uid", SANDBOX_UID, "--gid", SANDBOX_UID]);
    push(&mut a, &["--cap-drop", "ALL", "--cap-add", "CAP_SETFCAP"]);
    push(
        &mut a,
        &[
            "--clearenv",
            "--setenv",
            "PATH",
            SANDBOX_PATH,
            "--setenv",
            "HOME",
            WORKSPACE_DIR,
        ],
    );
    push(
        &mut a,
        &["--setenv", "LANG", lang, "--setenv", "TERM", term],
    );
    // `/dev/shm` a tmpfs of its own, so that it stays writable when `/dev` is made read-only below.
    push(
        &mut a,
        &[
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm", "--tmpfs", "/tmp",
        ],
    );
    for m in mounts {
        match m {
            Mount::ReadOnly { src, dest } => push_mount(&mut a, "--ro-bind", src, dest),
            Mount::ReadWrite { src, dest } => push_mount(&mut a, "--bind", src, dest),
            Mount::Symlink { target, link } => push_mount(&mut a, "--symlink", target, link),
        }
    }
    push_mount(&mut a, "--ro-bind", &paths.exe, Path::new(WORKER_EXE));
    push_fd_mount(&mut a, "--ro-bind-fd", paths.bundle_fd, BUNDLE_DIR);
    if let Some(fd) = paths.operator_hooks_fd {
        push_fd_mount(&mut a, "--ro-bind-fd", fd, OPERATOR_HOOKS_DIR);
    }
    if let Some(socket) = &paths.egress {
        push_mount(
            &mut a,
            "--ro-bind",
            socket,
            Path::new(crate::egress::SOCKET_IN_SANDBOX),
        );
    }
    let ws_flag = if perms.workspace_writable {
        "--bind-fd"
    } else {
        "--ro-bind-fd"
    };
    push_fd_mount(&mut a, ws_flag, paths.workspace_fd, WORKSPACE_DIR);
    // bwrap's root and `/dev` are tmpfs owned by the sandbox user: left writable, sandboxed code could replace `/bin`,
    // `/lib64` (the dynamic loader of every later command, operator commands included) or `/dev/stdout`, or add
    // `/etc/ld.so.preload` where `/etc` is bound file by file. Read-only once everything is mounted on them; the
    // mounts keep their own modes (the device nodes, `/dev/shm`, `/tmp`, a writable workspace).
    push(&mut a, &["--remount-ro", "/dev", "--remount-ro", "/"]);
    push(
        &mut a,
        &[
            "--chdir",
            WORKSPACE_DIR,
            "--",
            WORKER_EXE,
            "worker",
            "--ipc-fd",
        ],
    );
    a.push(paths.ipc_fd.to_string().into());
    a.push("--label".into());
    a.push(paths.label.clone().into());
    // The supervisor always makes limits for a sandboxed worker, and hands their cgroups over (`spawn::start`).
    a.push(service_ipc::ENTER_CGROUPS_FLAG.into());
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn paths() -> HostPaths {
        HostPaths {
            exe: "/opt/bin/service-worker".into(),
            ipc_fd: 7,
            label: "s1".into(),
            bundle_fd: 8,
            workspace_fd: 9,
            userns_fd: None,
            egress: None,
            operator_hooks_fd: None,
        }
    }

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn read_only_without_network_gives_exactly_this_command_line() {
        let mounts = vec![
            Mount::ReadOnly {
                src: "/usr".into(),
                dest: "/usr".into(),
            },
            Mount::Symlink {
                target: "usr/bin".into(),
                link: "/bin".into(),
            },
            Mount::ReadOnly {
                src: "/run/systemd/resolve/stub-resolv.conf".into(),
                dest: "/etc/resolv.conf".into(),
            },
        ];
        let perms = Permissions {
            workspace_writable: false,
        };
        let expected: Vec<&str> = vec![
            "--die-with-parent",
            "--as-pid-1",
            "--new-session",
            "--unshare-all",
            "--unshare-user",
            "--uid",
            "0",
            "--gid",
            "0",
            "--cap-drop",
            "ALL",
            "--cap-add",
            "CAP_SETFCAP",
            "--clearenv",
            "--setenv",
            "PATH",
            SANDBOX_PATH,
            "--setenv",
            "HOME",
            "/workspace",
            "--setenv",
            "LANG",
            "C.UTF-8",
            "--setenv",
            "TERM",
            "dumb",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--tmpfs",
            "/dev/shm",
            "--tmpfs",
            "/tmp",
            "--ro-bind",
            "/usr",
            "/usr",
            "--symlink",
            "usr/bin",
            "/bin",
            "--ro-bind",
            "/run/systemd/resolve/stub-resolv.conf",
            "/etc/resolv.conf",
            "--ro-bind",
            "/opt/bin/service-worker",
            "/run/service/worker",
            "--ro-bind-fd",
            "8",
            "/bundle",
            "--ro-bind-fd",
            "9",
            "/workspace",
            "--remount-ro",
            "/dev",
            "--remount-ro",
            "/",
            "--chdir",
            "/workspace",
            "--",
            "/run/service/worker",
            "worker",
            "--ipc-fd",
            "7",
            "--label",
            "s1",
            "--enter-cgroups",
        ];
        assert_eq!(
            strings(args(&mounts, &paths(), perms, "C.UTF-8", "dumb")),
            expected
        );
    }

    #[test]
    fn the_operators_hook_scripts_are_bound_read_only_after_the_bundle() {
        let mut p = paths();
        p.operator_hooks_fd = Some(11);
        let perms = Permissions {
            workspace_writable: true,
        };
        let a = strings(args(&[], &p, perms, "C", "xterm"));
        let at = a.iter().position(|x| x == OPERATOR_HOOKS_DIR).unwrap();
        assert_eq!(a[at - 2..=at], ["--ro-bind-fd", "11", OPERATOR_HOOKS_DIR]);
        assert_eq!(a[at - 5..at - 2], ["--ro-bind-fd", "8", BUNDLE_DIR]);
    }

    #[test]
    fn another_host_user_joins_the_prepared_user_namespace_and_unshares_everything_else() {
        let mut p = paths();
        p.userns_fd = Some(5);
        let perms = Permissions {
            workspace_writable: true,
        };
        let a = strings(args(&[], &p, perms, "C", "xterm"));
        assert_eq!(
            &a[..18],
            [
                "--die-with-parent",
                "--as-pid-1",
                "--new-session",
                "--userns",
                "5",
                "--unshare-ipc",
                "--unshare-pid",
                "--unshare-net",
                "--unshare-uts",
                "--unshare-cgroup-try",
                "--uid",
                "0",
                "--gid",
                "0",
                "--cap-drop",
                "ALL",
                "--cap-add",
                "CAP_SETFCAP",
            ]
        );
        assert!(!a
            .iter()
            .any(|x| x == "--unshare-user" || x == "--unshare-all"));
    }

    #[test]
    fn workspace_write_binds_read_write_and_never_shares_the_network() {
        let perms = Permissions {
            workspace_writable: true,
        };
        let a = strings(args(&[], &paths(), perms, "C", "xterm"));
        assert_eq!(
            &a[..13],
            [
                "--die-with-parent",
                "--as-pid-1",
                "--new-session",
                "--unshare-all",
                "--unshare-user",
                "--uid",
                "0",
                "--gid",
                "0",
                "--cap-drop",
                "ALL",
                "--cap-add",
                "CAP_SETFCAP"
            ]
        );
        assert!(a.windows(3).any(|w| w == ["--bind-fd", "9", "/workspace"]));
        assert!(!a.iter().any(|x| x == "--bind" || x.contains("/home/u")));
    }
}
