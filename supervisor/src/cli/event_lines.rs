//! What `run` says of a turn's events besides the answer: JSON lines on stdout with `--json`; on stderr, what the
//! agent did (commands with their exit code and time, edits with `+N -M` and their hunks, plan updates; the shared
//! renderer of `facade::tool_text`) when stderr is a terminal, plus an event log with `--verbose`, whose streamed
//! deltas are joined into lines; nothing but the answer with `-q`.

use std::collections::HashMap;
use std::io::Write;

use service_ipc::{EventMsg, EventPayload};
use service_supervisor::facade::tool_text::{Activity, StepKind, ToolText};

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

/// How much `run` says on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Detail {
    /// Events as JSON lines on stdout, nothing on stderr.
    Json,
    /// Nothing but errors (`-q`).
    Quiet,
    /// No terminal: the answer, and on stderr only what the user would otherwise wait through in silence (retries).
    Plain,
    /// What the agent did (a terminal).
    Steps,
    /// What the agent did and every event (`--verbose`).
    Verbose,
}

/// What `run` writes of one turn's events.
pub(super) struct RunLog {
    detail: Detail,
    activity: Activity,
    /// The session's directory on the host, named where the sandbox would say `/workspace`.
    host_dir: String,
    /// Reasoning not yet ended by a newline (`--verbose` prints whole lines).
    thinking: String,
    /// Command output not yet ended by a newline, by exec id.
    output: HashMap<String, String>,
}

impl RunLog {
    pub(super) fn new(detail: Detail, host_dir: &str) -> RunLog {
        RunLog {
            detail,
            activity: Activity::default(),
            host_dir: host_dir.to_string(),
            thinking: String::new(),
            output: HashMap::new(),
        }
    }

    /// How paths of the running turn are shown.
    pub(super) fn paths(&self) -> &ToolText {
        self.activity.paths()
    }

    /// Writes what `msg` adds. Err only when stdout is closed (a reader such as `head` went away).
    pub(super) fn event(&mut self, msg: &EventMsg, progress: &mut Progress) -> std::io::Result<()> {
        let step = self.activity.event(&msg.payload);
        match self.detail {
            Detail::Json => {
                let line = serde_json::to_string(msg).unwrap_or_default();
                let mut out = std::io::stdout().lock();
                writeln!(out, "{line}")?;
                return out.flush();
            }
            Detail::Quiet => return Ok(()),
            Detail::Verbose => self.describe(msg, progress),
            Detail::Plain => {
                if let EventPayload::ModelRetry { .. } = &msg.payload {
                    self.describe(msg, progress);
                }
                return Ok(());
            }
            Detail::Steps => {
                if let (EventPayload::ModelRetry { .. }, false) =
                    (&msg.payload, progress.spinning())
                {
                    // A wait the user would otherwise sit through in silence (the spinner says it on a terminal).
                    self.describe(msg, progress);
                }
            }
        }
        if let Some(step) = step {
            progress.interject();
            let colour = super::answer::colour();
            let code = match step.kind {
                StepKind::Command | StepKind::Other => "2",
                StepKind::Edit => "1",
                StepKind::CommandFailed | StepKind::Failed => "31",
                StepKind::Plan => "36",
            };
            let line = safe(&step.line);
            if colour {
                eprintln!("\x1b[{code}m{line}\x1b[0m");
            } else {
                eprintln!("{line}");
            }
            if let Some(hunks) = step.hunks {
                eprint!("{}", super::answer::diff_for_terminal(&hunks));
            }
        }
        Ok(())
    }

