//! What an operator scrapes: a scraper's own token (`serve --metrics-token`) reads `GET /metrics` and nothing else,
//! so a Prometheus holds no admin token (admin tokens still read the metrics, a tenant's token does not); turns and
//! requests are timed by route template; every metric the example alert rules name is served. Against the real
//! `serve`.

use serde_json::json;

use super::http_client::Api;
use super::operations::{metric, Client};
use super::support::{write_bundle, Env, Server};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_time_turns_and_requests_by_route_template_and_serve_every_metric_the_alert_rules_name(
) {
    let pg = super::postgres::Postgres::start();
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [{text: "done"}]}]}"#,
        "",
        "read_only",
    );
    let url = pg.url();
    let args = [
        "--store",
        &url,
        "--node-id",
        "a",
        "--cluster-token",
        "t",
        "--migrate",
    ];
    let server = Server::start(env.home.path(), &args, &[]);
    let api = Client::of(&server);
    let id = api.session(&env.path("b").display().to_string()).await;
    api.turn(&id, "go").await;
    // A path no route takes, and a method of the client's own: neither makes a series of its own.
    let stray = format!("/sessions/{id}/no-such-thing");
    assert_eq!(
        api.send(reqwest::Method::GET, &stray, None)
            .await
            .status()
            .as_u16(),
        404
    );
    let odd = reqwest::Method::from_bytes(b"PROPFIND-X").unwrap();
    api.send(odd, "/healthz", None).await;
    let body = api
        .send(reqwest::Method::GET, "/metrics", None)
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric(
            &body,
            "service_turn_duration_seconds_count",
            "outcome=\"completed\""
        ),
        1.0
    );
    assert_eq!(
        metric(
            &body,
            "service_http_request_duration_seconds_count",
            "method=\"POST\",route=\"/sessions/{id}/run-sync\""
        ),
        1.0
    );
    assert!(
        metric(
            &body,
            "service_http_request_duration_seconds_count",
            "method=\"other\",route=\"unmatched\""
        ) >= 1.0
    );
    assert!(!body.contains(&id), "a session id in a label:\n{body}");
    assert!(!body.contains("PROPFIND"), "{body}");
    assert!(
        metric(&body, "service_store_connections", "state=\"open\"") >= 1.0,
        "{body}"
    );
    assert!(
        metric(&body, "service_store_size_bytes", "") > 1_000_000.0,
        "{body}"
    );
    assert!(metric(&body, "service_home_free_bytes", "") > 0.0, "{body}");
    assert_eq!(metric(&body, "service_store_errors", ""), 0.0, "{body}");

    // Every metric the example alert rules use is one a node serves.
    let rules = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src/operating/alerts.yml"),
    )
    .unwrap();
    let parsed: serde_yaml::Value = serde_yaml::from_str(&rules).unwrap();
    let exprs: Vec<String> = parsed["groups"][0]["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect();
    assert!(exprs.len() >= 10, "{exprs:?}");
    let mut named = 0;
    for expr in &exprs {
        for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if !(word.starts_with("service_") || word.starts_with("process_")) {
                continue;
            }
            let family = ["_bucket", "_total", "_count", "_sum"]
                .iter()
                .find_map(|s| word.strip_suffix(s))
                .unwrap_or(word);
            // A family labeled by tenant has no series before its first event, and is not written until then:
            // its registration is what is checked.
            let registered = |name: &str| {
                include_str!("../../../supervisor/src/metrics.rs").contains(&format!("\"{name}\","))
            };
            let served = body.contains(&format!("# TYPE {family} "))
                || (family == "service_quota_refusals" && registered("quota_refusals"))
                || (family == "service_tenant_quota_headroom"
                    && registered("tenant_quota_headroom"));
            assert!(
                served,
                "the rule `{expr}` names {word}, which /metrics does not serve:\n{body}"
            );
            named += 1;
        }
    }
    assert!(named >= 12, "{named}");
}
