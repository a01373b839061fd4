//! The spans of a turn, made from the events the supervisor journals and the model calls it makes:
//!
//! ```text
//! invoke_agent {bundle}            turn_started → turn_completed | error
//! ├── sandbox.start                the worker's start, when the turn waited for it
//! ├── chat {model}                 each model call, made by the supervisor
//! ├── hook {event}                 hook_started → hook_finished (prompt, Stop and subagent hooks)
//! └── execute_tool {tool}          tool_call_started → tool_call_finished
//!     ├── hook {event}             a tool call's hooks
//!     └── approval.wait            permission_requested → approval_resolved
//! ```
//!
//! Attribute names are the GenAI semantic conventions' (`gen_ai.*`); service-rs's own are under `service.`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::SystemTime;

use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer, TracerProvider};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use service_ipc::{EventPayload, ModelChunk, ToolCallStatus, Usage};

/// A turn's open spans.
struct Turn {
    cx: Context,
    session: String,
    tools: HashMap<String, Context>,
    approvals: HashMap<String, Context>,
    hooks: HashMap<String, Context>,
}

#[derive(Default)]
struct State {
    turns: HashMap<String, Turn>,
    /// A worker start of a session with no turn span yet: (began, ended, error).
    sandboxes: HashMap<String, (SystemTime, SystemTime, Option<String>)>,
}

/// The process's tracer and the spans it has open.
pub struct Traces {
    tracer: SdkTracer,
    capture: bool,
    state: Mutex<State>,
}

/// The agent a session runs, as spans name it.
pub struct Agent<'a> {
    /// The bundle's id (`gen_ai.agent.name`).
    pub name: &'a str,
    /// The bundle's exact reference (`gen_ai.agent.id`).
    pub id: &'a str,
}

fn end(cx: &Context) {
    cx.span().end();
}

fn fail(cx: &Context, kind: &str, message: &str) {
    let span = cx.span();
    span.set_attribute(KeyValue::new("error.type", super::label(kind)));
    span.set_status(Status::error(super::capped(message, MAX_CONTENT_BYTES)));
}

/// Longest content (prompts, answers, tool input and output) a span carries when capture is on.
const MAX_CONTENT_BYTES: usize = 16 * 1024;

/// `kv` with a string value capped: content at [`MAX_CONTENT_BYTES`], everything else (names, ids, a bundle's or a
/// model's words) at [`super::MAX_LABEL_BYTES`]. Every attribute passes here: a bundle, a model reply or a worker
/// frame can put any string in an event.
fn bounded(kv: KeyValue) -> KeyValue {
    let opentelemetry::Value::String(text) = &kv.value else {
        return kv;
    };
    let content = matches!(
        kv.key.as_str(),
        "gen_ai.input.messages"
            | "gen_ai.output.messages"
            | "gen_ai.tool.call.arguments"
            | "gen_ai.tool.call.result"
    );
    let value = match content {
        true => super::capped(text.as_str(), MAX_CONTENT_BYTES),
        false => super::label(text.as_str()),
    };
    match value == text.as_str() {
        true => kv,
        false => KeyValue::new(kv.key, value),
    }
}

fn set(cx: &Context, kv: KeyValue) {
    cx.span().set_attribute(bounded(kv));
}

fn usage_attributes(usage: &Usage) -> Vec<KeyValue> {
    let mut out = Vec::new();
    let n = |v: Option<u64>| v.map(|v| i64::try_from(v).unwrap_or(i64::MAX));
    if let Some(v) = n(usage.input_tokens) {
        out.push(KeyValue::new("gen_ai.usage.input_tokens", v));
    }
    if let Some(v) = n(usage.output_tokens) {
        out.push(KeyValue::new("gen_ai.usage.output_tokens", v));
    }
    out
}

