//! A model call for a session's running turn, as the supervisor makes it: the provider's stream, its retries
//! journaled as `model_retry` events, the call timed in the metrics. A worker's requests and the first call of a
//! turn the supervisor leads (`lead`) are both made here.
//!
//! A new session's first call can also be made ahead of its session ([`ahead`]): it depends only on the bundle,
//! the model and the prompt, so it need not wait for the session's directory, record and journal to be written.

use std::sync::Arc;

use futures::channel::mpsc;
use futures::stream::BoxStream;
use futures::{SinkExt, StreamExt};
use service_ipc::{EventPayload, ModelChunk, ModelRequest};
use tokio_util::task::AbortOnDropHandle;

use super::session::Session;
use super::Inner;
use crate::bundle::Bundle;
use crate::providers;

/// The code of a turn stopped by its own budget, in tokens or in dollars.
pub const BUDGET_EXCEEDED: &str = "budget_exceeded";

/// Streams `request` for `session`; dropping the stream abandons the call. A call whose context the provider
/// refuses as too long, before any output, is compacted away and made again, once per turn (see `compaction`). A
/// call of a tenant that has spent its day's tokens is refused (see `quota`).
pub(super) fn stream(
    rt: &Arc<Inner>,
    session: &Arc<Session>,
    request: ModelRequest,
) -> BoxStream<'static, ModelChunk> {
    // The turn's own cap comes first: once its calls have spent it, no call is made.
    if let Some(why) = session.over_budget(&request.turn_id) {
        return futures::stream::iter([ModelChunk::Failed {
            code: BUDGET_EXCEEDED.into(),
            message: format!(
                "{why}; no further model call was made. Raise the budget, or continue the session with a new turn"
            ),
        }])
        .boxed();
    }
    if !rt.options.tenant_ledger {
        return compacting(rt, session, request);
    }
    let (inner, turn) = (rt.clone(), session.clone());
    let (rt, session) = (rt.clone(), session.clone());
    futures::stream::once(async move {
        match super::quota::refusal(&rt, &session).await {
            Some(refused) => futures::stream::iter([refused]).boxed(),
            None => compacting(&rt, &session, request),
        }
    })
    .flatten()
    // The call that passed the day's tokens ends the turn: its tool calls are not run.
    .then(move |chunk| {
        let (rt, session) = (inner.clone(), turn.clone());
        async move {
            if matches!(chunk, ModelChunk::Done { .. }) {
                if let Some(refused) = super::quota::refusal(&rt, &session).await {
                    return refused;
                }
            }
            chunk
        }
    })
    .boxed()
}

/// [`stream`] without the tenant's check.
fn compacting(
    rt: &Arc<Inner>,
    session: &Arc<Session>,
    request: ModelRequest,
) -> BoxStream<'static, ModelChunk> {
    // Shared with the call rather than copied: a retry after an overflow reads it again.
    let request = Arc::new(request);
    let mut first = once(rt, session, request.clone());
    if session.bundle.agent.memory.compaction == crate::bundle::agent::Compaction::Off {
        return first;
    }
    let (rt, session) = (rt.clone(), session.clone());
    futures::stream::once(async move {
        let head = first.next().await;
        if let Some(ModelChunk::Failed { code, .. }) = &head {
            if code == "context_length_exceeded" {
                if let Some(again) =
                    super::compaction::after_overflow(&rt, &session, &request).await
                {
                    return once(&rt, &session, Arc::new(again));
                }
            }
        }
        futures::stream::iter(head).chain(first).boxed()
    })
    .flatten()
    .boxed()
}

/// One call of `request`, its retries journaled and its usage counted.
fn once(
    rt: &Arc<Inner>,
    session: &Arc<Session>,
    request: Arc<ModelRequest>,
) -> BoxStream<'static, ModelChunk> {
    let retried = session.clone();
    let turn_id = request.turn_id.clone();
    // The supervisor makes the call, so it journals the retries; the worker only sees the chunks.
    let on_retry: providers::OnRetry = Arc::new(move |r| journal_retry(&retried, &turn_id, r));
    let mut call = crate::metrics::ProviderCall::start(&rt.metrics, &session.id, &request.model);
    let mut traced = chat_span(&request, std::time::SystemTime::now());
    let (counted, turn_id, inner) = (session.clone(), request.turn_id.clone(), rt.clone());
    let model = request.model.clone();
    provider_stream(&session.bundle, rt, request, on_retry)
        .inspect(move |chunk| {
            call.saw(chunk);
            if let Some(span) = traced.as_mut() {
                span.saw(chunk);
            }
            count(&counted, &turn_id, chunk);
            if let ModelChunk::Done { usage } = chunk {
                super::quota::count(&inner, &counted, &model, usage);
            }
        })
        .boxed()
}

/// The provider's stream for `request`, every tool call in it checked (see [`checked_call`]): the one way a model's
/// reply enters a turn.
fn provider_stream(
    bundle: &Bundle,
    rt: &Inner,
    request: Arc<ModelRequest>,
    on_retry: providers::OnRetry,
) -> BoxStream<'static, ModelChunk> {
    let offered = request.clone();
    providers::stream(bundle, &rt.options.keys, request, on_retry)
        .map(move |chunk| checked_call(chunk, &offered.tools))
        .boxed()
}

/// Longest call id a reply's tool call keeps; a longer one is replaced by a digest of it.
const MAX_CALL_ID_BYTES: usize = 128;

