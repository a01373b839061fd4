//! Operating `serve`: JSON logs of requests, workers, provider calls and approvals (never a secret), request ids
//! in error bodies, `/metrics`, and idle workers reaped. A full store is in `full_store.rs`.

use std::time::Duration;

use serde_json::{json, Value};

use super::provider_server::ProviderServer;
use super::providers::{bundle, openai_text};
use super::support::{pids_with, wait_until, write_bundle, Env, Server};

const ASKING: &str = r#"{turns: [{replies: [
  {tool_calls: [{name: "Bash", arguments: {command: "echo ran-$((6*7))"}}]},
  {text: "done after {{last_tool_output}} with {{message_count}} messages"}
]}]}"#;

/// A client of one server, sending its token.
pub(super) struct Client {
    http: reqwest::Client,
    base: String,
    token: Option<String>,
}

impl Client {
    pub(super) fn of(server: &Server) -> Client {
        Client {
            http: reqwest::Client::new(),
            base: server.base.clone(),
            token: server.token.clone(),
        }
    }

    pub(super) async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> reqwest::Response {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        req.send().await.unwrap()
    }

    pub(super) async fn json(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let resp = self.send(method, path, body).await;
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }

    /// Runs one turn with `run-sync` and asserts it was answered.
    pub(super) async fn turn(&self, id: &str, prompt: &str) -> Value {
        let (status, body) = self
            .json(
                reqwest::Method::POST,
                &format!("/sessions/{id}/run-sync"),
                Some(json!({"input": {"prompt": prompt}})),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }

    pub(super) async fn session(&self, bundle: &str) -> String {
        let (status, body) = self
            .json(
                reqwest::Method::POST,
                "/sessions",
                Some(json!({"bundle_ref": bundle})),
            )
            .await;
        assert_eq!(status, 201, "{body}");
        body["id"].as_str().unwrap().to_string()
    }

    pub(super) async fn journal(&self, id: &str) -> Vec<Value> {
        let (status, body) = self
            .json(
                reqwest::Method::GET,
                &format!("/sessions/{id}/journal"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body.as_array().unwrap().clone()
    }

    async fn metrics(&self) -> String {
        let resp = self.send(reqwest::Method::GET, "/metrics", None).await;
        assert_eq!(resp.status().as_u16(), 200);
        resp.text().await.unwrap()
    }
}

fn lines_with<'a>(log: &'a [Value], message: &str) -> Vec<&'a Value> {
    log.iter().filter(|l| l["message"] == message).collect()
}

/// The value of an unlabelled metric, or of the first series whose labels contain `labels`.
pub(super) fn metric(text: &str, name: &str, labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| {
            l.starts_with(name) && l[name.len()..].starts_with([' ', '{']) && l.contains(labels)
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {name}{{{labels}}} in:\n{text}"))
}

#[tokio::test]
async fn serve_logs_requests_workers_provider_calls_and_approvals_as_json_lines() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        ASKING,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, action: ask }\n",
        "workspace_write",
    );
    let server = Server::start(env.home.path(), &["--log-format", "json"], &[]);
    let api = Client::of(&server);
    let bundle_dir = env.path("b").display().to_string();
    let id = api.session(&bundle_dir).await;
    let run = {
        let (api, id) = (Client::of(&server), id.clone());
        tokio::spawn(async move {
            api.json(
                reqwest::Method::POST,
                &format!("/sessions/{id}/run-sync"),
                Some(json!({"input": {"prompt": "go"}})),
            )
            .await
        })
    };
    // Answer the approval the turn asks for.
    let mut request_id = None;
    for _ in 0..200 {
        request_id = api.journal(&id).await.iter().find_map(|e| {
            (e["payload"]["type"] == "permission_requested").then(|| {
                e["payload"]["payload"]["request_id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
        });
        if request_id.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let request_id = request_id.expect("the turn asked for approval");
    let (status, _) = api
        .json(
            reqwest::Method::POST,
            &format!("/approvals/{request_id}"),
            Some(json!({"decision": "allow_once"})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, result) = run.await.unwrap();
    assert_eq!(
        status, 200,
        "a task without submission_id is accepted: {result}"
    );
    assert_eq!(result["status"], "completed");

    // An error body names its request id, and so does the response header.
    let resp = api
        .send(
            reqwest::Method::GET,
            "/sessions/00000000-0000-4000-8000-000000000000",
            None,
        )
        .await;
    let header = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["request_id"], header.as_str());

    let (status, _) = api
        .json(reqwest::Method::DELETE, &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(status, 204);

    // A 500 names the request id under which the log explains it; the body does not.
    let damaged = "11111111-1111-4111-8111-111111111111";
    let dir = env.home.path().join("sessions").join(damaged);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("session.json"), "{ not json").unwrap();
    let (status, internal) = api
        .json(reqwest::Method::GET, &format!("/sessions/{damaged}"), None)
        .await;
    assert_eq!(status, 500, "{internal}");
    assert!(
        !internal.to_string().contains("session.json"),
        "no server path in the body: {internal}"
    );
    let internal_id = internal["error"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();

    let log = server.json_log_with(&format!("with an error under {internal_id}"), |l| {
        l["level"] == "ERROR" && l["span"]["request_id"] == internal_id.as_str()
    });
    let serving = lines_with(&log, "service-rs serving");
    assert_eq!(serving.len(), 1, "{log:#?}");
    assert_eq!(
        serving[0]["bind"],
        server.base.trim_start_matches("http://")
    );
    assert_eq!(serving[0]["store"], env.home.path().display().to_string());
    assert!(serving[0]["sandbox"]
        .as_str()
        .unwrap()
        .starts_with("bubblewrap"));

    let requests = lines_with(&log, "request");
    let run_line = requests
        .iter()
        .find(|l| l["path"] == format!("/sessions/{id}/run-sync"))
        .expect("an access line for the turn");
    assert_eq!(run_line["method"], "POST");
    assert_eq!(run_line["status"], 200);
    assert_eq!(run_line["session"], id.as_str());
    assert!(run_line["latency_ms"].as_f64().unwrap() > 0.0);
    assert_eq!(run_line["request_id"].as_str().unwrap().len(), 32);
    assert!(requests
        .iter()
        .any(|l| l["request_id"] == header.as_str() && l["status"] == 404));

    let started = lines_with(&log, "worker started");
    assert!(
        started.iter().any(|l| l["session"] == id.as_str()),
        "{log:#?}"
    );
    let stopped = lines_with(&log, "worker stopped");
    assert!(
        stopped.iter().any(|l| l["session"] == id.as_str()),
        "{log:#?}"
    );
    let calls = lines_with(&log, "provider call");
    assert_eq!(calls.len(), 2, "two model calls: {log:#?}");
    for call in &calls {
        assert_eq!(call["provider"], "scripted");
        assert_eq!(call["outcome"], "ok");
        assert!(call["latency_ms"].as_f64().unwrap() >= 0.0);
    }
    let explained = log
        .iter()
        .find(|l| l["level"] == "ERROR" && l["span"]["request_id"] == internal_id.as_str())
        .expect("json_log_with waited for it");
    assert!(
        explained["message"]
            .as_str()
            .unwrap()
            .contains("session.json"),
        "{explained}"
    );
    let asked = lines_with(&log, "approval asked");
    assert_eq!(asked[0]["request_id"], request_id.as_str());
    assert_eq!(asked[0]["tool"], "Bash");
    let resolved = lines_with(&log, "approval resolved");
    assert_eq!(resolved[0]["request_id"], request_id.as_str());
    assert_eq!(resolved[0]["decision"], "AllowOnce");
}

#[tokio::test]
async fn no_token_or_provider_key_ever_reaches_the_log() {
    let env = Env::new();
    let provider = ProviderServer::start(vec![openai_text("fine")]);
    bundle(&env, "keyed", "openai", "m1", Value::Null);
    let token = "tok-never-logged-7c1e";
    let key = "sk-never-logged-9f2a";
    let server = Server::start(
        env.home.path(),
        &["--log-format", "json"],
        &[
            ("SERVICE_TOKEN", token),
            ("OPENAI_API_KEY", key),
            ("OPENAI_BASE_URL", &provider.base),
            ("RUST_LOG", "debug"),
        ],
    );
    let api = Client {
        http: reqwest::Client::new(),
        base: server.base.clone(),
        token: Some(token.into()),
    };
    let id = api.session(&env.path("keyed").display().to_string()).await;
    let (status, result) = api
        .json(
            reqwest::Method::POST,
            &format!("/sessions/{id}/run-sync"),
            Some(json!({"input": {"prompt": "hi"}})),
        )
        .await;
    assert_eq!(
        (status, result["final_message"].as_str()),
        (200, Some("fine")),
        "{result}"
    );
    assert_eq!(
        provider.recorded()[0].header("authorization"),
        Some(format!("Bearer {key}").as_str()),
        "the key was used"
    );
    // A wrong token is refused, and that is logged too.
    let wrong = Client {
        token: Some("tok-wrong-0000".into()),
        ..Client::of(&server)
    };
    assert_eq!(
        wrong
            .send(reqwest::Method::GET, "/sessions", None)
            .await
            .status()
            .as_u16(),
        401
    );
    // serve logs from another thread: the refusal's line may land just after the response.
    server.json_log_with("for the refused request", |l| l["status"] == 401);
    let log = server.log.lock().unwrap().join("\n");
    assert!(
        log.contains("provider call") && log.contains("\"status\":401"),
        "{log}"
    );
    for secret in [token, key, "tok-wrong-0000"] {
        assert!(!log.contains(secret), "{secret} is in the log:\n{log}");
    }
}

#[tokio::test]
async fn a_request_line_names_its_tenant_token_client_error_code_and_trace() {
    let env = Env::new();
    let server = Server::start(env.home.path(), &["--log-format", "json"], &[]);
    let admin = Client::of(&server);
    let (status, made) = admin
        .json(
            reqwest::Method::POST,
            "/tokens",
            Some(json!({"tenant": "acme"})),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let acme = Client {
        token: made["token"].as_str().map(String::from),
        ..Client::of(&server)
    };
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let resp = acme
        .http
        .get(format!(
            "{}/sessions/00000000-0000-4000-8000-000000000000",
            acme.base
        ))
        .bearer_auth(acme.token.as_deref().unwrap())
        .header("traceparent", format!("00-{trace}-00f067aa0ba902b7-01"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 404);
    let log = server.json_log_with("for the missing session", |l| {
        l["message"] == "request" && l["status"] == 404
    });
    let line = log
        .iter()
        .find(|l| l["message"] == "request" && l["status"] == 404)
        .unwrap();
    let fields = line;
    assert_eq!(fields["tenant"], "acme", "{line}");
    assert_eq!(fields["token_id"], made["id"], "{line}");
    assert_eq!(fields["client"], "127.0.0.1", "{line}");
    assert_eq!(fields["error_code"], "session_not_found", "{line}");
    assert_eq!(fields["trace_id"], trace, "{line}");
    let latency = fields["latency_ms"].as_f64().unwrap();
    assert_eq!((latency * 1000.0).round() / 1000.0, latency, "{line}");
    // The server's own token is named as such, and a request without a session has no error code.
    let (status, _) = admin.json(reqwest::Method::GET, "/sessions", None).await;
    assert_eq!(status, 200);
    let log = server.json_log_with("for the operator's listing", |l| {
        l["message"] == "request" && l["token_id"] == "server"
    });
    assert!(log
        .iter()
        .filter(|l| l["message"] == "request" && l["status"] == 200)
        .all(|l| l.get("error_code").is_none()));
}

#[tokio::test]
async fn metrics_are_served_with_the_content_type_of_the_openmetrics_body_they_are() {
    let env = Env::new();
    let server = Server::start(env.home.path(), &[], &[]);
    let resp = Client::of(&server)
        .send(reqwest::Method::GET, "/metrics", None)
        .await;
    assert_eq!(resp.status().as_u16(), 200);
    let kind = resp.headers()["content-type"].to_str().unwrap().to_string();
    let body = resp.text().await.unwrap();
    // OpenMetrics: counters typed by their family's name, their samples suffixed `_total`, and a closing `# EOF`.
    assert!(body.trim_end().ends_with("# EOF"), "{body}");
    assert!(
        body.contains("# TYPE service_workers_reaped counter")
            && body.contains("service_workers_reaped_total 0"),
        "{body}"
    );
    assert_eq!(
        kind,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    // What an operator alerts on first: which build runs, and the process's memory and descriptors.
    assert!(
        body.contains(&format!(
            "service_build_info{{version=\"{}\"}} 1",
            env!("CARGO_PKG_VERSION")
        )),
        "{body}"
    );
    let rss = metric(&body, "process_resident_memory_bytes", "");
    let (open, max) = (
        metric(&body, "process_open_fds", ""),
        metric(&body, "process_max_fds", ""),
    );
    assert!(rss > 1_000_000.0, "{body}");
    assert!(open >= 3.0 && max > open, "{body}");
    assert_eq!(body.matches("# EOF").count(), 1, "{body}");
}

#[tokio::test]
async fn metrics_count_sessions_workers_turns_provider_latency_and_streams_behind_the_token() {
    let env = Env::new();
    write_bundle(&env.path("b"), ASKING, "", "workspace_write");
    let server = Server::start(env.home.path(), &[], &[]);
    let api = Client::of(&server);
    let anonymous = Client {
        token: None,
        ..Client::of(&server)
    };
    assert_eq!(
        anonymous
            .send(reqwest::Method::GET, "/metrics", None)
            .await
            .status()
            .as_u16(),
        401
    );

    let id = api.session(&env.path("b").display().to_string()).await;
    api.turn(&id, "go").await;
    let stream = api
        .send(
            reqwest::Method::GET,
            &format!("/sessions/{id}/events"),
            None,
        )
        .await;
    let text = api.metrics().await;
    assert_eq!(metric(&text, "service_sessions_live", ""), 1.0);
    assert_eq!(metric(&text, "service_workers", ""), 1.0);
    assert_eq!(
        metric(&text, "service_turns_total", "outcome=\"completed\""),
        1.0
    );
    assert_eq!(
        metric(
            &text,
            "service_provider_calls_total",
            "provider=\"scripted\",outcome=\"ok\""
        ),
        2.0
    );
    assert_eq!(
        metric(
            &text,
            "service_provider_call_duration_seconds_count",
            "provider=\"scripted\""
        ),
        2.0
    );
    assert_eq!(metric(&text, "service_sse_subscribers", ""), 1.0);
    assert!(metric(&text, "service_journal_bytes", "") > 0.0);
    assert!(metric(&text, "service_http_responses_total", "code=\"200\"") >= 1.0);
    drop(stream);
    let mut open = 1.0;
    for _ in 0..100 {
        open = metric(&api.metrics().await, "service_sse_subscribers", "");
        if open == 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(open, 0.0, "the closed stream is still counted");
}

#[tokio::test]
async fn an_idle_worker_is_reaped_and_the_session_then_continues_with_its_history() {
    let env = Env::new();
    write_bundle(&env.path("b"), ASKING, "", "workspace_write");
    let server = Server::start(
        env.home.path(),
        &["--idle-timeout", "1s", "--log-format", "json"],
        &[],
    );
    let api = Client::of(&server);
    let id = api.session(&env.path("b").display().to_string()).await;
    let turn = |prompt: &'static str| {
        let (api, id) = (Client::of(&server), id.clone());
        async move {
            let (status, result) = api
                .json(
                    reqwest::Method::POST,
                    &format!("/sessions/{id}/run-sync"),
                    Some(json!({"input": {"prompt": prompt}})),
                )
                .await;
            assert_eq!(status, 200, "{result}");
            result["final_message"].as_str().unwrap().to_string()
        }
    };
    assert_eq!(turn("first").await, "done after ran-42 with 4 messages");
    assert!(!pids_with(&id).is_empty(), "the session has a worker");
    wait_until(
        Duration::from_secs(15),
        || pids_with(&id).is_empty(),
        || format!("the idle worker still runs: {:?}", pids_with(&id)),
    );
    server.json_log_with("saying the idle worker was reaped", |l| {
        l["message"] == "idle worker reaped" && l["session"] == id.as_str()
    });
    assert!(metric(&api.metrics().await, "service_workers_reaped_total", "") >= 1.0);
    // The next turn starts a worker again and sees the first turn's messages.
    assert_eq!(turn("second").await, "done after ran-42 with 8 messages");
}

/// Writes a note to the sandbox's `/tmp` on "write", and reads it back on "read".
const TMP_NOTE: &str = r#"{turns: [
  {when: "write", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "echo kept > /tmp/note && echo wrote"}}]},
    {text: "{{last_tool_output}}"}]},
  {when: "read", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "cat /tmp/note"}}]},
    {text: "{{last_tool_output}}"}]}
]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_sandbox_holds_nothing_else_stops_early_and_one_holding_a_tmp_file_or_a_server_stays(
) {
    let env = Env::new();
    write_bundle(&env.path("plain"), ASKING, "", "workspace_write");
    write_bundle(&env.path("noted"), TMP_NOTE, "", "workspace_write");
    let server_marker = super::mcp::bundle(
        &env,
        "served",
        "ok",
        json!({}),
        json!({}),
        &[("mcp__fx__echo", json!({"text": "hello"}))],
    );
    let root = env.work.path().to_str().unwrap();
    let server = Server::start(
        env.home.path(),
        &[
            "--idle-timeout",
            "10m",
            "--empty-idle-timeout",
            "1s",
            "--log-format",
            "json",
            "--workspace-root",
            root,
        ],
        &[],
    );
    let api = Client::of(&server);
    let plain = api.session(&env.path("plain").display().to_string()).await;
    let noted = api.session(&env.path("noted").display().to_string()).await;
    let (status, body) = api
        .json(
            reqwest::Method::POST,
            "/sessions",
            Some(
                json!({"bundle_ref": env.path("served").display().to_string(),
                        "cwd": env.path("ws").display().to_string()}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let served = body["id"].as_str().unwrap().to_string();
    let has_worker = |id: &str| assert!(!pids_with(id).is_empty(), "{id} has no worker");
    assert_eq!(
        api.turn(&plain, "first").await["final_message"],
        "done after ran-42 with 4 messages"
    );
    has_worker(&plain);
    assert_eq!(api.turn(&noted, "write").await["final_message"], "wrote");
    has_worker(&noted);
    assert_eq!(
        api.turn(&served, "echo").await["final_message"],
        "answer: echo: hello"
    );
    has_worker(&served);

    wait_until(
        Duration::from_secs(15),
        || pids_with(&plain).is_empty(),
        || format!("the empty sandbox still runs: {:?}", pids_with(&plain)),
    );
    server.json_log_with("saying why the worker was reaped", |l| {
        l["message"] == "idle worker reaped"
            && l["session"] == plain.as_str()
            && l["why"] == "empty_sandbox"
    });
    // Past the 1 s by 3 s more: about thirty rounds of the reaper, which looks every 100 ms with these timeouts.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !pids_with(&noted).is_empty(),
        "a sandbox holding a file in /tmp was stopped"
    );
    assert!(
        !pids_with(&served).is_empty(),
        "a sandbox running an MCP server was stopped"
    );
    assert!(
        !pids_with(&server_marker).is_empty(),
        "the MCP server is gone"
    );

    // Nothing was lost: the kept sandbox still has its file, and the stopped one's session goes on.
    assert_eq!(api.turn(&noted, "read").await["final_message"], "kept");
    assert_eq!(
        api.turn(&plain, "second").await["final_message"],
        "done after ran-42 with 8 messages"
    );
}
