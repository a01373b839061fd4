//! `run` as scripts use it (`codex exec`, `claude -p`): `service-rs -p`, the answer written to a file, a time-out
//! that stops what the turn started, approvals decided up front and journaled, and each documented exit code
//! produced by a real case.

use std::time::{Duration, Instant};

use super::support::{give_to_sandbox, Env};

const SCRIPT: &str = r#"{turns: [
  {when: "slow", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 60"}}]}, {text: "never"}]},
  {when: "ask", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo ran"}}]}, {text: "said: {{last_tool_output}}"}]},
  {when: "spend", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "echo first call"}}]},
    {text: "second call made"}]},
  {when: "loop", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "true"}}]},
    {tool_calls: [{name: "Bash", arguments: {command: "true"}}]},
    {tool_calls: [{name: "Bash", arguments: {command: "true"}}]},
    {text: "never"}]},
  {replies: [{text: "you said {{prompt}}"}]},
]}"#;

fn setup() -> Env {
    let env = Env::with_bundle(
        SCRIPT,
        "max_steps: 2\npermissions: { default: ask }",
        "read_only",
    );
    env.run(&["config", "set", "default_bundle", "fixture"])
        .ok();
    give_to_sandbox(env.work.path());
    env
}

/// `service-rs ARGS` in `env`, to its end.
fn run(env: &Env, args: &[&str]) -> std::process::Output {
    env.command(args).output().unwrap()
}

fn journal(env: &Env) -> String {
    let id = env.run(&["sessions", "--json"]).json()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    std::fs::read_to_string(env.home.path().join(format!("sessions/{id}/events.jsonl"))).unwrap()
}

#[test]
fn print_runs_the_default_bundle_headless_and_writes_the_answer_to_a_file() {
    let env = setup();
    let file = env.path("answer.txt");
    let out = run(&env, &["-p", "hello there", "-o", file.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "you said hello there\n"
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "you said hello there"
    );
}

#[test]
fn a_timeout_stops_the_turn_and_its_command_and_exits_124() {
    let env = setup();
    let began = Instant::now();
    let out = run(
        &env,
        &[
            "run",
            "fixture",
            "slow",
            "--approvals",
            "allow",
            "--timeout",
            "1s",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(124),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        began.elapsed() < Duration::from_secs(15),
        "{:?}",
        began.elapsed()
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("longer than --timeout 1s"), "{err}");
    let listed = env.run(&["sessions", "--json"]).json();
    assert_eq!(listed[0]["last_turn"]["status"], "interrupted", "{listed}");
    let left = std::process::Command::new("pgrep")
        .args(["-f", "sleep 60"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "the command the turn started is gone"
    );
}

#[test]
fn approvals_decided_up_front_never_wait_and_are_journaled() {
    let env = setup();
    let allowed = run(&env, &["run", "fixture", "ask", "--approvals", "allow"]);
    assert_eq!(allowed.status.code(), Some(0));
    assert_eq!(String::from_utf8_lossy(&allowed.stdout), "said: ran\n");
    assert!(journal(&env).contains("\"decision\":\"allow_once\""));

    let denied = run(&env, &["run", "fixture", "ask", "--approvals", "deny"]);
    assert_eq!(denied.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&denied.stdout).contains("said: ran"));
    assert!(journal(&env).contains("\"decision\":\"deny\""));
}

#[test]
fn reaching_max_steps_exits_3_and_a_failed_turn_exits_1() {
    let env = setup();
    let out = run(&env, &["run", "fixture", "loop", "--approvals", "allow"]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let failed = run(&env, &["run", "fixture", "hi", "--model", "openai/gpt-4o"]);
    assert_eq!(
        failed.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&failed.stderr)
    );
}

#[test]
fn a_turn_past_its_max_tokens_makes_no_further_model_call_and_exits_4() {
    let env = setup();
    let out = run(
        &env,
        &[
            "run",
            "fixture",
            "spend",
            "--approvals",
            "allow",
            "--max-tokens",
            "1",
            "--json",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!stdout.contains("second call made"), "{stdout}");
    assert!(stdout.contains("\"code\":\"budget_exceeded\""), "{stdout}");
    // One model call, the one that spent the budget; its tool still ran.
    let calls: Vec<u64> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["payload"]["type"] == "usage_update")
        .filter_map(|e| e["payload"]["payload"]["usage"]["model_calls"].as_u64())
        .collect();
    assert_eq!(calls.last(), Some(&1), "{stdout}");

    let enough = run(
        &env,
        &[
            "run",
            "fixture",
            "spend",
            "--approvals",
            "allow",
            "--max-tokens",
            "100000",
        ],
    );
    assert_eq!(enough.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&enough.stdout).contains("second call made"));
}

#[test]
fn without_a_terminal_only_the_answer_is_printed_and_a_retry_is_said_on_stderr() {
    use super::provider_server::{ProviderServer, Reply};
    let env = Env::new();
    let server = ProviderServer::start(vec![
        Reply::status(429, r#"{"error": {"message": "slow down"}}"#, Some("0")),
        super::providers::openai_text("the answer"),
    ]);
    let out = env
        .command(&["run", "builtin/coder", "hi", "--model", "openai/gpt-4.1"])
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &server.base)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "the answer\n");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("model call failed (attempt 1 of"), "{err}");
    assert!(!err.contains("tokens "), "no usage line on a pipe: {err}");
}

