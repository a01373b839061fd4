//! The two frame enums, one per direction of the supervisor/worker socket.

use serde::{Deserialize, Serialize};

use crate::chat::{ChatMessage, FirstReply, ModelChunk, ModelQuery, Usage};
use crate::config::WorkerConfig;
use crate::event::{EventPayload, TurnStatus};
use crate::names::ApprovalDecision;
use crate::task::{Task, TurnContext};

/// Frames from the supervisor to a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
#[allow(clippy::large_enum_variant)]
pub enum ToWorker {
    /// Answers `Hello`: the session's configuration. The worker replies `Ready`, or closes on a version mismatch.
    Configure(WorkerConfig),
    /// Run one turn. The worker replies with events, model requests, and finally `TurnFinished`.
    RunTurn {
        /// Turn id, chosen by the supervisor.
        turn_id: String,
        /// The user's input.
        task: Task,
        /// Resolved model, cwd and sandbox mode.
        context: TurnContext,
        /// The turn's first model reply, when the supervisor asked it before the turn needed a worker: its text
        /// was already streamed as events, and the worker goes on from its tool calls.
        #[serde(default)]
        first_reply: Option<FirstReply>,
    },
    /// Messages of turns that ended while this worker ran none of them (text-only turns the supervisor finished
    /// itself): the worker adds them to its copy of the conversation before the next turn.
    AppendHistory {
        /// The messages, in order.
        messages: Vec<ChatMessage>,
    },
    /// The conversation before the running turn (or before the next one) is now `messages`: the supervisor
    /// compacted it. A running turn keeps its own messages after them.
    ReplaceHistory {
        /// The messages, in order.
        messages: Vec<ChatMessage>,
        /// Why it was compacted (`auto`, `manual` or `overflow`): the session's `PostCompact` hooks run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trigger: Option<String>,
    },
    /// The supervisor is about to compact the conversation: the session's `PreCompact` hooks run, reading the
    /// conversation as it still is. Nothing waits for them.
    Compacting {
        /// `auto`, `manual` or `overflow`.
        trigger: String,
        /// What the user asked the summary to keep, for a compaction by hand.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        custom_instructions: Option<String>,
    },
    /// A streamed piece of the answer to `ModelRequest` `request_id`.
    ModelChunk {
        /// The request it answers.
        request_id: String,
        /// The piece.
        chunk: ModelChunk,
    },
    /// The answer to `PermissionRequest` `request_id`; the paused tool continues or returns a denial.
    ApprovalDecision {
        /// The request it answers.
        request_id: String,
        /// The decision.
        decision: ApprovalDecision,
        /// With a denial, why: the model reads it in the call's result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// The hook that decided, when one did rather than a person.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook: Option<crate::HookRef>,
    },
    /// Run an operator command in the session sandbox; replies with `ExecCommand*` events, then `CommandFinished`.
    RunCommand {
        /// Id for the command's events.
        exec_id: String,
        /// Shell command line.
        command: String,
        /// Working directory; the workspace when null.
        cwd: Option<String>,
    },
    /// The answer to `SubagentCall` `request_id`: the child's answer, or why there is none.
    SubagentResult {
        /// The request it answers.
        request_id: String,
        /// `ok` with the child's answer, `error` when it failed, `denied` when the call was refused.
        status: crate::ToolCallStatus,
        /// The text the model gets as the `Agent` call's result.
        output: String,
    },
    /// Stop turn `turn_id`: running tools are killed and the turn ends as interrupted.
    Interrupt {
        /// The turn to stop.
        turn_id: String,
    },
    /// Exit after ending any running turn; the worker closes the socket.
    Shutdown,
}

/// Frames from a worker to the supervisor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
pub enum ToSupervisor {
    /// First frame: the worker's protocol version. Answered by `Configure`.
    Hello {
        /// The worker's [`crate::PROTOCOL_VERSION`].
        protocol_version: u32,
        /// The worker's process id (as seen inside its namespace).
        pid: u32,
    },
    /// Configuration applied; the worker accepts turns and commands.
    Ready,
    /// Sent periodically so the supervisor can tell a hung worker from a busy one.
    Heartbeat,
    /// A session event; the supervisor stamps, journals and broadcasts it.
    Event(EventPayload),
    /// Ask for a model completion of the running turn; answered by a stream of `ModelChunk` ending in `Done` or
    /// `Failed`. The supervisor chooses the model.
    ModelRequest(ModelQuery),
    /// Abandon a model request (the turn was interrupted); the supervisor stops streaming it.
    CancelModel {
        /// The request to abandon.
        request_id: String,
    },
    /// A tool call needs an operator decision; answered by `ApprovalDecision`.
    PermissionRequest {
        /// Id to answer with.
        request_id: String,
        /// Turn id.
        turn_id: String,
        /// The paused call.
        call_id: String,
        /// The tool: a builtin, or `mcp__<server>__<tool>`.
        tool: String,
        /// The key argument (command, path or pattern).
        key: String,
        /// The rule that asked; null for the default action.
        rule: Option<String>,
        /// For Write and Edit: a unified diff of what the call would change.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<String>,
        /// The answer of a `PermissionRequest` hook, which the supervisor gives in place of a person's when that
        /// hook is one of the session's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook: Option<HookAnswer>,
    },
    /// An `Agent` call: run `prompt` in a child session of the subagent named `subagent`; answered by
    /// `SubagentResult`. The supervisor decides from its own state whether the subagent exists and may run.
    SubagentCall {
        /// Id to answer with.
        request_id: String,
        /// Turn id.
        turn_id: String,
        /// The `Agent` tool call.
        call_id: String,
        /// The subagent's name.
        subagent: String,
        /// The child's prompt.
        prompt: String,
    },
    /// A turn ended; carries the messages it added to the conversation, to be persisted. The worker does not emit
    /// `turn_completed` or the turn's `error` itself: the supervisor emits it after recording the end, so a client
    /// that sees the end event finds the session idle.
    TurnFinished {
        /// Turn id.
        turn_id: String,
        /// How it ended.
        status: TurnStatus,
        /// The final assistant text (empty when the turn failed).
        final_message: String,
        /// Messages the turn appended: the user prompt, assistant messages, tool results.
        messages: Vec<ChatMessage>,
        /// Token usage over the turn.
        usage: Usage,
        /// Why it did not complete: `(code, message)` for the `error` event; null when completed.
        error: Option<(String, String)>,
    },
    /// An operator command ended.
    CommandFinished {
        /// The command's exec id.
        exec_id: String,
        /// Exit code; null when it was killed by a signal or could not start.
        exit_code: Option<i32>,
    },
}

/// A `PermissionRequest` hook's decision on a tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HookAnswer {
    /// The hook.
    pub hook: crate::event::HookRef,
    /// Allow or deny.
    pub decision: ApprovalDecision,
    /// Its message: with a denial, what the model is told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
