//! The egress proxy's view of a session: where its events go, which turn is running, and how an unlisted host is
//! put to the operator (the approval routing tools use: `network_permission_requested`, then `POST
//! /approvals/{id}`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use service_ipc::{ApprovalDecision, EventPayload};
use tokio::sync::mpsc;

use super::approvals::{Grant, Pending, Reply};
use super::session::Session;
use super::Inner;
use crate::egress::{Answer, Sink};

/// A session, held weakly: the proxy lives inside the session's worker and must not keep it alive.
///
/// The journal quota bounds what the proxy writes, between turns too (a stdio MCP server's connections come while
/// no turn runs). Once the journal holds the quota, network events are counted instead of journaled and the proxy
/// turns new connections away; the count is journaled once, as `network_refusals_suppressed`, when the proxy stops.
pub(super) struct SessionSink {
    session: Weak<Session>,
    rt: Weak<Inner>,
    quota: u64,
    suppressed: AtomicU64,
}

impl SessionSink {
    /// The sink of `session`.
    pub fn new(rt: &Arc<Inner>, session: &Arc<Session>) -> Self {
        SessionSink {
            session: Arc::downgrade(session),
            rt: Arc::downgrade(rt),
            quota: rt.options.journal_quota,
            suppressed: AtomicU64::new(0),
        }
    }

    fn full(&self, session: &Session) -> bool {
        session.journal.bytes() >= self.quota
    }
}

impl Sink for SessionSink {
    fn record(&self, payload: EventPayload) {
        if let Some(session) = self.session.upgrade() {
            if self.full(&session) {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
            } else {
                session.emit(payload);
            }
        }
    }

    fn admits(&self) -> bool {
        let Some(session) = self.session.upgrade() else {
            return false;
        };
        let full = self.full(&session);
        if full {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
        }
        !full
    }

    fn close(&self) {
        let count = self.suppressed.swap(0, Ordering::Relaxed);
        if let (true, Some(session)) = (count > 0, self.session.upgrade()) {
            session.emit(EventPayload::NetworkRefusalsSuppressed {
                count,
                quota: self.quota,
            });
        }
    }

    fn turn(&self) -> Option<String> {
        self.session.upgrade()?.active_turn()
    }

    fn ask(
        &self,
        turn_id: String,
        host: String,
        port: u16,
        addresses: Vec<std::net::IpAddr>,
    ) -> BoxFuture<'static, Answer> {
        let (session, rt) = (self.session.upgrade(), self.rt.upgrade());
        Box::pin(async move {
            let (Some(session), Some(rt)) = (session, rt) else {
                return Answer::Deny("its session has ended".into());
            };
            let mut shown: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
            shown.sort();
            // The grant is for these addresses: if the name later resolves elsewhere, the operator is asked again.
            let grant = Grant::Host {
                host: host.clone(),
                port,
                addresses: shown.clone(),
            };
            if session.allowed_always(&grant) {
                return Answer::Allow("approval");
            }
            let request_id = uuid::Uuid::new_v4().to_string();
            let (tx, mut rx) = mpsc::channel(1);
            rt.approvals.insert(
                request_id.clone(),
                Pending {
                    session_id: session.id.clone(),
                    turn_id: turn_id.clone(),
                    grant,
                    reply: Reply::Network(tx),
                },
            );
            session.emit(EventPayload::NetworkPermissionRequested {
                turn_id,
                request_id,
                host,
                port,
                addresses: shown,
                internal: addresses
                    .iter()
                    .any(|a| crate::egress::resolve::is_internal(*a)),
                child_session_id: None,
            });
            drop(session);
            match rx.recv().await {
                // A host has no project rule to keep: allow_project allows it as allow_always does.
                Some(
                    ApprovalDecision::AllowOnce
                    | ApprovalDecision::AllowAlways
                    | ApprovalDecision::AllowProject,
                ) => Answer::Allow("approval"),
                Some(ApprovalDecision::Deny) => Answer::Deny("the operator denied it".into()),
                None => Answer::Deny("its turn ended before anyone decided".into()),
            }
        })
    }
}
