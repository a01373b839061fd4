//! The attack on the `sessions` quota: creations sent at once, forks, and subagents, which all make sessions. One
//! admission step counts and inserts for every one of them, on the files store and over PostgreSQL
//! (`SERVICE_TEST_STORE=postgres` runs this suite there too).

use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tempfile::TempDir;

use super::http_client::{task, Api};
use super::support::write_bundle;
use super::tenants::{code, tenants, tokens};

/// Sessions `tenant`'s token sees.
async fn held(api: &Api) -> usize {
    let (status, list) = api.get("/sessions").await;
    assert_eq!(status, 200, "{list}");
    list.as_array().unwrap().len()
}

/// Sends `requests` (method POST, path, body) at once; the statuses and error codes.
async fn at_once(api: &Api, requests: Vec<(String, Value)>) -> Vec<(u16, String)> {
    let sent = requests.into_iter().map(|(path, body)| {
        let api = api.beside(api.token.as_deref().unwrap_or_default());
        tokio::spawn(async move { code(&api.post(&path, body).await) })
    });
    let mut out = Vec::new();
    for answer in futures::future::join_all(sent).await {
        out.push(answer.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creations_and_forks_sent_at_once_never_pass_the_sessions_quota() {
    let home = TempDir::new().unwrap();
    let t = tenants(home.path(), &[]);
    tokens(home.path(), &["quota", "acme", "--sessions", "1"]);
    let bundle = super::tenants::bundle();
    let path = bundle.path().to_str().unwrap().to_string();

    let create = (String::from("/sessions"), json!({"bundle_ref": path}));
    let answers = at_once(&t.acme, vec![create.clone(); 32]).await;
    let made = answers.iter().filter(|a| a.0 == 201).count();
    assert_eq!(made, 1, "{answers:?}");
    assert!(
        answers
            .iter()
            .all(|a| a.0 == 201 || *a == (429, "quota_sessions".to_string())),
        "{answers:?}"
    );
    assert_eq!(held(&t.acme).await, 1);

    // Forks make sessions too, at once or one by one.
    let (_, list) = t.acme.get("/sessions").await;
    let id = list[0]["id"].as_str().unwrap().to_string();
    let (status, _) = t
        .acme
        .post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("hi")}),
        )
        .await;
    assert_eq!(status, 200);
    let fork = (format!("/sessions/{id}/fork"), json!({}));
    let answers = at_once(&t.acme, vec![fork.clone(); 16]).await;
    assert!(
        answers
            .iter()
            .all(|a| *a == (429, "quota_sessions".to_string())),
        "{answers:?}"
    );
    assert_eq!(held(&t.acme).await, 1);

    // With room for three, sixteen creations and sixteen forks at once make exactly two more.
    tokens(home.path(), &["quota", "acme", "--sessions", "3"]);
    let mut mixed = vec![create; 16];
    mixed.extend(vec![fork; 16]);
    // A quota set with `tokens` reaches the server once its cached copy (half a second) is stale.
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    let answers = at_once(&t.acme, mixed).await;
    assert_eq!(
        answers.iter().filter(|a| a.0 == 201).count(),
        2,
        "{answers:?}"
    );
    assert_eq!(held(&t.acme).await, 3);
    // Another tenant is not counted against acme's quota.
    t.beta.session(&path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subagent_is_a_session_its_tenants_quota_counts() {
    let home = TempDir::new().unwrap();
    let t = tenants(home.path(), &[]);
    tokens(home.path(), &["quota", "acme", "--sessions", "1"]);
    let child = TempDir::new().unwrap();
    write_bundle(
        child.path(),
        r#"{turns: [{replies: [{text: "child here"}]}]}"#,
        "",
        "read_only",
    );
    let parent = TempDir::new().unwrap();
    write_bundle(
        parent.path(),
        r#"{turns: [{replies: [
            {tool_calls: [{name: "Agent", arguments: {subagent: "helper", prompt: "go"}}]},
            {text: "parent saw: {{last_tool_output}}"}]}]}"#,
        &format!(
            "subagents:\n  - {{ name: helper, bundle: {}, description: helps }}\n",
            child.path().display()
        ),
        "read_only",
    );
    let id = t.acme.session(parent.path().to_str().unwrap()).await;
    let (status, body) = t
        .acme
        .post(
            &format!("/sessions/{id}/run-sync"),
            json!({"input": task("delegate")}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let answer = body["final_message"].as_str().unwrap_or_default();
    assert!(
        answer.contains("has 1 sessions, its limit") && !answer.contains("child here"),
        "{body}"
    );
    assert_eq!(held(&t.acme).await, 1);
}
