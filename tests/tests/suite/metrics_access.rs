//! A scraper's own token (`serve --metrics-token`): it reads `GET /metrics` and nothing else, so a Prometheus
//! holds no admin token; admin tokens still read the metrics, and a tenant's token does not. Against the real
//! `serve`.

use serde_json::json;

use super::http_client::Api;
use super::support::{Env, Server};

#[tokio::test]
async fn the_metrics_token_reads_the_metrics_and_opens_nothing_else() {
    let env = Env::new();
    let scraper = "metrics-only-3b9e";
    let server = Server::start(
        env.home.path(),
        &["--log-format", "json"],
        &[("SERVICE_METRICS_TOKEN", scraper)],
    );
    let operator = Api::new(server);
    let metrics = operator.beside(scraper);
    let scrape = metrics
        .req(reqwest::Method::GET, "/metrics")
        .send()
        .await
        .unwrap();
    assert_eq!(scrape.status(), 200);
    assert!(scrape.text().await.unwrap().contains("service_build_info"));
    for (method, path) in [
        (reqwest::Method::GET, "/sessions"),
        (reqwest::Method::GET, "/tokens"),
        (reqwest::Method::POST, "/tokens"),
        (reqwest::Method::GET, "/usage"),
        (reqwest::Method::HEAD, "/metrics"),
        (reqwest::Method::GET, "/metrics/"),
    ] {
        let answer = metrics
            .req(method.clone(), path)
            .json(&json!({"tenant": "acme"}))
            .send()
            .await
            .unwrap();
        assert!(
            [401, 404, 405].contains(&answer.status().as_u16()),
            "{method} {path} with the metrics token: {}",
            answer.status()
        );
    }
    // The operator's token still reads them; a tenant's token does not; no token is refused.
    let (status, _) = operator.get("/metrics").await;
    assert_eq!(status, 200);
    let (status, made) = operator.post("/tokens", json!({"tenant": "acme"})).await;
    assert_eq!(status, 201, "{made}");
    let (status, _) = operator
        .beside(made["token"].as_str().unwrap())
        .get("/metrics")
        .await;
    assert_eq!(status, 403);
    let anonymous = reqwest::get(operator.url("/metrics")).await.unwrap();
    assert_eq!(anonymous.status(), 401);
    // The scrape's request line names the metrics token, not a tenant's.
    let log = operator.server.json_log_with("for the scrape", |l| {
        l["message"] == "request" && l["path"] == "/metrics" && l["token_id"] == "metrics"
    });
    assert!(!serde_json::to_string(&log).unwrap().contains(scraper));
}
