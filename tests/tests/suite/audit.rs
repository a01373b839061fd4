//! The audit trail: each change to who may do what (a token made or revoked, a quota set) is an entry of the
//! store's audit log and an `audit` log line, naming the actor's tenant and token id, the client's address as it
//! connected (whatever address its headers claim), the action and what it changed, and never a token's secret; a
//! refused attempt changes nothing and leaves no entry. `GET /audit` and `service-rs audit` read the log, where
//! local `tokens` commands leave their entries too. Bundles installed, pulled, pushed and removed, and sessions
//! deleted, are entries as well; a deletion another node forwarded names the client and token that asked for it.
//! Against the real `serve`, over both session stores.

use serde_json::{json, Value};

use super::http_client::Api;
use super::support::{Env, Server};

#[tokio::test]
async fn token_and_quota_changes_each_leave_an_audit_line_naming_actor_client_and_change() {
    let env = Env::new();
    let server = Server::start(env.home.path(), &["--log-format", "json"], &[]);
    let operator = Api::new(server);
    let (status, made) = operator
        .post("/tokens", json!({"tenant": "acme", "admin": true}))
        .await;
    assert_eq!(status, 201, "{made}");
    let (acme_id, acme_token) = (
        made["id"].as_str().unwrap().to_string(),
        made["token"].as_str().unwrap().to_string(),
    );
    // A tenant's admin token acts as itself: the trail names its id.
    let acme = operator.beside(&acme_token);
    let (status, second) = acme.post("/tokens", json!({"tenant": "acme"})).await;
    assert_eq!(status, 201, "{second}");
    let second_id = second["id"].as_str().unwrap().to_string();
    let (status, body) = acme
        .put("/tenants/acme/quota", json!({"sessions": 3}))
        .await;
    assert_eq!(status, 200, "{body}");
    // A client names another address: no proxy is trusted, so the trail keeps the one it came from.
    let revoked = acme
        .req(reqwest::Method::DELETE, &format!("/tokens/{second_id}"))
        .header("x-forwarded-for", "203.0.113.9")
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 204);
    // Refused: a token that is not one changes nothing, and no audit line says it did.
    let stranger = operator.beside("not-a-token");
    let (status, _) = stranger.post("/tokens", json!({"tenant": "acme"})).await;
    assert_eq!(status, 401);

    let log = operator
        .server
        .json_log_with("for the revocation", |l| l["action"] == "token_revoked");
    let audit: Vec<&Value> = log.iter().filter(|l| l["message"] == "audit").collect();
    let seen: Vec<(&str, &str, &str)> = audit
        .iter()
        .map(|l| {
            (
                l["action"].as_str().unwrap_or_default(),
                l["object"].as_str().unwrap_or_default(),
                l["actor_token"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("token_created", acme_id.as_str(), "server"),
            ("token_created", second_id.as_str(), acme_id.as_str()),
            ("quota_set", "acme", acme_id.as_str()),
            ("token_revoked", second_id.as_str(), acme_id.as_str()),
        ],
        "{audit:#?}"
    );
    for line in &audit {
        assert_eq!(line["client"], "127.0.0.1", "{line}");
    }
    assert_eq!(audit[0]["actor_tenant"], "default", "{}", audit[0]);
    assert!(audit[2]["detail"]
        .as_str()
        .unwrap()
        .contains("\"sessions\":3"));
    let text = serde_json::to_string(&log).unwrap();
    assert!(!text.contains(&acme_token), "a token reached the log");
    assert!(!text.contains(second["token"].as_str().unwrap()));

    // The same entries in the store's log, with their order; only an operator reads it.
    let (status, stored) = operator.get("/audit").await;
    assert_eq!(status, 200, "{stored}");
    let kept: Vec<(&str, &str, &str, &str)> = stored
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or_default(),
                e["object"].as_str().unwrap_or_default(),
                e["actor_token"].as_str().unwrap_or_default(),
                e["client"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        kept,
        [
            ("token_created", acme_id.as_str(), "server", "127.0.0.1"),
            (
                "token_created",
                second_id.as_str(),
                acme_id.as_str(),
                "127.0.0.1"
            ),
            ("quota_set", "acme", acme_id.as_str(), "127.0.0.1"),
            (
                "token_revoked",
                second_id.as_str(),
                acme_id.as_str(),
                "127.0.0.1"
            ),
        ],
        "{stored:#}"
    );
    let seqs: Vec<u64> = stored
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    assert!(!stored.to_string().contains(&acme_token));
    let (_, user) = operator.post("/tokens", json!({"tenant": "beta"})).await;
    let beta = operator.beside(user["token"].as_str().unwrap());
    let (status, refused) = beta.get("/audit").await;
    assert_eq!(status, 403, "{refused}");

    // A local command on the same store leaves its entry, as the user running it; `audit` reads them all.
    let url =
        super::store_backend::postgres().then(|| super::store_backend::url_for(env.home.path()));
    let cli = |command: &str, args: &[&str]| {
        super::tenants::store_command(env.home.path(), url.as_deref(), command, args)
    };
    let gamma: Value =
        serde_json::from_str(&cli("tokens", &["create", "--tenant", "gamma", "--json"])).unwrap();
    let tail: Value = serde_json::from_str(&cli("audit", &["--json", "--limit", "2"])).unwrap();
    let last = &tail[1];
    assert_eq!(
        (
            last["action"].as_str(),
            last["object"].as_str(),
            last["actor_token"].as_str()
        ),
        (Some("token_created"), gamma["id"].as_str(), Some("cli")),
        "{tail:#}"
    );
    assert!(
        last["client"].as_str().unwrap().starts_with("local "),
        "{last}"
    );
    assert_eq!(tail[0]["object"], user["id"], "{tail:#}");
}

/// The audit entries (action, object, actor token) whose action is one of `actions`, oldest first.
async fn entries(api: &Api, actions: &[&str]) -> Vec<(String, String, String)> {
    let (status, stored) = api.get("/audit?limit=100").await;
    assert_eq!(status, 200, "{stored}");
    let field = |e: &Value, k: &str| e[k].as_str().unwrap_or_default().to_string();
    stored
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| actions.contains(&e["action"].as_str().unwrap_or_default()))
        .map(|e| {
            (
                field(e, "action"),
                field(e, "object"),
                field(e, "actor_token"),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundles_installed_and_removed_and_sessions_deleted_are_audit_entries_naming_who() {
    let env = Env::new();
    let operator = Api::new(Server::start(env.home.path(), &[], &[]));
    let (status, made) = operator.post("/tokens", json!({"tenant": "acme"})).await;
    assert_eq!(status, 201, "{made}");
    let acme_id = made["id"].as_str().unwrap().to_string();
    let acme = operator.beside(made["token"].as_str().unwrap());

    let project = tempfile::TempDir::new().unwrap();
    super::support::write_bundle(
        project.path(),
        r#"{turns: [{replies: [{text: "hi"}]}]}"#,
        "",
        "read_only",
    );
    let imported = operator
        .req(reqwest::Method::POST, "/bundles/import")
        .header("content-type", "application/x-tar")
        .body(super::tenant_bundle_names::tar_of(&project))
        .send()
        .await
        .unwrap();
    assert_eq!(imported.status(), 201);
    let id = acme.session("fixture").await;
    // The headers one node uses to name a forwarded request's client count only beside the cluster token: a
    // client writing them changes nothing in the entry.
    assert_eq!(
        acme.req(reqwest::Method::DELETE, &format!("/sessions/{id}"))
            .header("x-service-actor-token", "forged")
            .header("x-service-actor-client", "203.0.113.7")
            .send()
            .await
            .unwrap()
            .status(),
        204
    );
    // Refused: another tenant's session is not found, and nothing is recorded for it.
    let other = operator.session("fixture").await;
    let refused = acme
        .req(reqwest::Method::DELETE, &format!("/sessions/{other}"))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 404);
    let removed = operator
        .req(
            reqwest::Method::DELETE,
            "/bundles/local%2Ffixture:1.0.0?force=true",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(removed.status(), 200);

    let kinds = ["bundle_imported", "session_deleted", "bundle_removed"];
    assert_eq!(
        entries(&operator, &kinds).await,
        [
            (
                "bundle_imported".into(),
                "local/fixture:1.0.0".into(),
                "server".into()
            ),
            ("session_deleted".into(), id, acme_id),
            (
                "bundle_removed".into(),
                "local/fixture:1.0.0".into(),
                "server".into()
            ),
        ]
    );
    let (_, stored) = operator.get("/audit?limit=100").await;
    assert!(!stored.to_string().contains("203.0.113.7"), "{stored}");
}
