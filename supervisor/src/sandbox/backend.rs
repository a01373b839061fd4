//! Which mechanism confines sandboxed workers: bubblewrap where it can start, Landlock where it cannot.
//!
//! bubblewrap fails for different reasons in different places (Docker's default seccomp profile refuses its
//! namespaces, Podman's masked `/proc` refuses its mount, a hardened kernel refuses unprivileged user namespaces),
//! so `auto` does not guess from the environment: it starts bwrap once, with the namespaces and mounts a sandbox
//! needs, and uses Landlock when that fails. The answer is kept for the process.

use std::path::PathBuf;
use std::sync::OnceLock;

use service_ipc::SandboxBackend;

/// The `sandbox_backend` setting (`--sandbox-backend`, `SERVICE_SANDBOX_BACKEND`, config.toml).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// bubblewrap when it starts here, else Landlock.
    #[default]
    Auto,
    /// Only one backend; a sandbox that cannot start with it is an error.
    Only(SandboxBackend),
}

/// The environment variable that sets [`BackendChoice`] when no flag does.
pub const BACKEND_ENV: &str = "SERVICE_SANDBOX_BACKEND";

impl std::str::FromStr for BackendChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(BackendChoice::Auto),
            other => other.parse().map(BackendChoice::Only).map_err(|_| {
                format!("unknown sandbox backend \"{other}\": use bwrap, landlock or auto")
            }),
        }
    }
}

impl std::fmt::Display for BackendChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendChoice::Auto => f.write_str("auto"),
            BackendChoice::Only(b) => write!(f, "{b}"),
        }
    }
}

/// The backend this host gives sandboxes, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// bubblewrap, at this path.
    Bwrap(PathBuf),
    /// Landlock at this kernel ABI; `why` says why not bubblewrap (empty when it was asked for).
    Landlock {
        /// The kernel's Landlock ABI.
        abi: i32,
        /// Why bubblewrap was not used.
        why: String,
    },
    /// No backend can start here: what was tried, and what to change.
    Unavailable(String),
}

impl Resolved {
    /// The backend, when there is one.
    pub fn backend(&self) -> Option<SandboxBackend> {
        match self {
            Resolved::Bwrap(_) => Some(SandboxBackend::Bwrap),
            Resolved::Landlock { .. } => Some(SandboxBackend::Landlock),
            Resolved::Unavailable(_) => None,
        }
    }

    /// One line for logs and `doctor`.
    pub fn describe(&self) -> String {
        match self {
            Resolved::Bwrap(path) => format!("bubblewrap {}", path.display()),
            Resolved::Landlock { abi, why } if why.is_empty() => {
                format!("Landlock (ABI {abi}) and seccomp")
            }
            Resolved::Landlock { abi, why } => {
                format!(
                    "Landlock (ABI {abi}) and seccomp, since bubblewrap cannot start here: {why}"
                )
            }
            Resolved::Unavailable(why) => format!("none: {why}"),
        }
    }
}

/// Resolves `choice` on this host; `auto` starts bwrap once per process to find out.
pub fn resolve(choice: BackendChoice) -> Resolved {
    match choice {
        BackendChoice::Only(SandboxBackend::Bwrap) => match super::find_bwrap() {
            Some(path) => Resolved::Bwrap(path),
            None => Resolved::Unavailable(
                "bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap, dnf install \
                 bubblewrap) or choose --sandbox-backend landlock"
                    .into(),
            ),
        },
        BackendChoice::Only(SandboxBackend::Landlock) => landlock(String::new()),
        BackendChoice::Auto => {
            static AUTO: OnceLock<Resolved> = OnceLock::new();
            AUTO.get_or_init(|| match super::find_bwrap() {
                None => landlock("it is not installed".into()),
                Some(path) => match bwrap_starts(&path) {
                    Ok(()) => Resolved::Bwrap(path),
                    Err(why) => landlock(why),
                },
            })
            .clone()
        }
    }
}

fn landlock(why: String) -> Resolved {
    match super::landlock::available() {
        Ok(abi) => Resolved::Landlock { abi, why },
        Err(e) if why.is_empty() => Resolved::Unavailable(e.to_string()),
        Err(e) => Resolved::Unavailable(format!("bubblewrap: {why}; Landlock: {e}")),
    }
}

/// Starts bwrap with the namespaces and kernel mounts every sandbox has, running `true`; its complaint when it
/// fails.
fn bwrap_starts(bwrap: &std::path::Path) -> Result<(), String> {
    let out = std::process::Command::new(bwrap)
        .args([
            "--unshare-all",
            "--unshare-user",
            "--die-with-parent",
            "--ro-bind",
            "/",
            "/",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--",
            "true",
        ])
        .env_clear()
        .env("PATH", super::bwrap::SANDBOX_PATH)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", bwrap.display()))?;
    match out.status.success() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&out.stderr).trim().to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_an_unknown_one_names_the_allowed_values() {
        assert_eq!("auto".parse(), Ok(BackendChoice::Auto));
        assert_eq!(
            "landlock".parse(),
            Ok(BackendChoice::Only(SandboxBackend::Landlock))
        );
        let err = "firejail".parse::<BackendChoice>().unwrap_err();
        assert!(err.contains("bwrap, landlock or auto"), "{err}");
    }
}
