//! The openai and anthropic providers against a local server speaking their wire formats.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::provider_server::{ProviderServer, Reply};
use super::support::{events_of_turn, runtime, Env};

/// Writes a bundle using `provider` at `base_url` into `work/<name>`.
pub(super) fn bundle(env: &Env, name: &str, provider: &str, model: &str, config: Value) {
    let dir = env.path(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("service.bundle.json5"),
        format!(r#"{{ manifest_version: "service.bundle/v1", id: "{name}", version: "1.0.0", tools: ["Bash"], sandbox: {{ mode: "workspace_write" }} }}"#),
    )
    .unwrap();
    let agent = json!({"model": {"provider": provider, "name": model, "config": config}, "system_prompt": "Be brief."});
    std::fs::write(
        dir.join("agent.yaml"),
        serde_json::to_string(&agent).unwrap(),
    )
    .unwrap();
}

/// `service-rs ARGS` in `env` with only an OpenAI key, for the server at `base` (as `OPENAI_BASE_URL`).
pub(super) fn with_openai_key(env: &Env, base: &str, args: &[&str]) -> std::process::Command {
    let mut cmd = env.command(args);
    cmd.env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", base);
    cmd
}

pub(super) fn local(server: &ProviderServer) -> Value {
    json!({"base_url": server.base, "retry_base_ms": 5, "max_retries": 2, "timeout_ms": 10000})
}

pub(super) fn oa(delta: Value, finish: Value) -> Value {
    json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "gpt-test",
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
}

pub(super) fn openai_text(text: &str) -> Reply {
    let mut chunks = vec![oa(json!({"role": "assistant", "content": ""}), Value::Null)];
    for piece in text.split_inclusive(' ') {
        chunks.push(oa(json!({"content": piece}), Value::Null));
    }
    chunks.push(oa(json!({}), json!("stop")));
    Reply::openai(&chunks)
}

pub(super) fn openai_tool_call(command: &str) -> Reply {
    let args = json!({"command": command}).to_string();
    let (a, b) = args.split_at(args.len() / 2);
    Reply::openai(&[
        oa(
            json!({"role": "assistant", "reasoning_content": "Let me look "}),
            Value::Null,
        ),
        oa(json!({"reasoning_content": "at it."}), Value::Null),
        oa(
            json!({"tool_calls": [{"index": 0, "id": "call_abc", "type": "function", "function": {"name": "Bash", "arguments": ""}}]}),
            Value::Null,
        ),
        oa(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": a}}]}),
            Value::Null,
        ),
        oa(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": b}}]}),
            Value::Null,
        ),
        oa(json!({}), json!("tool_calls")),
        json!({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 12, "total_tokens": 62}}),
    ])
}

pub(super) fn run_json(
    env: &Env,
    name: &str,
    envs: &[(&str, &str)],
    extra: &[&str],
) -> (std::process::Output, Vec<Value>) {
    let mut args = vec!["run", name, "--prompt", "go", "--json"];
    args.extend_from_slice(extra);
    let mut cmd = env.command(&args);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (out, events)
}

pub(super) fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|e| e["payload"]["type"] == kind)
        .map(|e| &e["payload"]["payload"])
        .collect()
}

#[test]
fn openai_stream_with_reasoning_and_a_bash_round_trip() {
    let env = Env::new();
    let server = ProviderServer::start(vec![
        openai_tool_call("echo ü-ok").split_every(7),
        openai_text("The command said ü-ok.").split_every(5),
    ]);
    bundle(&env, "oa", "openai", "gpt-test", local(&server));
    // The operator points the provider at the server; only then does the key go there.
    let envs = [
        ("OPENAI_API_KEY", "sk-test-key"),
        ("OPENAI_BASE_URL", &server.base),
    ];
    let (out, events) = run_json(&env, "./oa", &envs, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let reasoning: String = of_type(&events, "reasoning_delta")
        .iter()
        .map(|p| p["delta"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, "Let me look at it.");
    assert_eq!(
        of_type(&events, "tool_call_started")[0]["arguments"],
        json!({"command": "echo ü-ok"})
    );
    let done = of_type(&events, "turn_completed")[0];
    assert_eq!(done["final_message"], "The command said ü-ok.");
    assert_eq!(done["usage"]["input_tokens"], 50);

    let reqs = server.recorded();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/chat/completions");
    assert_eq!(reqs[0].header("authorization"), Some("Bearer sk-test-key"));
    assert_eq!(reqs[0].body["model"], "gpt-test");
    assert_eq!(reqs[0].body["stream"], true);
    assert_eq!(reqs[0].body["tools"][0]["function"]["name"], "Bash");
    assert_eq!(
        reqs[0].body["messages"][0],
        json!({"role": "system", "content": "Be brief."})
    );
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs[2]["tool_calls"][0]["id"], "call_abc");
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], "call_abc");
    assert!(
        msgs[3]["content"].as_str().unwrap().contains("ü-ok"),
        "{}",
        msgs[3]
    );
}

fn an(v: Value) -> Value {
    v
}

