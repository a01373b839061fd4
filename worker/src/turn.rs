//! One running turn as both executors see it: the model calls, tool calls, permission questions and how a turn
//! stops. The react executor ([`crate::react`]) and the codeact one ([`crate::codeact`]) drive a [`Turn`];
//! [`crate::executor`] picks one for the bundle and reports the turn's end.

use std::path::PathBuf;

use service_ipc::{
    BuiltinTool, ChatMessage, EventPayload, HookEvent, ModelChunk, ModelQuery, PermissionAction,
    ToSupervisor, ToolCall, ToolCallStatus, TurnStatus, Usage,
};
use tokio_util::sync::CancellationToken;

use crate::registry::Tool;
use crate::state::Shared;
use crate::tools::{ToolCtx, ToolResult};
use crate::{memory, permissions};

/// Why a turn stopped early.
pub(crate) enum Stop {
    Interrupted,
    Failed { code: String, message: String },
}

impl Stop {
    /// A model reply with no text and nothing to run.
    pub(crate) fn empty() -> Stop {
        let (code, message) = empty_response();
        Stop::Failed {
            code: code.into(),
            message: message.into(),
        }
    }

    /// `max` steps (`what` says of what) without a final answer.
    pub(crate) fn out_of_steps(max: u32, what: &str) -> Stop {
        Stop::Failed {
            code: "max_steps_exceeded".into(),
            message: format!(
                "the turn used all {max} {what} allowed by max_steps in agent.yaml without a final answer; raise \
                 max_steps or simplify the task"
            ),
        }
    }
}

/// What one model call produced, as it is read.
#[derive(Debug, Default)]
pub struct Reply {
    /// Its text so far.
    pub text: String,
    /// Its tool calls so far.
    pub calls: Vec<ToolCall>,
    /// Its items only the provider reads back (see `ChatMessage::opaque`), at most [`MAX_OPAQUE`].
    pub opaque: Vec<serde_json::Value>,
}

/// Opaque items one reply keeps; a provider sends one reasoning item per reply.
pub const MAX_OPAQUE: usize = 16;

/// What one chunk of a model reply comes to.
// Only small events (deltas) travel in `Event`; boxing it would allocate once per streamed delta.
#[allow(clippy::large_enum_variant)]
pub enum Piece {
    /// An event for the turn's clients: reasoning, or text (which the reply also keeps).
    Event(EventPayload),
    /// Nothing to tell: a tool call, which the reply keeps.
    Kept,
    /// The reply is whole.
    Done(Usage),
    /// The call failed: code and message.
    Failed(String, String),
}

impl Reply {
    /// Takes the next chunk of the reply to turn `turn_id`'s model call. Public so a turn the supervisor leads
    /// streams a reply as this executor does.
    pub fn take(&mut self, turn_id: &str, chunk: ModelChunk) -> Piece {
        let turn_id = turn_id.to_string();
        match chunk {
            ModelChunk::ReasoningDelta { text } => Piece::Event(EventPayload::ReasoningDelta {
                turn_id,
                delta: text,
            }),
            ModelChunk::ReasoningSectionBreak => {
                Piece::Event(EventPayload::ReasoningSectionBreak { turn_id })
            }
            ModelChunk::TextDelta { text } => {
                self.text.push_str(&text);
                Piece::Event(EventPayload::AgentMessageDelta {
                    turn_id,
                    delta: text,
                })
            }
            ModelChunk::ToolCall { call } => {
                self.calls.push(call);
                Piece::Kept
            }
            ModelChunk::Opaque { item } => {
                if self.opaque.len() < MAX_OPAQUE {
                    self.opaque.push(item);
                }
                Piece::Kept
            }
            ModelChunk::Done { usage } => Piece::Done(usage),
            ModelChunk::Failed { code, message } => Piece::Failed(code, message),
        }
    }
}

/// Ends a turn that never began its work: failed with `code`, adding nothing to the conversation.
pub(crate) async fn fail_unstarted(
    out: &crate::conn::Outbox,
    turn_id: String,
    code: &str,
    message: String,
) {
    out.send(ToSupervisor::TurnFinished {
        turn_id,
        status: TurnStatus::Failed,
        final_message: String::new(),
        messages: Vec::new(),
        usage: Usage::default(),
        error: Some((code.to_string(), message)),
    })
    .await;
}

/// One running turn, as its executor sees it.
pub(crate) struct Turn<'a> {
    pub(crate) shared: &'a Shared,
    pub(crate) turn_id: &'a str,
    pub(crate) cancel: &'a CancellationToken,
    pub(crate) cwd: PathBuf,
}

