//! The HTTP server through the real `serve` binary, with a stock HTTP client (reqwest) and a stock SSE parser
//! (eventsource-stream).

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::http_client::{task, Api, Sse};
use super::support::{write_bundle, Env, Server};

fn kinds(events: &[(String, Value)]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, e) in events {
        let k = e["payload"]["type"].as_str().unwrap().to_string();
        if k.ends_with("_delta") && out.last() == Some(&k) {
            continue;
        }
        out.push(k);
    }
    out
}

fn example() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .join("examples/hello")
        .display()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_run_sync_and_the_event_stream_in_spec_order() {
    let home = TempDir::new().unwrap();
    let api = Api::new(Server::start(home.path(), &[], &[]));
    let (status, health) = api.get("/healthz").await;
    assert_eq!((status, health["status"].as_str()), (200, Some("ok")));
    let id = api.session(&example()).await;
    let mut sse = api.events(&id, None).await;
    let (status, out) = api
        .post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("over http")}),
        )
        .await;
    assert_eq!(status, 200, "{out}");
    assert_eq!(out["status"], "completed");
    assert!(out["final_message"]
        .as_str()
        .unwrap()
        .starts_with("You asked: \"over http\""));
    let events = sse.until("turn_completed").await;
    assert_eq!(
        kinds(&events),
        [
            "turn_started",
            "reasoning_delta",
            "usage_update",
            "tool_call_started",
            "tool_call_delta",
            "exec_command_begin",
            "exec_command_output_delta",
            "exec_command_end",
            "tool_call_finished",
            "agent_message_delta",
            "turn_completed"
        ]
    );
    for (sse_id, msg) in &events {
        assert_eq!(
            sse_id,
            msg["id"].as_str().unwrap(),
            "SSE id is the event sequence number"
        );
        assert_eq!(msg["session_id"], id.as_str());
    }
    assert_eq!(
        events[0].1["payload"]["payload"]["context"]["sandbox_mode"],
        "read_only"
    );
    let (status, record) = api.get(&format!("/sessions/{id}")).await;
    assert_eq!((status, record["turn_count"].as_u64()), (200, Some(1)));
    let (status, spec) = api.get("/openapi.json").await;
    assert_eq!(status, 200);
    for path in [
        "/sessions",
        "/sessions/{id}/run-sync",
        "/sessions/{id}/events",
        "/approvals/{request_id}",
        "/healthz",
    ] {
        assert!(spec["paths"].get(path).is_some(), "openapi lacks {path}");
    }
}

const ASK: &str = "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n";
const WRITE: &str = r#"{turns: [{replies: [{tool_calls: [{name: "Write", arguments: {file_path: "out.txt", content: "hi"}}]}, {text: "{{last_tool_output}}"}]}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_round_trip_over_http() {
    let home = TempDir::new().unwrap();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), WRITE, ASK, "workspace_write");
    let api = Api::new(Server::start(home.path(), &[], &[]));
    let id = api.session(bundle.path().to_str().unwrap()).await;
    let mut sse = api.events(&id, None).await;
    let (status, started) = api
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task("write")}),
        )
        .await;
    assert_eq!(status, 202, "{started}");
    assert_eq!(started["session_id"], id.as_str());
    let asked = sse.until("permission_requested").await;
    let request_id = asked.last().unwrap().1["payload"]["payload"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();

    let (status, body) = api
        .post(
            &format!("/approvals/{request_id}"),
            json!({"decision": "sometimes"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (422, Some("invalid_request"))
    );
    let (status, body) = api
        .post(
            &format!("/approvals/{request_id}"),
            json!({"decision": "allow_once"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"request_id": request_id, "decision": "allow_once"})
    );
    let rest = sse.until("turn_completed").await;
    assert_eq!(rest[0].1["payload"]["type"], "approval_resolved");
    let (status, body) = api
        .post(
            &format!("/approvals/{request_id}"),
            json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("approval_not_pending"))
    );
    let (status, body) = api
        .post("/approvals/nope", json!({"decision": "deny"}))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("approval_not_found"))
    );
}

