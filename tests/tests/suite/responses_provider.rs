//! The `openai` provider on OpenAI's Responses wire (`model.config.wire_api: responses`), against a local server
//! that answers as the Responses API streams and records every request's shape.

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::provider_server::{ProviderServer, Reply};
use super::providers::{bundle, local, of_type, run_json};
use super::support::Env;

/// One Responses stream event.
fn event(kind: &str, mut body: Value) -> String {
    body["type"] = json!(kind);
    format!("event: {kind}\ndata: {body}\n\n")
}

fn completed(input: u64, output: u64) -> String {
    event(
        "response.completed",
        json!({"response": {"id": "resp_1", "status": "completed",
            "usage": {"input_tokens": input, "output_tokens": output, "total_tokens": input + output,
                "input_tokens_details": {"cached_tokens": input / 4},
                "output_tokens_details": {"reasoning_tokens": output / 2}}}}),
    )
}

/// A response that calls Bash with `command`, its arguments streamed in two pieces.
fn calls_bash(command: &str) -> Reply {
    let args = json!({"command": command}).to_string();
    let (a, b) = args.split_at(args.len() / 2);
    Reply::sse(
        [
            event("response.created", json!({"response": {"id": "resp_1", "status": "in_progress"}})),
            event(
                "response.output_item.done",
                json!({"output_index": 0, "item": {"type": "reasoning", "id": "rs_1",
                    "encrypted_content": "gAAAA-sealed", "summary": [{"type": "summary_text", "text": "Run it."}]}}),
            ),
            event(
                "response.output_item.added",
                json!({"output_index": 1, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_abc", "name": "Bash", "arguments": ""}}),
            ),
            event("response.function_call_arguments.delta", json!({"item_id": "fc_1", "delta": a})),
            event("response.function_call_arguments.delta", json!({"item_id": "fc_1", "delta": b})),
            event("response.function_call_arguments.done", json!({"item_id": "fc_1", "arguments": args})),
            completed(40, 9),
        ]
        .concat(),
    )
}

/// A response with a reasoning summary in two parts, then `text`.
fn answers(text: &str) -> Reply {
    Reply::sse(
        [
            event(
                "response.reasoning_summary_part.added",
                json!({"summary_index": 0}),
            ),
            event(
                "response.reasoning_summary_text.delta",
                json!({"delta": "Look at the output."}),
            ),
            event(
                "response.reasoning_summary_part.added",
                json!({"summary_index": 1}),
            ),
            event(
                "response.reasoning_summary_text.delta",
                json!({"delta": "Then answer."}),
            ),
            event("response.output_text.delta", json!({"delta": &text[..4]})),
            event("response.output_text.delta", json!({"delta": &text[4..]})),
            completed(60, 7),
        ]
        .concat(),
    )
}

#[test]
fn a_turn_with_a_tool_call_runs_on_the_responses_wire_with_paired_items() {
    let env = Env::new();
    let server = ProviderServer::start(vec![calls_bash("echo wired"), answers("It said wired.")]);
    let mut config = local(&server);
    config["wire_api"] = json!("responses");
    config["reasoning"] = json!({"effort": "low", "summary": "auto"});
    config["max_tokens"] = json!(300);
    bundle(&env, "rw", "openai", "gpt-5-codex", config);
    let envs = [
        ("OPENAI_API_KEY", "sk-test-key"),
        ("OPENAI_BASE_URL", &server.base),
    ];
    let (out, events) = run_json(&env, "./rw", &envs, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        of_type(&events, "tool_call_started")[0]["arguments"],
        json!({"command": "echo wired"})
    );
    assert!(of_type(&events, "tool_call_finished")[0]["output"]
        .as_str()
        .unwrap()
        .contains("wired"));
    let reasoning: String = of_type(&events, "reasoning_delta")
        .iter()
        .map(|p| p["delta"].as_str().unwrap())
        .collect();
    assert_eq!(reasoning, "Look at the output.Then answer.");
    assert_eq!(of_type(&events, "reasoning_section_break").len(), 1);
    let done = of_type(&events, "turn_completed")[0];
    assert_eq!(done["final_message"], "It said wired.");
    assert_eq!(done["usage"]["input_tokens"], 100);
    assert_eq!(done["usage"]["output_tokens"], 16);
    // Each call's cached and reasoning tokens, summed over the turn's two calls.
    let (cached, reasoning) = (
        &done["usage"]["cached_tokens"],
        &done["usage"]["reasoning_tokens"],
    );
    assert!(
        cached.as_u64().unwrap() > 0 && reasoning.as_u64().unwrap() > 0,
        "{}",
        done["usage"]
    );

    let reqs = server.recorded();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].path, "/responses");
    assert_eq!(reqs[0].header("authorization"), Some("Bearer sk-test-key"));
    let first = &reqs[0].body;
    assert_eq!(
        (first["stream"].as_bool(), first["store"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(
        first["instructions"]
            .as_str()
            .map(|s| s.starts_with("Be brief.")),
        Some(true)
    );
    assert_eq!(first["tools"][0]["type"], "function");
    assert_eq!(first["tools"][0]["name"], "Bash");
    assert_eq!(
        first["reasoning"],
        json!({"effort": "low", "summary": "auto"})
    );
    assert_eq!(first["max_output_tokens"], 300);
    assert!(first.get("messages").is_none());
    assert_eq!(first["include"], json!(["reasoning.encrypted_content"]));
    let second = reqs[1].body["input"].as_array().unwrap();
    let at = second
        .iter()
        .position(|i| i["type"] == "function_call")
        .unwrap();
    let call = &second[at];
    assert_eq!(
        second[at - 1],
        json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "gAAAA-sealed",
               "summary": [{"type": "summary_text", "text": "Run it."}]}),
        "the encrypted reasoning goes back before the call it led to"
    );
    let output = second
        .iter()
        .find(|i| i["type"] == "function_call_output")
        .unwrap();
    assert_eq!(call["call_id"], "call_abc");
    assert_eq!(
        output["call_id"], "call_abc",
        "the result is paired with its call"
    );
    assert!(output["output"].as_str().unwrap().contains("wired"));
}

#[test]
fn a_failed_response_fails_the_turn_with_its_code_and_message() {
    let env = Env::new();
    let failed = Reply::sse(event(
        "response.failed",
        json!({"response": {"id": "resp_1", "status": "failed",
            "error": {"code": "rate_limit_exceeded", "message": "slow down"}}}),
    ));
    let server = ProviderServer::start(vec![failed]);
    let mut config = local(&server);
    config["wire_api"] = json!("responses");
    bundle(&env, "rf", "openai", "gpt-5-codex", config);
    let envs = [
        ("OPENAI_API_KEY", "sk-test-key"),
        ("OPENAI_BASE_URL", &server.base),
    ];
    let (out, events) = run_json(&env, "./rf", &envs, &[]);
    assert!(!out.status.success());
    let error = of_type(&events, "error")[0];
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("rate_limit_exceeded") && message.contains("slow down"),
        "{message}"
    );
    assert!(
        message.contains("/responses"),
        "the URL tried is named: {message}"
    );
}

