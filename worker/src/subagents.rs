//! The `Agent` tool: the model hands a prompt to one of the bundle's subagents. The worker cannot start sessions,
//! so a call is a `SubagentCall` frame; the supervisor decides from its own state whether the subagent exists and
//! may run, runs it as a child session in a sandbox of its own, and answers with `SubagentResult`.

use std::collections::HashMap;
use std::sync::Mutex;

use serde::Deserialize;
use serde_json::{json, Value};
use service_ipc::{SubagentInfo, ToSupervisor, ToolCallStatus, ToolSpec};
use tokio::sync::oneshot;

use crate::tools::{ToolCtx, ToolResult};

/// The tool's name.
pub const TOOL: &str = "Agent";

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentArgs {
    subagent: String,
    prompt: String,
}

/// The subagents the bundle declares, and the calls that wait for the supervisor's answer.
#[derive(Default)]
pub struct Subagents {
    list: Vec<SubagentInfo>,
    waiting: Mutex<HashMap<String, oneshot::Sender<(ToolCallStatus, String)>>>,
}

impl Subagents {
    /// The `Agent` tool over `list`; offered only when `list` is not empty.
    pub fn new(list: Vec<SubagentInfo>) -> Subagents {
        Subagents {
            list,
            waiting: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the tool is offered.
    pub fn offered(&self) -> bool {
        !self.list.is_empty()
    }

    /// The tool's spec, listing the subagents.
    pub fn spec(&self) -> ToolSpec {
        let mut description = String::from(
            "Hand a task to a subagent: it works on it in a session of its own, in this workspace, and its answer \
             is this call's result. Several Agent calls in one reply run at the same time. Subagents:\n",
        );
        for s in &self.list {
            description.push_str(&format!("- {}: {}\n", s.name, s.description));
        }
        let names: Vec<&str> = self.list.iter().map(|s| s.name.as_str()).collect();
        ToolSpec {
            name: TOOL.into(),
            description,
            parameters: json!({
                "type": "object",
                "properties": {
                    "subagent": {"type": "string", "enum": names, "description": "Which subagent."},
                    "prompt": {"type": "string", "description": "The whole task: the subagent sees nothing else."},
                },
                "required": ["subagent", "prompt"],
                "additionalProperties": false,
            }),
        }
    }

    /// The permission key of a call: the subagent's name.
    pub fn key(args: &Value) -> String {
        args.get("subagent")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .chars()
            .take(256)
            .collect()
    }

    /// Asks the supervisor to run the call and waits for its answer, or for the turn's interrupt.
    pub async fn call(&self, args: Value, ctx: &ToolCtx<'_>) -> ToolResult {
        let args: AgentArgs = match serde_json::from_value(args) {
            Ok(a) => a,
            Err(e) => {
                return ToolResult::error(format!(
                    "invalid arguments for {TOOL}: {e}; expected {{\"subagent\": name, \"prompt\": text}}"
                ))
            }
        };
        let request_id = uuid::Uuid::new_v4().to_string();
        let (tx, rx) = oneshot::channel();
        lock(&self.waiting).insert(request_id.clone(), tx);
        let sent = ctx
            .outbox
            .send(ToSupervisor::SubagentCall {
                request_id: request_id.clone(),
                turn_id: ctx.turn_id.to_string(),
                call_id: ctx.call_id.to_string(),
                subagent: args.subagent,
                prompt: args.prompt,
            })
            .await;
        let answer = if sent {
            tokio::select! {
                _ = ctx.cancel.cancelled() => None,
                a = rx => a.ok(),
            }
        } else {
            None
        };
        lock(&self.waiting).remove(&request_id);
        match answer {
            Some((status, output)) => ToolResult {
                status,
                output,
                diff: None,
            },
            None => ToolResult::error("not finished: the turn was interrupted"),
        }
    }

    /// Hands the supervisor's answer to the call that waits for it.
    pub fn deliver(&self, request_id: &str, status: ToolCallStatus, output: String) {
        if let Some(tx) = lock(&self.waiting).remove(request_id) {
            let _ = tx.send((status, output));
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
