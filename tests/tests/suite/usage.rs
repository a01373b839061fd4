//! What turns cost, as the supervisor counts it at a real HTTP provider: the `turn_completed` usage (tokens, model
//! calls, the context window used), the session's totals and title in `sessions`, and per turn in `sessions show`.

use pretty_assertions::assert_eq;
use serde_json::json;

use super::provider_server::ProviderServer;
use super::providers::{bundle, local, of_type, openai_text, openai_tool_call, run_json};
use super::support::Env;

#[test]
fn a_turn_reports_the_tokens_calls_and_context_the_supervisor_counted() {
    let env = Env::new();
    // The tool call reports 50 in and 12 out; the answer reports nothing, which is not zero.
    let server = ProviderServer::start(vec![
        openai_tool_call("echo counted"),
        openai_text("It said counted."),
        openai_tool_call("echo again"),
        openai_text("Again."),
    ]);
    let mut config = local(&server);
    config["context_window"] = json!(1000);
    bundle(&env, "oa", "openai", "gpt-test", config);
    let envs = [
        ("OPENAI_API_KEY", "sk-test"),
        ("OPENAI_BASE_URL", server.base.as_str()),
    ];
    let (out, events) = run_json(&env, "./oa", &envs, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let usage = &of_type(&events, "turn_completed")[0]["usage"];
    assert_eq!(
        usage,
        &json!({"input_tokens": 50, "output_tokens": 12, "model_calls": 2, "context_tokens": 50,
                "context_window": 1000})
    );
    let id = events[0]["session_id"].as_str().unwrap().to_string();
    let again = env
        .command(&["run", "--session", &id, "again"])
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &server.base)
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );

    let listed = env.run(&["sessions"]);
    let row = listed.ok().lines().nth(1).unwrap().to_string();
    for column in ["go", "completed", "124"] {
        assert!(row.contains(column), "{column} missing in: {row}");
    }
    let record = &env.run(&["sessions", "--json"]).json()[0];
    assert_eq!(record["title"], "go");
    assert_eq!(record["usage"]["input_tokens"], 100);
    let shown = env.run(&["sessions", "show", &id]);
    let lines: Vec<&str> = shown
        .ok()
        .lines()
        .filter(|l| l.trim_start().starts_with("(tokens"))
        .collect();
    assert_eq!(lines.len(), 2, "{}", shown.stdout);
    assert!(
        lines[0].contains("tokens 50 in · 12 out · context 5% of 1,000 · 2 steps"),
        "{}",
        lines[0]
    );
}

#[test]
fn usage_counts_the_turns_of_local_runs_by_bundle_and_day() {
    let env = Env::new();
    super::support::write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [{text: "counted"}]}]}"#,
        "",
        "read_only",
    );
    env.run(&["build", "b"]).ok();
    for prompt in ["one", "two"] {
        assert!(env
            .run(&["run", "fixture", prompt])
            .ok()
            .contains("counted"));
    }
    let report = env
        .run(&["usage", "--group-by", "bundle,day", "--json"])
        .json();
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report}");
    assert_eq!(rows[0]["bundle"], "local/fixture:1.0.0", "{report}");
    assert_eq!(rows[0]["turns"], 2, "{report}");
    assert_eq!(rows[0]["model_calls"], 2, "{report}");
    let created = env.run(&["sessions", "--json"]).json()[0]["created_at"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(rows[0]["day"], &created[..10], "{report}");
}
