//! Bundles across the nodes of a cluster: a bundle imported through one node runs through every node (the store
//! keeps it, each copy checked against its digest, and a removal reaches every node); a node that lacks a session's
//! bundle pulled from a registry pulls it from there, and never runs other contents under the session's reference.

use serde_json::json;
use tempfile::TempDir;

use super::cluster::{node_with, turn};
use super::postgres::Postgres;
use super::registry_server::Registry;
use super::support::{write_bundle, Env};
use super::tenant_bundle_names::tar_of;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_imported_through_one_node_runs_through_every_node_and_a_removal_reaches_them_all()
{
    let pg = Postgres::start();
    let project = TempDir::new().unwrap();
    write_bundle(project.path(), SCRIPT, "", "read_only");
    let tar = tar_of(&project);
    let (_a_home, a) = node_with(&pg, "a", "10s", &[]);
    let (_b_home, b) = node_with(&pg, "b", "10s", &[]);
    assert_eq!(import(&a, tar).await, 201);

    // B was never given it: a session of it by its bare name, and a turn.
    let (status, made) = b.post("/sessions", json!({"bundle_ref": "fixture"})).await;
    assert_eq!(status, 201, "{made}");
    let on_b = made["id"].as_str().unwrap().to_string();
    let (status, result) = turn(&b, &on_b, "hi").await;
    assert_eq!(
        (status, result["final_message"].as_str()),
        (200, Some("version one")),
        "{result}"
    );

    // C starts after the import: its list has it, and a session A made loads there.
    let (_c_home, c) = node_with(&pg, "c", "10s", &[]);
    let (_, listed) = c.get("/bundles").await;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|b| b["reference"] == "local/fixture:1.0.0"),
        "{listed}"
    );
    let (_d_home, d) = node_with(&pg, "d", "10s", &[]);
    let (status, made) = a.post("/sessions", json!({"bundle_ref": "fixture"})).await;
    assert_eq!(status, 201, "{made}");
    let on_a = made["id"].as_str().unwrap();
    let (status, record) = d.get(&format!("/sessions/{on_a}")).await;
    assert_eq!(status, 200, "{record}");
    let (status, ready) = d.get("/readyz").await;
    assert_eq!(
        (status, ready.get("bundles_differ")),
        (200, None),
        "{ready}"
    );

    // Removed through A (B's session has no turn running): every node gives it up at its next sync.
    let removed = a
        .req(reqwest::Method::DELETE, "/bundles/local%2Ffixture:1.0.0")
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status().as_u16(), 200);
    for node in [&b, &c] {
        let (_, listed) = node.get("/bundles").await;
        assert!(
            !listed
                .as_array()
                .unwrap()
                .iter()
                .any(|b| b["reference"] == "local/fixture:1.0.0"),
            "{listed}"
        );
        let (status, refused) = node
            .post("/sessions", json!({"bundle_ref": "fixture"}))
            .await;
        assert_eq!(status, 404, "{refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_bundle_whose_content_no_longer_matches_its_digest_is_refused_and_reported() {
    let pg = Postgres::start();
    let project = TempDir::new().unwrap();
    write_bundle(project.path(), SCRIPT, "", "read_only");
    let (_a_home, a) = node_with(&pg, "a", "10s", &[]);
    assert_eq!(import(&a, tar_of(&project)).await, 201);
    // Someone with the database's credentials changes the content under the recorded digest.
    pg.sql("UPDATE bundles SET content = content || '\\x00'::bytea");
    let (_b_home, b) = node_with(&pg, "b", "10s", &[]);
    let (status, refused) = b.post("/sessions", json!({"bundle_ref": "fixture"})).await;
    assert_ne!(status, 201, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("digest") && message.contains("import the bundle again"),
        "{refused}"
    );
    let (status, ready) = b.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    let (_, listed) = b.get("/bundles").await;
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["reference"] != "local/fixture:1.0.0"),
        "{listed}"
    );
    let (_, ready) = b.get("/readyz").await;
    let differ = ready["bundles_differ"].to_string();
    assert!(
        differ.contains("local/fixture:1.0.0") && differ.contains("digest"),
        "{ready}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_built_on_one_node_is_never_replaced_by_the_clusters_of_the_same_version_and_is_reported(
) {
    let pg = Postgres::start();
    let (b_home, b) = node_with(&pg, "b", "10s", &[]);
    // B's own build, with the CLI on its home.
    let own = TempDir::new().unwrap();
    write_bundle(
        own.path(),
        r#"{turns: [{replies: [{text: "built on b"}]}]}"#,
        "",
        "read_only",
    );
    super::tenants::build(b_home.path(), own.path());
    // The cluster's, of the same id and version, imported through A.
    let project = TempDir::new().unwrap();
    write_bundle(project.path(), SCRIPT, "", "read_only");
    let (_a_home, a) = node_with(&pg, "a", "10s", &[]);
    assert_eq!(import(&a, tar_of(&project)).await, 201);

    let (_, listed) = b.get("/bundles").await;
    assert!(
        listed.to_string().contains("local/fixture:1.0.0"),
        "{listed}"
    );
    let (status, made) = b.post("/sessions", json!({"bundle_ref": "fixture"})).await;
    assert_eq!(status, 201, "{made}");
    let (_, result) = turn(&b, made["id"].as_str().unwrap(), "hi").await;
    assert_eq!(result["final_message"], "built on b", "{result}");
    let (_, ready) = b.get("/readyz").await;
    let differ = ready["bundles_differ"].to_string();
    assert!(
        differ.contains("local/fixture:1.0.0") && differ.contains("built on this node"),
        "{ready}"
    );
}

/// Uploads an OCI layout tar through `api`'s node; the status.
async fn import(api: &super::http_client::Api, tar: Vec<u8>) -> u16 {
    api.req(reqwest::Method::POST, "/bundles/import")
        .header("content-type", "application/x-tar")
        .body(tar)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}
