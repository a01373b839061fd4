//! Fault points for crash-consistency tests: with `SERVICE_FAULT_POINT=<name>` in its environment, the process
//! kills itself with SIGKILL when it reaches the point of that name, between two writes whose order matters, as a
//! power cut or an OOM kill would. Unset (always, outside the tests), a point costs one comparison.

/// The variable that names the point to die at.
pub const FAULT_POINT_ENV: &str = "SERVICE_FAULT_POINT";

/// Dies here when `SERVICE_FAULT_POINT` names `name`.
pub(crate) fn point(name: &str) {
    static ARMED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        std::env::var(FAULT_POINT_ENV)
            .ok()
            .filter(|p| !p.is_empty())
    });
    if armed.as_deref() == Some(name) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
}
