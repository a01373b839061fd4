//! Where a turn meets its hooks: the prompt (`SessionStart` on a worker's first turn or after a compaction,
//! `UserPromptSubmit`), each tool call (`PreToolUse`, `PermissionRequest`, `PostToolUse`, `PostToolUseFailure`),
//! each subagent (`SubagentStart`, `SubagentStop`) and the end (`Stop`, or `StopFailure`). The hooks module runs
//! and reads them; here their verdicts act on the turn.

use std::sync::atomic::Ordering;

use serde_json::{json, Map, Value};
use service_ipc::{ApprovalDecision, ChatMessage, HookAnswer, HookEvent, ToolCall, ToolCallStatus};

use crate::hooks::{Decision, Point, Verdict};
use crate::registry::Tool;
use crate::tools::{ToolCtx, ToolResult};
use crate::turn::Turn;

/// What `PreToolUse` hooks let a call do.
pub(crate) struct PreTool {
    /// The input the call runs with: the model's, or a hook's `updatedInput`.
    pub args: Value,
    /// A hook asked for the user's decision even where the rules allow the call.
    pub ask: bool,
}

impl Turn<'_> {
    async fn hooks(
        &self,
        event: HookEvent,
        tool: Option<(&str, &Value, &str)>,
        fields: Map<String, Value>,
    ) -> Verdict {
        let shared = self.shared;
        shared
            .hooks
            .run(
                &shared.config,
                &shared.outbox,
                Point {
                    event,
                    turn_id: Some(self.turn_id),
                    cwd: &self.cwd,
                    tool,
                    fields,
                },
                self.cancel,
            )
            .await
    }

    /// The prompt's hooks: `SessionStart` on this worker's first turn, then `UserPromptSubmit`. `Ok` carries the
    /// context they add to the prompt; `Err` the reason a hook blocked it.
    pub(crate) async fn prompt_hooks(
        &self,
        before: &[ChatMessage],
        prompt: &str,
    ) -> Result<Option<String>, String> {
        let hooks = &self.shared.hooks;
        let mut context = Vec::new();
        let first = !self.shared.session_started.swap(true, Ordering::SeqCst);
        let compacted = self.shared.compacted.swap(false, Ordering::SeqCst);
        let starting = (first || compacted) && hooks.on(HookEvent::SessionStart);
        if starting || hooks.on(HookEvent::UserPromptSubmit) {
            hooks.write_transcript(before);
        }
        if starting {
            // A worker's first turn on a session with a conversation is a later process taking it up; the first
            // turn after a compaction starts again from the summary.
            let source = if compacted {
                "compact"
            } else if self.shared.config.fork {
                "fork"
            } else if before.is_empty() {
                "startup"
            } else {
                "resume"
            };
            let fields = fields([("source", json!(source))]);
            let verdict = self.hooks(HookEvent::SessionStart, None, fields).await;
            context.extend(verdict.context_text(HookEvent::SessionStart));
        }
        if hooks.on(HookEvent::UserPromptSubmit) {
            let fields = fields([("prompt", json!(prompt))]);
            let verdict = self.hooks(HookEvent::UserPromptSubmit, None, fields).await;
            if verdict.decision == Some(Decision::Block) {
                return Err(verdict.reason_or("the prompt was blocked"));
            }
            context.extend(verdict.context_text(HookEvent::UserPromptSubmit));
        }
        Ok((!context.is_empty()).then(|| context.join("\n")))
    }

    /// `Stop` hooks before the turn ends with `answer`: true when one kept it going, with its reason added to
    /// `history` as the next instruction (and `active` set, which the next run of the hooks reads).
    pub(crate) async fn goes_on(
        &self,
        history: &mut Vec<ChatMessage>,
        answer: &str,
        active: &mut bool,
    ) -> bool {
        if !self.shared.hooks.on(HookEvent::Stop) {
            return false;
        }
        self.shared.hooks.write_transcript(history);
        let fields = fields([
            ("stop_hook_active", json!(*active)),
            ("last_assistant_message", json!(answer)),
        ]);
        let verdict = self.hooks(HookEvent::Stop, None, fields).await;
        if verdict.decision != Some(Decision::Block) {
            return false;
        }
        *active = true;
        let reason = verdict.reason_or("a Stop hook asked to go on");
        history.push(ChatMessage::text(service_ipc::ChatRole::User, reason));
        true
    }

    /// `PreToolUse` hooks of a call: the input it runs with, or its refusal.
    pub(crate) async fn pre_tool(
        &self,
        name: &str,
        call: &ToolCall,
        args: Value,
    ) -> Result<PreTool, ToolResult> {
        if !self.shared.hooks.on(HookEvent::PreToolUse) {
            return Ok(PreTool { args, ask: false });
        }
        let verdict = self
            .hooks(
                HookEvent::PreToolUse,
                Some((name, &args, &call.id)),
                Map::new(),
            )
            .await;
        match verdict.decision {
            Some(Decision::Deny | Decision::Block) => Err(ToolResult::denied(format!(
                "{name} was blocked by a PreToolUse hook: {}",
                verdict.reason_or("refused")
            ))),
            decision => {
                if let Some(input) = &verdict.updated_input {
                    // `tool_call_started` showed the model's input; say what runs instead.
                    let delta = format!("a PreToolUse hook rewrote the input: {input}\n");
                    self.shared
                        .outbox
                        .event(service_ipc::EventPayload::ToolCallDelta {
                            turn_id: self.turn_id.to_string(),
                            call_id: call.id.clone(),
                            delta,
                        })
                        .await;
                }
                Ok(PreTool {
                    // The rules are evaluated on this input: a hook cannot make a call the rules refuse.
                    args: verdict.updated_input.unwrap_or(args),
                    ask: decision == Some(Decision::Ask),
                })
            }
        }
    }

    /// `PermissionRequest` hooks of a call the rules put to a question: a hook's allow or deny, which the
    /// supervisor gives as the answer.
    pub(crate) async fn permission_hooks(
        &self,
        name: &str,
        call: &ToolCall,
        args: &Value,
    ) -> Option<HookAnswer> {
        if !self.shared.hooks.on(HookEvent::PermissionRequest) {
            return None;
        }
        let verdict = self
            .hooks(
                HookEvent::PermissionRequest,
                Some((name, args, &call.id)),
                Map::new(),
            )
            .await;
        let decision = match verdict.decision? {
            Decision::Allow => ApprovalDecision::AllowOnce,
            Decision::Deny | Decision::Block => ApprovalDecision::Deny,
            _ => return None,
        };
        Some(HookAnswer {
            message: Some(verdict.reason_or("decided")),
            hook: verdict.by?,
            decision,
        })
    }

    /// `PostToolUse` (or `PostToolUseFailure`) hooks of a call that ran: what they say is added to its result.
    pub(crate) async fn post_tool(
        &self,
        name: &str,
        call: &ToolCall,
        args: &Value,
        result: &mut ToolResult,
    ) {
        let event = match result.status {
            ToolCallStatus::Ok => HookEvent::PostToolUse,
            ToolCallStatus::Error => HookEvent::PostToolUseFailure,
            ToolCallStatus::Denied => return,
        };
        if !self.shared.hooks.on(event) {
            return;
        }
        let fields = match event {
            HookEvent::PostToolUse => fields([(
                "tool_response",
                json!({"output": result.output, "filePath": args.get("file_path"), "success": true}),
            )]),
            _ => fields([("error", json!(result.output))]),
        };
        let verdict = self
            .hooks(event, Some((name, args, &call.id)), fields)
            .await;
        append(result, event, &verdict);
    }

    /// Runs an `Agent` call between its `SubagentStart` hooks, whose context is added to the subagent's prompt,
    /// and its `SubagentStop` hooks, whose reason or context is added to the answer the model reads.
    pub(crate) async fn subagent_run(
        &self,
        tool: &Tool,
        mut args: Value,
        ctx: &ToolCtx<'_>,
    ) -> ToolResult {
        let hooks = &self.shared.hooks;
        let agent_type = crate::subagents::Subagents::key(&args);
        let ids = |more: Vec<(&str, Value)>| {
            let mut f = fields([
                ("agent_id", json!(ctx.call_id)),
                ("agent_type", json!(agent_type)),
            ]);
            f.extend(more.into_iter().map(|(k, v)| (k.to_string(), v)));
            f
        };
        if hooks.on(HookEvent::SubagentStart) {
            let verdict = self
                .hooks(HookEvent::SubagentStart, None, ids(vec![]))
                .await;
            if let (Some(context), Some(prompt)) = (
                verdict.context_text(HookEvent::SubagentStart),
                args.get_mut("prompt"),
            ) {
                if let Some(text) = prompt.as_str() {
                    *prompt = json!(format!("{text}\n\n{context}"));
                }
            }
        }
        let mut result = self.shared.registry.run(tool, args, ctx).await;
        if hooks.on(HookEvent::SubagentStop) {
            let more = vec![
                ("stop_hook_active", json!(false)),
                ("last_assistant_message", json!(result.output)),
            ];
            let verdict = self.hooks(HookEvent::SubagentStop, None, ids(more)).await;
            append(&mut result, HookEvent::SubagentStop, &verdict);
        }
        result
    }

    /// `StopFailure` hooks of a turn that ends failed with `code`: they are told, and change nothing.
    pub(crate) async fn stop_failure(&self, code: &str, message: &str, added: &[ChatMessage]) {
        if !self.shared.hooks.on(HookEvent::StopFailure) {
            return;
        }
        let last = added
            .iter()
            .rev()
            .find(|m| m.role == service_ipc::ChatRole::Assistant)
            .map(|m| m.content.as_str());
        let fields = fields([
            ("error", json!(code)),
            ("error_details", json!(message)),
            ("last_assistant_message", json!(last)),
        ]);
        self.hooks(HookEvent::StopFailure, None, fields).await;
    }
}

/// Adds what a hook that ran after a call said to its result: the reason it blocked, and its context.
fn append(result: &mut ToolResult, event: HookEvent, verdict: &Verdict) {
    if verdict.decision == Some(Decision::Block) {
        let reason = verdict.reason_or("blocked");
        result
            .output
            .push_str(&format!("\n\n{} hook: {reason}", event.as_str()));
    }
    if let Some(context) = verdict.context_text(event) {
        result.output.push_str("\n\n");
        result.output.push_str(&context);
    }
}

fn fields<const N: usize>(pairs: [(&str, Value); N]) -> Map<String, Value> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}
