//! Compaction: a session's older turns replaced by a summary the model writes, so that a long session keeps
//! answering within its model's context. It happens
//! - before a turn, past `memory.threshold` of the context window (`memory.provider: compact`);
//! - when the provider refuses a call's context as too long, once per turn, whatever the memory provider;
//! - by hand (`sessions compact`, `POST /sessions/{id}/compact`).
//!
//! The history log stays append-only: the summary and the kept turns follow a reset line (see
//! `SessionLog::reset_history`), and `context_compacted` journals the summary, so a restart, a new worker or another
//! node rebuilds the same context. A summary call that fails changes nothing.

use std::sync::Arc;

use futures::StreamExt;
use service_ipc::{
    ChatMessage, ChatRole, EventPayload, ModelChunk, ModelRef, ModelRequest, ToWorker,
};

use super::error::{Result, RuntimeError};
use super::session::Session;
use super::{Inner, ServiceRuntime};
use crate::bundle::agent::Compaction;

/// The system prompt of the summary call.
pub const SUMMARY_SYSTEM: &str =
    "You summarise a conversation between a user and an AI agent, so that the agent \
can carry on the work from your summary alone.";

/// How the summary call's request ends; a scripted bundle matches it with `when: "Summarise the conversation"`.
pub const SUMMARY_REQUEST: &str = "Summarise the conversation above for the agent that will carry it on. Keep the \
user's goals and instructions, the decisions made, the facts learned, the files and commands involved with their \
results, and what remains to do. Leave out pleasantries.";

/// The first line of the summary message the model sees from then on.
pub const SUMMARY_HEADER: &str =
    "[Summary of the earlier conversation, written when it was compacted]";

/// Characters of one message kept in the transcript the summary call reads.
const MAX_MESSAGE_CHARS: usize = 8_000;

/// Context windows of well-known models, by name prefix, when `model.config.context_window` does not say.
const KNOWN_WINDOWS: &[(&str, u64)] = &[
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("gpt-5", 400_000),
    ("o3", 200_000),
    ("o4-mini", 200_000),
    ("claude-", 200_000),
];

/// Why a compaction happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Past the threshold, before a turn.
    Auto,
    /// Asked for.
    Manual,
    /// The provider refused the context.
    Overflow,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::Auto => "auto",
            Reason::Manual => "manual",
            Reason::Overflow => "overflow",
        }
    }
}

/// What a compaction did.
#[derive(Debug, Clone, PartialEq, serde::Serialize, utoipa::ToSchema)]
pub struct Compacted {
    /// Context tokens before (the last call's prompt, else an estimate).
    pub before_tokens: u64,
    /// Context tokens after, estimated.
    pub after_tokens: u64,
    /// Turns the summary replaced.
    pub summarised_turns: u32,
    /// The history from now on: the summary, then the kept turns.
    #[serde(skip)]
    #[schema(ignore)]
    pub history: Vec<ChatMessage>,
}

/// The context window of `model`: `config.context_window`, else the known table.
pub fn window_of(model: &ModelRef) -> Option<u64> {
    if let Some(w) = model
        .config
        .as_ref()
        .and_then(|c| c.get("context_window"))
        .and_then(serde_json::Value::as_u64)
    {
        return Some(w);
    }
    KNOWN_WINDOWS
        .iter()
        .find(|(prefix, _)| model.name.starts_with(prefix))
        .map(|(_, w)| *w)
}

/// A rough token count of `messages`: four characters a token, and a few for each message's frame.
pub fn estimate(messages: &[ChatMessage]) -> u64 {
    messages
        .iter()
        .map(|m| {
            let chars = m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>();
            (chars as u64).div_ceil(4) + 4
        })
        .sum()
}

