//! `service-rs sessions`: list, show, export, diff, rewind, fork, compact, delete and prune sessions, of this machine or of a server (`--remote`).

use std::process::ExitCode;
use std::time::Duration;

use service_ipc::{EventMsg, EventPayload};
use service_supervisor::runtime::SessionRecord;

use super::backend::Backend;
use super::session_pick::{Filter, Which};
use super::term_text::Output;

/// Arguments of `sessions`; without a subcommand it lists them.
#[derive(Debug, clap::Args)]
pub struct SessionsArgs {
    #[command(subcommand)]
    command: Option<SessionsCommand>,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    filter: Filter,
}

#[derive(Debug, clap::Subcommand)]
enum SessionsCommand {
    /// List sessions, the most recently used first.
    List {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        filter: Filter,
    },
    /// Print a session's transcript: prompts, tool calls and answers.
    Show {
        #[command(flatten)]
        which: Which,
        /// Print every journaled event as a JSON line instead.
        #[arg(long)]
        json: bool,
        /// Write the text as it was journaled, control characters included, when stdout is not a terminal
        /// (by default they are shown as escapes such as `^[`).
        #[arg(long)]
        raw: bool,
    },
    /// Write a session's trajectory as ATIF v1.8 (the default; what eval harnesses read), or its journal's events
    /// as JSON lines, to stdout or a file.
    Export {
        #[command(flatten)]
        which: Which,
        /// `atif` or `jsonl`.
        #[arg(long, value_enum, default_value_t)]
        format: super::export::Format,
        /// Write to FILE (replaced whole) instead of stdout.
        #[arg(long, short = 'o', value_name = "FILE")]
        output: Option<std::path::PathBuf>,
    },
    /// Print what a session's turns changed in its workspace (commands included), as unified diffs, of every turn
    /// or of one. Sessions whose bundle cannot write show their Write and Edit calls' diffs.
    Diff {
        #[command(flatten)]
        which: Which,
        /// Only this turn: 1 is the first, -1 the last.
        #[arg(long, allow_hyphen_values = true)]
        turn: Option<i64>,
        /// Write the text as it was journaled, control characters included, when stdout is not a terminal.
        #[arg(long)]
        raw: bool,
    },
    /// Replace a session's older turns with a summary its model writes, keeping the last turns whole
    /// (memory.keep_recent_turns); the journal keeps everything.
    Compact {
        /// Session id, or the start of one.
        #[arg(add = super::complete::sessions())]
        id: String,
        /// What the summary should keep above all.
        #[arg(long)]
        focus: Option<String>,
    },
    /// Go back to before a turn: restore the workspace's files, cut the conversation, or both (the default).
    /// Refused while a turn runs, and when files changed outside the session since its last turn unless --force.
    Rewind {
        #[command(flatten)]
        which: Which,
        /// The turn to go back to before: 1 is the first, -1 the last.
        #[arg(long, allow_hyphen_values = true)]
        turn: i64,
        /// Only the files.
        #[arg(long, conflicts_with_all = ["conversation", "both"])]
        files: bool,
        /// Only the conversation.
        #[arg(long, conflicts_with = "both")]
        conversation: bool,
        /// Both the files and the conversation (the default).
        #[arg(long)]
        both: bool,
        /// Restore files that changed outside the session since its last turn too.
        #[arg(long)]
        force: bool,
    },
    /// Make a new session of the same bundle with the conversation as it was before a turn (now by default). A
    /// session with its own workspace gives the fork a copy of its files as they were then; one working in a host
    /// directory shares it.
    Fork {
        #[command(flatten)]
        which: Which,
        /// The turn to fork before: 1 is the first, -1 the last.
        #[arg(long, allow_hyphen_values = true)]
        turn: Option<i64>,
    },
    /// Stop a session's worker and delete the session with its journal and workspace.
    Delete {
        /// Session ids, or the starts of them.
        #[arg(required = true, add = super::complete::sessions())]
        ids: Vec<String>,
    },
    /// Delete the sessions that have not changed for a while; running ones are kept. Locally, also the session
    /// directories that a killed run left without a record, once ten minutes old.
    Prune {
        /// Age of the last change, e.g. 7d, 12h, 30m.
        #[arg(long, value_name = "AGE", value_parser = parse_age)]
        older_than: Duration,
        /// Only list what would be deleted.
        #[arg(long)]
        dry_run: bool,
        /// Prune a cluster's sessions in its PostgreSQL database instead (SERVICE_STORE_URL_FILE names a file
        /// holding the URL): their records, journals and histories go at once, and the nodes give up their workers
        /// and directories.
        #[arg(
            long,
            env = "SERVICE_STORE_URL",
            value_name = "postgres://USER@HOST:PORT/DB",
            hide_env_values = true
        )]
        store: Option<String>,
        /// A PEM file of the CA that signed the database's certificate.
        #[arg(long, env = "SERVICE_STORE_CA", value_name = "PEM", requires = "store")]
        store_ca: Option<std::path::PathBuf>,
    },
}

