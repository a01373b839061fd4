//! Subagents through real workers and sandboxes: a parent's `Agent` calls run as child sessions, confined to the
//! intersection of their bundle's sandbox and the parent's, with their approvals on the parent's stream.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use service_ipc::{EventMsg, EventPayload, Task, TurnOverrides, TurnStatus};
use service_supervisor::ServiceRuntime;
use tempfile::TempDir;

use super::egress::Upstream;
use super::http_client::{task, Api};
use super::support::{
    final_message, processes_with, run_turn, runtime, runtime_with, sandbox_tempdir, wait_until,
    Env, Server,
};

/// A scripted bundle `id` in `dir`: the sandbox `mode` reaching `network`, the `tools`, agent.yaml's `extra`
/// keys, and the model's `replies` to every prompt.
pub(super) fn bundle(
    dir: &Path,
    id: &str,
    mode: &str,
    network: &[String],
    extra: Value,
    replies: Value,
) {
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(
        dir.join("service.bundle.json5"),
        json!({
            "manifest_version": "service.bundle/v1", "id": id, "version": "1.0.0",
            "tools": ["Read", "Write", "Bash"],
            "sandbox": {"mode": mode, "permissions": {"network": network}},
        })
        .to_string(),
    )
    .unwrap();
    let mut agent = json!({
        "model": {"provider": "scripted", "name": "s", "config": {"script": "resources/script.json5"}},
    });
    agent
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    std::fs::write(dir.join("agent.yaml"), agent.to_string()).unwrap();
    std::fs::write(
        dir.join("resources/script.json5"),
        json!({"turns": [{"replies": replies}]}).to_string(),
    )
    .unwrap();
}

/// A bundle with no network and nothing added to agent.yaml.
pub(super) fn plain(dir: &Path, id: &str, mode: &str, replies: Value) {
    bundle(dir, id, mode, &[], json!({}), replies);
}

/// A new session of the bundle in `dir`, working in `cwd` (its own workspace when None).
pub(super) async fn session(rt: &ServiceRuntime, dir: &Path, cwd: Option<&Path>) -> String {
    rt.create_session(dir.to_str().unwrap(), cwd)
        .await
        .unwrap()
        .id
}

pub(super) fn agent_call(subagent: &str, prompt: &str) -> Value {
    json!({"name": "Agent", "arguments": {"subagent": subagent, "prompt": prompt}})
}

pub(super) fn subagent(name: &str, dir: &Path) -> Value {
    json!({"name": name, "bundle": dir.to_str().unwrap(), "description": format!("the {name}")})
}