/// Where the kept turns start: the `keep`-th user prompt from the end; None when there are no older turns. An
/// earlier summary is not a turn: it is summarised again with the turns after it, and alone it is left as it is, so
/// a compaction always replaces at least one turn and never loops on its own summary.
fn split(history: &[ChatMessage], keep: usize) -> Option<(usize, u32)> {
    let starts: Vec<usize> = history
        .iter()
        .enumerate()
        .filter(|(_, m)| {
            m.role == ChatRole::User
                && !m.content.starts_with(SUMMARY_HEADER)
                && !m.is_observation()
        })
        .map(|(i, _)| i)
        .collect();
    let older = starts.len().checked_sub(keep).filter(|n| *n > 0)?;
    let cut = starts.get(older).copied().unwrap_or(history.len());
    Some((cut, u32::try_from(older).unwrap_or(u32::MAX)))
}

/// The transcript the summary call reads.
fn transcript(messages: &[ChatMessage]) -> String {
    let cut = |t: &str| -> String {
        if t.len() <= MAX_MESSAGE_CHARS {
            return t.to_string();
        }
        let mut end = MAX_MESSAGE_CHARS;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        format!("{} [...]", &t[..end])
    };
    let mut out = String::new();
    for m in messages {
        let who = match m.role {
            ChatRole::User => "User",
            ChatRole::Assistant => "Agent",
            ChatRole::Tool => "Tool result",
            ChatRole::System => "System",
        };
        if !m.content.is_empty() {
            out.push_str(&format!("{who}: {}\n", cut(&m.content)));
        }
        for call in &m.tool_calls {
            out.push_str(&format!(
                "Agent called {}({})\n",
                call.name,
                cut(&call.arguments)
            ));
        }
    }
    out
}

/// Asks `model` for a summary of `older`; the model's text, or why it failed.
async fn summarise(
    rt: &Inner,
    session: &Session,
    model: ModelRef,
    older: &[ChatMessage],
    focus: Option<&str>,
    turn_id: &str,
) -> std::result::Result<String, String> {
    let limit = session.bundle.agent.memory.summary_max_tokens;
    let mut ask = format!(
        "{}\n\n{SUMMARY_REQUEST} Write at most {} words.",
        transcript(older),
        limit * 3 / 4
    );
    if let Some(focus) = focus.filter(|f| !f.trim().is_empty()) {
        ask.push_str(&format!(" Focus on: {focus}"));
    }
    let mut model = model;
    // The scripted provider takes no max_tokens; every other one is held to the summary's bound.
    if model.provider != "scripted" {
        let mut config = model.config.take().unwrap_or_else(|| serde_json::json!({}));
        if let Some(c) = config.as_object_mut() {
            c.insert("max_tokens".into(), limit.into());
        }
        model.config = Some(config);
    }
    let request = ModelRequest {
        request_id: uuid::Uuid::new_v4().to_string(),
        turn_id: turn_id.to_string(),
        model,
        messages: vec![
            ChatMessage::text(ChatRole::System, SUMMARY_SYSTEM),
            ChatMessage::text(ChatRole::User, ask),
        ],
        tools: Vec::new(),
    };
    let on_retry: crate::providers::OnRetry =
        Arc::new(|r| tracing::info!("summary call retried: {}", r.reason));
    let request_model = request.model.clone();
    let mut chunks = crate::providers::stream(
        &session.bundle,
        &rt.options.keys,
        Arc::new(request),
        on_retry,
    );
    let mut text = String::new();
    while let Some(chunk) = chunks.next().await {
        match chunk {
            ModelChunk::TextDelta { text: t } => text.push_str(&t),
            ModelChunk::Done { usage } => {
                session.count_call(turn_id, usage);
                super::quota::count(rt, session, &request_model, &usage);
                break;
            }
            ModelChunk::Failed { code, message } => return Err(format!("{code}: {message}")),
            _ => {}
        }
    }
    if text.trim().is_empty() {
        return Err("the model wrote no summary".into());
    }
    Ok(text.trim().to_string())
}

