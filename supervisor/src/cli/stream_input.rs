//! `run --input-format stream-json`: one process holds one session and takes its input as JSON lines on stdin, in
//! Claude Code's stream-json shape, while every event goes out as a JSON line on stdout (as `run --json`):
//! - `{"type":"user","message":{"role":"user","content":"…"}}`, the content a string or text blocks: a prompt,
//!   run as a turn at once or, while one runs, after the prompts before it;
//! - `{"type":"approval","request_id":"…","decision":"allow"|"allow_always"|"allow_project"|"deny","reason":"…"}`:
//!   the answer to a `permission_requested` event (unless `--approvals` decides them all);
//! - `{"type":"interrupt"}`: interrupts the running turn; the prompts after it still run.
//!
//! A line that cannot be used is answered with `{"type":"input_error","line":N,"message":"…"}` on stdout (and
//! said on stderr); nothing else is lost. When stdin closes, the run finishes the turns it was given and exits 0.

use std::collections::VecDeque;
use std::process::ExitCode;

use futures::StreamExt;
use serde::Deserialize;
use service_ipc::ApprovalDecision;
use service_supervisor::runtime::{approvals, EventStream, SessionRecord};
use tokio::io::AsyncBufReadExt;

use super::backend::Backend;
use service_supervisor::config_file::Approvals;

use super::run_args::RunArgs;

/// The status of a process a closed pipe ended (128 + SIGPIPE).
const CLOSED_PIPE: u8 = 141;

/// One input line.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Line {
    /// A prompt.
    User { message: UserMessage },
    /// The answer to a permission request.
    Approval {
        request_id: String,
        decision: String,
        #[serde(default)]
        reason: Option<String>,
    },
    /// Interrupt the running turn.
    Interrupt {},
}

#[derive(Debug, Deserialize)]
struct UserMessage {
    #[serde(default)]
    role: Option<String>,
    content: Content,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Blocks(Vec<Block>),
}

#[derive(Debug, Deserialize)]
struct Block {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    text: Option<String>,
}

/// What a line asks for, once read.
#[derive(Debug, PartialEq)]
enum Input {
    Prompt(String),
    Approval {
        request_id: String,
        decision: ApprovalDecision,
        reason: Option<String>,
    },
    Interrupt,
}

/// Reads one input line; the error says what is wrong with it and what is expected.
fn read_line(text: &str) -> Result<Input, String> {
    let line: Line = serde_json::from_str(text).map_err(|e| {
        format!(
            "{e}; expected {{\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":\"…\"}}}}, \
             {{\"type\":\"approval\",\"request_id\":\"…\",\"decision\":\"allow\"}} or {{\"type\":\"interrupt\"}}"
        )
    })?;
    match line {
        Line::User { message } => {
            if let Some(role) = message.role.filter(|r| r != "user") {
                return Err(format!(
                    "a message of role \"{role}\" cannot be sent: only the user's messages are input"
                ));
            }
            let text = match message.content {
                Content::Text(text) => text,
                Content::Blocks(blocks) => {
                    let mut parts = Vec::new();
                    for block in blocks {
                        match (block.kind.as_str(), block.text) {
                            ("text", Some(text)) => parts.push(text),
                            (kind, _) => {
                                return Err(format!(
                                    "a \"{kind}\" content block cannot be sent: only text blocks are read"
                                ))
                            }
                        }
                    }
                    parts.join("\n\n")
                }
            };
            if text.trim().is_empty() {
                return Err("the message's content is empty".into());
            }
            Ok(Input::Prompt(text))
        }
        Line::Approval {
            request_id,
            decision,
            reason,
        } => {
            let decision = match decision.as_str() {
                "allow" => ApprovalDecision::AllowOnce,
                other => serde_json::from_value(serde_json::Value::String(other.into())).map_err(
                    |_| {
                        format!(
                            "decision \"{other}\" is not one of allow, allow_once, allow_always, allow_project, deny"
                        )
                    },
                )?,
            };
            Ok(Input::Approval {
                request_id,
                decision,
                reason,
            })
        }
        Line::Interrupt {} => Ok(Input::Interrupt),
    }
}

