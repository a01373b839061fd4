//! The rules a worker's frames must keep before they have any effect. The worker shares its sandbox with the
//! commands it runs, so a frame may be a forgery: every check here uses the supervisor's own state (the running
//! turn, the running operator commands, the bundle's tools), never a field the worker could choose.

use std::collections::HashMap;

use service_ipc::{BuiltinTool, EventPayload};

use super::session::Session;

/// Model requests in flight at once (the react loop makes one at a time; cancelled ones may linger briefly).
pub const MAX_MODEL_REQUESTS: usize = 4;

/// `Agent` calls of one worker in flight at once: those past `subagents::ceiling::MAX_RUNNING` wait for a slot, and a
/// worker that asks for more than this is flooding.
pub const MAX_SUBAGENT_CALLS: usize = 64;
/// Output bytes journaled per command; an honest worker stops at its own cap (1 MiB) and says so.
pub const OUTPUT_PER_COMMAND: u64 = 1024 * 1024;
/// Commands whose output is being counted at once.
const MAX_COMMANDS: usize = 64;
/// Longest error message a worker may give for a failed turn.
const MAX_ERROR_MESSAGE: usize = 4096;
/// Longest key argument of a permission request.
const MAX_PERMISSION_KEY: usize = 64 * 1024;
/// Largest diff a worker may attach to a Write or an Edit (it cuts its own at 64 KiB, plus a line saying so).
const MAX_DIFF: usize = 65 * 1024;
/// Longest reason of a `hook_finished` event (the worker cuts at 4 KiB, plus an ellipsis).
const MAX_HOOK_REASON: usize = 4 * 1024 + 8;
/// Longest tool name in a permission request.
const MAX_TOOL_NAME: usize = 256;
/// MCP server events journaled per worker (start, failure and tool-list changes); later ones are dropped, so a
/// server that keeps changing its list cannot fill the journal.
const MAX_MCP_EVENTS: u32 = 256;

/// Per-worker accounting of command output.
#[derive(Default)]
pub struct Guard {
    output: HashMap<String, u64>,
    /// Model requests of the running turn: (turn id, count).
    model_calls: Option<(String, u32)>,
    /// MCP server events so far.
    mcp_events: u32,
}

impl Guard {
    /// Counts a model request of `turn_id`; more than `max_steps` in one turn (the react loop's own bound, from
    /// agent.yaml) is a worker spending the operator's provider budget on its own.
    pub fn model_request(&mut self, turn_id: &str, max_steps: u32) -> Result<(), String> {
        match &mut self.model_calls {
            Some((turn, count)) if turn == turn_id => *count += 1,
            slot => *slot = Some((turn_id.to_string(), 1)),
        }
        match &self.model_calls {
            Some((_, count)) if *count > max_steps => Err(format!(
                "more model requests in turn {turn_id} than max_steps ({max_steps}) allows"
            )),
            _ => Ok(()),
        }
    }

