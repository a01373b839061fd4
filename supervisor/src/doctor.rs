//! `service-rs doctor`: whether this machine can run confined sessions, whether the store is usable, and whether a
//! bundle's model can be reached with a key. Every check runs the real path (a confined worker runs a command; the
//! model server is asked for its model list), and every failing check says what to do.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::bundle::Bundle;
use crate::providers::keys::KeyPolicy;
use crate::providers::Reach;
use crate::{RuntimeOptions, ServiceHome, ServiceRuntime};

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Works.
    Ok,
    /// Works, with a caveat.
    Warn,
    /// Does not work.
    Fail,
}

/// One line of the report.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    /// How it came out.
    pub status: Status,
    /// What was checked and what was found.
    pub what: String,
    /// What to do about it.
    pub fix: Option<String>,
}

impl Check {
    fn ok(what: impl Into<String>) -> Check {
        Check {
            status: Status::Ok,
            what: what.into(),
            fix: None,
        }
    }

    fn warn(what: impl Into<String>, fix: impl Into<String>) -> Check {
        Check {
            status: Status::Warn,
            what: what.into(),
            fix: Some(fix.into()),
        }
    }

    fn fail(what: impl Into<String>, fix: Option<String>) -> Check {
        Check {
            status: Status::Fail,
            what: what.into(),
            fix,
        }
    }
}

/// The sandbox backend `choice` resolves to here and what it guarantees, and a real confined worker of a throwaway
/// session running `true`; `worker_exe` is the binary, `configured_user` the `sandbox_user` of config.toml.
pub async fn sandbox(
    worker_exe: PathBuf,
    configured_user: Option<&str>,
    choice: crate::sandbox::backend::BackendChoice,
) -> Vec<Check> {
    use crate::sandbox::backend::Resolved;
    let mut checks = Vec::new();
    let resolved = crate::sandbox::backend::resolve(choice);
    match &resolved {
        Resolved::Unavailable(why) => {
            checks.push(Check::fail(
                format!("{why} (sandbox_backend {choice}): no session can be confined"),
                Some(unavailable_fix()),
            ));
            return checks;
        }
        Resolved::Bwrap(bwrap) => {
            let version = std::process::Command::new(bwrap)
                .arg("--version")
                .output()
                .ok()
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
                .filter(|v| !v.is_empty())
                .unwrap_or_else(|| "bubblewrap".into());
            checks.push(Check::ok(format!(
                "{version} at {} confines sessions (sandbox_backend {choice}): namespaces of their own for mounts, \
                 processes, IPC and the network",
                bwrap.display()
            )));
        }
        Resolved::Landlock { .. } => {
            checks.push(Check::ok(format!(
                "sessions are confined by {} (sandbox_backend {choice})",
                resolved.describe()
            )));
            checks.push(Check::warn(
                LANDLOCK_LOSSES,
                "where bubblewrap can start (a host, or a container given user namespaces), \
                 --sandbox-backend bwrap confines more",
            ));
        }
    }
    checks.push(sandbox_user(configured_user));
    if matches!(resolved, Resolved::Bwrap(_)) {
        checks.push(mount_table(Path::new("/proc/self/mountinfo")));
    }
    checks.push(match confined_command(worker_exe, choice).await {
        Ok(took) => Check::ok(format!(
            "a confined worker started and ran a command ({} ms)",
            took.as_millis()
        )),
        Err(e) => Check::fail(
            format!("a confined worker could not run a command: {e}"),
            Some(match resolved {
                Resolved::Bwrap(_) => userns_fix(Path::new("/proc/sys")).unwrap_or_else(|| {
                    "bubblewrap needs unprivileged user namespaces and a /proc it may mount; where they cannot be \
                     had (a container under its engine's default profile), --sandbox-backend landlock confines \
                     without them (`run <bundle> --verbose` shows details)"
                        .into()
                }),
                _ => "run `service-rs run <bundle> --verbose` for details".into(),
            }),
        ),
    });
    checks
}

/// Mounts past which sandboxes start noticeably slower. A sandbox's mount namespace starts as a copy of the whole
/// table, and bwrap reads all of it again for each bind mount it makes: 200 more mounts than a plain host's
/// doubled the time bwrap takes with a session's arguments (SCALING.md).
const MANY_MOUNTS: usize = 100;

