//! Trajectories: `run --trajectory` and `sessions export` write a session as ATIF v1.8, which the `atif` package
//! from PyPI (the format's own pydantic models) accepts, each tool call linked to its result, with metrics that add
//! up to what the provider reported. `--format jsonl` writes the journal's events.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::provider_server::ProviderServer;
use super::providers::{bundle, local, openai_text, openai_tool_call, with_openai_key};
use super::support::Env;

/// The evaluation tools' Python (`.ci/eval-python`); None (the test says it is skipped) without it.
fn eval_python() -> Option<PathBuf> {
    super::support::gated("SERVICE_TEST_EVAL_PYTHON", ".ci/eval-python")
}

/// Validates `file` with the `atif` package's `Trajectory` model; its error when it refuses the document.
fn atif_accepts(python: &Path, file: &Path) -> Result<(), String> {
    let out = std::process::Command::new(python)
        .args([
            "-c",
            "import sys, atif; atif.Trajectory.model_validate_json(open(sys.argv[1]).read()); print('ok')",
            file.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// A run of a bundle whose model (a real HTTP server) calls Bash twice, then answers; `extra` arguments added.
fn two_tool_calls(env: &Env, extra: &[&str]) -> (std::process::Output, ProviderServer) {
    let server = ProviderServer::start(vec![
        openai_tool_call("echo one"),
        openai_tool_call("echo two"),
        openai_text("both ran"),
    ]);
    bundle(env, "oa", "openai", "gpt-test", local(&server));
    std::fs::write(
        env.home.path().join("config.toml"),
        "[prices.\"openai/gpt-test\"]\ninput = 1000.0\noutput = 2000.0\n",
    )
    .unwrap();
    let mut args = vec!["run", "./oa", "run two commands", "--approvals", "allow"];
    args.extend_from_slice(extra);
    let out = with_openai_key(env, &server.base, &args).output().unwrap();
    (out, server)
}

#[test]
fn run_trajectory_writes_atif_that_links_each_call_to_its_result_and_adds_up_to_the_usage() {
    let env = Env::new();
    let file = env.path("trajectory.json");
    let (out, server) = two_tool_calls(&env, &["--trajectory", file.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.recorded().len(), 3);
    let t: Value = serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
    assert_eq!(t["schema_version"], "ATIF-v1.8");
    assert_eq!(t["agent"]["name"], "service-rs");
    assert_eq!(t["agent"]["model_name"], "openai/gpt-test");
    let steps = t["steps"].as_array().unwrap();
    let sources: Vec<&str> = steps
        .iter()
        .map(|s| s["source"].as_str().unwrap())
        .collect();
    assert_eq!(sources, ["user", "agent", "agent", "agent"], "{t:#}");
    assert_eq!(steps[0]["message"], "run two commands");
    for (step, said) in [(&steps[1], "one"), (&steps[2], "two")] {
        let call = &step["tool_calls"][0];
        assert_eq!(call["function_name"], "Bash");
        assert_eq!(call["arguments"]["command"], format!("echo {said}"));
        let result = &step["observation"]["results"][0];
        assert_eq!(result["source_call_id"], call["tool_call_id"]);
        assert!(
            result["content"].as_str().unwrap().contains(said),
            "{result}"
        );
        assert_eq!(step["metrics"]["prompt_tokens"], 50);
        assert_eq!(step["metrics"]["completion_tokens"], 12);
        assert_eq!(step["reasoning_content"], "Let me look at it.");
    }
    assert_eq!(steps[3]["message"], "both ran");
    // The final metrics are the provider's usage as the session recorded it, and its cost at config.toml's price.
    let record = &env.run(&["sessions", "--json"]).json()[0];
    let fm = &t["final_metrics"];
    assert_eq!(fm["total_prompt_tokens"], record["usage"]["input_tokens"]);
    assert_eq!(
        fm["total_completion_tokens"],
        record["usage"]["output_tokens"]
    );
    assert_eq!(fm["total_steps"], 4);
    let cost = fm["total_cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (100.0 * 1000.0 + 24.0 * 2000.0) / 1e6).abs() < 1e-9,
        "{fm}"
    );
    assert!((cost - record["cost_usd"].as_f64().unwrap()).abs() < 1e-9);
    if let Some(python) = eval_python() {
        atif_accepts(&python, &file).unwrap();
    }
}

#[test]
fn sessions_export_writes_atif_or_the_journal_and_a_failed_turn_ends_with_a_system_step() {
    let env = Env::new();
    // The server has two replies for three calls: the third fails the turn.
    let server = ProviderServer::start(vec![
        openai_tool_call("echo one"),
        openai_tool_call("echo two"),
    ]);
    bundle(&env, "oa", "openai", "gpt-test", local(&server));
    let out = with_openai_key(
        &env,
        &server.base,
        &["run", "./oa", "go", "--approvals", "allow"],
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let id = env.run(&["sessions", "--json"]).json()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let t = env.run(&["sessions", "export", &id]).json();
    let last = t["steps"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["source"], "system", "{t:#}");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .starts_with("the turn ended: "),
        "{last}"
    );
    assert!(t["notes"].as_str().unwrap().contains("did not complete"));
    let file = env.path("export.json");
    env.run(&["sessions", "export", &id[..8], "-o", file.to_str().unwrap()])
        .ok();
    if let Some(python) = eval_python() {
        atif_accepts(&python, &file).unwrap();
    }
    // The journal, one event a line, as `sessions show --json` prints it.
    let jsonl = env.run(&["sessions", "export", &id, "--format", "jsonl"]);
    let events: Vec<Value> = jsonl
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["payload"]["type"], "turn_started");
    assert_eq!(events.last().unwrap()["payload"]["type"], "error");
    let journal =
        std::fs::read_to_string(env.home.path().join(format!("sessions/{id}/events.jsonl")))
            .unwrap();
    assert_eq!(events.len(), journal.lines().count());
}
