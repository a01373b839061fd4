//! Hooks at points outside a turn: `PreCompact` and `PostCompact` around a compaction the supervisor makes, and
//! `SessionEnd` when the worker is told to stop. None of them can change what happens; they are told.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};
use service_ipc::{ChatMessage, HookEvent};
use tokio_util::sync::CancellationToken;

use crate::hooks::Point;
use crate::state::Shared;

/// How long `SessionEnd` hooks may run: the supervisor gives a stopping worker two seconds before it kills it.
pub const SESSION_END_BUDGET: Duration = Duration::from_millis(1500);

/// Runs `event`'s hooks with `fields`, outside any turn, in the workspace; returns when they ended or `cancel`
/// fired.
async fn run(
    shared: &Shared,
    event: HookEvent,
    fields: Map<String, Value>,
    cancel: &CancellationToken,
) {
    let cwd = shared.workspace();
    let point = Point {
        event,
        turn_id: None,
        cwd: &cwd,
        tool: None,
        fields,
    };
    shared
        .hooks
        .run(&shared.config, &shared.outbox, point, cancel)
        .await;
}

/// `PreCompact` hooks, in the background, reading the conversation as it is before the compaction.
pub fn pre_compact(
    shared: &Arc<Shared>,
    trigger: String,
    custom_instructions: Option<String>,
    history: Option<&[ChatMessage]>,
    stop: &CancellationToken,
) {
    if !shared.hooks.on(HookEvent::PreCompact) {
        return;
    }
    let fields = [
        ("trigger".to_string(), json!(trigger)),
        (
            "custom_instructions".to_string(),
            json!(custom_instructions.unwrap_or_default()),
        ),
    ];
    let transcript = history.map(<[ChatMessage]>::to_vec);
    spawn(
        shared,
        (HookEvent::PreCompact, fields.into_iter().collect()),
        transcript,
        stop,
    );
}

/// `PostCompact` hooks, in the background, reading the compacted conversation.
pub fn post_compact(
    shared: &Arc<Shared>,
    trigger: String,
    compacted: &[ChatMessage],
    stop: &CancellationToken,
) {
    if !shared.hooks.on(HookEvent::PostCompact) {
        return;
    }
    let summary = compacted
        .first()
        .map(|m| m.content.clone())
        .unwrap_or_default();
    let fields = [
        ("trigger".to_string(), json!(trigger)),
        ("compact_summary".to_string(), json!(summary)),
    ];
    spawn(
        shared,
        (HookEvent::PostCompact, fields.into_iter().collect()),
        Some(compacted.to_vec()),
        stop,
    );
}

/// Starts `event`'s hooks once those started before them ended, so that they run in the order of their points;
/// `transcript` is written for them then, so that an earlier point's hooks still read their own.
fn spawn(
    shared: &Arc<Shared>,
    (event, fields): (HookEvent, Map<String, Value>),
    transcript: Option<Vec<ChatMessage>>,
    stop: &CancellationToken,
) {
    let cancel = stop.child_token();
    let mut last = shared
        .outside_turns
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let before = last.take();
    let shared = shared.clone();
    *last = Some(tokio::spawn(async move {
        if let Some(before) = before {
            let _ = before.await;
        }
        if let Some(messages) = transcript {
            shared.hooks.write_transcript(&messages);
        }
        run(&shared, event, fields, &cancel).await
    }));
}

/// `SessionEnd` hooks of a worker told to stop, for at most [`SESSION_END_BUDGET`].
pub async fn session_end(shared: &Shared) {
    if !shared.hooks.on(HookEvent::SessionEnd) {
        return;
    }
    if let Ok(history) = shared.history.try_lock() {
        shared.hooks.write_transcript(&history);
    }
    // Past the budget the hooks are cancelled, which kills their process groups; each still reports its end.
    let cancel = CancellationToken::new();
    let timer = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(SESSION_END_BUDGET).await;
            cancel.cancel();
        })
    };
    let fields = [("reason".to_string(), json!("other"))]
        .into_iter()
        .collect();
    run(shared, HookEvent::SessionEnd, fields, &cancel).await;
    timer.abort();
}