/// A message list as the conventions write `gen_ai.input.messages` and `gen_ai.output.messages`.
fn messages(role: &str, text: &str) -> String {
    serde_json::json!([{"role": role, "parts": [{"type": "text", "content": text}]}]).to_string()
}

impl Traces {
    /// The tracer of `provider`; `capture` puts prompts, answers and tool input and output in spans.
    pub fn new(provider: &SdkTracerProvider, capture: bool) -> Traces {
        Traces {
            tracer: provider.tracer("service-rs"),
            capture,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn start(
        &self,
        name: String,
        parent: &Context,
        attributes: Vec<KeyValue>,
        at: Option<SystemTime>,
    ) -> Context {
        let mut builder = self
            .tracer
            .span_builder(super::label(&name))
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes.into_iter().map(bounded));
        if let Some(at) = at {
            builder = builder.with_start_time(at);
        }
        let span = builder.start_with_context(&self.tracer, parent);
        parent.with_span(span)
    }

    /// Opens and closes spans for events of `session` journaled together.
    pub fn observe(&self, session: &str, agent: &Agent<'_>, payloads: &[EventPayload]) {
        for payload in payloads {
            self.one(session, agent, payload);
        }
    }

    fn one(&self, session: &str, agent: &Agent<'_>, payload: &EventPayload) {
        match payload {
            EventPayload::TurnStarted {
                turn_id,
                context,
                prompt,
                ..
            } => {
                let parent = super::parent().unwrap_or_default();
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                    KeyValue::new("gen_ai.agent.name", agent.name.to_string()),
                    KeyValue::new("gen_ai.agent.id", agent.id.to_string()),
                    KeyValue::new("gen_ai.conversation.id", session.to_string()),
                    KeyValue::new("gen_ai.provider.name", context.model.provider.clone()),
                    KeyValue::new("gen_ai.request.model", context.model.name.clone()),
                    KeyValue::new("service.turn.id", turn_id.clone()),
                ];
                if self.capture {
                    attributes.push(KeyValue::new(
                        "gen_ai.input.messages",
                        messages("user", prompt),
                    ));
                }
                let mut state = self.state();
                let sandbox = state.sandboxes.remove(session);
                let began = sandbox.as_ref().map(|s| s.0);
                let cx = self.start(
                    format!("invoke_agent {}", agent.name),
                    &parent,
                    attributes,
                    began,
                );
                if let Some((began, ended, error)) = sandbox {
                    self.sandbox_span(&cx, began, ended, error.as_deref());
                }
                state.turns.insert(
                    turn_id.clone(),
                    Turn {
                        cx,
                        session: session.to_string(),
                        tools: HashMap::new(),
                        approvals: HashMap::new(),
                        hooks: HashMap::new(),
                    },
                );
            }
            EventPayload::TurnCompleted {
                turn_id,
                final_message,
                usage,
                ..
            } => {
                if let Some(turn) = self.state().turns.remove(turn_id) {
                    for kv in usage_attributes(usage) {
                        set(&turn.cx, kv);
                    }
                    if self.capture {
                        set(
                            &turn.cx,
                            KeyValue::new(
                                "gen_ai.output.messages",
                                messages("assistant", final_message),
                            ),
                        );
                    }
                    close(turn);
                }
            }
            EventPayload::Error {
                turn_id: Some(turn_id),
                code,
                message,
            } => {
                if let Some(turn) = self.state().turns.remove(turn_id) {
                    fail(&turn.cx, code, message);
                    close(turn);
                }
            }
            EventPayload::ToolCallStarted {
                turn_id,
                call_id,
                tool,
                arguments,
                ..
            } => {
                let mut state = self.state();
                let Some(turn) = state.turns.get_mut(turn_id) else {
                    return;
                };
                let mut attributes = vec![
                    KeyValue::new("gen_ai.operation.name", "execute_tool"),
                    KeyValue::new("gen_ai.tool.name", tool.clone()),
                    KeyValue::new("gen_ai.tool.call.id", call_id.clone()),
                ];
                if self.capture {
                    attributes.push(KeyValue::new(
                        "gen_ai.tool.call.arguments",
                        arguments.to_string(),
                    ));
                }
                let cx = self.start(format!("execute_tool {tool}"), &turn.cx, attributes, None);
                turn.tools.insert(call_id.clone(), cx);
            }
            EventPayload::ToolCallFinished {
                turn_id,
                call_id,
                status,
                output,
                ..
            } => {
                let cx = self.take(turn_id, |t| t.tools.remove(call_id));
                if let Some(cx) = cx {
                    if self.capture {
                        set(
                            &cx,
                            KeyValue::new("gen_ai.tool.call.result", output.clone()),
                        );
                    }
                    match status {
                        ToolCallStatus::Ok => {}
                        ToolCallStatus::Error => fail(&cx, "tool_error", "the tool failed"),
                        ToolCallStatus::Denied => fail(&cx, "denied", "the call was denied"),
                    }
                    end(&cx);
                }
            }
            EventPayload::PermissionRequested {
                turn_id,
                request_id,
                call_id,
                tool,
                ..
            } => self.approval(turn_id, request_id, Some(call_id), tool),
            EventPayload::NetworkPermissionRequested {
                turn_id,
                request_id,
                ..
            } => self.approval(turn_id, request_id, None, "network"),
            EventPayload::ApprovalResolved {
                turn_id,
                request_id,
                decision,
                ..
            } => {
                let cx = self.take(turn_id, |t| t.approvals.remove(request_id));
                if let Some(cx) = cx {
                    let decision = serde_json::to_value(decision)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default();
                    set(&cx, KeyValue::new("service.approval.decision", decision));
                    end(&cx);
                }
            }
            EventPayload::HookStarted {
                turn_id: Some(turn_id),
                hook_id,
                event,
                hook,
                call_id,
            } => {
                let mut state = self.state();
                let Some(turn) = state.turns.get_mut(turn_id) else {
                    return;
                };
                let parent = call_id
                    .as_ref()
                    .and_then(|c| turn.tools.get(c))
                    .unwrap_or(&turn.cx)
                    .clone();
                let attributes = vec![
                    KeyValue::new("service.hook.event", event.as_str()),
                    KeyValue::new("service.hook.source", hook.source.as_str()),
                    KeyValue::new(
                        "service.hook.command",
                        super::capped(&hook.command, MAX_CONTENT_BYTES),
                    ),
                ];
                let cx = self.start(format!("hook {event}"), &parent, attributes, None);
                turn.hooks.insert(hook_id.clone(), cx);
            }
            EventPayload::HookFinished {
                turn_id: Some(turn_id),
                hook_id,
                exit_code,
                timed_out,
                decision,
                ..
            } => {
                let cx = self.take(turn_id, |t| t.hooks.remove(hook_id));
                if let Some(cx) = cx {
                    if let Some(code) = exit_code {
                        set(
                            &cx,
                            KeyValue::new("service.hook.exit_code", i64::from(*code)),
                        );
                    }
                    if let Some(decision) = decision {
                        set(
                            &cx,
                            KeyValue::new("service.hook.decision", decision.clone()),
                        );
                    }
                    if *timed_out {
                        fail(&cx, "hook_timeout", "the hook did not finish in time");
                    }
                    end(&cx);
                }
            }
            _ => {}
        }
    }

