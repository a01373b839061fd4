//! Every turn is led by the supervisor until it needs its sandbox.
//!
//! The supervisor makes a turn's first model call itself, with the query the worker would have built (the worker
//! library's own functions build it), and streams the reply as the turn's events. A reply with no tool call ends
//! the turn there: no sandbox is started, and no worker is involved, for a turn that runs nothing. A reply with
//! tool calls starts the worker (a spare when one is ready) when none runs, and hands it the turn in `RunTurn`,
//! carrying the reply: the worker runs the calls and goes on as for any turn. When the bundle offers tools and the
//! first call has not answered within [`AHEAD_AFTER`] (by default), the worker starts beside it, so that with a
//! real model the sandbox's start is behind the model's time rather than added to the turn. Once the session's
//! model has answered a first call, what it took decides instead, with no timer (`model_pace`).
//!
//! Nothing here comes from the sandbox: the supervisor chose the model and wrote the query from its own state, and
//! the worker receives only what the model answered, which it would have been sent anyway. Bundles with MCP servers
//! are never led, because their tools are known only once the servers run in the sandbox.
//!
//! A new session's first call may be made before the session is (`model_call::ahead`, for `run`): the lead then
//! reads that call's reply instead of making one.
//!
//! A session's worker keeps its own copy of the conversation, which lacks the turns the supervisor ended by itself:
//! their messages are sent to it in `AppendHistory`. That happens under the lock a worker's start holds while it
//! reads the history, so a worker started meanwhile (by an operator command) gets each message exactly once.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use service_ipc::{
    ChatMessage, ChatRole, FirstReply, ModelQuery, ModelRef, ModelRequest, Task, ToWorker,
    ToolSpec, TurnContext, TurnStatus, Usage,
};
use service_worker::turn::{Piece, Reply};
use tokio_util::sync::CancellationToken;

use super::error::{Result, RuntimeError};
use super::handle::WorkerHandle;
use super::session::{Session, TurnEnd};
use super::{model_call, Inner};
use crate::bundle::Bundle;
use crate::project_instructions::ProjectInstructions;

/// The messages and tools of the first model call of a turn of `prompt` over `history`, as a worker of `bundle`
/// asks them; None when its bundle has MCP servers, whose tools only the worker knows.
pub(super) fn first_query(
    bundle: &Bundle,
    instructions: &ProjectInstructions,
    mut history: Vec<ChatMessage>,
    prompt: &str,
) -> Option<(Vec<ChatMessage>, Vec<ToolSpec>)> {
    if !bundle.agent.supervisor_may_lead() {
        return None;
    }
    history.push(ChatMessage::text(ChatRole::User, prompt));
    let agent = &bundle.agent;
    let tools = &bundle.manifest.tools;
    let skills = bundle
        .skills
        .iter()
        .map(|s| (s.name.as_str(), s.description.as_str()));
    let system = service_worker::turn::system_prompt(
        &instructions.system_prompt(&agent.system_prompt),
        tools,
        skills,
    );
    let messages =
        service_worker::memory::prompt(&system, &history, agent.memory.window_messages());
    Some((messages, service_worker::tools::specs(tools)))
}

/// The request of a turn's first model call, of `query` to `model`.
pub(super) fn request(
    model: ModelRef,
    turn_id: &str,
    (messages, tools): (Vec<ChatMessage>, Vec<ToolSpec>),
) -> ModelRequest {
    ModelRequest::new(
        model,
        ModelQuery {
            request_id: uuid::Uuid::new_v4().to_string(),
            turn_id: turn_id.to_string(),
            messages,
            tools,
        },
    )
}

/// Starts (or finds) the session's worker, when the turn comes to need it.
pub(super) type StartWorker = Box<dyn FnOnce() -> BoxFuture<'static, Result<WorkerHandle>> + Send>;

/// A turn the supervisor leads: what its worker needs if it comes to one.
pub(super) struct Led {
    /// The runtime's shared state, for the model call.
    pub rt: Arc<Inner>,
    /// The session.
    pub session: Arc<Session>,
    /// The turn's id.
    pub turn_id: String,
    /// The user's input.
    pub task: Task,
    /// The turn's context, as `turn_started` gave it.
    pub context: TurnContext,
    /// The model the supervisor chose.
    pub model: ModelRef,
    /// Cancelled when the turn ends or is interrupted (see `Session::lead`).
    pub cancel: CancellationToken,
    /// The workspace's checkpoint before the turn, taken while the first call is on the wire: no tool runs, and
    /// the turn does not end, before it is done.
    pub checkpoint: Option<super::checkpoints::Pending>,
    /// Cancelled once the first call has its answer: a worker not yet started ahead of the turn is not started
    /// then (see `RuntimeOptions::worker_ahead_after`).
    pub first_done: CancellationToken,
    /// When the lead began: what the first call takes to its whole reply paces the next turn (`model_pace`).
    pub began: std::time::Instant,
}