#[test]
fn responses_settings_are_refused_on_the_chat_wire() {
    let env = Env::new();
    bundle(
        &env,
        "rc",
        "openai",
        "gpt-test",
        json!({"reasoning": {"effort": "low"}}),
    );
    let failed = env
        .run(&["build", env.path("rc").to_str().unwrap()])
        .failed()
        .to_string();
    assert!(
        failed.contains("model.config.reasoning") && failed.contains("wire_api: responses"),
        "{failed}"
    );
}

/// `llm-mock-api` (a third-party mock server from PyPI, `.ci/llm-mock-api`) on 127.0.0.1, killed when dropped.
struct MockApi {
    child: std::process::Child,
    base: String,
}

impl MockApi {
    /// Starts it with `rules` (its JSON5 rules), or None when `SERVICE_TEST_LLM_MOCK` does not name it.
    fn start(dir: &std::path::Path, rules: &str) -> Option<MockApi> {
        let command = super::support::gated("SERVICE_TEST_LLM_MOCK", ".ci/llm-mock-api")?;
        let rules_file = dir.join("rules.json5");
        std::fs::write(&rules_file, rules).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let child = std::process::Command::new(command)
            .args(["start", "-H", "127.0.0.1", "-p", &port.to_string(), "-r"])
            .arg(&rules_file)
            .arg("--config")
            .arg(dir.join("no-config.json"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "llm-mock-api did not listen within 30 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Some(MockApi {
            child,
            base: format!("http://127.0.0.1:{port}/v1"),
        })
    }
}