/// `7d`, `12h`, `30m`, `45s`, or a sum such as `1d12h`.
fn parse_age(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("{e}; write an age such as 7d, 12h or 30m"))
}

pub fn run(backend: Backend, args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let tokio = super::tokio()?;
    tokio.block_on(async move {
        let result = match args.command {
            None => list(&backend, &args.filter, args.json).await,
            Some(SessionsCommand::List { json, filter }) => {
                let filter = Filter {
                    here: filter.here || args.filter.here,
                    cwd: filter.cwd.or(args.filter.cwd),
                };
                list(&backend, &filter, json || args.json).await
            }
            Some(SessionsCommand::Show { which, json, raw }) => {
                let id = which.id(&backend).await?;
                show(&backend, &id, json || args.json, Output::new(raw)).await
            }
            Some(SessionsCommand::Export {
                which,
                format,
                output,
            }) => {
                let id = which.id(&backend).await?;
                super::export::write(&backend, &id, format, output.as_deref())
                    .await
                    .map(|()| ExitCode::SUCCESS)
            }
            Some(SessionsCommand::Diff { which, turn, raw }) => {
                let id = which.id(&backend).await?;
                super::history::diff(&backend, &id, turn, Output::new(raw)).await
            }
            Some(SessionsCommand::Rewind {
                which,
                turn,
                files,
                conversation,
                both,
                force,
            }) => {
                let scope = if both {
                    (true, true)
                } else {
                    (files, conversation)
                };
                let id = which.id(&backend).await?;
                super::history::rewind(&backend, &id, turn, scope, force).await
            }
            Some(SessionsCommand::Fork { which, turn }) => {
                let id = which.id(&backend).await?;
                super::history::fork(&backend, &id, turn).await
            }
            Some(SessionsCommand::Delete { ids }) => delete(&backend, &ids).await,
            Some(SessionsCommand::Compact { id, focus }) => {
                compact(&backend, &id, focus.as_deref()).await
            }
            Some(SessionsCommand::Prune {
                older_than,
                dry_run,
                ..
            }) => super::prune::prune(&backend, older_than, dry_run).await,
        };
        if let Backend::Local(rt) = &backend {
            rt.shutdown("the command ended").await;
        }
        result
    })
}

/// The `--store` of `sessions prune`, when given: that prune runs on the database, with no runtime of its own.
pub fn store_prune(
    args: &SessionsArgs,
) -> Option<(&str, Option<&std::path::Path>, Duration, bool)> {
    match &args.command {
        Some(SessionsCommand::Prune {
            older_than,
            dry_run,
            store: Some(url),
            store_ca,
        }) => Some((url, store_ca.as_deref(), *older_than, *dry_run)),
        _ => None,
    }
}

/// The sessions `filter` shows, the most recently used first, as a table or JSON.
async fn list(backend: &Backend, filter: &Filter, json: bool) -> anyhow::Result<ExitCode> {
    let dir = filter.dir()?;
    let mut records: Vec<SessionRecord> = backend
        .sessions()
        .await?
        .into_iter()
        .filter(|r| {
            dir.as_deref()
                .is_none_or(|d| std::path::Path::new(&r.cwd) == d)
        })
        .collect();
    records.sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
    print_list(&records, json)
}

