//! What an operator needs of a running runtime beyond sessions and turns: its metrics, idle workers reaped, and
//! installed bundles removed while sessions may use them.

use std::sync::Arc;
use std::time::Duration;

use super::error::{Result, RuntimeError};
use super::session::Session;
use super::ServiceRuntime;

impl ServiceRuntime {
    /// The runtime's metrics as they stand, for code that only counts.
    pub fn counters(&self) -> &Arc<crate::metrics::Metrics> {
        &self.inner.metrics
    }

    /// The runtime's metrics, with the gauges of current state brought up to date.
    pub fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        let m = &self.inner.metrics;
        let sessions = self.sessions().clone();
        m.sessions_live.set(sessions.len() as i64);
        let bytes: u64 = sessions.values().map(|s| s.journal.bytes()).sum();
        m.journal_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        m.spare_workers.set(self.spare_workers() as i64);
        m.clone()
    }

    /// Removes an installed bundle. A live session of it (a worker running or a turn) makes this refuse, naming
    /// the sessions, unless `force`, which stops them first; their records stay, and cannot run again until the
    /// bundle is installed again. Returns what was removed.
    pub async fn remove_bundle(
        &self,
        reference: &str,
        force: bool,
    ) -> Result<crate::bundle::BundleInfo> {
        let bundle = crate::bundle::resolve(&self.inner.home, reference)?;
        let users: Vec<Arc<Session>> = self
            .sessions()
            .values()
            .filter(|s| s.bundle.root == bundle.root)
            .cloned()
            .collect();
        let mut live = Vec::new();
        for session in users {
            let working = session
                .worker
                .lock()
                .await
                .as_ref()
                .is_some_and(|w| w.is_alive());
            if working || session.active_turn().is_some() {
                live.push(session);
            }
        }
        if !live.is_empty() && !force {
            return Err(RuntimeError::BundleInUse {
                reference: bundle.reference(),
                sessions: live.iter().map(|s| s.id.clone()).collect(),
            });
        }
        for session in &live {
            self.stop_session(session, "its bundle was removed").await;
        }
        crate::bundle::store::remove(&self.inner.home, &bundle)?;
        tracing::info!(bundle = %bundle.reference(), stopped = live.len(), "bundle removed");
        Ok(bundle.info())
    }

    /// Stops the workers of sessions that have been idle (no turn, no command, no event) for `idle` or longer, and
    /// the spare workers that waited that long; returns how many stopped. A reaped session keeps everything but its
    /// worker: its next turn or command starts one again, and the history is on disk.
    pub async fn reap_idle(&self, idle: Duration) -> usize {
        let sessions: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        let mut reaped = 0;
        for session in sessions {
            let busy = |s: &Session| s.active_turn().is_some() || s.commands_running();
            if busy(&session) || session.idle_for() < idle {
                continue;
            }
            // A turn or command starting now holds the lock; one that started before it is seen as busy below.
            let Ok(mut slot) = session.worker.try_lock() else {
                continue;
            };
            if busy(&session) {
                continue;
            }
            let Some(worker) = slot.take() else { continue };
            drop(slot);
            tracing::info!(session = %session.id, idle_s = session.idle_for().as_secs(), "idle worker reaped");
            self.inner.metrics.workers_reaped.inc();
            worker.shutdown(Duration::from_secs(2)).await;
            self.inner.store.release(&session.id).await;
            reaped += 1;
        }
        reaped + self.inner.prestarted.expire(idle).await
    }
}