pub(super) fn tool_results(events: &[EventMsg]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolCallFinished { tool, output, .. } => {
                Some((tool.clone(), output.clone()))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_children_run_at_once_each_within_the_parents_sandbox_and_deleting_the_parent_deletes_them(
) {
    let allowed = Upstream::start(None);
    let other = Upstream::start(None);
    let (a, b) = (allowed.port, other.port);
    let home = TempDir::new().unwrap();
    let dirs = TempDir::new().unwrap();
    let (parent, reader, writer) = (
        dirs.path().join("parent"),
        dirs.path().join("reader"),
        dirs.path().join("writer"),
    );
    // The reader is read-only; it tries to write anyway. The writer's bundle asks for both servers; the parent
    // allows only the first. Each child's reply streams slowly, so both run at once.
    plain(
        &reader,
        "reader",
        "read_only",
        json!([
            {"delay_ms": 150, "text": "", "tool_calls": [{"name": "Write", "arguments": {"file_path": "from-reader.txt", "content": "x"}}]},
            {"text": "reader: {{last_tool_output}}"},
        ]),
    );
    let curl = format!(
        "curl -sS -m 5 http://127.0.0.1:{a}/a; curl -sS -m 5 http://127.0.0.1:{b}/b; \
         echo written > from-writer.txt"
    );
    bundle(
        &writer,
        "writer",
        "workspace_write",
        &[format!("127.0.0.1:{a}"), format!("127.0.0.1:{b}")],
        json!({}),
        json!([
            {"delay_ms": 150, "text": "", "tool_calls": [{"name": "Bash", "arguments": {"command": curl}}]},
            {"text": "writer: {{last_tool_output}}"},
        ]),
    );
    bundle(
        &parent,
        "parent",
        "workspace_write",
        &[format!("127.0.0.1:{a}")],
        json!({"subagents": [subagent("reader", &reader), subagent("writer", &writer)]}),
        json!([
            {"tool_calls": [agent_call("reader", "write a file"), agent_call("writer", "fetch both")]},
            {"text": "done"},
        ]),
    );
    let cwd = sandbox_tempdir();
    let rt = runtime(home.path());
    let id = session(&rt, &parent, Some(cwd.path())).await;
    let (outcome, events) = run_turn(&rt, &id, "delegate").await;
    assert_eq!(outcome.status, TurnStatus::Completed, "{:?}", outcome.error);

    // Both started before either finished.
    let order: Vec<&str> = events
        .iter()
        .map(|e| e.payload.kind())
        .filter(|k| k.starts_with("subagent_"))
        .collect();
    assert_eq!(
        order,
        [
            "subagent_started",
            "subagent_started",
            "subagent_finished",
            "subagent_finished"
        ]
    );
    let results = tool_results(&events);
    assert_eq!(results.len(), 2, "{results:?}");
    let reader_says = &results
        .iter()
        .find(|(_, o)| o.starts_with("reader:"))
        .unwrap()
        .1;
    let writer_says = &results
        .iter()
        .find(|(_, o)| o.starts_with("writer:"))
        .unwrap()
        .1;
    assert!(
        reader_says.contains("Read-only file system"),
        "{reader_says}"
    );
    assert!(!cwd.path().join("from-reader.txt").exists());
    assert!(
        writer_says.contains(&format!("upstream 127.0.0.1:{a} /a")),
        "{writer_says}"
    );
    assert!(
        writer_says.contains(&format!("127.0.0.1:{b} is not allowed")),
        "the proxy refuses what only the child's bundle lists: {writer_says}"
    );
    assert!(
        !writer_says.contains(&format!("upstream 127.0.0.1:{b}")),
        "{writer_says}"
    );
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("from-writer.txt")).unwrap(),
        "written\n",
        "the child works in the parent's workspace"
    );

    // The records: children under their parent, with the ceilings they ran under.
    let sessions = rt.list_sessions().await.unwrap();
    let children: Vec<_> = sessions.iter().filter(|s| s.parent.is_some()).collect();
    assert_eq!(children.len(), 2);
    for child in &children {
        let link = child.parent.as_ref().unwrap();
        assert_eq!(link.session_id, id);
        assert_eq!(link.depth, 1);
        assert_eq!(child.turn_count, 1);
    }
    // The children's model calls count towards the parent's turn: two of its own, two for each child.
    assert_eq!(outcome.usage.model_calls, Some(6), "{:?}", outcome.usage);

    rt.delete_session(&id).await.unwrap();
    assert!(rt.list_sessions().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_in_a_child_is_answered_through_the_parents_stream_over_http() {
    let env = Env::new();
    let child = env.path("asker");
    bundle(
        &child,
        "asker",
        "workspace_write",
        &[],
        json!({"permissions": {"default": "allow", "rules": [{"tool": "Write", "action": "ask"}]}}),
        json!([
            {"tool_calls": [{"name": "Write", "arguments": {"file_path": "approved.txt", "content": "yes"}}]},
            {"text": "asker: {{last_tool_output}}"},
        ]),
    );
    let parent = env.path("boss");
    bundle(
        &parent,
        "boss",
        "workspace_write",
        &[],
        json!({"subagents": [subagent("asker", &child)]}),
        json!([
            {"tool_calls": [agent_call("asker", "write it")]},
            {"text": "boss: {{last_tool_output}}"},
        ]),
    );
    let api = Api::with_token(
        Server::start(env.home.path(), &["--token", "t0k"], &[]),
        "t0k",
    );
    let id = api.session(parent.to_str().unwrap()).await;
    let mut events = api.events(&id, None).await;
    let (status, body) = api
        .post(&format!("/sessions/{id}/run"), json!({"input": task("go")}))
        .await;
    assert_eq!(status, 202, "{body}");
    let seen = events.until("permission_requested").await;
    let asked = &seen.last().unwrap().1["payload"]["payload"];
    let started = seen
        .iter()
        .find(|(_, e)| e["payload"]["type"] == "subagent_started")
        .expect("subagent_started before the question");
    let child_id = started.1["payload"]["payload"]["child_session_id"].clone();
    assert_eq!(asked["child_session_id"], child_id, "{asked}");
    assert_eq!(asked["tool"], "Write");
    assert_eq!(
        asked["call_id"], started.1["payload"]["payload"]["call_id"],
        "the question sits under the parent's Agent call"
    );
    let (status, body) = api
        .post(
            &format!("/approvals/{}", asked["request_id"].as_str().unwrap()),
            json!({"decision": "allow_once"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let rest = events.until("turn_completed").await;
    let done = &rest.last().unwrap().1["payload"]["payload"];
    assert!(
        done["final_message"]
            .as_str()
            .unwrap()
            .starts_with("boss: asker: "),
        "{done}"
    );
    assert!(rest
        .iter()
        .any(|(_, e)| e["payload"]["type"] == "approval_resolved"
            && e["payload"]["payload"]["child_session_id"] == child_id));
    // The child's own stream has its question and its answer too.
    let (status, child) = api
        .get(&format!("/sessions/{}", child_id.as_str().unwrap()))
        .await;
    assert_eq!(status, 200, "{child}");
    assert_eq!(child["parent"]["session_id"], json!(id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_of_the_parent_kills_the_childrens_commands() {
    let home = TempDir::new().unwrap();
    let dirs = TempDir::new().unwrap();
    let marker = "307.25";
    let sleeper = dirs.path().join("sleeper");
    plain(
        &sleeper,
        "sleeper",
        "workspace_write",
        json!([
            {"tool_calls": [{"name": "Bash", "arguments": {"command": format!("sleep {marker}")}}]},
            {"text": "woke"},
        ]),
    );
    let parent = dirs.path().join("parent");
    bundle(
        &parent,
        "parent",
        "workspace_write",
        &[],
        json!({"subagents": [subagent("sleeper", &sleeper)]}),
        json!([
            {"tool_calls": [agent_call("sleeper", "sleep"), agent_call("sleeper", "sleep too")]},
            {"text": "done"},
        ]),
    );
    let rt = runtime(home.path());
    let id = session(&rt, &parent, None).await;
    let mut events = rt.subscribe_session(&id).await.unwrap();
    let pending = rt
        .start_turn(&id, Task::new("go"), TurnOverrides::default())
        .await
        .unwrap();
    let mut started = 0;
    while started < 2 {
        let msg = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .unwrap()
            .unwrap();
        if msg.payload.kind() == "subagent_started" {
            started += 1;
        }
    }
    wait_until(
        Duration::from_secs(10),
        || processes_with(&format!("sleep {marker}")) == 2,
        || "both children's commands did not start".into(),
    );
    rt.interrupt(&id).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(20), pending.outcome)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    wait_until(
        Duration::from_secs(10),
        || processes_with(&format!("sleep {marker}")) == 0,
        || "a child's command outlived the parent's interrupt".into(),
    );
    let children: Vec<_> = rt
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.parent.is_some())
        .collect();
    assert_eq!(children.len(), 2);
    for child in children {
        // The parent's turn ends first; each child's interrupt lands right after.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let status = loop {
            let record = rt.get_session(&child.id).await.unwrap();
            match record.last_turn.map(|t| t.status) {
                Some(status) => break status,
                None if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                None => panic!("child {} did not end", child.id),
            }
        };
        assert_eq!(status, TurnStatus::Interrupted, "{}", child.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_subagent_depth_a_child_has_no_agent_tool_and_no_grandchild_starts() {
    let home = TempDir::new().unwrap();
    let dirs = TempDir::new().unwrap();
    let leaf = dirs.path().join("leaf");
    plain(&leaf, "leaf", "read_only", json!([{"text": "leaf"}]));
    let mid = dirs.path().join("mid");
    bundle(
        &mid,
        "mid",
        "read_only",
        &[],
        json!({"subagents": [subagent("leaf", &leaf)]}),
        json!([
            {"tool_calls": [agent_call("leaf", "go deeper")]},
            {"text": "mid: {{last_tool_output}}"},
        ]),
    );
    let top = dirs.path().join("top");
    bundle(
        &top,
        "top",
        "read_only",
        &[],
        json!({"subagents": [subagent("mid", &mid)]}),
        json!([
            {"tool_calls": [agent_call("mid", "delegate")]},
            {"text": "top: {{last_tool_output}}"},
        ]),
    );
    let rt = runtime_with(home.path(), |o| o.max_subagent_depth = 1);
    let id = session(&rt, &top, None).await;
    let (_, events) = run_turn(&rt, &id, "go").await;
    let answer = final_message(&events);
    assert!(
        answer.starts_with("top: mid: tool \"Agent\" is not available"),
        "{answer}"
    );
    assert_eq!(rt.list_sessions().await.unwrap().len(), 2, "no grandchild");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_isolated_child_works_on_a_copy_and_sessions_lists_it_under_its_parent() {
    let env = Env::new();
    let scratch = env.path("scratch");
    plain(
        &scratch,
        "scratch",
        "workspace_write",
        json!([
            {"tool_calls": [{"name": "Bash", "arguments": {"command": "cat notes.txt; echo changed > notes.txt"}}]},
            {"text": "scratch: {{last_tool_output}}"},
        ]),
    );
    let parent = env.path("parent");
    let mut copy = subagent("scratch", &scratch);
    copy["isolation"] = json!("copy");
    bundle(
        &parent,
        "parent",
        "workspace_write",
        &[],
        json!({"subagents": [copy]}),
        json!([
            {"tool_calls": [agent_call("scratch", "try it")]},
            {"text": "parent: {{last_tool_output}}"},
        ]),
    );
    let cwd = sandbox_tempdir();
    std::fs::write(cwd.path().join("notes.txt"), "original\n").unwrap();
    super::support::give_to_sandbox(cwd.path());
    let rt = runtime(env.home.path());
    let id = session(&rt, &parent, Some(cwd.path())).await;
    let (_, events) = run_turn(&rt, &id, "go").await;
    assert_eq!(final_message(&events), "parent: scratch: original");
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("notes.txt")).unwrap(),
        "original\n",
        "the parent's workspace is untouched"
    );
    let child = rt
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.parent.is_some())
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(Path::new(&child.cwd).join("notes.txt")).unwrap(),
        "changed\n"
    );
    rt.shutdown("test done").await;
    // The CLI reads the files store; over PostgreSQL the records are the runtime's alone.
    if super::store_backend::postgres() {
        return;
    }
    let listed = env.run(&["sessions"]).ok().to_string();
    let lines: Vec<&str> = listed.lines().collect();
    let at = lines.iter().position(|l| l.starts_with(&id)).unwrap();
    assert!(
        lines[at + 1].starts_with(&format!("↳ {}", child.id)),
        "{listed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_agent_calls_in_one_reply_run_four_at_a_time() {
    let home = TempDir::new().unwrap();
    let dirs = TempDir::new().unwrap();
    let slow = dirs.path().join("slow");
    plain(
        &slow,
        "slow",
        "read_only",
        json!([{"text": "slow answer", "delay_ms": 100}]),
    );
    let parent = dirs.path().join("parent");
    let calls: Vec<Value> = (0..6)
        .map(|i| agent_call("slow", &format!("task {i}")))
        .collect();
    bundle(
        &parent,
        "parent",
        "read_only",
        &[],
        json!({"subagents": [subagent("slow", &slow)]}),
        json!([{"tool_calls": calls}, {"text": "all done"}]),
    );
    let rt = runtime(home.path());
    let id = session(&rt, &parent, None).await;
    let (outcome, events) = run_turn(&rt, &id, "fan out").await;
    assert_eq!(outcome.status, TurnStatus::Completed, "{:?}", outcome.error);
    let (mut running, mut most) = (0i32, 0i32);
    for e in &events {
        match e.payload.kind() {
            "subagent_started" => running += 1,
            "subagent_finished" => running -= 1,
            _ => continue,
        }
        most = most.max(running);
    }
    assert_eq!(most, 4, "at most four at once, and four did run together");
    let answers = tool_results(&events);
    assert_eq!(answers.len(), 6);
    assert!(
        answers.iter().all(|(_, out)| out == "slow answer"),
        "{answers:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codeact_program_hands_a_task_to_a_subagent_with_agent() {
    let home = TempDir::new().unwrap();
    let dirs = TempDir::new().unwrap();
    let helper = dirs.path().join("helper");
    plain(
        &helper,
        "helper",
        "read_only",
        json!([{"text": "helper heard: {{prompt}}"}]),
    );
    let parent = dirs.path().join("parent");
    bundle(
        &parent,
        "parent",
        "read_only",
        &[],
        json!({"executor": "codeact", "subagents": [subagent("helper", &helper)]}),
        json!([{"text": "```python\nfinal_answer(agent('helper', 'hello from code'))\n```"}]),
    );
    let rt = runtime(home.path());
    let id = session(&rt, &parent, None).await;
    let (_, events) = run_turn(&rt, &id, "go").await;
    assert_eq!(final_message(&events), "helper heard: hello from code");
    let made = super::codeact::calls(&events);
    assert_eq!(made.len(), 1, "{made:?}");
    assert_eq!(made[0].0, "Agent");
    assert!(made[0].1.is_some(), "the call names its program");
}
