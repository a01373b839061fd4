//! Which mechanism confines sandboxed workers: bubblewrap where it can start, Landlock where it cannot.
//!
//! bubblewrap fails for different reasons in different places (Docker's default seccomp profile refuses its
//! namespaces, Podman's masked `/proc` refuses its mount, a hardened kernel refuses unprivileged user namespaces),
//! so `auto` does not guess from the environment: it starts bwrap once, with the namespaces and mounts a sandbox
//! needs, and uses Landlock when that fails. The answer is kept for the process, and in the home's
//! `run/sandbox-backend` for the next processes (a one-shot `run` would otherwise pay a bwrap start, about 5 ms, before its worker's):
//! under the facts that decide it, so that a reboot, another container or namespace, another bwrap, another user,
//! another seccomp filter or a changed user-namespace sysctl finds it out again. `doctor` always does.

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

/// [`resolve`], with `auto`'s answer read from, or written to, `file` when the facts that decide it are those it
/// was found under.
pub fn resolve_remembered(choice: BackendChoice, file: &std::path::Path) -> Resolved {
    if choice != BackendChoice::Auto {
        return resolve(choice);
    }
    AUTO.get_or_init(|| {
        let Some(path) = super::find_bwrap() else {
            return landlock("it is not installed".into());
        };
        let Some(facts) = conditions(&path) else {
            return probe(path);
        };
        if let Some(found) = remembered(file, &facts) {
            return match found {
                None => Resolved::Bwrap(path),
                Some(why) => landlock(why),
            };
        }
        let resolved = probe(path);
        let why = match &resolved {
            Resolved::Bwrap(_) => None,
            Resolved::Landlock { why, .. } => Some(why.clone()),
            Resolved::Unavailable(_) => return resolved,
        };
        remember(file, &facts, why.as_deref());
        resolved
    })
    .clone()
}

/// `auto`'s answer in this process.
static AUTO: OnceLock<Resolved> = OnceLock::new();

fn probe(path: PathBuf) -> Resolved {
    match bwrap_starts(&path) {
        Ok(()) => Resolved::Bwrap(path),
        Err(why) => landlock(why),
    }
}

/// What decides whether bwrap starts here, as one line: the boot, this process's namespaces, user and seccomp
/// state, the sysctls that allow user namespaces, the bwrap binary, and this release. None when one cannot be read.
fn conditions(bwrap: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let read = |p: &str| std::fs::read_to_string(p).map(|s| s.trim().to_string());
    let mut facts = vec![read("/proc/sys/kernel/random/boot_id").ok()?];
    for ns in ["user", "mnt", "pid", "net"] {
        facts.push(
            std::fs::read_link(format!("/proc/self/ns/{ns}"))
                .ok()?
                .display()
                .to_string(),
        );
    }
    for sysctl in [
        "/proc/sys/user/max_user_namespaces",
        "/proc/sys/kernel/unprivileged_userns_clone",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    ] {
        facts.push(read(sysctl).unwrap_or_else(|_| "-".into()));
    }
    let status = read("/proc/self/status").ok()?;
    facts.extend(
        status
            .lines()
            .filter(|l| l.starts_with("Seccomp") || l.starts_with("NoNewPrivs"))
            .map(str::to_string),
    );
    let meta = std::fs::metadata(bwrap).ok()?;
    facts.push(format!(
        "{} {} {} {} {}",
        bwrap.display(),
        meta.ino(),
        meta.len(),
        meta.mtime(),
        meta.mtime_nsec()
    ));
    facts.push(nix::unistd::geteuid().to_string());
    facts.push(env!("CARGO_PKG_VERSION").to_string());
    Some(facts.join("\t"))
}

/// The answer `file` holds for `facts`: Some(None) for bubblewrap, Some(Some(why)) for Landlock, None when it
/// holds none for them.
fn remembered(file: &std::path::Path, facts: &str) -> Option<Option<String>> {
    let text = std::fs::read_to_string(file).ok()?;
    let (key, answer) = text.split_once('\n')?;
    if key != facts {
        return None;
    }
    let answer = answer.trim_end_matches('\n');
    match answer.strip_prefix("landlock ") {
        Some(why) => Some(Some(why.to_string())),
        None => (answer == "bwrap").then_some(None),
    }
}

/// Writes the answer for `facts` (through a temporary file and a rename, mode 0600); a cache that cannot be
/// written costs the next process a probe, nothing more.
fn remember(file: &std::path::Path, facts: &str, landlock_why: Option<&str>) {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let answer = match landlock_why {
        None => "bwrap".to_string(),
        Some(why) => format!("landlock {}", why.replace('\n', " ")),
    };
    let tmp = file.with_extension(format!("tmp{}", std::process::id()));
    let written = file
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(format!("{facts}\n{answer}\n").as_bytes())
        })
        .and_then(|()| std::fs::rename(&tmp, file));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        tracing::debug!(
            "the sandbox backend found here is not remembered in {}: {e}",
            file.display()
        );
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
        BackendChoice::Auto => AUTO
            .get_or_init(|| match super::find_bwrap() {
                None => landlock("it is not installed".into()),
                Some(path) => probe(path),
            })
            .clone(),
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

    #[test]
    fn an_answer_is_read_back_only_under_the_facts_it_was_found_under() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run/sandbox-backend");
        assert_eq!(remembered(&file, "boot-1"), None);
        remember(&file, "boot-1", None);
        assert_eq!(remembered(&file, "boot-1"), Some(None));
        assert_eq!(remembered(&file, "boot-2"), None);
        remember(
            &file,
            "boot-2",
            Some("bwrap: setting up uid map:\nPermission denied"),
        );
        assert_eq!(
            remembered(&file, "boot-2"),
            Some(Some("bwrap: setting up uid map: Permission denied".into()))
        );
        assert_eq!(remembered(&file, "boot-1"), None);
        std::fs::write(&file, "boot-2\nsomething else\n").unwrap();
        assert_eq!(remembered(&file, "boot-2"), None);
        use std::os::unix::fs::PermissionsExt;
        remember(&file, "boot-3", None);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        // This process's facts can be read, and name the boot and the bwrap binary.
        if let Some(bwrap) = crate::sandbox::find_bwrap() {
            let facts = conditions(&bwrap).unwrap();
            assert!(facts.contains(&bwrap.display().to_string()), "{facts}");
        }
    }
}
