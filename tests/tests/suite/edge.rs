//! A node's edge, against the real `serve`: TLS on its own listener (certificates made by openssl, renewed in
//! place), secrets rotated without a restart (a leaked server or metrics token stops working within seconds), and
//! per-tenant request rates (one tenant's flood is refused while the others and the operator go on).

use std::io::{Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tempfile::TempDir;

use super::http_client::Api;
use super::support::{binary, Env, Server};

/// A certificate authority (ca.pem) in `dir` and a certificate it issued for `localhost` (cert.pem, key.pem).
fn certificate(dir: &Path) {
    super::support::issue_certificate(dir, "DNS:localhost", "cert.pem", "key.pem");
}

/// A client that trusts only the authority in `pem` and reaches `localhost` at the server's address.
fn tls_client(server: &Server, pem: &Path) -> reqwest::Client {
    let addr: std::net::SocketAddr = server.base.trim_start_matches("https://").parse().unwrap();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(pem).unwrap()).unwrap();
    reqwest::Client::builder()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .resolve("localhost", addr)
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

/// `GET path` over TLS as `client`: the status, or the error's text when no TLS session could be made.
async fn get(server: &Server, client: &reqwest::Client, path: &str) -> Result<u16, String> {
    let port = server.base.rsplit(':').next().unwrap();
    let mut req = client.get(format!("https://localhost:{port}{path}"));
    if let Some(t) = &server.token {
        req = req.bearer_auth(t);
    }
    match req.send().await {
        Ok(r) => Ok(r.status().as_u16()),
        Err(e) => Err(format!("{e:?}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_listener_serves_its_certificate_refuses_plain_http_and_stalled_handshakes_and_takes_a_renewal(
) {
    let certs = TempDir::new().unwrap();
    let (first, second) = (certs.path().join("first"), certs.path().join("second"));
    for dir in [&first, &second] {
        std::fs::create_dir(dir).unwrap();
        certificate(dir);
    }
    let live = certs.path().join("live");
    std::fs::create_dir(&live).unwrap();
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(first.join(f), live.join(f)).unwrap();
    }
    let home = TempDir::new().unwrap();
    let (cert, key) = (live.join("cert.pem"), live.join("key.pem"));
    let args = [
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
        "--header-timeout",
        "1",
    ];
    let server = Server::start(home.path(), &args, &[]);
    assert!(
        server.base.starts_with("https://127.0.0.1:"),
        "{}",
        server.base
    );

    let trusting_first = tls_client(&server, &first.join("ca.pem"));
    assert_eq!(get(&server, &trusting_first, "/healthz").await, Ok(200));
    assert_eq!(get(&server, &trusting_first, "/sessions").await, Ok(200));
    // A client that does not trust the certificate (a man in the middle's, to it) gets no session.
    let trusting_second = tls_client(&server, &second.join("ca.pem"));
    let refused = get(&server, &trusting_second, "/healthz")
        .await
        .unwrap_err();
    assert!(refused.to_lowercase().contains("certificate"), "{refused}");

    // Plain HTTP to the TLS port: no HTTP answer, nothing served in the clear.
    let addr = server.base.trim_start_matches("https://").to_string();
    let mut plain = std::net::TcpStream::connect(&addr).unwrap();
    plain
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    plain
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    assert!(
        !answer.starts_with(b"HTTP/"),
        "{}",
        String::from_utf8_lossy(&answer)
    );

    // A connection that never sends its ClientHello is closed after the header timeout, not held.
    let started = Instant::now();
    let mut stalled = std::net::TcpStream::connect(&addr).unwrap();
    stalled
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut byte = [0u8; 1];
    let read = stalled.read(&mut byte);
    assert!(matches!(read, Ok(0)) || read.is_err(), "{read:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "held {:?}",
        started.elapsed()
    );

    // The renewed pair, written over the files: new connections get it within seconds, no restart.
    for f in ["cert.pem", "key.pem"] {
        std::fs::copy(second.join(f), live.join(f)).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while get(&server, &trusting_second, "/healthz").await != Ok(200) {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was not served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(get(&server, &trusting_first, "/healthz").await.is_err());
    // A key that is not the certificate's is refused, and the pair in force stays; the log says so once, not at
    // every read.
    std::fs::copy(first.join("key.pem"), live.join("key.pem")).unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(get(&server, &trusting_second, "/healthz").await, Ok(200));
    assert_eq!(said(&server, "the certificate in force is kept"), 1);
}

/// How many of the server's log lines so far contain `text`.
fn said(server: &Server, text: &str) -> usize {
    server
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|l| l.contains(text))
        .count()
}

#[test]
fn serve_refuses_to_start_with_a_key_that_is_not_its_certificates() {
    let certs = TempDir::new().unwrap();
    let (a, b) = (certs.path().join("a"), certs.path().join("b"));
    for dir in [&a, &b] {
        std::fs::create_dir(dir).unwrap();
        certificate(dir);
    }
    let home = TempDir::new().unwrap();
    let out = std::process::Command::new(binary())
        .args(["serve", "--bind", "127.0.0.1:0", "--tls-cert"])
        .arg(a.join("cert.pem"))
        .arg("--tls-key")
        .arg(b.join("key.pem"))
        .env("SERVICE_HOME", home.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("give the key the certificate was issued for"),
        "{stderr}"
    );
    let out = std::process::Command::new(binary())
        .args(["serve", "--bind", "127.0.0.1:0", "--tls-cert"])
        .arg(a.join("key.pem"))
        .arg("--tls-key")
        .arg(a.join("key.pem"))
        .env("SERVICE_HOME", home.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("holds no CERTIFICATE in PEM form"),
        "{stderr}"
    );
}

/// Polls until `token` gets `status` on `GET path`.
async fn until_status(server: &Server, token: &str, path: &str, status: u16) {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = client
            .get(server.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
            .status()
            .as_u16();
        if got == status {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{path} still answers {got}, not {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_server_token_takes_over_within_seconds_and_the_leaked_one_is_refused() {
    let env = Env::new();
    let server = Server::start(env.home.path(), &[], &[]);
    let leaked = server.token.clone().unwrap();
    until_status(&server, &leaked, "/sessions", 200).await;

    let shown = env.run(&["tokens", "server"]);
    let listing = shown.ok();
    assert!(
        listing.contains("serve.token") && listing.contains("fingerprint  sha256:"),
        "{listing}"
    );
    assert!(
        !listing.contains(&leaked),
        "the listing shows the token itself"
    );

    let rotated = env.run(&["tokens", "server", "--rotate"]);
    let new = rotated.ok().trim().to_string();
    assert_eq!(new.len(), 64);
    until_status(&server, &leaked, "/sessions", 401).await;
    until_status(&server, &new, "/sessions", 200).await;
    // The rotation is in the audit log, by its fingerprint only.
    let audit = env.run(&["audit", "--json"]);
    let entries = audit.ok();
    assert!(entries.contains("server_token_rotated"), "{entries}");
    assert!(!entries.contains(&new) && !entries.contains(&leaked));
    // Over --remote it says where to run it instead.
    let remote = env.run(&["--remote", &server.base, "tokens", "server"]);
    assert!(remote
        .failed()
        .contains("run `service-rs tokens server` on that node"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_from_files_are_read_again_and_a_broken_file_neither_locks_out_nor_opens() {
    let secrets = TempDir::new().unwrap();
    let (token_file, metrics_file) = (secrets.path().join("token"), secrets.path().join("metrics"));
    std::fs::write(&token_file, "first-server-token\n").unwrap();
    std::fs::write(&metrics_file, "first-metrics-token\n").unwrap();
    let home = TempDir::new().unwrap();
    let server = Server::start(
        home.path(),
        &[],
        &[
            ("SERVICE_TOKEN_FILE", token_file.to_str().unwrap()),
            ("SERVICE_METRICS_TOKEN_FILE", metrics_file.to_str().unwrap()),
        ],
    );
    until_status(&server, "first-server-token", "/sessions", 200).await;
    until_status(&server, "first-metrics-token", "/metrics", 200).await;

    std::fs::write(&token_file, "second-server-token\n").unwrap();
    std::fs::write(&metrics_file, "second-metrics-token\n").unwrap();
    until_status(&server, "first-server-token", "/sessions", 401).await;
    until_status(&server, "second-server-token", "/sessions", 200).await;
    until_status(&server, "first-metrics-token", "/metrics", 401).await;
    until_status(&server, "second-metrics-token", "/metrics", 200).await;

    // A half-written or emptied file: the token in force stays, and the empty string opens nothing.
    std::fs::write(&token_file, "").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    until_status(&server, "second-server-token", "/sessions", 200).await;
    let anonymous = reqwest::get(server.url("/sessions")).await.unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(said(&server, "was not reloaded"), 1);
}

/// `GET /sessions` as `api` `n` times: the statuses.
async fn statuses(api: &Api, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(api.get("/sessions").await.0);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_over_its_request_rate_gets_429_with_retry_after_while_others_and_the_operator_go_on(
) {
    let env = Env::new();
    let args = [
        "--tenant-request-rate",
        "5/m",
        "--tenant-request-rate-for",
        "big=8/m",
    ];
    let operator = Api::new(Server::start(env.home.path(), &args, &[]));
    let mut tenants = Vec::new();
    for tenant in ["acme", "big", "beta"] {
        let (status, made) = operator.post("/tokens", json!({"tenant": tenant})).await;
        assert_eq!(status, 201, "{made}");
        tenants.push(operator.beside(made["token"].as_str().unwrap()));
    }
    let (acme, big, beta) = (&tenants[0], &tenants[1], &tenants[2]);

    // The flood: acme's sixth request in a minute is refused, with when to retry and what to change.
    assert_eq!(statuses(acme, 5).await, [200; 5]);
    let refused = acme
        .req(reqwest::Method::GET, "/sessions")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 429);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=12).contains(&retry), "Retry-After {retry}");
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "rate_limited");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("--tenant-request-rate-for acme="));
    // Every front end counts: the OpenAI routes are refused too.
    assert_eq!(acme.get("/v1/models").await.0, 429);
    // Others are not crowded out; a tenant's own rate wins over the default; operators are not limited.
    assert_eq!(statuses(beta, 5).await, [200; 5]);
    assert_eq!(statuses(big, 8).await, [200; 8]);
    assert_eq!(big.get("/sessions").await.0, 429);
    assert_eq!(statuses(&operator, 30).await, [200; 30]);

    let (_, metrics) = operator.get("/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    assert!(
        metrics.contains(r#"service_quota_refusals_total{tenant="acme",code="rate_limited"} 2"#),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_quota_headroom_is_a_metric() {
    let env = Env::new();
    let bundle = TempDir::new().unwrap();
    super::support::write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{text: "hi"}]}]}"#,
        "",
        "read_only",
    );
    let operator = Api::new(Server::start(env.home.path(), &[], &[]));
    let (status, made) = operator.post("/tokens", json!({"tenant": "acme"})).await;
    assert_eq!(status, 201, "{made}");
    let acme = operator.beside(made["token"].as_str().unwrap());
    let quota = json!({"sessions": 3, "concurrent_turns": 2, "tokens_per_day": 1000});
    assert_eq!(operator.put("/tenants/acme/quota", quota).await.0, 200);
    let (status, session) = acme
        .post(
            "/sessions",
            json!({"bundle_ref": bundle.path().to_str().unwrap()}),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let (_, metrics) = operator.get("/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    for line in [
        r#"service_tenant_quota_headroom{tenant="acme",quota="sessions"} 2"#,
        r#"service_tenant_quota_headroom{tenant="acme",quota="concurrent_turns"} 2"#,
        r#"service_tenant_quota_headroom{tenant="acme",quota="tokens_per_day"} 1000"#,
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }
}