/// Tells a running worker whose session has `PreCompact` hooks that a compaction begins; nothing waits for them.
async fn tell_hooks(session: &Session, reason: Reason, focus: Option<&str>) {
    let has_hooks = session
        .hooks_given()
        .iter()
        .any(|h| h.event == service_ipc::HookEvent::PreCompact);
    if !has_hooks {
        return;
    }
    if let Some(worker) = session.worker.lock().await.as_ref() {
        let _ = worker
            .send(ToWorker::Compacting {
                trigger: reason.as_str().into(),
                custom_instructions: focus.map(str::to_string),
            })
            .await;
    }
}

/// Compacts `session`'s history for `reason`, in turn `turn_id` when one runs; None when there is nothing older
/// than the turns kept.
pub(super) async fn compact(
    rt: &Inner,
    session: &Arc<Session>,
    reason: Reason,
    focus: Option<&str>,
    turn_id: Option<&str>,
    model: ModelRef,
) -> Result<Option<Compacted>> {
    let log = session.journal.log();
    let history = log.history().await?;
    let keep = session.bundle.agent.memory.keep_recent_turns;
    let Some((cut, turns)) = split(&history, keep) else {
        return Ok(None);
    };
    let before = session
        .record()
        .usage
        .context_tokens
        .filter(|_| reason != Reason::Manual)
        .unwrap_or_else(|| estimate(&history));
    tell_hooks(session, reason, focus).await;
    let call_turn = turn_id.map_or_else(
        || format!("compaction-{}", uuid::Uuid::new_v4()),
        str::to_string,
    );
    let summary = summarise(rt, session, model, &history[..cut], focus, &call_turn)
        .await
        .map_err(RuntimeError::CompactionFailed)?;
    let mut compacted = vec![ChatMessage::text(
        ChatRole::User,
        format!("{SUMMARY_HEADER}\n{summary}"),
    )];
    compacted.extend_from_slice(&history[cut..]);
    log.reset_history(&compacted)?;
    // The provider's count scaled by what the summary saves, so that before and after compare.
    let after = before.saturating_mul(estimate(&compacted)) / estimate(&history).max(1);
    session.emit(EventPayload::ContextCompacted {
        turn_id: turn_id.map(str::to_string),
        before_tokens: before,
        after_tokens: after,
        summarised_turns: turns,
        reason: reason.as_str().into(),
        summary,
    });
    if let Some(worker) = session.worker.lock().await.as_ref() {
        let _ = worker
            .send(ToWorker::ReplaceHistory {
                messages: compacted.clone(),
                trigger: Some(reason.as_str().into()),
            })
            .await;
    }
    Ok(Some(Compacted {
        before_tokens: before,
        after_tokens: after,
        summarised_turns: turns,
        history: compacted,
    }))
}

/// Compacts ahead of turn `turn_id` when the last call filled `memory.threshold` of the context window.
pub(super) async fn before_turn(
    rt: &Inner,
    session: &Arc<Session>,
    turn_id: &str,
    model: &ModelRef,
) {
    let memory = &session.bundle.agent.memory;
    if !memory.compacts_ahead() {
        return;
    }
    let Some(window) = window_of(model) else {
        return;
    };
    let used = match session.record().usage.context_tokens {
        Some(t) => t,
        None => match session.recent_history(usize::MAX).await {
            Ok(h) => estimate(&h),
            Err(_) => return,
        },
    };
    if (used as f64) < memory.threshold * window as f64 {
        return;
    }
    if let Err(e) = compact(
        rt,
        session,
        Reason::Auto,
        None,
        Some(turn_id),
        model.clone(),
    )
    .await
    {
        // The turn goes on with the whole history; an overflow may still compact it.
        tracing::warn!(session = %session.id, "compaction before the turn failed: {e}");
    }
}

