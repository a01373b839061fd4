//! Token roles, attacked through the real `serve`: a tenant-admin token manages its own tenant's tokens and nothing
//! more (before roles, any tenant's admin token was a global operator: it minted tokens for other tenants), and a
//! read-only token reads and changes nothing, through every front end. Runs over both session stores.

use serde_json::{json, Value};

use super::http_client::Api;
use super::support::{Env, Server};

/// Makes a token of `tenant` with `body`'s role through `api`: (id, token).
async fn made(api: &Api, body: Value) -> (String, String) {
    let (status, made) = api.post("/tokens", body).await;
    assert_eq!(status, 201, "{made}");
    (
        made["id"].as_str().unwrap().to_string(),
        made["token"].as_str().unwrap().to_string(),
    )
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_admin_manages_its_own_tenants_tokens_and_cannot_reach_another_tenant_or_become_an_operator(
) {
    let env = Env::new();
    let operator = Api::new(Server::start(env.home.path(), &[], &[]));
    let (_, admin_token) = made(&operator, json!({"tenant": "acme", "role": "tenant-admin"})).await;
    let (beta_id, _) = made(&operator, json!({"tenant": "beta"})).await;
    let acme = operator.beside(&admin_token);

    let (acme_user, _) = made(&acme, json!({"tenant": "acme", "role": "user"})).await;
    // The attacks: a token for another tenant, an operator's token in either spelling, another tenant's revocation.
    for body in [
        json!({"tenant": "beta"}),
        json!({"tenant": "beta", "role": "tenant-admin"}),
        json!({"tenant": "acme", "role": "operator"}),
        json!({"tenant": "acme", "admin": true}),
    ] {
        let (status, refused) = acme.post("/tokens", body.clone()).await;
        assert_eq!(
            (status, code(&refused)),
            (403, "tenant_admin_scope"),
            "{body}: {refused}"
        );
    }
    let refused = acme
        .req(reqwest::Method::DELETE, &format!("/tokens/{beta_id}"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);
    let (status, quota) = acme
        .put("/tenants/acme/quota", json!({"sessions": 1000}))
        .await;
    assert_eq!((status, code(&quota)), (403, "admin_only"), "{quota}");

    // Its listing is its tenant's; the operator's is everyone's.
    let (_, listed) = acme.get("/tokens").await;
    let tenants: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["tenant"].as_str().unwrap())
        .collect();
    assert!(
        !tenants.is_empty() && tenants.iter().all(|t| *t == "acme"),
        "{listed}"
    );
    let (_, all) = operator.get("/tokens").await;
    assert!(all.to_string().contains(&beta_id), "{all}");

    let revoked = acme
        .req(reqwest::Method::DELETE, &format!("/tokens/{acme_user}"))
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 204);
    let (_, all) = operator.get("/tokens").await;
    let user = all
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == acme_user.as_str())
        .unwrap();
    assert!(user["revoked_at"].is_string(), "{user}");
    let beta = all
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == beta_id.as_str())
        .unwrap();
    assert!(beta.get("revoked_at").is_none(), "{beta}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_token_reads_and_changes_nothing_through_any_front_end() {
    let env = Env::new();
    let operator = Api::new(Server::start(env.home.path(), &[], &[]));
    let (_, token) = made(&operator, json!({"tenant": "acme", "role": "read-only"})).await;
    let reader = operator.beside(&token);
    let (status, listed) = reader.get("/sessions").await;
    assert_eq!(status, 200, "{listed}");
    let hello = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    let (status, refused) = reader
        .post("/sessions", json!({"bundle_ref": hello.to_str().unwrap()}))
        .await;
    assert_eq!(
        (status, code(&refused)),
        (403, "read_only_token"),
        "{refused}"
    );
    let (status, refused) = reader.post("/tokens", json!({"tenant": "acme"})).await;
    assert_eq!(status, 403, "{refused}");
    // The OpenAI-compatible and A2A routes run turns on a POST: refused alike.
    for path in ["/v1/chat/completions", "/a2a/hello"] {
        let answer = reader
            .req(reqwest::Method::POST, path)
            .json(&json!({"model": "hello", "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), 403, "{path}");
    }
    let (_, sessions) = operator.get("/sessions").await;
    assert_eq!(sessions.as_array().map(Vec::len), Some(0), "{sessions}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_token_scrapes_every_tenants_figures_and_reaches_nothing_else() {
    let env = Env::new();
    let operator = Api::new(Server::start(env.home.path(), &[], &[]));
    let (_, admin_token) = made(&operator, json!({"tenant": "acme", "role": "tenant-admin"})).await;
    // Metrics cover every tenant: a tenant-admin may not make a scraper's token.
    let (status, refused) = operator
        .beside(&admin_token)
        .post("/tokens", json!({"tenant": "acme", "role": "metrics"}))
        .await;
    assert_eq!(
        (status, code(&refused)),
        (403, "tenant_admin_scope"),
        "{refused}"
    );
    let (_, token) = made(
        &operator,
        json!({"tenant": "monitoring", "role": "metrics"}),
    )
    .await;
    let scraper = operator.beside(&token);
    let scraped = scraper
        .req(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap();
    assert_eq!(scraped.status(), 200);
    assert!(scraped.text().await.unwrap().contains("service_build_info"));
    // Everything else, reading or writing, on every front end.
    for (method, path) in [
        (reqwest::Method::GET, "/sessions"),
        (reqwest::Method::GET, "/tokens"),
        (reqwest::Method::GET, "/audit"),
        (reqwest::Method::GET, "/v1/models"),
        (reqwest::Method::POST, "/sessions"),
        (reqwest::Method::POST, "/tokens"),
    ] {
        let refused = scraper
            .req(method.clone(), path)
            .json(&json!({"tenant": "monitoring", "role": "operator"}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 403, "{method} {path}");
        let body: Value = refused.json().await.unwrap();
        assert_eq!(code(&body), "metrics_token", "{method} {path}: {body}");
    }
    let (_, all) = operator.get("/tokens").await;
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
}
