//! `run` following its turn: events as the run's detail says (see `event_lines`), permission requests answered,
//! Ctrl-C interrupting (twice quits), and a closed stdout (`run --json | head -1`) ending the turn as interrupted
//! and the process quietly, with status 141 as SIGPIPE would.

use std::io::IsTerminal;
use std::process::ExitCode;

use futures::StreamExt;
use service_ipc::{ApprovalDecision, EventPayload};
use service_supervisor::config_file::Approvals;
use service_supervisor::runtime::{approvals, EventStream, SessionRecord};

use super::answer::Answer;
use super::backend::Backend;
use super::event_lines::{Detail, RunLog};
use super::output_schema::OutputSchema;
use super::progress::Progress;
use super::run_args::RunArgs;
use super::term_text::safe;

/// The status of a process a closed pipe ended (128 + SIGPIPE).
const CLOSED_PIPE: u8 = 141;
/// `--timeout` passed, as `timeout(1)` says it.
const TIMED_OUT: u8 = 124;
/// The turn reached the bundle's `max_steps`.
const MAX_STEPS: u8 = 3;
/// The turn spent its `--max-tokens`.
const BUDGET_EXCEEDED: u8 = 4;
/// The answer did not validate against `--output-schema`, after its retry.
pub(super) const OUTPUT_INVALID: u8 = 5;
/// How long a run whose stdout closed waits for its interrupted turn to be recorded as such.
const INTERRUPT_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How a followed turn ended for the run.
pub(super) enum Followed {
    /// The run is over, with this status.
    Exit(ExitCode),
    /// The turn completed, but its answer does not validate against `--output-schema`: what is wrong with it.
    Invalid(String),
}

impl From<ExitCode> for Followed {
    fn from(code: ExitCode) -> Followed {
        Followed::Exit(code)
    }
}

