//! Sandboxed workers started before their session ("spares"), at most one per bundle.
//!
//! A sandboxed worker's start is mostly bwrap's and the worker binary's own (7-10 ms on the bench machine, against
//! under 1 ms for the rest of a session create). With `RuntimeOptions::prestart_sandboxes` on (`serve` and the
//! TUI; not the one-shot `run`, which starts one session), every time a sandboxed worker starts for a bundle, a
//! spare for the same bundle is started in the background, up to its hello. Its workspace is
//! `run/workspaces/spare-<pid>-<uuid>/`, bound at the same place inside the sandbox as a session's (and its egress
//! socket's directory, if it has a proxy, `run/spare-<pid>-<uuid>/`). What a killed process left there is removed by
//! the next runtime that starts on the store (`sweep`).
//!
//! The next session of that bundle takes the spare: the session's new, empty workspace directory trades names with
//! the spare's in one exchange, so the sandbox's bind, which follows the directory, now shows the session's
//! workspace, and the session's workspace path is never missing meanwhile. The handshake is then finished with the
//! session's configuration. A session with a `cwd` of its own, a bundle changed since (another digest) or a spare
//! that died gets a worker started as usual. An idle spare costs a worker's memory (about 6 MiB) and its cgroups; at
//! most `MAX_SPARES` bundles have one, a bundle's spare of an earlier version is stopped when a newer one starts, and
//! all are stopped at shutdown.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use super::session::Session;
use super::spawn::{self, Started};
use super::Inner;
use crate::bundle::Bundle;

/// The spares of one runtime.
#[derive(Default)]
pub(crate) struct Prestarted {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    spares: HashMap<Key, Slot>,
    /// Set at shutdown: no spare is kept or started after it.
    closed: bool,
}

/// A bundle as installed: its root and digest.
type Key = (PathBuf, String);

/// Most bundles with a spare at once (each costs a worker's memory).
const MAX_SPARES: usize = 8;

enum Slot {
    Starting,
    Ready(Box<Spare>),
}

/// A started worker and its workspace directory.
struct Spare {
    started: Started,
    workspace: PathBuf,
    /// When it became ready: a spare no session took for long is stopped (see `expire`).
    ready_at: std::time::Instant,
}

impl Spare {
    /// Stops the worker and removes its cgroups and directories.
    async fn discard(self) {
        self.started.discard().await;
        let _ = std::fs::remove_dir_all(&self.workspace);
    }
}

/// Discards `spares` on a task of their own.
fn discard_later(spares: Vec<Spare>) {
    if !spares.is_empty() {
        tokio::spawn(async move {
            for spare in spares {
                spare.discard().await;
            }
        });
    }
}

/// Puts the spare's workspace directory `spare` at `workspace`, in place of the session's empty one, by exchanging
/// their names in one `renameat2(RENAME_EXCHANGE)`, then removes the session's old directory, now at `spare`. The
/// session's workspace is never missing: the turn's start-of-turn checkpoint, taken beside its first model call,
/// may be opening it as the worker starts. False, with both directories as they were, when the file system cannot
/// exchange names or the session's directory is no longer empty.
fn swap_in(spare: &Path, workspace: &Path) -> bool {
    use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
    let exchange = || {
        renameat2(
            AT_FDCWD,
            spare,
            AT_FDCWD,
            workspace,
            RenameFlags::RENAME_EXCHANGE,
        )
        .is_ok()
    };
    if !exchange() {
        return false;
    }
    // `remove_dir` refuses a directory that is no longer empty: its files go back where they were. Should that
    // exchange fail, the spare's directory stays in place and the session's files are left at `spare`.
    std::fs::remove_dir(spare).is_ok() || !exchange()
}

fn key(bundle: &Bundle) -> Key {
    (bundle.root.clone(), bundle.digest.clone())
}

impl Prestarted {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The spare for `session`'s bundle, with its workspace moved to the session's; None when there is none or it
    /// cannot serve this session.
    pub(crate) fn claim(&self, session: &Session) -> Option<Started> {
        let workspace = session.dir.join("workspace");
        let is_empty = |dir: &Path| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
        // A reloaded session may have files in its workspace; it keeps it, and the spare stays for another. A
        // subagent's sandbox is cut down to its parent's, which a spare of its bundle was not.
        if session.cwd() != workspace || !is_empty(&workspace) || session.record().parent.is_some()
        {
            return None;
        }
        let key = key(&session.bundle);
        let mut spare = {
            let mut state = self.state();
            match state.spares.remove(&key)? {
                Slot::Ready(spare) => *spare,
                starting @ Slot::Starting => {
                    state.spares.insert(key, starting);
                    return None;
                }
            }
        };
        if !spare.started.is_running() || !swap_in(&spare.workspace, &workspace) {
            discard_later(vec![spare]);
            return None;
        }
        Some(spare.started)
    }