/// The run's state between lines and events.
struct Stream<'a> {
    backend: &'a Backend,
    args: &'a RunArgs,
    session: Option<SessionRecord>,
    events: Option<EventStream>,
    /// The running turn.
    running: Option<String>,
    /// Prompts given while a turn runs, with their line numbers.
    queue: VecDeque<(u64, String)>,
    /// What the run's flags override in each turn of an existing session, worked out once.
    overrides: Option<service_ipc::TurnOverrides>,
}

/// Runs `run --input-format stream-json` to the end of stdin and of the turns it gave.
pub(super) async fn run(backend: &Backend, args: &RunArgs) -> anyhow::Result<ExitCode> {
    if let Some(word) = &args.prompt {
        anyhow::bail!(
            "with --input-format stream-json the prompts come as JSON lines on stdin; \"{word}\" names no bundle: \
             name the bundle alone, or none for the default one"
        );
    }
    let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
        .map_err(|e| anyhow::anyhow!("cannot watch for Ctrl-C: {e}"))?;
    let session = super::run_start::continued(backend, args).await?;
    let events = match &session {
        Some(r) => Some(backend.events_after(&r.id, None).await?),
        None => None,
    };
    let mut s = Stream {
        backend,
        args,
        session,
        events,
        running: None,
        queue: VecDeque::new(),
        overrides: None,
    };
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let (mut open, mut number) = (true, 0u64);
    let timeout = args.timeout.unwrap_or(std::time::Duration::MAX / 4);
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    loop {
        if s.running.is_none() {
            if let Some((line, prompt)) = s.queue.pop_front() {
                if s.start(line, prompt).await {
                    deadline
                        .as_mut()
                        .reset(tokio::time::Instant::now() + timeout);
                }
                continue;
            }
            if !open {
                return Ok(ExitCode::SUCCESS);
            }
        }
        tokio::select! {
            line = lines.next_line(), if open => match line {
                Ok(Some(text)) => {
                    number += 1;
                    if text.trim().is_empty() {
                        continue;
                    }
                    match read_line(&text) {
                        Ok(input) => s.input(number, input).await,
                        Err(message) => input_error(number, &message),
                    }
                }
                Ok(None) => open = false,
                Err(e) => {
                    input_error(number + 1, &format!("stdin could not be read: {e}"));
                    open = false;
                }
            },
            msg = next_event(&mut s.events) => {
                let Some(msg) = msg else {
                    anyhow::bail!("the session's event stream ended before the run did");
                };
                if write_line(&serde_json::to_string(&msg).unwrap_or_default()).is_err() {
                    s.interrupt().await;
                    return Ok(ExitCode::from(CLOSED_PIPE));
                }
                if let Some(asked) = approvals::asked(&msg.payload) {
                    s.decide_up_front(&asked.request_id).await;
                }
                if msg.payload.ends_turn() && msg.payload.turn_id() == s.running.as_deref() {
                    s.running = None;
                }
            }
            _ = sigint.recv() => {
                if s.running.is_none() {
                    return Ok(ExitCode::from(130));
                }
                s.interrupt().await;
            }
            () = &mut deadline, if s.running.is_some() && args.timeout.is_some() => {
                let limit = humantime::format_duration(timeout);
                eprintln!("error: the turn took longer than --timeout {limit}; it was stopped with what it started");
                s.interrupt().await;
                deadline.as_mut().reset(tokio::time::Instant::now() + std::time::Duration::MAX / 4);
            }
        }
    }
}

