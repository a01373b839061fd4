//! Decisions on permission requests: the answer reaches whoever waits for it (a worker's paused call, the egress
//! proxy, a subagent about to start), with a denial's reason, and `allow_project` keeps its rule for the project.

use service_ipc::{ApprovalDecision, EventPayload, ToWorker};

use super::error::{Result, RuntimeError};
use super::session::Session;
use super::{approvals, project_rules, ServiceRuntime};

impl ServiceRuntime {
    /// Resolves a pending approval request.
    pub async fn resolve_approval(
        &self,
        request_id: &str,
        decision: ApprovalDecision,
    ) -> Result<()> {
        self.resolve_approval_with(request_id, decision, None).await
    }

    /// [`ServiceRuntime::resolve_approval`] with, for a denial, the reason the model reads in the call's result
    /// (cut at [`approvals::MAX_REASON_CHARS`]; ignored with an allow).
    pub async fn resolve_approval_with(
        &self,
        request_id: &str,
        decision: ApprovalDecision,
        reason: Option<String>,
    ) -> Result<()> {
        let reason = approvals::reason(decision, reason);
        let pending = match self.inner.approvals.take(request_id) {
            Err(RuntimeError::ApprovalNotFound(_)) if self.inner.store.shared() => {
                return Err(self.approval_elsewhere(request_id).await);
            }
            taken => taken?,
        };
        tracing::info!(session = %pending.session_id, request_id, decision = ?decision, "approval resolved");
        let session = self
            .session(&pending.session_id)
            .await
            .map_err(|_| RuntimeError::ApprovalSessionGone(request_id.to_string()))?;
        let decision = match decision {
            ApprovalDecision::AllowProject => self.keep_for_project(&session, &pending.grant),
            other => other,
        };
        if matches!(
            decision,
            ApprovalDecision::AllowAlways | ApprovalDecision::AllowProject
        ) && session.grant_always(pending.grant.clone())
        {
            if let Err(e) = self.inner.store.grant(&session.id, &pending.grant).await {
                tracing::warn!(session = %session.id, "the allow_always grant holds on this node only: {e}");
            }
        }
        // The event first: the worker acts on the decision at once, and its tool events must come after it.
        session.emit(EventPayload::ApprovalResolved {
            turn_id: pending.turn_id,
            request_id: request_id.to_string(),
            decision,
            reason: reason.clone(),
            child_session_id: None,
            hook: None,
        });
        let sent = match pending.reply {
            approvals::Reply::Worker(worker) => worker
                .send(ToWorker::ApprovalDecision {
                    request_id: request_id.to_string(),
                    decision,
                    reason,
                    hook: None,
                })
                .await
                .is_ok(),
            approvals::Reply::Network(waiting) | approvals::Reply::Supervisor(waiting) => {
                waiting.send(decision).await.is_ok()
            }
        };
        if sent {
            Ok(())
        } else {
            Err(RuntimeError::WorkerUnavailable(
                "the worker or connection waiting for this decision has gone".into(),
            ))
        }
    }

    /// Keeps the rule offered for `grant` for the session's project; `allow_always` where none can be kept (no
    /// rule for this request, a session in a workspace of the store's, a store that cannot be written).
    fn keep_for_project(&self, session: &Session, grant: &approvals::Grant) -> ApprovalDecision {
        let dir = session.cwd();
        let approvals::Grant::Tool { tool, key } = grant else {
            return ApprovalDecision::AllowAlways;
        };
        let rule =
            project_rules::suggest(tool, key).filter(|_| !dir.starts_with(self.inner.home.root()));
        let Some(rule) = rule else {
            return ApprovalDecision::AllowAlways;
        };
        match project_rules::keep(&self.inner.home, &session.tenant(), &dir, &rule) {
            Ok(()) => {
                tracing::info!(session = %session.id, rule, dir = %dir.display(), "approval kept for the project");
                ApprovalDecision::AllowProject
            }
            Err(e) => {
                tracing::warn!(session = %session.id, "the project approval was not kept, only this session's: {e}");
                ApprovalDecision::AllowAlways
            }
        }
    }
}