/// How long a turn's first model call runs, by default, before the session's worker starts beside it, when the
/// bundle offers tools. A model on loopback answers within a few milliseconds, and a turn that ends in that text
/// starts no sandbox; a real model takes hundreds, behind which the sandbox's start (about 10 ms) is hidden. A
/// turn that ends in text after that keeps the worker as the session's, as any turn that ran a tool does.
pub(super) const AHEAD_AFTER: std::time::Duration = std::time::Duration::from_millis(10);

/// A turn's first model call, as its lead gets it.
pub(super) enum FirstCall {
    /// The query to ask (see `first_query`).
    Ask((Vec<ChatMessage>, Vec<ToolSpec>)),
    /// A call already made, ahead of a new session (see `model_call::ahead`).
    Made(model_call::Ahead),
}

/// What the first reply came to.
enum Outcome {
    /// It streamed to its end.
    Done(Reply, Usage),
    /// The call failed, or the turn had to stop: `(code, message)`.
    Failed(String, String),
    /// The turn was interrupted, or ended elsewhere.
    Cancelled,
}

impl Led {
    /// Leads the turn from its `first` call to its end, or to its worker, started with `start_worker`.
    pub(super) async fn run(mut self, first: FirstCall, start_worker: StartWorker) {
        let outcome = self.first_reply(first).await;
        self.first_done.cancel();
        if matches!(outcome, Outcome::Done(..)) {
            // The worker started ahead hides behind the whole reply, whose end says whether a tool is called.
            self.session.model_pace.note(self.began.elapsed());
        }
        let outcome = match outcome {
            done @ Outcome::Done(..) => {
                match super::checkpoints::settled(self.checkpoint.take()).await {
                    Ok(()) => done,
                    Err((code, message)) => Outcome::Failed(code, message),
                }
            }
            other => other,
        };
        match outcome {
            Outcome::Cancelled => self.interrupted(None),
            Outcome::Failed(code, message) => {
                // As a worker keeps it: the prompt, which the model did not answer.
                let asked = vec![self.prompt()];
                self.end(
                    TurnStatus::Failed,
                    String::new(),
                    asked,
                    Usage::default(),
                    Some((code, message)),
                );
            }
            Outcome::Done(reply, usage) if reply.calls.is_empty() => {
                self.answered(reply.text, reply.opaque, usage).await
            }
            Outcome::Done(reply, usage) => {
                // The turn goes on with tools, as a worker's call that calls tools says.
                self.session.emit(service_ipc::EventPayload::UsageUpdate {
                    turn_id: self.turn_id.clone(),
                    usage: self.session.turn_usage(&self.turn_id).unwrap_or_default(),
                });
                let reply = FirstReply {
                    text: reply.text,
                    tool_calls: reply.calls,
                    opaque: reply.opaque,
                    usage,
                };
                self.hand_over(reply, start_worker).await
            }
        }
    }

