//! Tenants across a cluster and tenants' bundles: a revocation made through the shared database holds on every node,
//! a forwarded request keeps its caller's tenant, a node with the wrong cluster token is a 502, and under
//! `serve --tenant-bundles` a tenant sees only the bundles granted to it or that it imported.

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::http_client::Api;
use super::support::Server;
use super::tenants::{build, bundle, code, tenants, tokens, tokens_in};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_cluster_a_revocation_holds_on_every_node_and_a_wrong_cluster_token_is_a_502() {
    use super::cluster::{node_with, turn, TOKEN};
    let pg = super::postgres::Postgres::start();
    let (_a_home, a) = node_with(&pg, "a", "10s", &[]);
    let (_b_home, b) = node_with(&pg, "b", "10s", &[]);
    let url = pg.url();
    let cli = |args: &[&str]| tokens_in(_a_home.path(), Some(&url), args);
    let made: Value =
        serde_json::from_str(&cli(&["create", "--tenant", "acme", "--json"])).unwrap();
    let acme_token = made["token"].as_str().unwrap();
    let beta_token = cli(&["create", "--tenant", "beta"]);
    let (acme_a, acme_b, beta_a) = (
        a.beside(acme_token),
        b.beside(acme_token),
        a.beside(beta_token.trim()),
    );
    let bundle = bundle();
    // Acme's session runs on node b; a turn sent to node a is forwarded there as acme's, and beta's is not.
    let id = acme_b.session(bundle.path().to_str().unwrap()).await;
    assert_eq!(turn(&acme_b, &id, "hi").await.0, 200);
    let (status, result) = turn(&acme_a, &id, "hi").await;
    assert_eq!(
        (status, result["final_message"].as_str()),
        (200, Some("hello")),
        "{result}"
    );
    assert_eq!(
        code(&turn(&beta_a, &id, "hi").await),
        (404, "session_not_found".into())
    );
    let (_, record) = b.get(&format!("/sessions/{id}")).await;
    assert_eq!(
        (record["tenant"].as_str(), record["turn_count"].as_u64()),
        (Some("acme"), Some(2))
    );

    // Revoked through the database: both nodes refuse it within a second.
    cli(&["revoke", made["id"].as_str().unwrap()]);
    let revoked = std::time::Instant::now();
    for node in [&acme_a, &acme_b] {
        while node.get("/sessions").await.0 != 401 {
            assert!(
                revoked.elapsed() < std::time::Duration::from_secs(1),
                "still accepted"
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }

    // A node whose cluster token differs: the owner refuses its forward, and the client hears 502, not 401.
    let c_home = TempDir::new().unwrap();
    let mut args = vec!["--token", TOKEN];
    let c_args = pg.node_args("c", "not-the-cluster-token", "10s");
    args.extend(c_args.iter().map(String::as_str));
    let c = Api::with_token(Server::start(c_home.path(), &args, &[]), TOKEN);
    let refused = turn(&c, &id, "hi").await;
    assert_eq!(
        code(&refused),
        (502, "cluster_auth_failed".into()),
        "{refused:?}"
    );
    let says = |api: &Api, what: &str| {
        api.server
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains(what))
    };
    // Each server's log reaches the test from a thread reading its stderr, possibly after the answer.
    super::support::wait_until(
        std::time::Duration::from_secs(5),
        || says(&c, "refused this node's cluster token"),
        || "node c logs that the owner refused it".into(),
    );
    super::support::wait_until(
        std::time::Duration::from_secs(5),
        || says(&b, "cluster token is not this node's") && says(&b, "peer=\"c\""),
        || "node b logs which peer it refused".into(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tenant_bundles_a_tenant_sees_only_what_was_granted_or_what_it_imported() {
    let home = TempDir::new().unwrap();
    let (fixture, other) = (bundle(), bundle());
    super::support::edit(
        &other.path().join("service.bundle.json5"),
        "id: \"fixture\"",
        "id: \"other\"",
    );
    for dir in [&fixture, &other] {
        build(home.path(), dir.path());
    }
    let t = tenants(home.path(), &["--tenant-bundles"]);
    assert_eq!(
        tokens(home.path(), &["grant", "acme", "fixture"]).trim(),
        "acme may use local/fixture"
    );
    let ids = |v: &Value| -> Vec<String> {
        let list = v.as_array().or_else(|| v["data"].as_array()).unwrap();
        list.iter()
            .map(|b| b["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(ids(&t.acme.get("/bundles").await.1), vec!["fixture"]);
    assert_eq!(ids(&t.beta.get("/bundles").await.1), Vec::<String>::new());
    // The admin sees every bundle, the built-in ones too.
    assert_eq!(
        ids(&t.admin.get("/bundles").await.1),
        ["fixture", "other", "coder"]
    );
    assert_eq!(ids(&t.acme.get("/v1/models").await.1), vec!["fixture"]);
    // What is not granted is not there: the same 404 as for a bundle that does not exist.
    for (path, absent) in [("/bundles/other", "/bundles/nothing")] {
        let (hidden, missing) = (t.acme.get(path).await, t.acme.get(absent).await);
        assert_eq!(code(&hidden), (404, "bundle_not_found".into()));
        assert_eq!(code(&missing), (404, "bundle_not_found".into()));
    }
    let refused = t
        .acme
        .post("/sessions", json!({"bundle_ref": "other"}))
        .await;
    assert_eq!(
        code(&refused),
        (404, "bundle_not_found".into()),
        "{refused:?}"
    );
    assert_eq!(
        t.acme
            .post("/sessions", json!({"bundle_ref": "fixture"}))
            .await
            .0,
        201
    );
    let chat = t
        .acme
        .post(
            "/v1/chat/completions",
            json!({"model": "other", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(chat.0, 404, "{chat:?}");
    assert!(
        !chat.1.to_string().contains("fixture"),
        "lists no bundle: {chat:?}"
    );
    let (_, a2a) = t
        .acme
        .post(
            "/a2a/other",
            json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}),
        )
        .await;
    assert!(a2a["error"].is_object(), "{a2a}");
    let export = t
        .acme
        .req(reqwest::Method::GET, "/bundles/other/export")
        .send()
        .await
        .unwrap();
    assert_eq!(export.status().as_u16(), 404);

    // A name the operator installed is not a tenant's to import; a name of its own is, and stays its own.
    let upload = |api: &'_ Api, tar: Vec<u8>| {
        api.req(reqwest::Method::POST, "/bundles/import")
            .header("content-type", "application/x-tar")
            .body(tar)
            .send()
    };
    let export = |reference: &str| {
        t.admin
            .req(
                reqwest::Method::GET,
                &format!("/bundles/{reference}/export"),
            )
            .send()
    };
    let operators = export("other")
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap()
        .to_vec();
    let refused = upload(&t.beta, operators).await.unwrap();
    assert_eq!(refused.status().as_u16(), 409);
    let own = bundle();
    super::support::edit(
        &own.path().join("service.bundle.json5"),
        "id: \"fixture\"",
        "id: \"betas\"",
    );
    let imported = upload(&t.beta, super::tenant_bundle_names::tar_of(&own))
        .await
        .unwrap();
    assert_eq!(imported.status().as_u16(), 201);
    assert_eq!(ids(&t.beta.get("/bundles").await.1), vec!["betas"]);
    assert_eq!(ids(&t.acme.get("/bundles").await.1), vec!["fixture"]);

    // A grant taken back holds within a second.
    tokens(home.path(), &["ungrant", "acme", "local/fixture:1.0.0"]);
    let taken = std::time::Instant::now();
    while !ids(&t.acme.get("/bundles").await.1).is_empty() {
        assert!(
            taken.elapsed() < std::time::Duration::from_secs(1),
            "still granted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
