//! Tenants over `serve`: tokens made with `service-rs tokens`, each tenant seeing and driving only its own sessions
//! (another tenant's are 404, as if absent), and quotas answering 429. The attacks are real requests of one tenant's
//! token at the other's ids, through every route. The usage ledger is `tenant_usage.rs`'s.

use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::http_client::{task, Api};
use super::support::{binary, write_bundle, Server};

const ADMIN: &str = "the-servers-own-token";

/// Runs `service-rs tokens <args>` on the store of `home` (the suite's store: files, or its PostgreSQL database);
/// its stdout.
pub(super) fn tokens(home: &Path, args: &[&str]) -> String {
    let url = super::store_backend::postgres().then(|| super::store_backend::url_for(home));
    tokens_in(home, url.as_deref(), args)
}

/// Runs `service-rs tokens <args>` with `home`, on the PostgreSQL store at `store` when given; its stdout.
pub(super) fn tokens_in(home: &Path, store: Option<&str>, args: &[&str]) -> String {
    store_command(home, store, "tokens", args)
}

/// Runs `service-rs <command> <args>` with `home`, on the PostgreSQL store at `store` when given; its stdout.
pub(super) fn store_command(
    home: &Path,
    store: Option<&str>,
    command: &str,
    args: &[&str],
) -> String {
    let mut cmd = Command::new(binary());
    cmd.arg(command)
        .args(args)
        .env("SERVICE_HOME", home)
        .env_remove("SERVICE_TOKEN");
    if let Some(url) = store {
        cmd.env("SERVICE_STORE_URL", url);
    }
    let out = cmd.output().expect("run tokens");
    assert!(
        out.status.success(),
        "{command} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Builds the bundle project `dir` into the store of `home`.
pub(super) fn build(home: &Path, dir: &Path) {
    let built = Command::new(binary())
        .args(["build", dir.to_str().unwrap()])
        .env("SERVICE_HOME", home)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// A tenant's new token, as `tokens create` prints it alone on stdout.
pub(super) fn token_for(home: &Path, tenant: &str) -> String {
    let token = tokens(home, &["create", "--tenant", tenant]);
    assert_eq!(token.lines().count(), 1, "{token}");
    token.trim().to_string()
}

/// A server with its own token over `home`, and clients for the admin and for tenants `acme` and `beta`.
pub(super) struct Tenants {
    pub(super) admin: Api,
    pub(super) acme: Api,
    pub(super) beta: Api,
}

pub(super) fn tenants(home: &Path, more: &[&str]) -> Tenants {
    let (acme, beta) = (token_for(home, "acme"), token_for(home, "beta"));
    let mut args = vec!["--token", ADMIN];
    args.extend_from_slice(more);
    let admin = Api::with_token(Server::start(home, &args, &[]), ADMIN);
    Tenants {
        acme: admin.beside(&acme),
        beta: admin.beside(&beta),
        admin,
    }
}

const ASK: &str = "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n";
const SCRIPT: &str = r#"{turns: [
  {when: "write", replies: [{tool_calls: [{name: "Write", arguments: {file_path: "out.txt", content: "hi"}}]}, {text: "{{last_tool_output}}"}]},
  {when: "tool", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo one"}}]}, {text: "two calls"}]},
  {when: "sleep", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 30"}}]}, {text: "woke"}]},
  {replies: [{text: "hello"}]},
]}"#;

pub(super) fn bundle() -> TempDir {
    let dir = TempDir::new().unwrap();
    write_bundle(dir.path(), SCRIPT, ASK, "workspace_write");
    dir
}

/// The error code of an answer.
/// `POST /sessions/{id}/run-sync` of a greeting, as its raw response (to read its headers).
async fn run_sync(api: &Api, id: &str) -> reqwest::Response {
    api.req(reqwest::Method::POST, &format!("/sessions/{id}/run-sync"))
        .json(&json!({"input": task("hi")}))
        .send()
        .await
        .unwrap()
}

pub(super) fn code(answer: &(u16, Value)) -> (u16, String) {
    (
        answer.0,
        answer.1["error"]["code"].as_str().unwrap_or("").to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_sees_and_drives_only_its_own_sessions_and_the_admin_sees_all() {
    let home = TempDir::new().unwrap();
    let t = tenants(home.path(), &[]);
    let bundle = bundle();
    let path = bundle.path().to_str().unwrap();
    let mine = t.acme.session(path).await;
    let theirs = t.beta.session(path).await;
    let operators = t.admin.session(path).await;
    assert_eq!(t.acme.answer(&mine, "hi").await, "hello");

    let listed = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(&t.acme.get("/sessions").await.1), vec![mine.clone()]);
    assert_eq!(
        listed(&t.beta.get("/sessions").await.1),
        vec![theirs.clone()]
    );
    let all = listed(&t.admin.get("/sessions").await.1);
    for id in [&mine, &theirs, &operators] {
        assert!(all.contains(id), "the admin sees {id}: {all:?}");
    }
    assert_eq!(
        listed(&t.admin.get("/sessions?tenant=acme").await.1),
        vec![mine.clone()]
    );
    assert_eq!(
        code(&t.beta.get("/sessions?tenant=acme").await),
        (403, "admin_only".into())
    );
    let (_, record) = t.admin.get(&format!("/sessions/{mine}")).await;
    assert_eq!(record["tenant"], "acme");

    // Every route that names a session: beta gets what a session that does not exist gets, for acme's and the
    // operator's sessions alike, and nothing happens to them.
    let absent = "00000000-0000-4000-8000-000000000000";
    for victim in [mine.as_str(), operators.as_str(), absent] {
        let expected = (404, "session_not_found".to_string());
        for (method, path, body) in [
            ("GET", format!("/sessions/{victim}"), None),
            ("GET", format!("/sessions/{victim}/journal"), None),
            ("GET", format!("/sessions/{victim}/events"), None),
            ("GET", format!("/sessions/{victim}/changes"), None),
            (
                "POST",
                format!("/sessions/{victim}/run"),
                Some(json!({"input": task("hi")})),
            ),
            (
                "POST",
                format!("/sessions/{victim}/run-sync"),
                Some(json!({"input": task("hi")})),
            ),
            ("POST", format!("/sessions/{victim}/interrupt"), None),
            ("POST", format!("/sessions/{victim}/compact"), None),
            (
                "POST",
                format!("/sessions/{victim}/rewind"),
                Some(json!({"turn": 1})),
            ),
            ("POST", format!("/sessions/{victim}/fork"), None),
            (
                "POST",
                format!("/sessions/{victim}/commands"),
                Some(json!({"command": "touch pwned"})),
            ),
            ("DELETE", format!("/sessions/{victim}"), None),
        ] {
            let mut request = t.beta.req(method.parse().unwrap(), &path);
            if let Some(body) = body {
                request = request.json(&body);
            }
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            let body: Value = response.json().await.unwrap_or(Value::Null);
            assert_eq!(
                (
                    status,
                    body["error"]["code"].as_str().unwrap_or("").to_string()
                ),
                expected,
                "{method} {path}: {body}"
            );
            let message = body["error"]["message"].as_str().unwrap_or("");
            assert_eq!(
                message,
                format!(
                    "no session with id \"{victim}\"; list sessions with `service-rs sessions`"
                ),
                "the same words as for an absent session"
            );
        }
    }
    // A client header naming the admin is not the cluster's: beta stays beta.
    let forged = t
        .beta
        .req(reqwest::Method::GET, &format!("/sessions/{mine}"))
        .header("x-service-caller", "admin:default")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status().as_u16(), 404);
    // Acme's session is whole, and its workspace has no file a command of beta's made.
    let (status, record) = t.acme.get(&format!("/sessions/{mine}")).await;
    assert_eq!((status, record["turn_count"].as_u64()), (200, Some(1)));
    assert!(!Path::new(record["cwd"].as_str().unwrap())
        .join("pwned")
        .exists());
    // Tenants do not read the server's metrics or remove shared bundles.
    assert_eq!(
        code(&t.acme.get("/metrics").await),
        (403, "admin_only".into())
    );
    let (status, _) = t.admin.get("/metrics").await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_approval_ids_and_guessed_ones_are_404() {
    let home = TempDir::new().unwrap();
    let t = tenants(home.path(), &[]);
    let bundle = bundle();
    let mine = t.acme.session(bundle.path().to_str().unwrap()).await;
    let mut sse = t.acme.events(&mine, None).await;
    let (status, _) = t
        .acme
        .post(
            &format!("/sessions/{mine}/run"),
            json!({"input": task("write")}),
        )
        .await;
    assert_eq!(status, 202);
    let asked = sse.until("permission_requested").await;
    let request_id = asked.last().unwrap().1["payload"]["payload"]["request_id"]
        .as_str()
        .unwrap()
        .to_string();
    for id in [
        request_id.as_str(),
        "req-1",
        "00000000-0000-4000-8000-000000000000",
    ] {
        let answer = t
            .beta
            .post(
                &format!("/approvals/{id}"),
                json!({"decision": "allow_once"}),
            )
            .await;
        assert_eq!(code(&answer), (404, "approval_not_found".into()), "{id}");
    }
    // Still pending for acme, who answers it.
    let (status, body) = t
        .acme
        .post(
            &format!("/approvals/{request_id}"),
            json!({"decision": "deny"}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let ended = sse.until("turn_completed").await;
    assert!(
        ended
            .iter()
            .any(|(_, e)| e["payload"]["type"] == "approval_resolved"),
        "{ended:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_answer_429_and_a_turn_past_the_days_tokens_stops_with_quota_exceeded() {
    let home = TempDir::new().unwrap();
    let t = tenants(home.path(), &[]);
    tokens(
        home.path(),
        &[
            "quota",
            "acme",
            "--sessions",
            "2",
            "--concurrent-turns",
            "1",
        ],
    );
    let bundle = bundle();
    let path = bundle.path().to_str().unwrap();
    let first = t.acme.session(path).await;
    let second = t.acme.session(path).await;
    let refused = t.acme.post("/sessions", json!({"bundle_ref": path})).await;
    assert_eq!(
        code(&refused),
        (429, "quota_sessions".into()),
        "{refused:?}"
    );
    let response = t
        .acme
        .req(reqwest::Method::POST, "/sessions")
        .json(&json!({"bundle_ref": path}))
        .send()
        .await
        .unwrap();
    assert!(
        response.headers().get("retry-after").is_none(),
        "waiting does not help"
    );
    // Beta has no quota.
    t.beta.session(path).await;

    // One turn at a time.
    let (status, _) = t
        .acme
        .post(
            &format!("/sessions/{first}/run"),
            json!({"input": task("sleep")}),
        )
        .await;
    assert_eq!(status, 202);
    for _ in 0..200 {
        let (_, record) = t.acme.get(&format!("/sessions/{first}")).await;
        if record["status"] == "running" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    let response = run_sync(&t.acme, &second).await;
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "quota_concurrent_turns", "{body}");
    let (status, _) = t
        .acme
        .post(&format!("/sessions/{first}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 202);

    // The interrupt may land before the turn's first call: wait for its end, and spend with a whole turn.
    for _ in 0..200 {
        let (_, record) = t.acme.get(&format!("/sessions/{first}")).await;
        if record["status"] == "idle" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    assert_eq!(t.acme.answer(&second, "hi").await, "hello");

    // A day's limit a few tokens above what acme has spent: the next turn passes it on its first call (the scripted
    // model counts dozens a call) and stops there, before the Bash that call asked for runs.
    let (_, spent) = t.acme.get("/usage").await;
    let tokens_of = |row: &Value| {
        row["input_tokens"].as_u64().unwrap_or(0) + row["output_tokens"].as_u64().unwrap_or(0)
    };
    let spent = tokens_of(&spent["rows"][0]);
    assert!(spent > 0, "the completed turn is counted: {spent}");
    let limit = (spent + 5).to_string();
    tokens(home.path(), &["quota", "acme", "--tokens-per-day", &limit]);
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    let (status, stopped) = t
        .acme
        .post(
            &format!("/sessions/{second}/run-sync"),
            json!({"input": task("tool")}),
        )
        .await;
    assert_eq!(status, 200, "{stopped}");
    assert_eq!(stopped["status"], "failed", "{stopped}");
    assert_eq!(stopped["error"]["code"], "quota_exceeded", "{stopped}");
    let (_, journal) = t.acme.get(&format!("/sessions/{second}/journal")).await;
    let events = journal.as_array().unwrap();
    let last_turn = events
        .iter()
        .rposition(|e| e["payload"]["type"] == "turn_started")
        .unwrap();
    assert!(
        !events[last_turn..]
            .iter()
            .any(|e| e["payload"]["type"] == "exec_command_begin"),
        "the stopped turn ran no command: {:?}",
        &events[last_turn..]
    );
    let response = run_sync(&t.acme, &second).await;
    assert_eq!(response.status().as_u16(), 429);
    let wait: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=86_400).contains(&wait), "{wait}");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "quota_tokens");

    // The operator's metrics count the refusals and the tokens, by tenant.
    let (_, metrics) = t.admin.get("/metrics").await;
    let metrics = metrics.as_str().unwrap_or_default().to_string();
    for line in [
        r#"service_quota_refusals_total{tenant="acme",code="quota_sessions"} 2"#,
        r#"service_quota_refusals_total{tenant="acme",code="quota_concurrent_turns"} 1"#,
        r#"service_quota_refusals_total{tenant="acme",code="quota_exceeded"} 1"#,
        r#"service_quota_refusals_total{tenant="acme",code="quota_tokens"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    assert!(
        metrics.contains(
            r#"service_tokens_total{tenant="acme",model="scripted/fixture",kind="input"}"#
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_or_expired_token_is_refused_and_the_servers_own_token_still_works() {
    let home = TempDir::new().unwrap();
    let t = tenants(home.path(), &[]);
    let (status, _) = t.acme.get("/sessions").await;
    assert_eq!(status, 200);
    let listed: Value = serde_json::from_str(&tokens(home.path(), &["list", "--json"])).unwrap();
    let acme = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["tenant"] == "acme")
        .unwrap();
    assert!(
        acme.get("sha256").is_none(),
        "listings hold no digest: {acme}"
    );
    let id = acme["id"].as_str().unwrap();
    assert_eq!(
        tokens(home.path(), &["revoke", id]).trim(),
        format!("revoked {id}")
    );
    let started = std::time::Instant::now();
    loop {
        let (status, _) = t.acme.get("/sessions").await;
        if status == 401 {
            break;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(1),
            "still accepted"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Kept for the record, with when it was revoked; revoking it again finds nothing to revoke.
    let listed: Value = serde_json::from_str(&tokens(home.path(), &["list", "--json"])).unwrap();
    let kept = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .unwrap_or_else(|| panic!("the revoked token is gone: {listed}"));
    assert!(kept["revoked_at"].as_str().is_some(), "{kept}");
    // Its digest went with it: a node of a release before `revoked_at` matches nothing either.
    let digest = if super::store_backend::postgres() {
        let url = super::store_backend::url_for(home.path());
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let row = client
            .query_one("SELECT sha256 FROM tokens WHERE id = $1", &[&id])
            .await
            .unwrap();
        row.get::<_, String>(0)
    } else {
        let stored: Value =
            serde_json::from_slice(&std::fs::read(home.path().join("tenants.json")).unwrap())
                .unwrap();
        stored["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["id"] == id)
            .unwrap()["sha256"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(digest, "revoked");
    let (status, again) = t
        .admin
        .req(reqwest::Method::DELETE, &format!("/tokens/{id}"))
        .send()
        .await
        .map(|r| (r.status().as_u16(), ()))
        .unwrap();
    assert_eq!((status, again), (404, ()));
    // A token that has expired.
    let short = tokens(
        home.path(),
        &["create", "--tenant", "acme", "--expires", "1s"],
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let expired = t.admin.beside(short.trim());
    assert_eq!(expired.get("/sessions").await.0, 401);
    // Near misses of a good token.
    let good = token_for(home.path(), "beta");
    for bad in [
        format!("{}0", &good[..good.len() - 1]),
        good.to_uppercase(),
        good[..good.len() - 1].to_string(),
    ] {
        if bad == good {
            continue;
        }
        assert_eq!(t.admin.beside(&bad).get("/sessions").await.0, 401);
    }
    // The one-token set-up: the server's token is the default tenant's admin.
    let (status, _) = t.admin.get("/tokens").await;
    assert_eq!(status, 200);
    assert_eq!(
        code(&t.beta.get("/tokens").await),
        (403, "admin_only".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_and_a2a_routes_keep_each_tenant_to_its_own_sessions() {
    let home = TempDir::new().unwrap();
    let bundle = bundle();
    build(home.path(), bundle.path());
    let t = tenants(home.path(), &[]);
    // Acme starts a conversation over the OpenAI wire; beta names its session.
    let response = t
        .acme
        .req(reqwest::Method::POST, "/v1/chat/completions")
        .json(&json!({"model": "fixture", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let session = response.headers()["x-service-session"]
        .to_str()
        .unwrap()
        .to_string();
    let stolen = t
        .beta
        .req(reqwest::Method::POST, "/v1/chat/completions")
        .header("x-service-session", &session)
        .json(&json!({"model": "fixture", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(stolen.status().as_u16(), 404);
    let (_, record) = t.admin.get(&format!("/sessions/{session}")).await;
    assert_eq!(
        (record["tenant"].as_str(), record["turn_count"].as_u64()),
        (Some("acme"), Some(1))
    );

    // A2A: acme's task is not beta's to read, and beta's listing is empty; the same context id is each tenant's own.
    let send = |text: &str| {
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
            "messageId": format!("m-{text}"), "role": "ROLE_USER", "contextId": "ctx-1",
            "parts": [{"text": text}]}}})
    };
    let (_, sent) = t.acme.post("/a2a/fixture", send("hi")).await;
    let task_id = sent["result"]["task"]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("{sent}"))
        .to_string();
    let get = json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": task_id}});
    let (_, theirs) = t.beta.post("/a2a/fixture", get.clone()).await;
    assert_eq!(theirs["error"]["code"], -32001, "{theirs}");
    let (_, own) = t.acme.post("/a2a/fixture", get).await;
    assert!(own["result"]["id"].is_string(), "{own}");
    let list = json!({"jsonrpc": "2.0", "id": 3, "method": "ListTasks", "params": {}});
    let (_, listed) = t.beta.post("/a2a/fixture", list).await;
    assert_eq!(listed["result"]["tasks"], json!([]), "{listed}");
    let (_, beta_sent) = t.beta.post("/a2a/fixture", send("hi")).await;
    assert_ne!(
        beta_sent["result"]["task"]["contextId"].as_str(),
        None,
        "{beta_sent}"
    );
    let (_, sessions) = t.beta.get("/sessions").await;
    assert_eq!(
        sessions.as_array().unwrap().len(),
        1,
        "beta's ctx-1 is a session of its own"
    );
}

/// A session of `bundle` for `api`'s tenant working in `dir`.
async fn session_in(api: &Api, bundle: &Path, dir: &str) -> String {
    let body = json!({"bundle_ref": bundle.to_str().unwrap(), "cwd": dir});
    let (status, made) = api.post("/sessions", body).await;
    assert_eq!(status, 201, "{made}");
    made["id"].as_str().unwrap().to_string()
}

/// Runs a Write turn in `id` and answers its question with `decision` if one is asked; the question, if one was.
async fn write_answering(api: &Api, id: &str, decision: &str) -> Option<Value> {
    let mut sse = api.events(id, None).await;
    let (status, _) = api
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task("write")}),
        )
        .await;
    assert_eq!(status, 202);
    let asked = loop {
        let (_, e) = sse.next().await;
        match e["payload"]["type"].as_str() {
            Some("permission_requested") => break Some(e["payload"]["payload"].clone()),
            Some("turn_completed") => break None,
            _ => {}
        }
    };
    if let Some(asked) = &asked {
        let request = asked["request_id"].as_str().unwrap();
        let (status, body) = api
            .post(
                &format!("/approvals/{request}"),
                json!({"decision": decision}),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        sse.until("turn_completed").await;
    }
    asked
}

/// Attack: a tenant answers its own question with `allow_project` in a directory another tenant works in too. The
/// rule it keeps answers its own later questions there, never the other tenant's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_project_approval_never_answers_another_tenants_question_in_the_same_directory() {
    let home = TempDir::new().unwrap();
    let project = super::support::sandbox_tempdir();
    let root = project.path().to_str().unwrap().to_string();
    let t = tenants(home.path(), &["--workspace-root", &root]);
    let bundle = bundle();
    let b = bundle.path();
    let first = session_in(&t.acme, b, &root).await;
    let asked = write_answering(&t.acme, &first, "allow_project").await;
    assert_eq!(
        asked.unwrap()["project_rule"],
        "Write(/workspace/**)",
        "the question offered the rule"
    );
    // acme's own next session there is not asked; beta's is.
    let again = session_in(&t.acme, b, &root).await;
    assert!(write_answering(&t.acme, &again, "deny").await.is_none());
    let other = session_in(&t.beta, b, &root).await;
    assert!(write_answering(&t.beta, &other, "deny").await.is_some());
}