    /// Checks an event from the worker. `Ok(None)` drops it (output past the per-command cap); `Err` names the
    /// broken rule.
    pub fn event(
        &mut self,
        session: &Session,
        payload: EventPayload,
    ) -> Result<Option<EventPayload>, String> {
        use EventPayload as E;
        let kind = payload.kind();
        if let E::McpServerStarted { server, .. }
        | E::McpToolsChanged { server, .. }
        | E::McpServerFailed { server, .. } = &payload
        {
            if !session.bundle.agent.mcp_servers.contains_key(server) {
                return Err(format!(
                    "a {kind} event for MCP server {server:?}, which agent.yaml does not declare"
                ));
            }
            self.mcp_events += 1;
            return Ok((self.mcp_events <= MAX_MCP_EVENTS).then_some(payload));
        }
        if let E::A2aAgentFailed { agent, .. } = &payload {
            if !session
                .bundle
                .agent
                .a2a_agents
                .iter()
                .any(|a| &a.name == agent)
            {
                return Err(format!(
                    "a {kind} event for A2A agent {agent:?}, which agent.yaml does not declare"
                ));
            }
            self.mcp_events += 1;
            return Ok((self.mcp_events <= MAX_MCP_EVENTS).then_some(payload));
        }
        match &payload {
            E::AgentMessageDelta { .. }
            | E::ReasoningDelta { .. }
            | E::ReasoningSectionBreak { .. }
            | E::ToolCallStarted { .. }
            | E::ToolCallDelta { .. }
            | E::ToolCallFinished { .. }
            | E::PlanUpdate { .. }
            | E::UsageUpdate { .. }
            | E::ExecCommandBegin { .. }
            | E::ExecCommandOutputDelta { .. }
            | E::ExecCommandOutputTruncated { .. }
            | E::ExecCommandEnd { .. } => {}
            E::HookStarted { event, hook, .. } | E::HookFinished { event, hook, .. } => {
                known_hook(session, *event, hook)?;
                if let E::HookFinished {
                    reason: Some(reason),
                    ..
                } = &payload
                {
                    if reason.len() > MAX_HOOK_REASON {
                        return Err(format!(
                            "a hook_finished reason of {} bytes, past the {MAX_HOOK_REASON} the worker cuts at",
                            reason.len()
                        ));
                    }
                }
            }
            // Checked above.
            E::McpServerStarted { .. }
            | E::McpToolsChanged { .. }
            | E::McpServerFailed { .. }
            | E::A2aAgentFailed { .. } => {}
            E::TurnStarted { .. }
            | E::TurnCompleted { .. }
            | E::PermissionRequested { .. }
            | E::ApprovalResolved { .. }
            | E::NetworkAccess { .. }
            | E::NetworkClosed { .. }
            | E::NetworkRefusalsSuppressed { .. }
            | E::NetworkPermissionRequested { .. }
            | E::ModelRetry { .. }
            | E::ContextCompacted { .. }
            | E::CheckpointCreated { .. }
            | E::CheckpointSkipped { .. }
            | E::SessionRewound { .. }
            | E::SessionForked { .. }
            | E::SubagentStarted { .. }
            | E::SubagentFinished { .. }
            | E::Error { .. } => {
                return Err(format!("a {kind} event, which only the supervisor emits"))
            }
        }
        match payload.turn_id() {
            Some(turn_id) => running_turn(session, turn_id)?,
            // Compactions and a worker's end happen outside turns; their hooks' events are bounded as MCP
            // servers' are.
            None if outside_turns(&payload) => {
                self.mcp_events += 1;
                return Ok((self.mcp_events <= MAX_MCP_EVENTS).then_some(payload));
            }
            None => {
                let exec_id = exec_id(&payload).unwrap_or_default();
                if !session.command_running(exec_id) {
                    return Err(format!(
                        "a {kind} event outside a turn for command {exec_id}, which is not running"
                    ));
                }
            }
        }
        match &payload {
            E::ExecCommandBegin { exec_id, .. } => {
                if self.output.len() >= MAX_COMMANDS {
                    return Err(format!("more than {MAX_COMMANDS} commands at once"));
                }
                self.output.insert(exec_id.clone(), 0);
            }
            E::ExecCommandOutputDelta { exec_id, chunk, .. } => {
                let Some(used) = self.output.get_mut(exec_id) else {
                    return Err(format!("output for command {exec_id}, which has not begun"));
                };
                *used += chunk.len() as u64;
                if *used > OUTPUT_PER_COMMAND {
                    return Ok(None);
                }
            }
            E::ExecCommandEnd { exec_id, .. } => {
                self.output.remove(exec_id);
            }
            E::ToolCallFinished {
                tool,
                diff: Some(diff),
                ..
            } => file_diff(tool, diff)?,
            // The worker says when; the supervisor says how much, from its own count of the calls it made.
            E::UsageUpdate { turn_id, .. } => {
                let usage = session.turn_usage(turn_id).unwrap_or_default();
                return Ok(Some(E::UsageUpdate {
                    turn_id: turn_id.clone(),
                    usage,
                }));
            }
            _ => {}
        }
        Ok(Some(payload))
    }

    /// Forgets an operator command's accounting.
    pub fn command_finished(&mut self, exec_id: &str) {
        self.output.remove(exec_id);
    }
}

fn exec_id(payload: &EventPayload) -> Option<&str> {
    match payload {
        EventPayload::ExecCommandBegin { exec_id, .. }
        | EventPayload::ExecCommandOutputDelta { exec_id, .. }
        | EventPayload::ExecCommandOutputTruncated { exec_id, .. }
        | EventPayload::ExecCommandEnd { exec_id, .. } => Some(exec_id),
        _ => None,
    }
}

