//! Several `serve` nodes over one PostgreSQL database (`serve --store postgres://…`): any node answers for any
//! session, events stream from any node with the same ids, and a dead node's sessions go on elsewhere.

use std::time::{Duration, Instant};

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::http_client::{task, Api, Sse};
use super::postgres::Postgres;
use super::support::{edit, give_to_sandbox, write_bundle, Server};

pub(super) const TOKEN: &str = "client-token-1";
const CLUSTER: &str = "cluster-token-1";

/// A turn that answers at once, then one that runs a long command (to kill its node under it), then answers.
const SCRIPT: &str = r#"{turns: [
  {when: "hello", replies: [{text: "hello from the cluster"}]},
  {when: "long", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 60"}}]}, {text: "never"}]},
  {replies: [{text: "after the failover"}]},
]}"#;

/// A node named `id` over the database at `url`, with leases of `lease`.
pub(super) fn node(pg: &Postgres, id: &str, lease: &str) -> (TempDir, Api) {
    node_with(pg, id, lease, &[])
}

/// [`node`], with more `serve` arguments.
pub(super) fn node_with(pg: &Postgres, id: &str, lease: &str, more: &[&str]) -> (TempDir, Api) {
    node_with_config(pg, id, lease, more, "")
}

/// [`node_with`], its store's `config.toml` holding `config`.
pub(super) fn node_with_config(
    pg: &Postgres,
    id: &str,
    lease: &str,
    more: &[&str],
    config: &str,
) -> (TempDir, Api) {
    let home = TempDir::new().unwrap();
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let node = pg.node_args(id, CLUSTER, lease);
    let mut args = vec!["--token", TOKEN];
    args.extend(node.iter().map(String::as_str));
    args.extend_from_slice(more);
    let server = Server::start(home.path(), &args, &[]);
    (home, Api::with_token(server, TOKEN))
}

/// Writes into `dir` a bundle that lists each of `hosts` at `port` and, in one Bash call, curls `path` on each of
/// them; its answer is what curl printed.
pub(super) fn curl_bundle<H: AsRef<str>>(
    dir: &std::path::Path,
    hosts: &[H],
    port: &str,
    path: &str,
) {
    let curls: Vec<String> = hosts
        .iter()
        .map(|h| {
            let h = h.as_ref();
            format!("curl -sS --noproxy '' --max-time 5 http://{h}:{port}{path} 2>&1; echo")
        })
        .collect();
    let script = json!({"turns": [{"replies": [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": curls.join("\n")}}]},
        {"text": "result: {{last_tool_output}}"}]}]});
    write_bundle(dir, &script.to_string(), "", "workspace_write");
    let listed: Vec<String> = hosts
        .iter()
        .map(|h| format!("\"{}:{port}\"", h.as_ref()))
        .collect();
    edit(
        &dir.join("service.bundle.json5"),
        "network: []",
        &format!("network: [{}]", listed.join(", ")),
    );
}

/// Runs a turn with `run-sync` through `api`: its status code and result.
pub(super) async fn turn(api: &Api, id: &str, prompt: &str) -> (u16, Value) {
    api.post(
        &format!("/sessions/{id}/run-sync"),
        json!({"input": task(prompt)}),
    )
    .await
}

/// Every event of a stream up to and with the first of one of `kinds`.
async fn until_any(sse: &mut Sse, kinds: &[&str]) -> Vec<(u64, Value)> {
    let mut out = Vec::new();
    loop {
        let (id, event) = sse.next().await;
        let done = kinds.iter().any(|k| event["payload"]["type"] == *k);
        out.push((id.parse().unwrap(), event));
        if done {
            return out;
        }
    }
}

/// Nodes A and B over one database, with 2 s leases; a session made on B, watched from A, running a turn on B.
struct Watched {
    /// The nodes' homes and the directory both reach: bind them, or they are removed under the running nodes.
    _homes: (TempDir, TempDir, TempDir),
    a: Api,
    b: Api,
    id: String,
    watch: Sse,
    /// What `POST /sessions/{id}/run` answered.
    accepted: Value,
}

