//! The TUI's state: the transcript built from session events, the input line with its history, the pending
//! approval, the plan and the status line. Pure data and pure updates, so rendering and input handling can be
//! tested without a terminal.

use service_ipc::{
    ApprovalDecision, EventMsg, EventPayload, NetworkDecision, PlanItem, ToolCallStatus,
};

/// One entry of the transcript.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    /// The user's prompt.
    User(String),
    /// Assistant text, growing as deltas arrive.
    Assistant(String),
    /// Reasoning text (shown dimmed, collapsed unless expanded).
    Reasoning(String),
    /// A tool call as a person reads it (see `facade::tool_text`), and its result once finished.
    Tool {
        /// Call id.
        call_id: String,
        /// Tool name.
        name: String,
        /// Arguments as the model sent them.
        args: serde_json::Value,
        /// What it is about to do: `$ cargo test`, `Edit src/a.rs`.
        title: String,
        /// How it went, once finished: `Edited src/a.rs (+1 -1)`.
        outcome: Option<String>,
        /// Status once finished.
        status: Option<ToolCallStatus>,
        /// Result text once finished.
        output: String,
        /// For a Write or an Edit that changed a file: its diff, paths relative to the project.
        diff: Option<String>,
        /// How the operator answered its permission request, if it asked.
        approval: Option<String>,
    },
    /// A subprocess (Bash or an operator `!` command) with its live output.
    Exec {
        /// Exec id.
        exec_id: String,
        /// The command line.
        command: String,
        /// Output so far (stdout and stderr interleaved).
        output: String,
        /// Exit code once ended (`Some(None)` means killed by a signal).
        exit: Option<Option<i32>>,
    },
    /// A turn or runtime error.
    Error(String),
    /// A message from the TUI itself (help, session lists, confirmations).
    Info(String),
    /// A unified diff, shown with its `-` and `+` lines coloured.
    Diff(String),
}

/// A permission request waiting for the operator.
pub use crate::runtime::approvals::Asked as Approval;

/// Whether a turn is running.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnState {
    /// Ready for input.
    Idle,
    /// Running turn.
    Running(String),
}

/// The whole TUI state.
#[derive(Debug, Clone)]
pub struct App {
    /// Transcript entries, oldest first.
    pub entries: Vec<Entry>,
    /// The current plan.
    pub plan: Vec<PlanItem>,
    /// Text being typed.
    pub input: String,
    /// Submitted lines, oldest first.
    pub history: Vec<String>,
    /// Position while browsing history (None when editing a new line).
    pub history_pos: Option<usize>,
    /// A request waiting for o / a / d / r.
    pub approval: Option<Approval>,
    /// The input line is the reason for denying `approval` (after `r`), sent with Enter.
    pub denying: bool,
    /// Show reasoning in full.
    pub show_reasoning: bool,
    /// Lines scrolled up from the bottom of the transcript.
    pub scroll: u16,
    /// Status line fields.
    pub bundle: String,
    /// Model as provider/name.
    pub model: String,
    /// Sandbox mode of the last turn.
    pub sandbox: String,
    /// The host directory the session sees, and whether it may write there.
    pub workspace: String,
    /// What the last turn cost (see [`crate::usage_line`]).
    pub usage: String,
    /// The turn whose context was compacted, for its usage line.
    compacted_in: Option<String>,
    /// The diffs of the files the last (or running) turn changed with Write and Edit.
    pub turn_diffs: Vec<String>,
    /// The tool call each pending permission request is about, by request id.
    asked_calls: std::collections::HashMap<String, String>,
    /// When the running turn started (RFC 3339), to time it.
    turn_started_at: Option<String>,
    /// Session id.
    pub session_id: String,
    /// Turn state.
    pub turn: TurnState,
    /// Set by /quit or Ctrl-C.
    pub quit: bool,
    /// The resume picker, while it is open.
    pub picker: Option<crate::tui::picker::Picker>,
    /// Draw without colours (`NO_COLOR` is set); emphasis such as bold and reverse stays.
    pub no_color: bool,
    /// How the running session's paths read (relative to its directory).
    pub paths: crate::facade::tool_text::ToolText,
    /// The texts of long pastes folded in the input as `[Pasted N lines]`, expanded when it is sent.
    pub pastes: Vec<String>,
    /// The `/` or `@` popup over the input, while it is open.
    pub popup: Option<Popup>,
    /// The bundle's skills, offered as `/name` in the popup.
    pub skills: Vec<String>,
    /// The project's files for `@`, walked when first asked for.
    pub files: Option<super::files::FileIndex>,
    /// MCP servers of the session and their tools, for `/mcp`.
    pub mcp: std::collections::BTreeMap<String, Vec<String>>,
    /// The project instructions the last turn read (AGENTS.md and the like), for `/status`.
    pub instructions: Vec<String>,
    /// Context tokens the last model call used, and the model's window when known, for `/status`.
    pub context: (Option<u64>, Option<u64>),
    /// A question the TUI asks before acting (`/rewind`), answered with one key.
    pub confirm: Option<Confirm>,
}

