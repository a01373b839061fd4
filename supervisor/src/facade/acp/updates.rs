//! Journaled events as ACP `session/update`s. The same translation serves a live turn and `session/load`'s replay,
//! so that a replayed conversation reads as it did live.

use std::collections::HashMap;
use std::path::PathBuf;

use agent_client_protocol::v1::schema::{
    Content, ContentBlock, ContentChunk, Diff, Plan, PlanEntry, PlanEntryPriority, PlanEntryStatus,
    SessionUpdate, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus as AcpStatus,
    ToolCallUpdate, ToolCallUpdateFields, ToolKind as AcpKind, UsageUpdate,
};
use service_ipc::{EventPayload, PlanStatus, ToolCallStatus};

use crate::facade::tool_text;
use crate::facade::tool_view::{self, PathMap, ToolKind, ToolView};

/// Most command output sent live for one call; the final result carries the tool's own output.
const LIVE_OUTPUT_CAP: usize = 64 * 1024;

/// A started tool call, remembered for its updates.
struct Call {
    tool: String,
    /// The file a Write or Edit changes, as the sandbox names it.
    path: Option<String>,
    /// Command output sent live so far, in bytes.
    sent: usize,
}

/// Turns a session's events into updates, one event at a time.
pub(super) struct Replay {
    host_cwd: PathBuf,
    /// The sandbox's workspace, from the turn's context.
    map: Option<PathMap>,
    /// Whether a turn's prompt is sent as a user message (a replay), or not (the client sent it).
    echo_prompts: bool,
    calls: HashMap<String, Call>,
    exec_calls: HashMap<String, String>,
}

impl Replay {
    /// A replay of a whole conversation, in the session's host directory `host_cwd`.
    pub(super) fn new(host_cwd: PathBuf) -> Replay {
        Replay {
            host_cwd,
            map: None,
            echo_prompts: true,
            calls: HashMap::new(),
            exec_calls: HashMap::new(),
        }
    }

    /// The updates of a live turn, whose prompt the client already shows.
    pub(super) fn live(host_cwd: PathBuf) -> Replay {
        Replay {
            echo_prompts: false,
            ..Replay::new(host_cwd)
        }
    }

    /// Text from the sandbox (output, errors) with the workspace named by its host path, as `locations` name it.
    fn host_text(&self, text: &str) -> String {
        match &self.map {
            Some(map) => tool_text::ToolText::new(&map.sandbox.display().to_string())
                .text_on_host(text, &map.host),
            None => text.to_string(),
        }
    }

    fn host(&self, sandbox_path: &str) -> PathBuf {
        match &self.map {
            Some(map) => map.to_host(sandbox_path),
            None => PathBuf::from(sandbox_path),
        }
    }

    pub(super) fn sandbox_cwd(&self) -> String {
        self.map
            .as_ref()
            .map(|m| m.sandbox.display().to_string())
            .unwrap_or_else(|| "/workspace".into())
    }

    /// The view of a tool call, with its files as host paths.
    pub(super) fn view(
        &self,
        tool: &str,
        arguments: &serde_json::Value,
    ) -> (ToolView, Vec<ToolCallLocation>) {
        let mut view = tool_view::view(tool, arguments, &self.sandbox_cwd());
        // The editor knows the files by their host paths.
        if let Some(first) = view.locations.first() {
            let host = self.host(&first.path).display().to_string();
            view.title = view.title.replace(&first.path, &host);
        }
        let locations = view
            .locations
            .iter()
            .map(|l| ToolCallLocation::new(self.host(&l.path)).line(l.line))
            .collect();
        (view, locations)
    }

