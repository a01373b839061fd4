//! ACP keeps a session to its project: the editor's `cwd` may not be `/` or the home directory (the CLI refuses them
//! unless named on purpose), and `session/load` or `session/resume` of a session made in another directory is
//! refused, so an editor open on one project cannot replay or drive another's session.

use serde_json::{json, Value};

use super::acp::{project, Raw};

fn request(id: u64, method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

#[test]
fn the_root_and_home_directories_are_refused_as_a_cwd() {
    let p = project();
    let home = super::support::sandbox_tempdir();
    let mut command = p.env.command(&["acp", "--bundle", &p.bundle]);
    command.env("HOME", home.path());
    let mut raw = Raw::spawn(command);
    raw.send(&request(1, "initialize", json!({"protocolVersion": 1})));
    raw.answer(json!(1));
    raw.send(&request(
        2,
        "session/new",
        json!({"cwd": "/", "mcpServers": []}),
    ));
    let root = raw.answer(json!(2));
    assert_eq!(root["error"]["code"], -32602, "{root}");
    assert!(root.to_string().contains("the root directory /"), "{root}");
    raw.send(&request(
        3,
        "session/new",
        json!({"cwd": home.path(), "mcpServers": []}),
    ));
    let refused = raw.answer(json!(3));
    assert!(
        refused.to_string().contains("your home directory"),
        "{refused}"
    );
    raw.send(&request(
        4,
        "session/new",
        json!({"cwd": p.cwd(), "mcpServers": []}),
    ));
    assert!(raw.answer(json!(4))["result"]["sessionId"].is_string());
}

#[test]
fn a_session_of_another_project_is_not_loaded_or_resumed() {
    let p = project();
    let mut raw = Raw::start(&p.env, &["acp", "--bundle", &p.bundle]);
    raw.send(&request(1, "initialize", json!({"protocolVersion": 1})));
    raw.answer(json!(1));
    raw.send(&request(
        2,
        "session/new",
        json!({"cwd": p.cwd(), "mcpServers": []}),
    ));
    let id = raw.answer(json!(2))["result"]["sessionId"].clone();
    raw.send(&request(
        3,
        "session/prompt",
        json!({"sessionId": id, "prompt": [{"type": "text", "text": "echo the secret plan"}]}),
    ));
    raw.answer(json!(3));
    drop(raw);

    let other = super::support::sandbox_tempdir();
    let other_cwd = other.path().to_str().unwrap();
    let mut raw = Raw::start(&p.env, &["acp", "--bundle", &p.bundle]);
    raw.send(&request(1, "initialize", json!({"protocolVersion": 1})));
    raw.answer(json!(1));
    for (n, method) in [(2, "session/load"), (3, "session/resume")] {
        raw.send(&request(
            n,
            method,
            json!({"sessionId": id, "cwd": other_cwd, "mcpServers": []}),
        ));
        let refused = raw.answer(json!(n));
        assert_eq!(refused["error"]["code"], -32602, "{method}: {refused}");
        assert!(
            refused.to_string().contains("open that project"),
            "{method}: {refused}"
        );
        assert!(!refused.to_string().contains("secret plan"), "{refused}");
    }
    // From its own project it loads, with its conversation.
    raw.send(&request(
        4,
        "session/load",
        json!({"sessionId": id, "cwd": p.cwd(), "mcpServers": []}),
    ));
    assert!(raw.answer(json!(4))["result"].is_object());
}
