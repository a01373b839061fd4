//! Confinement without namespaces: Landlock and seccomp, for hosts where bubblewrap cannot start (a container
//! under its engine's default seccomp profile, a kernel that restricts unprivileged user namespaces).
//!
//! The supervisor builds the rule set and the filter before the worker starts, and the worker's first process
//! applies both between its change of user and `execve` (see [`crate::runtime::process_spawn`]): the worker's
//! binary runs confined from its first instruction, and everything it starts inherits the domain. Which mechanism
//! enforces what:
//!
//! | What | Enforced by | What remains |
//! |---|---|---|
//! | Files: system directories and the worker's binary read and run, the bundle read, the workspace read or written as the mode says, a private temporary directory written | Landlock file rules (ABI 1; truncation ABI 3, device ioctls ABI 5) | paths are the host's, so a command sees where the workspace is; a `/tmp` shared with the host is not writable, `TMPDIR` points at the private one |
//! | The store, the supervisor's files, other sessions' workspaces, the home directory | nothing is granted there, so Landlock refuses every access, whoever owns the files | names are still resolved: a command can tell that a path exists |
//! | Other processes | Landlock (no ptrace or `/proc/<pid>/{mem,environ,fd}` outside the domain); signals scoped to the domain (ABI 6); a different uid than a root supervisor's | `/proc/<pid>/cmdline` and `stat` of the host's processes stay readable |
//! | Network, no hosts | seccomp: a socket of any family but `AF_UNIX` is refused (so no TCP, UDP, raw, netlink or vsock); Landlock refuses every TCP bind and connect (ABI 4) | none known |
//! | Network, through the egress proxy | the worker forwards a loopback listener the supervisor made to the proxy's socket; seccomp allows TCP sockets only (no UDP, raw, netlink or vsock); Landlock allows a TCP connect to the listener's port only, and no bind | Landlock matches ports, not addresses: a command can reach another address on that one port directly (a probe shows it) |
//! | Unix sockets | commands may not make an `AF_UNIX` socket (seccomp; pairs are allowed), so a socket of the host's, another session's proxy among them, is out of reach; abstract sockets are scoped to the domain (ABI 6) | the worker itself may connect, to reach the proxy |
//! | `io_uring` | seccomp refuses its set-up, since its requests would skip the socket filter | none |
//!
//! Lost against bubblewrap, and listed by `doctor`: no private `/tmp`, `/dev` or PID space; no per-command user,
//! PID or IPC namespaces (containers refuse them; the worker kills what escapes a command's process group
//! instead, see the worker's `leftovers`); the host's paths.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath,
    Ruleset, RulesetAttr, RulesetCreatedAttr, Scope, ABI,
};
use nix::libc;
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

use super::profile::Mount;

/// The ABI the rules are written for: file rights up to device ioctls (5), TCP rules (4), scopes (6).
const TARGET: ABI = ABI::V6;
/// The oldest ABI the backend runs on: TCP port rules are what keeps a command off the network.
pub const MINIMUM_ABI: i32 = 4;
/// The ABI from which signals and abstract sockets are scoped to the sandbox.
pub const SCOPED_ABI: i32 = 6;

/// Why a Landlock sandbox cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum LandlockError {
    /// The kernel's Landlock is missing, disabled or too old.
    #[error("{0}")]
    Unsupported(String),
    /// A rule could not be added or the filter built.
    #[error("cannot build the Landlock sandbox: {0}")]
    Build(String),
}

/// The kernel's Landlock ABI, or the error number of the version query.
fn kernel_abi() -> Result<i32, i32> {
    // SAFETY: the version query takes no attribute and returns a number or -1.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            1u32,
        )
    };
    match v {
        v if v > 0 => Ok(v as i32),
        _ => Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOSYS)),
    }
}

/// Whether this kernel can run the backend, or why not, with what to change.
pub fn available() -> Result<i32, LandlockError> {
    let abi = match kernel_abi() {
        Ok(abi) => abi,
        Err(errno) => return Err(LandlockError::Unsupported(absent(errno, &kernel_release()))),
    };
    if abi < MINIMUM_ABI {
        return Err(LandlockError::Unsupported(format!(
            "this kernel's Landlock ABI is {abi}, and the sandbox needs {MINIMUM_ABI} (Linux 6.7) for its network \
             rules"
        )));
    }
    Ok(abi)
}

const CALLS: &str = "landlock_create_ruleset, landlock_add_rule and landlock_restrict_self";

