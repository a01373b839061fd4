//! Process hardening, run first in every `service-rs` and `service-worker` process: the supervisor holds provider
//! keys and the workers' sockets, and a worker shares its sandbox with the commands it runs.
//!
//! - Not dumpable (`PR_SET_DUMPABLE 0`): another process of the same user can no longer `ptrace` it, take its
//!   descriptors with `pidfd_getfd`, or open its `/proc/<pid>/{mem,fd/*,environ}`. The flag resets on `execve`, so
//!   the commands a worker starts are not covered by it; they are confined on their own (the worker's `confine`).
//! - No core dumps (`RLIMIT_CORE` 0): a crash must not write a key or a conversation to disk.
//! - No `LD_*` variables: they would make every program we start load a library of someone else's choosing.

/// Hardens the current process. Call it before anything else in `main`, while the process has one thread.
pub fn pre_main() {
    #[cfg(target_os = "linux")]
    {
        // Failure leaves the process as it was; there is nothing better to do than go on, and tests check the flag.
        let _ = nix::sys::prctl::set_dumpable(false);
    }
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    let ld: Vec<_> = std::env::vars_os()
        .filter(|(k, _)| k.to_string_lossy().starts_with("LD_"))
        .map(|(k, _)| k)
        .collect();
    for key in ld {
        // Single-threaded at this point, so changing the environment races with no reader.
        std::env::remove_var(key);
    }
}