    /// The span `pick` takes out of turn `turn_id`'s open ones.
    fn take(
        &self,
        turn_id: &str,
        pick: impl FnOnce(&mut Turn) -> Option<Context>,
    ) -> Option<Context> {
        self.state().turns.get_mut(turn_id).and_then(pick)
    }

    fn approval(&self, turn_id: &str, request_id: &str, call_id: Option<&String>, tool: &str) {
        let mut state = self.state();
        let Some(turn) = state.turns.get_mut(turn_id) else {
            return;
        };
        let parent = call_id
            .and_then(|c| turn.tools.get(c))
            .unwrap_or(&turn.cx)
            .clone();
        let attributes = vec![
            KeyValue::new("gen_ai.tool.name", tool.to_string()),
            KeyValue::new("service.approval.request_id", request_id.to_string()),
        ];
        let cx = self.start("approval.wait".into(), &parent, attributes, None);
        turn.approvals.insert(request_id.to_string(), cx);
    }

    fn sandbox_span(
        &self,
        parent: &Context,
        began: SystemTime,
        ended: SystemTime,
        error: Option<&str>,
    ) {
        let cx = self.start("sandbox.start".into(), parent, Vec::new(), Some(began));
        if let Some(message) = error {
            fail(&cx, "sandbox_failed", message);
        }
        cx.span().end_with_timestamp(ended);
    }

