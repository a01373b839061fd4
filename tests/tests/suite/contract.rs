//! The OpenAPI document against the live server: real responses and every event kind a turn produces validate
//! against the schemas it declares, and schemathesis (from PyPI) finds no failure in generated requests.

use serde_json::{json, Value};

use super::operations::Client;
use super::support::{write_bundle, Env, Server};

/// A validator of the component schema `name` of `doc`.
fn validator(doc: &Value, name: &str) -> jsonschema::Validator {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "$ref": format!("#/components/schemas/{name}"),
    });
    jsonschema::validator_for(&schema)
        .unwrap_or_else(|e| panic!("schema {name} does not compile: {e}"))
}

#[track_caller]
fn assert_valid(doc: &Value, name: &str, instance: &Value) {
    let v = validator(doc, name);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{instance} is not a valid {name}: {errors:#?}"
    );
}

const SCRIPT: &str = r#"{turns: [{when: "again", replies: [{text: "again"}]}, {replies: [
  {reasoning: ["look", "then act"], tool_calls: [{name: "UpdatePlan", arguments: {plan: [{step: "look", status: "in_progress"}]}}]},
  {tool_calls: [{name: "Bash", arguments: {command: "echo out; echo err >&2"}}]},
  {text: "done {{last_tool_output}}"}
]}]}"#;

