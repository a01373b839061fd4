//! Bundles as A2A agents on `serve` (`/a2a/{bundle}`), driven by the official `a2a-sdk` Python package
//! (`tests/scripts/a2a_client.py`) as an orchestrator drives them, and by raw JSON-RPC for the errors.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::support::{get_json, processes_with, wait_until, write_bundle, Env, Server};

const TOKEN: &str = "a2a-token";

/// The SDK's Python, from the environment `.ci/a2a-sdk` builds; None (the test says it is skipped) without it.
fn sdk_python() -> Option<PathBuf> {
    super::support::gated("SERVICE_TEST_A2A_PYTHON", ".ci/a2a-sdk")
}

/// A store with the scripted bundle `fixture`, whose Write asks for permission, and a server over it.
fn served(env: &Env, more: &[&str]) -> Server {
    let src = env.path("fixture-src");
    write_bundle(
        &src,
        r#"{turns: [
          {when: "write", replies: [{tool_calls: [{name: "Write", arguments: {file_path: "out.txt", content: "x"}}]}, {text: "result: {{last_tool_output}}"}]},
          {when: "sleep", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 347"}}]}, {text: "woke"}]},
          {when: "slowly", replies: [{text: "one two three four five six seven eight nine ten eleven twelve", delay_ms: 300}]},
          {when: "count", replies: [{text: "messages: {{message_count}}"}]},
          {replies: [{text: "noted"}]},
        ]}"#,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n",
        "workspace_write",
    );
    env.run(&["build", src.to_str().unwrap()]).ok();
    let mut args = vec!["--token", TOKEN];
    args.extend_from_slice(more);
    Server::start(env.home.path(), &args, &[])
}

/// Runs `scenario` of the SDK client against `server`; its JSON record.
fn sdk(python: &Path, server: &Server, scenario: &str) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/a2a_client.py");
    let out = Command::new(python)
        .arg(script)
        .arg(&server.base)
        .arg(TOKEN)
        .arg("fixture")
        .arg(scenario)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{scenario}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A JSON-RPC call to `/a2a/{bundle}`: HTTP status and body.
async fn rpc(server: &Server, bundle: &str, body: Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .post(server.url(&format!("/a2a/{bundle}")))
        .bearer_auth(TOKEN)
        .json(&body);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn send(text: &str, context: Option<&str>) -> Value {
    let mut message = json!({"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": text}]});
    if let Some(c) = context {
        message["contextId"] = json!(c);
    }
    json!({"jsonrpc": "2.0", "id": 7, "method": "SendMessage", "params": {"message": message}})
}

