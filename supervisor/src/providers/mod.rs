//! Model providers. The supervisor serves every worker `ModelRequest` through here, so API keys stay in this
//! process. A provider turns a request into a stream of chunks that always ends with `done` or `failed`.

pub mod anthropic;
pub mod choice;
mod http;
pub mod keys;
pub mod openai;
pub mod openai_responses;
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
    if model.provider == choice::AUTO {
        return Err(choice::NO_MODEL.into());
    }
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

/// What asking a model server for its model list showed (`service-rs doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reach {
    /// No call can be made: the model needs a key that is not set, or its settings are wrong.
    NotReady(String),
    /// The server listed the models it serves.
    Listed {
        /// The URL asked.
        url: String,
        /// Whether a key was sent.
        keyed: bool,
        /// Model ids it listed.
        models: Vec<String>,
    },
    /// The server answered with an HTTP error.
    Status {
        /// The URL asked.
        url: String,
        /// Whether a key was sent, and from which variable.
        key_env: Option<String>,
        /// HTTP status.
        status: u16,
    },
    /// The server could not be reached.
    Unreachable(String),
}

/// Asks the server of `model` for its model list, with the key the operator's policy allows for it: a check that
/// the server runs, the key is accepted and the model is served, at no token cost.
pub async fn reach(model: &ModelRef, keys: &keys::KeyPolicy) -> Reach {
    let quiet: OnRetry = std::sync::Arc::new(|_| {});
    let resolved = match model.provider.as_str() {
        "openai" => openai::endpoint(model, keys, quiet)
            .map(|(ep, _)| (openai::models_url(&ep), openai::auth_headers(&ep), ep)),
        "anthropic" => anthropic::endpoint(model, keys, quiet)
            .map(|(ep, _)| (anthropic::models_url(&ep), anthropic::auth_headers(&ep), ep)),
        other => return Reach::NotReady(format!("provider {other} has no server to reach")),
    };
    let (url, headers, ep) = match resolved {
        Ok(r) => r,
        Err(ModelChunk::Failed { message, .. }) => return Reach::NotReady(message),
        Err(_) => return Reach::NotReady("the model settings are not usable".into()),
    };
    let key_env = ep.key.as_ref().and(ep.key_env.clone());
    let resp = match http::get(&url, &headers, std::time::Duration::from_secs(10)).await {
        Ok(r) => r,
        Err(reason) => return Reach::Unreachable(reason),
    };
    let status = resp.status().as_u16();
    if !resp.status().is_success() {
        return Reach::Status {
            url,
            key_env,
            status,
        };
    }
    let body: serde_json::Value = resp.json().await.unwrap_or_default();
    let models = body["data"]
        .as_array()
        .or_else(|| body["models"].as_array())
        .map(|list| {
            list.iter()
                .filter_map(|m| m["id"].as_str().or_else(|| m["name"].as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default();
    Reach::Listed {
        url,
        keyed: key_env.is_some(),
        models,
    }
}

/// Serves one model request for a session of `bundle`; keys go only where `keys` allows; `on_retry` hears of
/// each retry.
pub fn stream(
    bundle: &Bundle,
    keys: &keys::KeyPolicy,
    request: std::sync::Arc<ModelRequest>,
    on_retry: OnRetry,
) -> ChunkStream {
    match request.model.provider.as_str() {
        "scripted" => scripted::stream(bundle, &request),
        "openai" => openai::stream(request, keys.clone(), on_retry),
        "anthropic" => anthropic::stream(request, keys.clone(), on_retry),
        choice::AUTO => futures::stream::once(futures::future::ready(ModelChunk::Failed {
            code: "provider_unavailable".into(),
            message: choice::NO_MODEL.into(),
        }))
        .boxed(),
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

/// Hands on a finished answer's tool calls (arguments `{}` when the model sent none), then ends the call: for
/// both of OpenAI's wire formats.
pub(crate) async fn hand_on(
    calls: impl IntoIterator<Item = service_ipc::ToolCall>,
    usage: service_ipc::Usage,
    tx: &tokio::sync::mpsc::Sender<ModelChunk>,
) -> ModelChunk {
    for mut call in calls {
        if call.arguments.is_empty() {
            call.arguments = "{}".into();
        }
        if tx.send(ModelChunk::ToolCall { call }).await.is_err() {
            break;
        }
    }
    ModelChunk::Done { usage }
}
