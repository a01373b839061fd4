//! Whether the parent's rules let an `Agent` call start its subagent, decided here rather than in the worker, which
//! runs with the model's commands and may have been taken over. `Agent` rules are agent.yaml's like any tool's
//! (`{tool: Agent, match: reviewer}` or `Agent(reviewer)`, the key being the subagent's name), and `default`
//! covers subagents no rule names. An `ask` is asked here, on the parent's stream, as a worker's tool call is.

use service_ipc::{ApprovalDecision, EventPayload, PermissionAction};
use tokio::sync::mpsc;

use super::super::approvals::{Grant, Pending, Reply};
use super::super::session::Session;
use super::super::ServiceRuntime;
use super::Call;
use crate::bundle::agent::SUBAGENT_TOOL;

/// Ok when the subagent may start; Err with what the model is told when it may not.
pub(super) async fn decide(
    rt: &ServiceRuntime,
    parent: &Session,
    call: &Call,
    ended: &tokio_util::sync::CancellationToken,
) -> Result<(), String> {
    let name = &call.subagent;
    let permissions = &parent.bundle.agent.permissions;
    let (action, rule) = service_worker::permissions::evaluate(permissions, SUBAGENT_TOOL, name);
    let by = || rule.clone().unwrap_or_else(|| "the default action".into());
    match action {
        PermissionAction::Allow => return Ok(()),
        PermissionAction::Deny => {
            return Err(format!(
                "subagent \"{name}\" was not started: agent.yaml denies it ({})",
                by()
            ))
        }
        PermissionAction::Ask => {}
    }
    let grant = Grant::Tool {
        tool: SUBAGENT_TOOL.into(),
        key: name.clone(),
    };
    if parent.allowed_always(&grant) {
        return Ok(());
    }
    let request_id = uuid::Uuid::new_v4().to_string();
    let (tx, mut answer) = mpsc::channel(1);
    rt.inner.approvals.insert(
        request_id.clone(),
        Pending {
            session_id: parent.id.clone(),
            turn_id: call.turn_id.clone(),
            grant,
            reply: Reply::Supervisor(tx),
        },
    );
    parent.emit(EventPayload::PermissionRequested {
        turn_id: call.turn_id.clone(),
        request_id,
        call_id: call.call_id.clone(),
        tool: SUBAGENT_TOOL.into(),
        summary: name.clone(),
        rule,
        diff: None,
        project_rule: None,
        warning: None,
        child_session_id: None,
    });
    let decision = tokio::select! {
        d = answer.recv() => d,
        _ = ended.cancelled() => None,
    };
    match decision {
        Some(
            ApprovalDecision::AllowOnce
            | ApprovalDecision::AllowAlways
            | ApprovalDecision::AllowProject,
        ) => Ok(()),
        Some(ApprovalDecision::Deny) => Err(format!(
            "subagent \"{name}\" was not started: the operator denied it"
        )),
        None => Err("not started: the turn ended while waiting for approval".into()),
    }
}
