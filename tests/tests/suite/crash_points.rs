//! Crash points: `serve` killed (SIGKILL, by `SERVICE_FAULT_POINT`) between two writes of a turn whose order
//! matters, then started again on the same store, files or PostgreSQL (`SERVICE_TEST_STORE=postgres`). Right after
//! the restart, the list shows no turn running, every `turn_started` ends exactly once, no end is journaled for a
//! turn that never started, and the session goes on. A killed server's spare workspaces are gone after the restart.

use std::time::Duration;

use serde_json::{json, Value};
use tempfile::TempDir;

use super::http_client::{task, Api};
use super::support::{write_bundle, Server};

const TOKEN: &str = "crash-points-token";
const SCRIPT: &str = r#"{turns: [{replies: [{text: "the answer"}]}]}"#;

fn serve(home: &TempDir, fault: Option<&str>) -> Api {
    let envs: Vec<(&str, &str)> = fault
        .map(|f| ("SERVICE_FAULT_POINT", f))
        .into_iter()
        .collect();
    Api::with_token(
        Server::start(home.path(), &["--token", TOKEN], &envs),
        TOKEN,
    )
}

/// The session's turns as the journal has them: for each `turn_started`, the types of the events that ended it.
pub(super) async fn ends(api: &Api, id: &str) -> Vec<Vec<String>> {
    let (status, journal) = api.get(&format!("/sessions/{id}/journal")).await;
    assert_eq!(status, 200, "{journal}");
    let mut turns: Vec<(String, Vec<String>)> = Vec::new();
    for event in journal.as_array().unwrap() {
        let payload = &event["payload"];
        let kind = payload["type"].as_str().unwrap_or_default().to_string();
        let turn = payload["payload"]["turn_id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match kind.as_str() {
            "turn_started" => turns.push((turn, Vec::new())),
            "turn_completed" | "error" if !turn.is_empty() => {
                let started = turns.iter_mut().find(|(t, _)| *t == turn);
                let started = started.unwrap_or_else(|| panic!("an end without a start: {event}"));
                started.1.push(kind);
            }
            _ => {}
        }
    }
    turns.into_iter().map(|(_, e)| e).collect()
}

