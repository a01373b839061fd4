//! Provider `anthropic`: the Messages API with streaming. `thinking` blocks become reasoning, with a section break
//! between blocks; `tool_use` blocks are assembled from their `input_json_delta` pieces and handed on at
//! `content_block_stop`; usage comes from `message_start` and `message_delta`; `error` events fail the turn.
//!
//! The conversation is mapped to Anthropic's shape: the system prompt is the top-level `system`; tool results
//! become `tool_result` blocks of a user message; consecutive messages of one role are merged, since the API wants
//! user and assistant to alternate.

use std::collections::HashMap;

use futures::StreamExt;
use serde_json::{json, Value};
use service_ipc::{ChatRole, ModelChunk, ModelRequest, ToolCall, Usage};
use tokio::sync::mpsc;

use super::http::{self, Endpoint};
use super::keys::KeyPolicy;
use super::{ChunkStream, OnRetry};
use crate::model_config::{ModelSettings, ToolChoice};

/// API version header value.
const API_VERSION: &str = "2023-06-01";

/// The request body for `request`, with the model settings applied.
pub fn body(request: &ModelRequest, settings: &ModelSettings) -> Value {
    let mut system = String::new();
    let mut messages: Vec<(String, Vec<Value>)> = Vec::new();
    for m in &request.messages {
        let (role, blocks) = match m.role {
            ChatRole::System => {
                system.push_str(&m.content);
                continue;
            }
            ChatRole::User => ("user", vec![json!({"type": "text", "text": m.content})]),
            ChatRole::Tool => (
                "user",
                vec![
                    json!({"type": "tool_result", "tool_use_id": m.tool_call_id, "content": m.content}),
                ],
            ),
            ChatRole::Assistant => {
                let mut blocks = Vec::new();
                if !m.content.is_empty() {
                    blocks.push(json!({"type": "text", "text": m.content}));
                }
                for c in &m.tool_calls {
                    let input: Value =
                        serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
                    blocks.push(
                        json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}),
                    );
                }
                ("assistant", blocks)
            }
        };
        match messages.last_mut() {
            Some((last, existing)) if last == role => existing.extend(blocks),
            _ => messages.push((role.to_string(), blocks)),
        }
    }
    let mut body = json!({
        "model": request.model.name,
        "max_tokens": settings.max_tokens.unwrap_or(8192),
        "stream": true,
        "messages": messages.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect::<Vec<_>>(),
    });
    if !system.is_empty() {
        body["system"] = json!(system);
    }
    if let Some(thinking) = &settings.thinking {
        body["thinking"] = thinking.clone();
    }
    http::sampling(&mut body, settings, "stop_sequences");
    if let Some(k) = settings.top_k {
        body["top_k"] = json!(k);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
            .collect();
        if let Some(choice) = http::tool_choice(settings, request) {
            body["tool_choice"] = match choice {
                ToolChoice::Auto => json!({"type": "auto"}),
                ToolChoice::None => json!({"type": "none"}),
                ToolChoice::Required => json!({"type": "any"}),
                ToolChoice::Tool(name) => json!({"type": "tool", "name": name}),
            };
        }
    }
    http::merge_extra_body(&mut body, settings);
    body
}

/// Streams the completion of `request`.
pub fn stream(
    request: std::sync::Arc<ModelRequest>,
    keys: KeyPolicy,
    on_retry: OnRetry,
) -> ChunkStream {
    http::produced_stream(move |tx| async move {
        let end = run(&request, &keys, on_retry, &tx).await;
        let _ = tx.send(end).await;
    })
}

enum Block {
    Text,
    Thinking,
    Tool {
        id: String,
        name: String,
        json: String,
    },
    Other,
}

/// Where a call of `model` goes, with which key and settings.
pub fn endpoint(
    model: &service_ipc::ModelRef,
    keys: &KeyPolicy,
    on_retry: OnRetry,
) -> Result<(Endpoint, crate::model_config::ModelSettings), ModelChunk> {
    Endpoint::resolve(
        "anthropic",
        "ANTHROPIC",
        "https://api.anthropic.com",
        "/v1/messages",
        model,
        keys,
        on_retry,
    )
}

/// The URL that lists the models the server serves.
pub fn models_url(ep: &Endpoint) -> String {
    format!("{}/v1/models", ep.url.trim_end_matches("/v1/messages"))
}

/// The API version and the key, as this wire format sends them.
pub fn auth_headers(ep: &Endpoint) -> Vec<(String, String)> {
    let mut own = vec![("anthropic-version".to_string(), API_VERSION.to_string())];
    if let Some(key) = &ep.key {
        own.push(("x-api-key".to_string(), key.clone()));
    }
    own
}

