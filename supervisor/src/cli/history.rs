//! `sessions diff`, `sessions rewind` and `sessions fork`: what turns changed, and going back to before one.

use std::process::ExitCode;

use service_ipc::EventPayload;

use super::backend::Backend;
use super::term_text::Output;

/// The session `prefix` names, with its turns' prompts in order: every turn the journal holds.
async fn turns(
    backend: &Backend,
    prefix: &str,
) -> anyhow::Result<(String, Vec<service_ipc::EventMsg>, Vec<String>)> {
    let record = backend.find_session(prefix).await?;
    let events = backend.journal(&record.id).await?;
    let prompts = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::TurnStarted { prompt, .. } => Some(prompt.clone()),
            _ => None,
        })
        .collect();
    Ok((record.id, events, prompts))
}

/// How many turns the conversation of `events` holds now: a rewind of the conversation cut those after it (the
/// turns `rewind` and `fork` number).
fn in_conversation(events: &[service_ipc::EventMsg]) -> usize {
    events.iter().fold(0, |turns, e| match &e.payload {
        EventPayload::TurnStarted { .. } => turns + 1,
        EventPayload::SessionRewound {
            to_turn,
            conversation: true,
            ..
        } => (*to_turn as usize).saturating_sub(1).min(turns),
        _ => turns,
    })
}

/// `--turn N` checked against a session of `count` turns; negative counts from the end (-1 is the last).
fn turn_number(id: &str, n: i64, count: usize) -> anyhow::Result<u64> {
    let count = count as i64;
    match n {
        n if n >= 1 && n <= count => Ok(n as u64),
        n if n < 0 && -n <= count => Ok((count + 1 + n) as u64),
        n => anyhow::bail!(
            "--turn {n}: session {id} has no such turn; {}",
            match count {
                0 => "it has no turns yet".to_string(),
                c => format!("valid turns are 1..{c}, or -1 for the last"),
            }
        ),
    }
}

/// `sessions diff`: what each turn (or one) changed in the workspace, from its checkpoints (commands included);
/// for a session without them, the diffs of its Write and Edit calls.
pub async fn diff(
    backend: &Backend,
    prefix: &str,
    turn: Option<i64>,
    out: Output,
) -> anyhow::Result<ExitCode> {
    use std::io::IsTerminal;
    let (id, events, prompts) = turns(backend, prefix).await?;
    let wanted = turn
        .map(|n| turn_number(&id, n, prompts.len()))
        .transpose()?;
    let colour = std::io::stdout().is_terminal();
    let print = |text: &str| {
        if colour {
            print!("{}", super::answer::diff_for_terminal(text));
        } else {
            print!("{}", out.stdout(text));
        }
    };
    let mut shown = false;
    for (i, prompt) in prompts.iter().enumerate() {
        let n = i as u64 + 1;
        if wanted.is_some_and(|w| w != n) {
            continue;
        }
        println!(
            "# turn {n}: {}",
            out.stdout(&service_supervisor::runtime::record::title_of(prompt))
        );
        let changes = backend.changes(&id, n).await?;
        if changes["checkpointed"] == true {
            for c in changes["changes"].as_array().into_iter().flatten() {
                shown = true;
                if c["not_checkpointed"] == true {
                    println!(
                        "changed, not checkpointed: {} (the project's ignore rules leave it out; a rewind leaves it as \
                         it is)",
                        out.stdout(c["path"].as_str().unwrap_or_default())
                    );
                    continue;
                }
                if let Some(size) = c["skipped_bytes"].as_u64() {
                    println!(
                        "{} {} ({size} bytes: not checkpointed, past checkpoint_max_mb; a rewind cannot bring it back)",
                        c["change"].as_str().unwrap_or("changed"),
                        out.stdout(c["path"].as_str().unwrap_or_default())
                    );
                    continue;
                }
                match c["diff"].as_str() {
                    Some(d) if !d.is_empty() => print(d),
                    _ => println!(
                        "{} {} (binary, a link, or too large to show)",
                        c["change"].as_str().unwrap_or("changed"),
                        out.stdout(c["path"].as_str().unwrap_or_default())
                    ),
                }
            }
            continue;
        }
        // No checkpoints of this turn here: the Write and Edit calls' own diffs.
        let mut index = 0;
        for event in &events {
            match &event.payload {
                EventPayload::TurnStarted { .. } => index += 1,
                EventPayload::ToolCallFinished { diff: Some(d), .. } if index == n => {
                    shown = true;
                    print(d);
                }
                _ => {}
            }
        }
    }
    if !shown {
        eprintln!(
            "no file was changed{}",
            wanted.map(|w| format!(" in turn {w}")).unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `sessions rewind`.
pub async fn rewind(
    backend: &Backend,
    prefix: &str,
    turn: i64,
    scope: (bool, bool),
    force: bool,
) -> anyhow::Result<ExitCode> {
    let (id, events, _) = turns(backend, prefix).await?;
    let n = turn_number(&id, turn, in_conversation(&events))?;
    let (files, conversation) = match scope {
        (false, false) => (true, true),
        other => other,
    };
    let done = backend.rewind(&id, n, files, conversation, force).await?;
    let restored = done["restored"].as_array().map_or(0, Vec::len);
    let mut what = Vec::new();
    if done["files"] == true {
        what.push(format!("{restored} files restored"));
    } else if files {
        what.push(
            "no files restored (the bundle cannot write, so its turns take no checkpoints)".into(),
        );
    }
    if done["conversation"] == true {
        what.push("the conversation cut".into());
    }
    println!("rewound {id} to before turn {n}: {}", what.join(", "));
    for path in done["restored"].as_array().into_iter().flatten() {
        println!("  {}", path.as_str().unwrap_or_default());
    }
    for skipped in done["skipped"].as_array().into_iter().flatten() {
        eprintln!("not restored: {}", skipped.as_str().unwrap_or_default());
    }
    Ok(ExitCode::SUCCESS)
}

/// `sessions fork`.
pub async fn fork(backend: &Backend, prefix: &str, turn: Option<i64>) -> anyhow::Result<ExitCode> {
    let (id, events, _) = turns(backend, prefix).await?;
    let n = turn
        .map(|t| turn_number(&id, t, in_conversation(&events)))
        .transpose()?;
    let done = backend.fork(&id, n).await?;
    let child = done["session"]["id"].as_str().unwrap_or_default();
    let workspace = match done["workspace"].as_str() {
        Some("shared") => format!(
            "it shares the host directory {} with {id}",
            done["session"]["cwd"].as_str().unwrap_or_default()
        ),
        _ => "with its own copy of the workspace".into(),
    };
    println!(
        "forked {id} into {child}: {} inherited, {workspace}",
        service_supervisor::usage_line::count(done["turns"].as_u64().unwrap_or(0), "turn")
    );
    Ok(ExitCode::SUCCESS)
}
