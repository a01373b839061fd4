//! Provider `openai`: Chat Completions with `stream: true` (or the Responses API with `wire_api: responses`, see
//! [`super::openai_responses`]), for OpenAI and any compatible server (Ollama, vLLM,
//! LM Studio, OpenRouter). Tool-call arguments arrive in pieces keyed by `index` and are assembled before the call
//! is handed on; `reasoning_content` / `reasoning` deltas become reasoning; usage comes from the final chunk
//! (`stream_options.include_usage`).

use futures::StreamExt;
use serde_json::{json, Value};
use service_ipc::{ChatMessage, ChatRole, ModelChunk, ModelRequest, ToolCall, Usage};
use tokio::sync::mpsc;

use super::http::{self, Endpoint};
use super::keys::KeyPolicy;
use super::{ChunkStream, OnRetry};
use crate::model_config::{ModelSettings, ToolChoice};

/// The official API, which wants `max_completion_tokens` where compatible servers take `max_tokens`.
const OFFICIAL: &str = "https://api.openai.com/";

/// The request body for `request`, with the model settings applied; `url` is where it goes.
pub fn body(request: &ModelRequest, settings: &ModelSettings, url: &str) -> Value {
    let messages: Vec<Value> = request.messages.iter().map(message).collect();
    let mut body = json!({
        "model": request.model.name,
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": messages,
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}))
            .collect();
        if let Some(choice) = http::tool_choice(settings, request) {
            body["tool_choice"] = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
            };
        }
        if let Some(p) = settings.parallel_tool_calls {
            body["parallel_tool_calls"] = json!(p);
        }
    }
    if let Some(n) = settings.max_tokens {
        let key = if url.starts_with(OFFICIAL) {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        body[key] = json!(n);
    }
    http::sampling(&mut body, settings, "stop");
    if let Some(seed) = settings.seed {
        body["seed"] = json!(seed);
    }
    http::merge_extra_body(&mut body, settings);
    body
}

