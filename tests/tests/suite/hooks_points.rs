//! Hooks at the points outside a tool call, and the operator's hooks. `PreCompact`, `PostCompact` and
//! `SessionStart` (`compact`) around a compaction by hand, `SessionStart` (`fork`) in a fork, `SubagentStart` and `SubagentStop` around a child,
//! `StopFailure` when a model call fails and `SessionEnd` when the worker stops, all confined in the parent's
//! sandbox; and hooks in the operator's config.toml, which run first, cannot be overridden by a bundle, keep
//! their scripts read-only, and with `operator_hooks_only` are the only ones that run.

use std::path::Path;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use service_ipc::{EventPayload, TurnStatus};
use tempfile::TempDir;

use super::hooks::{bundle, events, of_kind, run};
use super::support::{final_message, run_turn, runtime, sandbox_tempdir, Env};

/// A hook for every event it is given: appends its input to `hooks.log` in its working directory, and adds
/// context where the event takes it.
const LOG: &str = r#"import json, sys
event = json.load(sys.stdin)
with open("hooks.log", "a") as f:
    f.write(json.dumps(event) + "\n")
name = event["hook_event_name"]
context = {
    "SessionStart": "source=" + event.get("source", ""),
    "SubagentStart": "brief from SubagentStart",
    "SubagentStop": "checked by SubagentStop",
}.get(name)
if context:
    print(json.dumps({"hookSpecificOutput": {"hookEventName": name, "additionalContext": context}}))
"#;

/// Writes a scripted bundle `id` in `dir` whose agent.yaml has `extra`, answering from `turns`, with the logging
/// hook script.
fn write(dir: &Path, id: &str, mut extra: Value, turns: Value) {
    extra["memory"] = json!({"keep_recent_turns": 1});
    super::subagents::bundle(dir, id, "workspace_write", &[], extra, json!([]));
    std::fs::write(
        dir.join("resources/script.json5"),
        json!({ "turns": turns }).to_string(),
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("hooks")).unwrap();
    std::fs::write(dir.join("hooks/log.py"), LOG).unwrap();
}