    /// `--verbose`: one line on stderr per event, deltas joined into lines.
    fn describe(&mut self, msg: &EventMsg, progress: &mut Progress) {
        let mut lines = Vec::new();
        if !matches!(msg.payload, EventPayload::ReasoningDelta { .. }) && !self.thinking.is_empty()
        {
            lines.push(format!("thinking: {}", std::mem::take(&mut self.thinking)));
        }
        let paths = self.activity.paths();
        let line = match &msg.payload {
            EventPayload::TurnStarted { context, .. } => {
                let mut line = format!(
                    "turn started: model {}/{}, sandbox {}, in {}",
                    context.model.provider, context.model.name, context.sandbox_mode, self.host_dir
                );
                if !context.instructions.is_empty() {
                    line.push_str(&format!(
                        ", project instructions {}",
                        context.instructions.join(", ")
                    ));
                }
                Some(line)
            }
            EventPayload::ReasoningDelta { delta, .. } => {
                self.thinking.push_str(delta);
                for done in whole_lines(&mut self.thinking) {
                    if !done.trim().is_empty() {
                        lines.push(format!("thinking: {}", done.trim_end()));
                    }
                }
                None
            }
            EventPayload::ToolCallStarted {
                tool, arguments, ..
            } => Some(format!("tool: {}", paths.title(tool, arguments))),
            EventPayload::ToolCallFinished { tool, status, .. } => {
                Some(format!("tool {tool} finished: {status:?}"))
            }
            EventPayload::ExecCommandOutputDelta { exec_id, chunk, .. } => {
                let pending = self.output.entry(exec_id.clone()).or_default();
                pending.push_str(chunk);
                for done in whole_lines(pending) {
                    lines.push(format!("  | {}", done.trim_end()));
                }
                None
            }
            EventPayload::ExecCommandEnd { exec_id, .. } => {
                let rest = self.output.remove(exec_id).unwrap_or_default();
                (!rest.is_empty()).then(|| format!("  | {}", rest.trim_end()))
            }
            EventPayload::PermissionRequested { tool, summary, .. } => {
                Some(format!("permission needed: {tool} {}", paths.text(summary)))
            }
            EventPayload::NetworkPermissionRequested {
                host,
                port,
                addresses,
                internal,
                ..
            } => Some(format!(
                "permission needed: network {}",
                service_supervisor::runtime::approvals::network_summary(
                    host, *port, addresses, *internal
                )
            )),
            EventPayload::NetworkAccess {
                host,
                port,
                decision: service_ipc::NetworkDecision::Allow,
                rule,
                ..
            } => Some(format!(
                "network: {host}:{port} allowed by {}",
                rule.as_deref().unwrap_or("?")
            )),
            EventPayload::NetworkAccess {
                host, port, reason, ..
            } => Some(format!(
                "network: {host}:{port} refused: {}",
                reason.as_deref().unwrap_or("?")
            )),
            EventPayload::NetworkClosed {
                host,
                port,
                bytes_sent,
                bytes_received,
                ..
            } => Some(format!(
                "network: {host}:{port} closed ({bytes_sent} B sent, {bytes_received} B received)"
            )),
            EventPayload::ModelRetry {
                attempt,
                max_attempts,
                delay_ms,
                reason,
                ..
            } => Some(service_supervisor::providers::retry_line(
                *attempt,
                *max_attempts,
                *delay_ms,
                reason,
            )),
            EventPayload::Error { code, message, .. } => {
                Some(format!("error ({code}): {}", paths.text(message)))
            }
            failed @ EventPayload::McpServerFailed { .. } => mcp_failure(failed),
            EventPayload::A2aAgentFailed { agent, message } => {
                Some(format!("A2A agent {agent} is not offered: {message}"))
            }
            _ => None,
        };
        lines.extend(line);
        if lines.is_empty() {
            return;
        }
        progress.interject();
        for line in lines {
            eprintln!("[{}] {}", msg.id, safe(&line));
        }
    }
}

/// Takes the whole lines (each with its line break) from the front of `buffer`, leaving the unfinished rest.
fn whole_lines(buffer: &mut String) -> Vec<String> {
    match buffer.rfind('\n') {
        Some(at) => {
            let rest = buffer.split_off(at + 1);
            std::mem::replace(buffer, rest)
                .split_inclusive('\n')
                .map(str::to_string)
                .collect()
        }
        None => Vec::new(),
    }
}
