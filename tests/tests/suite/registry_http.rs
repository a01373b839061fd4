//! Pull and push over HTTP and `--remote`: the server reaches only the registries its operator allowed, so a client
//! cannot point it at its own loopback or a metadata address.

use serde_json::json;

use super::operations::Client;
use super::registry_server::Registry;
use super::support::{Env, Server};

fn hello() -> String {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/hello")
        .display()
        .to_string()
}

fn remote(env: &Env, server: &Server, args: &[&str]) -> super::support::Run {
    let mut all = vec!["--remote", server.base.as_str()];
    all.extend_from_slice(args);
    env.run(&all)
}

#[tokio::test]
async fn a_client_cannot_make_the_server_reach_a_registry_the_operator_did_not_allow() {
    let registry = Registry::start(&[]);
    // A service on the server's loopback that a hostile client would like the server to talk to.
    let internal = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    internal.set_nonblocking(true).unwrap();
    let internal_host = internal.local_addr().unwrap().to_string();
    let env = Env::new();
    env.run(&["build", &hello()]).ok();
    let server = Server::start(env.home.path(), &[], &[]);
    let api = Client::of(&server);
    let server_host = server.base.trim_start_matches("http://").to_string();
    for target in [
        registry.url("team/hello:0.1.0"),
        format!("{internal_host}/team/hello:0.1.0"),
        format!("{server_host}/team/hello:0.1.0"),
        "169.254.169.254/latest/meta-data:1".to_string(),
    ] {
        let (status, body) = api
            .json(
                reqwest::Method::POST,
                "/bundles/pull",
                Some(json!({"reference": target, "plain_http": true})),
            )
            .await;
        assert_eq!(status, 403, "{target}: {body}");
        assert_eq!(body["error"]["code"], "registry_refused");
        assert!(
            body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("--allow-registry"),
            "{body}"
        );
        let (status, body) = api
            .json(
                reqwest::Method::POST,
                "/bundles/push",
                Some(json!({"bundle_ref": "hello", "target": target})),
            )
            .await;
        assert_eq!(status, 403, "{target}: {body}");
        let (status, body) = api
            .json(
                reqwest::Method::POST,
                "/sessions",
                Some(json!({"bundle_ref": target})),
            )
            .await;
        assert_eq!(status, 404, "{target}: {body}");
        assert_eq!(body["error"]["code"], "bundle_not_pulled");
    }
    let out = remote(&env, &server, &["pull", &registry.url("team/hello:0.1.0")]);
    assert!(out.failed().contains("--allow-registry"), "{}", out.stderr);
    assert_eq!(
        internal.accept().map(|_| ()).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "nothing connected to the internal service"
    );
    let stored = std::fs::read_dir(registry.storage_root())
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(stored, 0, "nothing reached the registry");
}

#[tokio::test]
async fn with_allow_registry_the_server_pushes_pulls_and_pulls_a_session_bundle_on_first_use() {
    let registry = Registry::start(&[]);
    let allow = ["--allow-registry", registry.host.as_str()];
    let env = Env::new();
    env.run(&["build", &hello()]).ok();
    let server = Server::start(env.home.path(), &allow, &[]);
    let api = Client::of(&server);
    let (status, pushed) = api
        .json(
            reqwest::Method::POST,
            "/bundles/push",
            Some(json!({"bundle_ref": "hello", "target": registry.url("team/hello:0.1.0")})),
        )
        .await;
    assert_eq!(status, 200, "{pushed}");
    assert_eq!(pushed["uploaded"], 2);
    let out = remote(
        &env,
        &server,
        &["push", "hello", &registry.url("team/hello:0.1.0")],
    );
    assert!(
        out.ok().contains("0 blobs uploaded, 2 already there"),
        "{}",
        out.stderr
    );

    let (status, pushed) = api
        .json(
            reqwest::Method::POST,
            "/bundles/push",
            Some(json!({"bundle_ref": "hello", "target": registry.url("team/again:2")})),
        )
        .await;
    assert_eq!(status, 200, "{pushed}");

    let (status, pushed) = api
        .json(
            reqwest::Method::POST,
            "/bundles/push",
            Some(json!({"bundle_ref": "hello", "target": registry.url("team/as-model:3")})),
        )
        .await;
    assert_eq!(status, 200, "{pushed}");

    let other = Env::new();
    let other_server = Server::start(other.home.path(), &allow, &[]);
    let other_api = Client::of(&other_server);
    let out = remote(
        &other,
        &other_server,
        &["pull", &registry.url("team/hello:0.1.0")],
    );
    assert!(
        out.ok()
            .contains("Installed local/hello:0.1.0 from 127.0.0.1:"),
        "{}",
        out.stderr
    );
    let (status, missing) = other_api
        .json(
            reqwest::Method::POST,
            "/bundles/pull",
            Some(json!({"reference": registry.url("team/hello:9.9.9")})),
        )
        .await;
    assert_eq!(status, 404, "{missing}");
    assert_eq!(missing["error"]["code"], "registry_not_found");
    assert!(missing["error"]["message"]
        .as_str()
        .unwrap()
        .contains("team/hello:9.9.9"));

    // A session naming a registry reference the server never pulled: it pulls it, then runs.
    let first_use = registry.url("team/again:2");
    let (status, session) = other_api
        .json(
            reqwest::Method::POST,
            "/sessions",
            Some(json!({"bundle_ref": first_use})),
        )
        .await;
    assert_eq!(status, 201, "{session}");
    let id = session["id"].as_str().unwrap();
    let (status, turn) = other_api
        .json(
            reqwest::Method::POST,
            &format!("/sessions/{id}/run-sync"),
            Some(json!({"input": {"prompt": "hi"}})),
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    assert!(turn["final_message"]
        .as_str()
        .unwrap()
        .contains("You asked: \"hi\""));

    // The same as an OpenAI-compatible model: pulled on first use, then answering.
    let (status, chat) = other_api
        .json(
            reqwest::Method::POST,
            "/v1/chat/completions",
            Some(json!({"model": registry.url("team/as-model:3"),
                        "messages": [{"role": "user", "content": "hi"}]})),
        )
        .await;
    assert_eq!(status, 200, "{chat}");
    assert!(chat["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .contains("You asked: \"hi\""));
}

#[test]
fn allow_registry_takes_a_host_and_port_and_says_so_otherwise() {
    let env = Env::new();
    let refused = env.run(&["serve", "--allow-registry", "https://ghcr.io/org"]);
    assert!(
        refused
            .failed()
            .contains("--allow-registry takes a registry's host[:port]"),
        "{}",
        refused.stderr
    );
}
