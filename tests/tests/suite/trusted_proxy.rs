//! Clients behind a proxy: with `--trusted-proxy`, the per-client caps and the log see the client that the proxy's
//! `X-Forwarded-For` names, so one client's streams do not use up another's; without it, the header is the
//! client's own writing and changes nothing, so a client cannot dodge its cap by forging it. A tenant's cap
//! (`--max-streams-per-tenant`) holds over all of its clients.

use serde_json::Value;
use tempfile::TempDir;

use super::http_client::Api;
use super::support::{write_bundle, Server};

/// Opens the session's event stream as a client `X-Forwarded-For` names: its status, and the response, which holds
/// the stream open while it lives.
async fn stream(api: &Api, id: &str, forwarded_for: &str) -> (u16, reqwest::Response) {
    stream_with(api, id, "x-forwarded-for", forwarded_for).await
}

/// [`stream`] with the client named in `header`.
async fn stream_with(api: &Api, id: &str, header: &str, value: &str) -> (u16, reqwest::Response) {
    let resp = api
        .req(reqwest::Method::GET, &format!("/sessions/{id}/events"))
        .header(header, value)
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp)
}

/// The addresses the request lines of the event streams name, once a line `last` would match is in the log.
fn clients_logged(server: &Server, last: impl Fn(&Value) -> bool) -> Vec<Value> {
    let streams = |l: &Value| {
        l["message"] == "request" && l["path"].as_str().is_some_and(|p| p.ends_with("/events"))
    };
    server
        .json_log_with("for the last stream", |l| streams(l) && last(l))
        .into_iter()
        .filter(streams)
        .map(|l| l["client"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_trusted_proxy_each_client_has_its_own_stream_cap_and_a_forged_header_counts_for_nothing(
) {
    let bundle = TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{text: "hi"}]}]}"#,
        "",
        "read_only",
    );
    let bundle = bundle.path().to_str().unwrap();
    let cap = ["--max-streams-per-client", "1", "--log-format", "json"];

    // Behind the proxy (this test's loopback address): two clients, one stream each.
    let home = TempDir::new().unwrap();
    let mut args = cap.to_vec();
    args.extend(["--trusted-proxy", "127.0.0.1/32"]);
    let mut api = Api::new(Server::start(home.path(), &args, &[]));
    let id = api.session(bundle).await;
    let (status, _first) = stream(&api, &id, "203.0.113.1").await;
    assert_eq!(status, 200);
    let (status, _) = stream(&api, &id, "203.0.113.1").await;
    assert_eq!(status, 429, "the same client's second stream");
    // The client wrote the left entry itself; the proxy appended the right one.
    let (status, _second) = stream(&api, &id, "203.0.113.1, 203.0.113.2").await;
    assert_eq!(status, 200, "another client's first stream");
    assert_eq!(
        clients_logged(api.server(), |l| l["client"] == "203.0.113.2"),
        ["203.0.113.1", "203.0.113.1", "203.0.113.2"]
    );

    // Without --trusted-proxy the header is a client's: forging another address gets no second stream.
    let home = TempDir::new().unwrap();
    let mut api = Api::new(Server::start(home.path(), &cap, &[]));
    let id = api.session(bundle).await;
    let (status, _first) = stream(&api, &id, "203.0.113.1").await;
    assert_eq!(status, 200);
    let (status, _) = stream(&api, &id, "203.0.113.2").await;
    assert_eq!(status, 429, "a forged X-Forwarded-For dodged the cap");
    assert_eq!(
        clients_logged(api.server(), |l| l["status"] == 429),
        ["127.0.0.1", "127.0.0.1"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trusted_proxys_forwarded_header_names_the_client_and_a_clients_own_counts_for_nothing() {
    let bundle = TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{text: "hi"}]}]}"#,
        "",
        "read_only",
    );
    let bundle = bundle.path().to_str().unwrap();
    let cap = ["--max-streams-per-client", "1", "--log-format", "json"];

    let home = TempDir::new().unwrap();
    let mut args = cap.to_vec();
    args.extend(["--trusted-proxy", "127.0.0.1"]);
    let mut api = Api::new(Server::start(home.path(), &args, &[]));
    let id = api.session(bundle).await;
    let (status, _first) = stream_with(&api, &id, "forwarded", "for=203.0.113.1;proto=https").await;
    assert_eq!(status, 200);
    let (status, _) = stream_with(&api, &id, "forwarded", "for=203.0.113.1").await;
    assert_eq!(status, 429, "the same client's second stream");
    // The client's own element on the left, the proxy's on the right; it wins over an X-Forwarded-For beside it.
    let resp = api
        .req(reqwest::Method::GET, &format!("/sessions/{id}/events"))
        .header("forwarded", r#"for=203.0.113.1, for="[2001:db8::2]:4711""#)
        .header("x-forwarded-for", "203.0.113.1")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "another client's first stream");
    assert_eq!(
        clients_logged(api.server(), |l| l["client"] == "2001:db8::2"),
        ["203.0.113.1", "203.0.113.1", "2001:db8::2"]
    );
    drop(resp);

    // From a peer that is not a trusted proxy, Forwarded is the client's writing and changes nothing.
    let home = TempDir::new().unwrap();
    let api = Api::new(Server::start(home.path(), &cap, &[]));
    let id = api.session(bundle).await;
    let (status, _first) = stream_with(&api, &id, "forwarded", "for=203.0.113.1").await;
    assert_eq!(status, 200);
    let (status, _) = stream_with(&api, &id, "forwarded", "for=203.0.113.2").await;
    assert_eq!(status, 429, "a forged Forwarded dodged the cap");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_stream_cap_holds_over_all_of_its_clients_and_leaves_the_others_theirs() {
    let home = TempDir::new().unwrap();
    let t = super::tenants::tenants(home.path(), &["--max-streams-per-tenant", "1"]);
    let dir = super::tenants::bundle();
    let bundle_ref = dir.path().to_str().unwrap();
    let (acme_id, beta_id) = (
        t.acme.session(bundle_ref).await,
        t.beta.session(bundle_ref).await,
    );
    let _held = t.acme.events(&acme_id, None).await;
    // A second stream of acme's, from the same address as every client here: the tenant's cap says no.
    let refused = t
        .acme
        .req(reqwest::Method::GET, &format!("/sessions/{acme_id}/events"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 429);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_streams", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant \"acme\""),
        "{body}"
    );
    // Beta's first stream is its own to have.
    let _beta = t.beta.events(&beta_id, None).await;
}
