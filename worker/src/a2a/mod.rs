//! Remote agents over A2A 1.0 (`a2a_agents` of agent.yaml): each is a tool `a2a__<name>` taking one `message`.
//! Everything goes through the egress proxy like a command's traffic, so the manifest's host list decides what is
//! reached. A remote agent is treated as hostile: its card must keep its interface on the origin agent.yaml names,
//! its answer is cut at the tool-result bound, and a call that overruns its time-out cancels the remote task.
//!
//! - [`card`]: fetching and checking a card, and the tool it becomes;
//! - this module: the agents of a worker and their calls.

mod card;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use serde_json::{json, Value};
use service_ipc::{A2aAgent, EventPayload, ToolSpec};
use tokio::sync::watch;

use crate::conn::Outbox;
use crate::mcp::bounds::{cut, OUTPUT_CAP};
use crate::tools::{ToolCtx, ToolResult};
use card::Ready;

/// The prefix of an A2A agent's tool name.
pub const PREFIX: &str = "a2a__";

/// Bytes of one streamed answer read at most.
const MAX_STREAM: usize = 16 * 1024 * 1024;

/// Time a `CancelTask` for a timed-out call may take.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// The agents of one worker; their cards are fetched in the background as the worker starts.
pub struct Agents {
    loaded: watch::Receiver<Option<Arc<Loaded>>>,
}

#[derive(Default)]
struct Loaded {
    ready: Vec<Ready>,
    /// Agents whose card failed, with why.
    failed: Vec<(String, String)>,
}

impl Agents {
    /// Starts fetching the cards of `configs`; a failure is reported as `a2a_agent_failed`.
    pub fn start(configs: &[A2aAgent], outbox: Outbox) -> Agents {
        let (tx, loaded) = watch::channel(None);
        let configs = configs.to_vec();
        tokio::spawn(async move {
            let fetched = futures::future::join_all(configs.iter().map(card::fetch)).await;
            let mut done = Loaded::default();
            for (config, result) in configs.iter().zip(fetched) {
                match result {
                    Ok(ready) => done.ready.push(ready),
                    Err(message) => {
                        outbox
                            .event(EventPayload::A2aAgentFailed {
                                agent: config.name.clone(),
                                message: message.clone(),
                            })
                            .await;
                        done.failed.push((config.name.clone(), message));
                    }
                }
            }
            let _ = tx.send(Some(Arc::new(done)));
        });
        Agents { loaded }
    }

    async fn loaded(&self) -> Arc<Loaded> {
        let mut rx = self.loaded.clone();
        loop {
            if let Some(l) = rx.borrow_and_update().clone() {
                return l;
            }
            if rx.changed().await.is_err() {
                return Arc::new(Loaded::default());
            }
        }
    }

    fn now(&self) -> Option<Arc<Loaded>> {
        self.loaded.borrow().clone()
    }

    /// The tools to offer, once every card has been fetched.
    pub async fn specs(&self) -> Vec<ToolSpec> {
        self.loaded()
            .await
            .ready
            .iter()
            .map(|r| r.spec.clone())
            .collect()
    }

    /// Whether `name` is a ready agent's tool.
    pub fn offers(&self, name: &str) -> bool {
        self.now()
            .is_some_and(|l| l.ready.iter().any(|r| r.spec.name == name))
    }

    /// Why the agent of tool `name` is not offered, when its card failed.
    pub fn failure_of(&self, name: &str) -> Option<String> {
        let agent = name.strip_prefix(PREFIX)?;
        let loaded = self.now()?;
        let (_, why) = loaded.failed.iter().find(|(n, _)| n == agent)?;
        Some(format!(
            "the A2A agent \"{agent}\" could not be reached: {why}"
        ))
    }

    /// Sends `args.message` to the agent of tool `name` and returns its answer; its streamed pieces go out as
    /// `tool_call_delta`.
    pub async fn call(&self, name: &str, args: Value, ctx: &ToolCtx<'_>) -> ToolResult {
        let Some(loaded) = self.now() else {
            return ToolResult::error(format!("tool \"{name}\" is not ready yet"));
        };
        let Some(agent) = loaded.ready.iter().find(|r| r.spec.name == name) else {
            return ToolResult::error(format!("tool \"{name}\" is not available"));
        };
        let Some(message) = args.get("message").and_then(Value::as_str) else {
            return ToolResult::error(format!(
                "{name} takes {{\"message\": \"...\"}}: the whole request, since the agent does not see this \
                 conversation"
            ));
        };
        let task = Arc::new(Mutex::new(None::<String>));
        let exchange = exchange(agent, message, &task, ctx);
        let stopped = tokio::select! {
            result = exchange => return result,
            _ = tokio::time::sleep(agent.timeout) => format!(
                "the agent did not finish within {} ms (tool_timeout_ms); its task was cancelled",
                agent.timeout.as_millis()
            ),
            _ = ctx.cancel.cancelled() => "interrupted; the agent's task was cancelled".to_string(),
        };
        let id = task.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(id) = id {
            let _ =
                tokio::time::timeout(CANCEL_WAIT, agent.rpc("CancelTask", json!({"id": id}))).await;
        }
        ToolResult::error(stopped)
    }
}

/// What a call has gathered of the remote task.
struct Answer {
    text: String,
    /// Bytes of the answer that went out as deltas; past [`OUTPUT_CAP`] no more do.
    streamed: usize,
}