    /// Streams the first model call's reply as the turn's events, batching the chunks that are ready together.
    async fn first_reply(&self, first: FirstCall) -> Outcome {
        let mut stream = match first {
            FirstCall::Ask(query) => {
                let request = request(self.model.clone(), &self.turn_id, query);
                model_call::stream(&self.rt, &self.session, request)
            }
            FirstCall::Made(ahead) => ahead.stream(&self.rt, &self.session),
        };
        let mut reply = Reply::default();
        loop {
            let mut next = tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Outcome::Cancelled,
                chunk = stream.next() => chunk,
            };
            let mut batch = Vec::new();
            let end = loop {
                let Some(chunk) = next else {
                    break Some(Outcome::Failed(
                        "model_stream_ended".into(),
                        "the model's stream ended before its answer did".into(),
                    ));
                };
                match reply.take(&self.turn_id, chunk) {
                    Piece::Event(event) => batch.push(event),
                    Piece::Kept => {}
                    Piece::Done(usage) => {
                        break Some(Outcome::Done(std::mem::take(&mut reply), usage))
                    }
                    Piece::Failed(code, message) => break Some(Outcome::Failed(code, message)),
                }
                match stream.next().now_or_never() {
                    Some(chunk) => next = chunk,
                    None => break None,
                }
            };
            if self.cancel.is_cancelled() || !self.session.emit_in_turn(&self.turn_id, batch) {
                return Outcome::Cancelled;
            }
            if let Some((code, cause)) = self.session.take_fault() {
                return Outcome::Failed(code, cause);
            }
            let quota = self.rt.options.journal_quota;
            if self.session.journal.bytes() >= quota {
                return Outcome::Failed(
                    "journal_quota".into(),
                    format!(
                        "the session's journal reached its quota of {quota} bytes; the turn was stopped. Delete \
                         the session and start a new one"
                    ),
                );
            }
            if let Some(end) = end {
                return end;
            }
        }
    }

    /// Ends a turn whose reply called no tool, as the worker would have.
    async fn answered(&self, text: String, opaque: Vec<serde_json::Value>, usage: Usage) {
        let mut answer = ChatMessage::text(ChatRole::Assistant, text.clone());
        answer.opaque = opaque;
        let messages = vec![self.prompt(), answer];
        let (status, error) = if text.trim().is_empty() {
            let (code, message) = service_worker::turn::empty_response();
            (TurnStatus::Failed, Some((code.into(), message.into())))
        } else {
            (TurnStatus::Completed, None)
        };
        let final_message = if error.is_none() { text } else { String::new() };
        // Held while the end is saved: a worker started meanwhile has read the history without this turn, and one
        // starting now waits and reads it with the turn.
        let worker = self.session.worker.lock().await;
        let saved = self.end(status, final_message, messages.clone(), usage, error);
        if let Some(w) = worker.as_ref().filter(|w| saved && w.is_alive()) {
            let _ = w.send(ToWorker::AppendHistory { messages }).await;
        }
    }

    /// Starts the worker and gives it the turn from the first reply's tool calls.
    async fn hand_over(self, reply: FirstReply, start_worker: StartWorker) {
        let worker = match start_worker().await {
            Ok(w) => w,
            Err(e) => {
                let code = match e {
                    RuntimeError::SandboxUnavailable(_) => "sandbox_unavailable",
                    RuntimeError::BundleRemoved(_) => "bundle_removed",
                    _ => "worker_unavailable",
                };
                let message = format!(
                    "the turn needs its sandbox to run a tool, and it could not start: {e}"
                );
                self.end(
                    TurnStatus::Failed,
                    String::new(),
                    Vec::new(),
                    Usage::default(),
                    Some((code.into(), message)),
                );
                return;
            }
        };
        let run = ToWorker::RunTurn {
            turn_id: self.turn_id.clone(),
            task: self.task.clone(),
            context: self.context.clone(),
            first_reply: Some(reply.clone()),
        };
        match self
            .session
            .hand_over(&self.turn_id, || worker.try_send(run))
        {
            Some(true) => {}
            Some(false) => {
                self.session
                    .fail_active_turn("worker_unavailable", "the worker could not take the turn");
            }
            None => self.interrupted(Some(reply)),
        }
    }

    /// Ends a turn interrupted before its worker had it (a no-op when it ended otherwise). Calls the reply made
    /// get a result each, so the history stays valid for the next turn.
    fn interrupted(&self, reply: Option<FirstReply>) {
        let mut messages = vec![self.prompt()];
        let mut usage = Usage::default();
        if let Some(reply) = reply {
            usage = reply.usage;
            messages.push(ChatMessage {
                role: ChatRole::Assistant,
                content: reply.text,
                tool_calls: reply.tool_calls.clone(),
                tool_call_id: None,
                opaque: reply.opaque,
            });
            for call in &reply.tool_calls {
                messages.push(ChatMessage::tool_result(
                    &call.id,
                    "not run: the turn was interrupted",
                ));
            }
        }
        let error = (
            "interrupted".into(),
            "the turn was interrupted by the operator".into(),
        );
        self.end(
            TurnStatus::Interrupted,
            String::new(),
            messages,
            usage,
            Some(error),
        );
    }

    /// The turn's user message.
    fn prompt(&self) -> ChatMessage {
        ChatMessage::text(ChatRole::User, self.task.prompt.clone())
    }

    /// Records the turn's end (see `Session::finish_turn`); true when it was running and its messages are saved.
    fn end(
        &self,
        status: TurnStatus,
        final_message: String,
        messages: Vec<ChatMessage>,
        usage: Usage,
        error: Option<(String, String)>,
    ) -> bool {
        self.session.finish_turn(TurnEnd {
            turn_id: self.turn_id.clone(),
            status,
            final_message,
            messages,
            usage,
            error,
        })
    }
}