/// The record of `id` as the list shows it.
/// The turns' ends once every turn the journal started has one, or as they are after ten seconds.
async fn repaired(api: &Api, id: &str) -> Vec<Vec<String>> {
    let began = std::time::Instant::now();
    loop {
        let turns = ends(api, id).await;
        if turns.iter().all(|t| !t.is_empty()) || began.elapsed() > Duration::from_secs(10) {
            return turns;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn listed(api: &Api, id: &str) -> Value {
    let (_, list) = api.get("/sessions").await;
    list.as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == id)
        .cloned()
        .unwrap()
}

/// Runs a turn on a server that dies at its fault point: the request fails with the connection.
async fn die_at(api: &Api, id: &str) {
    let answer = api
        .req(reqwest::Method::POST, &format!("/sessions/{id}/run-sync"))
        .json(&json!({"input": task("hi")}))
        .timeout(Duration::from_secs(20))
        .send()
        .await;
    assert!(answer.is_err(), "the server answered: {answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_after_a_turns_end_was_saved_the_restart_journals_that_end_once() {
    let (home, bundle) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    write_bundle(bundle.path(), SCRIPT, "", "read_only");
    let path = bundle.path().to_str().unwrap();
    let first = serve(&home, Some("after_turn_end_saved"));
    let id = first.session(path).await;
    die_at(&first, &id).await;
    drop(first);

    let api = serve(&home, None);
    listed(&api, &id).await;
    // Over PostgreSQL the restarted node repairs the session it finds listed while the listing is answered: the
    // journal may be read before that repair has journaled the end.
    let turns = repaired(&api, &id).await;
    let record = listed(&api, &id).await;
    assert_ne!(record["status"], "running", "{record}");
    // The turn was never acknowledged: over PostgreSQL the writes it queued may all have died with the process
    // (a commit is all or nothing), so the journal may not have it at all; where it has it, it ends once.
    assert!(turns.len() <= 1, "{turns:?}");
    assert_eq!(record["turn_count"], turns.len(), "{record} {turns:?}");
    assert!(
        turns.iter().all(|t| t.len() == 1),
        "one end each: {turns:?}"
    );
    // The end says what the record says: completed with its answer when the answer was saved, failed when not.
    let (_, journal) = api.get(&format!("/sessions/{id}/journal")).await;
    let end = journal
        .as_array()
        .unwrap()
        .last()
        .map_or(Value::Null, |e| e["payload"].clone());
    match end["type"].as_str() {
        Some("turn_completed") => {
            assert_eq!(end["payload"]["final_message"], "the answer");
            assert_eq!(record["last_turn"]["status"], "completed", "{record}");
        }
        // Cut while it ran: interrupted; ended but its end not saved: failed.
        Some("error") => {
            let cut = end["payload"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("while this turn ran"));
            let want = if cut { "interrupted" } else { "failed" };
            assert_eq!(record["last_turn"]["status"], want, "{record} {end}");
        }
        _ => assert!(turns.is_empty(), "{end}"),
    }
    // The session goes on.
    let (status, body) = api
        .post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("again")}),
        )
        .await;
    assert_eq!(
        (status, &body["final_message"]),
        (200, &json!("the answer")),
        "{body}"
    );
    assert_eq!(ends(&api, &id).await.len(), turns.len() + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_before_a_turn_started_the_restart_journals_no_end_and_the_session_is_idle() {
    let (home, bundle) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    write_bundle(bundle.path(), SCRIPT, "", "read_only");
    let path = bundle.path().to_str().unwrap();
    let first = serve(&home, Some("before_turn_started"));
    let id = first.session(path).await;
    die_at(&first, &id).await;
    drop(first);

    let api = serve(&home, None);
    let record = listed(&api, &id).await;
    assert_eq!(record["status"], "idle", "{record}");
    assert_eq!(record["turn_count"], 0, "{record}");
    let (_, journal) = api.get(&format!("/sessions/{id}/journal")).await;
    assert!(
        !journal.to_string().contains("supervisor_restarted"),
        "no end for a turn that never started: {journal}"
    );
    assert!(ends(&api, &id).await.is_empty());
    let (status, _) = api
        .post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("again")}),
        )
        .await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_the_list_shows_no_running_turn_and_no_spare_workspace_is_left() {
    let (home, bundle) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 60"}}]}, {text: "woke"}]}]}"#,
        "permissions:\n  default: allow\n",
        "workspace_write",
    );
    let path = bundle.path().to_str().unwrap();
    let mut first = serve(&home, None);
    let id = first.session(path).await;
    let (status, _) = first
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task("sleep")}),
        )
        .await;
    assert_eq!(status, 202);
    let spares = home.path().join("run/workspaces");
    super::support::wait_until(
        Duration::from_secs(20),
        || {
            std::fs::read_dir(&spares)
                .map(|d| {
                    d.flatten()
                        .any(|e| e.file_name().to_string_lossy().starts_with("spare-"))
                })
                .unwrap_or(false)
        },
        || "no spare worker was started".to_string(),
    );
    first.server().child.kill().unwrap();
    first.server().child.wait().unwrap();
    drop(first);

    let api = serve(&home, None);
    let record = listed(&api, &id).await;
    assert_eq!(
        record["status"], "idle",
        "right after the restart: {record}"
    );
    assert_eq!(record["last_turn"]["status"], "interrupted", "{record}");
    assert_eq!(ends(&api, &id).await, vec![vec!["error".to_string()]]);
    let left: Vec<String> = std::fs::read_dir(&spares)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("spare-") && !n.contains(&format!("-{}-", api.server.child.id())))
        .collect();
    assert!(left.is_empty(), "the killed server's spares: {left:?}");
}
