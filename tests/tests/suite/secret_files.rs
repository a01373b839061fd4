//! Secrets from files (`SERVICE_TOKEN_FILE`, `SERVICE_CLUSTER_TOKEN_FILE`, `SERVICE_STORE_URL_FILE`), as a container
//! platform mounts them: the file's value is the secret, and a file that cannot serve stops the command with the
//! variable named. Against the real binary.

use super::support::{Env, Server};

#[tokio::test]
async fn the_token_in_the_file_service_token_file_names_is_the_one_serve_requires() {
    let env = Env::new();
    let file = env.path("token");
    std::fs::write(&file, "tok-from-a-file-41d2\n").unwrap();
    let server = Server::start(
        env.home.path(),
        &[],
        &[("SERVICE_TOKEN_FILE", file.to_str().unwrap())],
    );
    let client = reqwest::Client::new();
    let sessions = format!("{}/sessions", server.base);
    let with = client
        .get(&sessions)
        .bearer_auth("tok-from-a-file-41d2")
        .send()
        .await
        .unwrap();
    assert_eq!(with.status(), 200, "the file's token, less its newline");
    let without = client.get(&sessions).send().await.unwrap();
    assert_eq!(without.status(), 401);
    assert!(
        !server
            .log
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("tok-from-a-file-41d2")),
        "the token reached the log"
    );
}

#[test]
fn a_secret_set_twice_or_a_file_that_cannot_serve_stops_serve_naming_the_variable() {
    let env = Env::new();
    let file = env.path("token");
    std::fs::write(&file, "tok-1\n").unwrap();
    let empty = env.path("empty");
    std::fs::write(&empty, "\n").unwrap();
    let missing = env.path("missing");
    let cases: [(&[(&str, &str)], &str); 4] = [
        (
            &[
                ("SERVICE_TOKEN", "tok-2"),
                ("SERVICE_TOKEN_FILE", file.to_str().unwrap()),
            ],
            "SERVICE_TOKEN and SERVICE_TOKEN_FILE are both set",
        ),
        (
            &[("SERVICE_CLUSTER_TOKEN_FILE", missing.to_str().unwrap())],
            "SERVICE_CLUSTER_TOKEN_FILE=",
        ),
        (
            &[("SERVICE_STORE_URL_FILE", empty.to_str().unwrap())],
            "is empty: write the SERVICE_STORE_URL value into it",
        ),
        (
            &[("SERVICE_TOKEN_FILE", env.home.path().to_str().unwrap())],
            "SERVICE_TOKEN_FILE=",
        ),
    ];
    for (vars, said) in cases {
        let mut command = env.command(&["serve", "--bind", "127.0.0.1:0"]);
        command.env_remove("SERVICE_TOKEN");
        for (k, v) in vars {
            command.env(k, v);
        }
        let out = exits_within_seconds(command, 10);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(said) && out.stdout.is_empty(),
            "{vars:?}: {stderr}"
        );
    }
}

/// Runs `command` to its end; a serve still running after `seconds` (one that started) is killed and fails the test.
fn exits_within_seconds(mut command: std::process::Command, seconds: u64) -> std::process::Output {
    use std::process::Stdio;
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "serve started instead of refusing: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}