impl App {
    /// An empty TUI for a session.
    pub fn new(session_id: &str, bundle: &str, model: &str, sandbox: &str) -> App {
        App {
            entries: Vec::new(),
            plan: Vec::new(),
            input: String::new(),
            history: Vec::new(),
            history_pos: None,
            approval: None,
            denying: false,
            show_reasoning: false,
            scroll: 0,
            bundle: bundle.into(),
            model: model.into(),
            sandbox: sandbox.into(),
            workspace: String::new(),
            usage: String::new(),
            compacted_in: None,
            turn_diffs: Vec::new(),
            asked_calls: Default::default(),
            turn_started_at: None,
            session_id: session_id.into(),
            turn: TurnState::Idle,
            quit: false,
            picker: None,
            // https://no-color.org: any non-empty value.
            no_color: std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
            paths: Default::default(),
            pastes: Vec::new(),
            popup: None,
            skills: Vec::new(),
            files: None,
            mcp: Default::default(),
            instructions: Vec::new(),
            context: (None, None),
            confirm: None,
        }
    }

    /// Adds a TUI message to the transcript.
    pub fn info(&mut self, text: impl Into<String>) {
        self.entries.push(Entry::Info(text.into()));
        self.scroll = 0;
    }

    /// Adds an error to the transcript.
    pub fn error(&mut self, text: impl Into<String>) {
        self.entries.push(Entry::Error(text.into()));
        self.scroll = 0;
    }