#[test]
fn a_run_past_its_max_cost_stops_before_the_call_that_would_pass_it_and_exits_4() {
    use super::provider_server::ProviderServer;
    use super::providers::{bundle, local, openai_text, openai_tool_call, run_json};
    let run_with = |max_cost: &str, priced: bool| {
        let env = Env::new();
        // Each tool call's reply reports 50 prompt and 12 completion tokens: 62 tokens, at $1,000 a million.
        let server = ProviderServer::start(vec![
            openai_tool_call("echo one"),
            openai_tool_call("echo two"),
            openai_text("done"),
        ]);
        bundle(&env, "oa", "openai", "gpt-test", local(&server));
        if priced {
            std::fs::write(
                env.home.path().join("config.toml"),
                "[prices.\"openai/gpt-test\"]\ninput = 1000.0\noutput = 1000.0\n",
            )
            .unwrap();
        }
        let envs = [
            ("OPENAI_API_KEY", "sk-test-key"),
            ("OPENAI_BASE_URL", &server.base),
        ];
        let extra = ["--approvals", "allow", "--max-cost", max_cost];
        let (out, events) = run_json(&env, "./oa", &envs, &extra);
        (out, events, server.recorded().len())
    };
    // After the first call ($0.062), the next one's prompt alone ($0.05 or more) would pass $0.10: not made.
    let (out, events, calls) = run_with("0.10", true);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(calls, 1, "the model server was called once");
    let failed = super::providers::of_type(&events, "error");
    let message = failed[0]["message"].as_str().unwrap();
    assert!(message.contains("--max-cost"), "{message}");
    // With room for all three calls, the run completes.
    let (out, _, calls) = run_with("1.00", true);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(calls, 3);
    // A model without a price cannot be held to dollars: the run says so and goes on.
    let (out, _, calls) = run_with("0.10", false);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(calls, 3);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("config.toml has no price for openai/gpt-test"),
        "{err}"
    );
}