fn message(m: &ChatMessage) -> Value {
    match m.role {
        ChatRole::System => json!({"role": "system", "content": m.content}),
        ChatRole::User => json!({"role": "user", "content": m.content}),
        ChatRole::Tool => {
            json!({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        }
        ChatRole::Assistant => {
            // "" rather than null: llama.cpp-based servers reject a null content, and OpenAI accepts both.
            let mut v = json!({"role": "assistant", "content": m.content});
            if !m.tool_calls.is_empty() {
                v["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
            }
            v
        }
    }
}

/// Streams the completion of `request`.
pub fn stream(request: ModelRequest, keys: KeyPolicy, on_retry: OnRetry) -> ChunkStream {
    http::spawn_stream(move |tx| async move {
        let end = run(&request, &keys, on_retry, &tx).await;
        let _ = tx.send(end).await;
    })
}

/// A tool call being assembled from its pieces.
#[derive(Default)]
struct Partial {
    index: u64,
    id: String,
    name: String,
    arguments: String,
}

/// The tool calls of one answer, assembled from deltas the way servers send them: the id and the name count once
/// (llama.cpp-based servers repeat the name in every delta), the arguments are appended. A delta with a new id at
/// an index already in use starts another call, for servers that send every call at index 0.
#[derive(Default)]
struct Calls(Vec<Partial>);

impl Calls {
    fn merge(&mut self, piece: &Value) {
        let index = piece["index"].as_u64().unwrap_or(0);
        let id = piece["id"].as_str().filter(|s| !s.is_empty());
        let position = self.0.iter().rposition(|c| c.index == index);
        let call = match position {
            Some(p)
                if id.is_none() || self.0[p].id.is_empty() || Some(self.0[p].id.as_str()) == id =>
            {
                &mut self.0[p]
            }
            _ => {
                self.0.push(Partial {
                    index,
                    ..Partial::default()
                });
                let last = self.0.len() - 1;
                &mut self.0[last]
            }
        };
        if let Some(id) = id.filter(|_| call.id.is_empty()) {
            call.id = id.into();
        }
        if let Some(name) = piece["function"]["name"]
            .as_str()
            .filter(|_| call.name.is_empty())
        {
            call.name = name.into();
        }
        if let Some(args) = piece["function"]["arguments"].as_str() {
            call.arguments.push_str(args);
        }
    }
}

/// Where a call of `model` goes, with which key and settings.
pub fn endpoint(
    model: &service_ipc::ModelRef,
    keys: &KeyPolicy,
    on_retry: OnRetry,
) -> Result<(Endpoint, crate::model_config::ModelSettings), ModelChunk> {
    Endpoint::resolve(
        "openai",
        "OPENAI",
        "https://api.openai.com/v1",
        "/chat/completions",
        model,
        keys,
        on_retry,
    )
}

/// The URL that lists the models the server serves.
pub fn models_url(ep: &Endpoint) -> String {
    format!("{}/models", ep.url.trim_end_matches("/chat/completions"))
}

/// The key, as this wire format sends it.
pub fn auth_headers(ep: &Endpoint) -> Vec<(String, String)> {
    ep.key
        .iter()
        .map(|key| ("authorization".to_string(), format!("Bearer {key}")))
        .collect()
}

async fn run(
    request: &ModelRequest,
    keys: &KeyPolicy,
    on_retry: OnRetry,
    tx: &mpsc::Sender<ModelChunk>,
) -> ModelChunk {
    let (mut ep, settings) = match endpoint(&request.model, keys, on_retry) {
        Ok(resolved) => resolved,
        Err(failed) => return failed,
    };
    let own = auth_headers(&ep);
    if settings.wire_api == Some(crate::model_config::WireApi::Responses) {
        // The same server, key and transport; another path and wire.
        ep.url = format!(
            "{}{}",
            ep.url.trim_end_matches("/chat/completions"),
            super::openai_responses::PATH
        );
        return super::openai_responses::run(request, &ep, &settings, own, tx).await;
    }
    let body = body(request, &settings, &ep.url);
    let headers = http::headers(own, &settings);
    let resp = match http::send(&ep, &headers, &body).await {
        Ok(r) => r,
        Err(failed) => return failed,
    };
    let mut events = std::pin::pin!(http::events(&ep, resp));
    let mut calls = Calls::default();
    let mut usage = Usage::default();
    let mut finished = false;
    let mut output = false;
    while let Some(ev) = events.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(failed) => return failed,
        };
        if ev.data.trim() == "[DONE]" {
            return done(calls, usage, tx).await;
        }
        let v = match http::parse_json(&ep, &ev.data) {
            Ok(v) => v,
            Err(failed) => return failed,
        };
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            if let Some(overflow) = http::context_overflow(&ep, &ev.data) {
                return overflow;
            }
            let message = err["message"].as_str().unwrap_or("unknown error");
            return http::failed(
                "provider_error",
                format!("the stream from {} reported: {message}", ep.url),
            );
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            usage.input_tokens = u["prompt_tokens"].as_u64();
            usage.output_tokens = u["completion_tokens"].as_u64();
            usage.cached_tokens = u["prompt_tokens_details"]["cached_tokens"].as_u64();
            usage.reasoning_tokens = u["completion_tokens_details"]["reasoning_tokens"].as_u64();
        }
        let Some(choice) = v["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta[key].as_str().filter(|t| !t.is_empty()) {
                output = true;
                if tx
                    .send(ModelChunk::ReasoningDelta { text: text.into() })
                    .await
                    .is_err()
                {
                    return ModelChunk::Done { usage };
                }
            }
        }
        if let Some(text) = delta["content"].as_str().filter(|t| !t.is_empty()) {
            output = true;
            if tx
                .send(ModelChunk::TextDelta { text: text.into() })
                .await
                .is_err()
            {
                return ModelChunk::Done { usage };
            }
        }
        for piece in delta["tool_calls"].as_array().into_iter().flatten() {
            output = true;
            calls.merge(piece);
        }
        if choice["finish_reason"].is_string() {
            finished = true;
        }
    }
    if finished {
        // Some compatible servers end the stream without [DONE] after a finish reason.
        return done(calls, usage, tx).await;
    }
    if !output {
        // Some servers (llama-cpp-python) fail a streamed request by closing the stream; the same request without
        // streaming gets the real error, typically a context overflow, and costs nothing when it fails early.
        let mut once = body.clone();
        once["stream"] = json!(false);
        if let Some(map) = once.as_object_mut() {
            map.remove("stream_options");
        }
        if let Some(why) = http::probe(&ep, &headers, &once).await {
            return why;
        }
    }
    http::failed(
        "provider_protocol",
        format!(
            "the stream from {} ended before the response was complete",
            ep.url
        ),
    )
}

async fn done(calls: Calls, usage: Usage, tx: &mpsc::Sender<ModelChunk>) -> ModelChunk {
    let calls = calls.0.into_iter().enumerate().map(|(i, c)| ToolCall {
        id: if c.id.is_empty() {
            format!("call_{i}")
        } else {
            c.id
        },
        name: c.name,
        arguments: c.arguments,
    });
    super::hand_on(calls, usage, tx).await
}
