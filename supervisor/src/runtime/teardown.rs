//! Sessions stopped and deleted, and the runtime's end: [`ServiceRuntime::leave`] for a process about to exit,
//! [`ServiceRuntime::shutdown`] for one that lets running turns end.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use service_ipc::ToWorker;

use super::error::{Result, RuntimeError};
use super::session::Session;
use super::ServiceRuntime;

impl ServiceRuntime {
    /// Stops the session's worker, forgets its grants and deletes its files, and those of its subagents' sessions.
    pub async fn delete_session(&self, id: &str) -> Result<()> {
        let session = self.session(id).await?;
        match self.claim(&session).await {
            // Its files went with its home node: the record and the journal are what is left to delete.
            Ok(()) | Err(RuntimeError::WorkspaceLost { .. }) => {}
            Err(e) => return Err(e),
        }
        // Its subagents' sessions go with it, theirs first.
        let children: Vec<String> = self
            .inner
            .store
            .list()
            .await?
            .into_iter()
            .filter(|r| r.parent.as_ref().is_some_and(|p| p.session_id == id))
            .map(|r| r.id)
            .collect();
        for child in children {
            match Box::pin(self.delete_session(&child)).await {
                Ok(()) | Err(RuntimeError::SessionNotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        // First, so its pending requests answer "session deleted" rather than "turn ended".
        self.inner.approvals.drop_session(id);
        self.stop_session(&session, "the session was deleted").await;
        self.sessions().remove(id);
        self.forget_checkpoints(&session);
        self.inner.store.delete(id).await?;
        match std::fs::remove_dir_all(&session.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(RuntimeError::io("cannot delete", &session.dir, e))
            }
            _ => Ok(()),
        }
    }

    pub(super) async fn stop_session(&self, session: &Arc<Session>, reason: &str) {
        let worker = session.worker.lock().await.take();
        if let Some(turn_id) = session.active_turn() {
            self.inner.approvals.drop_turn(&turn_id);
            if let Some(w) = worker.as_ref().filter(|w| w.is_alive()) {
                // Let the turn end itself (tools killed, history kept), briefly; then fail it.
                session.set_stop_reason(&turn_id, "shutdown", reason);
                let _ = w
                    .send(ToWorker::Interrupt {
                        turn_id: turn_id.clone(),
                    })
                    .await;
                for _ in 0..40 {
                    if session.active_turn().is_none() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            session.fail_active_turn("shutdown", reason);
        }
        if let Some(w) = worker {
            w.shutdown(Duration::from_secs(2)).await;
        }
        self.inner.store.release(&session.id).await;
    }

    /// Ends the runtime of a process about to exit, without waiting for its workers: when no turn runs, each is
    /// killed (its sandbox goes with it) and its socket directory removed, and the cgroups it leaves are returned,
    /// for the caller to have removed once they are empty. A running turn, or a session with `SessionEnd` hooks,
    /// gets the whole of [`Self::shutdown`].
    pub async fn leave(&self, reason: &str) -> Vec<PathBuf> {
        let sessions: Vec<_> = self.sessions().values().cloned().collect();
        let ends = |s: &Session| {
            s.hooks_given()
                .iter()
                .any(|h| h.event == service_ipc::HookEvent::SessionEnd)
        };
        if sessions
            .iter()
            .any(|s| s.active_turn().is_some() || ends(s))
        {
            self.shutdown(reason).await;
            return Vec::new();
        }
        self.inner.prestarted.close().await;
        let mut cgroups = Vec::new();
        for session in &sessions {
            if let Some(worker) = session.worker.lock().await.take() {
                worker.kill();
                let (dirs, run_dir) = &worker.remains;
                cgroups.extend(dirs.iter().cloned());
                let _ = std::fs::remove_dir_all(run_dir);
            }
            self.inner.store.release(&session.id).await;
        }
        // What the turns spent is in the ledger before the process ends; written while the checkpoints settle.
        tokio::join!(settle_checkpoints(&sessions), self.inner.tenancy.flush());
        cgroups
    }

    /// Stops every worker; running turns end with an error saying `reason`.
    pub async fn shutdown(&self, reason: &str) {
        self.inner.prestarted.close().await;
        let sessions: Vec<_> = self.sessions().values().cloned().collect();
        for s in &sessions {
            self.stop_session(s, reason).await;
        }
        settle_checkpoints(&sessions).await;
        self.inner.tenancy.flush().await;
    }
}

/// Waits for the end checkpoints of turns that ended: they are part of the turn, so a process exits once they are
/// written.
async fn settle_checkpoints(sessions: &[Arc<Session>]) {
    for s in sessions {
        if let Some(checkpoints) = s.checkpoints.get().cloned().flatten() {
            let _ = tokio::task::spawn_blocking(move || checkpoints.settle()).await;
        }
    }
}