    /// Records that a worker of `session` started (or failed to) between `began` and now: under the session's
    /// running turn, or under the turn that starts next.
    pub fn sandbox_started(&self, session: &str, began: SystemTime, error: Option<String>) {
        let ended = SystemTime::now();
        let mut state = self.state();
        let running = state
            .turns
            .values()
            .find(|t| t.session == session)
            .map(|t| t.cx.clone());
        match running {
            Some(cx) => self.sandbox_span(&cx, began, ended, error.as_deref()),
            None => {
                state
                    .sandboxes
                    .insert(session.to_string(), (began, ended, error));
            }
        }
    }

    /// A span for one model call of `turn_id`, begun at `began`; it ends with the call's last chunk, or when the
    /// call is dropped.
    pub fn chat(&self, turn_id: &str, provider: &str, model: &str, began: SystemTime) -> ChatSpan {
        let parent = self
            .state()
            .turns
            .get(turn_id)
            .map(|t| t.cx.clone())
            .unwrap_or_default();
        let attributes = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider.to_string()),
            KeyValue::new("gen_ai.request.model", model.to_string()),
            KeyValue::new("gen_ai.response.model", model.to_string()),
        ];
        let cx = self.start(format!("chat {model}"), &parent, attributes, Some(began));
        ChatSpan {
            cx: Some(cx),
            tool_calls: false,
        }
    }
}

/// Ends a turn's span and whatever it left open (an interrupted tool call, an unanswered approval).
fn close(turn: Turn) {
    let open = turn.approvals.values().chain(turn.hooks.values());
    for cx in open.chain(turn.tools.values()) {
        fail(cx, "turn_ended", "the turn ended first");
        end(cx);
    }
    end(&turn.cx);
}

/// One model call's span.
pub struct ChatSpan {
    cx: Option<Context>,
    tool_calls: bool,
}

impl ChatSpan {
    /// Notes a chunk of the call; its last one ends the span.
    pub fn saw(&mut self, chunk: &ModelChunk) {
        match chunk {
            ModelChunk::ToolCall { .. } => self.tool_calls = true,
            ModelChunk::Done { usage } => {
                if let Some(cx) = self.cx.take() {
                    for kv in usage_attributes(usage) {
                        set(&cx, kv);
                    }
                    let reason = if self.tool_calls { "tool_call" } else { "stop" };
                    cx.span().set_attribute(KeyValue::new(
                        "gen_ai.response.finish_reasons",
                        opentelemetry::Value::Array(
                            vec![opentelemetry::StringValue::from(reason)].into(),
                        ),
                    ));
                    end(&cx);
                }
            }
            ModelChunk::Failed { code, message } => {
                if let Some(cx) = self.cx.take() {
                    fail(&cx, code, message);
                    end(&cx);
                }
            }
            _ => {}
        }
    }
}

impl Drop for ChatSpan {
    fn drop(&mut self) {
        if let Some(cx) = self.cx.take() {
            fail(&cx, "cancelled", "the call was abandoned before its end");
            end(&cx);
        }
    }
}
