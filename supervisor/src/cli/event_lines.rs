//! What `run` says of a turn's events on stderr: a line each with `--verbose`, JSON lines with `--json`.

use service_ipc::{EventMsg, EventPayload};

use super::progress::Progress;
use super::term_text::safe;

/// What a `mcp_server_failed` event means for the user: the server, why, which tools are missing, and the tail of
/// its stderr; None for other events.
pub(super) fn mcp_failure(payload: &EventPayload) -> Option<String> {
    let EventPayload::McpServerFailed {
        server,
        message,
        stderr_tail,
    } = payload
    else {
        return None;
    };
    let mut line = format!(
        "MCP server {server} failed: {message}; its tools (mcp__{server}__*) are not available this session"
    );
    if !stderr_tail.trim().is_empty() {
        line.push_str(&format!(
            "; its stderr ended with: {}",
            stderr_tail.trim().replace('\n', " | ")
        ));
    }
    Some(line)
}

/// Prints an event as a JSON line (`--json`) or a description on stderr (`--verbose`).
pub(super) fn show(msg: &EventMsg, json: bool, verbose: bool, progress: &mut Progress) {
    if json {
        println!("{}", serde_json::to_string(msg).unwrap_or_default());
    } else if verbose {
        describe(msg, progress);
    } else if let (EventPayload::ModelRetry { .. }, false) = (&msg.payload, progress.spinning()) {
        // A wait the user would otherwise sit through in silence (the spinner says it on a terminal).
        describe(msg, progress);
    }
}

/// One line on stderr per event, for --verbose.
fn describe(msg: &EventMsg, progress: &mut Progress) {
    let line = match &msg.payload {
        EventPayload::TurnStarted { context, .. } => {
            let mut line = format!(
                "turn started: model {}/{}, sandbox {}, cwd {}",
                context.model.provider, context.model.name, context.sandbox_mode, context.cwd
            );
            if !context.instructions.is_empty() {
                line.push_str(&format!(
                    ", project instructions {}",
                    context.instructions.join(", ")
                ));
            }
            line
        }
        EventPayload::ReasoningDelta { delta, .. } => format!("thinking: {delta}"),
        EventPayload::ToolCallStarted {
            tool, arguments, ..
        } => format!("tool {tool} {arguments}"),
        EventPayload::ToolCallFinished { tool, status, .. } => {
            format!("tool {tool} finished: {status:?}")
        }
        EventPayload::ExecCommandOutputDelta { chunk, .. } => format!("  | {}", chunk.trim_end()),
        EventPayload::PermissionRequested { tool, summary, .. } => {
            format!("permission needed: {tool} {summary}")
        }
        EventPayload::NetworkPermissionRequested {
            host,
            port,
            addresses,
            internal,
            ..
        } => format!(
            "permission needed: network {}",
            service_supervisor::runtime::approvals::network_summary(
                host, *port, addresses, *internal
            )
        ),
        EventPayload::NetworkAccess {
            host,
            port,
            decision: service_ipc::NetworkDecision::Allow,
            rule,
            ..
        } => format!(
            "network: {host}:{port} allowed by {}",
            rule.as_deref().unwrap_or("?")
        ),
        EventPayload::NetworkAccess {
            host, port, reason, ..
        } => format!(
            "network: {host}:{port} refused: {}",
            reason.as_deref().unwrap_or("?")
        ),
        EventPayload::NetworkClosed {
            host,
            port,
            bytes_sent,
            bytes_received,
            ..
        } => format!(
            "network: {host}:{port} closed ({bytes_sent} B sent, {bytes_received} B received)"
        ),
        EventPayload::PlanUpdate { plan, .. } => format!("plan: {} steps", plan.len()),
        EventPayload::ModelRetry {
            attempt,
            max_attempts,
            delay_ms,
            reason,
            ..
        } => service_supervisor::providers::retry_line(*attempt, *max_attempts, *delay_ms, reason),
        EventPayload::Error { code, message, .. } => format!("error ({code}): {message}"),
        failed @ EventPayload::McpServerFailed { .. } => mcp_failure(failed).unwrap_or_default(),
        EventPayload::A2aAgentFailed { agent, message } => {
            format!("A2A agent {agent} is not offered: {message}")
        }
        _ => return,
    };
    progress.interject();
    eprintln!("[{}] {}", msg.id, safe(&line));
}