/// A tool call as the turn takes it from the model. A name the request did not offer is cut to
/// [`crate::telemetry::MAX_LABEL_BYTES`]: the worker answers the model that there is no such tool, and no event,
/// span or log line carries the model's whole string. A call id longer than [`MAX_CALL_ID_BYTES`] is replaced by
/// `call_` and a digest of it, the same each time, so its result still pairs with it.
fn checked_call(chunk: ModelChunk, offered: &[service_ipc::ToolSpec]) -> ModelChunk {
    let ModelChunk::ToolCall { mut call } = chunk else {
        return chunk;
    };
    if !offered.iter().any(|t| t.name == call.name) {
        call.name = crate::telemetry::label(&call.name);
    }
    if call.id.len() > MAX_CALL_ID_BYTES || call.id.chars().any(char::is_control) {
        use sha2::Digest;
        let digest = sha2::Sha256::digest(call.id.as_bytes());
        call.id = format!("call_{}", &hex::encode(digest)[..32]);
    }
    ModelChunk::ToolCall { call }
}

/// The trace span of a call of `request` begun at `began`, when traces are on.
fn chat_span(
    request: &ModelRequest,
    began: std::time::SystemTime,
) -> Option<crate::telemetry::spans::ChatSpan> {
    let traces = crate::telemetry::traces()?;
    let model = &request.model;
    Some(traces.chat(&request.turn_id, &model.provider, &model.name, began))
}

/// Counts a finished call, and each tool call it asked for, in its turn: the supervisor's own count, from what the
/// provider said (a worker's `tool_call_started` events are its own claim).
fn count(session: &Session, turn_id: &str, chunk: &ModelChunk) {
    match chunk {
        ModelChunk::Done { usage } => session.count_call(turn_id, *usage),
        ModelChunk::ToolCall { .. } => session.count_tool_call(turn_id),
        _ => {}
    }
}

fn journal_retry(session: &Session, turn_id: &str, r: providers::Retry) {
    tracing::info!(session = %session.id, attempt = r.attempt, delay_ms = r.delay.as_millis() as u64, "model call retried: {}", r.reason);
    session.emit(EventPayload::ModelRetry {
        turn_id: turn_id.to_string(),
        attempt: r.attempt,
        max_attempts: r.max_attempts,
        delay_ms: u64::try_from(r.delay.as_millis()).unwrap_or(u64::MAX),
        reason: r.reason,
    });
}

/// What a call made ahead of its session heard, in order.
enum Heard {
    Chunk(ModelChunk),
    Retry(providers::Retry),
}

/// Chunks a call made ahead may hold before its turn reads them; then the call waits.
const AHEAD_BUFFER: usize = 64;

/// A model call made before its session existed (see [`ahead`]); dropping it abandons the call.
pub(super) struct Ahead {
    turn_id: String,
    /// When the call went out, and for which model (the trace span is made once the turn has one).
    began: std::time::SystemTime,
    model: service_ipc::ModelRef,
    heard: mpsc::Receiver<Heard>,
    call: AbortOnDropHandle<()>,
}

/// Starts `request`, the first call of a turn of the session `session_id` of `bundle`, which is still being made.
/// The call runs on a task of its own; what it hears waits in the returned [`Ahead`] until [`Ahead::stream`].
pub(super) fn ahead(rt: &Inner, bundle: &Bundle, session_id: &str, request: ModelRequest) -> Ahead {
    let (mut tx, heard) = mpsc::channel(AHEAD_BUFFER);
    let turn_id = request.turn_id.clone();
    let retries = tx.clone();
    // A call is retried only before its response starts, so the channel has room for the notice.
    let on_retry: providers::OnRetry = Arc::new(move |r| {
        let _ = retries.clone().try_send(Heard::Retry(r));
    });
    let mut call = crate::metrics::ProviderCall::start(&rt.metrics, session_id, &request.model);
    let (began, model) = (std::time::SystemTime::now(), request.model.clone());
    let mut chunks = provider_stream(bundle, rt, Arc::new(request), on_retry);
    let task = tokio::spawn(async move {
        while let Some(chunk) = chunks.next().await {
            call.saw(&chunk);
            if tx.send(Heard::Chunk(chunk)).await.is_err() {
                return;
            }
        }
    });
    Ahead {
        turn_id,
        began,
        model,
        heard,
        call: AbortOnDropHandle::new(task),
    }
}

impl Ahead {
    /// The id of the turn the call is for.
    pub(super) fn turn_id(&self) -> &str {
        &self.turn_id
    }

    /// The call's chunks, now that `session` runs its turn: retries heard so far are journaled as the stream
    /// reaches them, as [`stream`] journals them. Dropping the stream abandons the call.
    pub(super) fn stream(
        self,
        rt: &Arc<Inner>,
        session: &Arc<Session>,
    ) -> BoxStream<'static, ModelChunk> {
        let Ahead {
            turn_id,
            began,
            model,
            heard,
            call,
        } = self;
        let (session, rt) = (session.clone(), rt.clone());
        // Made now that the turn's own span exists, dated from when the call went out.
        let mut traced = crate::telemetry::traces()
            .map(|t| t.chat(&turn_id, &model.provider, &model.name, began));
        heard
            .filter_map(move |heard| {
                // Held by the stream: the call lives as long as its reader.
                let _call = &call;
                futures::future::ready(match heard {
                    Heard::Chunk(chunk) => {
                        count(&session, &turn_id, &chunk);
                        if let ModelChunk::Done { usage } = &chunk {
                            super::quota::count(&rt, &session, &model, usage);
                        }
                        if let Some(span) = traced.as_mut() {
                            span.saw(&chunk);
                        }
                        Some(chunk)
                    }
                    Heard::Retry(r) => {
                        journal_retry(&session, &turn_id, r);
                        None
                    }
                })
            })
            .boxed()
    }
}
