//! Where a session's files are: a writable session in its own workspace keeps its files on the disk of the node
//! that made it. Its turns run there whichever node a client reaches, also after that node stopped its idle
//! worker, and when that node is gone its turns fail with `workspace_lost` instead of running in an empty
//! directory of another node's.

use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::cluster::{node_with, turn};
use super::postgres::Postgres;
use super::support::{binary, write_bundle};

const SCRIPT: &str = r#"{turns: [
  {when: "write", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo kept > notes.txt"}}]}, {text: "wrote"}]},
  {when: "read", replies: [{tool_calls: [{name: "Bash", arguments: {command: "cat notes.txt 2>&1"}}]}, {text: "read: {{last_tool_output}}"}]},
]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writable_sessions_turns_run_where_its_files_are_and_fail_workspace_lost_once_that_node_is_gone(
) {
    let pg = Postgres::start();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SCRIPT, "", "workspace_write");
    let bundle = bundle.path().to_str().unwrap();
    let lease = Duration::from_secs(2);
    // A stops an idle worker after a second (`serve`'s default is fifteen minutes), and lets go of its lease.
    let idle = ["--idle-timeout", "1s", "--empty-idle-timeout", "1s"];
    let (_a_home, mut a) = node_with(&pg, "a", "2s", &idle);
    let (b_home, b) = node_with(&pg, "b", "2s", &[]);
    // A client cannot pin a session to a node of its choice: the home is the server's to record.
    let (status, refused) = b
        .post(
            "/sessions",
            serde_json::json!({"bundle_ref": bundle, "home": "b"}),
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    let id = a.session(bundle).await;
    let (status, refused) = b
        .patch(
            &format!("/sessions/{id}"),
            serde_json::json!({"budget": null, "home": "b"}),
        )
        .await;
    assert_eq!(status, 422, "{refused}");
    assert_eq!(a.answer(&id, "write").await, "wrote");
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The next turn comes in through B: it runs on A, where notes.txt is.
    let (status, read) = turn(&b, &id, "read").await;
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["final_message"], "read: kept", "{read}");
    // B only forwarded: it made no directory for the session.
    assert!(!b_home.path().join("sessions").join(&id).exists());

    // A is gone: B does not run the session in a workspace of its own.
    a.server().child.kill().unwrap();
    a.server().child.wait().unwrap();
    let killed = Instant::now();
    let lost = loop {
        let (status, result) = turn(&b, &id, "read").await;
        if status != 503 {
            break (status, result);
        }
        assert!(
            killed.elapsed() < lease * 5,
            "still {status} after {:?}: {result}",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(lost.0, 409, "{}", lost.1);
    assert_eq!(lost.1["error"]["code"], "workspace_lost", "{}", lost.1);
    let message = lost.1["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("node a") && message.contains("Start node a again"),
        "{message}"
    );
    let (_, record) = b.get(&format!("/sessions/{id}")).await;
    assert_eq!(record["turn_count"], 2, "no turn ran on B: {record}");
    assert_eq!(record["home"], "a", "{record}");

    // What the message offers works: the session can be deleted through B.
    let deleted = b
        .req(reqwest::Method::DELETE, &format!("/sessions/{id}"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(deleted, 204);
    let (status, _) = b.get(&format!("/sessions/{id}")).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_prune_of_a_cluster_nodes_home_leaves_its_sessions_directories_alone() {
    let pg = Postgres::start();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SCRIPT, "", "workspace_write");
    let (home, a) = node_with(&pg, "a", "10s", &[]);
    let id = a.session(bundle.path().to_str().unwrap()).await;
    assert_eq!(a.answer(&id, "write").await, "wrote");
    // An hour old, as a cron job's prune would find a live session's directory between two turns.
    let dir = home.path().join("sessions").join(&id);
    let touched = std::process::Command::new("touch")
        .args(["-d", "2 hours ago"])
        .arg(&dir)
        .status()
        .unwrap();
    assert!(touched.success());

    let out = std::process::Command::new(binary())
        .args(["sessions", "prune", "--older-than", "1h"])
        .env("SERVICE_HOME", home.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("serves a cluster")
            && stderr.contains("postgres")
            && stderr.contains("--remote"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("workspace/notes.txt")).unwrap(),
        "kept\n"
    );
    assert_eq!(a.answer(&id, "read").await, "read: kept");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deletion_forwarded_to_the_home_node_is_audited_there_as_the_client_and_token_that_asked()
{
    let pg = Postgres::start();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SCRIPT, "", "workspace_write");
    let bundle = bundle.path().to_str().unwrap();
    let (_a_home, a) = node_with(&pg, "a", "10s", &[]);
    let (b_home, b) = node_with(&pg, "b", "10s", &[]);
    let (status, made) = a
        .post("/tokens", serde_json::json!({"tenant": "acme"}))
        .await;
    assert_eq!(status, 201, "{made}");
    let acme_id = made["id"].as_str().unwrap().to_string();
    let (acme_on_a, acme_on_b) = (
        a.beside(made["token"].as_str().unwrap()),
        b.beside(made["token"].as_str().unwrap()),
    );
    let id = acme_on_a.session(bundle).await;
    assert_eq!(acme_on_a.answer(&id, "write").await, "wrote");

    // Deleted through B, which forwards to A, where the files are.
    let deleted = acme_on_b
        .req(reqwest::Method::DELETE, &format!("/sessions/{id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    assert!(!b_home.path().join("sessions").join(&id).exists());
    let (_, audit) = b.get("/audit?limit=50").await;
    let entry = audit
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "session_deleted")
        .unwrap_or_else(|| panic!("no session_deleted entry: {audit:#}"));
    assert_eq!(entry["object"], id.as_str(), "{entry}");
    assert_eq!(entry["actor_tenant"], "acme", "{entry}");
    assert_eq!(entry["actor_token"], acme_id.as_str(), "{entry}");
    assert_eq!(entry["client"], "127.0.0.1", "{entry}");
}