const SLOW: &str = r#"{turns: [{replies: [{text: "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four", delay_ms: 40}]}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_with_last_event_id_mid_turn_loses_nothing() {
    let home = TempDir::new().unwrap();
    let bundle = TempDir::new().unwrap();
    write_bundle(bundle.path(), SLOW, "", "workspace_write");
    let api = Api::new(Server::start(home.path(), &[], &[]));
    let id = api.session(bundle.path().to_str().unwrap()).await;
    let mut first = api.events(&id, None).await;
    let (status, _) = api
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task("slow")}),
        )
        .await;
    assert_eq!(status, 202);
    let mut seen: Vec<u64> = Vec::new();
    for _ in 0..3 {
        seen.push(first.next().await.0.parse().unwrap());
    }
    drop(first); // the client goes away mid-turn
    tokio::time::sleep(Duration::from_millis(150)).await;
    let mut again = api
        .events(&id, Some(&seen.last().unwrap().to_string()))
        .await;
    let rest = again.until("turn_completed").await;
    seen.extend(
        rest.iter()
            .map(|(sse_id, _)| sse_id.parse::<u64>().unwrap()),
    );
    let expected: Vec<u64> = (1..=seen.len() as u64).collect();
    assert_eq!(seen, expected, "no gap and no duplicate");
    // A finished session replays whole with ?after=0.
    let resp = api
        .req(
            reqwest::Method::GET,
            &format!("/sessions/{id}/events?after=0"),
        )
        .send()
        .await
        .unwrap();
    let mut replay = Sse(Box::pin(eventsource_stream::Eventsource::eventsource(
        resp.bytes_stream(),
    )));
    let all = replay.until("turn_completed").await;
    assert_eq!(all.len(), seen.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_sessions_run_turns_concurrently() {
    let home = TempDir::new().unwrap();
    let api = Api::new(Server::start(home.path(), &[], &[]));
    let mut ids = Vec::new();
    for _ in 0..20 {
        ids.push(api.session(&example()).await);
    }
    let runs = ids.iter().map(|id| {
        let api = &api;
        async move {
            api.post(
                &format!("/sessions/{id}/run-sync"),
                json!({"input": task("together")}),
            )
            .await
        }
    });
    let results = futures::future::join_all(runs).await;
    for (status, body) in results {
        assert_eq!(
            (status, body["status"].as_str()),
            (200, Some("completed")),
            "{body}"
        );
    }
    let (_, list) = api.get("/sessions").await;
    assert_eq!(list.as_array().unwrap().len(), 20);
}

/// The names of a process's threads that serve connections (`http-N`), in order.
fn http_threads(pid: u32) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|n| n.trim().to_string())
        .filter(|n| n.starts_with("http-"))
        .collect();
    names.sort();
    names
}