#[test]
fn an_answer_is_held_to_its_output_schema_with_one_retry_then_output_invalid() {
    use super::provider_server::ProviderServer;
    use super::providers::{bundle, local, openai_text, with_openai_key};
    const SCHEMA: &str = r#"{"type": "object", "properties": {"files": {"type": "integer", "minimum": 0}},
        "required": ["files"], "additionalProperties": false}"#;
    let run_with = |replies: Vec<&str>| {
        let env = Env::new();
        let server = ProviderServer::start(replies.into_iter().map(openai_text).collect());
        bundle(&env, "oa", "openai", "gpt-test", local(&server));
        let schema = env.path("schema.json");
        std::fs::write(&schema, SCHEMA).unwrap();
        let answer = env.path("answer.json");
        let out = with_openai_key(
            &env,
            &server.base,
            &[
                "run",
                "./oa",
                "count the files",
                "--output-schema",
                schema.to_str().unwrap(),
                "-o",
                answer.to_str().unwrap(),
            ],
        )
        .output()
        .unwrap();
        let prompts: Vec<String> = server
            .recorded()
            .iter()
            .map(|r| r.body["messages"].to_string())
            .collect();
        (out, prompts, std::fs::read_to_string(&answer).ok())
    };
    // A conforming answer (in a code fence, as models write them) is printed as the JSON value alone.
    let (out, prompts, file) = run_with(vec!["```json\n{\"files\": 3}\n```"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        r#"{"files":3}"#
    );
    assert_eq!(file.as_deref(), Some(r#"{"files":3}"#));
    assert_eq!(prompts.len(), 1);
    assert!(
        prompts[0].contains("validates against this JSON Schema"),
        "{}",
        prompts[0]
    );
    assert!(
        prompts[0].contains("additionalProperties"),
        "the model is shown the schema"
    );
    // A wrong answer is sent back once, with what is wrong; the second answer passes.
    let (out, prompts, _) = run_with(vec![r#"{"files": "three"}"#, r#"{"files": 3}"#]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(prompts.len(), 2);
    assert!(
        prompts[1].contains("does not validate") && prompts[1].contains("at /files"),
        "{}",
        prompts[1]
    );
    // Two wrong answers: the run fails with output_invalid, its own exit code, and no answer is written.
    let (out, prompts, file) = run_with(vec![
        "three files",
        r#"{"files": 3, "dirs": 1}"#,
        r#"{"files": 3}"#,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert_eq!(prompts.len(), 2, "one retry, no more");
    assert!(
        err.contains("output_invalid") && err.contains("dirs"),
        "{err}"
    );
    assert!(out.stdout.is_empty() && file.is_none());
}

#[test]
fn a_schema_file_that_is_not_a_schema_is_refused_before_any_session_starts() {
    let env = setup();
    let schema = env.path("schema.json");
    std::fs::write(&schema, r#"{"type": "no such type"}"#).unwrap();
    let out = run(
        &env,
        &["-p", "hi", "--output-schema", schema.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("schema.json is not a valid JSON Schema"),
        "{err}"
    );
    assert_eq!(
        env.run(&["sessions", "--json"]).json(),
        serde_json::json!([])
    );
}

/// Reads JSON lines from `out` until one satisfies `until`; returns them all.
fn lines_until(
    out: &mut impl std::io::BufRead,
    until: impl Fn(&serde_json::Value) -> bool,
) -> Vec<serde_json::Value> {
    let mut seen = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            out.read_line(&mut line).unwrap() > 0,
            "stdout ended; saw {seen:#?}"
        );
        let value: serde_json::Value = serde_json::from_str(&line).unwrap();
        let done = until(&value);
        seen.push(value);
        if done {
            return seen;
        }
    }
}

#[test]
fn stream_json_input_drives_two_turns_and_an_approval_in_one_process() {
    use std::io::{BufReader, Write};
    let env = setup();
    let mut child = env
        .command(&["run", "--input-format", "stream-json"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let kind = |v: &serde_json::Value| v["payload"]["type"].as_str().unwrap_or("").to_string();
    let mut send = |line: &str| writeln!(stdin, "{line}").unwrap();
    // A line that is not input is answered, and the run goes on.
    send("{\"type\":\"user\",\"message\":");
    let seen = lines_until(&mut stdout, |v| v["type"] == "input_error");
    assert_eq!(seen[0]["line"], 1);
    send(
        r#"{"type":"user","message":{"role":"user","content":[{"type":"text","text":"hello one"}]}}"#,
    );
    let seen = lines_until(&mut stdout, |v| kind(v) == "turn_completed");
    let done = &seen.last().unwrap()["payload"]["payload"];
    assert_eq!(done["final_message"], "you said hello one");
    // The second turn asks before its command runs; the approval line answers it.
    send(r#"{"type":"user","message":{"role":"user","content":"ask for it"}}"#);
    let seen = lines_until(&mut stdout, |v| kind(v) == "permission_requested");
    let request_id = seen.last().unwrap()["payload"]["payload"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    send(&format!(
        r#"{{"type":"approval","request_id":"{request_id}","decision":"allow"}}"#
    ));
    let seen = lines_until(&mut stdout, |v| kind(v) == "turn_completed");
    assert_eq!(
        seen.last().unwrap()["payload"]["payload"]["final_message"],
        "said: ran"
    );
    // A third prompt is given and stdin closes at once: the run finishes that turn, then exits 0.
    send(r#"{"type":"user","message":{"content":"bye"}}"#);
    drop(stdin);
    let seen = lines_until(&mut stdout, |v| kind(v) == "turn_completed");
    assert_eq!(
        seen.last().unwrap()["payload"]["payload"]["final_message"],
        "you said bye"
    );
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let sessions = env.run(&["sessions", "--json"]).json();
    assert_eq!(
        sessions.as_array().unwrap().len(),
        1,
        "one session held all three turns"
    );
    assert_eq!(sessions[0]["turn_count"], 3);
    assert!(
        journal(&env).contains("\"allow_once\""),
        "the approval was journaled"
    );
}

#[test]
fn stream_json_interrupt_stops_the_running_turn_and_the_next_prompt_still_runs() {
    use std::io::{BufReader, Write};
    let env = setup();
    let mut child = env
        .command(&[
            "run",
            "--input-format",
            "stream-json",
            "--approvals",
            "allow",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let kind = |v: &serde_json::Value| v["payload"]["type"].as_str().unwrap_or("").to_string();
    writeln!(
        stdin,
        r#"{{"type":"user","message":{{"content":"slow please"}}}}"#
    )
    .unwrap();
    writeln!(
        stdin,
        r#"{{"type":"user","message":{{"content":"after"}}}}"#
    )
    .unwrap();
    lines_until(&mut stdout, |v| kind(v) == "tool_call_started");
    let asked = Instant::now();
    writeln!(stdin, r#"{{"type":"interrupt"}}"#).unwrap();
    let seen = lines_until(&mut stdout, |v| kind(v) == "error");
    assert_eq!(
        seen.last().unwrap()["payload"]["payload"]["code"],
        "interrupted"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(20),
        "the 60 s command was stopped"
    );
    drop(stdin);
    let seen = lines_until(&mut stdout, |v| kind(v) == "turn_completed");
    assert_eq!(
        seen.last().unwrap()["payload"]["payload"]["final_message"],
        "you said after"
    );
    assert_eq!(child.wait().unwrap().code(), Some(0));
}
