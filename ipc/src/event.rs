//! Session events: the envelope (`EventMsg`) and one payload variant per kind of event.

use serde::{Deserialize, Serialize};

use crate::chat::{ToolSpec, TurnActivity, Usage};
use crate::names::ApprovalDecision;
use crate::task::TurnContext;

/// One session event as journaled and streamed: `{id, session_id, created_at, payload: {type, payload}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct EventMsg {
    /// Session-monotonic sequence number as a decimal string (also the SSE `id:`).
    pub id: String,
    /// Session the event belongs to.
    pub session_id: String,
    /// RFC 3339 creation time (UTC).
    pub created_at: String,
    /// The kind of event and its data.
    pub payload: EventPayload,
}

impl EventMsg {
    /// The sequence number of this event, or None when `id` is not a number (never for events we write).
    pub fn seq(&self) -> Option<u64> {
        self.id.parse().ok()
    }
}

/// Which output stream of a subprocess a chunk came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum ExecStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum ToolCallStatus {
    /// The tool ran and succeeded.
    Ok,
    /// The tool ran, or tried to, and failed; the output says why.
    Error,
    /// A rule or the operator refused the call.
    Denied,
}

/// How a turn ended, as reported in `TurnFinished` and session records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum TurnStatus {
    /// Ended with `turn_completed`.
    Completed,
    /// Ended with an `error` event.
    Failed,
    /// Stopped by an interrupt (an `error` event of code `interrupted`), or cut short when the process running it
    /// died (`supervisor_restarted`, `node_lost`).
    Interrupted,
}

/// What the egress proxy did with a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum NetworkDecision {
    /// Let through.
    Allow,
    /// Refused with a 403 that names the host.
    Deny,
}

/// State of one plan step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum PlanStatus {
    /// Not started.
    Pending,
    /// Being worked on.
    InProgress,
    /// Done.
    Completed,
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct PlanItem {
    /// What the step does.
    pub step: String,
    /// Its state.
    pub status: PlanStatus,
}

