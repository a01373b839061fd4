//! Compaction of long sessions: before a turn past the threshold, by hand over HTTP, after a provider's overflow
//! (once, never in a loop), and the off switch; a restarted server rebuilds the compacted context.

use serde_json::{json, Value};

use super::http_client::{task, Api};
use super::provider_server::{ProviderServer, Reply};
use super::providers::{local, openai_text};
use super::support::{Env, Server};

const TOKEN: &str = "compaction-token";

/// Writes and builds bundle `name`: `model` and `memory` as given, in a workspace_write sandbox with no tools.
fn bundle(env: &Env, name: &str, model: Value, memory: Value) {
    let dir = env.path(name);
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(
        dir.join("service.bundle.json5"),
        format!(r#"{{ manifest_version: "service.bundle/v1", id: "{name}", version: "1.0.0", tools: [], sandbox: {{ mode: "workspace_write" }} }}"#),
    )
    .unwrap();
    // The summary entry comes first: the summary request quotes earlier prompts, which other entries might match.
    std::fs::write(
        dir.join("resources/script.json5"),
        r#"{turns: [
          {when: "Summarise the conversation", replies: [{text: "SUMMARY of the earlier turns"}]},
          {replies: [{text: "reply {{message_count}} padded with enough words to fill a small context window soon"}]},
        ]}"#,
    )
    .unwrap();
    let agent = json!({"model": model, "system_prompt": "Be brief.", "memory": memory});
    std::fs::write(
        dir.join("agent.yaml"),
        serde_json::to_string(&agent).unwrap(),
    )
    .unwrap();
    env.run(&["build", dir.to_str().unwrap()]).ok();
}

fn scripted(window: u64) -> Value {
    json!({"provider": "scripted", "name": "s", "config": {"script": "resources/script.json5", "context_window": window}})
}

fn serve(env: &Env) -> Api {
    Api::with_token(
        Server::start(env.home.path(), &["--token", TOKEN], &[]),
        TOKEN,
    )
}

/// The number of messages the scripted model was sent, from its answer.
fn sent(answer: &str) -> u64 {
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not a counted reply: {answer}"))
}