#[tokio::test]
async fn live_responses_and_every_event_of_a_turn_match_the_openapi_document() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        SCRIPT,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, action: ask }\n",
        "workspace_write",
    );
    let server = Server::start(env.home.path(), &[], &[]);
    let api = Client::of(&server);
    let call = |method: reqwest::Method, path: String, body: Option<Value>| {
        let api = &api;
        async move { api.json(method, &path, body).await }
    };
    let (_, doc) = call(reqwest::Method::GET, "/openapi.json".into(), None).await;
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );
    // The protocol routes are documented too: OpenAI's under the token, A2A's cards without one.
    for (path, method) in [
        ("/v1/models", "get"),
        ("/v1/chat/completions", "post"),
        ("/v1/responses", "post"),
        ("/a2a/{bundle}", "post"),
    ] {
        assert!(
            doc["paths"][path][method]["security"].is_array(),
            "{path} is documented under the token"
        );
    }
    let card = &doc["paths"]["/a2a/{bundle}/.well-known/agent-card.json"]["get"];
    assert!(card.is_object() && card["security"].is_null(), "{card}");
    assert!(
        doc["paths"]["/healthz"]["get"]["security"].is_null(),
        "the health check needs no token"
    );
    assert_eq!(
        doc["paths"]["/sessions"]["get"]["security"][0]["bearer"],
        json!([])
    );
    assert!(doc["paths"]["/sessions/{id}/run"]["post"]["responses"]["507"].is_object());
    assert_eq!(
        doc["components"]["schemas"]["Task"]["required"],
        json!(["prompt"])
    );

    let bundle = env.path("b").display().to_string();
    let (status, created) = call(
        reqwest::Method::POST,
        "/sessions".into(),
        Some(json!({"bundle_ref": bundle})),
    )
    .await;
    assert_eq!(status, 201);
    assert_valid(&doc, "SessionRecord", &created);
    let id = created["id"].as_str().unwrap().to_string();
    let (status, started) = call(
        reqwest::Method::POST,
        format!("/sessions/{id}/run"),
        Some(json!({"input": {"prompt": "go"}})),
    )
    .await;
    assert_eq!(status, 202);
    assert_valid(&doc, "Accepted", &started);
    let mut request = None;
    for _ in 0..300 {
        let (_, journal) = call(
            reqwest::Method::GET,
            format!("/sessions/{id}/journal"),
            None,
        )
        .await;
        request = journal.as_array().unwrap().iter().find_map(|e| {
            (e["payload"]["type"] == "permission_requested").then(|| {
                e["payload"]["payload"]["request_id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
        });
        if request.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let request = request.expect("a permission request");
    let (status, decided) = call(
        reqwest::Method::POST,
        format!("/approvals/{request}"),
        Some(json!({"decision": "allow_once"})),
    )
    .await;
    assert_eq!(status, 200);
    assert_valid(&doc, "DecisionResult", &decided);
    for _ in 0..300 {
        if call(reqwest::Method::GET, format!("/sessions/{id}"), None)
            .await
            .1["status"]
            == "idle"
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let (status, result) = call(
        reqwest::Method::POST,
        format!("/sessions/{id}/run-sync"),
        Some(json!({"input": {"prompt": "again"}})),
    )
    .await;
    assert_eq!(status, 200, "{result}");
    assert_valid(&doc, "TurnResult", &result);
    let (status, command) = call(
        reqwest::Method::POST,
        format!("/sessions/{id}/commands"),
        Some(json!({"command": "true"})),
    )
    .await;
    assert_eq!(status, 200);
    assert_valid(&doc, "CommandResult", &command);

    // Every journaled event is an EventMsg of the tagged union, and the turn produced many kinds of them.
    let (_, journal) = call(
        reqwest::Method::GET,
        format!("/sessions/{id}/journal"),
        None,
    )
    .await;
    let events = journal.as_array().unwrap();
    let kinds: std::collections::BTreeSet<&str> = events
        .iter()
        .map(|e| e["payload"]["type"].as_str().unwrap())
        .collect();
    for kind in [
        "turn_started",
        "reasoning_delta",
        "reasoning_section_break",
        "plan_update",
        "tool_call_started",
        "tool_call_finished",
        "permission_requested",
        "approval_resolved",
        "exec_command_begin",
        "exec_command_output_delta",
        "exec_command_end",
        "agent_message_delta",
        "turn_completed",
    ] {
        assert!(kinds.contains(kind), "no {kind} among {kinds:?}");
    }
    for event in events {
        assert_valid(&doc, "EventMsg", event);
    }
    // An event that is not in the union fails, so the validation above can fail.
    let forged = json!({"id": "1", "session_id": id, "created_at": "x", "payload": {"type": "no_such_event", "payload": {}}});
    assert!(!validator(&doc, "EventMsg").is_valid(&forged));

    let (_, sessions) = call(reqwest::Method::GET, "/sessions".into(), None).await;
    for s in sessions.as_array().unwrap() {
        assert_valid(&doc, "SessionRecord", s);
    }
    let (_, health) = call(reqwest::Method::GET, "/healthz".into(), None).await;
    assert_valid(&doc, "Health", &health);

    // Errors, including a method the path does not take, have the documented JSON body.
    for (method, path, body, expected) in [
        (
            reqwest::Method::GET,
            "/sessions/00000000-0000-4000-8000-000000000000".to_string(),
            None,
            404,
        ),
        (reqwest::Method::PUT, "/sessions".to_string(), None, 405),
        (
            reqwest::Method::POST,
            "/sessions".to_string(),
            Some(json!({"bundle_ref": ""})),
            422,
        ),
        (
            reqwest::Method::POST,
            format!("/sessions/{id}/run"),
            Some(json!({"input": {}})),
            422,
        ),
        (
            reqwest::Method::POST,
            format!("/sessions/{id}/run"),
            Some(json!({"input": {"prompt": "x"}, "turn_context": [null]})),
            422,
        ),
    ] {
        let (status, error) = call(method.clone(), path.clone(), body).await;
        assert_eq!(status, expected, "{method} {path}: {error}");
        assert_valid(&doc, "ErrorEnvelope", &error);
        assert!(error["error"]["request_id"].is_string(), "{error}");
    }
}

#[test]
fn schemathesis_finds_no_failure_in_generated_requests() {
    let Some(schemathesis) = std::env::var_os("SERVICE_TEST_SCHEMATHESIS") else {
        eprintln!(
            "skipped: set SERVICE_TEST_SCHEMATHESIS to the schemathesis binary (`.ci/schemathesis` installs it from PyPI; .ci/run sets it)"
        );
        return;
    };
    let env = Env::new();
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    env.run(&["build", &examples.display().to_string()]).ok();
    let server = Server::start(env.home.path(), &["--idle-timeout", "0"], &[]);
    let token = server.token.clone().unwrap();
    let seed = std::env::var("SERVICE_TEST_SCHEMATHESIS_SEED").unwrap_or_else(|_| {
        (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_007)
            .to_string()
    });
    eprintln!("schemathesis seed {seed} (SERVICE_TEST_SCHEMATHESIS_SEED={seed} replays it)");
    // Every operation, with two per-operation settings: a tar upload's content cannot be described by a schema, so
    // 422 is what a body that is no bundle's tar gets; and an event stream never ends, so each read of one stops
    // after a second or a few events (the events themselves are validated against the schema).
    std::fs::write(
        env.work.path().join("schemathesis.toml"),
        r#"
[[operations]]
include-path = "/bundles/import"
checks.positive_data_acceptance.expected-statuses = ["2xx", "401", "403", "404", "409", "422", "429"]

[[operations]]
include-path = "/sessions/{id}/events"
request-timeout = 1.0
max-stream-events = 5
"#,
    )
    .unwrap();
    let out = std::process::Command::new(schemathesis)
        .args(["run", &server.url("/openapi.json")])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        // Bounded: 30 cases per operation, from a new seed each run (printed, and fixed by
        // SERVICE_TEST_SCHEMATHESIS_SEED to replay a failure).
        .args([
            "--max-examples",
            "30",
            "--seed",
            &seed,
            "--no-shrink",
            "--checks",
            "all",
        ])
        .args(["--request-timeout", "30"])
        .env("SCHEMATHESIS_HOOKS", "")
        .current_dir(env.work.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found failures with seed {seed}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("passed"), "{stdout}");
}

#[tokio::test]
async fn rejected_queries_paths_and_headers_answer_in_the_json_error_shape_the_schema_declares() {
    let env = Env::new();
    let server = Server::start(env.home.path(), &[], &[]);
    let http = reqwest::Client::new();
    let token = server.token.clone().unwrap();
    let doc: Value = http
        .get(server.url("/openapi.json"))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    // The schema says what the server takes: Last-Event-ID is a sequence number, as `after` is.
    let params = doc["paths"]["/sessions/{id}/events"]["get"]["parameters"]
        .as_array()
        .unwrap();
    let header = params
        .iter()
        .find(|p| p["name"] == "Last-Event-ID")
        .unwrap();
    assert_eq!(header["schema"]["type"], json!("integer"), "{header}");
    for (path, header) in [
        ("/sessions/x/events?after=null", None),
        ("/sessions/x/events", Some("null")),
        ("/sessions/%FF", None),
        ("/bundles/hello?force=maybe", None),
    ] {
        let mut req = http.get(server.url(path)).bearer_auth(&token);
        if path.starts_with("/bundles") {
            req = http.delete(server.url(path)).bearer_auth(&token);
        }
        if let Some(h) = header {
            req = req.header("last-event-id", h);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status().as_u16(), 400, "{path}");
        assert_eq!(resp.headers()["content-type"], "application/json", "{path}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "bad_request", "{path}: {body}");
        assert_valid(&doc, "ErrorEnvelope", &body);
    }
}