/// Why the version query failed with `errno` on kernel `release`. A kernel without Landlock and a seccomp profile
/// that refuses its calls both answer `ENOSYS` (Podman's and Docker's default for calls they do not list), so a
/// kernel recent enough to have it, under a filter, names the filter.
fn absent(errno: i32, release: &str) -> String {
    if errno == libc::EOPNOTSUPP {
        return "Landlock is built into this kernel but not enabled: add \"landlock\" to the lsm= boot parameter"
            .into();
    }
    let refused = format!(
        "the seccomp filter this process runs under (a container engine's profile) refuses Landlock's calls: allow \
         {CALLS} in it"
    );
    if errno != libc::ENOSYS {
        return refused;
    }
    let version: Vec<u32> = release
        .split(|c: char| !c.is_ascii_digit())
        .take(2)
        .filter_map(|n| n.parse().ok())
        .collect();
    // Landlock came with Linux 5.13; its network rules with 6.7.
    let has_landlock = version.as_slice() >= [5, 13].as_slice();
    if has_landlock && under_seccomp() {
        refused
    } else if has_landlock {
        format!(
            "this kernel ({release}) was built without Landlock: a kernel with CONFIG_SECURITY_LANDLOCK, Linux 6.7 \
             or later, has what the sandbox needs"
        )
    } else {
        format!("this kernel ({release}) has no Landlock: Linux 6.7 or later has what the sandbox needs")
    }
}

/// This kernel's release (`uname -r`).
fn kernel_release() -> String {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_string())
        .unwrap_or_else(|_| "of an unknown release".into())
}

/// Whether a seccomp filter confines this process (`Seccomp: 2` in its status).
fn under_seccomp() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .any(|l| l.strip_prefix("Seccomp:").is_some_and(|v| v.trim() == "2"))
    })
}

/// What one worker's sandbox may reach.
pub struct Policy<'a> {
    /// The system tools of its profile, read and run.
    pub mounts: &'a [Mount],
    /// The worker's binary.
    pub exe: &'a Path,
    /// The bundle, read (opened without following a link).
    pub bundle: std::os::fd::BorrowedFd<'a>,
    /// The operator's hook scripts, read and run.
    pub operator_hooks: Option<std::os::fd::BorrowedFd<'a>>,
    /// The workspace (opened without following a link).
    pub workspace: std::os::fd::BorrowedFd<'a>,
    /// Whether the workspace is writable.
    pub workspace_writable: bool,
    /// The sandbox's private temporary directory, writable.
    pub tmp: std::os::fd::BorrowedFd<'a>,
    /// The loopback port of the egress forwarder, the one TCP port it may connect to.
    pub egress_port: Option<u16>,
}

/// Device files every program expects to read and write.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

fn build_err(e: impl std::fmt::Display) -> LandlockError {
    LandlockError::Build(e.to_string())
}

/// The rule set of `policy`, as a descriptor the worker's first process restricts itself with.
pub fn ruleset(policy: &Policy<'_>, abi: i32) -> Result<OwnedFd, LandlockError> {
    let read = AccessFs::from_read(TARGET);
    let write = AccessFs::from_all(TARGET);
    let mut ruleset = Ruleset::default()
        // What is asked for must hold: a kernel that cannot enforce a right fails here, not silently.
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.handle_access(AccessNet::from_all(ABI::V4)))
        .map_err(build_err)?
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET))
        .map_err(build_err)?;
    if abi >= SCOPED_ABI {
        ruleset = ruleset
            .set_compatibility(CompatLevel::HardRequirement)
            .scope(Scope::from_all(TARGET))
            .map_err(build_err)?;
    }
    let system = policy.mounts.iter().filter_map(|m| match m {
        Mount::ReadOnly { dest, .. } | Mount::ReadWrite { dest, .. } => Some(dest.as_path()),
        Mount::Symlink { .. } => None,
    });
    let mut created = ruleset
        .create()
        .map_err(build_err)?
        .add_rules(path_beneath_rules(
            system.chain([policy.exe, Path::new("/proc")]),
            read,
        ))
        .and_then(|r| r.add_rules(path_beneath_rules(DEVICES, write)))
        .and_then(|r| r.add_rule(PathBeneath::new(policy.bundle.as_fd(), read)))
        .and_then(|r| r.add_rule(PathBeneath::new(policy.tmp.as_fd(), write)))
        .and_then(|r| {
            let access = match policy.workspace_writable {
                true => write,
                false => read,
            };
            r.add_rule(PathBeneath::new(policy.workspace.as_fd(), access))
        })
        .map_err(build_err)?;
    if let Some(hooks) = policy.operator_hooks {
        created = created
            .add_rule(PathBeneath::new(hooks, read))
            .map_err(build_err)?;
    }
    if let Some(port) = policy.egress_port {
        created = created
            .add_rule(NetPort::new(port, AccessNet::ConnectTcp))
            .map_err(build_err)?;
    }
    Option::<OwnedFd>::from(created)
        .ok_or_else(|| LandlockError::Unsupported("the kernel did not make the rule set".into()))
}