async fn compactions(api: &Api, session: &str) -> Vec<Value> {
    let (_, journal) = api.get(&format!("/sessions/{session}/journal")).await;
    journal
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["payload"]["type"] == "context_compacted")
        .map(|e| e["payload"]["payload"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_past_its_threshold_compacts_before_a_turn_and_a_restart_keeps_the_summary() {
    let env = Env::new();
    bundle(
        &env,
        "long",
        scripted(120),
        json!({"provider": "compact", "threshold": 0.5, "keep_recent_turns": 1}),
    );
    let api = serve(&env);
    let session = api.session("long").await;
    let mut counts = Vec::new();
    for i in 0..6 {
        counts.push(sent(
            &api.answer(
                &session,
                &format!("prompt number {i} with a few more words"),
            )
            .await,
        ));
    }
    let done = compactions(&api, &session).await;
    assert!(!done.is_empty(), "no compaction in {counts:?}");
    assert_eq!(done[0]["reason"], "auto");
    assert!(done[0]["turn_id"].is_string());
    assert_eq!(done[0]["summary"], "SUMMARY of the earlier turns");
    assert!(
        done[0]["after_tokens"].as_u64() < done[0]["before_tokens"].as_u64(),
        "{done:?}"
    );
    // Without compaction the sixth call would see 12 messages: system, five turns, the prompt.
    assert!(counts.iter().all(|c| *c <= 8), "{counts:?}");
    drop(api);

    // A new server reads the compacted history back: the summary, the kept turn, then the new prompt.
    let api = serve(&env);
    let after = sent(&api.answer(&session, "one more prompt").await);
    assert!(after <= 8, "the restart saw the whole history: {after}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_by_hand_over_http_summarises_all_but_the_kept_turns_and_off_refuses_it() {
    let env = Env::new();
    // Threshold 1 turns the automatic compaction off; by hand still works.
    bundle(
        &env,
        "manual",
        scripted(100_000),
        json!({"provider": "compact", "threshold": 1.0, "keep_recent_turns": 1}),
    );
    bundle(
        &env,
        "never",
        scripted(100_000),
        json!({"provider": "compact", "compaction": "off"}),
    );
    let api = serve(&env);
    let session = api.session("manual").await;
    let mut counts = Vec::new();
    for i in 0..4 {
        counts.push(sent(&api.answer(&session, &format!("prompt {i}")).await));
    }
    assert_eq!(counts, [2, 4, 6, 8], "nothing was compacted on its own");
    assert!(compactions(&api, &session).await.is_empty());
    let (status, body) = api
        .post(&format!("/sessions/{session}/compact"), json!([]))
        .await;
    assert_eq!(status, 422, "an array is not the documented body: {body}");
    let blank = api
        .req(
            reqwest::Method::POST,
            &format!("/sessions/{session}/compact"),
        )
        .header("content-type", "application/json")
        .body("\n")
        .send()
        .await
        .unwrap();
    assert_eq!(blank.status().as_u16(), 400, "whitespace is not JSON");
    assert!(compactions(&api, &session).await.is_empty());
    let (status, body) = api
        .post(
            &format!("/sessions/{session}/compact"),
            json!({"focus": "the numbers"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["compacted"], true);
    assert_eq!(body["summarised_turns"], 3);
    // A PostgreSQL store journals the event just after the answer.
    let mut done = compactions(&api, &session).await;
    for _ in 0..100 {
        if !done.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        done = compactions(&api, &session).await;
    }
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["reason"], "manual");
    assert_eq!(done[0]["turn_id"], Value::Null);
    // System, summary, the kept turn's prompt and answer, the new prompt.
    assert_eq!(sent(&api.answer(&session, "prompt 4").await), 5);

    let never = api.session("never").await;
    api.answer(&never, "hello").await;
    let (status, body) = api
        .post(&format!("/sessions/{never}/compact"), json!({}))
        .await;
    assert_eq!(status, 422, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("memory.compaction: off"));
}

fn overflow() -> Reply {
    Reply::status(
        400,
        r#"{"error": {"message": "This model's maximum context length is 64 tokens", "type": "invalid_request_error", "code": "context_length_exceeded"}}"#,
        None,
    )
}

fn wire_bundle(env: &Env, provider: &ProviderServer) {
    bundle(
        env,
        "wire",
        json!({"provider": "openai", "name": "gpt-test", "config": local(provider)}),
        json!({"keep_recent_turns": 1}),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflow_compacts_once_and_the_call_is_made_again_over_the_summary() {
    let provider = ProviderServer::start(vec![
        openai_text("one"),
        openai_text("two"),
        openai_text("three"),
        overflow(),
        openai_text("SUMMARY of turns one and two"),
        openai_text("four"),
    ]);
    let env = Env::new();
    wire_bundle(&env, &provider);
    let api = serve(&env);
    let session = api.session("wire").await;
    for p in ["p1", "p2", "p3"] {
        api.answer(&session, p).await;
    }
    assert_eq!(api.answer(&session, "p4").await, "four");
    let done = compactions(&api, &session).await;
    assert_eq!(done.len(), 1);
    assert_eq!(done[0]["reason"], "overflow");
    assert_eq!(done[0]["summarised_turns"], 2);
    let recorded = provider.recorded();
    assert_eq!(recorded.len(), 6);
    let again: Vec<(String, String)> = recorded[5].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(again[0].0, "system");
    assert!(
        again[1]
            .1
            .starts_with("[Summary of the earlier conversation"),
        "{again:?}"
    );
    assert!(again[1].1.ends_with("SUMMARY of turns one and two"));
    let rest: Vec<&str> = again[2..].iter().map(|(_, c)| c.as_str()).collect();
    assert_eq!(rest, ["p3", "three", "p4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_overflow_in_the_turn_fails_it_without_compacting_again() {
    let provider = ProviderServer::start(vec![
        openai_text("one"),
        openai_text("two"),
        overflow(),
        openai_text("SUMMARY"),
        overflow(),
        openai_text("never asked for"),
    ]);
    let env = Env::new();
    wire_bundle(&env, &provider);
    let api = serve(&env);
    let session = api.session("wire").await;
    api.answer(&session, "p1").await;
    api.answer(&session, "p2").await;
    let (status, body) = api
        .post(
            &format!("/sessions/{session}/run-sync"),
            json!({"input": task("p3")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["error"]["code"], "context_length_exceeded", "{body}");
    assert_eq!(compactions(&api, &session).await.len(), 1);
    assert_eq!(
        provider.recorded().len(),
        5,
        "no call after the second overflow"
    );
}

#[test]
fn run_says_on_its_usage_line_that_a_turn_compacted_the_context() {
    let env = Env::new();
    bundle(
        &env,
        "long",
        scripted(120),
        json!({"provider": "compact", "threshold": 0.5, "keep_recent_turns": 1}),
    );
    let mut lines = Vec::new();
    for i in 0..5 {
        let prompt = format!("prompt number {i} with a few more words");
        let mut args = vec!["run", "long", "--verbose", "--prompt", &prompt];
        if i > 0 {
            args.push("--continue");
        }
        let out = env.run(&args);
        out.ok();
        lines.push(
            out.stderr
                .lines()
                .find(|l| l.starts_with("tokens "))
                .unwrap_or_default()
                .to_string(),
        );
    }
    assert!(
        lines.iter().any(|l| l.ends_with(" · context compacted")),
        "{lines:#?}"
    );
    assert!(!lines[0].contains("compacted"), "{lines:#?}");
}
