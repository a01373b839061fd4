//! An OpenAI-compatible chat-completions server on 127.0.0.1 for the benches, and the direct request that is the
//! baseline of a turn against it.
//!
//! It answers every `POST …/chat/completions` with a short streamed text answer (`ok`), chunked as llama.cpp and
//! vLLM send it: a role chunk, a content chunk, a finish chunk with usage, `[DONE]`. Under `/bash/v1` and
//! `/glob/v1` it is a model that makes one tool call in a conversation, in answer to its first prompt, and again in
//! answer to the prompt [`AGAIN`]. It runs on a thread and a runtime of its own, like a server in another process,
//! and takes no time of its own beyond HTTP.
// Each bench that includes this module uses part of it.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::response::Response;
use futures::StreamExt;

/// The server's address, e.g. `http://127.0.0.1:41234/v1`.
pub struct Server {
    /// The base URL to put in a bundle's `base_url`.
    pub base: String,
    /// The same server as a model that takes [`THINKING`] before its first byte, as a real model's prompt
    /// processing does.
    pub thinking: String,
    /// The same server as a model that answers a conversation's first prompt, and the prompt [`AGAIN`], with a
    /// Bash call of `true`, then `ok`; every other prompt with `ok`.
    pub bash: String,
    /// The same with a Glob call: a tool that starts no shell.
    pub glob: String,
    /// The `bash` model taking [`SLOW`] before each answer, as a hosted model's first byte does.
    pub slow_bash: String,
    /// The text model taking [`SLOW`] before each answer.
    pub slow: String,
}

/// How long the `slow` models wait before each answer.
pub const SLOW: Duration = Duration::from_millis(300);

/// How long the `thinking` model waits before it answers.
pub const THINKING: Duration = Duration::from_millis(30);

/// One SSE event of a streamed answer; the finishing one carries usage.
fn chunk(delta: serde_json::Value, finish: serde_json::Value) -> String {
    let mut c = serde_json::json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": "bench",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    if !finish.is_null() {
        c["usage"] =
            serde_json::json!({"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13});
    }
    format!("data: {c}\n\n")
}

/// The answer's SSE events, each sent as one HTTP chunk.
fn answer() -> Vec<String> {
    vec![
        chunk(
            serde_json::json!({"role": "assistant", "content": ""}),
            serde_json::Value::Null,
        ),
        chunk(
            serde_json::json!({"content": "ok"}),
            serde_json::Value::Null,
        ),
        chunk(serde_json::json!({}), serde_json::json!("stop")),
        "data: [DONE]\n\n".to_string(),
    ]
}

/// A prompt that the tool-calling models answer with their tool call again, though the conversation made it.
pub const AGAIN: &str = "again";

/// A call of `tool` with `arguments` (JSON text), streamed.
fn call(tool: &str, arguments: &str) -> Vec<String> {
    vec![
        chunk(
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                "id": "call_bench", "type": "function", "function": {"name": tool, "arguments": arguments}}]}),
            serde_json::Value::Null,
        ),
        chunk(serde_json::json!({}), serde_json::json!("tool_calls")),
        "data: [DONE]\n\n".to_string(),
    ]
}

async fn completions(body: axum::body::Bytes) -> Response {
    respond(&body, None)
}

/// Answers `ok`, or with `tool` (its name and arguments) to a conversation that has no tool result yet.
fn respond(body: &[u8], tool: Option<(&str, &str)>) -> Response {
    // Read like a server would, so a request body that is not JSON is a visible failure of the bench.
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Response::builder()
            .status(400)
            .body(Body::from("not JSON"))
            .unwrap_or_default();
    };
    // Once per conversation, and again for a prompt of [`AGAIN`]: a session's other turns are answered with text.
    let messages = request["messages"].as_array();
    let called = messages.is_some_and(|m| m.iter().any(|m| m["role"] == "tool"));
    let again = messages
        .and_then(|m| m.last())
        .is_some_and(|m| m["role"] == "user" && m["content"] == AGAIN);
    let answer = match tool {
        Some((name, arguments)) if !called || again => call(name, arguments),
        _ => answer(),
    };
    let events = futures::stream::iter(
        answer
            .into_iter()
            .map(|e| Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(e))),
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(events))
        .unwrap_or_default()
}

