//! Model providers. The supervisor serves every worker `ModelRequest` through here, so API keys stay in this
//! process. A provider turns a request into a stream of chunks that always ends with `done` or `failed`.

pub mod anthropic;
mod http;
pub mod keys;
pub mod openai;
pub mod scripted;

use futures::stream::BoxStream;
use futures::StreamExt;
use service_ipc::{ModelChunk, ModelRef, ModelRequest};

use crate::bundle::agent::KNOWN_PROVIDERS;
use crate::bundle::Bundle;

/// A stream of model chunks ending with `done` or `failed`.
pub type ChunkStream = BoxStream<'static, ModelChunk>;

/// A model call that failed before any output and will be tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retry {
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// Attempts allowed for this kind of failure.
    pub max_attempts: u32,
    /// Wait before the next attempt.
    pub delay: std::time::Duration,
    /// What failed, with the URL tried.
    pub reason: String,
}

/// How a `model_retry` event reads to a person, for the CLI and the TUI.
pub fn retry_line(attempt: u32, max_attempts: u32, delay_ms: u64, reason: &str) -> String {
    let delay = if delay_ms < 1000 {
        format!("{delay_ms} ms")
    } else {
        format!("{:.1} s", delay_ms as f64 / 1000.0)
    };
    format!(
        "model call failed (attempt {attempt} of {max_attempts}), retrying in {delay}: {reason}"
    )
}

/// Told of each retry before its wait, so the runtime can journal it.
pub type OnRetry = std::sync::Arc<dyn Fn(Retry) + Send + Sync>;

/// Checks that a model named in an override can be served; the error says what is available.
pub fn check_model(model: &ModelRef) -> Result<(), String> {
    if !KNOWN_PROVIDERS.contains(&model.provider.as_str()) {
        return Err(format!(
            "unknown model provider \"{}\"; expected one of {}",
            model.provider,
            KNOWN_PROVIDERS.join(", ")
        ));
    }
    if model.name.trim().is_empty() {
        return Err("the model name is empty".into());
    }
    crate::model_config::parse(&model.provider, model.config.as_ref())
        .map(drop)
        .map_err(|e| e.to_string())
}

/// Serves one model request for a session of `bundle`; keys go only where `keys` allows; `on_retry` hears of
/// each retry.
pub fn stream(
    bundle: &Bundle,
    keys: &keys::KeyPolicy,
    request: ModelRequest,
    on_retry: OnRetry,
) -> ChunkStream {
    match request.model.provider.as_str() {
        "scripted" => scripted::stream(bundle, request),
        "openai" => openai::stream(request, keys.clone(), on_retry),
        "anthropic" => anthropic::stream(request, keys.clone(), on_retry),
        other => futures::stream::once(futures::future::ready(ModelChunk::Failed {
            code: "provider_unavailable".into(),
            message: format!(
                "unknown model provider \"{other}\"; expected one of {}",
                KNOWN_PROVIDERS.join(", ")
            ),
        }))
        .boxed(),
    }
}
