//! Bundles across the nodes of a cluster: a node that lacks a session's bundle pulls it from the registry the session
//! was made from, and never runs other contents under the session's reference.

use serde_json::json;
use tempfile::TempDir;

use super::cluster::{node_with, turn};
use super::postgres::Postgres;
use super::registry_server::Registry;
use super::support::{write_bundle, Env};

const SCRIPT: &str = r#"{turns: [{replies: [{text: "version one"}]}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lacking_a_session_bundle_pulls_it_from_its_registry_and_refuses_a_moved_tag() {
    let pg = Postgres::start();
    let registry = Registry::start(&[]);
    let source = registry.url("team/fixture:1");
    let publisher = Env::new();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SCRIPT, "", "workspace_write");
    publisher
        .run(&["build", bundle.path().to_str().unwrap()])
        .ok();
    publisher.run(&["push", "fixture", &source]).ok();

    let allow = ["--allow-registry", registry.host.as_str()];
    let (_a_home, a) = node_with(&pg, "a", "10s", &allow);
    let (_b_home, b) = node_with(&pg, "b", "10s", &allow);
    let (status, created) = a.post("/sessions", json!({"bundle_ref": source})).await;
    assert_eq!(status, 201, "{created}");
    let id = created["id"].as_str().unwrap().to_string();

    // B never installed the bundle: it pulls it when the session first reaches it, then runs the turn.
    let (status, result) = turn(&b, &id, "hi").await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["final_message"], "version one", "{result}");

    // A node that may not reach the registry says what is missing and how to get it.
    let (_c_home, c) = node_with(&pg, "c", "10s", &[]);
    let (status, missing) = c.get(&format!("/sessions/{id}")).await;
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["code"], "bundle_not_pulled", "{missing}");

    // The tag moves to other contents under the same id and version: a node pulling now refuses to run them.
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{text: "version two"}]}]}"#,
        "",
        "workspace_write",
    );
    publisher
        .run(&["build", bundle.path().to_str().unwrap()])
        .ok();
    publisher.run(&["push", "fixture", &source]).ok();
    let (_d_home, d) = node_with(&pg, "d", "10s", &allow);
    let (status, refused) = turn(&d, &id, "hi").await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("bundle_mismatch")),
        "{refused}"
    );
}
