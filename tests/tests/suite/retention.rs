//! Retention over a cluster: `serve --retention` deletes sessions past their last change with their journals and
//! every node's directories; `sessions prune --store` does the same from any machine that reaches the database; a
//! node gives up what it holds of a session deleted elsewhere.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use super::cluster::{node_with, turn};
use super::http_client::Api;
use super::postgres::Postgres;
use super::support::{write_bundle, Env};

const SCRIPT: &str = r#"{turns: [{replies: [{text: "kept for now"}]}]}"#;

/// A session of a read-only bundle made through `api`, with one turn.
async fn session_with_a_turn(api: &Api, bundle: &Path) -> String {
    let (status, made) = api
        .post("/sessions", json!({"bundle_ref": bundle.to_str().unwrap()}))
        .await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_string();
    let (status, done) = turn(api, &id, "hi").await;
    assert_eq!(status, 200, "{done}");
    id
}

/// Waits up to `limit` for `done`.
async fn until(limit: Duration, what: &str, mut done: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !done().await {
        assert!(start.elapsed() < limit, "{what} after {limit:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_a_sessions_record_journal_and_every_nodes_directory_once_it_is_old_enough(
) {
    let pg = Postgres::start();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SCRIPT, "", "read_only");
    let retention = ["--retention", "3s", "--allow-path", "/tmp"];
    let (a_home, a) = node_with(&pg, "a", "10s", &retention);
    let (b_home, b) = node_with(&pg, "b", "10s", &retention);
    let id = session_with_a_turn(&a, bundle.path()).await;
    // B reads it too, and so holds it and a directory of its own.
    let (status, _) = b.get(&format!("/sessions/{id}")).await;
    assert_eq!(status, 200);
    let dirs = [a_home.path(), b_home.path()].map(|h| h.join("sessions").join(&id));
    assert!(dirs.iter().all(|d| d.is_dir()), "{dirs:?}");
    // Still there well inside its retention.
    let (status, _) = a.get(&format!("/sessions/{id}")).await;
    assert_eq!(status, 200);

    until(
        Duration::from_secs(20),
        "the session is not deleted",
        async || a.get(&format!("/sessions/{id}")).await.0 == 404,
    )
    .await;
    assert_eq!(
        pg.sql(&format!(
            "SELECT count(*) FROM events WHERE session_id = '{id}'"
        )),
        "0"
    );
    until(
        Duration::from_secs(20),
        "a node kept the directory",
        async || dirs.iter().all(|d| !d.exists()),
    )
    .await;
    let (status, _) = b.get(&format!("/sessions/{id}")).await;
    assert_eq!(status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_prune_with_the_store_deletes_a_clusters_old_sessions_and_the_nodes_drop_them() {
    let pg = Postgres::start();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SCRIPT, "", "read_only");
    let (a_home, a) = node_with(&pg, "a", "10s", &["--allow-path", "/tmp"]);
    let old = session_with_a_turn(&a, bundle.path()).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let young = session_with_a_turn(&a, bundle.path()).await;

    let env = Env::new();
    let url = pg.url();
    let dry = env.run(&[
        "sessions",
        "prune",
        "--older-than",
        "2s",
        "--dry-run",
        "--store",
        &url,
    ]);
    assert!(dry.ok().contains(&format!("would delete {old}")), "{dry:?}");
    assert!(!dry.stdout.contains(&young), "{dry:?}");
    let (status, _) = a.get(&format!("/sessions/{old}")).await;
    assert_eq!(status, 200, "a dry run deleted it");

    let pruned = env.run(&["sessions", "prune", "--older-than", "2s", "--store", &url]);
    assert!(
        pruned.ok().contains(&format!("deleted {old}")),
        "{pruned:?}"
    );
    assert!(!pruned.stdout.contains(&young), "{pruned:?}");
    let (status, _) = a.get(&format!("/sessions/{old}")).await;
    assert_eq!(status, 404);
    let (status, _) = a.get(&format!("/sessions/{young}")).await;
    assert_eq!(status, 200);
    // The node that held it lets it go, directory and all, at its next upkeep.
    let dir = a_home.path().join("sessions").join(&old);
    until(
        Duration::from_secs(20),
        "the node kept the directory",
        async || !dir.exists(),
    )
    .await;
    assert!(a_home.path().join("sessions").join(&young).is_dir());
}