/// How many mounts every sandbox starts from, read from `mountinfo`.
fn mount_table(mountinfo: &Path) -> Check {
    let mounts = match std::fs::read_to_string(mountinfo) {
        Ok(text) => text.lines().count(),
        Err(e) => {
            return Check::warn(
                format!("the mount table ({}) could not be read: {e}", mountinfo.display()),
                "sandboxes may still start; `service-rs doctor` reads it only to tell how fast they start",
            )
        }
    };
    if mounts > MANY_MOUNTS {
        Check::warn(
            format!(
                "{mounts} mounts on this host: every sandbox starts from a copy of them, and bwrap reads them all \
                 once a bind mount, so sandboxes start more slowly (about twice as slowly at 200 more than a plain \
                 host's)"
            ),
            "run service-rs where the mount table is short, such as a container of its own (SCALING.md)",
        )
    } else {
        Check::ok(format!(
            "{mounts} mounts on this host, which sandboxes start from"
        ))
    }
}

/// Which host user a sandbox's processes are, for every permission check on the host.
fn sandbox_user(configured: Option<&str>) -> Check {
    use crate::sandbox::identity::SandboxUser;
    match SandboxUser::for_this_process(None, configured) {
        Ok(SandboxUser::Own) if nix::unistd::geteuid().is_root() => Check::warn(
            "sandboxes run as host root (sandbox_user root): they can read root-only files among what they see",
            "keep it only where everything belongs to root, as in a container; see SECURITY.md",
        ),
        Ok(user) => Check::ok(user.describe()),
        Err(e) => Check::fail(e, None),
    }
}

/// Starts a session of a scripted starter bundle in a throwaway store and runs `true` in its sandbox.
async fn confined_command(
    worker_exe: PathBuf,
    choice: crate::sandbox::backend::BackendChoice,
) -> Result<Duration, String> {
    let tmp = tempfile::tempdir().map_err(|e| format!("cannot make a temporary directory: {e}"))?;
    let project = tmp.path().join("doctor-probe");
    crate::bundle::template::init(
        &project,
        false,
        crate::bundle::template::Starter::Scripted,
        service_ipc::ExecutorKind::React,
    )
    .map_err(|e| e.to_string())?;
    let mut options = RuntimeOptions::new(worker_exe);
    options.sandbox_backend = choice;
    let rt = ServiceRuntime::new(ServiceHome::new(tmp.path().join("home")), options);
    let started = Instant::now();
    let result = async {
        let record = rt
            .create_session(&project.display().to_string(), None)
            .await
            .map_err(|e| e.to_string())?;
        let outcome = tokio::time::timeout(
            Duration::from_secs(30),
            rt.run_session_command(&record.id, "true"),
        )
        .await
        .map_err(|_| "no answer within 30 s".to_string())?
        .map_err(|e| e.to_string())?;
        match outcome.exit_code {
            Some(0) => Ok(started.elapsed()),
            other => Err(format!("`true` exited with {other:?}")),
        }
    }
    .await;
    rt.shutdown("doctor is done").await;
    result
}

/// What the Landlock backend does not give that bubblewrap does (SECURITY.md has the whole table).
const LANDLOCK_LOSSES: &str = "under Landlock a sandbox sees the host's paths (reaching only what it is granted), \
    has no private /tmp (TMPDIR points at its own), /dev or process list, and its commands get no namespaces of \
    their own (the worker kills what escapes a command's process group once it ends, but IPC objects outlive \
    it); a command can open TCP connections only to the egress forwarder's port, but on any address";

/// What to change when no backend can start: bubblewrap's namespaces, or Landlock's system calls.
fn unavailable_fix() -> String {
    let mut fix = String::from(
        "in a container, either let bubblewrap make namespaces (Docker: --security-opt seccomp=unconfined \
         --security-opt apparmor=unconfined; Podman: --security-opt unmask=ALL) or let Landlock run (a kernel of \
         Linux 6.7 or later, and a seccomp profile that allows landlock_create_ruleset, landlock_add_rule and \
         landlock_restrict_self, as Docker's and Podman's defaults do)",
    );
    if let Some(userns) = userns_fix(Path::new("/proc/sys")) {
        fix.push_str("; on this host: ");
        fix.push_str(&userns);
    }
    fix.push_str("; --dangerous-sandbox-mode runs bundles unconfined");
    fix
}

