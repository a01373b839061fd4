//! What real model servers do that the official APIs do not, and what they say when they fail: a loopback server
//! that behaves as llama.cpp-based servers do (names repeated in every tool-call delta, null content refused),
//! model settings on the wire, and errors that name the URL and the cause.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::provider_server::{llama_cpp_check, ProviderServer, Reply};
use super::providers::{bundle, local, oa, of_type, openai_text, run_json};
use super::support::Env;

/// A tool call as llama-cpp-python streams it: the id and the full name in every delta, the arguments in pieces.
fn llama_tool_call(command: &str) -> Reply {
    let args = json!({"command": command}).to_string();
    let mut chunks = vec![oa(
        json!({"role": "assistant", "content": null}),
        Value::Null,
    )];
    for piece in args.as_bytes().chunks(7) {
        let piece = String::from_utf8_lossy(piece);
        chunks.push(oa(
            json!({"tool_calls": [{"index": 0, "id": "call_llama", "type": "function",
                                    "function": {"name": "Bash", "arguments": piece}}]}),
            Value::Null,
        ));
    }
    chunks.push(oa(json!({}), json!("tool_calls")));
    Reply::openai(&chunks)
}

#[test]
fn repeated_tool_call_names_and_the_null_content_rule_of_llama_cpp_servers_complete_a_bash_round_trip(
) {
    let env = Env::new();
    let server = ProviderServer::start_checked(
        vec![llama_tool_call("echo from-llama"), openai_text("done here")],
        llama_cpp_check,
    );
    bundle(&env, "llama", "openai", "smol", local(&server));
    let (out, events) = run_json(&env, "./llama", &[], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = of_type(&events, "tool_call_started");
    assert_eq!(
        started[0]["tool"], "Bash",
        "the name is taken once, not appended"
    );
    let finished = of_type(&events, "tool_call_finished");
    assert!(finished[0]["output"]
        .as_str()
        .unwrap()
        .contains("from-llama"));
    assert_eq!(
        of_type(&events, "turn_completed")[0]["final_message"],
        "done here"
    );
    let second = &server.recorded()[1].body;
    let assistant = second["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(
        assistant["content"], "",
        "a tool-call message carries empty content, not null"
    );
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "Bash");
    assert_eq!(
        server.recorded().len(),
        2,
        "no request was refused and retried"
    );
}

#[test]
fn openai_model_settings_reach_the_wire_and_a_forced_tool_choice_only_the_first_call() {
    let env = Env::new();
    let server = ProviderServer::start(vec![llama_tool_call("true"), openai_text("ok")]);
    let mut config = local(&server);
    let settings = json!({
        "max_tokens": 64, "temperature": 0.2, "top_p": 0.9, "stop": ["</s>"], "seed": 7,
        "tool_choice": "Bash", "parallel_tool_calls": false,
        "extra_headers": {"X-Team": "infra"}, "extra_body": {"repeat_penalty": 1.1},
    });
    config
        .as_object_mut()
        .unwrap()
        .extend(settings.as_object().unwrap().clone());
    bundle(&env, "settings", "openai", "m", config);
    env.run(&["run", "./settings", "--prompt", "go"]).ok();
    let requests = server.recorded();
    let first = &requests[0].body;
    for (key, value) in [
        ("max_tokens", json!(64)),
        ("temperature", json!(0.2)),
        ("top_p", json!(0.9)),
        ("stop", json!(["</s>"])),
        ("seed", json!(7)),
        ("parallel_tool_calls", json!(false)),
        ("repeat_penalty", json!(1.1)),
        (
            "tool_choice",
            json!({"type": "function", "function": {"name": "Bash"}}),
        ),
    ] {
        assert_eq!(first[key], value, "{key}");
    }
    assert_eq!(requests[0].header("x-team"), Some("infra"));
    let agent = requests[0].header("user-agent").unwrap_or_default();
    assert!(agent.starts_with("service-rs/"), "{agent}");
    let second = &requests[1].body;
    assert_eq!(
        second["tool_choice"],
        Value::Null,
        "the follow-up call may answer"
    );
    assert_eq!(second["max_tokens"], json!(64));
}