impl Turn<'_> {
    /// The messages of the next model call: the system prompt and the memory's view of `history`, after taking a
    /// conversation compacted meanwhile (the turn's own messages, `history[*start..]`, stay).
    pub(crate) fn context(
        &self,
        system: &str,
        history: &mut Vec<ChatMessage>,
        start: &mut usize,
    ) -> Vec<ChatMessage> {
        if let Some(earlier) = self.shared.take_replacement() {
            let own = history.split_off(*start);
            *history = earlier;
            *start = history.len();
            history.extend(own);
        }
        memory::prompt(system, history, self.shared.config.memory_window)
    }

    /// One model call: streams its text and reasoning as events and returns the whole reply.
    pub(crate) async fn call_model(
        &self,
        messages: Vec<ChatMessage>,
        tools: Vec<service_ipc::ToolSpec>,
        usage: &mut Usage,
    ) -> Result<Reply, Stop> {
        let request_id = uuid::Uuid::new_v4().to_string();
        let mut chunks = self.shared.open_model_stream(&request_id);
        let sent = self
            .shared
            .outbox
            .send(ToSupervisor::ModelRequest(ModelQuery {
                request_id: request_id.clone(),
                turn_id: self.turn_id.to_string(),
                messages,
                tools,
            }))
            .await;
        let result = if sent {
            self.collect(&mut chunks, usage).await
        } else {
            Err(lost())
        };
        self.shared.close_model_stream(&request_id);
        if matches!(result, Err(Stop::Interrupted)) {
            self.shared
                .outbox
                .send(ToSupervisor::CancelModel { request_id })
                .await;
        }
        result
    }

    async fn collect(
        &self,
        chunks: &mut tokio::sync::mpsc::Receiver<ModelChunk>,
        usage: &mut Usage,
    ) -> Result<Reply, Stop> {
        let mut reply = Reply::default();
        loop {
            let chunk = tokio::select! {
                _ = self.cancel.cancelled() => return Err(Stop::Interrupted),
                chunk = chunks.recv() => chunk.ok_or_else(lost)?,
            };
            match reply.take(self.turn_id, chunk) {
                Piece::Event(event) => {
                    self.shared.outbox.event(event).await;
                }
                Piece::Kept => {}
                Piece::Done(u) => {
                    usage.add(u);
                    if !reply.calls.is_empty() {
                        // The turn goes on with tools: clients see what it has used so far (the supervisor fills
                        // in its own count).
                        let update = EventPayload::UsageUpdate {
                            turn_id: self.turn_id.to_string(),
                            usage: Usage::default(),
                        };
                        self.shared.outbox.event(update).await;
                    }
                    return Ok(reply);
                }
                Piece::Failed(code, message) => return Err(Stop::Failed { code, message }),
            }
        }
    }

    /// Runs one tool call through the permission rules, with its `tool_call_*` events; `parent_exec_id` names the
    /// CodeAct program that made it.
    pub(crate) async fn run_tool(
        &self,
        call: &ToolCall,
        parent_exec_id: Option<&str>,
    ) -> ToolResult {
        let out = &self.shared.outbox;
        let arguments: Result<serde_json::Value, _> = serde_json::from_str(&call.arguments);
        out.event(EventPayload::ToolCallStarted {
            turn_id: self.turn_id.to_string(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            arguments: arguments
                .as_ref()
                .cloned()
                .unwrap_or_else(|_| serde_json::Value::String(call.arguments.clone())),
            parent_exec_id: parent_exec_id.map(str::to_string),
        })
        .await;
        let result = match (self.shared.registry.find(&call.name), arguments) {
            (Err(message), _) => ToolResult::error(message),
            (Ok(_), Err(e)) => ToolResult::error(format!(
                "arguments of {} are not valid JSON: {e}",
                call.name
            )),
            (Ok(tool), Ok(args)) => {
                // The input is kept for after the call only when a hook will read it.
                let hooks = &self.shared.hooks;
                let after = (hooks.on(HookEvent::PostToolUse)
                    || hooks.on(HookEvent::PostToolUseFailure))
                .then(|| args.clone());
                let mut result = self.permitted_run(tool, call, args).await;
                if let Some(args) = after {
                    self.post_tool(&call.name, call, &args, &mut result).await;
                }
                result
            }
        };
        out.event(EventPayload::ToolCallFinished {
            turn_id: self.turn_id.to_string(),
            call_id: call.id.clone(),
            tool: call.name.clone(),
            status: result.status,
            output: result.output.clone(),
            diff: result.diff.clone(),
        })
        .await;
        result
    }

    async fn permitted_run(
        &self,
        tool: Tool,
        call: &ToolCall,
        args: serde_json::Value,
    ) -> ToolResult {
        let registry = &self.shared.registry;
        let name = tool.name();
        let pre = match self.pre_tool(name, call, args).await {
            Ok(pre) => pre,
            Err(refused) => return refused,
        };
        let args = pre.args;
        let key = registry.key_argument(&tool, &args, &self.cwd);
        // The supervisor decides subagents' rules itself, asking when they say so: this worker may not be trusted.
        let config = &self.shared.config;
        let ruled = match crate::confine::strictness() {
            crate::confine::Strictness::Landlock => {
                permissions::as_rules_name_it(&key, &config.workspace, &config.bundle_dir)
            }
            _ => key.as_str().into(),
        };
        let (mut action, rule) = match tool {
            Tool::Agent => (PermissionAction::Allow, None),
            _ => permissions::evaluate(&config.permissions, name, &ruled),
        };
        if pre.ask && action == PermissionAction::Allow {
            action = PermissionAction::Ask;
        }
        match action {
            PermissionAction::Allow => {}
            PermissionAction::Deny => {
                let by = rule.unwrap_or_else(|| "the default action".into());
                return ToolResult::denied(format!(
                    "{name} {key:?} was denied by agent.yaml ({by})"
                ));
            }
            PermissionAction::Ask => {
                let hook = self.permission_hooks(name, call, &args).await;
                match self
                    .ask(
                        name,
                        call,
                        &key,
                        rule,
                        registry.preview_diff(&tool, &args, &self.cwd),
                        hook,
                    )
                    .await
                {
                    Some((service_ipc::ApprovalDecision::Deny, reason, by)) => {
                        // Who decided is the supervisor's word: it may have put the operator's hooks first.
                        let by = match by {
                            Some(h) => format!("the {} hook `{}`", h.source, h.command),
                            None => "the operator".to_string(),
                        };
                        return ToolResult::denied(match reason {
                            Some(why) => {
                                format!("{name} {key:?} was denied by {by}, who said: {why}")
                            }
                            None => format!("{name} {key:?} was denied by {by}"),
                        });
                    }
                    Some(_) => {}
                    None => {
                        return ToolResult::denied(
                            "not run: the turn was interrupted while waiting for approval",
                        )
                    }
                }
            }
        }
        let ctx = ToolCtx {
            config: &self.shared.config,
            outbox: &self.shared.outbox,
            turn_id: self.turn_id,
            call_id: &call.id,
            cwd: &self.cwd,
            cancel: self.cancel,
        };
        out_delta(&ctx, registry.describe(&tool, &args, &key)).await;
        if matches!(tool, Tool::Agent) {
            return self.subagent_run(&tool, args, &ctx).await;
        }
        registry.run(&tool, args, &ctx).await
    }

    /// Asks the supervisor for a decision; None when the turn was interrupted or the connection is gone.
    async fn ask(
        &self,
        tool: &str,
        call: &ToolCall,
        key: &str,
        rule: Option<String>,
        diff: Option<String>,
        hook: Option<service_ipc::HookAnswer>,
    ) -> Option<crate::state::Decided> {
        let request_id = uuid::Uuid::new_v4().to_string();
        let decision = self.shared.open_approval(&request_id);
        let sent = self
            .shared
            .outbox
            .send(ToSupervisor::PermissionRequest {
                request_id: request_id.clone(),
                turn_id: self.turn_id.to_string(),
                call_id: call.id.clone(),
                tool: tool.to_string(),
                key: key.to_string(),
                rule,
                diff,
                hook,
            })
            .await;
        let answer = if sent {
            tokio::select! {
                _ = self.cancel.cancelled() => None,
                d = decision => d.ok(),
            }
        } else {
            None
        };
        self.shared.close_approval(&request_id);
        answer
    }
}

