//! Subagents: an `Agent` call of a session's model runs as a child session.
//!
//! The worker only asks (`SubagentCall`); everything else is decided here from the supervisor's own state: whether
//! the parent's agent.yaml declares the subagent, how deep sessions may nest, how many children of one parent run at
//! once ([`ceiling::MAX_RUNNING`]; the rest wait), and the child's confinement, its bundle's cut down to the parent's
//! ([`ceiling`]). The child is a session like any other, with its own worker, sandbox and journal, whose record
//! names its parent (`ParentLink`); it works in the parent's workspace, or in a copy with `isolation: copy`.
//!
//! While the child's turn runs, the parent's stream carries `subagent_started`, the child's approval requests (the
//! same ids, answered through the same `POST /approvals/{id}`, with `child_session_id`), and `subagent_finished`
//! with the child's usage, which counts towards the parent's turn. The child's answer, or its error, is the `Agent`
//! call's result: a failed child never fails the parent. When the parent's turn ends, however it ends, its running
//! children are interrupted.

pub(crate) mod ceiling;
pub(super) mod copy;
mod permission;

use std::sync::Arc;

use futures::StreamExt;
use service_ipc::{
    EventPayload, ModelRef, PermissionAction, Task, ToWorker, ToolCallStatus, TurnOverrides,
    TurnStatus,
};
use tokio::sync::mpsc;

use super::record::ParentLink;
use super::session::Session;
use super::{Inner, ServiceRuntime};
use crate::bundle::subagents::{Isolation, SubagentEntry};
use crate::bundle::{self, Bundle, Origin};

/// `max_subagent_depth` when config.toml does not set it: children, and their children, but no deeper.
pub(crate) const DEFAULT_MAX_DEPTH: u32 = 2;

/// One `Agent` call, as the worker asked it.
pub(super) struct Call {
    /// The worker's id for the answer.
    pub request_id: String,
    /// The parent's turn.
    pub turn_id: String,
    /// The `Agent` tool call.
    pub call_id: String,
    /// The subagent's name.
    pub subagent: String,
    /// The child's prompt.
    pub prompt: String,
}

/// Runs `call` for `parent` and sends the answer to its worker over `tx`.
pub(super) fn start(
    rt: Arc<Inner>,
    parent: Arc<Session>,
    tx: mpsc::Sender<ToWorker>,
    call: Call,
) -> tokio::task::AbortHandle {
    tokio::spawn(async move {
        let rt = ServiceRuntime { inner: rt };
        let answer = match parent.turn_ended(&call.turn_id) {
            None => Err("the turn ended before the subagent started".to_string()),
            Some(ended) => match permission::decide(&rt, &parent, &call, &ended).await {
                Ok(()) => run(&rt, &parent, &call, ended).await,
                Err(denied) => Ok((ToolCallStatus::Denied, denied)),
            },
        };
        let (status, output) = answer.unwrap_or_else(|why| (ToolCallStatus::Error, why));
        let _ = tx
            .send(ToWorker::SubagentResult {
                request_id: call.request_id,
                status,
                output,
            })
            .await;
    })
    .abort_handle()
}

/// A subagent the parent's agent.yaml allows.
struct Chosen {
    reference: String,
    max_steps: Option<u32>,
    model: Option<ModelRef>,
    isolation: Isolation,
    /// Allowed by `"*"`: only bundles installed in the store.
    any: bool,
}