/// The hook inputs `hooks.log` in `dir` holds, by event name.
fn logged(dir: &Path, event: &str) -> Vec<Value> {
    std::fs::read_to_string(dir.join("hooks.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|v| v["hook_event_name"] == event)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_subagent_failure_and_end_hooks_run_at_their_points_in_the_sandbox() {
    let home = TempDir::new().unwrap();
    let dirs = TempDir::new().unwrap();
    let (parent, child) = (dirs.path().join("parent"), dirs.path().join("child"));
    write(
        &child,
        "child",
        json!({}),
        json!([{"replies": [{"text": "child got: {{prompt}}"}]}]),
    );
    let log = "python3 $SERVICE_BUNDLE_DIR/hooks/log.py";
    let every: serde_json::Map<String, Value> = [
        "SessionStart",
        "PreCompact",
        "PostCompact",
        "SubagentStart",
        "SubagentStop",
        "StopFailure",
        "SessionEnd",
    ]
    .iter()
    .map(|e| {
        (
            e.to_string(),
            json!([{"hooks": [{"type": "command", "command": log}]}]),
        )
    })
    .collect();
    write(
        &parent,
        "parent",
        json!({
            "hooks": every,
            "subagents": [{"name": "counter", "bundle": child.to_str().unwrap(), "description": "counts"}],
        }),
        json!([
            {"when": "Summarise the conversation", "replies": [{"text": "SUMMARY of the earlier turns"}]},
            {"when": "delegate", "replies": [
                {"tool_calls": [{"name": "Agent", "arguments": {"subagent": "counter", "prompt": "count the files"}}]},
                {"text": "said: {{last_tool_output}}"},
            ]},
            {"when": "fail", "replies": [{"error": "the provider is down"}]},
            {"replies": [{"text": "echo: {{prompt}}"}]},
        ]),
    );
    let cwd = sandbox_tempdir();
    let rt = runtime(home.path());
    let id = rt
        .create_session(parent.to_str().unwrap(), Some(cwd.path()))
        .await
        .unwrap()
        .id;

    // A subagent: SubagentStart's context reaches the child's prompt, SubagentStop's the parent's model.
    let (outcome, events) = run_turn(&rt, &id, "delegate the count").await;
    assert_eq!(outcome.status, TurnStatus::Completed, "{:?}", outcome.error);
    let said = final_message(&events);
    assert!(said.contains("child got: count the files"), "{said}");
    assert!(said.contains("brief from SubagentStart"), "{said}");
    assert!(said.contains("checked by SubagentStop"), "{said}");
    let start = &logged(cwd.path(), "SubagentStart")[0];
    assert_eq!(start["agent_type"], "counter");
    let stop = &logged(cwd.path(), "SubagentStop")[0];
    assert_eq!(stop["agent_id"], start["agent_id"]);
    assert!(stop["last_assistant_message"]
        .as_str()
        .unwrap()
        .starts_with("child got:"));
    assert_eq!(logged(cwd.path(), "SessionStart")[0]["source"], "startup");

    // A failed model call: StopFailure is told why.
    let (outcome, _) = run_turn(&rt, &id, "fail now").await;
    assert_eq!(outcome.status, TurnStatus::Failed);
    let failure = &logged(cwd.path(), "StopFailure")[0];
    assert!(
        failure["error_details"]
            .as_str()
            .unwrap()
            .contains("the provider is down"),
        "{failure}"
    );
    let (outcome, _) = run_turn(&rt, &id, "one more turn").await;
    assert_eq!(outcome.status, TurnStatus::Completed, "{:?}", outcome.error);

    // A compaction by hand: PreCompact reads the conversation before it, PostCompact the summary, and the next
    // turn starts again with SessionStart's `compact` source.
    let compacted = rt
        .compact_session(&id, Some("keep the counts"))
        .await
        .unwrap();
    assert!(compacted.is_some());
    for _ in 0..1000 {
        if !logged(cwd.path(), "PostCompact").is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let pre = &logged(cwd.path(), "PreCompact")[0];
    assert_eq!(pre["trigger"], "manual");
    assert_eq!(pre["custom_instructions"], "keep the counts");
    assert!(pre.get("turn_id").is_none(), "{pre}");
    let post = &logged(cwd.path(), "PostCompact")[0];
    assert!(post["compact_summary"]
        .as_str()
        .unwrap()
        .contains("SUMMARY of the earlier turns"));
    let (outcome, events) = run_turn(&rt, &id, "carry on").await;
    assert_eq!(outcome.status, TurnStatus::Completed, "{:?}", outcome.error);
    assert!(
        final_message(&events).contains("source=compact"),
        "{}",
        final_message(&events)
    );

    // A fork's first turn starts with SessionStart's `fork` source.
    let fork = rt.fork_session(&id, None).await.unwrap().session.id;
    let (outcome, events) = run_turn(&rt, &fork, "in the fork").await;
    assert_eq!(outcome.status, TurnStatus::Completed, "{:?}", outcome.error);
    assert!(
        final_message(&events).contains("source=fork"),
        "{}",
        final_message(&events)
    );

    // The worker's end: SessionEnd runs before it exits.
    rt.shutdown("the test ended").await;
    let end = &logged(cwd.path(), "SessionEnd")[0];
    assert_eq!(end["reason"], "other");
    // Every run was journaled, those outside turns too.
    let journal: Vec<EventPayload> = rt
        .session_events(&id)
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.payload)
        .collect();
    let outside: Vec<&str> = journal
        .iter()
        .filter_map(|p| match p {
            EventPayload::HookFinished {
                turn_id: None,
                event,
                ..
            } => Some(event.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(
        outside,
        ["PreCompact", "PostCompact", "SessionEnd"],
        "{journal:?}"
    );
}

/// The operator's policy script: denies `ls` with a reason that says whether it could change its own folder.
const POLICY: &str = r#"import json, os, sys
event = json.load(sys.stdin)
try:
    open(os.path.join(os.environ["SERVICE_OPERATOR_HOOKS_DIR"], "planted.py"), "w").write("x")
    writable = True
except OSError:
    writable = False
if event["tool_input"].get("command", "").startswith("ls"):
    print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
        "permissionDecisionReason": f"operator policy: no ls (scripts writable: {writable})"}}))
"#;

/// A bundle hook that allows every call, to try to outvote the operator.
const ALLOW_ALL: &str = r#"import json
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}))
open("bundle-hook-ran", "w").write("yes")
"#;

/// The operator's config.toml (with `extra` lines first) and policy script in `env`'s store.
fn operator(env: &Env, extra: &str) {
    let scripts = env.home.path().join("hooks");
    std::fs::create_dir_all(&scripts).unwrap();
    std::fs::write(scripts.join("policy.py"), POLICY).unwrap();
    // The sandbox's user reads the scripts (the store itself stays closed to it); even a folder anyone may
    // write is read-only in the sandbox.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&scripts, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(
        env.home.path().join("config.toml"),
        format!(
            "{extra}\n[[hooks.PreToolUse]]\nmatcher = \"Bash\"\nhooks = [{{ type = \"command\", command = \"python3 $SERVICE_OPERATOR_HOOKS_DIR/policy.py\" }}]\n"
        ),
    )
    .unwrap();
}

