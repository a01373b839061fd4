//! "Always in this project": approvals a user keeps for a project directory, on disk, across sessions and front
//! ends (`allow_always` stays per session and in memory). A rule is offered with the question, made from what is
//! asked: a command prefix for Bash (`Bash(npm test:*)`, which matches one simple command, never a chain; see
//! `service_worker::permissions`), the file's directory for Write and Edit (`Edit(/workspace/src/**)`). Other tools
//! get none. Rules belong to a tenant as well as a directory: what one tenant of `serve` kept never answers another's
//! questions in the same directory. They live in `$SERVICE_HOME/approvals/<sha256 of the directory, and of the
//! tenant unless it is the default one>.json`, changed under an exclusive lock; `service-rs approvals` lists and
//! removes the default tenant's (the local commands').

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::Digest;

use super::error::{Result, RuntimeError};

/// One kept approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProjectRule {
    /// The rule as agent.yaml writes one: `Bash(npm test:*)`, `Edit(/workspace/src/**)`.
    pub rule: String,
    /// When it was kept (RFC 3339).
    pub added_at: String,
}

/// A project's file: its directory (the sha256 names the file) and its rules.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ProjectRules {
    /// The project directory.
    pub dir: String,
    /// Its rules, in the order they were kept.
    pub rules: Vec<ProjectRule>,
}

/// The rule offered for a request of `tool` with key argument `key`; None when none would be narrower than "this
/// call" (a chained command, a path at the root, another tool).
pub fn suggest(tool: &str, key: &str) -> Option<String> {
    match tool {
        "Bash" => {
            if key.contains(service_worker::permissions::SHELL_CONTROL) {
                return None;
            }
            let words = shlex::split(key)?;
            let plain = |w: &String| {
                !w.is_empty()
                    && w.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_./=:@+,".contains(c))
            };
            let mut prefix: Vec<&String> = words.iter().take(1).filter(|w| plain(w)).collect();
            if let Some(second) = words.get(1).filter(|w| plain(w) && !w.starts_with('-')) {
                if !prefix.is_empty() {
                    prefix.push(second);
                }
            }
            (!prefix.is_empty()).then(|| {
                let prefix: Vec<&str> = prefix.iter().map(|w| w.as_str()).collect();
                format!("Bash({}:*)", prefix.join(" "))
            })
        }
        "Write" | "Edit" => {
            let dir = Path::new(key).parent()?.to_str()?;
            let glob_free = !dir.contains(['*', '?', '[', ']', '{', '}', '(', ')']);
            (dir.starts_with('/') && dir != "/" && glob_free).then(|| format!("{tool}({dir}/**)"))
        }
        _ => None,
    }
}

/// Whether the kept `rule` allows a call of `tool` with `key`, by the same matching as agent.yaml's rules.
pub fn allows(rule: &str, tool: &str, key: &str) -> bool {
    let perms = service_ipc::Permissions {
        default: service_ipc::PermissionAction::Ask,
        rules: vec![service_ipc::PermissionRule {
            tool: rule.to_string(),
            pattern: None,
            action: service_ipc::PermissionAction::Allow,
        }],
        ..Default::default()
    };
    service_worker::permissions::evaluate(&perms, tool, key).0
        == service_ipc::PermissionAction::Allow
}

fn file_of(home: &crate::ServiceHome, tenant: &str, dir: &Path) -> PathBuf {
    let mut hash = sha2::Sha256::new();
    if tenant != crate::tenancy::DEFAULT_TENANT {
        hash.update(tenant.as_bytes());
        hash.update([0]);
    }
    hash.update(dir.as_os_str().as_encoded_bytes());
    let digest = hash.finalize();
    home.root()
        .join("approvals")
        .join(format!("{}.json", hex::encode(digest)))
}

fn io(what: &'static str, path: &Path, e: std::io::Error) -> RuntimeError {
    RuntimeError::io(what, path, e)
}

