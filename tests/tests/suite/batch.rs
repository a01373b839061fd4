//! `service-rs batch`: a bundle over a dataset. Twenty items against a real HTTP model server, four at a time,
//! killed half-way and started again, each end up in the results exactly once, with the verifier's reward, the git
//! diff as `model_patch` and an ATIF trajectory; an item whose provider cannot be reached is tried three times;
//! a tasks file with bad lines runs nothing.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::provider_server::{ProviderServer, Reply};
use super::providers::{bundle, local, openai_text, openai_tool_call, with_openai_key};
use super::support::Env;

/// The model server's answer to any request, from the request itself (items run side by side, so a fixed order
/// of replies would not do): after a tool result, a text; to a prompt that asks for a fix, a command that fixes.
fn by_request(body: &Value) -> Option<Reply> {
    let messages = body["messages"].as_array()?;
    let last = messages.last()?;
    if last["role"] == "tool" {
        return Some(openai_text("fixed it"));
    }
    let prompt = last["content"].to_string();
    Some(if prompt.contains("fix") {
        openai_tool_call("sleep 0.3; echo fixed > answer.txt")
    } else {
        openai_text("nothing to do")
    })
}

/// A git repository with one commit.
fn repo(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("README"), "a project\n").unwrap();
    for args in [
        vec!["init", "-q"],
        vec!["add", "."],
        vec![
            "-c",
            "user.email=t@t",
            "-c",
            "user.name=t",
            "commit",
            "-qm",
            "init",
        ],
    ] {
        let ok = std::process::Command::new("git")
            .args(&args)
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

/// `batch ./oa` over `tasks.jsonl` into `r.jsonl`, allowing what asks, which must succeed.
fn batch_allowing(env: &Env, server: &ProviderServer) {
    let args = [
        "batch",
        "./oa",
        "--tasks",
        "tasks.jsonl",
        "--out",
        "r.jsonl",
        "--approvals",
        "allow",
    ];
    let out = with_openai_key(env, &server.base, &args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn results(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_batch_killed_half_way_and_started_again_ends_every_item_exactly_once() {
    let env = Env::new();
    let server = ProviderServer::start_checked(Vec::new(), by_request);
    bundle(&env, "oa", "openai", "gpt-test", local(&server));
    repo(&env.path("repo"));
    let tasks: Vec<String> = (0..20)
        .map(|i| {
            let prompt = if i % 2 == 0 {
                "please fix the bug"
            } else {
                "say hello"
            };
            serde_json::json!({"id": format!("item-{i}"), "prompt": prompt, "workspace": "repo",
                "verifier": "test -f answer.txt"})
            .to_string()
        })
        .collect();
    std::fs::write(env.path("tasks.jsonl"), tasks.join("\n") + "\n").unwrap();
    let out = env.path("results.jsonl");
    let args = [
        "batch",
        "./oa",
        "--tasks",
        "tasks.jsonl",
        "--out",
        "results.jsonl",
        "--concurrency",
        "4",
        "--approvals",
        "allow",
    ];
    let start = || {
        with_openai_key(&env, &server.base, &args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    // Killed once some items have ended, others running.
    let mut first = start();
    let began = Instant::now();
    while results(&out).len() < 6 {
        assert!(began.elapsed() < Duration::from_secs(60), "no progress");
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().unwrap();
    first.wait().unwrap();
    let before = results(&out).len();
    assert!(before < 20, "the kill came after the end");
    let second = start().wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&second.stderr);
    assert_eq!(second.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!(
            "{before} of 20 items are in results.jsonl already"
        )),
        "{err}"
    );
    assert!(
        err.contains("20 of 20 items done · 10 solved · mean reward 0.500"),
        "{err}"
    );
    let all = results(&out);
    let mut seen: HashMap<String, Value> = HashMap::new();
    for r in all {
        let id = r["id"].as_str().unwrap().to_string();
        assert!(seen.insert(id.clone(), r).is_none(), "{id} has two results");
    }
    assert_eq!(seen.len(), 20);
    for i in 0..20 {
        let r = &seen[&format!("item-{i}")];
        assert_eq!(r["outcome"], "completed", "{r}");
        let patch = r["model_patch"].as_str().unwrap();
        if i % 2 == 0 {
            assert_eq!(r["reward"], 1.0, "{r}");
            assert!(
                patch.contains("+++ b/answer.txt") && patch.contains("+fixed"),
                "{patch}"
            );
        } else {
            assert_eq!(r["reward"], 0.0, "{r}");
            assert_eq!(patch, "");
        }
        // Its trajectory is beside the results, and names its tool call.
        let t: Value = serde_json::from_str(
            &std::fs::read_to_string(env.path(r["trajectory"].as_str().unwrap())).unwrap(),
        )
        .unwrap();
        assert_eq!(t["schema_version"], "ATIF-v1.8");
        assert_eq!(
            t["steps"][0]["message"],
            if i % 2 == 0 {
                "please fix the bug"
            } else {
                "say hello"
            }
        );
    }
    // The sessions are gone once their results are written; the repository itself was never touched.
    assert_eq!(
        env.run(&["sessions", "--json"]).json(),
        serde_json::json!([])
    );
    assert!(!env.path("repo/answer.txt").exists());
}

#[test]
fn an_item_whose_provider_cannot_be_reached_is_tried_three_times() {
    let env = Env::new();
    // A port nothing listens on: the provider fails after its own retries, each time.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    bundle(
        &env,
        "oa",
        "openai",
        "gpt-test",
        serde_json::json!({"base_url": base, "retry_base_ms": 1, "max_retries": 1, "timeout_ms": 2000}),
    );
    std::fs::write(
        env.path("tasks.jsonl"),
        "{\"id\": 7, \"prompt\": \"hi\", \"verifier\": \"true\"}\n",
    )
    .unwrap();
    let out = with_openai_key(
        &env,
        &base,
        &[
            "batch",
            "./oa",
            "--tasks",
            "tasks.jsonl",
            "--out",
            "r.jsonl",
            "--keep-sessions",
        ],
    )
    .output()
    .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = &results(&env.path("r.jsonl"))[0];
    assert_eq!(r["id"], "7");
    assert_eq!(r["outcome"], "provider_unavailable", "{r}");
    assert_eq!(r["attempts"], 3);
    assert_eq!(
        r["reward"],
        Value::Null,
        "no verifier runs after an infrastructure failure"
    );
    // The failed tries' sessions are not kept; the last one is, with --keep-sessions.
    assert_eq!(
        env.run(&["sessions", "--json"])
            .json()
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn a_tasks_file_with_bad_lines_runs_nothing_and_names_each() {
    let env = Env::new();
    bundle(&env, "oa", "openai", "gpt-test", serde_json::json!({}));
    std::fs::write(
        env.path("tasks.jsonl"),
        "{\"id\": \"a\", \"prompt\": \"hi\"}\n{\"id\": \"a\", \"prompt\": \"again\"}\n{\"id\": \"b\", \"prompt\": \"x\", \"workspace\": \"nowhere\"}\n{\"id\": \"c\", \"promt\": \"typo\"}\n",
    )
    .unwrap();
    let out = env
        .command(&[
            "batch",
            "./oa",
            "--tasks",
            "tasks.jsonl",
            "--out",
            "r.jsonl",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("3 bad line(s); nothing was run"), "{err}");
    assert!(err.contains("line 2: id \"a\" is used twice"), "{err}");
    assert!(err.contains("line 3: item \"b\": workspace"), "{err}");
    assert!(err.contains("line 4: unknown field `promt`"), "{err}");
    assert!(!env.path("r.jsonl").exists() || results(&env.path("r.jsonl")).is_empty());
}

#[test]
fn a_verifier_may_print_its_reward_and_an_item_budget_ends_its_turn() {
    let env = Env::new();
    let server = ProviderServer::start_checked(Vec::new(), by_request);
    bundle(&env, "oa", "openai", "gpt-test", local(&server));
    std::fs::write(
        env.path("tasks.jsonl"),
        concat!(
            "{\"id\": \"partial\", \"prompt\": \"say hello\", \"verifier\": \"echo checking; echo 0.25; exit 3\"}\n",
            "{\"id\": \"capped\", \"prompt\": \"fix it\", \"budget\": {\"max_tokens\": 10}}\n",
        ),
    )
    .unwrap();
    batch_allowing(&env, &server);
    let by_id: HashMap<String, Value> = results(&env.path("r.jsonl"))
        .into_iter()
        .map(|r| (r["id"].as_str().unwrap().to_string(), r))
        .collect();
    let partial = &by_id["partial"];
    assert_eq!(partial["reward"], 0.25, "{partial}");
    assert_eq!(partial["verifier"]["exit_code"], 3);
    // 62 tokens after its first call, past its 10: no second call.
    let capped = &by_id["capped"];
    assert_eq!(capped["outcome"], "budget_exceeded", "{capped}");
    assert_eq!(capped["usage"]["input_tokens"], 50);
}

#[test]
fn a_workspaces_git_configuration_runs_nothing_on_the_host_when_the_patch_is_taken() {
    let env = Env::new();
    let server = ProviderServer::start_checked(Vec::new(), by_request);
    bundle(&env, "oa", "openai", "gpt-test", local(&server));
    // The attack: git runs core.fsmonitor's command whenever it looks at the work tree. Were the patch taken
    // by git on the host, this command would make the marker there.
    let marker = env.path("pwned-by-fsmonitor");
    repo(&env.path("repo"));
    let hostile = std::process::Command::new("git")
        .args([
            "config",
            "core.fsmonitor",
            &format!("touch {}; false", marker.display()),
        ])
        .current_dir(env.path("repo"))
        .status()
        .unwrap();
    assert!(hostile.success());
    std::fs::write(
        env.path("tasks.jsonl"),
        "{\"id\": \"x\", \"prompt\": \"please fix the bug\", \"workspace\": \"repo\"}\n",
    )
    .unwrap();
    batch_allowing(&env, &server);
    let r = &results(&env.path("r.jsonl"))[0];
    assert!(r["model_patch"].as_str().unwrap().contains("+fixed"), "{r}");
    assert!(
        !marker.exists(),
        "git's configuration ran a command on the host"
    );
}
