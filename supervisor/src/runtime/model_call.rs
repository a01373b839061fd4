//! A model call for a session's running turn, as the supervisor makes it: the provider's stream, its retries
//! journaled as `model_retry` events, the call timed in the metrics. A worker's requests and the first call of a
//! turn the supervisor leads (`lead`) are both made here.

use std::sync::Arc;

use futures::stream::BoxStream;
use futures::StreamExt;
use service_ipc::{EventPayload, ModelChunk, ModelRequest};

use super::session::Session;
use super::Inner;
use crate::providers;

/// Streams `request` for `session`; dropping the stream abandons the call.
pub(super) fn stream(
    rt: &Inner,
    session: &Arc<Session>,
    request: ModelRequest,
) -> BoxStream<'static, ModelChunk> {
    let retried = session.clone();
    let turn_id = request.turn_id.clone();
    // The supervisor makes the call, so it journals the retries; the worker only sees the chunks.
    let on_retry: providers::OnRetry = Arc::new(move |r: providers::Retry| {
        tracing::info!(session = %retried.id, attempt = r.attempt, delay_ms = r.delay.as_millis() as u64, "model call retried: {}", r.reason);
        retried.emit(EventPayload::ModelRetry {
            turn_id: turn_id.clone(),
            attempt: r.attempt,
            max_attempts: r.max_attempts,
            delay_ms: u64::try_from(r.delay.as_millis()).unwrap_or(u64::MAX),
            reason: r.reason,
        });
    });
    let mut call = crate::metrics::ProviderCall::start(&rt.metrics, &session.id, &request.model);
    providers::stream(&session.bundle, &rt.options.keys, request, on_retry)
        .inspect(move |chunk| call.saw(chunk))
        .boxed()
}
