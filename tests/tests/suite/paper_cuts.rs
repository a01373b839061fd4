//! Paper cuts a daily user hit, each through the real binary: the server's token across restarts, one server per
//! files store, processes on one store seeing each other's live sessions.

use std::time::Duration;

use super::operations::Client;
use super::support::{write_bundle, Env, Server};

#[tokio::test]
async fn the_servers_token_survives_a_restart_and_rotates_only_when_asked() {
    let env = Env::new();
    let first = Server::start(env.home.path(), &[], &[]);
    let token = first.token.clone().expect("a generated token");
    drop(first);
    let second = Server::start(env.home.path(), &[], &[]);
    assert_eq!(
        second.token.as_deref(),
        Some(token.as_str()),
        "kept across the restart"
    );
    // A script holding the old token still gets in.
    let sessions = Client::of(&second)
        .json(reqwest::Method::GET, "/sessions", None)
        .await;
    assert_eq!(sessions.0, 200);
    super::support::wait_until(
        Duration::from_secs(5),
        || {
            second
                .log
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("kept across restarts"))
        },
        || "the server did not say where its token is".into(),
    );
    drop(second);
    let rotated = Server::start(env.home.path(), &["--rotate-token"], &[]);
    assert_ne!(rotated.token.as_deref(), Some(token.as_str()));
}

#[test]
fn a_session_directory_holds_no_stale_looking_record_copy_and_errors_name_the_cli_command() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [{text: "hi"}]}]}"#,
        "",
        "read_only",
    );
    env.run(&["run", "./b", "one"]).ok();
    env.run(&["run", "--continue", "two"]).ok();
    let files = env.store_files();
    assert!(
        !files.iter().any(|f| f.ends_with("session.json.next")),
        "{files:?}"
    );
    assert!(
        files.iter().any(|f| f.ends_with("/.session.json.spare")),
        "{files:?}"
    );
    let unknown = env.run(&["sessions", "show", "ffff"]);
    let err = unknown.failed();
    assert!(
        err.contains("`service-rs sessions`")
            && !err
                .starts_with("error: no session id starts with \"ffff\"; list them with /sessions"),
        "{err}"
    );
}

#[test]
fn a_second_server_on_one_files_store_is_refused_and_says_why() {
    if super::store_backend::postgres() {
        return; // A PostgreSQL store is meant for many servers.
    }
    let env = Env::new();
    let _first = Server::start(env.home.path(), &[], &[]);
    let second = env.run(&["serve", "--bind", "127.0.0.1:0"]);
    let err = second.failed();
    assert!(err.contains("already serves the store"), "{err}");
    assert!(err.contains("PostgreSQL"), "{err}");
    assert!(err.contains(&format!("pid {}", _first.child.id())), "{err}");
}

#[tokio::test]
async fn bundles_remove_sees_the_live_sessions_of_a_server_on_the_same_store() {
    if super::store_backend::postgres() {
        return;
    }
    let env = Env::new();
    write_bundle(
        &env.path("askb"),
        r#"{turns: [{replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 20"}}]}, {text: "done"}]}]}"#,
        "",
        "workspace_write",
    );
    env.run(&["build", "askb"]).ok();
    let server = Server::start(env.home.path(), &[], &[]);
    let api = Client::of(&server);
    let id = api.session("fixture").await;
    let (status, _) = api
        .json(
            reqwest::Method::POST,
            &format!("/sessions/{id}/run"),
            Some(serde_json::json!({"input": super::http_client::task("go")})),
        )
        .await;
    assert_eq!(status, 202);
    super::support::wait_until(
        Duration::from_secs(10),
        || {
            env.home
                .path()
                .join("sessions")
                .join(&id)
                .join("live.lock")
                .exists()
        },
        || "the session never went live".into(),
    );
    for force in [false, true] {
        let mut args = vec!["bundles", "remove", "fixture"];
        if force {
            args.push("--force");
        }
        let refused = env.run(&args);
        let err = refused.failed();
        assert!(
            err.contains(&id) && err.contains("another process on this store"),
            "{err}"
        );
    }
    assert!(env.run(&["bundles"]).ok().contains("fixture"));
    // Once the server is gone, its sessions are not live any more.
    drop(server);
    env.run(&["bundles", "remove", "fixture"]).ok();
}