/// Shows the turn's events until it ends; answers permission requests; Ctrl-C interrupts, twice quits. With a
/// `schema`, a completed turn's answer is checked before it is printed.
#[allow(clippy::too_many_arguments)]
pub(super) async fn follow(
    backend: &Backend,
    args: &RunArgs,
    record: &SessionRecord,
    mut events: EventStream,
    turn_id: &str,
    workspace: &str,
    sigint: &mut tokio::signal::unix::Signal,
    schema: Option<&OutputSchema>,
) -> anyhow::Result<Followed> {
    let session_id = record.id.as_str();
    let answer = Answer::from_args(args);
    let began = std::time::Instant::now();
    let auto_edit = args.approvals == Approvals::AutoEdit && !args.approve && !args.deny;
    // Where the worker sees the workspace, for auto-edit: known from the turn's context.
    let mut root = service_supervisor::sandbox::bwrap::WORKSPACE_DIR.to_string();
    let detail = match (args.json, args.quiet, args.verbose) {
        (true, _, _) => Detail::Json,
        (_, true, _) => Detail::Quiet,
        (_, _, true) => Detail::Verbose,
        _ if std::io::stderr().is_terminal() => Detail::Steps,
        _ => Detail::Plain,
    };
    let mut log = RunLog::new(detail, &record.cwd);
    let mut progress = Progress::new(
        args.json || args.quiet,
        super::term_text::Output::new(args.raw),
    );
    let mut tick = tokio::time::interval(std::time::Duration::from_millis(100));
    let mut interrupted = false;
    let deadline = tokio::time::sleep(args.timeout.unwrap_or(std::time::Duration::MAX / 4));
    tokio::pin!(deadline);
    // Said on the usage line: the conversation the model sees was summarised during the turn.
    let mut compacted = false;
    let end = loop {
        let msg = tokio::select! {
            msg = events.next() => msg,
            _ = sigint.recv() => {
                progress.interject();
                if interrupted {
                    eprintln!("stopped");
                    return Ok(ExitCode::from(130).into());
                }
                interrupted = true;
                eprintln!("interrupting… (Ctrl-C again quits now)");
                if let Err(e) = backend.interrupt(session_id).await {
                    eprintln!("warning: could not interrupt the turn: {e:#}");
                }
                continue;
            }
            _ = tick.tick(), if progress.spinning() => {
                progress.tick();
                continue;
            }
            () = &mut deadline, if args.timeout.is_some() => {
                progress.pause();
                let limit = humantime::format_duration(args.timeout.unwrap_or_default());
                eprintln!("error: the turn took longer than --timeout {limit}; it was stopped with what it started");
                let _ = finish_interrupted(backend, session_id, turn_id, &mut events).await;
                return Ok(ExitCode::from(TIMED_OUT).into());
            }
        };
        let Some(msg) = msg else {
            progress.interject();
            anyhow::bail!("the event stream ended before the turn did (session {session_id})");
        };
        progress.event(&msg.payload);
        let written = log.event(&msg, &mut progress);
        if written.is_err() || progress.closed() {
            return Ok(stdout_closed(backend, session_id, turn_id, &mut events)
                .await
                .into());
        }
        if let EventPayload::ContextCompacted { .. } = &msg.payload {
            compacted |= msg.payload.turn_id() == Some(turn_id);
        }
        if let EventPayload::TurnStarted { context, .. } = &msg.payload {
            if context.sandbox_mode == service_ipc::SandboxMode::DangerFullAccess {
                root = context.cwd.clone();
            }
        }
        let asked = approvals::asked(&msg.payload);
        if let Some(asked) = asked
            .as_ref()
            .filter(|a| auto_edit && approvals::auto_edit_allows(a, &root))
        {
            if let Err(e) = backend
                .resolve(&asked.request_id, ApprovalDecision::AllowOnce)
                .await
            {
                progress.interject();
                eprintln!("warning: could not answer the permission request: {e:#}");
            }
        } else if let Some(asked) = asked {
            progress.pause();
            let decided = tokio::select! {
                d = answer.decide(&asked, workspace, log.paths()) => d,
                _ = sigint.recv() => None,
            };
            let Some((decision, reason)) = decided else {
                // Ctrl-C at the question: nothing more will be asked; end the turn, leave with the usual code.
                eprintln!();
                let _ = backend.interrupt(session_id).await;
                return Ok(ExitCode::from(130).into());
            };
            progress.resume();
            if let Err(e) = backend
                .resolve_with(&asked.request_id, decision, reason)
                .await
            {
                progress.interject();
                eprintln!("warning: could not answer the permission request: {e:#}");
            }
        }
        if msg.payload.ends_turn() && msg.payload.turn_id() == Some(turn_id) {
            break msg.payload;
        }
    };
    progress.pause();
    match end {
        EventPayload::TurnCompleted {
            final_message,
            usage,
            ..
        } => {
            let final_message = match schema.map(|s| s.check(&final_message)) {
                None => final_message,
                Some(Ok(value)) => value.to_string(),
                Some(Err(problems)) => return Ok(Followed::Invalid(problems)),
            };
            if let Some(file) = &args.output_last_message {
                std::fs::write(file, &final_message).map_err(|e| {
                    anyhow::anyhow!(
                        "cannot write the answer to {} (--output-last-message): {e}",
                        file.display()
                    )
                })?;
            }
            if !args.json {
                progress.finish(&final_message);
                if progress.closed() {
                    return Ok(ExitCode::from(CLOSED_PIPE).into());
                }
                if !args.quiet && (args.verbose || std::io::stderr().is_terminal()) {
                    let line =
                        service_supervisor::usage_line::describe(&usage, Some(began.elapsed()));
                    let note = if compacted {
                        " · context compacted"
                    } else {
                        ""
                    };
                    eprintln!("{line}{note}");
                }
            }
            Ok(ExitCode::SUCCESS.into())
        }
        EventPayload::Error { code, message, .. } => {
            eprintln!(
                "error: turn {turn_id} failed ({}): {}",
                safe(&code),
                safe(&log.paths().text(&message))
            );
            Ok(if interrupted || code == "interrupted" {
                ExitCode::from(130)
            } else if code == "max_steps_exceeded" {
                ExitCode::from(MAX_STEPS)
            } else if code == service_supervisor::runtime::BUDGET_EXCEEDED {
                ExitCode::from(BUDGET_EXCEEDED)
            } else {
                ExitCode::FAILURE
            }
            .into())
        }
        _ => Ok(ExitCode::FAILURE.into()),
    }
}

/// The reader of stdout went away: the turn is interrupted (what it started is stopped) and recorded so before the
/// process ends, quietly.
async fn stdout_closed(
    backend: &Backend,
    session_id: &str,
    turn_id: &str,
    events: &mut EventStream,
) -> ExitCode {
    finish_interrupted(backend, session_id, turn_id, events).await;
    ExitCode::from(CLOSED_PIPE)
}

/// Interrupts the turn and waits, a bounded time, for its end to be recorded.
async fn finish_interrupted(
    backend: &Backend,
    session_id: &str,
    turn_id: &str,
    events: &mut EventStream,
) {
    if backend.interrupt(session_id).await.is_ok() {
        let _ = tokio::time::timeout(INTERRUPT_WAIT, async {
            while let Some(msg) = events.next().await {
                if msg.payload.ends_turn() && msg.payload.turn_id() == Some(turn_id) {
                    break;
                }
            }
        })
        .await;
    }
}
