//! Provider `openai`: Chat Completions with `stream: true` (or the Responses API with `wire_api: responses`, see
//! [`super::openai_responses`]), for OpenAI and any compatible server (Ollama, vLLM,
//! LM Studio, OpenRouter). Tool-call arguments arrive in pieces keyed by `index` and are assembled before the call
//! is handed on; `reasoning_content` / `reasoning` deltas become reasoning; usage comes from the final chunk
//! (`stream_options.include_usage`).

use futures::StreamExt;
use serde_json::{json, Value};
use service_ipc::{ChatMessage, ChatRole, ModelChunk, ModelRequest, ToolCall, ToolSpec, Usage};
use tokio::sync::mpsc;

use super::http::{self, Endpoint};
use super::keys::KeyPolicy;
use super::{ChunkStream, OnRetry};
use crate::model_config::{ModelSettings, ToolChoice};

/// The official API, which wants `max_completion_tokens` where compatible servers take `max_tokens`.
const OFFICIAL: &str = "https://api.openai.com/";

/// The request body for `request`, with the model settings applied; `url` is where it goes. `stream` asks for a
/// streamed answer, with its usage in the last chunk.
///
/// Written straight from the request: the messages and tools, which are most of it, are serialized in place
/// rather than copied into a `serde_json::Value` first (a warm turn's largest cost after the model's own). The
/// settings are a small map, which `extra_body` may extend; a key it sets replaces the one built here, the
/// messages and tools among them.
pub fn body(request: &ModelRequest, settings: &ModelSettings, url: &str, stream: bool) -> Vec<u8> {
    let mut head = json!({"model": request.model.name, "stream": stream});
    if stream {
        head["stream_options"] = json!({"include_usage": true});
    }
    if !request.tools.is_empty() {
        if let Some(choice) = http::tool_choice(settings, request) {
            head["tool_choice"] = match choice {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::None => json!("none"),
                ToolChoice::Required => json!("required"),
                ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
            };
        }
        if let Some(p) = settings.parallel_tool_calls {
            head["parallel_tool_calls"] = json!(p);
        }
    }
    if let Some(n) = settings.max_tokens {
        let key = if url.starts_with(OFFICIAL) {
            "max_completion_tokens"
        } else {
            "max_tokens"
        };
        head[key] = json!(n);
    }
    http::sampling(&mut head, settings, "stop");
    if let Some(seed) = settings.seed {
        head["seed"] = json!(seed);
    }
    http::merge_extra_body(&mut head, settings);
    // An object, as built above.
    let head = match head {
        Value::Object(head) => head,
        _ => serde_json::Map::new(),
    };
    let wire = Wire {
        messages: (!head.contains_key("messages")).then_some(Messages(&request.messages)),
        tools: (!request.tools.is_empty() && !head.contains_key("tools"))
            .then_some(Tools(&request.tools)),
        head,
    };
    serde_json::to_vec(&wire).unwrap_or_default()
}

/// A Chat Completions request as sent: the settings, then the messages and the tools.
#[derive(serde::Serialize)]
struct Wire<'a> {
    #[serde(flatten)]
    head: serde_json::Map<String, Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<Messages<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<Tools<'a>>,
}

/// The conversation, as Chat Completions messages.
struct Messages<'a>(&'a [ChatMessage]);

impl serde::Serialize for Messages<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().map(Message))
    }
}

/// One message: `{"role", "content"}`, with a tool message's `tool_call_id` and an assistant message's
/// `tool_calls`.
struct Message<'a>(&'a ChatMessage);

impl serde::Serialize for Message<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let m = self.0;
        let mut map = s.serialize_map(None)?;
        let role = match m.role {
            ChatRole::System => "system",
            ChatRole::User => "user",
            ChatRole::Tool => "tool",
            ChatRole::Assistant => "assistant",
        };
        map.serialize_entry("role", role)?;
        if m.role == ChatRole::Tool {
            map.serialize_entry("tool_call_id", &m.tool_call_id)?;
        }
        // "" rather than null for an assistant's: llama.cpp-based servers reject a null content, and OpenAI
        // accepts both.
        map.serialize_entry("content", &m.content)?;
        if m.role == ChatRole::Assistant && !m.tool_calls.is_empty() {
            map.serialize_entry("tool_calls", &Made(&m.tool_calls))?;
        }
        map.end()
    }
}

/// The tools offered, as Chat Completions functions.
struct Tools<'a>(&'a [ToolSpec]);

impl serde::Serialize for Tools<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.0
                .iter()
                .map(|t| Typed(None, Function::Spec(&t.name, &t.description, &t.parameters))),
        )
    }
}

/// An assistant message's tool calls.
struct Made<'a>(&'a [ToolCall]);