/// The kernel setting under `proc_sys` that forbids unprivileged user namespaces, and how to lift it; None when
/// none does.
fn userns_fix(proc_sys: &Path) -> Option<String> {
    let read = |path: &str| {
        std::fs::read_to_string(proc_sys.join(path))
            .ok()
            .map(|v| v.trim().to_string())
    };
    if read("kernel/apparmor_restrict_unprivileged_userns").as_deref() == Some("1") {
        return Some(
            "AppArmor restricts unprivileged user namespaces (Ubuntu 23.10 and later). Allow bwrap with a profile: \
             write `abi <abi/4.0>, include <tunables/global> profile bwrap /usr/bin/bwrap flags=(unconfined) { \
             userns, }` (one statement per line) to /etc/apparmor.d/bwrap and run `apparmor_parser -r /etc/apparmor.d/bwrap`; or lift the \
             restriction for every program: `sysctl -w kernel.apparmor_restrict_unprivileged_userns=0`"
                .into(),
        );
    }
    if read("kernel/unprivileged_userns_clone").as_deref() == Some("0") {
        return Some(
            "unprivileged user namespaces are off: `sysctl -w kernel.unprivileged_userns_clone=1` (and put it in \
             /etc/sysctl.d/ to keep it)"
                .into(),
        );
    }
    if read("user/max_user_namespaces").as_deref() == Some("0") {
        return Some(
            "user namespaces are disabled: `sysctl -w user.max_user_namespaces=15000` (and put it in \
             /etc/sysctl.d/ to keep it)"
                .into(),
        );
    }
    None
}

/// The store: writable, and what it holds.
pub fn store(home: &ServiceHome) -> Check {
    let root = home.root();
    let writable =
        std::fs::create_dir_all(root).and_then(|()| tempfile::tempfile_in(root).map(drop));
    if let Err(e) = writable {
        return Check::fail(
            format!("the store {} is not writable: {e}", root.display()),
            Some("set SERVICE_HOME to a directory you can write to".into()),
        );
    }
    let bundles = crate::bundle::store::list(home)
        .map(|l| l.len())
        .unwrap_or(0);
    let sessions = count_entries(&home.sessions());
    Check::ok(format!(
        "store {} ({bundles} bundles, {sessions} sessions)",
        root.display()
    ))
}

fn count_entries(dir: &Path) -> usize {
    std::fs::read_dir(dir).map(|d| d.count()).unwrap_or(0)
}

/// Whether a sandbox of `bundle` over `dir` may enter it, and write it when the bundle writes: what a session
/// started there would be refused for, before its first model call.
pub fn workspace(
    bundle: &Bundle,
    dir: &Path,
    user: &crate::sandbox::identity::SandboxUser,
) -> Check {
    let mode = bundle.manifest.sandbox.mode;
    let writable = mode == service_ipc::SandboxMode::WorkspaceWrite;
    if mode == service_ipc::SandboxMode::DangerFullAccess {
        return Check::ok(format!(
            "a session in {} runs unconfined (danger_full_access)",
            dir.display()
        ));
    }
    let opened = crate::sandbox::host_dir::open_no_links(dir).map_err(|e| e.to_string());
    let decided = opened.and_then(|fd| {
        use std::os::fd::AsFd;
        user.over(fd.as_fd(), dir, writable, false)
    });
    let access = if writable { "write" } else { "read" };
    match decided {
        Ok(None) => Check::ok(format!(
            "a session in {} may {access} it, as this user",
            dir.display()
        )),
        Ok(Some(id)) => Check::ok(format!(
            "a session in {} may {access} it, as uid {}",
            dir.display(),
            id.uid
        )),
        Err(e) => Check::fail(e, None),
    }
}