/// [`Watched`]: a turn of `prompt` in a session of the bundle in `bundle`, started on B. The session works in a
/// directory both nodes reach (a `cwd` under a `--workspace-root` they share), so either may run it: a session in
/// a node's own workspace runs on that node only (see `a_writable_sessions_turns_run_where_its_files_are`).
async fn watched_turn_on_b(pg: &Postgres, bundle: &std::path::Path, prompt: &str) -> Watched {
    let shared = TempDir::new().unwrap();
    give_to_sandbox(shared.path());
    let root = shared.path().to_str().unwrap();
    let (a_home, a) = node_with(pg, "a", "2s", &["--workspace-root", root]);
    let (b_home, b) = node_with(pg, "b", "2s", &["--workspace-root", root]);
    let (status, made) = b
        .post(
            "/sessions",
            json!({"bundle_ref": bundle.to_str().unwrap(), "cwd": root}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_string();
    let watch = a.events(&id, None).await;
    let (status, accepted) = b
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task(prompt)}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    Watched {
        _homes: (a_home, b_home, shared),
        a,
        b,
        id,
        watch,
        accepted,
    }
}

fn ids(events: &[(u64, Value)]) -> Vec<u64> {
    events.iter().map(|(id, _)| *id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_made_on_one_node_runs_on_a_second_and_streams_from_a_third() {
    let pg = Postgres::start();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SCRIPT, "", "workspace_write");
    let (_a_home, a) = node(&pg, "a", "10s");
    let (_b_home, b) = node(&pg, "b", "10s");
    let (_c_home, c) = node(&pg, "c", "10s");

    let id = a.session(bundle.path().to_str().unwrap()).await;
    let (status, listed) = c.get("/sessions").await;
    assert_eq!(status, 200);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == id.as_str()),
        "{listed}"
    );

    let mut from_c = c.events(&id, None).await;
    let (status, result) = turn(&b, &id, "hello").await;
    assert_eq!(
        (status, result["status"].as_str()),
        (200, Some("completed")),
        "{result}"
    );
    assert_eq!(result["final_message"], "hello from the cluster");

    let streamed = until_any(&mut from_c, &["turn_completed"]).await;
    let expected: Vec<u64> = (1..=streamed.len() as u64).collect();
    assert_eq!(
        ids(&streamed),
        expected,
        "node c streams node b's events densely, in order"
    );
    let (status, journal) = a.get(&format!("/sessions/{id}/journal")).await;
    assert_eq!(status, 200);
    let journaled: Vec<Value> = journal.as_array().unwrap().clone();
    assert_eq!(
        streamed.iter().map(|(_, e)| e.clone()).collect::<Vec<_>>(),
        journaled,
        "the same events, with the same ids, on every node"
    );

    // Resuming on node a from the middle of the turn gives the rest, once each.
    let middle = streamed.len() as u64 / 2;
    let mut resumed = a.events(&id, Some(&middle.to_string())).await;
    let rest = until_any(&mut resumed, &["turn_completed"]).await;
    assert_eq!(
        ids(&rest),
        (middle + 1..=streamed.len() as u64).collect::<Vec<_>>()
    );

    // A hostile client posing as a node: the forwarding header without the cluster token, or with a wrong one, is
    // refused before anything runs, on the node that would forward and on the owner alike.
    let forged = reqwest::Client::new();
    for (node, token) in [
        (&a, None),
        (&a, Some("not-the-cluster-token")),
        (&b, Some("x")),
    ] {
        let mut request = forged
            .post(node.url(&format!("/sessions/{id}/run-sync")))
            .header("x-service-forwarded-by", "b")
            .json(&json!({"input": task("hello")}));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401, "{token:?}");
    }

    // Node b holds the session: a turn sent to node a is forwarded there, and answered.
    let (status, record) = a.get(&format!("/sessions/{id}")).await;
    assert_eq!(
        (status, record["turn_count"].as_u64()),
        (200, Some(1)),
        "{record}"
    );
    let (status, again) = turn(&a, &id, "hello").await;
    assert_eq!(
        (status, again["status"].as_str()),
        (200, Some("completed")),
        "{again}"
    );
    let (_, record) = c.get(&format!("/sessions/{id}")).await;
    assert_eq!(record["turn_count"], 2, "{record}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_owner_costs_one_turn_marked_node_lost_and_the_next_turn_runs_elsewhere() {
    let pg = Postgres::start();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SCRIPT, "", "workspace_write");
    let lease = Duration::from_secs(2);
    let Watched {
        _homes,
        a,
        mut b,
        id,
        mut watch,
        accepted,
        ..
    } = watched_turn_on_b(&pg, bundle.path(), "long").await;
    let before = until_any(&mut watch, &["exec_command_begin"]).await;

    // Past two leases, the owner still holds the session (it renews its lease): a turn sent to the other node is
    // forwarded to it, and refused there because its turn runs.
    tokio::time::sleep(lease * 2).await;
    let (status, busy) = turn(&a, &id, "next").await;
    assert_eq!(
        (status, busy["error"]["code"].as_str()),
        (409, Some("turn_in_progress")),
        "{busy}"
    );

    // The owner dies mid-command.
    let killed = Instant::now();
    b.server().child.kill().unwrap();
    b.server().child.wait().unwrap();

    // The next turn, sent to the surviving node, runs once the dead node's lease has expired.
    let answered = loop {
        let (status, result) = turn(&a, &id, "next").await;
        if status == 200 {
            break result;
        }
        assert_eq!(status, 503, "until the lease expires: {result}");
        assert!(
            ["owned_elsewhere", "owner_unreachable"]
                .contains(&result["error"]["code"].as_str().unwrap()),
            "{result}"
        );
        assert!(
            killed.elapsed() < lease * 5,
            "no takeover after {:?}: {result}",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(answered["status"], "completed", "{answered}");
    assert_eq!(answered["final_message"], "after the failover");
    assert!(
        killed.elapsed() < lease + Duration::from_secs(3),
        "failover took {:?}",
        killed.elapsed()
    );
    // The surviving node counts the takeover, and what the dead node's requests cost it.
    let metrics = a
        .req(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("service_takeovers_total 1\n"), "{metrics}");
    assert!(
        metrics.contains("service_nodes_lost_total 1\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("service_forward_failures_total{reason=\"unreachable\"}"),
        "{metrics}"
    );

    // The subscriber on the surviving node saw every event once, in order: the lost turn's failure, then the next
    // turn.
    let after = until_any(&mut watch, &["turn_completed"]).await;
    let all: Vec<(u64, Value)> = before.into_iter().chain(after).collect();
    assert_eq!(ids(&all), (1..=all.len() as u64).collect::<Vec<_>>());
    let lost = all
        .iter()
        .find(|(_, e)| e["payload"]["type"] == "error")
        .expect("an error event ends the lost turn");
    assert_eq!(
        lost.1["payload"]["payload"]["code"], "node_lost",
        "{}",
        lost.1
    );
    assert_eq!(
        lost.1["payload"]["payload"]["turn_id"], accepted["turn_id"],
        "{}",
        lost.1
    );
    let (_, record) = a.get(&format!("/sessions/{id}")).await;
    assert_eq!(record["last_turn"]["status"], "completed", "{record}");
}

/// Every event kind from `events`.
fn kinds_of(events: &[(u64, Value)]) -> Vec<String> {
    events
        .iter()
        .map(|(_, e)| {
            e["payload"]["type"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_answered_on_any_node_reaches_the_owner_and_allow_always_survives_its_death() {
    let pg = Postgres::start();
    let bundle = TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{tool_calls: [{name: "Bash", arguments: {command: "touch asked"}}]}, {text: "touched"}]}]}"#,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, match: \"touch *\", action: ask }\n",
        "workspace_write",
    );
    // B runs the turn; the operator watches and answers on A.
    let Watched {
        _homes,
        a,
        mut b,
        id,
        mut watch,
        ..
    } = watched_turn_on_b(&pg, bundle.path(), "touch").await;
    let asked = until_any(&mut watch, &["permission_requested"]).await;
    let request = asked.last().unwrap().1["payload"]["payload"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, unknown) = a
        .post(
            "/approvals/00000000-0000-4000-8000-000000000000",
            json!({"decision": "allow_once"}),
        )
        .await;
    assert_eq!(
        (status, unknown["error"]["code"].as_str()),
        (404, Some("approval_not_found")),
        "{unknown}"
    );
    let (status, answered) = a
        .post(
            &format!("/approvals/{request}"),
            json!({"decision": "allow_always"}),
        )
        .await;
    assert_eq!(status, 200, "{answered}");
    let rest = until_any(&mut watch, &["turn_completed"]).await;
    assert_eq!(
        rest[0].1["payload"]["type"],
        "approval_resolved",
        "{:?}",
        kinds_of(&rest)
    );
    let (status, again) = a
        .post(
            &format!("/approvals/{request}"),
            json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(
        (status, again["error"]["code"].as_str()),
        (409, Some("approval_not_pending")),
        "{again}"
    );

    // The owner dies; the node that takes the session over does not ask again.
    b.server().child.kill().unwrap();
    b.server().child.wait().unwrap();
    let started = Instant::now();
    let result = loop {
        // A turn that asked again would wait for an answer.
        let (status, result) =
            tokio::time::timeout(Duration::from_secs(20), turn(&a, &id, "touch"))
                .await
                .expect("the turn on the new owner waits: it asked again");
        if status == 200 {
            break result;
        }
        assert_eq!(status, 503, "until the lease expires: {result}");
        assert!(started.elapsed() < Duration::from_secs(15), "{result}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(result["status"], "completed", "{result}");
    assert_eq!(result["final_message"], "touched", "{result}");
    let after = until_any(&mut watch, &["turn_completed"]).await;
    assert!(
        !kinds_of(&after).contains(&"permission_requested".to_string()),
        "{:?}",
        kinds_of(&after)
    );
}

/// The record of an idle session `id` that has run no turn, for tests that drive a store directly.
pub(super) fn idle_record(id: &str) -> service_supervisor::runtime::SessionRecord {
    serde_json::from_value(json!({
        "id": id, "bundle_ref": "b",
        "bundle": {"reference": "b", "id": "b", "version": "1.0.0", "digest": "d"},
        "created_at": "2026-11-24T00:00:00.000Z", "updated_at": "2026-11-24T00:00:00.000Z",
        "cwd": "/", "status": "idle", "active_turn": null, "turn_count": 0, "last_turn": null
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_appending_to_one_session_keep_its_sequence_dense() {
    use service_supervisor::runtime::store::postgres::{Node, PgStore};
    use service_supervisor::runtime::store::Store;

    let pg = Postgres::start();
    let node = |id: &str| Node {
        id: id.into(),
        url: format!("http://{id}.invalid"),
    };
    let x = PgStore::connect(&pg.url(), node("x"), Duration::from_secs(5))
        .await
        .unwrap();
    let y = PgStore::connect(&pg.url(), node("y"), Duration::from_secs(5))
        .await
        .unwrap();
    let record = idle_record("6f1c2b9e-0000-4000-8000-000000000001");
    x.insert(&record).await.unwrap();
    let quiet: service_supervisor::runtime::store::Publish = std::sync::Arc::new(|_| {});
    let logs = [
        x.open_log(&record.id, quiet.clone()).await.unwrap(),
        y.open_log(&record.id, quiet).await.unwrap(),
    ];
    let delta = |n: usize| service_ipc::EventPayload::AgentMessageDelta {
        turn_id: "t".into(),
        delta: format!("d{n}"),
    };
    let (mut total, mut lines) = (0, 0);
    for round in 0..200 {
        for (i, log) in logs.iter().enumerate() {
            let n = 1 + (round + i) % 4;
            log.append_events((0..n).map(delta).collect()).unwrap();
            total += n;
            // History lines too, some in commits without events: a commit that loses the race writes none.
            if round % 3 == i {
                let line = json!({"role": "user", "content": format!("{round}.{i}")}).to_string();
                log.append_history_lines(vec![line]).unwrap();
                lines += 1;
            }
        }
    }
    for log in &logs {
        let (tx, rx) = tokio::sync::oneshot::channel();
        log.after_stored(Box::new(move || {
            let _ = tx.send(());
        }));
        rx.await.unwrap();
    }
    let events = logs[1].read_events(0, u64::MAX >> 1).await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs,
        (1..=total as u64).collect::<Vec<_>>(),
        "dense, no duplicate"
    );
    assert!(events.iter().all(|e| e.msg.id == e.seq.to_string()));
    let history = logs[0].history_lines(u64::MAX >> 1).await.unwrap();
    assert_eq!(history.len(), lines, "each history line once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_database_away_for_five_seconds_under_a_turn_loses_no_event() {
    let pg = Postgres::start();
    let bundle = TempDir::new().unwrap();
    let words: String = (0..30).map(|i| format!("w{i} ")).collect();
    let script = format!(
        r#"{{turns: [{{replies: [{{text: "{}", delay_ms: 100}}]}}]}}"#,
        words.trim_end()
    );
    write_bundle(bundle.path(), &script, "", "workspace_write");
    let (_home, a) = node(&pg, "a", "30s");
    let id = a.session(bundle.path().to_str().unwrap()).await;
    let mut watch = a.events(&id, None).await;
    let (status, _) = a
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task("slow")}),
        )
        .await;
    assert_eq!(status, 202);
    watch.next().await;

    pg.ctl("stop");
    // While it is away, what needs it fails with 503 and says when to retry; the turn goes on.
    let response = a
        .req(reqwest::Method::GET, "/sessions")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 503);
    assert!(response.headers().contains_key("retry-after"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "store_unavailable", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("127.0.0.1"),
        "{body}"
    );
    let (status, _) = a.get("/readyz").await;
    assert_eq!(status, 503);
    tokio::time::sleep(Duration::from_secs(5)).await;
    pg.ctl("start");

    let rest = until_any(&mut watch, &["turn_completed", "error"]).await;
    assert_eq!(rest.last().unwrap().1["payload"]["type"], "turn_completed");
    let (status, journal) = a.get(&format!("/sessions/{id}/journal")).await;
    assert_eq!(status, 200, "{journal}");
    let journal = journal.as_array().unwrap();
    assert_eq!(journal.len(), rest.len() + 1, "every event was stored");
    let text: String = journal
        .iter()
        .filter(|e| e["payload"]["type"] == "agent_message_delta")
        .map(|e| {
            e["payload"]["payload"]["delta"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(text, words.trim_end());
    let (status, _) = a.get("/readyz").await;
    assert_eq!(status, 200);
}

/// An OpenAI-compatible request that continues a session another node runs is sent on to that node, and its answer
/// (with the session header) comes back through the first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_completion_continuing_a_session_of_another_node_is_forwarded_there() {
    let pg = Postgres::start();
    let (_ha, a) = node(&pg, "a", "10s");
    let (_hb, b) = node(&pg, "b", "10s");
    let bundle = TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{text: "hello from the owner"}]}]}"#,
        "",
        "workspace_write",
    );
    let model = bundle.path().to_str().unwrap();
    let chat = |base: String, session: Option<String>| async move {
        let mut req = reqwest::Client::new()
            .post(format!("{base}/v1/chat/completions"))
            .bearer_auth(TOKEN)
            .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}));
        if let Some(s) = session {
            req = req.header("x-service-session", s);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let session = resp
            .headers()
            .get("x-service-session")
            .map(|v| v.to_str().unwrap().to_string());
        (status, session, resp.json::<Value>().await.unwrap())
    };
    let (status, session, body) = chat(a.server.base.clone(), None).await;
    assert_eq!(status, 200, "{body}");
    let session = session.unwrap();
    // a keeps the session's worker, so b must send the next turn there.
    let (status, again, body) = chat(b.server.base.clone(), Some(session.clone())).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(again.as_deref(), Some(session.as_str()));
    assert_eq!(
        body["choices"][0]["message"]["content"],
        "hello from the owner"
    );
    let record = a.get(&format!("/sessions/{session}")).await;
    assert_eq!(record.1["turn_count"], 2, "{:?}", record);
}