/// After an overflow of `request` in its turn: compacts once and returns the request again over the compacted
/// history (the turn's own messages kept); None when compaction is off, already done in this turn, or fails.
pub(super) async fn after_overflow(
    rt: &Inner,
    session: &Arc<Session>,
    request: &ModelRequest,
) -> Option<ModelRequest> {
    if session.bundle.agent.memory.compaction == Compaction::Off
        || !session.first_overflow(&request.turn_id)
    {
        return None;
    }
    let prompt = session.turn_prompt(&request.turn_id)?;
    let compacted = compact(
        rt,
        session,
        Reason::Overflow,
        None,
        Some(&request.turn_id),
        request.model.clone(),
    )
    .await;
    let compacted = match compacted {
        Ok(Some(c)) => c,
        Ok(None) => return None,
        Err(e) => {
            tracing::warn!(session = %session.id, "compaction after an overflow failed: {e}");
            return None;
        }
    };
    // The request is the system prompt, the history, then the turn's own messages from its prompt on.
    let own = request
        .messages
        .iter()
        .rposition(|m| m.role == ChatRole::User && m.content == prompt)?;
    let mut messages: Vec<ChatMessage> = request
        .messages
        .iter()
        .take_while(|m| m.role == ChatRole::System)
        .cloned()
        .collect();
    messages.extend(compacted.history);
    messages.extend_from_slice(&request.messages[own..]);
    Some(ModelRequest {
        messages,
        ..request.clone()
    })
}

impl ServiceRuntime {
    /// Compacts session `id` by hand, between turns; `focus` says what the summary should keep above all.
    pub async fn compact_session(
        &self,
        id: &str,
        focus: Option<&str>,
    ) -> Result<Option<Compacted>> {
        let session = self.session(id).await?;
        self.claim(&session).await?;
        if let Some(turn_id) = session.active_turn() {
            return Err(RuntimeError::TurnInProgress {
                session_id: id.to_string(),
                turn_id,
            });
        }
        if session.bundle.agent.memory.compaction == Compaction::Off {
            return Err(RuntimeError::InvalidRequest(
                "this bundle turns compaction off (memory.compaction: off in agent.yaml)".into(),
            ));
        }
        let model = session.bundle.agent.model.to_ref();
        compact(&self.inner, &session, Reason::Manual, focus, None, model).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(t: &str) -> ChatMessage {
        ChatMessage::text(ChatRole::User, t)
    }
    fn agent(t: &str) -> ChatMessage {
        ChatMessage::text(ChatRole::Assistant, t)
    }

    #[test]
    fn the_last_turns_are_kept_and_the_older_ones_counted() {
        let h = vec![
            user("a"),
            agent("1"),
            user("b"),
            agent("2"),
            user("c"),
            agent("3"),
        ];
        assert_eq!(split(&h, 2), Some((2, 1)));
        assert_eq!(split(&h, 0), Some((6, 3)));
        assert_eq!(split(&h, 3), None, "nothing older than the kept turns");
    }

    #[test]
    fn an_earlier_summary_is_no_turn_of_its_own() {
        let summary = user(&format!("{SUMMARY_HEADER}\nearlier"));
        let h = vec![summary.clone(), user("b"), agent("2")];
        assert_eq!(
            split(&h, 1),
            None,
            "the summary alone is not compacted again"
        );
        let h = vec![summary, user("b"), agent("2"), user("c"), agent("3")];
        assert_eq!(split(&h, 1), Some((3, 1)));
    }

    #[test]
    fn a_known_model_has_a_window_and_the_config_wins() {
        let model = |name: &str, config: Option<serde_json::Value>| ModelRef {
            provider: "openai".into(),
            name: name.into(),
            config,
        };
        assert_eq!(window_of(&model("gpt-4o-mini", None)), Some(128_000));
        assert_eq!(
            window_of(&model(
                "gpt-4o",
                Some(serde_json::json!({"context_window": 2048}))
            )),
            Some(2048)
        );
        assert_eq!(window_of(&model("my-local-model", None)), None);
    }
}