/// The subagent `name` of `parent`'s bundle, or why it cannot run.
fn choose(parent: &Bundle, name: &str) -> Result<Chosen, String> {
    for entry in &parent.agent.subagents {
        match entry {
            SubagentEntry::Named(s) if s.name == name => {
                return Ok(Chosen {
                    reference: s.bundle.clone(),
                    max_steps: s.max_steps,
                    model: s.model.as_ref().map(|m| ModelRef {
                        provider: m.provider.clone(),
                        name: m.name.clone(),
                        config: m.config.clone(),
                    }),
                    isolation: s.isolation,
                    any: false,
                })
            }
            SubagentEntry::Any(_) if crate::bundle::subagents::is_name(name) => {
                return Ok(Chosen {
                    reference: name.to_string(),
                    max_steps: None,
                    model: None,
                    isolation: Isolation::Shared,
                    any: true,
                })
            }
            _ => {}
        }
    }
    let names: Vec<&str> = parent
        .agent
        .subagents
        .iter()
        .filter_map(|e| match e {
            SubagentEntry::Named(s) => Some(s.name.as_str()),
            SubagentEntry::Any(_) => None,
        })
        .collect();
    Err(format!(
        "there is no subagent \"{name}\"; agent.yaml declares: {}",
        if names.is_empty() {
            "any installed bundle, by name".to_string()
        } else {
            names.join(", ")
        }
    ))
}

async fn run(
    rt: &ServiceRuntime,
    parent: &Arc<Session>,
    call: &Call,
    ended: tokio_util::sync::CancellationToken,
) -> Result<(ToolCallStatus, String), String> {
    let name = &call.subagent;
    let chosen = choose(&parent.bundle, name)?;
    let depth = parent.record().parent.map_or(0, |p| p.depth) + 1;
    let max = rt.inner.options.max_subagent_depth;
    if depth > max {
        return Err(format!(
            "subagent \"{name}\" was not started: it would run {depth} levels below the session the user started, \
             and max_subagent_depth in config.toml allows {max}; do the task without it"
        ));
    }
    let _slot = tokio::select! {
        slot = parent.subagent_slots.clone().acquire_owned() => slot.map_err(|e| e.to_string())?,
        _ = ended.cancelled() => return Err("not started: the turn was interrupted".into()),
    };
    let bundle = bundle::resolve(&rt.inner.home, &chosen.reference)
        .map_err(|e| format!("subagent \"{name}\" cannot start: {e}"))?;
    if chosen.any && !matches!(bundle.origin, Origin::Installed { .. }) {
        return Err(format!(
            "subagent \"{name}\" cannot start: subagents: [\"*\"] allows bundles installed in the store, by name"
        ));
    }
    let link = ParentLink {
        session_id: parent.id.clone(),
        tool_call_id: call.call_id.clone(),
        subagent: name.clone(),
        depth,
        ceiling: parent.bundle.manifest.sandbox.clone(),
        network_ask: parent.bundle.agent.permissions.network == PermissionAction::Ask,
        max_steps: chosen.max_steps,
    };
    let shared = parent.cwd();
    let cwd = (chosen.isolation == Isolation::Shared).then_some(shared.as_path());
    let child = rt
        .create_session_as(
            uuid::Uuid::new_v4().to_string(),
            bundle,
            &chosen.reference,
            cwd,
            Some(link),
            parent.record().tenant,
        )
        .await
        .map_err(|e| format!("subagent \"{name}\" cannot start: {e}"))?;
    if chosen.isolation == Isolation::Copy {
        let owner = match &rt.inner.options.sandbox_user {
            crate::sandbox::identity::SandboxUser::Other { id, .. } => Some(*id),
            crate::sandbox::identity::SandboxUser::Own => None,
        };
        let to = child.cwd();
        let copied =
            tokio::task::spawn_blocking(move || copy::copy_workspace(&shared, &to, owner)).await;
        let failed = match copied {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(e.to_string()),
            Err(_) => Some("the copy stopped unexpectedly".to_string()),
        };
        if let Some(why) = failed {
            if let Err(gone) = rt.delete_session(&child.id).await {
                tracing::warn!(session = %child.id, "a subagent whose copy failed stays: {gone}");
            }
            return Err(format!(
                "subagent \"{name}\" cannot start: its copy of the workspace failed: {why}"
            ));
        }
    }
    parent.emit(EventPayload::SubagentStarted {
        turn_id: call.turn_id.clone(),
        call_id: call.call_id.clone(),
        subagent: name.clone(),
        child_session_id: child.id.clone(),
    });
    let outcome = follow(rt, parent, &child, call, chosen.model, &ended).await;
    let (status, usage, answer) = match outcome {
        Ok(o) => {
            let answer = match (o.status, &o.error) {
                (TurnStatus::Completed, _) => (ToolCallStatus::Ok, o.final_message.clone()),
                (_, Some((code, message))) => (
                    ToolCallStatus::Error,
                    format!("subagent \"{name}\" did not finish ({code}): {message}"),
                ),
                (status, None) => (
                    ToolCallStatus::Error,
                    format!("subagent \"{name}\" did not finish: {status:?}"),
                ),
            };
            (o.status, o.usage, answer)
        }
        Err(e) => (
            TurnStatus::Failed,
            Default::default(),
            (ToolCallStatus::Error, format!("subagent \"{name}\": {e}")),
        ),
    };
    parent.count_child(&call.turn_id, &usage);
    parent.emit(EventPayload::SubagentFinished {
        turn_id: call.turn_id.clone(),
        call_id: call.call_id.clone(),
        subagent: name.clone(),
        child_session_id: child.id.clone(),
        outcome: status,
        usage,
    });
    Ok(answer)
}