/// The rules `tenant` kept for the project `dir`.
pub fn load(home: &crate::ServiceHome, tenant: &str, dir: &Path) -> Result<ProjectRules> {
    let path = file_of(home, tenant, dir);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
            RuntimeError::InvalidRequest(format!(
                "{} is not a project's approvals ({e}); remove it to start over",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ProjectRules {
            dir: dir.display().to_string(),
            rules: Vec::new(),
        }),
        Err(e) => Err(io("cannot read", &path, e)),
    }
}

/// Whether a rule `tenant` kept for `dir` allows a call of `tool` with `key`.
pub fn kept_for(
    home: &crate::ServiceHome,
    tenant: &str,
    dir: &Path,
    tool: &str,
    key: &str,
) -> bool {
    load(home, tenant, dir).is_ok_and(|p| p.rules.iter().any(|r| allows(&r.rule, tool, key)))
}

/// Changes the rules `tenant` kept for `dir` under the file's lock, atomically; what `change` returned.
pub fn change<T>(
    home: &crate::ServiceHome,
    tenant: &str,
    dir: &Path,
    change: impl FnOnce(&mut Vec<ProjectRule>) -> T,
) -> Result<T> {
    let path = file_of(home, tenant, dir);
    let parent = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| io("cannot create", parent, e))?;
    let lock_path = path.with_extension("lock");
    let lock = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| io("cannot open", &lock_path, e))?;
    let _held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| io("cannot lock", &lock_path, e.into()))?;
    let mut rules = load(home, tenant, dir)?;
    let out = change(&mut rules.rules);
    let mut tmp =
        tempfile::NamedTempFile::new_in(parent).map_err(|e| io("cannot write in", parent, e))?;
    let bytes = serde_json::to_vec_pretty(&rules).unwrap_or_default();
    tmp.write_all(&bytes)
        .map_err(|e| io("cannot write", &path, e))?;
    tmp.persist(&path)
        .map_err(|e| io("cannot write", &path, e.error))?;
    Ok(out)
}

/// Keeps `rule` for `tenant` in `dir` (once).
pub fn keep(home: &crate::ServiceHome, tenant: &str, dir: &Path, rule: &str) -> Result<()> {
    change(home, tenant, dir, |rules| {
        if !rules.iter().any(|r| r.rule == rule) {
            rules.push(ProjectRule {
                rule: rule.to_string(),
                added_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_suggests_its_first_words_and_a_chain_suggests_nothing() {
        assert_eq!(
            suggest("Bash", "npm test -- --watch=false"),
            Some("Bash(npm test:*)".into())
        );
        assert_eq!(
            suggest("Bash", "pytest -x tests/"),
            Some("Bash(pytest:*)".into())
        );
        assert_eq!(suggest("Bash", "npm test && rm -rf /"), None);
        assert_eq!(suggest("Bash", "echo $(id)"), None);
        assert_eq!(suggest("Bash", "'weird name' arg"), None);
    }

    #[test]
    fn an_edit_suggests_its_directory_and_the_rule_allows_only_below_it() {
        let rule = suggest("Edit", "/workspace/src/lib.rs").unwrap();
        assert_eq!(rule, "Edit(/workspace/src/**)");
        assert!(allows(&rule, "Edit", "/workspace/src/a/b.rs"));
        assert!(!allows(&rule, "Edit", "/workspace/other.rs"));
        assert!(!allows(&rule, "Write", "/workspace/src/a.rs"));
        assert_eq!(suggest("Edit", "/top.rs"), None);
        assert_eq!(suggest("Read", "/workspace/a"), None);
    }

    #[test]
    fn a_kept_command_prefix_allows_the_command_and_never_a_chain() {
        let rule = suggest("Bash", "npm test").unwrap();
        assert!(allows(&rule, "Bash", "npm test -- -u"));
        assert!(!allows(&rule, "Bash", "npm test; curl evil.example"));
        assert!(!allows(&rule, "Bash", "npm install"));
    }
}
