//! A denial with a reason: the operator says why ("use pytest instead") and the model reads it in the call's
//! result, from every front end that can carry text: `POST /approvals/{id}` with `reason`, `r` on `run`'s terminal
//! question, and `r` in the TUI. The reason is cut at 2000 characters, and ignored with an allow.

use serde_json::json;
use tempfile::TempDir;

use super::http_client::{task, Api};
use super::support::{write_bundle, Env, Server};
use super::tmux::Tmux;

const SCRIPT: &str = r#"{turns: [{replies: [
  {tool_calls: [{name: "Bash", arguments: {command: "python -m unittest"}}]},
  {text: "the model read: {{last_tool_output}}"},
]}]}"#;

fn bundle(dir: &std::path::Path) {
    write_bundle(
        dir,
        SCRIPT,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, action: ask }\n",
        "read_only",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_a_denial_carries_its_reason_to_the_model_cut_at_its_bound() {
    let (home, dir) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    bundle(dir.path());
    let api = Api::new(Server::start(home.path(), &[], &[]));
    let id = api.session(dir.path().to_str().unwrap()).await;
    for (reason, expected) in [
        (
            "use pytest instead".to_string(),
            "use pytest instead".to_string(),
        ),
        ("x".repeat(5000), "x".repeat(2000)),
        // Attack: a client's reason that would drive the terminals the journal is shown on.
        (
            "\u{1b}[2J\u{1b}]0;owned\u{7}\nuse pytest".to_string(),
            "[2J ]0;owned  use pytest".to_string(),
        ),
    ] {
        let mut events = api.events(&id, None).await;
        let (status, _) = api
            .post(
                &format!("/sessions/{id}/run"),
                json!({"input": task("test it")}),
            )
            .await;
        assert_eq!(status, 202);
        let asked = events.until("permission_requested").await;
        let request = asked.last().unwrap().1["payload"]["payload"]["request_id"]
            .as_str()
            .unwrap()
            .to_string();
        let (status, body) = api
            .post(
                &format!("/approvals/{request}"),
                json!({"decision": "deny", "reason": reason}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let resolved = events.until("approval_resolved").await;
        assert_eq!(
            resolved.last().unwrap().1["payload"]["payload"]["reason"],
            expected.as_str()
        );
        let done = events.until("turn_completed").await;
        let answer = done.last().unwrap().1["payload"]["payload"]["final_message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            answer.contains(&format!("who said: {expected}")),
            "{answer}"
        );
        assert!(!answer.contains(&"x".repeat(2001)), "cut at 2000");
    }
}

#[test]
fn on_runs_terminal_r_asks_why_and_the_model_reads_it() {
    let env = Env::new();
    bundle(&env.path("b"));
    let tmux = Tmux::service_rs(&env, "run ./b 'test it'; echo RUN-EXITED-$?; sleep 30");
    tmux.wait_for("[r] deny and s");
    tmux.keys(&["r"]);
    tmux.wait_for("Why (the model reads this");
    tmux.type_line("use pytest instead");
    tmux.wait_for("who said: use pytest instead");
    tmux.wait_for("RUN-EXITED-0");
}

#[test]
fn in_the_tui_r_takes_the_input_line_as_the_reason() {
    let env = Env::new();
    bundle(&env.path("b"));
    let tmux = Tmux::service_rs(&env, "tui --bundle ./b");
    tmux.wait_for("sandbox read_only");
    tmux.type_line("test it");
    tmux.wait_for("[r] deny, saying why");
    tmux.keys(&["r"]);
    tmux.wait_for("type why, then Enter to deny");
    tmux.type_line("use pytest instead");
    tmux.wait_for("permission denied: use pytest instead");
    tmux.wait_for("who said: use pytest instead");
}

const PROJECT_SCRIPT: &str = r#"{turns: [
  {when: "chain", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo hello; id"}}]}, {text: "got: {{last_tool_output}}"}]},
  {when: "again", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo hello again"}}]}, {text: "got: {{last_tool_output}}"}]},
  {replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo hello world"}}]}, {text: "got: {{last_tool_output}}"}]},
]}"#;

#[test]
fn always_in_this_project_keeps_a_command_prefix_that_later_sessions_use_and_a_chain_does_not() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        PROJECT_SCRIPT,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, action: ask }\n",
        "read_only",
    );
    env.run(&["build", "b"]).ok();
    let tmux = Tmux::service_rs(&env, "run fixture 'say it'; echo RUN-EXITED-$?; sleep 30");
    tmux.wait_for("always `Bash(echo he");
    tmux.keys(&["p"]);
    tmux.wait_for("got: hello world");
    tmux.wait_for("RUN-EXITED-0");
    let listed = env.run(&["approvals"]).ok().to_string();
    assert!(listed.contains("1  Bash(echo hello:*)"), "{listed}");

    // Another session in the project: no question (none could be asked here, with no terminal), and it runs.
    let again = env.run(&["run", "fixture", "again"]);
    assert!(again.ok().contains("got: hello again"), "{}", again.stderr);
    // A chain is not a command of that prefix: asked, so denied here.
    let chained = env.run(&["run", "fixture", "chain"]);
    assert!(
        chained.stderr.contains("denied Bash `echo hello; id`"),
        "{}",
        chained.stderr
    );
    // Elsewhere the rule does not hold.
    let other = super::support::sandbox_tempdir();
    let elsewhere = env
        .command(&["run", "fixture", "again"])
        .current_dir(other.path())
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&elsewhere.stderr).contains("denied Bash `echo hello again`"));

    assert!(env
        .run(&["approvals", "remove", "1"])
        .ok()
        .contains("removed Bash(echo hello:*)"));
    let removed = env.run(&["run", "fixture", "again"]);
    assert!(
        removed.stderr.contains("denied Bash `echo hello again`"),
        "{}",
        removed.stderr
    );
}
