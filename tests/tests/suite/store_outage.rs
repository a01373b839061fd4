//! A store outage says what it is: while the database that holds the tenants' tokens is away, a tenant token that
//! must be looked up is answered 503 `store_unavailable` with a `Retry-After`, on every front end, never 401 (a
//! client that reads 401 drops or rotates a credential that is good). A token that is not one at all is still 401.

use std::time::{Duration, Instant};

use serde_json::json;

use super::cluster::node_with;
use super::postgres::Postgres;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_token_that_cannot_be_checked_while_the_database_is_away_is_503_and_never_401() {
    let pg = Postgres::start();
    let (_home, api) = node_with(&pg, "a", "30s", &[]);
    // A second node finds the schema made: PostgreSQL's notices about it (`relation ... already exists,
    // skipping`) are the database's business, not the operator's.
    let (_second_home, mut second) = node_with(&pg, "b", "30s", &[]);
    let log = second.server().log.lock().unwrap().join("\n");
    assert!(!log.contains("NOTICE"), "{log}");
    let (status, made) = api.post("/tokens", json!({"tenant": "acme"})).await;
    assert_eq!(status, 201, "{made}");
    let acme = api.beside(made["token"].as_str().unwrap());
    let stranger = api.beside("not-a-token-this-server-made");

    pg.ctl("stop");
    let (status, body) = acme.get("/sessions").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("store_unavailable")),
        "{body}"
    );
    // A client that has not proven who it is learns nothing of where the store is.
    let message = body["error"]["message"].as_str().unwrap();
    assert!(!message.contains(&pg.port().to_string()), "{message}");
    let retry = acme
        .req(reqwest::Method::GET, "/sessions")
        .send()
        .await
        .unwrap();
    assert_eq!(retry.status().as_u16(), 503);
    assert_eq!(retry.headers()["retry-after"], "2");
    let (status, body) = acme
        .post(
            "/v1/chat/completions",
            json!({"model": "hello", "messages": [{"role": "user", "content": "hi"}]}),
        )
        .await;
    assert_eq!(status, 503, "the OpenAI routes: {body}");
    let (status, body) = acme
        .post(
            "/a2a/hello",
            json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "t"}}),
        )
        .await;
    assert_eq!(status, 503, "the A2A routes: {body}");
    let (status, body) = stranger.get("/sessions").await;
    assert_eq!(
        status, 401,
        "a token the server never made needs no database: {body}"
    );
    // The operator's own token is the server's, not the store's.
    let (status, body) = api.get("/healthz").await;
    assert_eq!(status, 200, "{body}");

    pg.ctl("start");
    let back = Instant::now();
    loop {
        let (status, body) = acme.get("/sessions").await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(back.elapsed() < Duration::from_secs(20), "{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
