//! The attack on `serve --tenant-bundles`: a tenant with no grant imports, or pulls from a registry, a look-alike of
//! a bundle the operator installed (the same id, a higher version). Before, the import granted it the whole name:
//! it could export the operator's version and shadow `<id>` for everyone. Now a name has one owner.

use std::process::Command;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::http_client::Api;
use super::registry_server::Registry;
use super::support::{binary, edit, Server};
use super::tenants::{build, code, token_for, tokens};

const ADMIN: &str = "the-servers-own-token";

/// A bundle project `id` at `version` whose system prompt is `prompt`.
fn project(id: &str, version: &str, prompt: &str) -> TempDir {
    let dir = super::tenants::bundle();
    let manifest = dir.path().join("service.bundle.json5");
    edit(&manifest, "id: \"fixture\"", &format!("id: \"{id}\""));
    edit(
        &manifest,
        "version: \"1.0.0\"",
        &format!("version: \"{version}\""),
    );
    edit(
        &dir.path().join("agent.yaml"),
        "system_prompt: You are a test agent.",
        &format!("system_prompt: {prompt}"),
    );
    dir
}

/// The OCI layout tar of `project`, built in a scratch store of the attacker's own.
pub(super) fn tar_of(project: &TempDir) -> Vec<u8> {
    let scratch = TempDir::new().unwrap();
    build(scratch.path(), project.path());
    let out = Command::new(binary())
        .args(["export", "-o", "-", &id_of(project)])
        .env("SERVICE_HOME", scratch.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn id_of(project: &TempDir) -> String {
    let text = std::fs::read_to_string(project.path().join("service.bundle.json5")).unwrap();
    let at = text.find("id: \"").unwrap() + 5;
    text[at..at + text[at..].find('"').unwrap()].to_string()
}

async fn import(api: &Api, tar: Vec<u8>) -> (u16, Value) {
    let answer = api
        .req(reqwest::Method::POST, "/bundles/import")
        .header("content-type", "application/x-tar")
        .body(tar)
        .send()
        .await
        .unwrap();
    let status = answer.status().as_u16();
    (status, answer.json().await.unwrap_or(Value::Null))
}

async fn version_of(api: &Api, reference: &str) -> String {
    let (status, info) = api.get(&format!("/bundles/{reference}")).await;
    assert_eq!(status, 200, "{info}");
    info["version"].as_str().unwrap().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_import_or_pull_a_look_alike_of_a_name_another_owner_holds() {
    let home = TempDir::new().unwrap();
    let operators = project("fixture", "1.0.0", "operator-secret-prompt");
    build(home.path(), operators.path());
    let registry = Registry::start(&[]);
    let (mallory, bob) = (
        token_for(home.path(), "mallory"),
        token_for(home.path(), "bob"),
    );
    tokens(home.path(), &["grant", "bob", "fixture"]);
    let admin = Api::with_token(
        Server::start(
            home.path(),
            &[
                "--token",
                ADMIN,
                "--tenant-bundles",
                "--allow-registry",
                &registry.host,
            ],
            &[],
        ),
        ADMIN,
    );
    let (mallory, bob) = (admin.beside(&mallory), admin.beside(&bob));

    // The look-alike, uploaded and pushed to a registry the server may pull from.
    let look_alike = project("fixture", "9.9.9", "attacker-prompt");
    let refused = import(&mallory, tar_of(&look_alike)).await;
    assert_eq!(
        code(&refused),
        (409, "bundle_name_taken".into()),
        "{refused:?}"
    );
    let home_path = home.path().to_str().unwrap();
    assert!(
        !refused.1.to_string().contains(home_path),
        "no server path: {refused:?}"
    );
    let scratch = TempDir::new().unwrap();
    build(scratch.path(), look_alike.path());
    let pushed = Command::new(binary())
        .args([
            "push",
            "local/fixture:9.9.9",
            &registry.url("evil/fixture:9.9.9"),
        ])
        .env("SERVICE_HOME", scratch.path())
        .output()
        .unwrap();
    assert!(
        pushed.status.success(),
        "{}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    let pulled = mallory
        .post(
            "/bundles/pull",
            json!({"reference": registry.url("evil/fixture:9.9.9")}),
        )
        .await;
    assert_eq!(
        code(&pulled),
        (409, "bundle_name_taken".into()),
        "{pulled:?}"
    );

    // Nothing was installed, granted or shadowed: the operator's version is what everyone resolves.
    for api in [&admin, &bob] {
        assert_eq!(version_of(api, "fixture").await, "1.0.0");
        assert_eq!(version_of(api, "fixture@latest").await, "1.0.0");
    }
    let export = mallory
        .req(reqwest::Method::GET, "/bundles/fixture/export")
        .send()
        .await
        .unwrap();
    assert_eq!(export.status().as_u16(), 404);
    let session = mallory
        .post("/sessions", json!({"bundle_ref": "fixture"}))
        .await;
    assert_eq!(code(&session), (404, "bundle_not_found".into()));
    assert_eq!(mallory.get("/bundles").await.1, json!([]));

    // A name of its own is the tenant's: installed, listed without the server's paths, and no other tenant's.
    let own = project("mallory-tool", "1.0.0", "mine");
    let (status, info) = import(&mallory, tar_of(&own)).await;
    assert_eq!(status, 201, "{info}");
    assert!(info.get("path").is_none(), "{info}");
    assert!(!info.to_string().contains(home_path), "{info}");
    let again = project("mallory-tool", "1.0.1", "mine, later");
    assert_eq!(import(&mallory, tar_of(&again)).await.0, 201);
    let taken = import(&bob, tar_of(&project("mallory-tool", "7.0.0", "bob's"))).await;
    assert_eq!(code(&taken), (409, "bundle_name_taken".into()), "{taken:?}");
    assert_eq!(version_of(&mallory, "mallory-tool").await, "1.0.1");
    // The operator still sees where its store keeps a bundle.
    let (_, info) = admin.get("/bundles/fixture").await;
    assert!(
        info["path"].as_str().unwrap().starts_with(home_path),
        "{info}"
    );
}