/// A table of sessions in the order given, or JSON.
pub fn print_list(records: &[SessionRecord], json: bool) -> anyhow::Result<ExitCode> {
    if json {
        println!("{}", serde_json::to_string_pretty(records)?);
        return Ok(ExitCode::SUCCESS);
    }
    if records.is_empty() {
        println!("No sessions yet. Start one with `service-rs \"prompt\"` or `service-rs run <bundle> \"prompt\"`.");
        return Ok(ExitCode::SUCCESS);
    }
    let now = chrono::Utc::now();
    let home = std::env::var("HOME").ok().filter(|h| h.len() > 1);
    let rows: Vec<[String; 8]> = tree(records)
        .into_iter()
        .map(|(r, depth)| {
            let outcome = match (&r.status, &r.last_turn) {
                (service_supervisor::runtime::record::SessionStatus::Running, _) => {
                    "running".to_string()
                }
                (_, Some(last)) => format!("{:?}", last.status).to_lowercase(),
                (_, None) => "-".to_string(),
            };
            let id = match depth {
                0 => r.id.clone(),
                d => format!("{}↳ {}", "  ".repeat(d - 1), r.id),
            };
            [
                id,
                super::term_text::safe(r.title.as_deref().unwrap_or("-")).into_owned(),
                r.bundle.reference.clone(),
                outcome,
                service_supervisor::runtime::record::age(&r.updated_at, now),
                r.turn_count.to_string(),
                r.usage
                    .total()
                    .map(service_supervisor::usage_line::grouped)
                    .unwrap_or_else(|| "-".into()),
                super::term_text::safe(&short_dir(&r.cwd, home.as_deref())).into_owned(),
            ]
        })
        .collect();
    print!(
        "{}",
        super::bundles::table(
            [
                "ID",
                "TITLE",
                "BUNDLE",
                "LAST",
                "AGE",
                "TURNS",
                "TOKENS",
                "DIRECTORY"
            ],
            &rows
        )
    );
    Ok(ExitCode::SUCCESS)
}

/// `dir` with the user's home directory written `~`.
fn short_dir(dir: &str, home: Option<&str>) -> String {
    match home.and_then(|h| dir.strip_prefix(h)) {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => format!("~{rest}"),
        _ => dir.to_string(),
    }
}

/// The records in list order, each subagent's session right under its parent's, with its depth below the listed
/// top (a child whose parent is not listed shows at the top).
fn tree(records: &[SessionRecord]) -> Vec<(&SessionRecord, usize)> {
    let listed = |id: &str| records.iter().any(|r| r.id == id);
    let is_top = |r: &SessionRecord| r.parent.as_ref().is_none_or(|p| !listed(&p.session_id));
    fn under<'a>(
        records: &'a [SessionRecord],
        parent: &'a SessionRecord,
        depth: usize,
        out: &mut Vec<(&'a SessionRecord, usize)>,
    ) {
        out.push((parent, depth));
        for child in records
            .iter()
            .filter(|r| r.parent.as_ref().is_some_and(|p| p.session_id == parent.id))
        {
            // A record cannot be its own ancestor; the depth bound keeps a corrupt store from looping.
            if depth < 16 {
                under(records, child, depth + 1, out);
            }
        }
    }
    let mut out = Vec::with_capacity(records.len());
    for top in records.iter().filter(|r| is_top(r)) {
        under(records, top, 0, &mut out);
    }
    out
}