#[test]
fn anthropic_model_settings_use_its_own_names() {
    let env = Env::new();
    let server = ProviderServer::start(vec![Reply::anthropic(&[
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 3, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "fine"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_stop"}),
    ])]);
    let mut config = local(&server);
    let settings = json!({"max_tokens": 100, "top_k": 5, "stop": "END", "tool_choice": "required"});
    config
        .as_object_mut()
        .unwrap()
        .extend(settings.as_object().unwrap().clone());
    bundle(&env, "claude", "anthropic", "c", config);
    assert_eq!(
        env.run(&["run", "./claude", "--prompt", "go"]).ok().trim(),
        "fine"
    );
    let body = &server.recorded()[0].body;
    assert_eq!(body["max_tokens"], 100);
    assert_eq!(body["top_k"], 5);
    assert_eq!(body["stop_sequences"], json!(["END"]));
    assert_eq!(body["tool_choice"], json!({"type": "any"}));
}

#[test]
fn unknown_or_mistyped_model_settings_fail_the_build_naming_the_key() {
    let env = Env::new();
    bundle(
        &env,
        "typo",
        "openai",
        "m",
        json!({"base_url": "http://127.0.0.1:9/v1", "max_token": 5}),
    );
    let err = env.run(&["build", "./typo"]).failed().to_string();
    assert!(err.contains("model.config.max_token"), "{err}");
    assert!(
        err.contains("max_tokens"),
        "the accepted keys are listed: {err}"
    );
    bundle(
        &env,
        "secret",
        "openai",
        "m",
        json!({"extra_headers": {"Authorization": "Bearer sk-x"}}),
    );
    let err = env.run(&["build", "./secret"]).failed().to_string();
    assert!(err.contains("extra_headers.Authorization"), "{err}");
}

#[test]
fn a_refused_connection_names_the_url_is_retried_twice_and_the_retries_are_journaled() {
    let env = Env::new();
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}/v1", closed.local_addr().unwrap());
    drop(closed);
    bundle(
        &env,
        "down",
        "openai",
        "m",
        json!({"base_url": base, "retry_base_ms": 20, "max_retries": 4}),
    );
    let started = Instant::now();
    let (out, events) = run_json(&env, "./down", &[], &[]);
    assert!(!out.status.success());
    assert!(started.elapsed() < Duration::from_secs(5));
    let retries = of_type(&events, "model_retry");
    assert_eq!(
        retries.len(),
        2,
        "a refused connection is retried at most twice"
    );
    // The call went out before the session was made; its retries are journaled within the turn all the same.
    let kinds: Vec<&str> = events
        .iter()
        .filter_map(|e| e["payload"]["type"].as_str())
        .filter(|k| *k != "checkpoint_created")
        .collect();
    assert_eq!(
        kinds,
        ["turn_started", "model_retry", "model_retry", "error"],
        "{events:?}"
    );
    assert_eq!(retries[0]["max_attempts"], 3);
    assert!(retries[0]["reason"].as_str().unwrap().contains(&base));
    let error = &of_type(&events, "error")[0];
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("connection refused") && message.contains(&base),
        "{message}"
    );
    assert_eq!(error["code"], "provider_unavailable");
}