fn anthropic_tool_turn() -> Reply {
    Reply::anthropic(&[
        an(
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "claude-test", "stop_reason": null, "usage": {"input_tokens": 40, "output_tokens": 1}}}),
        ),
        an(
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        an(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "First thought."}}),
        ),
        an(
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "c2ln"}}),
        ),
        an(json!({"type": "content_block_stop", "index": 0})),
        an(
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "thinking", "thinking": ""}}),
        ),
        an(
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "thinking_delta", "thinking": "Second thought."}}),
        ),
        an(json!({"type": "content_block_stop", "index": 1})),
        an(json!({"type": "ping"})),
        an(
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "text", "text": ""}}),
        ),
        an(
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "text_delta", "text": "Checking."}}),
        ),
        an(json!({"type": "content_block_stop", "index": 2})),
        an(
            json!({"type": "content_block_start", "index": 3, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}}),
        ),
        an(
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": ""}}),
        ),
        an(
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "{\"command\": \"echo "}}),
        ),
        an(
            json!({"type": "content_block_delta", "index": 3, "delta": {"type": "input_json_delta", "partial_json": "anthropic-ok\"}"}}),
        ),
        an(json!({"type": "content_block_stop", "index": 3})),
        an(
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 30}}),
        ),
        an(json!({"type": "message_stop"})),
    ])
}