fn allow_all_hook() -> String {
    format!(
        "hooks:\n  PreToolUse:\n    - hooks:\n        - {{ type: command, command: \"{}/allow_all.py\" }}\n",
        super::hooks::PY
    )
}

#[test]
fn an_operator_hook_runs_in_every_session_no_bundle_hook_outvotes_it_and_its_scripts_stay_read_only(
) {
    let env = Env::new();
    operator(&env, "");
    bundle(
        &env,
        &allow_all_hook(),
        "permissions: { default: allow }",
        &[("allow_all.py", ALLOW_ALL)],
    );
    let (code, out, err) = run(&env, "list the files");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("operator policy: no ls (scripts writable: False)"),
        "{out}"
    );
    assert!(env.work.path().join("bundle-hook-ran").exists());
    assert!(!env.home.path().join("hooks/planted.py").exists());
    let events = events(&env);
    let sources: Vec<&str> = of_kind(&events, "hook_finished")
        .iter()
        .map(|f| f["hook"]["source"].as_str().unwrap())
        .collect();
    assert!(
        sources.contains(&"operator") && sources.contains(&"bundle"),
        "{sources:?}"
    );
    let listed = env.run(&["hooks", "list", "fixture", "--json"]).json();
    assert_eq!(listed["operator"][0]["source"], "operator");
    assert_eq!(listed["operator_hooks_only"], false);
}

#[test]
fn with_operator_hooks_only_the_bundles_and_the_projects_hooks_do_not_run() {
    let env = Env::new();
    operator(&env, "operator_hooks_only = true");
    bundle(
        &env,
        &allow_all_hook(),
        "permissions: { default: allow }",
        &[("allow_all.py", ALLOW_ALL)],
    );
    // A trusted project file too: the operator's setting still turns it off.
    let project = env.work.path().join(".service");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("hooks.json"),
        r#"{"hooks": {"PreToolUse": [{"hooks": [{"type": "command", "command": "touch project-hook-ran"}]}]}}"#,
    )
    .unwrap();
    let cwd = env.work.path().to_str().unwrap().to_string();
    env.run(&["hooks", "trust", "--cwd", &cwd]).ok();
    super::support::give_to_sandbox(env.work.path());
    let (code, out, err) = run(&env, "list the files");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("operator policy: no ls"), "{out}");
    assert!(!env.work.path().join("bundle-hook-ran").exists());
    assert!(!env.work.path().join("project-hook-ran").exists());
    let listed = env.run(&["hooks", "list", "fixture", "--cwd", &cwd]);
    let listed = listed.ok();
    assert!(listed.contains("operator_hooks_only is set"), "{listed}");
}

#[test]
fn a_stop_hook_keeps_a_codeact_turn_going_as_it_does_a_react_one() {
    let env = Env::new();
    let hooks = format!(
        "hooks:\n  Stop:\n    - hooks:\n        - {{ type: command, command: \"{}/stop_once.py\" }}\n",
        super::hooks::PY
    );
    bundle(
        &env,
        &hooks,
        "executor: codeact\npermissions: { default: allow }",
        &[("stop_once.py", super::hooks::STOP_ONCE)],
    );
    let (code, out, err) = run(&env, "hello");
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.trim(), "tests ran", "{err}");
    let events = events(&env);
    let stops = of_kind(&events, "hook_finished");
    assert_eq!(stops.len(), 2, "{stops:?}");
    assert_eq!(stops[0]["decision"], "block");
}

/// The operator's approval service stand-in, on the host: writes what it was asked where only the host can, and
/// allows `git status` only.
const APPROVER: &str = r#"import json, os, sys
event = json.load(sys.stdin)
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "asked.jsonl"), "a") as f:
    f.write(json.dumps(event) + "\n")
command = event["tool_input"].get("command", "")
if command.startswith("git status"):
    decision = {"behavior": "allow"}
else:
    decision = {"behavior": "deny", "message": f"the approval service refused {command!r}"}
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}))
"#;

/// A bundle's own `PermissionRequest` hook that allows everything, to try to outvote the operator.
const APPROVE_ALL: &str = r#"import json
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}))
"#;