async fn out_delta(ctx: &ToolCtx<'_>, delta: String) {
    ctx.outbox
        .event(EventPayload::ToolCallDelta {
            turn_id: ctx.turn_id.to_string(),
            call_id: ctx.call_id.to_string(),
            delta,
        })
        .await;
}

pub(crate) fn lost() -> Stop {
    Stop::Failed {
        code: "supervisor_gone".into(),
        message: "the connection to the supervisor closed during the turn".into(),
    }
}

/// The error of a model answer with no text and no tool call. Public so a text-only turn the supervisor finishes
/// itself ends the same way.
pub fn empty_response() -> (&'static str, &'static str) {
    (
        "empty_response",
        "the model ended its answer with no text and no tool call; try again, or check max_tokens and stop in \
         agent.yaml model.config (a small local model may also need a plainer system prompt)",
    )
}

/// The system prompt from agent.yaml (`base`), plus the skill list (name, description) when the Skill tool is
/// offered. Public so the supervisor can build a turn's opening request exactly as this executor does.
pub fn system_prompt<'a>(
    base: &str,
    tools: &[BuiltinTool],
    skills: impl ExactSizeIterator<Item = (&'a str, &'a str)>,
) -> String {
    let mut system = base.trim_end().to_string();
    if skills.len() > 0 && tools.contains(&BuiltinTool::Skill) {
        system.push_str("\n\nSkills you can load with the Skill tool:\n");
        for (name, description) in skills {
            system.push_str(&format!("- {name}: {description}\n"));
        }
    }
    system
}

impl ToolResult {
    pub(crate) fn denied(message: impl Into<String>) -> ToolResult {
        ToolResult {
            status: ToolCallStatus::Denied,
            ..ToolResult::error(message)
        }
    }
}
