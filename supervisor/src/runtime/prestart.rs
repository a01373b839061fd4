//! Sandboxed workers started before their session ("spares"), at most one per bundle.
//!
//! A sandboxed worker's start is mostly bwrap's and the worker binary's own (7-10 ms on the bench machine, against
//! under 1 ms for the rest of a session create). With `RuntimeOptions::prestart_sandboxes` on (`serve` and the
//! TUI; not the one-shot `run`, which starts one session), every time a sandboxed worker starts for a bundle, a
//! spare for the same bundle is started in the background, up to its hello. Its socket directory is
//! `run/spare-<uuid>/` and its workspace `run/workspaces/spare-<uuid>/`, bound at the same places inside the
//! sandbox as a session's.
//!
//! The next session of that bundle takes the spare: the session's new, empty workspace directory is replaced by the
//! spare's (a rename, so the sandbox's bind, which follows the directory, now shows the session's workspace), and
//! the handshake is finished with the session's configuration. A session with a `cwd` of its own, a bundle changed
//! since (another digest) or a spare that died gets a worker started as usual. An idle spare costs a worker's
//! memory (about 6 MiB) and its cgroups; at most `MAX_SPARES` bundles have one, a bundle's spare of an earlier
//! version is stopped when a newer one starts, and all are stopped at shutdown.

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

/// A started worker and its workspace directory; both are removed when it is dropped unclaimed (a claimed spare's
/// workspace has moved to its session, and its actor removes its socket directory).
struct Spare {
    started: Option<Started>,
    workspace: PathBuf,
}

impl Drop for Spare {
    fn drop(&mut self) {
        if let Some(started) = self.started.take() {
            let run_dir = started.run_dir.clone();
            // Kills the worker (`kill_on_drop`) before its directories go.
            drop(started);
            let _ = std::fs::remove_dir_all(&run_dir);
        }
        let _ = std::fs::remove_dir_all(&self.workspace);
    }
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
        if Path::new(&session.record().cwd) != workspace {
            return None;
        }
        let key = key(&session.bundle);
        let mut spare = {
            let mut state = self.state();
            match state.spares.remove(&key)? {
                Slot::Ready(spare) => spare,
                starting @ Slot::Starting => {
                    state.spares.insert(key, starting);
                    return None;
                }
            }
        };
        if !spare.started.as_mut()?.is_running() {
            return None;
        }
        // The session's workspace is new, so empty: `remove_dir` refuses anything else.
        std::fs::remove_dir(&workspace).ok()?;
        if std::fs::rename(&spare.workspace, &workspace).is_err() {
            let _ = std::fs::create_dir(&workspace);
            return None;
        }
        spare.started.take()
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
            state
                .spares
                .retain(|(root, _), slot| root != &key.0 || matches!(slot, Slot::Starting));
            if state.spares.len() >= MAX_SPARES {
                return;
            }
            state.spares.insert(key.clone(), Slot::Starting);
        }
        let (rt, bundle) = (rt.clone(), bundle.clone());
        tokio::spawn(async move {
            let name = format!("spare-{}", uuid::Uuid::new_v4());
            let workspace = rt.home.run_dir().join("workspaces").join(&name);
            let started = match std::fs::create_dir_all(&workspace) {
                Ok(()) => spawn::start(&rt, &name, &bundle, &workspace).await,
                Err(e) => Err(super::RuntimeError::io("cannot create", &workspace, e)),
            };
            if let Err(e) = &started {
                tracing::debug!("no spare worker for {}: {e}", bundle.reference());
                let _ = std::fs::remove_dir_all(rt.home.run_dir().join(&name));
            }
            let spare = Spare {
                started: started.ok(),
                workspace,
            };
            let mut state = rt.prestarted.state();
            if spare.started.is_some() && !state.closed {
                state.spares.insert(key, Slot::Ready(Box::new(spare)));
            } else {
                state.spares.remove(&key);
                drop(state);
                drop(spare);
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

    /// Stops every spare and starts no more.
    pub(crate) fn close(&self) {
        let spares = {
            let mut state = self.state();
            state.closed = true;
            std::mem::take(&mut state.spares)
        };
        drop(spares);
    }
}