async fn show(
    backend: &Backend,
    prefix: &str,
    json: bool,
    out: Output,
) -> anyhow::Result<ExitCode> {
    let record = backend.find_session(prefix).await?;
    let events = backend.journal(&record.id).await?;
    if json {
        for event in &events {
            println!("{}", serde_json::to_string(event)?);
        }
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "session {} · {} · created {}",
        record.id, record.bundle.reference, record.created_at
    );
    let mut answer = String::new();
    let mut started = None;
    let mut turn = 0;
    for event in &events {
        if let Some(text) = transcript_line(event, &mut answer, turn + 1) {
            println!("{}", out.stdout(&text));
        }
        match &event.payload {
            EventPayload::TurnStarted { .. } => {
                turn += 1;
                started = Some(event.created_at.as_str())
            }
            EventPayload::TurnCompleted { usage, .. } => {
                let elapsed = started.take().and_then(|s| between(s, &event.created_at));
                println!(
                    "  ({})",
                    service_supervisor::usage_line::describe(usage, elapsed)
                );
            }
            _ => {}
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The part of the transcript that `event` adds, as lines to print (of text a sandbox may have written); `answer`
/// gathers the streamed text of the current step.
/// `next_turn` is the number the next `turn_started` has.
fn transcript_line(event: &EventMsg, answer: &mut String, next_turn: u32) -> Option<String> {
    match &event.payload {
        EventPayload::TurnStarted {
            prompt, context, ..
        } => Some(format!(
            "\n> {}\n  (turn {next_turn} · {}/{})",
            prompt.replace('\n', "\n  "),
            context.model.provider,
            context.model.name
        )),
        EventPayload::SessionRewound {
            to_turn,
            files,
            conversation,
            restored,
        } => Some(format!(
            "\n~ rewound to before turn {to_turn}:{}{}",
            if *files { format!(" {restored} files restored") } else { String::new() },
            if *conversation { " · conversation cut" } else { "" }
        )),
        EventPayload::SessionForked {
            from_session,
            turn,
            workspace,
        } => Some(format!(
            "\n~ forked from session {from_session} before its turn {turn} (workspace {workspace}); the turns above \
             are inherited"
        )),
        EventPayload::CheckpointCreated { dropped, note, .. } => {
            let mut lines = Vec::new();
            if !dropped.is_empty() {
                lines.push(format!(
                    "  (checkpoints of {} older turns dropped to stay within checkpoint_max_mb)",
                    dropped.len()
                ));
            }
            lines.extend(note.iter().map(|n| format!("  ({n})")));
            (!lines.is_empty()).then(|| lines.join("\n"))
        }
        EventPayload::CheckpointSkipped {
            files,
            more,
            max_bytes,
            ..
        } => Some(format!(
            "  (not checkpointed, past checkpoint_max_mb = {}: {}{})",
            max_bytes / (1024 * 1024),
            files
                .iter()
                .map(|f| format!("{} ({} bytes)", f.path, f.size))
                .collect::<Vec<_>>()
                .join(", "),
            if *more > 0 { format!(" and {more} more") } else { String::new() }
        )),
        EventPayload::AgentMessageDelta { delta, .. } => {
            answer.push_str(delta);
            None
        }
        EventPayload::ToolCallStarted {
            tool, arguments, ..
        } => Some(with_answer(
            answer,
            format!("  [{tool}] {}", short(&arguments.to_string(), 200)),
        )),
        EventPayload::ToolCallFinished {
            tool,
            status,
            output,
            ..
        } => Some(format!(
            "  [{tool} {}] {}",
            format!("{status:?}").to_lowercase(),
            short(output, 200)
        )),
        EventPayload::TurnCompleted { final_message, .. } => {
            answer.clear();
            Some(final_message.clone())
        }
        EventPayload::Error { code, message, .. } => {
            Some(with_answer(answer, format!("  error ({code}): {message}")))
        }
        EventPayload::ExecCommandBegin {
            turn_id: None,
            command,
            ..
        } => Some(format!("\n! {command}")),
        failed @ EventPayload::McpServerFailed { .. } => {
            super::event_lines::mcp_failure(failed).map(|l| format!("  {l}"))
        }
        EventPayload::A2aAgentFailed { agent, message } => {
            Some(format!("  A2A agent {agent} is not offered: {message}"))
        }
        _ => None,
    }
}

/// The time from `from` to `to` (RFC 3339), when both parse and it is not negative.
fn between(from: &str, to: &str) -> Option<Duration> {
    let from = chrono::DateTime::parse_from_rfc3339(from).ok()?;
    let to = chrono::DateTime::parse_from_rfc3339(to).ok()?;
    (to - from).to_std().ok()
}

/// `line`, after the answer text gathered so far when there is some (which is then cleared).
fn with_answer(answer: &mut String, line: String) -> String {
    let text = answer.trim_end();
    let out = if text.trim().is_empty() {
        line
    } else {
        format!("{text}\n{line}")
    };
    answer.clear();
    out
}

/// The first line of `text`, cut at `max` characters.
fn short(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    let cut: String = line.chars().take(max).collect();
    if cut.len() < text.trim_end().len() {
        format!("{cut}…")
    } else {
        cut
    }
}

async fn delete(backend: &Backend, prefixes: &[String]) -> anyhow::Result<ExitCode> {
    // Resolve every prefix before deleting any, so a typo deletes nothing.
    let records = backend.sessions().await?;
    let mut ids = Vec::new();
    for prefix in prefixes {
        let record = service_supervisor::runtime::record::by_id_prefix(&records, prefix)
            .map_err(anyhow::Error::msg)?;
        ids.push(record.id.clone());
    }
    for id in ids {
        backend.delete(&id).await?;
        println!("deleted {id}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn compact(backend: &Backend, prefix: &str, focus: Option<&str>) -> anyhow::Result<ExitCode> {
    let records = backend.sessions().await?;
    let id = service_supervisor::runtime::record::by_id_prefix(&records, prefix)
        .map_err(anyhow::Error::msg)?
        .id
        .clone();
    let done = backend.compact(&id, focus).await?;
    if done["compacted"] == true {
        println!(
            "compacted {id}: {} summarised, about {} -> {} tokens",
            service_supervisor::usage_line::count(
                done["summarised_turns"].as_u64().unwrap_or(0),
                "turn"
            ),
            done["before_tokens"],
            done["after_tokens"]
        );
    } else {
        println!("nothing to compact in {id}: it has no turns older than the ones kept");
    }
    Ok(ExitCode::SUCCESS)
}