/// The bundle's model: the key it needs, and whether its server answers and serves it.
pub async fn model(bundle: &Bundle, keys: &KeyPolicy) -> Vec<Check> {
    let model = bundle.agent.model.to_ref();
    let label = format!("model {}/{}", model.provider, model.name);
    if model.provider == crate::providers::choice::AUTO {
        return vec![Check::fail(crate::providers::choice::NO_MODEL, None)];
    }
    if model.provider == "scripted" {
        let script = bundle.agent.script_path().unwrap_or("no script");
        return vec![Check::ok(format!(
            "{label} answers offline from {script}; no key or server needed"
        ))];
    }
    let check = match crate::providers::reach(&model, keys).await {
        Reach::NotReady(message) => Check::fail(format!("{label}: {message}"), None),
        Reach::Unreachable(reason) => Check::fail(
            format!("{label}: {reason}"),
            Some(
                "start the model server, or point model.config.base_url in agent.yaml (or the operator's \
                 OPENAI_BASE_URL / ANTHROPIC_BASE_URL) at where it listens"
                    .into(),
            ),
        ),
        Reach::Status {
            url,
            key_env,
            status: status @ (401 | 403),
        } => match key_env {
            Some(var) => Check::fail(
                format!("{label}: {url} refused the key in {var} (HTTP {status})"),
                Some(format!("check the value of {var}")),
            ),
            None => Check::fail(
                format!("{label}: {url} wants a key, and none may be sent there (HTTP {status})"),
                Some(
                    "name the endpoint and its key variable in $SERVICE_HOME/config.toml ([providers.<name>] type, \
                     base_url, api_key_env), so the key may go to it"
                        .into(),
                ),
            ),
        },
        Reach::Status { url, status, .. } => Check::warn(
            format!("{label}: {url} answered HTTP {status} to a model list request"),
            "the server runs but may not speak this provider's API; check that base_url ends where its /v1 \
             routes are",
        ),
        Reach::Listed { url, keyed, models } => {
            let key = if keyed { ", key accepted" } else { "" };
            if models.is_empty() || models.iter().any(|m| m == &model.name) {
                Check::ok(format!("{label}: {url} answers{key}"))
            } else {
                let listed: Vec<&str> = models.iter().take(8).map(String::as_str).collect();
                Check::fail(
                    format!(
                        "{label}: {url} does not serve {}; it lists {}",
                        model.name,
                        listed.join(", ")
                    ),
                    Some("set model.name in agent.yaml to one of those, or load the model on the server".into()),
                )
            }
        }
    };
    vec![check]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proc_sys(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (path, value) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, format!("{value}\n")).unwrap();
        }
        dir
    }

    #[test]
    fn the_userns_fix_names_the_setting_that_forbids_user_namespaces() {
        let ubuntu = proc_sys(&[("kernel/apparmor_restrict_unprivileged_userns", "1")]);
        let fix = userns_fix(ubuntu.path()).unwrap();
        assert!(
            fix.contains("AppArmor") && fix.contains("/etc/apparmor.d/bwrap"),
            "{fix}"
        );
        let debian = proc_sys(&[("kernel/unprivileged_userns_clone", "0")]);
        assert!(userns_fix(debian.path())
            .unwrap()
            .contains("unprivileged_userns_clone=1"));
        let none = proc_sys(&[("user/max_user_namespaces", "0")]);
        assert!(userns_fix(none.path())
            .unwrap()
            .contains("max_user_namespaces"));
        let fine = proc_sys(&[
            ("kernel/apparmor_restrict_unprivileged_userns", "0"),
            ("user/max_user_namespaces", "63000"),
        ]);
        assert_eq!(userns_fix(fine.path()), None);
    }

    #[test]
    fn a_long_mount_table_is_a_warning_that_says_where_to_run() {
        let dir = tempfile::tempdir().unwrap();
        let table = |n: usize| {
            let path = dir.path().join(format!("mountinfo-{n}"));
            let lines: String = (0..n)
                .map(|i| format!("{i} 1 0:{i} / /m/{i} rw - tmpfs none rw\n"))
                .collect();
            std::fs::write(&path, lines).unwrap();
            mount_table(&path)
        };
        let short = table(20);
        assert_eq!(short.status, Status::Ok, "{short:?}");
        assert!(short.what.starts_with("20 mounts"), "{short:?}");
        let long = table(MANY_MOUNTS + 1);
        assert_eq!(long.status, Status::Warn, "{long:?}");
        assert!(long.what.starts_with("101 mounts"), "{long:?}");
        assert!(!long.what.contains("  "), "one line of prose: {long:?}");
        assert!(long.fix.unwrap().contains("SCALING.md"));
        let missing = mount_table(&dir.path().join("absent"));
        assert_eq!(missing.status, Status::Warn, "{missing:?}");
        assert!(missing.what.contains("could not be read"), "{missing:?}");
    }
}