fn anthropic_text(text: &str) -> Reply {
    Reply::anthropic(&[
        json!({"type": "message_start", "message": {"id": "msg_2", "type": "message", "role": "assistant", "content": [], "model": "claude-test", "usage": {"input_tokens": 60, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ])
}

#[test]
fn anthropic_stream_with_thinking_sections_and_a_bash_round_trip() {
    let env = Env::new();
    let server = ProviderServer::start(vec![
        anthropic_tool_turn().split_every(11),
        anthropic_text("Done: anthropic-ok"),
    ]);
    bundle(&env, "an", "anthropic", "claude-test", local(&server));
    let envs = [
        ("ANTHROPIC_API_KEY", "sk-ant-test"),
        ("ANTHROPIC_BASE_URL", &server.base),
    ];
    let (out, events) = run_json(&env, "./an", &envs, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["payload"]["type"].as_str().unwrap())
        .collect();
    let first_break = kinds
        .iter()
        .position(|k| *k == "reasoning_section_break")
        .unwrap();
    assert_eq!(
        &kinds[first_break - 1..=first_break + 1],
        [
            "reasoning_delta",
            "reasoning_section_break",
            "reasoning_delta"
        ]
    );
    assert_eq!(of_type(&events, "reasoning_section_break").len(), 1);
    assert_eq!(
        of_type(&events, "tool_call_started")[0]["arguments"],
        json!({"command": "echo anthropic-ok"})
    );
    assert_eq!(
        of_type(&events, "turn_completed")[0]["final_message"],
        "Done: anthropic-ok"
    );
    assert_eq!(
        of_type(&events, "turn_completed")[0]["usage"],
        json!({"input_tokens": 100, "output_tokens": 35, "model_calls": 2, "context_tokens": 60})
    );

    let reqs = server.recorded();
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[0].header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(reqs[0].header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(reqs[0].body["system"], "Be brief.");
    assert_eq!(reqs[0].body["tools"][0]["name"], "Bash");
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(
        msgs[1]["content"][1],
        json!({"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "echo anthropic-ok"}})
    );
    assert_eq!(msgs[2]["role"], "user");
    assert_eq!(msgs[2]["content"][0]["type"], "tool_result");
    assert_eq!(msgs[2]["content"][0]["tool_use_id"], "toolu_1");
    assert!(msgs[2]["content"][0]["content"]
        .as_str()
        .unwrap()
        .contains("anthropic-ok"));
}

#[test]
fn a_run_whose_turn_cannot_start_makes_no_model_call_and_leaves_no_session() {
    // A one-shot's first call goes out while its session is made; a run that cannot get that far must not make it.
    let env = Env::new();
    let server = ProviderServer::start(vec![openai_text("never asked")]);
    bundle(&env, "idle", "openai", "gpt-test", local(&server));
    let missing = env.path("no-such-dir");
    // Several times: a call made for nothing would be abandoned at once, and could lose the race to the wire.
    for _ in 0..5 {
        let err = env
            .run(&[
                "run",
                "./idle",
                "--prompt",
                "go",
                "--cwd",
                missing.to_str().unwrap(),
            ])
            .failed()
            .to_string();
        assert!(err.contains("is not a directory"), "{err}");
    }
    let err = env
        .run(&["run", "./idle", "--prompt", "go", "--model", "acme/x"])
        .failed()
        .to_string();
    assert!(err.contains("unknown model provider \"acme\""), "{err}");
    assert_eq!(server.recorded().len(), 0);
    let sessions: Vec<String> = env
        .store_files()
        .into_iter()
        .filter(|f| f.starts_with("sessions/"))
        .collect();
    assert_eq!(sessions, Vec::<String>::new());
}

#[test]
fn a_429_is_retried_and_a_500_storm_fails_the_turn_after_bounded_retries() {
    let env = Env::new();
    let server = ProviderServer::start(vec![
        Reply::status(429, r#"{"error": {"message": "slow down"}}"#, Some("0")),
        openai_text("after retry"),
    ]);
    bundle(&env, "retry", "openai", "gpt-test", local(&server));
    let (out, events) = run_json(&env, "./retry", &[], &[]);
    assert!(out.status.success());
    assert_eq!(server.recorded().len(), 2);
    let retry = &of_type(&events, "model_retry")[0];
    assert_eq!(
        (&retry["attempt"], &retry["max_attempts"]),
        (&json!(1), &json!(3))
    );
    assert!(
        retry["reason"].as_str().unwrap().contains("HTTP 429"),
        "{retry}"
    );

    let storm = ProviderServer::start(vec![
        Reply::status(
            500,
            r#"{"error": {"message": "boom"}}"#,
            None
        );
        5
    ]);
    bundle(&env, "storm", "openai", "gpt-test", local(&storm));
    let started = Instant::now();
    let err = env
        .run(&["run", "./storm", "--prompt", "go"])
        .failed()
        .to_string();
    assert!(
        err.contains(&format!(
            "(provider_unavailable): the openai request failed 3 times; last: HTTP 500 from {}/chat/completions: boom",
            storm.base
        )),
        "{err}"
    );
    assert_eq!(storm.recorded().len(), 3, "max_retries 2 means 3 attempts");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn broken_streams_fail_the_turn_with_a_clear_message() {
    let env = Env::new();
    let cases: Vec<(&str, Reply, &str, &str)> = vec![
        (
            "cut",
            openai_text("this answer is cut in the middle of a sentence").cut_after(180),
            "openai",
            "stream",
        ),
        (
            "garbage",
            Reply::sse("data: {not json}\n\n".into()),
            "openai",
            "malformed JSON",
        ),
        (
            "early",
            Reply::sse(format!(
                "data: {}\n\n",
                oa(json!({"content": "half"}), Value::Null)
            )),
            "openai",
            "ended before the response was complete",
        ),
        (
            "over",
            Reply::anthropic(&[
                json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
            ]),
            "anthropic",
            "reported overloaded_error: Overloaded",
        ),
        (
            "nostop",
            anthropic_text("x").cut_after(120),
            "anthropic",
            "stream",
        ),
        (
            "refused",
            Reply::status(
                401,
                r#"{"error": {"type": "authentication_error", "message": "invalid x-api-key"}}"#,
                None,
            ),
            "anthropic",
            "refused the key (HTTP 401): invalid x-api-key",
        ),
    ];
    for (name, reply, provider, expected) in cases {
        let server = ProviderServer::start(vec![reply]);
        bundle(&env, name, provider, "m", local(&server));
        let out = env
            .command(&["run", &format!("./{name}"), "--prompt", "go"])
            .env("OPENAI_BASE_URL", &server.base)
            .env("ANTHROPIC_BASE_URL", &server.base)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(expected),
            "{name}: {err}"
        );
    }
}

#[test]
fn run_model_override_reaches_the_provider_and_the_turn_context() {
    let env = Env::new();
    let server = ProviderServer::start(vec![openai_text("from the other model")]);
    bundle(&env, "pick", "openai", "gpt-default", local(&server));
    let (out, events) = run_json(&env, "./pick", &[], &["--model", "openai/gpt-other"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.recorded()[0].body["model"], "gpt-other");
    let ctx = &of_type(&events, "turn_started")[0]["context"]["model"];
    assert_eq!(
        (ctx["provider"].as_str(), ctx["name"].as_str()),
        (Some("openai"), Some("gpt-other"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_delta_reaches_a_subscriber_before_the_provider_has_finished() {
    let env = Env::new();
    let reply = openai_text("Hello streaming world, this arrives in parts")
        .pause_after("Hello", Duration::from_millis(1500));
    let server = ProviderServer::start(vec![reply]);
    bundle(&env, "live", "openai", "gpt-test", local(&server));
    let rt = runtime(env.home.path());
    let id = rt
        .create_session(env.path("live").to_str().unwrap(), None)
        .await
        .unwrap()
        .id;
    rt.start_worker(&id).await.unwrap();
    let mut events = rt.subscribe_session(&id).await.unwrap();
    let started = Instant::now();
    let pending = rt
        .start_turn(&id, service_ipc::Task::new("go"), Default::default())
        .await
        .unwrap();
    let mut first_delta = None;
    use futures::StreamExt;
    while first_delta.is_none() {
        let msg = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap();
        if msg.payload.kind() == "agent_message_delta" {
            first_delta = Some(started.elapsed());
        }
    }
    let rest = events_of_turn(&mut events, &pending.turn_id).await;
    let finished = started.elapsed();
    assert_eq!(rest.last().unwrap().payload.kind(), "turn_completed");
    let first = first_delta.unwrap();
    assert!(
        first < Duration::from_millis(1000),
        "first delta after {first:?}"
    );
    assert!(
        finished >= Duration::from_millis(1500),
        "turn ended after {finished:?}, before the provider finished"
    );
    rt.shutdown("test over").await;
}
