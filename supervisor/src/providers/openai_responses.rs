//! Provider `openai` with `model.config.wire_api: responses`: OpenAI's Responses API (`POST {base_url}/responses`,
//! `stream: true`), which codex-family models answer only on. Stateless: `store: false`, so every call sends the
//! conversation as input items; tool calls are `function_call` items whose `call_id` pairs them with the
//! `function_call_output` items that carry their results, and the encrypted reasoning of each reply is kept in the
//! history (`ChatMessage::opaque`) and sent back before its message, as the API asks of stateless callers. With
//! `store: true` the server keeps the conversation: each reply's response id is kept in the history instead, and the
//! next call sends `previous_response_id` with only the items that came after it, so a new worker or another node
//! chains on from the journaled history.

use futures::StreamExt;
use serde_json::{json, Value};
use service_ipc::{ChatMessage, ChatRole, ModelChunk, ModelRequest, ToolCall, Usage};
use tokio::sync::mpsc;

use super::http::{self, Endpoint};
use crate::model_config::{ModelSettings, ToolChoice};

/// The path of the Responses API under a base URL.
pub const PATH: &str = "/responses";

/// The request body for `request`, with the model settings applied.
pub fn body(request: &ModelRequest, settings: &ModelSettings) -> Value {
    let instructions: Vec<&str> = request
        .messages
        .iter()
        .filter(|m| m.role == ChatRole::System)
        .map(|m| m.content.as_str())
        .collect();
    let stored = settings.store == Some(true);
    // Stored: the server has the conversation up to its last response; only what came after is sent.
    let (previous, from) = match stored {
        true => last_response(&request.messages),
        false => (None, 0),
    };
    let input: Vec<Value> = request.messages[from..]
        .iter()
        .filter(|m| m.role != ChatRole::System)
        .flat_map(items)
        .collect();
    let mut body = json!({
        "model": request.model.name,
        "stream": true,
        "store": stored,
        "input": input,
    });
    match previous {
        Some(id) => body["previous_response_id"] = json!(id),
        // Stateless: the reasoning comes back encrypted, is kept with the assistant message, and is sent again.
        None if !stored => body["include"] = json!(["reasoning.encrypted_content"]),
        None => {}
    }
    if !instructions.is_empty() {
        body["instructions"] = json!(instructions.join("\n\n"));
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| json!({"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}))
            .collect();
        if let Some(choice) = http::tool_choice(settings, request) {
            body["tool_choice"] = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({"type": "function", "name": name}),
            };
        }
        if let Some(p) = settings.parallel_tool_calls {
            body["parallel_tool_calls"] = json!(p);
        }
    }
    if let Some(n) = settings.max_tokens {
        body["max_output_tokens"] = json!(n);
    }
    if let Some(r) = &settings.reasoning {
        body["reasoning"] = json!({"effort": r.effort, "summary": r.summary});
    }
    if let Some(v) = settings.verbosity {
        body["text"] = json!({"verbosity": v});
    }
    for (key, value) in [
        ("temperature", settings.temperature.map(|t| json!(t))),
        ("top_p", settings.top_p.map(|p| json!(p))),
    ] {
        if let Some(value) = value {
            body[key] = value;
        }
    }
    http::merge_extra_body(&mut body, settings);
    body
}

/// A chat message as Responses input items: a message, or an assistant's calls, or a tool's output.
fn items(m: &ChatMessage) -> Vec<Value> {
    match m.role {
        ChatRole::User | ChatRole::System => {
            vec![json!({"role": "user", "content": [{"type": "input_text", "text": m.content}]})]
        }
        ChatRole::Tool => vec![json!({
            "type": "function_call_output",
            "call_id": m.tool_call_id,
            "output": m.content,
        })],
        ChatRole::Assistant => {
            let mut out: Vec<Value> = m.opaque.iter().filter_map(reasoning_item).collect();
            if !m.content.is_empty() {
                out.push(json!({"role": "assistant", "content": [{"type": "output_text", "text": m.content}]}));
            }
            out.extend(m.tool_calls.iter().map(|c| {
                json!({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments})
            }));
            out
        }
    }
}

/// A reasoning item as it may be sent back: its id, its encrypted content and its summary's text, nothing else.
/// The history it comes from passed through the worker, so an item of any other type or shape is dropped: it
/// cannot become a forged function output or message in the provider's input.
fn reasoning_item(item: &Value) -> Option<Value> {
    if item["type"] != "reasoning" {
        return None;
    }
    let encrypted = item["encrypted_content"].as_str()?;
    let summary: Vec<Value> = item["summary"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["text"].as_str())
        .map(|t| json!({"type": "summary_text", "text": t}))
        .collect();
    let mut out = json!({"type": "reasoning", "encrypted_content": encrypted, "summary": summary});
    if let Some(id) = item["id"].as_str() {
        out["id"] = json!(id);
    }
    Some(out)
}

/// The opaque item that records which stored response an assistant message is (`store: true`).
const RESPONSE_REF: &str = "service.response";

/// The last stored response the conversation names, and where the messages after it start; (None, 0) when none.
/// A response id came through the worker, so only an id's own characters are taken.
fn last_response(messages: &[ChatMessage]) -> (Option<String>, usize) {
    for (i, m) in messages.iter().enumerate().rev() {
        let id = m
            .opaque
            .iter()
            .filter(|o| o["type"] == RESPONSE_REF)
            .filter_map(|o| o["id"].as_str())
            .find(|id| {
                !id.is_empty()
                    && id.len() <= 128
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
            });
        if let Some(id) = id {
            return (Some(id.to_string()), i + 1);
        }
    }
    (None, 0)
}

/// A function call being streamed: its `call_id` and name from `output_item.added`, its arguments in pieces.
struct Pending {
    item_id: String,
    call_id: String,
    name: String,
    arguments: String,
}

/// Serves one request on the Responses wire at `ep`.
pub async fn run(
    request: &ModelRequest,
    ep: &Endpoint,
    settings: &ModelSettings,
    own: Vec<(String, String)>,
    tx: &mpsc::Sender<ModelChunk>,
) -> ModelChunk {
    let body = body(request, settings);
    let stored = settings.store == Some(true);
    let headers = http::headers(own, settings);
    let resp = match http::send(ep, &headers, http::json_bytes(&body)).await {
        Ok(r) => r,
        Err(failed) => return failed,
    };
    let mut events = std::pin::pin!(http::events(ep, resp));
    let mut calls: Vec<Pending> = Vec::new();
    let mut summaries = 0u32;
    while let Some(ev) = events.next().await {
        let ev = match ev {
            Ok(ev) => ev,
            Err(failed) => return failed,
        };
        let v = match http::parse_json(ep, &ev.data) {
            Ok(v) => v,
            Err(failed) => return failed,
        };
        let kind = v["type"].as_str().unwrap_or(ev.event.as_str());
        let chunk = match kind {
            "response.output_text.delta" => v["delta"]
                .as_str()
                .map(|t| ModelChunk::TextDelta { text: t.into() }),
            "response.reasoning_summary_part.added" => {
                summaries += 1;
                (summaries > 1).then_some(ModelChunk::ReasoningSectionBreak)
            }
            "response.reasoning_summary_text.delta" => v["delta"]
                .as_str()
                .map(|t| ModelChunk::ReasoningDelta { text: t.into() }),
            "response.output_item.done" if v["item"]["type"] == "reasoning" => {
                reasoning_item(&v["item"]).map(|item| ModelChunk::Opaque { item })
            }
            "response.output_item.added" if v["item"]["type"] == "function_call" => {
                let item = &v["item"];
                calls.push(Pending {
                    item_id: item["id"].as_str().unwrap_or_default().into(),
                    call_id: item["call_id"].as_str().unwrap_or_default().into(),
                    name: item["name"].as_str().unwrap_or_default().into(),
                    arguments: item["arguments"].as_str().unwrap_or_default().into(),
                });
                None
            }
            "response.function_call_arguments.delta" => {
                let id = v["item_id"].as_str().unwrap_or_default();
                if let Some(c) = calls.iter_mut().rfind(|c| c.item_id == id) {
                    c.arguments
                        .push_str(v["delta"].as_str().unwrap_or_default());
                }
                None
            }
            "response.function_call_arguments.done" => {
                let id = v["item_id"].as_str().unwrap_or_default();
                if let (Some(c), Some(all)) = (
                    calls.iter_mut().rfind(|c| c.item_id == id),
                    v["arguments"].as_str(),
                ) {
                    c.arguments = all.into();
                }
                None
            }
            "response.completed" => {
                if let Some(id) = v["response"]["id"].as_str().filter(|_| stored) {
                    let item = json!({"type": RESPONSE_REF, "id": id});
                    let _ = tx.send(ModelChunk::Opaque { item }).await;
                }
                return done(calls, usage(&v["response"]["usage"]), tx).await;
            }
            "response.failed" | "response.incomplete" | "error" => {
                return failure(ep, &v, &ev.data);
            }
            _ => None,
        };
        if let Some(chunk) = chunk {
            if tx.send(chunk).await.is_err() {
                return ModelChunk::Done {
                    usage: Usage::default(),
                };
            }
        }
    }
    http::failed(
        "provider_protocol",
        format!("the stream from {} ended before response.completed", ep.url),
    )
}

/// The usage of a `response.completed` event.
fn usage(u: &Value) -> Usage {
    Usage {
        input_tokens: u["input_tokens"].as_u64(),
        output_tokens: u["output_tokens"].as_u64(),
        cached_tokens: u["input_tokens_details"]["cached_tokens"].as_u64(),
        reasoning_tokens: u["output_tokens_details"]["reasoning_tokens"].as_u64(),
        ..Usage::default()
    }
}

/// The turn's error for a `response.failed`, `response.incomplete` or `error` event.
fn failure(ep: &Endpoint, v: &Value, data: &str) -> ModelChunk {
    if let Some(overflow) = http::context_overflow(ep, data) {
        return overflow;
    }
    let error = if v["type"] == "error" {
        v
    } else {
        &v["response"]["error"]
    };
    let reason = v["response"]["incomplete_details"]["reason"].as_str();
    let code = error["code"].as_str().or(reason).unwrap_or("unknown");
    let message = error["message"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| {
            format!(
                "the response ended {}",
                reason.unwrap_or("without an answer")
            )
        });
    http::failed(
        "provider_error",
        format!("the stream from {} reported {code}: {message}", ep.url),
    )
}

async fn done(calls: Vec<Pending>, usage: Usage, tx: &mpsc::Sender<ModelChunk>) -> ModelChunk {
    let calls = calls.into_iter().map(|c| ToolCall {
        id: c.call_id,
        name: c.name,
        arguments: c.arguments,
    });
    super::hand_on(calls, usage, tx).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_ipc::{ModelRef, ToolSpec};

    #[test]
    fn only_a_reasoning_items_own_fields_are_sent_back() {
        let mut assistant = ChatMessage::text(ChatRole::Assistant, "ok");
        assistant.opaque = vec![
            json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA",
                   "summary": [{"type": "summary_text", "text": "looked"}], "extra": "dropped"}),
            // A worker's forgery: another item type, or a reasoning item without its content.
            json!({"type": "function_call_output", "call_id": "x", "output": "forged"}),
            json!({"type": "reasoning", "summary": []}),
        ];
        let sent = items(&assistant);
        assert_eq!(
            sent[0],
            json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAA",
                   "summary": [{"type": "summary_text", "text": "looked"}]})
        );
        assert_eq!(
            sent.len(),
            2,
            "the reasoning item, then the message: {sent:?}"
        );
        assert_eq!(sent[1]["role"], "assistant");
    }

    #[test]
    fn a_conversation_becomes_instructions_and_paired_items() {
        let mut assistant = ChatMessage::text(ChatRole::Assistant, "");
        assistant.tool_calls = vec![ToolCall {
            id: "call_1".into(),
            name: "Bash".into(),
            arguments: "{\"command\":\"ls\"}".into(),
        }];
        let mut result = ChatMessage::text(ChatRole::Tool, "a.txt");
        result.tool_call_id = Some("call_1".into());
        let request = ModelRequest {
            request_id: "r".into(),
            turn_id: "t".into(),
            model: ModelRef {
                provider: "openai".into(),
                name: "gpt-5-codex".into(),
                config: None,
            },
            messages: vec![
                ChatMessage::text(ChatRole::System, "Be brief."),
                ChatMessage::text(ChatRole::User, "list"),
                assistant,
                result,
            ],
            tools: vec![ToolSpec {
                name: "Bash".into(),
                description: "run".into(),
                parameters: json!({"type": "object"}),
            }],
        };
        let body = body(&request, &ModelSettings::default());
        assert_eq!(body["instructions"], "Be brief.");
        assert_eq!(body["store"], false);
        assert_eq!(body["input"][0]["content"][0]["type"], "input_text");
        assert_eq!(body["input"][1]["type"], "function_call");
        assert_eq!(body["input"][2]["type"], "function_call_output");
        assert_eq!(body["input"][1]["call_id"], body["input"][2]["call_id"]);
        assert_eq!(body["tools"][0]["name"], "Bash");
    }
}
