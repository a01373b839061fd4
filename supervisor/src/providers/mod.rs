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
    Ok(())
}

/// Serves one model request for a session of `bundle`; keys go only where `keys` allows.
pub fn stream(bundle: &Bundle, keys: &keys::KeyPolicy, request: ModelRequest) -> ChunkStream {
    match request.model.provider.as_str() {
        "scripted" => scripted::stream(bundle, request),
        "openai" => openai::stream(request, keys.clone()),
        "anthropic" => anthropic::stream(request, keys.clone()),
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