    /// Starts a spare for `bundle` in the background, unless it has one (or one starting) or the runtime is
    /// shutting down.
    pub(crate) fn refill(rt: &Arc<Inner>, bundle: &Bundle) {
        let key = key(bundle);
        {
            let mut state = rt.prestarted.state();
            if state.closed || state.spares.contains_key(&key) {
                return;
            }
            // A spare of an earlier version of this bundle would never be taken.
            let stale: Vec<Key> = state
                .spares
                .iter()
                .filter(|((root, _), slot)| root == &key.0 && matches!(slot, Slot::Ready(_)))
                .map(|(k, _)| k.clone())
                .collect();
            let stale = stale
                .iter()
                .filter_map(|k| match state.spares.remove(k) {
                    Some(Slot::Ready(spare)) => Some(*spare),
                    _ => None,
                })
                .collect();
            discard_later(stale);
            if state.spares.len() >= MAX_SPARES {
                return;
            }
            state.spares.insert(key.clone(), Slot::Starting);
        }
        let (rt, bundle) = (rt.clone(), bundle.clone());
        tokio::spawn(async move {
            let name = super::sweep::spare_name();
            let workspace = rt.home.run_dir().join("workspaces").join(&name);
            let started = match std::fs::create_dir_all(&workspace) {
                Ok(()) => spawn::start(&rt, &name, &bundle, &workspace).await,
                Err(e) => Err(super::RuntimeError::io("cannot create", &workspace, e)),
            };
            let spare = match started {
                Ok(started) => Spare {
                    started,
                    workspace,
                    ready_at: std::time::Instant::now(),
                },
                Err(e) => {
                    tracing::debug!("no spare worker for {}: {e}", bundle.reference());
                    rt.prestarted.state().spares.remove(&key);
                    let _ = std::fs::remove_dir_all(rt.home.run_dir().join(&name));
                    let _ = std::fs::remove_dir_all(&workspace);
                    return;
                }
            };
            let unwanted = {
                let mut state = rt.prestarted.state();
                if state.closed {
                    state.spares.remove(&key);
                    Some(spare)
                } else {
                    state.spares.insert(key, Slot::Ready(Box::new(spare)));
                    None
                }
            };
            if let Some(spare) = unwanted {
                spare.discard().await;
            }
        });
    }

    /// How many spares are started and waiting for a session.
    pub(crate) fn ready(&self) -> usize {
        let state = self.state();
        state
            .spares
            .values()
            .filter(|slot| matches!(slot, Slot::Ready(_)))
            .count()
    }

    /// Stops the spares that have waited longer than `after`; returns how many. The next session of their bundle
    /// starts its worker as usual, and starts a spare again.
    pub(crate) async fn expire(&self, after: std::time::Duration) -> usize {
        let expired: Vec<Spare> = {
            let mut state = self.state();
            let old: Vec<Key> = state
                .spares
                .iter()
                .filter(|(_, slot)| matches!(slot, Slot::Ready(s) if s.ready_at.elapsed() >= after))
                .map(|(k, _)| k.clone())
                .collect();
            old.iter()
                .filter_map(|k| match state.spares.remove(k) {
                    Some(Slot::Ready(spare)) => Some(*spare),
                    _ => None,
                })
                .collect()
        };
        let count = expired.len();
        for spare in expired {
            tracing::info!(workspace = %spare.workspace.display(), "spare worker expired");
            spare.discard().await;
        }
        count
    }

    /// Stops every spare (waiting for them to exit) and starts no more.
    pub(crate) async fn close(&self) {
        let spares = {
            let mut state = self.state();
            state.closed = true;
            std::mem::take(&mut state.spares)
        };
        for slot in spares.into_values() {
            if let Slot::Ready(spare) = slot {
                spare.discard().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::swap_in;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn a_workspace_swapped_for_a_spares_is_never_missing_to_a_reader() {
        let dir = tempfile::tempdir().unwrap();
        let workspace = dir.path().join("workspace");
        std::fs::create_dir(&workspace).unwrap();
        let (stop, missing) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        // A checkpoint opens the workspace by its path, as this reader does.
        let reader = {
            let (workspace, stop, missing) = (workspace.clone(), stop.clone(), missing.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if std::fs::read_dir(&workspace).is_err() {
                        missing.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        for round in 0..300 {
            let spare = dir.path().join(format!("spare-{round}"));
            std::fs::create_dir(&spare).unwrap();
            std::fs::write(spare.join("from-the-spare"), "").unwrap();
            assert!(swap_in(&spare, &workspace), "round {round}");
            assert!(workspace.join("from-the-spare").is_file());
            assert!(!spare.exists(), "the session's old directory is removed");
            // The next round's session workspace: empty again, and never removed.
            std::fs::remove_file(workspace.join("from-the-spare")).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        reader.join().unwrap();
        assert_eq!(
            missing.load(Ordering::Relaxed),
            0,
            "the workspace went missing"
        );
    }

    #[test]
    fn a_spare_is_not_swapped_in_over_a_workspace_that_is_no_longer_empty() {
        let dir = tempfile::tempdir().unwrap();
        let (workspace, spare) = (dir.path().join("workspace"), dir.path().join("spare"));
        for (path, file) in [(&workspace, "mine"), (&spare, "from-the-spare")] {
            std::fs::create_dir(path).unwrap();
            std::fs::write(path.join(file), file).unwrap();
        }
        assert!(!swap_in(&spare, &workspace));
        assert_eq!(
            std::fs::read_to_string(workspace.join("mine")).unwrap(),
            "mine"
        );
        assert!(spare.join("from-the-spare").is_file());
        assert!(!workspace.join("from-the-spare").exists());
    }
}
