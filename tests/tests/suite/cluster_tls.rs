//! The store's connections over TLS (`sslmode=require`, `serve --store-ca`): the database's certificate is verified,
//! so a node never hands sessions to a server it cannot authenticate.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use super::cluster::{node_with, turn};
use super::postgres::Postgres;
use super::support::{binary, write_bundle};

/// Runs `serve` with `args` until it exits (within 20 s): its exit status and standard error.
fn serve_until_exit(args: &[&str]) -> (std::process::ExitStatus, String) {
    let home = TempDir::new().unwrap();
    let mut child = Command::new(binary())
        .args(["serve", "--bind", "127.0.0.1:0"])
        .args(args)
        .env("SERVICE_HOME", home.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("serve kept running over a database whose certificate it cannot verify");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status, stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_over_tls_verifies_the_database_certificate() {
    let pg = Postgres::start_tls();
    let required = format!("{}?sslmode=require", pg.url());

    // The certificate's CA is not one the node trusts: it refuses to start, and says why and where.
    let (status, stderr) = serve_until_exit(&["--store", &required, "--cluster-token", "c"]);
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("127.0.0.1"), "{stderr}");
    assert!(stderr.to_lowercase().contains("certificate"), "{stderr}");

    // With the CA, every connection is TLS.
    let ca = pg.ca().display().to_string();
    let (_home, api) = node_with(&pg, "tls", "10s", &["--store-ca", &ca]);
    let bundle = TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{text: "over tls"}]}]}"#,
        "",
        "workspace_write",
    );
    let (status, created) = api
        .post("/sessions", json!({"bundle_ref": bundle.path()}))
        .await;
    assert_eq!(status, 201, "{created}");
    let (status, result) = turn(&api, created["id"].as_str().unwrap(), "hi").await;
    assert_eq!(status, 200, "{result}");
    assert_eq!(result["final_message"], "over tls");
    let counts = pg.sql(
        "SELECT count(*) FILTER (WHERE s.ssl), count(*) FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) WHERE a.application_name = 'service-rs tls'",
    );
    let (tls, all) = counts.split_once('|').unwrap();
    assert!(all.parse::<u32>().unwrap() > 0, "{counts}");
    assert_eq!(
        tls, all,
        "connections of the node that are not TLS: {counts}"
    );
}