/// Runs the child's turn, forwarding its approval requests to the parent's stream and interrupting it when the
/// parent's turn ends.
async fn follow(
    rt: &ServiceRuntime,
    parent: &Session,
    child: &Session,
    call: &Call,
    model: Option<ModelRef>,
    parent_ended: &tokio_util::sync::CancellationToken,
) -> Result<super::TurnOutcome, String> {
    let mut events = rt
        .subscribe_session(&child.id)
        .await
        .map_err(|e| e.to_string())?;
    let overrides = TurnOverrides {
        model,
        ..TurnOverrides::default()
    };
    let pending = rt
        .start_turn(&child.id, Task::new(call.prompt.clone()), overrides)
        .await
        .map_err(|e| e.to_string())?;
    let mut outcome = pending.outcome;
    let (mut interrupted, mut following) = (false, true);
    loop {
        tokio::select! {
            done = &mut outcome => {
                return done.map_err(|_| "the child's turn was dropped".to_string());
            }
            msg = events.next(), if following => match msg {
                Some(msg) => {
                    if let Some(forwarded) = forwarded(msg.payload, &child.id, call) {
                        parent.emit(forwarded);
                    }
                }
                // The child's journal closed (it was deleted): its outcome follows.
                None => following = false,
            },
            _ = parent_ended.cancelled(), if !interrupted => {
                interrupted = true;
                let _ = rt.interrupt(&child.id).await;
            }
        }
    }
}

/// A child's event as the parent's stream carries it: its approval requests and their answers, under the
/// parent's turn and `Agent` call, naming the session that asks (the child, or a grandchild it forwarded).
fn forwarded(payload: EventPayload, child_id: &str, call: &Call) -> Option<EventPayload> {
    let asker = |own: Option<String>| Some(own.unwrap_or_else(|| child_id.to_string()));
    match payload {
        EventPayload::PermissionRequested {
            request_id,
            tool,
            summary,
            rule,
            diff,
            project_rule,
            warning,
            child_session_id,
            ..
        } => Some(EventPayload::PermissionRequested {
            turn_id: call.turn_id.clone(),
            request_id,
            call_id: call.call_id.clone(),
            tool,
            summary,
            rule,
            diff,
            project_rule,
            warning,
            child_session_id: asker(child_session_id),
        }),
        EventPayload::NetworkPermissionRequested {
            request_id,
            host,
            port,
            addresses,
            internal,
            child_session_id,
            ..
        } => Some(EventPayload::NetworkPermissionRequested {
            turn_id: call.turn_id.clone(),
            request_id,
            host,
            port,
            addresses,
            internal,
            child_session_id: asker(child_session_id),
        }),
        EventPayload::ApprovalResolved {
            request_id,
            decision,
            reason,
            child_session_id,
            hook,
            ..
        } => Some(EventPayload::ApprovalResolved {
            turn_id: call.turn_id.clone(),
            request_id,
            decision,
            reason,
            child_session_id: asker(child_session_id),
            hook,
        }),
        _ => None,
    }
}
