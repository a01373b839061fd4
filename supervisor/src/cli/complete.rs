//! Shell completion through clap_complete's dynamic engine: the shell asks `service-rs` itself (`COMPLETE=bash
//! service-rs -- …`), so bundle references and session ids are completed from the local store as it is now.

use std::ffi::OsStr;
use std::io::Write;

use clap_complete::engine::{ArgValueCompleter, CompletionCandidate};
use clap_complete::env::{EnvCompleter, Shells};
use service_supervisor::runtime::SessionRecord;
use service_supervisor::ServiceHome;

/// Most session ids offered at once; a store can hold thousands.
const MAX_SESSIONS: usize = 200;

/// Answers a completion request and exits when the shell made one (`COMPLETE` is set); returns otherwise.
pub fn answer_if_asked() {
    clap_complete::CompleteEnv::with_factory(<super::Cli as clap::CommandFactory>::command)
        .complete();
}

/// Writes the script that registers `service-rs`'s completions with `shell` (what `COMPLETE=<shell> service-rs`
/// prints).
pub fn write_registration(shell: clap_complete::Shell, out: &mut dyn Write) -> anyhow::Result<()> {
    let name = shell.to_string();
    let shells = Shells::builtins();
    let completer: &dyn EnvCompleter = shells
        .completer(&name)
        .ok_or_else(|| anyhow::anyhow!("no completion support for {name}"))?;
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "service-rs".into());
    completer.write_registration("COMPLETE", "service-rs", "service-rs", &exe, out)?;
    Ok(())
}

/// Completes installed bundle references: the short name of a local bundle and every full reference.
pub fn bundles() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| -> Vec<CompletionCandidate> {
        let prefix = current.to_string_lossy();
        let Some(home) = ServiceHome::from_env() else {
            return Vec::new();
        };
        let installed =
            service_supervisor::bundle::store::list_installed(&home).unwrap_or_default();
        let mut refs: Vec<String> = installed
            .iter()
            .filter(|b| b.namespace == "local")
            .map(|b| b.id.clone())
            .chain(installed.iter().map(|b| b.reference()))
            .filter(|r| r.starts_with(prefix.as_ref()))
            .collect();
        refs.dedup();
        refs.into_iter().map(CompletionCandidate::new).collect()
    })
}

/// Completes session ids, newest first, with each session's title as help.
pub fn sessions() -> ArgValueCompleter {
    ArgValueCompleter::new(|current: &OsStr| -> Vec<CompletionCandidate> {
        let prefix = current.to_string_lossy();
        let Some(home) = ServiceHome::from_env() else {
            return Vec::new();
        };
        let Ok(dirs) = std::fs::read_dir(home.sessions()) else {
            return Vec::new();
        };
        let mut found: Vec<SessionRecord> = dirs
            .flatten()
            .filter(|d| d.file_name().to_string_lossy().starts_with(prefix.as_ref()))
            .take(MAX_SESSIONS)
            .filter_map(|d| SessionRecord::load(&d.path().join("session.json")).ok())
            .collect();
        found.sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
        found
            .into_iter()
            .map(|r| {
                let help = r.title.unwrap_or_else(|| r.bundle_ref.clone());
                CompletionCandidate::new(r.id).help(Some(help.into()))
            })
            .collect()
    })
}