async fn run(
    request: &ModelRequest,
    keys: &KeyPolicy,
    on_retry: OnRetry,
    tx: &mpsc::Sender<ModelChunk>,
) -> ModelChunk {
    let (ep, settings) = match endpoint(&request.model, keys, on_retry) {
        Ok(resolved) => resolved,
        Err(failed) => return failed,
    };
    let own = auth_headers(&ep);
    let headers = http::headers(own, &settings);
    let resp = match http::send(&ep, &headers, http::json_bytes(&body(request, &settings))).await {
        Ok(r) => r,
        Err(failed) => return failed,
    };
    let mut events = std::pin::pin!(http::events(&ep, resp));
    let mut blocks: HashMap<u64, Block> = HashMap::new();
    let mut usage = Usage::default();
    let mut thinking_blocks = 0;
    while let Some(ev) = events.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(failed) => return failed,
        };
        let v = match http::parse_json(&ep, &ev.data) {
            Ok(v) => v,
            Err(failed) => return failed,
        };
        let kind = v["type"].as_str().unwrap_or(ev.event.as_str()).to_string();
        let index = v["index"].as_u64().unwrap_or(0);
        let chunk = match kind.as_str() {
            "message_start" => {
                let u = &v["message"]["usage"];
                usage.output_tokens = u["output_tokens"].as_u64();
                // Anthropic counts cached prompt tokens apart from `input_tokens`; ours includes them.
                usage.cached_tokens = u["cache_read_input_tokens"].as_u64();
                usage.input_tokens = u["input_tokens"].as_u64().map(|i| {
                    i + usage.cached_tokens.unwrap_or(0)
                        + u["cache_creation_input_tokens"].as_u64().unwrap_or(0)
                });
                None
            }
            "content_block_start" => {
                let block = &v["content_block"];
                let b = match block["type"].as_str() {
                    Some("text") => Block::Text,
                    Some("thinking") | Some("redacted_thinking") => {
                        thinking_blocks += 1;
                        Block::Thinking
                    }
                    Some("tool_use") => Block::Tool {
                        id: block["id"].as_str().unwrap_or_default().into(),
                        name: block["name"].as_str().unwrap_or_default().into(),
                        json: String::new(),
                    },
                    _ => Block::Other,
                };
                let brk = matches!(b, Block::Thinking) && thinking_blocks > 1;
                blocks.insert(index, b);
                brk.then_some(ModelChunk::ReasoningSectionBreak)
            }
            "content_block_delta" => {
                let d = &v["delta"];
                match (d["type"].as_str(), blocks.get_mut(&index)) {
                    (Some("text_delta"), _) => Some(ModelChunk::TextDelta {
                        text: d["text"].as_str().unwrap_or_default().into(),
                    }),
                    (Some("thinking_delta"), _) => Some(ModelChunk::ReasoningDelta {
                        text: d["thinking"].as_str().unwrap_or_default().into(),
                    }),
                    (Some("input_json_delta"), Some(Block::Tool { json, .. })) => {
                        json.push_str(d["partial_json"].as_str().unwrap_or_default());
                        None
                    }
                    _ => None,
                }
            }
            "content_block_stop" => match blocks.remove(&index) {
                Some(Block::Tool { id, name, json }) => Some(ModelChunk::ToolCall {
                    call: ToolCall {
                        id,
                        name,
                        arguments: if json.trim().is_empty() {
                            "{}".into()
                        } else {
                            json
                        },
                    },
                }),
                _ => None,
            },
            "message_delta" => {
                if let Some(out) = v["usage"]["output_tokens"].as_u64() {
                    usage.output_tokens = Some(out);
                }
                None
            }
            "message_stop" => return ModelChunk::Done { usage },
            "error" => {
                if let Some(overflow) = http::context_overflow(&ep, &ev.data) {
                    return overflow;
                }
                let kind = v["error"]["type"].as_str().unwrap_or("error");
                let message = v["error"]["message"].as_str().unwrap_or("unknown error");
                return ModelChunk::Failed {
                    code: "provider_error".into(),
                    message: format!("the stream from {} reported {kind}: {message}", ep.url),
                };
            }
            _ => None, // ping, and event kinds added later
        };
        if let Some(chunk) = chunk {
            if tx.send(chunk).await.is_err() {
                return ModelChunk::Done { usage };
            }
        }
    }
    ModelChunk::Failed {
        code: "provider_protocol".into(),
        message: format!("the stream from {} ended before message_stop", ep.url),
    }
}