impl serde::Serialize for Made<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            (self.0.iter()).map(|c| Typed(Some(&c.id), Function::Call(&c.name, &c.arguments))),
        )
    }
}

/// `{"id"?, "type": "function", "function": …}`: a tool offered or a call made.
struct Typed<'a>(Option<&'a str>, Function<'a>);

impl serde::Serialize for Typed<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        if let Some(id) = self.0 {
            map.serialize_entry("id", id)?;
        }
        map.serialize_entry("type", "function")?;
        map.serialize_entry("function", &self.1)?;
        map.end()
    }
}

/// A function: offered (name, description, parameters) or called (name, arguments).
enum Function<'a> {
    Spec(&'a str, &'a str, &'a Value),
    Call(&'a str, &'a str),
}

impl serde::Serialize for Function<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(None)?;
        match self {
            Function::Spec(name, description, parameters) => {
                map.serialize_entry("name", name)?;
                map.serialize_entry("description", description)?;
                map.serialize_entry("parameters", parameters)?;
            }
            Function::Call(name, arguments) => {
                map.serialize_entry("name", name)?;
                map.serialize_entry("arguments", arguments)?;
            }
        }
        map.end()
    }
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
    let body = body(request, &settings, &ep.url, true);
    let headers = http::headers(own, &settings);
    let resp = match http::send(&ep, &headers, body).await {
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
        let once = self::body(request, &settings, &ep.url, false);
        if let Some(why) = http::probe(&ep, &headers, once).await {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tools: bool) -> ModelRequest {
        serde_json::from_value(json!({
            "request_id": "r", "turn_id": "t",
            "model": {"provider": "openai", "name": "m1"},
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "list \"files\"\n"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "name": "Bash", "arguments": "{\"command\":\"ls\"}"}]},
                {"role": "tool", "content": "a.txt", "tool_call_id": "c1"},
                {"role": "assistant", "content": "one file"},
                {"role": "user", "content": "again"}
            ],
            "tools": if tools { json!([{"name": "Bash", "description": "runs", "parameters": {"type": "object"}}]) } else { json!([]) }
        }))
        .unwrap()
    }

    fn sent(request: &ModelRequest, settings: &ModelSettings, stream: bool) -> Value {
        serde_json::from_slice(&body(request, settings, "http://127.0.0.1:1/v1", stream)).unwrap()
    }

    #[test]
    fn a_body_carries_the_conversation_tools_and_settings_as_chat_completions_reads_them() {
        let settings = ModelSettings {
            max_tokens: Some(64),
            temperature: Some(0.5),
            seed: Some(7),
            tool_choice: Some(ToolChoice::Required),
            parallel_tool_calls: Some(false),
            ..ModelSettings::default()
        };
        let expected = json!({
            "model": "m1", "stream": true, "stream_options": {"include_usage": true},
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "list \"files\"\n"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
                {"role": "assistant", "content": "one file"},
                {"role": "user", "content": "again"}
            ],
            "tools": [{"type": "function", "function": {"name": "Bash", "description": "runs", "parameters": {"type": "object"}}}],
            "tool_choice": "required", "parallel_tool_calls": false,
            "max_tokens": 64, "temperature": 0.5, "seed": 7
        });
        assert_eq!(sent(&request(true), &settings, true), expected);

        // Without tools there is no tool setting; unstreamed, no stream options.
        let plain = sent(&request(false), &settings, false);
        assert_eq!(plain["stream"], json!(false));
        for absent in [
            "stream_options",
            "tools",
            "tool_choice",
            "parallel_tool_calls",
        ] {
            assert!(plain.get(absent).is_none(), "{absent} in {plain}");
        }
        assert_eq!(plain["messages"], expected["messages"]);
    }

    #[test]
    fn extra_body_replaces_what_the_body_would_say_messages_and_tools_included() {
        let extra = json!({"top_k": 3, "stream_options": {"include_usage": false}, "messages": [], "tools": null});
        let settings = ModelSettings {
            extra_body: extra.as_object().cloned(),
            ..ModelSettings::default()
        };
        let sent = sent(&request(true), &settings, true);
        assert_eq!(sent["top_k"], json!(3));
        assert_eq!(sent["stream_options"], json!({"include_usage": false}));
        assert_eq!(sent["messages"], json!([]));
        assert_eq!(sent["tools"], Value::Null);
        // One key each: the document is valid JSON with no key twice.
        let text = String::from_utf8(body(&request(true), &settings, "http://x", true)).unwrap();
        assert_eq!(text.matches("\"messages\"").count(), 1, "{text}");
        assert_eq!(text.matches("\"tools\"").count(), 1, "{text}");
    }
}
