//! `session/prompt`: a turn of the session, its events sent as updates while it runs, its permission requests asked
//! as `session/request_permission`; and `session/cancel`, which interrupts it.

use std::sync::Arc;

use agent_client_protocol::v1::schema::{
    ContentBlock, Diff, EmbeddedResourceResource, PermissionOption, PermissionOptionKind,
    PromptRequest, PromptResponse, RequestPermissionOutcome, RequestPermissionRequest,
    SessionNotification, StopReason, ToolCallContent, ToolCallStatus, ToolCallUpdate,
    ToolCallUpdateFields, ToolKind as AcpKind,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use agent_client_protocol::{Client, ErrorCode};
use futures::StreamExt;
use service_ipc::{ApprovalDecision, EventPayload, Task};
use tokio::sync::Notify;

use super::updates::{kind, Replay};
use super::{invalid_params, lock, rpc_error, Acp, Mode, Open};
use crate::facade::tool_view;
use crate::facade::turn_end::{self, TurnEnd};
use crate::facade::FacadeError;
use crate::runtime::approvals::{self, Asked};

type RpcResult<T> = Result<T, agent_client_protocol::Error>;

/// The permission options every question offers, by id.
const OPTIONS: [(&str, &str, PermissionOptionKind, ApprovalDecision); 4] = [
    (
        "allow_once",
        "Allow once",
        PermissionOptionKind::AllowOnce,
        ApprovalDecision::AllowOnce,
    ),
    (
        "allow_always",
        "Allow for this session",
        PermissionOptionKind::AllowAlways,
        ApprovalDecision::AllowAlways,
    ),
    (
        "reject_once",
        "Reject",
        PermissionOptionKind::RejectOnce,
        ApprovalDecision::Deny,
    ),
    (
        "reject_always",
        "Reject for this session",
        PermissionOptionKind::RejectAlways,
        ApprovalDecision::Deny,
    ),
];

impl Acp {
    /// Starts the prompt's turn in a task of its own: the dispatch loop must stay free for `session/cancel` and for
    /// the client's answers to permission questions.
    pub(super) fn prompt(
        self: &Arc<Self>,
        req: PromptRequest,
        responder: Responder<PromptResponse>,
        cx: ConnectionTo<Client>,
    ) -> RpcResult<()> {
        let id = req.session_id.0.to_string();
        let open = match self.opened(&id) {
            Ok(o) => o,
            Err(e) => return responder.respond_with_error(e),
        };
        let skills = lock(&open.state).skills.clone();
        let text = match prompt_text(&req.prompt, &skills) {
            Ok(t) => t,
            Err(e) => return responder.respond_with_error(e),
        };
        let cancel = Arc::new(Notify::new());
        {
            let mut state = lock(&open.state);
            if state.cancel.is_some() {
                drop(state);
                return responder.respond_with_error(
                    agent_client_protocol::Error::new(
                        ErrorCode::INVALID_REQUEST,
                        format!("session {id} is already running a prompt; wait for its response or send session/cancel"),
                    )
                    .data(serde_json::json!({"code": "turn_in_progress"})),
                );
            }
            state.cancel = Some(cancel.clone());
        }
        let this = self.clone();
        cx.clone().spawn(async move {
            let ended = this.run_turn(&id, &open, text, &cancel, &cx).await;
            lock(&open.state).cancel = None;
            match ended {
                Ok(stop) => responder.respond(PromptResponse::new(stop)),
                Err(e) => responder.respond_with_error(e),
            }
        })
    }

    /// `session/cancel`: wakes the running prompt, which interrupts its turn; nothing when none runs.
    pub(super) async fn cancel(&self, id: &str) {
        let Ok(open) = self.opened(id) else {
            return;
        };
        let cancel = lock(&open.state).cancel.clone();
        if let Some(cancel) = cancel {
            cancel.notify_one();
        }
    }

    async fn run_turn(
        &self,
        id: &str,
        open: &Arc<Open>,
        text: String,
        cancel: &Notify,
        cx: &ConnectionTo<Client>,
    ) -> RpcResult<StopReason> {
        let mut events = self.sessions.live_events(id).await.map_err(rpc_error)?;
        let turn_id = self
            .sessions
            .start_turn(id, Task::new(text))
            .await
            .map_err(rpc_error)?;
        let mut replay = Replay::live(open.host_cwd.clone());
        let mut cancelled = false;
        loop {
            let msg = tokio::select! {
                msg = events.next() => msg,
                _ = cancel.notified(), if !cancelled => {
                    cancelled = true;
                    self.interrupt(id).await;
                    continue;
                }
            };
            let Some(msg) = msg else {
                return Err(rpc_error(FacadeError::new(
                    "worker_unavailable",
                    format!("the events of session {id} ended before turn {turn_id} did; load the session again to see how it ended"),
                )));
            };
            if msg.payload.turn_id().is_some_and(|t| t != turn_id) {
                continue;
            }
            for update in replay.updates(&msg.payload) {
                cx.send_notification(SessionNotification::new(id.to_string(), update))?;
            }
            if let Some(asked) = approvals::asked(&msg.payload) {
                if !cancelled {
                    let decision = self
                        .decide(id, open, &asked, &msg.payload, &replay, cancel, cx)
                        .await?;
                    if decision.is_none() {
                        cancelled = true;
                        self.interrupt(id).await;
                    }
                    let decision = decision.unwrap_or(ApprovalDecision::Deny);
                    if let Err(e) = self.sessions.resolve(&asked.request_id, decision).await {
                        tracing::debug!(session = %id, "permission answer not delivered: {e}");
                    }
                }
            }
            if let Some(end) = turn_end::of(&msg.payload, &turn_id) {
                return match end {
                    _ if cancelled => Ok(StopReason::Cancelled),
                    TurnEnd::Completed { .. } => Ok(StopReason::EndTurn),
                    TurnEnd::MaxSteps { .. } => Ok(StopReason::MaxTurnRequests),
                    TurnEnd::Refused { .. } => Ok(StopReason::Refusal),
                    TurnEnd::Interrupted => Ok(StopReason::Cancelled),
                    TurnEnd::Failed { code, message } => {
                        Err(rpc_error(FacadeError { code, message }))
                    }
                };
            }
        }
    }

    async fn interrupt(&self, id: &str) {
        if let Err(e) = self.sessions.interrupt(id).await {
            tracing::debug!(session = %id, "interrupt: {e}");
        }
    }

    /// The answer to a permission request: by the session's mode or an earlier "reject for this session", else the
    /// client's. None when the prompt was cancelled meanwhile.
    #[allow(clippy::too_many_arguments)]
    async fn decide(
        &self,
        id: &str,
        open: &Open,
        asked: &Asked,
        payload: &EventPayload,
        replay: &Replay,
        cancel: &Notify,
        cx: &ConnectionTo<Client>,
    ) -> RpcResult<Option<ApprovalDecision>> {
        let remembered = match payload {
            EventPayload::NetworkPermissionRequested { host, .. } => format!("network {host}"),
            _ => asked.tool.clone(),
        };
        let mode = {
            let state = lock(&open.state);
            if state.rejected.contains(&remembered) {
                return Ok(Some(ApprovalDecision::Deny));
            }
            state.mode
        };
        match mode {
            Mode::ReadOnly => return Ok(Some(ApprovalDecision::Deny)),
            Mode::AutoEdit if approvals::auto_edit_allows(asked, &replay.sandbox_cwd()) => {
                return Ok(Some(ApprovalDecision::AllowOnce))
            }
            _ => {}
        }
        let question = RequestPermissionRequest::new(
            id.to_string(),
            question(asked, payload, replay),
            OPTIONS
                .iter()
                .map(|(id, name, kind, _)| PermissionOption::new(*id, *name, *kind))
                .collect(),
        );
        let answer = tokio::select! {
            answer = cx.send_request(question).block_task() => answer?,
            _ = cancel.notified() => return Ok(None),
        };
        let chosen = match answer.outcome {
            RequestPermissionOutcome::Selected(selected) => selected.option_id.0.to_string(),
            _ => return Ok(None),
        };
        let Some((option, _, _, decision)) = OPTIONS.iter().find(|o| o.0 == chosen) else {
            tracing::warn!(session = %id, "the client chose an option it was not offered: {chosen}");
            return Ok(Some(ApprovalDecision::Deny));
        };
        if *option == "reject_always" {
            lock(&open.state).rejected.insert(remembered);
        }
        Ok(Some(*decision))
    }
}

/// The tool call a permission question is about, as the client shows it: its title, kind, files and diff.
fn question(asked: &Asked, payload: &EventPayload, replay: &Replay) -> ToolCallUpdate {
    match payload {
        EventPayload::PermissionRequested {
            call_id,
            tool,
            summary,
            ..
        } => {
            let arguments = match tool.as_str() {
                "Bash" => serde_json::json!({"command": summary}),
                "Read" | "Write" | "Edit" => serde_json::json!({"file_path": summary}),
                "Glob" | "Grep" => serde_json::json!({"pattern": summary}),
                _ => serde_json::json!({}),
            };
            let (view, locations) = replay.view(tool, &arguments);
            let mut contents = Vec::new();
            if let Some(diff) = &asked.diff {
                let (old, new) = tool_view::texts_of_diff(diff);
                let host = locations
                    .first()
                    .map(|l| l.path.clone())
                    .unwrap_or_else(|| summary.into());
                contents.push(ToolCallContent::Diff(
                    Diff::new(host, new).old_text((!old.is_empty()).then_some(old)),
                ));
            }
            ToolCallUpdate::new(
                call_id.clone(),
                ToolCallUpdateFields::new()
                    .title(format!("{}?", view.title))
                    .kind(kind(view.kind))
                    .status(ToolCallStatus::Pending)
                    .locations(locations)
                    .content(contents),
            )
        }
        _ => ToolCallUpdate::new(
            asked.request_id.clone(),
            ToolCallUpdateFields::new()
                .title(format!("Connect to {}?", asked.summary))
                .kind(AcpKind::Fetch)
                .status(ToolCallStatus::Pending),
        ),
    }
}

/// The prompt as the model reads it: text, and the files an editor attached. A `/skill` at the start asks for
/// that skill of the bundle.
fn prompt_text(blocks: &[ContentBlock], skills: &[String]) -> RpcResult<String> {
    let mut text = String::new();
    for block in blocks {
        match block {
            ContentBlock::Text(t) => text.push_str(&t.text),
            ContentBlock::Resource(r) => match &r.resource {
                EmbeddedResourceResource::TextResourceContents(file) => {
                    text.push_str(&format!(
                        "\n\n<attached uri=\"{}\">\n{}\n</attached>\n",
                        file.uri, file.text
                    ));
                }
                _ => {
                    return Err(invalid_params(
                        "binary resources are not supported; attach text files",
                    ))
                }
            },
            ContentBlock::ResourceLink(link) => {
                text.push_str(&format!(" [{}]({})", link.name, link.uri))
            }
            _ => {
                return Err(invalid_params(
                    "images and audio are not supported (promptCapabilities.image and .audio are false); send text",
                ))
            }
        }
    }
    if text.trim().is_empty() {
        return Err(invalid_params("the prompt has no text"));
    }
    if let Some(rest) = text.strip_prefix('/') {
        let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        if skills.iter().any(|s| s == name) {
            return Ok(format!(
                "Use the {name} skill (load it with the Skill tool).\n{}",
                args.trim()
            ));
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slash_command_naming_a_skill_asks_for_it() {
        let skills = vec!["review".to_string()];
        let text = prompt_text(&[ContentBlock::from("/review src/a.rs")], &skills).unwrap();
        assert!(text.starts_with("Use the review skill"), "{text}");
        assert!(text.ends_with("src/a.rs"), "{text}");
        let plain = prompt_text(&[ContentBlock::from("/etc/passwd?")], &skills).unwrap();
        assert_eq!(plain, "/etc/passwd?");
    }

    #[test]
    fn an_empty_prompt_is_refused() {
        let err = prompt_text(&[ContentBlock::from("  ")], &[]).unwrap_err();
        assert_eq!(err.code, ErrorCode::INVALID_PARAMS);
    }
}