impl Stream<'_> {
    async fn input(&mut self, line: u64, input: Input) {
        match input {
            Input::Prompt(prompt) => self.queue.push_back((line, prompt)),
            Input::Interrupt if self.running.is_none() => {
                input_error(line, "no turn is running to interrupt")
            }
            Input::Interrupt => self.interrupt().await,
            Input::Approval {
                request_id,
                decision,
                reason,
            } => {
                if let Err(e) = self
                    .backend
                    .resolve_with(&request_id, decision, reason)
                    .await
                {
                    input_error(line, &format!("{e:#}"));
                }
            }
        }
    }

    /// Starts a turn of `prompt` (the session's first makes the session); true when it started.
    async fn start(&mut self, line: u64, prompt: String) -> bool {
        let started = match &self.session {
            None => super::run_start::start_new(self.backend, self.args, prompt)
                .await
                .map(|(record, events, turn_id)| (Some(record), events, turn_id)),
            Some(record) => {
                let record = record.clone();
                self.start_in(&record, prompt)
                    .await
                    .map(|(e, t)| (None, e, t))
            }
        };
        match started {
            Ok((record, events, turn_id)) => {
                if record.is_some() {
                    self.session = record;
                }
                // The new stream was subscribed before the turn started; the last turn has ended on the old one.
                self.events = Some(events);
                self.running = Some(turn_id);
                true
            }
            Err(e) => {
                input_error(line, &format!("the turn could not start: {e:#}"));
                false
            }
        }
    }

    /// A turn of `prompt` in the existing session `record`, readied for the run's turns the first time only.
    async fn start_in(
        &mut self,
        record: &SessionRecord,
        prompt: String,
    ) -> anyhow::Result<(EventStream, String)> {
        let overrides = match self.overrides.clone() {
            Some(o) => o,
            None => {
                let o = super::run_start::prepare(self.backend, self.args, record).await?;
                self.overrides.insert(o).clone()
            }
        };
        super::run_start::start_in(self.backend, record, prompt, overrides).await
    }

    /// Answers a permission request as `--approvals` (or `--approve`, `--deny`, config's `approvals = deny`) says,
    /// when one of them does; otherwise the input's approval line answers it.
    async fn decide_up_front(&self, request_id: &str) {
        let args = self.args;
        let decision = if args.approve {
            ApprovalDecision::AllowOnce
        } else if args.deny || args.approvals == Approvals::Deny {
            ApprovalDecision::Deny
        } else {
            return;
        };
        if let Err(e) = self.backend.resolve(request_id, decision).await {
            eprintln!("warning: could not answer the permission request: {e:#}");
        }
    }

    async fn interrupt(&self) {
        if let (Some(record), Some(_)) = (&self.session, &self.running) {
            if let Err(e) = self.backend.interrupt(&record.id).await {
                eprintln!("warning: could not interrupt the turn: {e:#}");
            }
        }
    }
}

/// The next event, or never while there is no session yet.
async fn next_event(events: &mut Option<EventStream>) -> Option<service_ipc::EventMsg> {
    match events {
        Some(events) => events.next().await,
        None => std::future::pending().await,
    }
}

fn write_line(line: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

/// Says that input line `line` could not be used, on stdout for the program driving the run and on stderr.
fn input_error(line: u64, message: &str) {
    let json = serde_json::json!({"type": "input_error", "line": line, "message": message});
    let _ = write_line(&json.to_string());
    eprintln!(
        "service-rs: stdin line {line}: {}",
        super::term_text::safe(message)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts_are_read_from_a_string_or_text_blocks() {
        let text = r#"{"type":"user","message":{"role":"user","content":"hi"},"session_id":"x"}"#;
        assert_eq!(read_line(text), Ok(Input::Prompt("hi".into())));
        let blocks = r#"{"type":"user","message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}"#;
        assert_eq!(read_line(blocks), Ok(Input::Prompt("a\n\nb".into())));
        let image = r#"{"type":"user","message":{"content":[{"type":"image","source":{}}]}}"#;
        assert!(read_line(image)
            .unwrap_err()
            .contains("\"image\" content block"));
    }

    #[test]
    fn approvals_and_interrupts_are_read_and_bad_lines_say_what_is_expected() {
        let allow = r#"{"type":"approval","request_id":"r1","decision":"allow"}"#;
        assert_eq!(
            read_line(allow),
            Ok(Input::Approval {
                request_id: "r1".into(),
                decision: ApprovalDecision::AllowOnce,
                reason: None
            })
        );
        let bad = r#"{"type":"approval","request_id":"r1","decision":"maybe"}"#;
        assert!(read_line(bad)
            .unwrap_err()
            .contains("\"maybe\" is not one of"));
        assert_eq!(read_line(r#"{"type":"interrupt"}"#), Ok(Input::Interrupt));
        assert!(read_line("{not json")
            .unwrap_err()
            .contains("expected {\"type\":\"user\""));
        let assistant = r#"{"type":"user","message":{"role":"assistant","content":"x"}}"#;
        assert!(read_line(assistant)
            .unwrap_err()
            .contains("role \"assistant\""));
    }
}
