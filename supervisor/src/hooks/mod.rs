//! Which hooks a session runs, and who said so: the operator's (`[hooks]` in config.toml, which no bundle or
//! project can turn off, and with `operator_hooks_only` the only ones), the bundle's (part of its digest, listed
//! by `inspect`), and the project's `.service/hooks.json` once the user trusted that file's content (`hooks
//! trust`), as codex asks before it runs hooks nobody manages. A project file that changed after it was trusted is
//! off again until it is trusted again. All run in the session's sandbox, started by the worker (see the worker's
//! `hooks`); the operator's scripts are in `$SERVICE_HOME/hooks`, which every sandbox sees read-only.
//!
//! The contract, and where service-rs differs from Claude Code and codex, is in `hooks/README.md`.

pub mod trust;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use service_ipc::{HookSource, HookSpec};

use crate::bundle::hooks::{self as declared, HooksFile};
use crate::bundle::Bundle;
use crate::home::ServiceHome;

/// The project's hooks file, relative to the project directory.
pub const PROJECT_FILE: &str = ".service/hooks.json";
/// The largest project hooks file read.
const MAX_FILE: u64 = 256 * 1024;

/// The project's hooks file as it is now, and whether the user trusted this content.
#[derive(Debug, Clone)]
pub struct ProjectHooks {
    /// Its path.
    pub path: PathBuf,
    /// The `sha256:` digest of its content.
    pub digest: String,
    /// Its hooks, or why it cannot be read.
    pub hooks: Result<Vec<HookSpec>, String>,
    /// The user trusted this content.
    pub trusted: bool,
}

/// The hooks file of the project in `dir`, if it has one; read without following links, since a sandbox that
/// may write the project may also have made that file.
pub fn project(home: &ServiceHome, dir: &Path) -> Option<ProjectHooks> {
    let folder = dir.join(".service");
    let text = crate::sandbox::host_dir::read_small_file(&folder, "hooks.json", MAX_FILE);
    let path = dir.join(PROJECT_FILE);
    let text = match text {
        Some(text) => text,
        // A link or a fifo there is no hooks file, but say so rather than ignore it.
        None if path.symlink_metadata().is_ok() => {
            return Some(ProjectHooks {
                path,
                digest: String::new(),
                hooks: Err(format!(
                    "{PROJECT_FILE} is not a regular file of at most {MAX_FILE} bytes reached without links"
                )),
                trusted: false,
            })
        }
        None => return None,
    };
    let digest = trust::digest(text.as_bytes());
    let hooks = serde_json::from_str::<HooksFile>(&text)
        .map_err(|e| format!("{}: {e}", path.display()))
        .and_then(|file| {
            declared::validate(&file.hooks, false)
                .map_err(|(key, why)| format!("{}: hooks.{key}: {why}", path.display()))?;
            Ok(declared::specs(&file.hooks, HookSource::Project))
        });
    let trusted = trust::is_trusted(home, dir, &digest);
    Some(ProjectHooks {
        path,
        digest,
        hooks,
        trusted,
    })
}

/// The operator's hooks, from config.toml.
#[derive(Debug, Default)]
pub struct Operator {
    /// Those that run in the session's sandbox.
    pub sandbox: Vec<HookSpec>,
    /// Those the supervisor runs on the host (`run = "host"`, `PermissionRequest` only).
    pub host: Vec<HookSpec>,
    /// No bundle's or project's hook runs (`operator_hooks_only`).
    pub only: bool,
}

/// The operator's hooks; a config.toml that cannot be read has none (the runtime refused to start on it, so it
/// was changed since).
pub fn operator(home: &ServiceHome) -> Operator {
    match crate::config_file::load(home.root()) {
        Ok(config) => Operator {
            sandbox: declared::specs(&config.hooks, HookSource::Operator),
            host: declared::specs_in(&config.hooks, HookSource::Operator, declared::RunsIn::Host),
            only: config.operator_hooks_only,
        },
        Err(e) => {
            tracing::error!("the operator's hooks do not run: {e}");
            Operator::default()
        }
    }
}

/// A session's hooks: those its workers run, and the operator's the supervisor runs on the host.
#[derive(Debug, Default)]
pub struct SessionHooks {
    /// Given to the session's workers.
    pub sandbox: Arc<Vec<HookSpec>>,
    /// Run by the supervisor (see `runtime::host_hooks`).
    pub host: Vec<HookSpec>,
}

/// The hooks a session of `bundle` in `dir` runs: the operator's, then (unless the operator allows only its own)
/// the bundle's and the project's when trusted.
pub fn for_session(home: &ServiceHome, bundle: &Bundle, dir: &Path) -> SessionHooks {
    let operator = operator(home);
    let mut hooks = operator.sandbox;
    let ours = |hooks| SessionHooks {
        sandbox: Arc::new(hooks),
        host: operator.host,
    };
    if operator.only {
        if !bundle.agent.hooks.is_empty() || project_has_file(dir) {
            tracing::info!("operator_hooks_only: the bundle's and the project's hooks do not run");
        }
        return ours(hooks);
    }
    hooks.extend(declared::specs(&bundle.agent.hooks, HookSource::Bundle));
    match project(home, dir) {
        Some(ProjectHooks {
            hooks: Ok(more),
            trusted: true,
            ..
        }) => hooks.extend(more),
        Some(p) if !p.trusted => {
            tracing::warn!(file = %p.path.display(), "the project's hooks are not trusted and do not run; `service-rs hooks trust` trusts them")
        }
        Some(ProjectHooks { hooks: Err(e), .. }) => {
            tracing::warn!("the project's hooks do not run: {e}")
        }
        _ => {}
    }
    ours(hooks)
}

/// Whether the project in `dir` has a hooks file at all, trusted or not: a cheap look for the turn's lead.
pub fn project_has_file(dir: &Path) -> bool {
    dir.join(PROJECT_FILE).symlink_metadata().is_ok()
}