/// A file a checkpoint passed over (see [`EventPayload::CheckpointSkipped`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct SkippedFile {
    /// Path in the workspace.
    pub path: String,
    /// Its size in bytes.
    pub size: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The data of one event; `type` is the snake_case kind name and the fields sit under `payload`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub enum EventPayload {
    /// A turn begins, with the values it runs with.
    TurnStarted {
        /// Turn id.
        turn_id: String,
        /// Resolved model, cwd and sandbox mode (boxed: the largest payload would size every event).
        context: Box<TurnContext>,
        /// The submission this turn answers.
        submission_id: String,
        /// The user prompt.
        prompt: String,
        /// The length of the conversation's log when the turn started: where a rewind or a fork to before this
        /// turn cuts the conversation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        history_mark: Option<u64>,
    },
    /// The turn ended successfully.
    TurnCompleted {
        /// Turn id.
        turn_id: String,
        /// The final assistant message.
        final_message: String,
        /// Token usage summed over the turn's model calls.
        usage: Usage,
        /// Its tool calls and times (absent in journals written before they were measured).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        activity: Option<TurnActivity>,
    },
    /// A piece of the assistant message.
    AgentMessageDelta {
        /// Turn id.
        turn_id: String,
        /// Text to append.
        delta: String,
    },
    /// A piece of reasoning.
    ReasoningDelta {
        /// Turn id.
        turn_id: String,
        /// Text to append.
        delta: String,
    },
    /// Break between reasoning sections.
    ReasoningSectionBreak {
        /// Turn id.
        turn_id: String,
    },
    /// A tool call begins.
    ToolCallStarted {
        /// Turn id.
        turn_id: String,
        /// Model-assigned call id.
        call_id: String,
        /// Tool name as the model called it.
        tool: String,
        /// Arguments as the model sent them (JSON).
        arguments: serde_json::Value,
        /// The `exec_id` of the CodeAct program that made this call; absent for a call from the model's reply.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parent_exec_id: Option<String>,
    },
    /// Progress of a tool call.
    ToolCallDelta {
        /// Turn id.
        turn_id: String,
        /// Call id.
        call_id: String,
        /// Human-readable progress.
        delta: String,
    },
    /// A tool call ends.
    ToolCallFinished {
        /// Turn id.
        turn_id: String,
        /// Call id.
        call_id: String,
        /// Tool name.
        tool: String,
        /// How it ended.
        status: ToolCallStatus,
        /// The result text the model sees.
        output: String,
        /// For a Write or an Edit that changed a file: a unified diff of the change.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<String>,
    },
    /// A subprocess starts inside the sandbox.
    ExecCommandBegin {
        /// Turn id; null for operator commands.
        turn_id: Option<String>,
        /// Process id for this command's events.
        exec_id: String,
        /// The tool call that started it; null for operator commands.
        call_id: Option<String>,
        /// The shell command.
        command: String,
        /// Where it runs.
        cwd: String,
    },
    /// Output of the subprocess.
    ExecCommandOutputDelta {
        /// Turn id; null for operator commands.
        turn_id: Option<String>,
        /// Process id.
        exec_id: String,
        /// `stdout` or `stderr`.
        stream: ExecStream,
        /// The output text (lossy UTF-8).
        chunk: String,
    },
    /// The subprocess wrote more than the live output cap; the rest of its output is dropped, not streamed.
    ExecCommandOutputTruncated {
        /// Turn id; null for operator commands.
        turn_id: Option<String>,
        /// Process id.
        exec_id: String,
        /// The cap in bytes that was reached.
        limit_bytes: u64,
    },
    /// The subprocess ends.
    ExecCommandEnd {
        /// Turn id; null for operator commands.
        turn_id: Option<String>,
        /// Process id.
        exec_id: String,
        /// Exit code; null when killed by a signal.
        exit_code: Option<i32>,
        /// Wall time.
        duration_ms: u64,
        /// True when the time-out killed it.
        timed_out: bool,
    },
    /// A rule resolved to `ask` and a decision is needed.
    PermissionRequested {
        /// Turn id.
        turn_id: String,
        /// Id to answer with.
        request_id: String,
        /// The paused tool call.
        call_id: String,
        /// Tool name: a builtin, or `mcp__<server>__<tool>`.
        tool: String,
        /// The key argument (command, path or pattern).
        summary: String,
        /// The rule that asked, as written in agent.yaml; null for the default.
        rule: Option<String>,
        /// For Write and Edit: a unified diff (`-`/`+` lines) of what the call would change, as the worker computed
        /// it from the file it sees; omitted for other tools.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        diff: Option<String>,
        /// The rule `allow_project` would keep for the session's project directory (`Bash(npm test:*)`,
        /// `Edit(/workspace/src/**)`); omitted where none is offered.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        project_rule: Option<String>,
        /// What would make the call fail if allowed, as the supervisor sees the host (a file the sandbox's user may
        /// not write); omitted when nothing is known to.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        warning: Option<String>,
        /// On a parent's stream, the subagent's session that asks (`call_id` is then the parent's `Agent` call);
        /// absent for the session's own calls.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        child_session_id: Option<String>,
    },
    /// A decision was given.
    ApprovalResolved {
        /// Turn id.
        turn_id: String,
        /// The request it answers.
        request_id: String,
        /// The decision.
        decision: ApprovalDecision,
        /// With a denial, the reason the model was given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// On a parent's stream, the subagent's session whose request it answers.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        child_session_id: Option<String>,
        /// When a `PermissionRequest` hook answered rather than a person: its source and command.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hook: Option<HookRef>,
    },
    /// A hook started (see agent.yaml's `hooks`).
    HookStarted {
        /// The turn it runs in; null outside one (`SessionStart`).
        turn_id: Option<String>,
        /// Id of this run, shared with its `hook_finished`.
        hook_id: String,
        /// The event it runs on.
        event: crate::HookEvent,
        /// Where it was declared, and its command.
        hook: HookRef,
        /// The tool call it runs for, on tool events.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
    },
    /// A hook ended, and what it decided.
    HookFinished {
        /// The turn it ran in; null outside one.
        turn_id: Option<String>,
        /// Id of this run.
        hook_id: String,
        /// The event it ran on.
        event: crate::HookEvent,
        /// Where it was declared, and its command.
        hook: HookRef,
        /// The matcher that selected it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        matcher: Option<String>,
        /// Exit code; null when it was killed (time-out) or could not start.
        exit_code: Option<i32>,
        /// Its time-out killed it.
        #[serde(default)]
        timed_out: bool,
        /// What it decided: `allow`, `deny`, `ask`, `block`, `context`, `warning`, or null for nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decision: Option<String>,
        /// The reason or message it gave with its decision (stderr on exit 2), cut at 4 KiB.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
        /// Wall time in milliseconds.
        duration_ms: u64,
    },
    /// An `Agent` call started a subagent: a child session whose turn runs the call's prompt.
    SubagentStarted {
        /// The parent's turn.
        turn_id: String,
        /// The parent's `Agent` call.
        call_id: String,
        /// The subagent's name in agent.yaml (or the bundle, for `subagents: ["*"]`).
        subagent: String,
        /// The child session; its own events are on its own stream.
        child_session_id: String,
    },
    /// A subagent's turn ended; its answer (or error) is the `Agent` call's result.
    SubagentFinished {
        /// The parent's turn.
        turn_id: String,
        /// The parent's `Agent` call.
        call_id: String,
        /// The subagent's name.
        subagent: String,
        /// The child session.
        child_session_id: String,
        /// How the child's turn ended.
        outcome: TurnStatus,
        /// The child's tokens, which count towards the parent's turn.
        usage: Usage,
    },
    /// The egress proxy decided on a connection from the sandbox.
    NetworkAccess {
        /// The turn running when it was opened; null outside turns (operator commands).
        turn_id: Option<String>,
        /// Id that ties the decision to its `network_closed`.
        connection_id: String,
        /// Host as the client named it (CONNECT authority or absolute URL).
        host: String,
        /// Port.
        port: u16,
        /// `allow` or `deny`.
        decision: NetworkDecision,
        /// The manifest entry or approval that decided, e.g. `"*.pythonhosted.org"`, `"approval"`; null when no
        /// rule allowed it.
        rule: Option<String>,
        /// Why it was refused; null when allowed.
        reason: Option<String>,
    },
    /// An allowed connection ended.
    NetworkClosed {
        /// The turn running when it was opened; null outside turns.
        turn_id: Option<String>,
        /// The `network_access` it closes.
        connection_id: String,
        /// Host.
        host: String,
        /// Port.
        port: u16,
        /// Bytes from the sandbox to the host.
        bytes_sent: u64,
        /// Bytes from the host to the sandbox.
        bytes_received: u64,
        /// How long it was open.
        duration_ms: u64,
    },
    /// The session's journal reached its quota while its sandbox kept making network events: they were not
    /// journaled, and the proxy turned the sandbox's new connections away. Written once, when the worker's proxy
    /// ends.
    NetworkRefusalsSuppressed {
        /// Network events left out of the journal, and connections turned away, after the quota was reached.
        count: u64,
        /// The quota in bytes.
        quota: u64,
    },
    /// `permissions.network: ask` and a host not on the list: a decision is needed before the connection opens.
    NetworkPermissionRequested {
        /// Turn id.
        turn_id: String,
        /// Id to answer with (`POST /approvals/{id}`).
        request_id: String,
        /// Host.
        host: String,
        /// Port.
        port: u16,
        /// What the supervisor resolved it to; an approval lets the connection reach exactly these.
        addresses: Vec<String>,
        /// True when one of them is loopback, private or link-local: approving exposes a service on the host's
        /// side rather than the internet.
        internal: bool,
        /// On a parent's stream, the subagent's session that asks.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        child_session_id: Option<String>,
    },
    /// The plan changed.
    PlanUpdate {
        /// Turn id.
        turn_id: String,
        /// Why it changed.
        explanation: Option<String>,
        /// The whole plan.
        plan: Vec<PlanItem>,
    },
    /// An MCP server started and offered these tools (named as the model sees them, `mcp__<server>__<tool>`).
    McpServerStarted {
        /// Server name from agent.yaml.
        server: String,
        /// Its tools.
        tools: Vec<ToolSpec>,
        /// Time from spawn to the tool list.
        startup_ms: u64,
    },
    /// An MCP server changed its tool list (`notifications/tools/list_changed`); the next model call sees this one.
    McpToolsChanged {
        /// Server name.
        server: String,
        /// Its tools now.
        tools: Vec<ToolSpec>,
    },
    /// An MCP server failed to start or died; its tools are gone for the rest of the worker's life.
    McpServerFailed {
        /// Server name.
        server: String,
        /// What happened.
        message: String,
        /// The last lines it wrote to stderr.
        stderr_tail: String,
    },
    /// What the running turn has used so far, after each model call that goes on to run tools; the turn's end
    /// carries the total. The supervisor's count, never the worker's.
    UsageUpdate {
        /// Turn id.
        turn_id: String,
        /// The turn's usage so far.
        usage: crate::Usage,
    },
    /// A remote A2A agent of `a2a_agents` could not be reached or described itself wrongly as the worker started;
    /// its tool is not offered, and the session goes on without it.
    A2aAgentFailed {
        /// Its name from agent.yaml.
        agent: String,
        /// What happened.
        message: String,
    },
    /// The session's workspace was checkpointed before the turn ran anything (see `sessions rewind`).
    CheckpointCreated {
        /// Turn id.
        turn_id: String,
        /// Files in the workspace.
        files: u64,
        /// Bytes of content stored that no checkpoint held before.
        bytes_new: u64,
        /// Turns (by id, oldest first) whose checkpoints were dropped to keep the session within its bound.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        dropped: Vec<String>,
        /// Set when earlier turns have no checkpoint on this node (it took the session over, or checkpoints were
        /// off): says which, and why.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        note: Option<String>,
    },
    /// Files a checkpoint of the turn did not keep: each one's size (`st_size`, holes included) would have taken the
    /// session past `checkpoint_max_mb`. They were never read; a rewind to this checkpoint leaves them as they are.
    CheckpointSkipped {
        /// Turn id.
        turn_id: String,
        /// The files, at most 50, largest first.
        files: Vec<SkippedFile>,
        /// How many more were passed over than `files` lists.
        #[serde(default, skip_serializing_if = "is_zero")]
        more: u64,
        /// The session's bound, `checkpoint_max_mb` in bytes.
        max_bytes: u64,
    },
    /// The session went back to before turn `to_turn`: its files, its conversation, or both.
    SessionRewound {
        /// The turn number (from 1) it went back to before.
        to_turn: u32,
        /// Whether the workspace's files were restored.
        files: bool,
        /// Whether the conversation was cut.
        conversation: bool,
        /// Paths the restore changed.
        #[serde(default)]
        restored: u64,
    },
    /// The session was forked from another: the events before this one are the parent's, as it was before
    /// turn `turn`.
    SessionForked {
        /// The parent session's id.
        from_session: String,
        /// The parent's turn (from 1) the fork was made before; one past its last turn for a fork of now.
        turn: u32,
        /// `copied` (a copy of the parent's workspace) or `shared` (the same host directory).
        workspace: String,
    },
    /// The conversation's older turns were replaced by a summary, so that it fits the model's context again.
    ContextCompacted {
        /// The turn it happened in (before its first call, or on an overflow); null for a compaction by hand.
        turn_id: Option<String>,
        /// Context tokens before: the last call's prompt as the provider counted it, else an estimate.
        before_tokens: u64,
        /// Context tokens after, estimated.
        after_tokens: u64,
        /// Turns the summary replaced.
        summarised_turns: u32,
        /// `auto` (past the threshold), `manual` or `overflow` (the provider refused the context).
        reason: String,
        /// The summary, as the model sees it from now on.
        summary: String,
    },
    /// A model call failed before any output and will be tried again; journaled by the supervisor, which makes
    /// the call.
    ModelRetry {
        /// Turn id.
        turn_id: String,
        /// The attempt that failed, from 1.
        attempt: u32,
        /// Attempts allowed for this kind of failure.
        max_attempts: u32,
        /// Wait before the next attempt.
        delay_ms: u64,
        /// What failed, with the URL tried, e.g. "HTTP 503 from http://127.0.0.1:8080/v1/chat/completions: busy".
        reason: String,
    },
    /// The turn failed (or, with a null turn id, the session hit a problem outside a turn).
    Error {
        /// Turn id, when the error ended a turn.
        turn_id: Option<String>,
        /// Stable snake_case code, e.g. `worker_died`.
        code: String,
        /// What went wrong and what to do.
        message: String,
    },
}

