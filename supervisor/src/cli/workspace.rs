//! Which host directory a new local session works in: the directory the user runs service-rs from, unless they
//! ask for another (`--cwd`) or for an empty one (`--workspace fresh`).

use std::path::{Path, PathBuf};

use anyhow::Context;
use service_ipc::SandboxMode;

/// `--workspace`: what a new session sees when `--cwd` names no directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum WorkspaceChoice {
    /// The current directory (the default).
    Cwd,
    /// An empty directory of the session's own, under the store.
    Fresh,
}

/// The `cwd` of a new local session: `cwd` when given, None (a fresh workspace) for `--workspace fresh`, else the
/// current directory. `$HOME` itself and `/` are refused unless `--cwd` names them: a session started by accident
/// from there would see every file of the user, or of the machine.
pub(super) fn for_new_session(
    cwd: Option<&Path>,
    choice: Option<WorkspaceChoice>,
) -> anyhow::Result<Option<PathBuf>> {
    if let Some(dir) = cwd {
        return Ok(Some(dir.to_path_buf()));
    }
    if choice == Some(WorkspaceChoice::Fresh) {
        return Ok(None);
    }
    let here = std::env::current_dir().context(
        "cannot read the current directory, which is the session's workspace by default: pass --cwd DIR, or \
         --workspace fresh for an empty one",
    )?;
    if let Some(what) = service_supervisor::sandbox::host_dir::too_broad(&here) {
        anyhow::bail!(
            "the current directory is {what}, and a session works in the current directory: it would see all of \
             it. cd into a project first, pass --cwd {} to mean it, or --workspace fresh for an empty workspace",
            here.display()
        );
    }
    Ok(Some(here))
}

/// How a session of a bundle in `mode` sees its workspace `dir`, for the terminal and the TUI; `who` is the host
/// user its sandbox runs as when that is not the person running service-rs (see `SandboxUser::who_over`).
pub(super) fn describe(dir: &str, mode: SandboxMode, who: Option<String>) -> String {
    let access = match mode {
        SandboxMode::ReadOnly => "read-only",
        SandboxMode::WorkspaceWrite => "writable",
        SandboxMode::DangerFullAccess => "unconfined: the whole host",
    };
    match who.filter(|_| mode != SandboxMode::DangerFullAccess) {
        Some(who) => format!("{} ({access}, {who})", super::term_text::safe(dir)),
        None => format!("{} ({access})", super::term_text::safe(dir)),
    }
}