    /// Folds one session event into the state.
    pub fn apply(&mut self, msg: &EventMsg) {
        match &msg.payload {
            EventPayload::TurnStarted {
                turn_id,
                context,
                prompt,
                ..
            } => {
                self.turn = TurnState::Running(turn_id.clone());
                self.turn_started_at = Some(msg.created_at.clone());
                self.turn_diffs.clear();
                // A plan belongs to the turn that made it.
                self.plan.clear();
                self.model = format!("{}/{}", context.model.provider, context.model.name);
                self.sandbox = context.sandbox_mode.to_string();
                self.paths = crate::facade::tool_text::ToolText::new(&context.cwd);
                self.instructions = context.instructions.clone();
                self.entries.push(Entry::User(prompt.clone()));
            }
            EventPayload::ReasoningDelta { delta, .. } => match self.entries.last_mut() {
                Some(Entry::Reasoning(text)) => text.push_str(delta),
                _ => self.entries.push(Entry::Reasoning(delta.clone())),
            },
            EventPayload::ReasoningSectionBreak { .. } => {
                self.entries.push(Entry::Reasoning(String::new()))
            }
            EventPayload::AgentMessageDelta { delta, .. } => match self.entries.last_mut() {
                Some(Entry::Assistant(text)) => text.push_str(delta),
                _ => self.entries.push(Entry::Assistant(delta.clone())),
            },
            EventPayload::ToolCallStarted {
                call_id,
                tool,
                arguments,
                ..
            } => self.entries.push(Entry::Tool {
                call_id: call_id.clone(),
                name: tool.clone(),
                args: arguments.clone(),
                title: self.paths.title(tool, arguments),
                outcome: None,
                status: None,
                output: String::new(),
                diff: None,
                approval: None,
            }),
            EventPayload::ToolCallFinished {
                call_id,
                status: s,
                output: o,
                diff: d,
                ..
            } => {
                self.turn_diffs.extend(d.clone());
                let paths = self.paths.clone();
                for e in self.entries.iter_mut().rev() {
                    if let Entry::Tool {
                        call_id: c,
                        name,
                        args,
                        outcome,
                        status,
                        output,
                        diff,
                        ..
                    } = e
                    {
                        if c == call_id {
                            *status = Some(*s);
                            *output = o.clone();
                            *outcome = Some(paths.outcome(name, args, *s, o, d.as_deref()));
                            *diff = d.as_deref().map(|d| paths.diff(d));
                            break;
                        }
                    }
                }
            }
            EventPayload::ExecCommandBegin {
                exec_id, command, ..
            } => self.entries.push(Entry::Exec {
                exec_id: exec_id.clone(),
                command: command.clone(),
                output: String::new(),
                exit: None,
            }),
            EventPayload::ExecCommandOutputDelta { exec_id, chunk, .. } => {
                if let Some(Entry::Exec { output, .. }) = self.exec_mut(exec_id) {
                    output.push_str(chunk);
                }
            }
            EventPayload::ExecCommandOutputTruncated {
                exec_id,
                limit_bytes,
                ..
            } => {
                if let Some(Entry::Exec { output, .. }) = self.exec_mut(exec_id) {
                    output.push_str(&format!("\n[output past {limit_bytes} bytes not shown]\n"));
                }
            }
            EventPayload::ExecCommandEnd {
                exec_id, exit_code, ..
            } => {
                if let Some(Entry::Exec { exit, .. }) = self.exec_mut(exec_id) {
                    *exit = Some(*exit_code);
                }
            }
            EventPayload::PermissionRequested {
                request_id,
                call_id,
                ..
            } => {
                self.asked_calls.insert(request_id.clone(), call_id.clone());
                self.approval = crate::runtime::approvals::asked(&msg.payload);
            }
            EventPayload::NetworkPermissionRequested { .. } => {
                self.approval = crate::runtime::approvals::asked(&msg.payload);
            }
            // A subagent's progress shows under its Agent call; its own events are in its session.
            EventPayload::SubagentStarted {
                subagent,
                child_session_id,
                ..
            } => self.info(format!(
                "  ↳ subagent {subagent} is working in session {child_session_id}"
            )),
            EventPayload::SubagentFinished {
                subagent,
                child_session_id,
                outcome,
                usage,
                ..
            } => self.info(format!(
                "  ↳ subagent {subagent} {}, {} tokens; /resume {child_session_id} opens it",
                match outcome {
                    service_ipc::TurnStatus::Completed => "answered",
                    service_ipc::TurnStatus::Failed => "failed",
                    service_ipc::TurnStatus::Interrupted => "was interrupted",
                },
                usage.input_tokens.unwrap_or(0) + usage.output_tokens.unwrap_or(0)
            )),
            EventPayload::NetworkAccess {
                host,
                port,
                decision,
                rule,
                reason,
                ..
            } => match decision {
                NetworkDecision::Allow => self.info(format!(
                    "network: {host}:{port} allowed by {}",
                    rule.as_deref().unwrap_or("?")
                )),
                NetworkDecision::Deny => self.info(format!(
                    "network: {host}:{port} refused: {}",
                    reason.as_deref().unwrap_or("?")
                )),
            },
            // The opening line already says where it went.
            EventPayload::NetworkClosed { .. } | EventPayload::NetworkRefusalsSuppressed { .. } => {
            }
            EventPayload::HookStarted { .. } => {}
            EventPayload::HookFinished { decision, .. } => {
                if decision.is_some() {
                    if let Some(line) = crate::facade::tool_text::hook_line(&msg.payload) {
                        self.info(line);
                    }
                }
            }
            EventPayload::McpServerStarted { server, tools, .. } => {
                self.mcp.insert(server.clone(), tools.iter().map(|t| t.name.clone()).collect());
                self.info(format!("MCP server {server}: {} tools", tools.len()))
            }
            EventPayload::McpToolsChanged { server, tools } => {
                self.mcp.insert(server.clone(), tools.iter().map(|t| t.name.clone()).collect());
                self.info(format!(
                    "MCP server {server} changed its tools: {} now",
                    tools.len()
                ))
            }
            EventPayload::McpServerFailed {
                server, message, ..
            } => self.error(format!("MCP server {server}: {message}")),
            EventPayload::ContextCompacted {
                turn_id,
                before_tokens,
                after_tokens,
                summarised_turns,
                reason,
                ..
            } => {
                self.compacted_in = turn_id.clone();
                self.info(format!(
                    "context compacted ({reason}): {} summarised, ~{before_tokens} -> ~{after_tokens} tokens",
                    crate::usage_line::count(u64::from(*summarised_turns), "turn")
                ))
            }
            EventPayload::A2aAgentFailed { agent, message } => {
                self.error(format!("A2A agent {agent}: {message}"))
            }
            EventPayload::CheckpointCreated { dropped, note, .. } => {
                if !dropped.is_empty() {
                    self.info(format!(
                        "checkpoints of the {} oldest turns dropped to stay within checkpoint_max_mb",
                        dropped.len()
                    ))
                }
                if let Some(note) = note {
                    self.info(note.clone())
                }
            }
            EventPayload::CheckpointSkipped { files, more, .. } => self.info(format!(
                "{} files too large for checkpoint_max_mb were not checkpointed (largest: {}); a rewind leaves them \
                 as they are",
                files.len() as u64 + more,
                files.first().map_or("", |f| f.path.as_str())
            )),
            EventPayload::SessionRewound {
                to_turn,
                files,
                conversation,
                restored,
            } => self.info(match (files, conversation) {
                (true, true) => format!(
                    "rewound to before turn {to_turn}: {restored} files restored, conversation cut"
                ),
                (true, false) => {
                    format!("files rewound to before turn {to_turn}: {restored} restored")
                }
                _ => format!("conversation rewound to before turn {to_turn}"),
            }),
            EventPayload::SessionForked {
                from_session, turn, ..
            } => self.info(format!(
                "forked from session {from_session} before its turn {turn}"
            )),
            EventPayload::ModelRetry {
                attempt,
                max_attempts,
                delay_ms,
                reason,
                ..
            } => self.info(crate::providers::retry_line(
                *attempt,
                *max_attempts,
                *delay_ms,
                reason,
            )),
            EventPayload::ApprovalResolved {
                request_id,
                decision,
                reason,
                ..
            } => {
                if self
                    .approval
                    .as_ref()
                    .is_some_and(|a| &a.request_id == request_id)
                {
                    self.approval = None;
                    self.denying = false;
                }
                let word = match (decision, reason) {
                    (ApprovalDecision::AllowOnce, _) => "allowed once".to_string(),
                    (ApprovalDecision::AllowAlways, _) => "allowed for this session".to_string(),
                    (ApprovalDecision::AllowProject, _) => "allowed in this project".to_string(),
                    (ApprovalDecision::Deny, None) => "denied".to_string(),
                    (ApprovalDecision::Deny, Some(why)) => format!("denied: {why}"),
                };
                // Said with the call it was about, above its result, rather than after it.
                let call = self.asked_calls.remove(request_id);
                let tool = self.entries.iter_mut().rev().find_map(|e| match e {
                    Entry::Tool {
                        call_id, approval, ..
                    } if Some(&*call_id) == call.as_ref() => Some(approval),
                    _ => None,
                });
                match tool {
                    Some(approval) => *approval = Some(format!("permission {word}")),
                    None => self.info(format!("permission {word}")),
                }
            }
            EventPayload::PlanUpdate { plan, .. } => self.plan = plan.clone(),
            // Progress lines repeat what the tool line already shows.
            EventPayload::ToolCallDelta { .. } => {}
            EventPayload::UsageUpdate { usage, .. } => {
                let elapsed = self.turn_started_at.as_ref().and_then(|s| {
                    let from = chrono::DateTime::parse_from_rfc3339(s).ok()?;
                    let to = chrono::DateTime::parse_from_rfc3339(&msg.created_at).ok()?;
                    (to - from).to_std().ok()
                });
                self.context = (usage.context_tokens, usage.context_window);
                self.usage = format!("so far: {}", crate::usage_line::describe(usage, elapsed));
            }
            EventPayload::TurnCompleted { usage, turn_id, .. } => {
                self.turn = TurnState::Idle;
                self.approval = None;
                let elapsed = self.turn_started_at.take().and_then(|s| {
                    let from = chrono::DateTime::parse_from_rfc3339(&s).ok()?;
                    let to = chrono::DateTime::parse_from_rfc3339(&msg.created_at).ok()?;
                    (to - from).to_std().ok()
                });
                self.usage = crate::usage_line::describe(usage, elapsed);
                if self.compacted_in.take().as_ref() == Some(turn_id) {
                    self.usage.push_str(" · context compacted");
                }
            }
            EventPayload::Error {
                turn_id,
                code,
                message,
            } => {
                if turn_id.is_some() {
                    self.turn = TurnState::Idle;
                    self.approval = None;
                    self.turn_started_at = None;
                    // What the turn used is no longer "so far": it ended.
                    if let Some(rest) = self.usage.strip_prefix("so far: ") {
                        self.usage = rest.to_string();
                    }
                }
                self.error(format!("{code}: {message}"));
            }
        }
        self.scroll = 0;
    }

