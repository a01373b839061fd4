//! What a cluster's sandboxes cannot reach: the session database and the other nodes' APIs, whatever a bundle
//! lists in its network permissions (see `cluster.rs` for the nodes themselves).

use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::cluster::{curl_bundle, node, node_with, turn};
use super::postgres::Postgres;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_listing_the_session_database_in_any_spelling_cannot_reach_it_from_its_sandbox() {
    let pg = Postgres::start();
    let port = pg.port();
    let bundle = TempDir::new().unwrap();
    // The same listener, named as a name, as IPv4, v4-mapped, v4-compatible and NAT64 IPv6, and as other loopback
    // addresses. Each must be refused before anything connects.
    let spellings = [
        "db.test".to_string(),
        "127.0.0.1".into(),
        "localhost".into(),
        "[::ffff:127.0.0.1]".into(),
        "[::1]".into(),
        "[::127.0.0.1]".into(),
        "[64:ff9b::7f00:1]".into(),
        "127.0.0.2".into(),
    ];
    curl_bundle(bundle.path(), &spellings, &port.to_string(), "/");
    let resolve = format!("db.test:{port}:127.0.0.1");
    let (_home, a) = node_with(&pg, "a", "10s", &["--resolve", &resolve]);
    let id = a.session(bundle.path().to_str().unwrap()).await;
    let (status, result) = turn(&a, &id, "go").await;
    assert_eq!(status, 200, "{result}");
    let answer = result["final_message"].as_str().unwrap();
    for host in &spellings {
        // As the proxy names it: an IP literal in its canonical form, without brackets.
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let shown = bare
            .parse::<std::net::IpAddr>()
            .map(|ip| ip.to_string())
            .unwrap_or_else(|_| bare.to_string());
        let refused = format!("{shown}:{port} is not allowed");
        assert!(
            answer.contains(&refused),
            "the proxy refuses the database as {host}: {answer}"
        );
    }
    assert_eq!(
        answer.matches("session database").count(),
        spellings.len(),
        "every refusal names the database: {answer}"
    );
}

/// Attack: a bundle on node a lists node b's API (the same host, another port) in two spellings. The other nodes'
/// addresses are reserved like the node's own, so its sandbox cannot reach b, whose port it could not know of
/// otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_listing_another_nodes_api_cannot_reach_it_from_its_sandbox() {
    let pg = Postgres::start();
    let (_home_b, b) = node(&pg, "b", "10s");
    let port = b
        .server
        .base
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let bundle = TempDir::new().unwrap();
    let spellings = ["127.0.0.1", "localhost"];
    curl_bundle(bundle.path(), &spellings, &port, "/healthz");
    // b has said where it serves before a starts.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pg
        .sql("SELECT url FROM nodes WHERE node_id = 'b'")
        .contains(&port)
    {
        assert!(
            Instant::now() < deadline,
            "node b never recorded its address"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_home_a, a) = node(&pg, "a", "10s");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !pg
        .sql("SELECT url FROM nodes WHERE node_id = 'a'")
        .contains("http")
    {
        assert!(Instant::now() < deadline, "node a never renewed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = a.session(bundle.path().to_str().unwrap()).await;
    let (status, result) = turn(&a, &id, "go").await;
    assert_eq!(status, 200, "{result}");
    let answer = result["final_message"].as_str().unwrap();
    for host in spellings {
        assert!(
            answer.contains(&format!("{host}:{port} is not allowed"))
                && answer.contains("another node"),
            "the proxy refuses node b as {host}: {answer}"
        );
    }
    assert!(
        !answer.contains("\"status\""),
        "node b answered the sandbox: {answer}"
    );
}