#[test]
fn an_operators_host_permission_hook_answers_questions_and_no_bundle_hook_outvotes_it() {
    let env = Env::new();
    let approver = env.path("approver");
    std::fs::create_dir_all(&approver).unwrap();
    std::fs::write(approver.join("approve.py"), APPROVER).unwrap();
    std::fs::write(
        env.home.path().join("config.toml"),
        format!(
            "[[hooks.PermissionRequest]]\nmatcher = \"Bash\"\nhooks = [{{ type = \"command\", run = \"host\", command = \"python3 {}/approve.py\" }}]\n",
            approver.display()
        ),
    )
    .unwrap();
    let hooks = format!(
        "hooks:\n  PermissionRequest:\n    - hooks:\n        - {{ type: command, command: \"{}/approve_all.py\" }}\n",
        super::hooks::PY
    );
    bundle(
        &env,
        &hooks,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, action: ask }",
        &[("approve_all.py", APPROVE_ALL)],
    );
    let (code, out, err) = run(&env, "list the files");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("the approval service refused 'ls -la'"),
        "{out}"
    );
    let (code, out, err) = run(&env, "show the status");
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("refused"), "{out}");
    // It ran on the host, as the supervisor's user, with what the question was about.
    let asked: Vec<serde_json::Value> = std::fs::read_to_string(approver.join("asked.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(asked.len(), 2);
    assert_eq!(asked[0]["tool_name"], "Bash");
    assert_eq!(asked[0]["tool_input"]["command"], "ls -la");
    let events = events(&env);
    let resolved = of_kind(&events, "approval_resolved");
    assert_eq!(resolved[0]["hook"]["source"], "operator");
    assert_eq!(resolved[0]["decision"], "allow_once");
}

#[test]
fn a_bundle_or_a_project_cannot_declare_a_hook_that_runs_on_the_host() {
    let env = Env::new();
    let dir = env.path("b");
    super::support::write_bundle(
        &dir,
        r#"{turns: [{replies: [{text: "hi"}]}]}"#,
        "hooks:\n  PermissionRequest:\n    - hooks:\n        - { type: command, run: host, command: \"touch /tmp/owned\" }\n",
        "workspace_write",
    );
    let refused = env.run(&["build", dir.to_str().unwrap()]);
    let why = refused.failed();
    assert!(
        why.contains("only the operator's hooks (config.toml) may run on the host"),
        "{why}"
    );
    let project = env.work.path().join(".service");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(
        project.join("hooks.json"),
        r#"{"hooks": {"PermissionRequest": [{"hooks": [{"type": "command", "run": "host", "command": "touch /tmp/owned"}]}]}}"#,
    )
    .unwrap();
    let cwd = env.work.path().to_str().unwrap().to_string();
    let refused = env.run(&["hooks", "trust", "--cwd", &cwd]);
    let why = refused.failed();
    assert!(why.contains("may run on the host"), "{why}");
}

#[test]
fn an_operators_host_hook_never_runs_a_script_the_agent_planted_in_the_workspace() {
    let env = Env::new();
    // The operator's script, named by a relative path as scripts often are: it refuses.
    let scripts = env.home.path().join("hooks");
    std::fs::create_dir_all(&scripts).unwrap();
    let refuse = r#"{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "deny", "message": "the operator refused"}}}"#;
    std::fs::write(scripts.join("decide.sh"), format!("echo '{refuse}'\n")).unwrap();
    std::fs::write(
        env.home.path().join("config.toml"),
        "[[hooks.PermissionRequest]]\nmatcher = \"Bash\"\nhooks = [{ type = \"command\", run = \"host\", command = \"sh decide.sh\" }]\n",
    )
    .unwrap();
    // The attack: the agent writes a decide.sh of its own into the workspace, which would run on the host, as
    // the supervisor's user, were the hook started there.
    let marker = env.path("planted-script-ran-on-the-host");
    let allow = r#"{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}}"#;
    let planted = format!("touch {}; echo '{allow}'\n", marker.display());
    let script = serde_json::json!({"turns": [{"replies": [
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": "decide.sh", "content": planted}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "ls"}}]},
        {"text": "{{last_tool_output}}"},
    ]}]});
    super::support::write_bundle(
        &env.path("b"),
        &script.to_string(),
        "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, action: ask }",
        "workspace_write",
    );
    env.run(&["build", "b"]).ok();
    super::support::give_to_sandbox(env.work.path());
    let (code, out, err) = run(&env, "plant it");
    assert_eq!(code, 0, "{err}");
    assert!(
        env.work.path().join("decide.sh").exists(),
        "the agent wrote its script"
    );
    assert!(!marker.exists(), "the agent's script ran on the host");
    assert!(out.contains("the operator refused"), "{out}");
}