/// `--http-threads` serves each connection on one thread of its own; a session made and watched on one connection
/// is driven from another, its worker's commands and its events crossing between them. With 0 the connections are
/// served on the shared async threads, and everything works the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_driven_from_one_connection_and_watched_from_another_with_or_without_http_threads(
) {
    for (threads, expected) in [("2", vec!["http-0", "http-1"]), ("0", vec![])] {
        let home = TempDir::new().unwrap();
        let watcher = Api::new(Server::start(
            home.path(),
            &["--http-threads", threads],
            &[],
        ));
        assert_eq!(
            http_threads(watcher.server.child.id()),
            expected,
            "--http-threads {threads}"
        );
        let id = watcher.session(&example()).await;
        let mut sse = watcher.events(&id, None).await;
        let driver = watcher.beside(watcher.token.as_deref().unwrap());
        for round in 0..3 {
            let (status, out) = driver
                .post(
                    &format!("/sessions/{id}/run-sync"),
                    json!({"input": task(&format!("round {round}"))}),
                )
                .await;
            assert_eq!(
                (status, out["status"].as_str()),
                (200, Some("completed")),
                "{out}"
            );
            let events = sse.until("turn_completed").await;
            assert!(
                kinds(&events).contains(&"exec_command_end".to_string()),
                "--http-threads {threads}, round {round}: {:?}",
                kinds(&events)
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_status_has_the_error_shape() {
    let home = TempDir::new().unwrap();
    let slow = TempDir::new().unwrap();
    write_bundle(slow.path(), SLOW, "", "workspace_write");
    let api = Api::new(Server::start(home.path(), &[], &[]));
    let id = api.session(slow.path().to_str().unwrap()).await;
    let check = |(status, body): (u16, Value), want: u16, code: &str| {
        assert_eq!(status, want, "{body}");
        assert_eq!(body["error"]["code"], code, "{body}");
        assert!(!body["error"]["message"].as_str().unwrap().is_empty());
    };
    let malformed = api
        .req(reqwest::Method::POST, "/sessions")
        .header("content-type", "application/json")
        .body("{\"bundle_ref\": ")
        .send()
        .await
        .unwrap();
    check(
        (malformed.status().as_u16(), malformed.json().await.unwrap()),
        400,
        "malformed_json",
    );
    check(
        api.get("/sessions/00000000-0000-4000-8000-000000000000")
            .await,
        404,
        "session_not_found",
    );
    check(api.get("/sessions/../../etc").await, 404, "not_found");
    check(
        api.post("/sessions", json!({"bundle_ref": "ghost"})).await,
        404,
        "bundle_not_found",
    );
    check(
        api.post("/sessions", json!({"bundle_ref": "Bad Name"}))
            .await,
        422,
        "invalid_bundle_ref",
    );
    check(
        api.post("/sessions", json!({"bundle": "x"})).await,
        422,
        "invalid_request",
    );
    check(
        api.post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": {"prompt": "x", "submission_id": "abc"}}),
        )
        .await,
        422,
        "invalid_request",
    );
    // Its own connection: the server answers 413 before reading the body, then closes the connection.
    let big = "x".repeat(2 * 1024 * 1024);
    let resp = api
        .server
        .client()
        .post(api.server.url(&format!("/sessions/{id}/run-sync")))
        .json(&json!({"input": task(&big)}))
        .send()
        .await
        .unwrap();
    check(
        (resp.status().as_u16(), resp.json().await.unwrap()),
        413,
        "payload_too_large",
    );
    let (status, _) = api
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task("first")}),
        )
        .await;
    assert_eq!(status, 202);
    check(
        api.post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("second")}),
        )
        .await,
        409,
        "turn_in_progress",
    );
    let (status, _) = api
        .post(&format!("/sessions/{id}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 202);

    // A server that cannot confine workers answers 503 for a sandboxed session: told to use bubblewrap only,
    // which it cannot find (with `auto` it would fall back to Landlock).
    let home2 = TempDir::new().unwrap();
    let no_bwrap = Api::new(Server::start(
        home2.path(),
        &[],
        &[
            ("PATH", "/nonexistent"),
            ("SERVICE_SANDBOX_BACKEND", "bwrap"),
        ],
    ));
    let id = no_bwrap.session(&example()).await;
    let (status, body) = no_bwrap
        .post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("x")}),
        )
        .await;
    check((status, body.clone()), 503, "sandbox_unavailable");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("bubblewrap"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_guards_every_endpoint_but_healthz() {
    let home = TempDir::new().unwrap();
    let mut api = Api::new(Server::start(home.path(), &["--token", "s3cret"], &[]));
    assert_eq!(api.get("/healthz").await.0, 200);
    let (status, body) = api.get("/sessions").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    api.token = Some("wrong".into());
    assert_eq!(api.get("/sessions").await.0, 401);
    api.token = Some("s3cret".into());
    assert_eq!(api.get("/sessions").await.0, 200);

    // The scheme is case-insensitive.
    let lower = api
        .client
        .get(api.server.url("/sessions"))
        .header("authorization", "bearer s3cret")
        .send()
        .await
        .unwrap();
    assert_eq!(lower.status().as_u16(), 200);

    // Without --token a token is generated, stored 0600 and required. (One server per files store at a time.)
    drop(api);
    let mut generated = Api::new(Server::start(home.path(), &[], &[]));
    let token = generated.token.clone().expect("serve.token written");
    assert_eq!(token.len(), 64);
    let mode = std::fs::metadata(home.path().join("serve.token"))
        .unwrap()
        .permissions();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
        0o600
    );
    assert_eq!(generated.get("/sessions").await.0, 200);
    generated.token = None;
    assert_eq!(generated.get("/sessions").await.0, 401);

    drop(generated);
    let open = Api::new(Server::start(home.path(), &["--no-auth"], &[]));
    assert_eq!(open.get("/sessions").await.0, 200);

    let refused = Env::new();
    let run = refused
        .command(&["serve", "--bind", "0.0.0.0:0", "--no-auth"])
        .output()
        .unwrap();
    assert!(!run.status.success());
    assert!(String::from_utf8_lossy(&run.stderr).contains("refusing --no-auth on 0.0.0.0:0"));

    // `localhost` is IPv4 loopback, so --no-auth is accepted there too.
    use std::io::BufRead;
    let mut local = refused
        .command(&["serve", "--bind", "localhost:0", "--no-auth"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(local.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _ = local.kill();
    let _ = local.wait();
    assert!(
        line.starts_with("service-rs listening on http://127.0.0.1:"),
        "{line}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_ends_the_turns_that_outlast_the_drain_and_a_restart_keeps_the_sessions() {
    let home = TempDir::new().unwrap();
    let bundle = TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{when: "slow", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 60"}}]}, {text: "late"}]}, {replies: [{text: "seen {{message_count}}"}]}]}"#,
        "",
        "workspace_write",
    );
    let bundle_ref = bundle.path().to_str().unwrap().to_string();
    // No pre-stop delay and a one-second drain: the `sleep 60` outlasts it (see drain.rs for turns that do not).
    let drain = ["--pre-stop-delay", "0s", "--drain-timeout", "1s"];
    let api = Api::new(Server::start(home.path(), &drain, &[]));
    let id = api.session(&bundle_ref).await;
    let (_, first) = api
        .post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("hello")}),
        )
        .await;
    assert_eq!(first["final_message"], "seen 2");
    let mut sse = api.events(&id, None).await;
    let (status, _) = api
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task("slow")}),
        )
        .await;
    assert_eq!(status, 202);
    sse.until("exec_command_begin").await;
    let started = std::time::Instant::now();
    let status = api.into_server().terminate();
    assert!(status.success(), "serve exited with {status:?}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let end = sse.until("error").await;
    let err = &end.last().unwrap().1["payload"]["payload"];
    assert!(
        err["message"].as_str().unwrap().contains("server stopped"),
        "{err}"
    );

    let api = Api::new(Server::start(home.path(), &[], &[]));
    let (_, list) = api.get("/sessions").await;
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["status"], "idle");
    let (_, next) = api
        .post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("after restart")}),
        )
        .await;
    // system + hello, seen 2, slow, [its call and result], after restart: history continues.
    assert_eq!(next["status"], "completed", "{next}");
    assert!(
        next["final_message"].as_str().unwrap().starts_with("seen "),
        "{next}"
    );
    assert_ne!(next["final_message"], "seen 2");
}

