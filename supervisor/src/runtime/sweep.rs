//! What a killed supervisor leaves in its store's `run/` directory, removed when a runtime starts: spare workers'
//! workspaces and egress socket directories (`run/workspaces/spare-<pid>-<uuid>/`, `run/spare-<pid>-<uuid>/`) of a
//! process that is gone, and the egress socket directories of sessions (`run/<session id>/`) no process runs and
//! that are older than a minute (another process on the store may be starting that session's worker right now).
//! Only this store's `run/` is looked at.

use std::path::Path;
use std::time::Duration;

use crate::home::ServiceHome;

/// What is younger than this is left alone: a worker being started may not hold its session's lease yet.
const SETTLED: Duration = Duration::from_secs(60);

/// The name of a spare made by this process: its pid tells a later sweep whether its maker still runs.
pub(crate) fn spare_name() -> String {
    format!("spare-{}-{}", std::process::id(), uuid::Uuid::new_v4())
}

/// Removes what killed processes left under `home`'s `run/`.
pub(crate) fn leftovers(home: &ServiceHome) {
    let run = home.run_dir();
    for dir in [run.join("workspaces"), run.clone()] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            let gone = if let Some(rest) = name.strip_prefix("spare-") {
                !maker_runs(rest)
            } else {
                // A session's egress socket directory, with no process holding the session.
                dir == run
                    && uuid::Uuid::parse_str(&name).is_ok()
                    && settled(&path)
                    && !crate::runtime::store::files_lock::held_elsewhere(
                        &home.sessions().join(&name),
                    )
            };
            if gone && entry.file_type().is_ok_and(|t| t.is_dir()) {
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    tracing::debug!(
                        "cannot remove {}, left by a stopped process: {e}",
                        path.display()
                    );
                }
            }
        }
    }
}

/// Whether the process that made the spare `<pid>-<uuid>` still runs; a spare of an older layout (no pid) has none.
fn maker_runs(rest: &str) -> bool {
    let Some((pid, _)) = rest.split_once('-') else {
        return false;
    };
    match pid.parse::<u32>() {
        Ok(pid) if pid == std::process::id() => true,
        Ok(pid) => Path::new(&format!("/proc/{pid}")).exists(),
        Err(_) => false,
    }
}

fn settled(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age >= SETTLED)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spare_names_its_maker_and_only_a_live_maker_keeps_it() {
        let name = spare_name();
        assert!(maker_runs(name.strip_prefix("spare-").unwrap()));
        assert!(!maker_runs(
            "4194304999-0e2b6b1c-8d8f-4d57-9b1e-3b1f0c7d2a11"
        ));
        assert!(
            !maker_runs("0e2b6b1c-8d8f-4d57-9b1e-3b1f0c7d2a11"),
            "an older layout's"
        );
    }
}