impl Drop for MockApi {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_turn_against_llm_mock_apis_responses_endpoint_runs_a_tool_and_answers() {
    let env = Env::new();
    let Some(mock) = MockApi::start(
        env.work.path(),
        r#"[{ when: "weather", replies: [
            { reply: { tools: [{ name: "Bash", args: { command: "echo sunny-$((6*7))" } }] } },
            { reply: { text: "The sky says so." } },
        ] }]"#,
    ) else {
        return;
    };
    bundle(
        &env,
        "mocked",
        "openai",
        "codex-mini",
        json!({"base_url": mock.base, "wire_api": "responses", "max_retries": 0, "timeout_ms": 10000}),
    );
    let mut cmd = env.command(&[
        "run",
        "./mocked",
        "--json",
        "--prompt",
        "what weather is it?",
    ]);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let output: String = of_type(&events, "exec_command_output_delta")
        .iter()
        .map(|e| e["chunk"].as_str().unwrap_or_default())
        .collect();
    assert!(
        output.contains("sunny-42"),
        "the tool ran in the sandbox: {output:?}"
    );
    let done = of_type(&events, "turn_completed");
    assert_eq!(done[0]["final_message"], "The sky says so.");
    assert!(done[0]["usage"]["input_tokens"].as_u64().unwrap() > 0);
}

/// A stream that ends response `id` after `items` (already framed events).
fn response(id: &str, items: &[String]) -> Reply {
    let mut events = vec![event(
        "response.created",
        json!({"response": {"id": id, "status": "in_progress"}}),
    )];
    events.extend_from_slice(items);
    events.push(event(
        "response.completed",
        json!({"response": {"id": id, "status": "completed",
            "usage": {"input_tokens": 10, "output_tokens": 2, "total_tokens": 12}}}),
    ));
    Reply::sse(events.concat())
}

#[test]
fn with_store_each_call_chains_on_the_last_response_even_from_a_new_worker() {
    let env = Env::new();
    let args = json!({"command": "echo chained"}).to_string();
    let server = ProviderServer::start(vec![
        response(
            "resp_a",
            &[event(
                "response.output_item.added",
                json!({"output_index": 0, "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                    "name": "Bash", "arguments": args}}),
            )],
        ),
        response(
            "resp_b",
            &[event(
                "response.output_text.delta",
                json!({"delta": "ran it"}),
            )],
        ),
        response(
            "resp_c",
            &[event(
                "response.output_text.delta",
                json!({"delta": "again"}),
            )],
        ),
    ]);
    let mut config = local(&server);
    config["wire_api"] = json!("responses");
    config["store"] = json!(true);
    bundle(&env, "stored", "openai", "gpt-5-codex", config);
    let envs = [("OPENAI_API_KEY", "sk-test-key")];
    let (out, events) = run_json(&env, "./stored", &envs, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let session = events[0]["session_id"].as_str().unwrap().to_string();
    // A second `run`: a new supervisor and worker, which find the last response id in the stored history.
    let out = env
        .command(&["run", "--session", &session, "--prompt", "once more"])
        .env("OPENAI_API_KEY", "sk-test-key")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let reqs = server.recorded();
    assert_eq!(reqs.len(), 3);
    let first = &reqs[0].body;
    assert_eq!(first["store"], true);
    assert!(first.get("previous_response_id").is_none());
    assert!(
        first.get("include").is_none(),
        "a stored response keeps its reasoning"
    );
    let second = &reqs[1].body;
    assert_eq!(second["previous_response_id"], "resp_a");
    let kinds: Vec<&str> = second["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap_or("message"))
        .collect();
    assert_eq!(
        kinds,
        ["function_call_output"],
        "only what came after resp_a"
    );
    let third = &reqs[2].body;
    assert_eq!(third["previous_response_id"], "resp_b");
    assert_eq!(third["input"].as_array().unwrap().len(), 1, "{third}");
    assert_eq!(third["input"][0]["role"], "user");
    assert!(third["instructions"]
        .as_str()
        .unwrap()
        .starts_with("Be brief."));
}
