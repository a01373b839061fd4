//! Which node runs a session's worker, when nodes share a store (see [`super::store`]): a session is claimed
//! before anything that needs its worker, and this node's claims are renewed while their workers live.

use std::sync::Arc;

use super::error::{Result, RuntimeError};
use super::session::Session;
use super::{store, ServiceRuntime};

impl ServiceRuntime {
    /// Makes sure this node may run `session`: with a shared store, takes the session's lease (another live
    /// node's holding is [`RuntimeError::OwnedElsewhere`]). Taking a session fails the turn its last owner was
    /// running, if any, with `node_lost`, after bringing the record and the journal up to the store's; a lease
    /// this node held since it last did so is only renewed.
    pub(super) async fn claim(&self, session: &Arc<Session>) -> Result<()> {
        let store = &self.inner.store;
        if !store.shared() {
            return Ok(());
        }
        let slot = session.worker.lock().await;
        if slot.as_ref().is_some_and(|w| w.is_alive()) || session.active_turn().is_some() {
            return Ok(());
        }
        match store.claim(&session.id).await? {
            store::Claim::Lost { node_id } => {
                self.inner.metrics.node_lost(&node_id);
                Err(RuntimeError::WorkspaceLost {
                    session_id: session.id.clone(),
                    node_id,
                })
            }
            store::Claim::Elsewhere { node_id, url } => Err(RuntimeError::OwnedElsewhere {
                session_id: session.id.clone(),
                node_id,
                url,
            }),
            store::Claim::Mine {
                taken_from,
                renewed,
            } => {
                // Nobody else has held the session since this node last brought it up to the store's: there is
                // nothing to read back.
                if renewed && session.synced_under_claim() {
                    return Ok(());
                }
                // What this node wrote before must be in the store before the store's record replaces it.
                session.journal.stored().await;
                let record = store
                    .load(&session.id)
                    .await?
                    .ok_or_else(|| RuntimeError::SessionNotFound(session.id.clone()))?;
                session.adopt_record(record);
                session.adopt_grants(store.grants(&session.id).await?);
                session.journal.catch_up().await?;
                session.mark_synced_under_claim();
                drop(slot);
                match taken_from {
                    Some(node) => {
                        self.inner.metrics.takeovers.inc();
                        self.inner.metrics.node_lost(&node);
                        session
                            .repair_lost_turn(
                                "node_lost",
                                &format!(
                                    "node {node}, which ran this turn, stopped answering; the turn was abandoned"
                                ),
                            )
                            .await
                    }
                    None => session
                        .repair_lost_turn(
                            "supervisor_restarted",
                            "the supervisor stopped while this turn ran; the turn was abandoned",
                        )
                        .await,
                }
            }
        }
    }

    /// Why an approval request that is not pending on this node cannot be answered here. With a shared store, the
    /// request may belong to a session another node runs: the error names that node, and the server forwards the
    /// answer there. A session no live node holds has lost the turn that asked (this node takes it over and records
    /// that), so the request is no longer pending.
    pub(super) async fn approval_elsewhere(&self, request_id: &str) -> RuntimeError {
        let not_found = || RuntimeError::ApprovalNotFound(request_id.to_string());
        let session_id = match self.inner.store.approval_session(request_id).await {
            Ok(Some(id)) => id,
            Ok(None) => return not_found(),
            Err(e) => return e,
        };
        let session = match self.session(&session_id).await {
            Ok(s) => s,
            Err(RuntimeError::SessionNotFound(_)) => {
                return RuntimeError::ApprovalSessionGone(request_id.to_string())
            }
            Err(e) => return e,
        };
        match self.claim(&session).await {
            Ok(()) => RuntimeError::ApprovalNotPending(request_id.to_string()),
            Err(e) => e,
        }
    }

    /// Keeps this node's session leases alive while their workers run, when the store has leases. When the store
    /// cannot be reached for a whole lease, another node may take the sessions: the workers here stop first.
    pub fn keep_claims(&self) {
        let Some(lease) = self.inner.store.lease() else {
            return;
        };
        let rt = self.clone();
        tokio::spawn(async move {
            let mut renewed = std::time::Instant::now();
            // The first renewal is at once: it also tells the other nodes where this one serves (see
            // `Store::renew`), before a sandbox of theirs could be started without knowing it.
            let mut pause = std::time::Duration::ZERO;
            loop {
                tokio::time::sleep(pause).await;
                pause = lease / 3;
                let sessions: Vec<Arc<Session>> = rt.sessions().values().cloned().collect();
                let mut live = Vec::new();
                for s in &sessions {
                    if s.runs_here().await {
                        live.push(s.id.clone());
                    }
                }
                match rt.inner.store.renew(&live).await {
                    Ok(()) => {
                        renewed = std::time::Instant::now();
                        rt.inner.metrics.leases_held.set(live.len() as i64);
                    }
                    Err(e) if renewed.elapsed() + lease / 3 >= lease => {
                        tracing::error!("session leases not renewed for {lease:?} ({e}); stopping this node's workers");
                        for s in &sessions {
                            rt.stop_session(s, "this node lost its lease on the session")
                                .await;
                        }
                    }
                    Err(e) => tracing::warn!("session leases not renewed: {e}"),
                }
            }
        });
    }
}
