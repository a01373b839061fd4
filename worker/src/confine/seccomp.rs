//! The seccomp rule set of tool processes: the system calls that would let a command reach another process of the
//! sandbox (the worker above all) fail with `EPERM`; everything else is allowed. Built with `seccompiler`, whose
//! program also kills a process that switches to another architecture's system call table.

use std::collections::BTreeMap;

use nix::libc;
use seccompiler::{BpfProgram, SeccompAction, SeccompFilter, TargetArch};

/// The system calls a tool process may not make, by name, for messages and tests.
pub const DENIED: &[(&str, i64)] = &[
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("pidfd_open", libc::SYS_pidfd_open),
    ("pidfd_getfd", libc::SYS_pidfd_getfd),
    ("kcmp", libc::SYS_kcmp),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("keyctl", libc::SYS_keyctl),
];

/// The x32 ABI shares the x86_64 audit architecture and numbers its calls with this bit set; a kernel that allows
/// x32 would otherwise let `ptrace` through under its x32 number.
#[cfg(target_arch = "x86_64")]
const X32_SYSCALL_BIT: i64 = 0x4000_0000;

#[cfg(target_arch = "x86_64")]
const ARCH: TargetArch = TargetArch::x86_64;
#[cfg(target_arch = "aarch64")]
const ARCH: TargetArch = TargetArch::aarch64;

/// Why the filter could not be built.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the seccomp filter for tool processes: {0}")]
pub struct FilterError(String);

/// The compiled filter: denied calls answer `EPERM`, the rest run. `no_unix_sockets` (under Landlock) also refuses
/// `socket(AF_UNIX, ...)`: Landlock (below ABI 9) does not confine connecting to a socket by its path, and the
/// host's sockets, other sessions' proxies among them, would otherwise be a connect away. `socketpair` stays allowed.
pub fn tool_filter(no_unix_sockets: bool) -> Result<BpfProgram, FilterError> {
    let mut rules = BTreeMap::new();
    for &(_, nr) in DENIED {
        rules.insert(nr, Vec::new());
        #[cfg(target_arch = "x86_64")]
        rules.insert(nr | X32_SYSCALL_BIT, Vec::new());
    }
    #[cfg(target_arch = "x86_64")]
    for nr in [521, 539, 540] {
        // x32's own numbers for ptrace and process_vm_readv/writev (compat structures).
        rules.insert(nr | X32_SYSCALL_BIT, Vec::new());
    }
    if no_unix_sockets {
        let unix = seccompiler::SeccompCondition::new(
            0,
            seccompiler::SeccompCmpArgLen::Dword,
            seccompiler::SeccompCmpOp::Eq,
            libc::AF_UNIX as u64,
        )
        .and_then(|c| seccompiler::SeccompRule::new(vec![c]))
        .map_err(|e| FilterError(e.to_string()))?;
        rules.insert(libc::SYS_socket, vec![unix.clone()]);
        #[cfg(target_arch = "x86_64")]
        rules.insert(libc::SYS_socket | X32_SYSCALL_BIT, vec![unix]);
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        ARCH,
    )
    .map_err(|e| FilterError(e.to_string()))?;
    filter
        .try_into()
        .map_err(|e: seccompiler::BackendError| FilterError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `probe` in a forked child under the filter and returns the child's exit code.
    fn in_filtered_child(probe: fn() -> i32) -> i32 {
        let filter = tool_filter(false).unwrap();
        // SAFETY: the child only makes system calls and exits; it touches no lock the parent may hold.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let code = match seccompiler::apply_filter(&filter) {
                    Ok(()) => probe(),
                    Err(_) => 99,
                };
                unsafe { libc::_exit(code) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                match nix::sys::wait::waitpid(child, None).unwrap() {
                    nix::sys::wait::WaitStatus::Exited(_, code) => code,
                    other => panic!("probe ended with {other:?}"),
                }
            }
        }
    }

    fn errno() -> i32 {
        std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
    }

    #[test]
    fn every_denied_call_fails_with_eperm_under_the_filter() {
        fn probe() -> i32 {
            let parent = unsafe { libc::getppid() };
            for (i, &(_, nr)) in DENIED.iter().enumerate() {
                let rc = unsafe { libc::syscall(nr, parent as libc::c_long, 0, 0, 0, 0) };
                if rc != -1 || errno() != libc::EPERM {
                    return 10 + i as i32;
                }
            }
            0
        }
        assert_eq!(in_filtered_child(probe), 0);
    }

    #[test]
    fn ordinary_calls_still_work_under_the_filter() {
        fn probe() -> i32 {
            let pid = unsafe { libc::getpid() };
            let fd = unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY) };
            if pid <= 0 || fd < 0 {
                return 1;
            }
            0
        }
        assert_eq!(in_filtered_child(probe), 0);
    }

    #[test]
    fn ptrace_works_without_the_filter_so_the_probe_can_fail() {
        // PTRACE_TRACEME is always allowed for an unfiltered child: the same probe as above is not vacuous.
        match unsafe { nix::unistd::fork() }.unwrap() {
            nix::unistd::ForkResult::Child => {
                let rc = unsafe { libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) };
                unsafe { libc::_exit(if rc == 0 { 0 } else { 1 }) }
            }
            nix::unistd::ForkResult::Parent { child } => {
                let status = nix::sys::wait::waitpid(child, None).unwrap();
                assert_eq!(status, nix::sys::wait::WaitStatus::Exited(child, 0));
            }
        }
    }
}