    /// The updates one event makes; most make none.
    pub(super) fn updates(&mut self, payload: &EventPayload) -> Vec<SessionUpdate> {
        let text = |t: &str| ContentChunk::new(ContentBlock::from(t.to_string()));
        match payload {
            EventPayload::TurnStarted {
                context, prompt, ..
            } => {
                self.map = Some(PathMap {
                    sandbox: PathBuf::from(&context.cwd),
                    host: self.host_cwd.clone(),
                });
                if self.echo_prompts {
                    return vec![SessionUpdate::UserMessageChunk(text(prompt))];
                }
            }
            EventPayload::AgentMessageDelta { delta, .. } => {
                return vec![SessionUpdate::AgentMessageChunk(text(delta))]
            }
            EventPayload::ReasoningDelta { delta, .. } => {
                return vec![SessionUpdate::AgentThoughtChunk(text(delta))]
            }
            EventPayload::ToolCallStarted {
                call_id,
                tool,
                arguments,
                ..
            } => {
                let (view, locations) = self.view(tool, arguments);
                let path = matches!(tool.as_str(), "Write" | "Edit")
                    .then(|| view.locations.first().map(|l| l.path.clone()))
                    .flatten();
                self.calls.insert(
                    call_id.clone(),
                    Call {
                        tool: tool.clone(),
                        path,
                        sent: 0,
                    },
                );
                return vec![SessionUpdate::ToolCall(
                    ToolCall::new(call_id.clone(), view.title)
                        .kind(kind(view.kind))
                        .status(AcpStatus::InProgress)
                        .locations(locations)
                        .raw_input(arguments.clone()),
                )];
            }
            EventPayload::ExecCommandBegin {
                exec_id,
                call_id: Some(call_id),
                ..
            } => {
                self.exec_calls.insert(exec_id.clone(), call_id.clone());
            }
            EventPayload::ExecCommandOutputDelta { exec_id, chunk, .. } => {
                let Some(call_id) = self.exec_calls.get(exec_id) else {
                    return Vec::new();
                };
                let Some(call) = self.calls.get_mut(call_id) else {
                    return Vec::new();
                };
                if call.sent >= LIVE_OUTPUT_CAP {
                    return Vec::new();
                }
                // Content replaces what a call showed: each update carries only the new output (what the
                // command prints now), so a long command costs its output once, not once per line; the
                // finished call carries the whole result.
                call.sent += chunk.len();
                let chunk = self.host_text(chunk);
                return vec![update(
                    call_id,
                    ToolCallUpdateFields::new().content(vec![content(&chunk)]),
                )];
            }
            EventPayload::ToolCallFinished {
                call_id,
                status,
                output,
                diff,
                ..
            } => {
                let call = self.calls.remove(call_id);
                let mut contents = Vec::new();
                if let (Some(diff), Some(path)) =
                    (diff, call.as_ref().and_then(|c| c.path.as_deref()))
                {
                    let (old, new) = tool_view::texts_of_diff(diff);
                    let is_new_file =
                        old.is_empty() && call.as_ref().is_some_and(|c| c.tool == "Write");
                    contents.push(ToolCallContent::Diff(
                        Diff::new(self.host(path), new).old_text((!is_new_file).then_some(old)),
                    ));
                }
                let output = self.host_text(output);
                if !output.is_empty() {
                    contents.push(content(&output));
                }
                let status = match status {
                    ToolCallStatus::Ok => AcpStatus::Completed,
                    ToolCallStatus::Error | ToolCallStatus::Denied => AcpStatus::Failed,
                };
                return vec![update(
                    call_id,
                    ToolCallUpdateFields::new()
                        .status(status)
                        .content(contents)
                        .raw_output(serde_json::json!({"output": output})),
                )];
            }
            // A hook that decided something is shown as a finished step of its own, as the TUI shows it.
            EventPayload::HookFinished {
                hook_id,
                event,
                hook,
                decision: Some(decision),
                ..
            } => {
                let title = tool_text::hook_line(payload).unwrap_or_default();
                let status = match decision.as_str() {
                    "deny" | "block" | "warning" => AcpStatus::Failed,
                    _ => AcpStatus::Completed,
                };
                return vec![SessionUpdate::ToolCall(
                    ToolCall::new(format!("hook-{hook_id}"), self.host_text(&title))
                        .kind(AcpKind::Other)
                        .status(status)
                        .raw_input(serde_json::json!({
                            "hook_event_name": event, "source": hook.source, "command": hook.command,
                        })),
                )];
            }
            EventPayload::PlanUpdate { plan, .. } => {
                let entries = plan
                    .iter()
                    .map(|item| {
                        let status = match item.status {
                            PlanStatus::Pending => PlanEntryStatus::Pending,
                            PlanStatus::InProgress => PlanEntryStatus::InProgress,
                            PlanStatus::Completed => PlanEntryStatus::Completed,
                        };
                        PlanEntry::new(item.step.clone(), PlanEntryPriority::Medium, status)
                    })
                    .collect();
                return vec![SessionUpdate::Plan(Plan::new(entries))];
            }
            EventPayload::TurnCompleted { usage, .. } => {
                if let (Some(used), Some(size)) = (usage.context_tokens, usage.context_window) {
                    return vec![SessionUpdate::UsageUpdate(UsageUpdate::new(used, size))];
                }
            }
            _ => {}
        }
        Vec::new()
    }
}

fn update(call_id: &str, fields: ToolCallUpdateFields) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(call_id.to_string(), fields))
}

fn content(text: &str) -> ToolCallContent {
    ToolCallContent::Content(Content::new(ContentBlock::from(text.to_string())))
}

/// The ACP kind of a tool kind.
pub(super) fn kind(kind: ToolKind) -> AcpKind {
    match kind {
        ToolKind::Read => AcpKind::Read,
        ToolKind::Edit => AcpKind::Edit,
        ToolKind::Execute => AcpKind::Execute,
        ToolKind::Search => AcpKind::Search,
        ToolKind::Fetch => AcpKind::Fetch,
        ToolKind::Think => AcpKind::Think,
        ToolKind::Other => AcpKind::Other,
    }
}
