//! Provider `openai`: Chat Completions with `stream: true`, for OpenAI and any compatible server (Ollama, vLLM,
//! LM Studio, OpenRouter). Tool-call arguments arrive in pieces keyed by `index` and are assembled before the call
//! is handed on; `reasoning_content` / `reasoning` deltas become reasoning; usage comes from the final chunk
//! (`stream_options.include_usage`).

use futures::StreamExt;
use serde_json::{json, Value};
use service_ipc::{ChatMessage, ChatRole, ModelChunk, ModelRequest, ToolCall, Usage};
use tokio::sync::mpsc;

use super::http::{self, Endpoint};
use super::keys::KeyPolicy;
use super::ChunkStream;

/// The request body for `request`.
pub fn body(request: &ModelRequest) -> Value {
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
    }
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
            let mut v = json!({"role": "assistant", "content": if m.content.is_empty() { Value::Null } else { json!(m.content) }});
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
pub fn stream(request: ModelRequest, keys: KeyPolicy) -> ChunkStream {
    http::spawn_stream(move |tx| async move {
        let end = run(&request, &keys, &tx).await;
        let _ = tx.send(end).await;
    })
}

/// A tool call being assembled from its pieces.
#[derive(Default)]
struct Partial {
    id: String,
    name: String,
    arguments: String,
}

async fn run(
    request: &ModelRequest,
    keys: &KeyPolicy,
    tx: &mpsc::Sender<ModelChunk>,
) -> ModelChunk {
    let ep = match Endpoint::resolve(
        "openai",
        "OPENAI",
        "https://api.openai.com/v1",
        "/chat/completions",
        &request.model,
        keys,
    ) {
        Ok(ep) => ep,
        Err(failed) => return failed,
    };
    let mut headers = vec![];
    if let Some(key) = &ep.key {
        headers.push(("authorization", format!("Bearer {key}")));
    }
    let resp = match http::send(&ep, &headers, &body(request)).await {
        Ok(r) => r,
        Err(failed) => return failed,
    };
    let mut events = std::pin::pin!(http::events(&ep, resp));
    let mut calls: Vec<Partial> = Vec::new();
    let mut usage = Usage::default();
    let mut finished = false;
    while let Some(ev) = events.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(failed) => return failed,
        };
        if ev.data.trim() == "[DONE]" {
            return done(calls, usage, tx).await;
        }
        let v = match http::parse_json("openai", &ev.data) {
            Ok(v) => v,
            Err(failed) => return failed,
        };
        if let Some(err) = v.get("error") {
            let message = err["message"]
                .as_str()
                .unwrap_or("unknown error")
                .to_string();
            return ModelChunk::Failed {
                code: "provider_error".into(),
                message: format!("the openai stream reported: {message}"),
            };
        }
        if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
            usage.input_tokens = u["prompt_tokens"].as_u64().unwrap_or(0);
            usage.output_tokens = u["completion_tokens"].as_u64().unwrap_or(0);
        }
        let Some(choice) = v["choices"].get(0) else {
            continue;
        };
        let delta = &choice["delta"];
        for key in ["reasoning_content", "reasoning"] {
            if let Some(text) = delta[key].as_str().filter(|t| !t.is_empty()) {
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
            if tx
                .send(ModelChunk::TextDelta { text: text.into() })
                .await
                .is_err()
            {
                return ModelChunk::Done { usage };
            }
        }
        for piece in delta["tool_calls"].as_array().into_iter().flatten() {
            let index = piece["index"].as_u64().unwrap_or(0) as usize;
            if calls.len() <= index {
                calls.resize_with(index + 1, Partial::default);
            }
            let call = &mut calls[index];
            if let Some(id) = piece["id"].as_str() {
                call.id = id.into();
            }
            if let Some(name) = piece["function"]["name"].as_str() {
                call.name.push_str(name);
            }
            if let Some(args) = piece["function"]["arguments"].as_str() {
                call.arguments.push_str(args);
            }
        }
        if choice["finish_reason"].is_string() {
            finished = true;
        }
    }
    if finished {
        // Some compatible servers end the stream without [DONE] after a finish reason.
        return done(calls, usage, tx).await;
    }
    ModelChunk::Failed {
        code: "provider_protocol".into(),
        message: "the openai stream ended before the response was complete".into(),
    }
}

async fn done(calls: Vec<Partial>, usage: Usage, tx: &mpsc::Sender<ModelChunk>) -> ModelChunk {
    for (i, c) in calls.into_iter().enumerate() {
        let call = ToolCall {
            id: if c.id.is_empty() {
                format!("call_{i}")
            } else {
                c.id
            },
            name: c.name,
            arguments: if c.arguments.is_empty() {
                "{}".into()
            } else {
                c.arguments
            },
        };
        if tx.send(ModelChunk::ToolCall { call }).await.is_err() {
            break;
        }
    }
    ModelChunk::Done { usage }
}