/// `value` with the sandbox's names of the workspace and the bundle (`/workspace`, `/bundle`, which bundles write
/// for every backend) at the start of it, or of any of its `:`-separated parts, replaced by their host paths: a
/// Landlock sandbox sees the host's paths. An MCP server's command, arguments, environment and directory go
/// through it.
pub fn host_named(value: &str, workspace: &Path, bundle: &Path) -> String {
    value
        .split(':')
        .map(|part| {
            [
                (service_ipc::WORKSPACE_IN_SANDBOX, workspace),
                (service_ipc::BUNDLE_IN_SANDBOX, bundle),
            ]
            .iter()
            .find_map(|(named, host)| {
                let rest = part.strip_prefix(named)?;
                (rest.is_empty() || rest.starts_with('/'))
                    .then(|| format!("{}{rest}", host.display()))
            })
            .unwrap_or_else(|| part.to_string())
        })
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: i64 = 0x4000_0000;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

fn arg(index: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, LandlockError> {
    SeccompCondition::new(index, SeccompCmpArgLen::Dword, op, value).map_err(build_err)
}

/// The seccomp filter of the whole sandbox: sockets only of the families the policy allows, and no `io_uring`.
/// `tcp`: TCP sockets are allowed (the egress forwarder's port); otherwise only `AF_UNIX`.
pub fn filter(tcp: bool) -> Result<BpfProgram, LandlockError> {
    let families: &[u64] = match tcp {
        true => &[
            libc::AF_UNIX as u64,
            libc::AF_INET as u64,
            libc::AF_INET6 as u64,
        ],
        false => &[libc::AF_UNIX as u64],
    };
    // Any family not listed is refused.
    let mut socket = vec![SeccompRule::new(
        families
            .iter()
            .map(|&f| arg(0, SeccompCmpOp::Ne, f))
            .collect::<Result<_, _>>()?,
    )
    .map_err(build_err)?];
    if tcp {
        // An IP socket of any type but a stream is refused: UDP would pass Landlock's TCP rules.
        for family in [libc::AF_INET, libc::AF_INET6] {
            for kind in (0..16).filter(|&t| t != libc::SOCK_STREAM as u64) {
                socket.push(
                    SeccompRule::new(vec![
                        arg(0, SeccompCmpOp::Eq, family as u64)?,
                        arg(1, SeccompCmpOp::MaskedEq(0xf), kind)?,
                    ])
                    .map_err(build_err)?,
                );
            }
        }
    }
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, rule) in [
        (libc::SYS_socket, socket),
        (libc::SYS_io_uring_setup, Vec::new()),
        (libc::SYS_io_uring_enter, Vec::new()),
        (libc::SYS_io_uring_register, Vec::new()),
    ] {
        // The x32 ABI shares x86_64's audit architecture and numbers these calls with a bit set: a kernel that
        // allows x32 would otherwise let them through.
        #[cfg(target_arch = "x86_64")]
        rules.insert(nr | X32_SYSCALL_BIT, rule.clone());
        rules.insert(nr, rule);
    }
    SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(build_err)?
    .try_into()
    .map_err(|e: seccompiler::BackendError| build_err(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandboxs_names_become_host_paths_at_the_start_of_each_part() {
        let (ws, b) = (Path::new("/srv/proj"), Path::new("/store/b"));
        assert_eq!(host_named("/workspace/run.sh", ws, b), "/srv/proj/run.sh");
        assert_eq!(
            host_named("/workspace/vendor:/bundle/lib:/usr/lib", ws, b),
            "/srv/proj/vendor:/store/b/lib:/usr/lib"
        );
        assert_eq!(host_named("/workspaces/x", ws, b), "/workspaces/x");
        assert_eq!(host_named("--dir=/workspace", ws, b), "--dir=/workspace");
    }

    #[test]
    fn a_missing_landlock_is_told_apart_from_a_kernel_too_old_and_from_one_disabled() {
        assert!(
            absent(libc::ENOSYS, "5.10.0-28-amd64").contains("(5.10.0-28-amd64) has no Landlock")
        );
        assert!(absent(libc::EOPNOTSUPP, "6.1.0").contains("lsm= boot parameter"));
        // Docker's default profile answers EPERM for a call it does not list.
        assert!(absent(libc::EPERM, "6.1.0").contains("seccomp filter"));
    }

    #[test]
    fn the_filter_builds_with_and_without_tcp() {
        assert!(!filter(false).unwrap().is_empty());
        assert!(filter(true).unwrap().len() > filter(false).unwrap().len());
    }
}