/// A hook event must name one of the hooks the session's worker was given, for its event: a worker cannot put
/// words in a hook's mouth that the session never had.
pub fn known_hook(
    session: &Session,
    event: service_ipc::HookEvent,
    hook: &service_ipc::HookRef,
) -> Result<(), String> {
    let known = session
        .hooks_given()
        .iter()
        .any(|h| h.event == event && h.source == hook.source && h.command == hook.command);
    if known {
        Ok(())
    } else {
        Err(format!(
            "a {event} hook event for the {} hook {:?}, which the session does not have",
            hook.source, hook.command
        ))
    }
}

/// A hook event of a point that comes outside turns: `PreCompact`, `PostCompact`, `SessionEnd`.
fn outside_turns(payload: &EventPayload) -> bool {
    use service_ipc::HookEvent as H;
    matches!(
        payload,
        EventPayload::HookStarted { event, .. } | EventPayload::HookFinished { event, .. }
            if matches!(event, H::PreCompact | H::PostCompact | H::SessionEnd)
    )
}

/// `turn_id` must be the session's running turn, handed to the worker: a turn the supervisor still leads (see
/// `lead`) is none of a worker's business, though one runs beside it (started ahead, or by a command).
pub fn running_turn(session: &Session, turn_id: &str) -> Result<(), String> {
    match session.handed_turn() {
        Some(handed) if handed == turn_id => Ok(()),
        _ => Err(format!(
            "a frame for turn {turn_id}, which is not running or not handed to it"
        )),
    }
}

/// A diff may come only with a Write or an Edit, and bounded.
fn file_diff(tool: &str, diff: &str) -> Result<(), String> {
    if !matches!(tool, "Write" | "Edit") {
        return Err(format!(
            "a diff with a {tool} call; only Write and Edit change files"
        ));
    }
    if diff.len() > MAX_DIFF {
        return Err("a diff over 65 KiB".into());
    }
    Ok(())
}

/// A permission request must name a tool the bundle offers, with a fresh UUID, a bounded key, and a diff only for
/// Write and Edit.
pub fn permission_request(
    session: &Session,
    request_id: &str,
    tool: &str,
    key: &str,
    diff: Option<&str>,
) -> Result<(), String> {
    if let Some(diff) = diff {
        file_diff(tool, diff)?;
    }
    if uuid::Uuid::parse_str(request_id).is_err() {
        return Err(format!("approval request id {request_id:?} is not a UUID"));
    }
    if !offers(session, tool) {
        return Err(format!(
            "a permission request for {tool}, which the bundle does not offer"
        ));
    }
    if key.len() > MAX_PERMISSION_KEY {
        return Err("a permission request whose key argument is over 64 KiB".into());
    }
    Ok(())
}

/// True when the bundle offers `tool`: a builtin its manifest lists, a tool of an MCP server agent.yaml declares
/// (the worker learns their tools; the supervisor knows the servers), or an A2A agent's tool.
fn offers(session: &Session, tool: &str) -> bool {
    if let Ok(builtin) = tool.parse::<BuiltinTool>() {
        return session.bundle.manifest.tools.contains(&builtin);
    }
    if let Some(agent) = tool.strip_prefix("a2a__") {
        return session
            .bundle
            .agent
            .a2a_agents
            .iter()
            .any(|a| a.name == agent);
    }
    tool.len() <= MAX_TOOL_NAME
        && tool
            .strip_prefix("mcp__")
            .and_then(|rest| rest.split_once("__"))
            .is_some_and(|(server, name)| {
                !name.is_empty() && session.bundle.agent.mcp_servers.contains_key(server)
            })
}

/// The error a worker gives for a failed turn, bounded: a snake_case code of at most 64 characters (else
/// `worker_error`) and a message of at most 4 KiB.
pub fn turn_error((code, message): (String, String)) -> (String, String) {
    let code_ok = !code.is_empty()
        && code.len() <= 64
        && code.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    let code = if code_ok { code } else { "worker_error".into() };
    let mut message = message;
    if message.len() > MAX_ERROR_MESSAGE {
        let mut cut = MAX_ERROR_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    (code, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_error_keeps_a_plain_code_and_replaces_a_strange_one() {
        assert_eq!(
            turn_error(("max_steps_exceeded".into(), "m".into())),
            ("max_steps_exceeded".to_string(), "m".to_string())
        );
        assert_eq!(
            turn_error(("Evil Code\n".into(), "m".into())).0,
            "worker_error"
        );
        assert_eq!(turn_error(("x".into(), "é".repeat(5000))).1.len(), 4096);
    }
}
