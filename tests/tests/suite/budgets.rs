//! A session's budget over all its turns: set with `PATCH /sessions/{id}` or `run --budget-tokens`, kept in the
//! session's record (on the files store and over PostgreSQL), and held by the supervisor before each model call.
//! Another tenant cannot change it.

use pretty_assertions::assert_eq;
use serde_json::json;
use tempfile::TempDir;

use super::http_client::task;
use super::support::Env;
use super::tenants::{code, tenants};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_budget_set_over_http_ends_the_next_turn_before_its_model_call() {
    let home = TempDir::new().unwrap();
    let t = tenants(home.path(), &[]);
    let bundle = super::tenants::bundle();
    let id = t.acme.session(bundle.path().to_str().unwrap()).await;
    let path = format!("/sessions/{id}");
    assert_eq!(t.acme.answer(&id, "hi").await, "hello");
    let (_, record) = t.acme.get(&path).await;
    let spent = record["usage"]["input_tokens"].as_u64().unwrap()
        + record["usage"]["output_tokens"].as_u64().unwrap();
    assert!(spent > 0, "{record}");

    // Bad bodies are refused with what is wrong, and change nothing.
    for body in [
        json!({}),
        json!({"budget": {"max_cost_usd": -1}}),
        json!({"budget": {"max_tokens": 5, "max_turns": 1}}),
        json!({"budget": {"max_tokens": 0}}),
    ] {
        let answer = t.acme.patch(&path, body.clone()).await;
        // 422 for a body of the wrong shape, 400 for a value out of range.
        assert!([400, 422].contains(&answer.0), "{body}: {}", answer.1);
        assert_eq!(answer.1["error"]["code"], "invalid_request", "{}", answer.1);
        assert!(
            answer.1["error"]["message"]
                .as_str()
                .unwrap()
                .contains("budget")
                || answer.1["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("max_"),
            "{}",
            answer.1
        );
    }
    // Another tenant can neither see nor change acme's session (the attack: lifting or setting its budget).
    let answer = t
        .beta
        .patch(&path, json!({"budget": {"max_tokens": 1}}))
        .await;
    assert_eq!(
        code(&answer),
        (404, "session_not_found".into()),
        "{}",
        answer.1
    );
    assert_eq!(t.acme.get(&path).await.1["budget"], serde_json::Value::Null);

    // A budget the session has spent already: the next turn makes no model call and ends budget_exceeded.
    let answer = t
        .acme
        .patch(&path, json!({"budget": {"max_tokens": spent}}))
        .await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert_eq!(answer.1["budget"], json!({"max_tokens": spent}));
    let (status, turn) = t
        .acme
        .post(
            &format!("{path}/run-sync"),
            json!({"input": task("hi again")}),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    assert_eq!(turn["error"]["code"], "budget_exceeded", "{turn}");
    assert!(
        turn["error"]["message"]
            .as_str()
            .unwrap()
            .contains("budget.max_tokens"),
        "{turn}"
    );
    assert_eq!(
        turn["usage"]["input_tokens"].as_u64().unwrap_or(0),
        0,
        "no call was made"
    );

    // Lifted, the session goes on.
    let answer = t.acme.patch(&path, json!({"budget": null})).await;
    assert_eq!(answer.0, 200, "{}", answer.1);
    assert!(answer.1.get("budget").is_none(), "{}", answer.1);
    assert_eq!(t.acme.answer(&id, "hi").await, "hello");
}

#[test]
fn run_budget_tokens_holds_the_session_across_runs_and_the_model_server_counts_the_calls() {
    use super::provider_server::ProviderServer;
    use super::providers::{bundle, local, openai_text, openai_tool_call, with_openai_key};
    let env = Env::new();
    // Each tool call's reply reports 62 tokens.
    let server = ProviderServer::start(vec![
        openai_tool_call("echo one"),
        openai_tool_call("echo two"),
        openai_tool_call("echo three"),
        openai_text("done"),
    ]);
    bundle(&env, "oa", "openai", "gpt-test", local(&server));
    std::fs::write(
        env.home.path().join("config.toml"),
        "[prices.\"openai/gpt-test\"]\ninput = 1000.0\noutput = 1000.0\n",
    )
    .unwrap();
    let run = |args: &[&str]| {
        let mut all = vec!["run", "--approvals", "allow"];
        all.extend_from_slice(args);
        with_openai_key(&env, &server.base, &all).output().unwrap()
    };
    // 62 tokens after the first call, 124 after the second: past 100, no third call.
    let out = run(&["./oa", "go", "--budget-tokens", "100"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("the session has spent 124 tokens of its budget of 100"),
        "{err}"
    );
    assert_eq!(server.recorded().len(), 2);
    // The budget stays with the session: a later run in it makes no call at all.
    let out = run(&["--continue", "go on"]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        server.recorded().len(),
        2,
        "no call past the session's budget"
    );
    let record = &env.run(&["sessions", "--json"]).json()[0];
    assert_eq!(record["budget"], json!({"max_tokens": 100}));
    // Its ended turns are counted in dollars at config.toml's price: 124 tokens at $1,000 a million.
    let cost = record["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.124).abs() < 1e-9, "{record}");
    // Raised, the session goes on where it was.
    let out = run(&["--continue", "go on", "--budget-tokens", "1000"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.recorded().len(), 4);
}