/// Sends `message` and follows the remote task to its end, or to its question.
async fn exchange(
    agent: &Ready,
    message: &str,
    task: &Mutex<Option<String>>,
    ctx: &ToolCtx<'_>,
) -> ToolResult {
    let params = json!({
        "message": {"messageId": uuid::Uuid::new_v4().to_string(), "role": "ROLE_USER",
                    "parts": [{"text": message}]},
        "configuration": {"acceptedOutputModes": ["text/plain"]},
    });
    let mut answer = Answer {
        text: String::new(),
        streamed: 0,
    };
    if !agent.streaming {
        return match agent.rpc("SendMessage", params).await {
            Ok(result) => match follow(&mut answer, &result, task, ctx).await {
                Some(done) => done,
                None => unfinished(answer),
            },
            Err(e) => ToolResult::error(e),
        };
    }
    let response = match agent.post("SendStreamingMessage", params).await {
        Ok(r) => r,
        Err(e) => return ToolResult::error(e),
    };
    let is_stream = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !is_stream {
        // An error before the stream began comes as one JSON-RPC response.
        return match card::read_rpc(response).await {
            Ok(result) => follow(&mut answer, &result, task, ctx)
                .await
                .unwrap_or_else(|| unfinished(answer)),
            Err(e) => ToolResult::error(e),
        };
    }
    // A stream past its byte budget ends there, so one endless event cannot fill the worker's memory.
    let mut budget = MAX_STREAM;
    let body = response.bytes_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        budget = budget.checked_sub(chunk.len()).ok_or_else(|| {
            std::io::Error::other(format!("the answer passed {MAX_STREAM} bytes"))
        })?;
        Ok::<_, std::io::Error>(chunk)
    });
    let mut events = sse_stream::SseStream::from_bytes_stream(body);
    while let Some(event) = events.next().await {
        let Ok(event) = event else {
            break;
        };
        let Some(data) = event.data else { continue };
        let result = match card::rpc_result(&data) {
            Ok(r) => r,
            Err(e) => return ToolResult::error(e),
        };
        if let Some(done) = follow(&mut answer, &result, task, ctx).await {
            return done;
        }
    }
    unfinished(answer)
}

/// The answer of a stream that ended before its task did.
fn unfinished(answer: Answer) -> ToolResult {
    if answer.text.is_empty() {
        return ToolResult::error("the agent's answer ended before its task did, with no text");
    }
    ToolResult::ok(cut(format!(
        "{}\n[the agent's answer ended before its task did]",
        answer.text
    )))
}

/// Takes one result (a task, a message or a streamed update) into `answer`; the tool's result once the task ended
/// or asked a question.
async fn follow(
    answer: &mut Answer,
    result: &Value,
    task: &Mutex<Option<String>>,
    ctx: &ToolCtx<'_>,
) -> Option<ToolResult> {
    if let Some(t) = result.get("task") {
        if let Some(id) = t["id"].as_str() {
            *task.lock().unwrap_or_else(|p| p.into_inner()) = Some(id.to_string());
        }
        for artifact in t["artifacts"].as_array().into_iter().flatten() {
            answer.text.push_str(&parts_text(&artifact["parts"]));
        }
        return ended(answer, &t["status"]);
    }
    if let Some(m) = result.get("message") {
        return Some(ToolResult::ok(cut(parts_text(&m["parts"]))));
    }
    if let Some(u) = result.get("artifactUpdate") {
        let piece = parts_text(&u["artifact"]["parts"]);
        // Kept up to one byte past the cap, so that `cut` still notes the cut.
        let mut room = (OUTPUT_CAP + 1)
            .saturating_sub(answer.text.len())
            .min(piece.len());
        while !piece.is_char_boundary(room) {
            room -= 1;
        }
        answer.text.push_str(&piece[..room]);
        if answer.streamed < OUTPUT_CAP && !piece.is_empty() {
            answer.streamed += piece.len();
            ctx.outbox
                .event(EventPayload::ToolCallDelta {
                    turn_id: ctx.turn_id.to_string(),
                    call_id: ctx.call_id.to_string(),
                    delta: cut(piece),
                })
                .await;
        }
        return None;
    }
    if let Some(u) = result.get("statusUpdate") {
        return ended(answer, &u["status"]);
    }
    None
}

/// The tool's result when `status` ends the remote task or asks the caller something.
fn ended(answer: &mut Answer, status: &Value) -> Option<ToolResult> {
    let said = parts_text(&status["message"]["parts"]);
    match status["state"].as_str().unwrap_or_default() {
        "TASK_STATE_COMPLETED" => {
            let text = if answer.text.is_empty() {
                said
            } else {
                std::mem::take(&mut answer.text)
            };
            Some(ToolResult::ok(cut(text)))
        }
        "TASK_STATE_INPUT_REQUIRED" | "TASK_STATE_AUTH_REQUIRED" => Some(ToolResult::ok(cut(
            format!("The agent needs more before it can go on, and asks: {said}"),
        ))),
        state @ ("TASK_STATE_FAILED" | "TASK_STATE_CANCELED" | "TASK_STATE_REJECTED") => {
            Some(ToolResult::error(cut(format!(
                "the agent's task ended {}: {said}",
                state.trim_start_matches("TASK_STATE_").to_lowercase()
            ))))
        }
        _ => None,
    }
}

/// The text of `parts`, one text part after another; other parts are noted, not kept.
fn parts_text(parts: &Value) -> String {
    let mut text = String::new();
    for part in parts.as_array().into_iter().flatten() {
        if let Some(t) = part["text"].as_str() {
            text.push_str(t);
        } else if let Some(d) = part.get("data") {
            text.push_str(&d.to_string());
        } else {
            text.push_str("[a file part, not shown]");
        }
    }
    text
}