/// A2A: a task started on one node is read, cancelled and continued through another; each request that needs the
/// session's worker goes to its owner, and every node reads the task from the shared journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_a2a_task_started_on_one_node_is_followed_and_cancelled_through_another() {
    let pg = Postgres::start();
    let (ha, a) = node(&pg, "a", "10s");
    let (hb, b) = node(&pg, "b", "10s");
    let bundle = TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{when: "sleep", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 353"}}]}, {text: "woke"}]},
                    {replies: [{text: "hello from the owner"}]}]}"#,
        "",
        "workspace_write",
    );
    // A2A serves installed bundles: each node has it in its own store.
    for home in [ha.path(), hb.path()] {
        let built = std::process::Command::new(super::support::binary())
            .env("SERVICE_HOME", home)
            .args(["build", bundle.path().to_str().unwrap()])
            .output()
            .unwrap();
        assert!(built.status.success(), "{built:?}");
    }
    let rpc = |method: &str, params: Value| json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let message = |text: &str| {
        json!({"message": {"messageId": "m", "role": "ROLE_USER", "contextId": "ctx-cluster",
            "parts": [{"text": text}]}, "configuration": {"returnImmediately": true}})
    };
    let (_, started) = a
        .post("/a2a/fixture", rpc("SendMessage", message("sleep now")))
        .await;
    let task = started["result"]["task"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut state = String::new();
    for _ in 0..100 {
        let (_, got) = b
            .post("/a2a/fixture", rpc("GetTask", json!({"id": task})))
            .await;
        state = got["result"]["status"]["state"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if state == "TASK_STATE_WORKING" && super::support::processes_with("sleep 353") > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(state, "TASK_STATE_WORKING");
    let (_, canceled) = b
        .post("/a2a/fixture", rpc("CancelTask", json!({"id": task})))
        .await;
    assert_eq!(
        canceled["result"]["status"]["state"], "TASK_STATE_CANCELED",
        "{canceled}"
    );
    super::support::wait_until(
        std::time::Duration::from_secs(10),
        || super::support::processes_with("sleep 353") == 0,
        || "the cancelled command still runs".into(),
    );
    let mut blocking = message("hi");
    blocking["configuration"]["returnImmediately"] = json!(false);
    let (_, next) = b.post("/a2a/fixture", rpc("SendMessage", blocking)).await;
    let next = &next["result"]["task"];
    assert_eq!(next["contextId"], "ctx-cluster", "{next}");
    assert_eq!(
        next["artifacts"][0]["parts"][0]["text"],
        "hello from the owner"
    );
    let (_, listed) = a
        .post(
            "/a2a/fixture",
            rpc("ListTasks", json!({"contextId": "ctx-cluster"})),
        )
        .await;
    assert_eq!(listed["result"]["totalSize"], 2, "{listed}");
}