#[test]
fn a_404_names_the_url_and_where_v1_belongs() {
    let env = Env::new();
    let server =
        ProviderServer::start(vec![Reply::status(404, r#"{"detail": "Not Found"}"#, None)]);
    bundle(&env, "nov1", "openai", "m", local(&server));
    let err = env
        .run(&["run", "./nov1", "--prompt", "go"])
        .failed()
        .to_string();
    assert!(
        err.contains(&format!(
            "{}/chat/completions answered HTTP 404",
            server.base
        )),
        "{err}"
    );
    assert!(err.contains("usually ends in /v1"), "{err}");
    let server =
        ProviderServer::start(vec![Reply::status(404, r#"{"detail": "Not Found"}"#, None)]);
    let mut config = local(&server);
    config["base_url"] = json!(format!("{}/v1", server.base));
    bundle(&env, "v1", "anthropic", "m", config);
    let err = env
        .run(&["run", "./v1", "--prompt", "go"])
        .failed()
        .to_string();
    assert!(err.contains("must not end in /v1"), "{err}");
}

/// The failing run's `error` event.
fn error_of(env: &Env, name: &str, server: &ProviderServer, provider: &str) -> Value {
    bundle(env, name, provider, "m", local(server));
    let (out, events) = run_json(env, &format!("./{name}"), &[], &[]);
    assert!(!out.status.success());
    of_type(&events, "error")[0].clone()
}

#[test]
fn a_context_overflow_is_context_length_exceeded_whether_streamed_or_not() {
    let env = Env::new();
    let llama_cpp_python = r#"{"error": {"message": "Requested tokens (2100) exceed context window of 2048", "type": "invalid_request_error", "code": "context_length_exceeded"}}"#;
    let plain = ProviderServer::start(vec![Reply::status(400, llama_cpp_python, None)]);
    let e = error_of(&env, "plain", &plain, "openai");
    assert_eq!(e["code"], "context_length_exceeded");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("exceed context window of 2048"),
        "{e}"
    );

    // A stream that closes with no output: the same request without streaming learns why.
    let closed = ProviderServer::start(vec![
        Reply::sse(String::new()),
        Reply::status(400, llama_cpp_python, None),
    ]);
    let e = error_of(&env, "closed", &closed, "openai");
    assert_eq!(e["code"], "context_length_exceeded", "{e}");
    assert_eq!(closed.recorded()[1].body["stream"], false);

    // llama.cpp's own server reports it inside the stream, with the numbers.
    let in_stream = ProviderServer::start(vec![Reply::sse(
        r#"data: {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}"#
            .to_string()
            + "\n\n",
    )]);
    let e = error_of(&env, "instream", &in_stream, "openai");
    assert_eq!(e["code"], "context_length_exceeded");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("5000 prompt tokens, context of 4096"),
        "{e}"
    );

    let anthropic = ProviderServer::start(vec![Reply::status(
        400,
        r#"{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}"#,
        None,
    )]);
    let e = error_of(&env, "claude", &anthropic, "anthropic");
    assert_eq!(e["code"], "context_length_exceeded");
}

#[test]
fn an_answer_with_neither_text_nor_tool_call_is_an_empty_response_error() {
    let env = Env::new();
    let server = ProviderServer::start(vec![Reply::openai(&[
        oa(json!({"role": "assistant", "content": ""}), Value::Null),
        oa(json!({}), json!("stop")),
    ])]);
    let e = error_of(&env, "empty", &server, "openai");
    assert_eq!(e["code"], "empty_response", "{e}");
}

#[test]
fn usage_the_server_did_not_report_is_null_not_zero() {
    let env = Env::new();
    let server = ProviderServer::start(vec![openai_text("no usage chunk")]);
    bundle(&env, "nousage", "openai", "m", local(&server));
    let (out, events) = run_json(&env, "./nousage", &[], &[]);
    assert!(out.status.success());
    let usage = &of_type(&events, "turn_completed")[0]["usage"];
    assert_eq!(
        usage,
        &json!({"input_tokens": null, "output_tokens": null, "model_calls": 1})
    );
}

#[test]
fn a_tls_failure_is_named_and_not_retried() {
    let env = Env::new();
    let server = ProviderServer::start(vec![openai_text("never read")]);
    let mut config = local(&server);
    config["base_url"] = json!(server.base.replace("http://", "https://"));
    bundle(&env, "tls", "openai", "m", config);
    let (out, events) = run_json(&env, "./tls", &[], &[]);
    assert!(!out.status.success());
    assert!(
        of_type(&events, "model_retry").is_empty(),
        "a TLS failure will not heal by itself"
    );
    let message = of_type(&events, "error")[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("TLS failed") && message.contains("https://127.0.0.1"),
        "{message}"
    );
}