/// A hook as events name it: where it was declared and its command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct HookRef {
    /// Where it was declared.
    pub source: crate::HookSource,
    /// Its command line.
    pub command: String,
}

impl EventPayload {
    /// The snake_case kind name, the same string as the serialised `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            EventPayload::TurnStarted { .. } => "turn_started",
            EventPayload::TurnCompleted { .. } => "turn_completed",
            EventPayload::AgentMessageDelta { .. } => "agent_message_delta",
            EventPayload::ReasoningDelta { .. } => "reasoning_delta",
            EventPayload::ReasoningSectionBreak { .. } => "reasoning_section_break",
            EventPayload::ToolCallStarted { .. } => "tool_call_started",
            EventPayload::ToolCallDelta { .. } => "tool_call_delta",
            EventPayload::ToolCallFinished { .. } => "tool_call_finished",
            EventPayload::ExecCommandBegin { .. } => "exec_command_begin",
            EventPayload::ExecCommandOutputDelta { .. } => "exec_command_output_delta",
            EventPayload::ExecCommandOutputTruncated { .. } => "exec_command_output_truncated",
            EventPayload::ExecCommandEnd { .. } => "exec_command_end",
            EventPayload::PermissionRequested { .. } => "permission_requested",
            EventPayload::ApprovalResolved { .. } => "approval_resolved",
            EventPayload::HookStarted { .. } => "hook_started",
            EventPayload::HookFinished { .. } => "hook_finished",
            EventPayload::SubagentStarted { .. } => "subagent_started",
            EventPayload::SubagentFinished { .. } => "subagent_finished",
            EventPayload::NetworkAccess { .. } => "network_access",
            EventPayload::NetworkClosed { .. } => "network_closed",
            EventPayload::NetworkRefusalsSuppressed { .. } => "network_refusals_suppressed",
            EventPayload::NetworkPermissionRequested { .. } => "network_permission_requested",
            EventPayload::PlanUpdate { .. } => "plan_update",
            EventPayload::ModelRetry { .. } => "model_retry",
            EventPayload::McpServerStarted { .. } => "mcp_server_started",
            EventPayload::McpToolsChanged { .. } => "mcp_tools_changed",
            EventPayload::McpServerFailed { .. } => "mcp_server_failed",
            EventPayload::A2aAgentFailed { .. } => "a2a_agent_failed",
            EventPayload::UsageUpdate { .. } => "usage_update",
            EventPayload::ContextCompacted { .. } => "context_compacted",
            EventPayload::CheckpointCreated { .. } => "checkpoint_created",
            EventPayload::CheckpointSkipped { .. } => "checkpoint_skipped",
            EventPayload::SessionRewound { .. } => "session_rewound",
            EventPayload::SessionForked { .. } => "session_forked",
            EventPayload::Error { .. } => "error",
        }
    }

    /// The turn this event belongs to, if any.
    pub fn turn_id(&self) -> Option<&str> {
        match self {
            EventPayload::TurnStarted { turn_id, .. }
            | EventPayload::TurnCompleted { turn_id, .. }
            | EventPayload::AgentMessageDelta { turn_id, .. }
            | EventPayload::ReasoningDelta { turn_id, .. }
            | EventPayload::ReasoningSectionBreak { turn_id }
            | EventPayload::ToolCallStarted { turn_id, .. }
            | EventPayload::ToolCallDelta { turn_id, .. }
            | EventPayload::ToolCallFinished { turn_id, .. }
            | EventPayload::PermissionRequested { turn_id, .. }
            | EventPayload::ApprovalResolved { turn_id, .. }
            | EventPayload::SubagentStarted { turn_id, .. }
            | EventPayload::SubagentFinished { turn_id, .. }
            | EventPayload::NetworkPermissionRequested { turn_id, .. }
            | EventPayload::PlanUpdate { turn_id, .. }
            | EventPayload::UsageUpdate { turn_id, .. }
            | EventPayload::CheckpointCreated { turn_id, .. }
            | EventPayload::CheckpointSkipped { turn_id, .. }
            | EventPayload::ModelRetry { turn_id, .. } => Some(turn_id),
            EventPayload::ExecCommandBegin { turn_id, .. }
            | EventPayload::ExecCommandOutputDelta { turn_id, .. }
            | EventPayload::ExecCommandOutputTruncated { turn_id, .. }
            | EventPayload::ExecCommandEnd { turn_id, .. }
            | EventPayload::HookStarted { turn_id, .. }
            | EventPayload::HookFinished { turn_id, .. }
            | EventPayload::NetworkAccess { turn_id, .. }
            | EventPayload::NetworkClosed { turn_id, .. }
            | EventPayload::ContextCompacted { turn_id, .. }
            | EventPayload::Error { turn_id, .. } => turn_id.as_deref(),
            EventPayload::McpServerStarted { .. }
            | EventPayload::McpToolsChanged { .. }
            | EventPayload::McpServerFailed { .. }
            | EventPayload::A2aAgentFailed { .. }
            | EventPayload::SessionRewound { .. }
            | EventPayload::SessionForked { .. }
            | EventPayload::NetworkRefusalsSuppressed { .. } => None,
        }
    }

    /// True for the events that end a turn (`turn_completed`, or `error` with a turn id).
    pub fn ends_turn(&self) -> bool {
        match self {
            EventPayload::TurnCompleted { .. } => true,
            EventPayload::Error { turn_id, .. } => turn_id.is_some(),
            _ => false,
        }
    }
}