fn kinds(events: &Value) -> Vec<String> {
    events
        .as_array()
        .unwrap()
        .iter()
        .map(|e| match e["kind"].as_str().unwrap() {
            "artifact" => "artifact".to_string(),
            k => format!("{k}:{}", e["state"].as_str().unwrap_or_default()),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_discovers_the_card_without_a_token() {
    let Some(python) = sdk_python() else { return };
    let env = Env::new();
    let server = served(&env, &[]);
    let card = &sdk(&python, &server, "card")["card"];
    assert_eq!(card["name"], "fixture");
    assert_eq!(card["version"], "1.0.0");
    assert_eq!(
        card["supportedInterfaces"],
        json!([{"url": server.url("/a2a/fixture"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}]),
        "the interface URL is absolute, since clients post to it as written"
    );
    assert_eq!(card["capabilities"]["streaming"], true);
    assert_eq!(card["skills"][0]["id"], "greeting");
    assert_eq!(card["skills"][0]["description"], "How to greet.");
    assert_eq!(card["defaultOutputModes"], json!(["text/plain"]));
    assert_eq!(
        card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"],
        "Bearer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_message_in_a_context_continues_its_session_and_tasks_are_listed() {
    let Some(python) = sdk_python() else { return };
    let env = Env::new();
    let server = served(&env, &[]);
    let r = sdk(&python, &server, "conversation");
    assert_eq!(
        r["first"],
        json!({"state": "TASK_STATE_COMPLETED", "context": "ctx-tulip", "answer": "noted"})
    );
    // The model was sent the system prompt, both turns' prompts and the first answer.
    assert_eq!(r["second"]["answer"], "messages: 4", "{r}");
    let ids = r["task_ids"].as_array().unwrap();
    let mut newest_first = ids.clone();
    newest_first.reverse();
    assert_eq!(r["listed"], json!(newest_first));
    assert_eq!(r["got"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(r["unknown_task"]["type"], "TaskNotFoundError", "{r}");
    // The conversation is an ordinary session, which every front end sees.
    let sessions = get_json(&server, TOKEN, "/sessions").await;
    let list = sessions.as_array().unwrap();
    assert_eq!(list.len(), 1, "{sessions}");
    assert_eq!(list[0]["context_id"], "ctx-tulip");
    assert_eq!(list[0]["turn_count"], 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_task_reports_its_states_and_the_answer_in_pieces() {
    let Some(python) = sdk_python() else { return };
    let env = Env::new();
    let server = served(&env, &[]);
    let events = &sdk(&python, &server, "stream")["events"];
    let k = kinds(events);
    assert_eq!(
        k[..2],
        ["task:TASK_STATE_SUBMITTED", "status:TASK_STATE_WORKING"]
    );
    assert_eq!(k.last().unwrap(), "status:TASK_STATE_COMPLETED");
    let pieces: Vec<&Value> = events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "artifact")
        .collect();
    assert!(pieces.len() > 2, "{events}");
    let text: String = pieces.iter().map(|e| e["text"].as_str().unwrap()).collect();
    assert_eq!(
        text,
        "one two three four five six seven eight nine ten eleven twelve"
    );
    assert_eq!(pieces[0]["append"], false);
    assert!(pieces[1..].iter().all(|e| e["append"] == true));
    assert_eq!(pieces.last().unwrap()["last"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_question_is_answered_through_input_required() {
    let Some(python) = sdk_python() else { return };
    let env = Env::new();
    let server = served(&env, &[]);
    let r = sdk(&python, &server, "approve");
    let asked = r["asked"].as_array().unwrap();
    let question = asked.last().unwrap();
    assert_eq!(question["state"], "TASK_STATE_INPUT_REQUIRED", "{r}");
    assert!(question["text"][0].as_str().unwrap().contains("Write"));
    let data = &question["data"][0];
    assert_eq!(data["tool"], "Write");
    assert!(data["request_id"].as_str().unwrap().len() > 10);
    let answered = kinds(&r["answered"]);
    assert_eq!(answered.first().unwrap(), "task:TASK_STATE_INPUT_REQUIRED");
    assert_eq!(answered[1], "status:TASK_STATE_WORKING");
    assert_eq!(answered.last().unwrap(), "status:TASK_STATE_COMPLETED");
    let text: String = r["answered"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "artifact")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert!(text.starts_with("result: wrote 1 bytes"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_task_stops_a_long_command_and_leaves_no_process() {
    let Some(python) = sdk_python() else { return };
    let env = Env::new();
    let server = served(&env, &[]);
    let r = sdk(&python, &server, "cancel");
    assert_eq!(r["canceled"], "TASK_STATE_CANCELED", "{r}");
    assert_eq!(r["again"]["type"], "TaskNotCancelableError", "{r}");
    wait_until(
        Duration::from_secs(10),
        || processes_with("sleep 347") == 0,
        || "the canceled task's command is still running".into(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_resumes_with_subscribe_and_misses_nothing() {
    let Some(python) = sdk_python() else { return };
    let env = Env::new();
    let server = served(&env, &[]);
    let r = sdk(&python, &server, "resubscribe");
    let full = "one two three four five six seven eight nine ten eleven twelve";
    assert_eq!(r["final"], full);
    let resumed = r["resumed"].as_array().unwrap();
    assert_eq!(
        resumed[0]["kind"], "task",
        "a resumed stream starts with the task"
    );
    // What the snapshot holds and the pieces after it make the whole answer: nothing lost, nothing twice.
    let mut text = resumed[0]["text"].as_str().unwrap().to_string();
    text.extend(
        resumed
            .iter()
            .filter(|e| e["kind"] == "artifact")
            .map(|e| e["text"].as_str().unwrap()),
    );
    assert_eq!(text, full, "{r}");
    assert_eq!(
        kinds(&r["resumed"]).last().unwrap(),
        "status:TASK_STATE_COMPLETED"
    );
    assert_eq!(r["ended"]["type"], "UnsupportedOperationError", "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_with_a_wrong_token_is_refused() {
    let Some(python) = sdk_python() else { return };
    let env = Env::new();
    let server = served(&env, &[]);
    let r = sdk(&python, &server, "wrong-token");
    assert!(
        r["refused"]["message"].as_str().unwrap().contains("401"),
        "{r}"
    );
    let sessions = get_json(&server, TOKEN, "/sessions").await;
    assert_eq!(sessions, json!([]), "a refused call made no session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_a2a_error_codes_and_a_body_that_is_no_request_a_400() {
    let env = Env::new();
    let server = served(&env, &[]);
    let raw = reqwest::Client::new()
        .post(server.url("/a2a/fixture"))
        .bearer_auth(TOKEN)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    // What is no JSON-RPC request at all is refused at the HTTP level too, as the OpenAPI document says; a request
    // that fails is answered with HTTP 200, as JSON-RPC does.
    assert_eq!(raw.status().as_u16(), 400);
    let body: Value = raw.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32700);
    let (status, body) = rpc(
        &server,
        "fixture",
        json!({"id": 1, "method": "SendMessage"}),
        &[],
    )
    .await;
    assert_eq!(
        (status, &body["error"]["code"]),
        (400, &json!(-32600)),
        "{body}"
    );
    assert_eq!(body["id"], 1, "the id is echoed when there is one");
    let cases = [
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "Frobnicate"}),
            -32601,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": 3}}),
            -32602,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "nope"}}),
            -32001,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "CreateTaskPushNotificationConfig", "params": {}}),
            -32003,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m",
            "role": "ROLE_USER", "parts": [{"url": "file:///etc/passwd"}]}}}),
            -32005,
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {"messageId": "m",
            "role": "ROLE_USER", "parts": [{"text": "hi"}]}, "configuration": {"acceptedOutputModes": ["image/png"]}}}),
            -32005,
        ),
    ];
    for (request, code) in cases {
        let (status, body) = rpc(&server, "fixture", request.clone(), &[]).await;
        assert_eq!(status, 200, "{request}");
        assert_eq!(body["error"]["code"], code, "{request} -> {body}");
        assert!(body["error"]["message"].as_str().unwrap().len() > 10);
    }
    let (_, body) = rpc(
        &server,
        "fixture",
        send("hi", None),
        &[("A2A-Version", "0.3")],
    )
    .await;
    assert_eq!(body["error"]["code"], -32009, "{body}");
    assert_eq!(
        body["error"]["data"][0]["reason"], "VERSION_NOT_SUPPORTED",
        "errors carry A2A's ErrorInfo detail"
    );
    let (_, body) = rpc(
        &server,
        "fixture",
        send("hi", None),
        &[("A2A-Version", "1.0")],
    )
    .await;
    assert_eq!(
        body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
    let (_, body) = rpc(&server, "nothing-here", send("hi", None), &[]).await;
    assert_eq!(
        body["error"]["data"][0]["metadata"]["code"], "bundle_not_found",
        "{body}"
    );
    let card = reqwest::get(server.url("/a2a/nothing-here/.well-known/agent-card.json"))
        .await
        .unwrap();
    assert_eq!(card.status().as_u16(), 404);
}

/// Attack: a client names another bundle's session as its context, and a context id shaped as a path. Neither
/// reaches that session or the store's files: each is a new conversation of this bundle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_id_never_reaches_another_bundles_session_or_a_path() {
    let env = Env::new();
    let server = served(&env, &[]);
    let other = env.path("other-src");
    write_bundle(
        &other,
        r#"{turns: [{replies: [{text: "secret"}]}]}"#,
        "",
        "read_only",
    );
    std::fs::write(
        other.join("service.bundle.json5"),
        std::fs::read_to_string(other.join("service.bundle.json5"))
            .unwrap()
            .replace("\"fixture\"", "\"other\""),
    )
    .unwrap();
    env.run(&["build", other.to_str().unwrap()]).ok();
    let (_, body) = rpc(&server, "other", send("hi", None), &[]).await;
    let theirs = body["result"]["task"]["contextId"]
        .as_str()
        .unwrap()
        .to_string();
    for context in [theirs.as_str(), "../../sessions", "/etc/passwd"] {
        let (_, body) = rpc(&server, "fixture", send("hi", Some(context)), &[]).await;
        let task = &body["result"]["task"];
        assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{body}");
        assert_eq!(task["artifacts"][0]["parts"][0]["text"], "noted", "{body}");
        assert_eq!(task["contextId"], context);
    }
    let (_, body) = rpc(
        &server,
        "fixture",
        json!({"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"contextId": theirs}}),
        &[],
    )
    .await;
    let listed = body["result"]["tasks"].as_array().unwrap();
    assert_eq!(
        listed.len(),
        1,
        "only this bundle's own task of that name: {body}"
    );
    assert_eq!(
        listed[0]["history"][1]["parts"][0]["text"], "noted",
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_a2a_turns_the_routes_off_and_a2a_default_serves_the_root_card() {
    let env = Env::new();
    let server = served(&env, &["--no-a2a"]);
    let card = reqwest::get(server.url("/a2a/fixture/.well-known/agent-card.json"))
        .await
        .unwrap();
    assert_eq!(card.status().as_u16(), 404);
    let (status, _) = rpc(&server, "fixture", send("hi", None), &[]).await;
    assert_eq!(status, 404);
    drop(server);
    let server = Server::start(
        env.home.path(),
        &[
            "--token",
            TOKEN,
            "--a2a-default",
            "fixture",
            "--advertise-url",
            "https://agents.example.com/",
        ],
        &[],
    );
    let card: Value = reqwest::get(server.url("/.well-known/agent-card.json"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        card["supportedInterfaces"][0]["url"],
        "https://agents.example.com/a2a/fixture"
    );
}