/// The `bash` model over the Responses API (for clients that speak only that, as Odyssey does): a Bash call of
/// `true` to a conversation that has no call's output yet, else `ok`, as streamed events.
fn respond_responses(body: &[u8]) -> Response {
    let Ok(request) = serde_json::from_slice::<serde_json::Value>(body) else {
        return Response::builder()
            .status(400)
            .body(Body::from("not JSON"))
            .unwrap_or_default();
    };
    let input = request["input"].as_array();
    let called = input.is_some_and(|i| i.iter().any(|i| i["type"] == "function_call_output"));
    let usage = serde_json::json!({"input_tokens": 12, "output_tokens": 1, "total_tokens": 13});
    let events = if called {
        vec![
            serde_json::json!({"type": "response.output_text.delta", "output_index": 0, "delta": "ok"}),
            serde_json::json!({"type": "response.completed", "response": {"usage": usage}}),
        ]
    } else {
        let item = serde_json::json!({"type": "function_call", "id": "fc_1", "call_id": "call_1",
            "name": "Bash", "arguments": r#"{"command":"true"}"#});
        let mut added = item.clone();
        added["arguments"] = "".into();
        vec![
            serde_json::json!({"type": "response.output_item.added", "output_index": 0, "item": added}),
            serde_json::json!({"type": "response.function_call_arguments.delta", "output_index": 0,
                "item_id": "fc_1", "delta": item["arguments"]}),
            serde_json::json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            serde_json::json!({"type": "response.completed", "response": {"usage": usage, "output": [item]}}),
        ]
    };
    let events = futures::stream::iter(events.into_iter().map(|e| {
        let text = format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or(""));
        Ok::<_, std::convert::Infallible>(axum::body::Bytes::from(text))
    }));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(events))
        .unwrap_or_default()
}

/// Starts the server; it lives as long as the bench process.
pub fn start() -> std::io::Result<Server> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("openai-server".into())
        .spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let app = axum::Router::new()
                    .route("/v1/chat/completions", axum::routing::post(completions))
                    .route(
                        "/thinking/v1/chat/completions",
                        axum::routing::post(|body: axum::body::Bytes| async move {
                            tokio::time::sleep(THINKING).await;
                            completions(body).await
                        }),
                    )
                    .route(
                        "/bash/v1/chat/completions",
                        axum::routing::post(|body: axum::body::Bytes| async move {
                            respond(&body, Some(("Bash", r#"{"command":"true"}"#)))
                        }),
                    )
                    .route(
                        "/slow/v1/chat/completions",
                        axum::routing::post(|body: axum::body::Bytes| async move {
                            tokio::time::sleep(SLOW).await;
                            completions(body).await
                        }),
                    )
                    .route(
                        "/slow-bash/v1/chat/completions",
                        axum::routing::post(|body: axum::body::Bytes| async move {
                            tokio::time::sleep(SLOW).await;
                            respond(&body, Some(("Bash", r#"{"command":"true"}"#)))
                        }),
                    )
                    .route(
                        "/bash/v1/responses",
                        axum::routing::post(|body: axum::body::Bytes| async move {
                            respond_responses(&body)
                        }),
                    )
                    .route(
                        "/glob/v1/chat/completions",
                        axum::routing::post(|body: axum::body::Bytes| async move {
                            respond(&body, Some(("Glob", r#"{"pattern":"*"}"#)))
                        }),
                    );
                let _ = axum::serve(listener, app).await;
            });
        })?;
    Ok(Server {
        base: format!("http://{addr}/v1"),
        thinking: format!("http://{addr}/thinking/v1"),
        bash: format!("http://{addr}/bash/v1"),
        glob: format!("http://{addr}/glob/v1"),
        slow_bash: format!("http://{addr}/slow-bash/v1"),
        slow: format!("http://{addr}/slow/v1"),
    })
}

/// The request body a provider sends for a one-line prompt.
fn request_body() -> serde_json::Value {
    serde_json::json!({"model": "bench", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]})
}

/// One direct streaming request with `client`, read to its end; returns its time.
pub async fn direct(
    client: &reqwest::Client,
    server: &Server,
) -> Result<Duration, Box<dyn std::error::Error>> {
    direct_to(client, &server.base).await
}

/// One direct streaming request to the server at `base`, read to its end; returns its time.
pub async fn direct_to(
    client: &reqwest::Client,
    base: &str,
) -> Result<Duration, Box<dyn std::error::Error>> {
    let t = Instant::now();
    let resp = client
        .post(format!("{base}/chat/completions"))
        .json(&request_body())
        .send()
        .await?
        .error_for_status()?;
    let mut body = resp.bytes_stream();
    let mut seen = 0;
    while let Some(piece) = body.next().await {
        seen += piece?.len();
    }
    if seen == 0 {
        return Err("the loopback server sent an empty answer".into());
    }
    Ok(t.elapsed())
}

/// A bundle whose agent talks to `server`, in sandbox `mode`.
pub fn write_bundle(dir: &std::path::Path, server: &Server, mode: &str) -> std::io::Result<()> {
    write_bundle_at(dir, &server.base, mode)
}

/// A bundle whose agent talks to the model server at `base`, in sandbox `mode`.
pub fn write_bundle_at(dir: &std::path::Path, base: &str, mode: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("service.bundle.json5"),
        format!(
            r#"{{ manifest_version: "service.bundle/v1", id: "bench-openai", version: "1.0.0", tools: ["Bash", "Glob"],
                 sandbox: {{ mode: "{mode}" }} }}"#
        ),
    )?;
    let agent = serde_json::json!({"model": {"provider": "openai", "name": "bench",
        "config": {"base_url": base}}, "system_prompt": "Be brief."});
    std::fs::write(dir.join("agent.yaml"), agent.to_string())
}