    fn exec_mut(&mut self, exec_id: &str) -> Option<&mut Entry> {
        self.entries
            .iter_mut()
            .rev()
            .find(|e| matches!(e, Entry::Exec { exec_id: x, .. } if x == exec_id))
    }

    /// Takes the input line for submission, folded pastes expanded, and records it in the history.
    pub fn take_input(&mut self) -> Option<String> {
        let typed = std::mem::take(&mut self.input);
        let line = super::input::expand(&typed, &std::mem::take(&mut self.pastes));
        self.popup = None;
        self.history_pos = None;
        if line.trim().is_empty() {
            return None;
        }
        if self.history.last() != Some(&line) {
            self.history.push(line.clone());
        }
        Some(line)
    }

    /// Moves through the history: `back` toward older lines.
    pub fn browse_history(&mut self, back: bool) {
        if self.history.is_empty() {
            return;
        }
        let pos = match (self.history_pos, back) {
            (None, true) => Some(self.history.len() - 1),
            (None, false) => None,
            (Some(0), true) => Some(0),
            (Some(p), true) => Some(p - 1),
            (Some(p), false) if p + 1 < self.history.len() => Some(p + 1),
            (Some(_), false) => None,
        };
        self.history_pos = pos;
        self.input = pos.map(|p| self.history[p].clone()).unwrap_or_default();
    }
}

/// What a popup completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PopupKind {
    /// Slash commands and skills.
    Slash,
    /// Files of the project, after `@`.
    File,
    /// Models to switch to (`/model`).
    Model,
}

/// The popup over the input: its choices and the highlighted one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Popup {
    /// What it completes.
    pub kind: PopupKind,
    /// Each choice and a note on it (a command's help line; nothing for a file).
    pub items: Vec<(String, String)>,
    /// The highlighted choice.
    pub selected: usize,
}

/// A question the TUI asks before it acts, answered with one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirm {
    /// `/rewind N`: the files, the conversation or both back to before turn N.
    Rewind(u64),
}