#[test]
fn the_remote_cli_runs_against_a_server() {
    let env = Env::new();
    let server = Server::start(env.home.path(), &[], &[]);
    env.run(&["build", &example()]).ok();
    let out = env
        .run(&[
            "--remote",
            &server.base,
            "run",
            "hello",
            "--prompt",
            "from afar",
        ])
        .ok()
        .to_string();
    assert!(out.starts_with("You asked: \"from afar\""), "{out}");
    let listed = env
        .run(&["--remote", &server.base, "bundles", "--json"])
        .json();
    assert_eq!(listed[0]["reference"], "local/hello:0.1.0");
    let info = env
        .run(&[
            "--remote",
            &server.base,
            "inspect",
            "local/hello:0.1.0",
            "--json",
        ])
        .json();
    assert_eq!(info["id"], "hello");
    let sessions = env
        .run(&["--remote", &server.base, "sessions", "--json"])
        .json();
    assert_eq!(sessions.as_array().unwrap().len(), 1);
    let err = env
        .run(&["--remote", &server.base, "build", "x"])
        .failed()
        .to_string();
    assert!(err.contains("`build` cannot run with --remote"), "{err}");
    let err = env
        .run(&["--remote", &server.base, "inspect", "ghost"])
        .failed()
        .to_string();
    assert!(
        err.contains("no bundle named \"ghost\"") && err.contains("HTTP 404"),
        "{err}"
    );
}
