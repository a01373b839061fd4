//! What `serve` writes beside its log: under `--log-format json`, nothing but JSON on stdout and stderr (the
//! address, the token's file, the stop, a failure), and never the token itself. Against the real binary.

use std::time::Duration;

use serde_json::Value;

use super::support::{Env, Server};

#[tokio::test]
async fn serve_with_json_logs_writes_only_json_lines_and_names_the_token_file_not_the_token() {
    let env = Env::new();
    // Started without a token: serve makes one, which a text log would show.
    // No pre-stop delay: SIGTERM stops it at once, rather than after the 5 s a load balancer is given.
    let server = Server::start(
        env.home.path(),
        &["--log-format", "json", "--pre-stop-delay", "0s"],
        &[],
    );
    let token = server.token.clone().expect("serve made a token");
    let health = reqwest::get(format!("{}/healthz", server.base))
        .await
        .unwrap();
    assert!(health.status().is_success());
    let pid = nix::unistd::Pid::from_raw(server.child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    server.json_log_with("saying it stopped", |l| l["message"] == "stopped");
    let status = server_exit(server, &token);
    assert!(status.success(), "{status:?}");
}

/// Waits for `server` to exit, then checks every line of its stderr: JSON, with the listening address and the token
/// file, and without `token`.
fn server_exit(server: Server, token: &str) -> std::process::ExitStatus {
    let (log, base) = (server.log.clone(), server.base.clone());
    let status = server.wait_exit(Duration::from_secs(30));
    let lines = log.lock().unwrap().clone();
    for line in &lines {
        assert!(
            serde_json::from_str::<Value>(line).is_ok_and(|v| v.is_object()),
            "a line of stderr is not a JSON object: {line:?}"
        );
        assert!(!line.contains(token), "the token reached the log: {line}");
    }
    let events: Vec<Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e["message"] == "listening" && e["address"] == base.as_str()),
        "{events:#?}"
    );
    assert!(
        events.iter().any(|e| e["token_file"]
            .as_str()
            .is_some_and(|f| f.ends_with("serve.token"))),
        "{events:#?}"
    );
    status
}

#[test]
fn a_serve_that_fails_to_start_under_json_logs_says_why_as_json() {
    let env = Env::new();
    let out = env
        .command(&["serve", "--log-format", "json", "--bind", "nowhere"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let events: Vec<Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l:?}")))
        .collect();
    assert!(
        events.iter().any(|e| e["level"] == "ERROR"
            && e["error"]
                .as_str()
                .is_some_and(|m| m.contains("--bind takes host:port"))),
        "{events:#?}"
    );
}
