//! MCP with real third-party parts: `mcp-server-time` from PyPI and `@modelcontextprotocol/server-filesystem`
//! from npm inside the sandbox, and `service-rs mcp serve` driven by the rmcp client and by the official Python
//! SDK. The third-party packages come from `.ci/mcp-servers`, which `.ci/run` runs and names in
//! `SERVICE_TEST_MCP_DIR`; without it those tests say so and return.

use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::mcp::{assert_gone, manifest, outputs, write_bundle};
use super::providers::{of_type, run_json};
use super::support::{binary, Env};

fn mcp_dir(test: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("SERVICE_TEST_MCP_DIR").map(PathBuf::from);
    if dir.is_none() {
        eprintln!("{test}: skipped; set SERVICE_TEST_MCP_DIR to the output of .ci/mcp-servers, as .ci/run does");
    }
    dir
}

/// Copies (hard-links where it can) the installed packages into the workspace, the only host directory the
/// sandbox shows.
fn into_workspace(from: &Path, ws: &Path) {
    std::fs::create_dir_all(ws).unwrap();
    // The directory only: the copy below links the cached environment's files, which stay the cache's.
    super::support::give_to_sandbox(ws);
    let linked = std::process::Command::new("cp")
        .arg("-al")
        .arg(from)
        .arg(ws)
        .status()
        .unwrap();
    if !linked.success() {
        assert!(std::process::Command::new("cp")
            .arg("-a")
            .arg(from)
            .arg(ws)
            .status()
            .unwrap()
            .success());
    }
}

/// A bundle with one MCP server, named as the bundle, and a scripted model that makes `calls`.
fn bundle(env: &Env, name: &str, mode: &str, server: Value, calls: &[(&str, Value)]) {
    let agent = json!({"mcp_servers": {name: server}});
    write_bundle(env, name, manifest(name, mode, json!([])), agent, calls);
}

fn run(env: &Env, name: &str) -> Vec<Value> {
    let (out, events) = run_json(env, &format!("./{name}"), &[], &["--cwd", "ws"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every server here is expected to start; when one does not, say why rather than "tool not available".
    let failed: Vec<&Value> = events
        .iter()
        .filter(|e| e["payload"]["type"] == "mcp_server_failed")
        .collect();
    assert!(failed.is_empty(), "an MCP server failed: {failed:?}");
    events
}

#[test]
fn mcp_server_time_from_pypi_answers_a_tool_call_from_inside_the_sandbox() {
    let Some(dir) = mcp_dir("time") else { return };
    let env = Env::new();
    into_workspace(&dir.join("py"), &env.path("ws"));
    let server = json!({
        "command": "/usr/bin/python3",
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        "env": {"PYTHONPATH": "/workspace/py"},
    });
    bundle(
        &env,
        "time",
        "read_only",
        server,
        &[(
            "mcp__time__get_current_time",
            json!({"timezone": "Europe/Paris"}),
        )],
    );
    let events = run(&env, "time");
    let out = outputs(&events);
    assert_eq!(out[0].0, "ok", "{out:?}");
    assert!(
        out[0].1.contains("Europe/Paris") && out[0].1.contains("datetime"),
        "{out:?}"
    );
    let answer = of_type(&events, "turn_completed")[0]["final_message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        answer.contains("Europe/Paris"),
        "the result reaches the answer: {answer}"
    );
    // Only this test runs this server.
    assert_gone("mcp_server_time");
}

#[test]
fn the_filesystem_server_from_npm_sees_only_what_the_sandbox_shows_and_cannot_write_in_read_only_mode(
) {
    let Some(dir) = mcp_dir("filesystem") else {
        return;
    };
    let env = Env::new();
    into_workspace(&dir.join("node"), &env.path("ws"));
    let store = env.home.path().display().to_string();
    // The workspace as the server sees it: bwrap's `/workspace`, or under Landlock the host's path.
    let landlock = super::support::landlock();
    let new_file = match landlock {
        true => env.path("ws/new.txt").display().to_string(),
        false => "/workspace/new.txt".to_string(),
    };
    let server = json!({
        "command": "/usr/bin/node",
        "args": ["/workspace/node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js", "/"],
    });
    bundle(
        &env,
        "fs",
        "read_only",
        server,
        &[
            ("mcp__fs__list_directory", json!({"path": "/"})),
            ("mcp__fs__list_directory", json!({"path": store})),
            (
                "mcp__fs__write_file",
                json!({"path": new_file, "content": "x"}),
            ),
            (
                "mcp__fs__write_file",
                json!({"path": "/etc/service-rs-test", "content": "x"}),
            ),
        ],
    );
    let events = run(&env, "fs");
    let out = outputs(&events);
    let root = &out[0].1;
    if landlock {
        // The host's `/` is not granted: it cannot even be listed.
        assert_eq!(out[0].0, "error", "{root}");
    } else {
        assert!(root.contains("usr") && root.contains("workspace"), "{root}");
        assert!(
            !root.contains("root") && !root.contains("home"),
            "no host home in the sandbox: {root}"
        );
    }
    assert_eq!(
        out[1].0, "error",
        "the store is not in the sandbox: {:?}",
        out[1]
    );
    for (i, target) in [(2, "the workspace"), (3, "/etc")] {
        assert_eq!(
            out[i].0, "error",
            "a write to {target} fails in read_only mode: {:?}",
            out[i]
        );
    }
    assert!(!env.path("ws/new.txt").exists());
    assert!(!Path::new("/etc/service-rs-test").exists());
    // Only this test runs this server.
    assert_gone("server-filesystem/dist/index.js");
}

/// Installs the greeter bundle: a Bash call that asks for approval, then an answer naming the prompt.
fn greeter(env: &Env) {
    let dir = env.path("greeter");
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::write(
        dir.join("service.bundle.json5"),
        r#"{ manifest_version: "service.bundle/v1", id: "greeter", version: "1.0.0", description: "Says hello", tools: ["Bash"], sandbox: { mode: "workspace_write" } }"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("agent.yaml"),
        "model: { provider: scripted, name: s, config: { script: resources/script.json5 } }\npermissions: { default: ask }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("resources/script.json5"),
        r#"{turns: [{replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo from-bash; ls"}}]}, {text: "Hello, {{prompt}}! ({{last_tool_output}}) {{message_count}}"}]}]}"#,
    )
    .unwrap();
    env.run(&["build", "./greeter"]).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_serve_runs_bundles_for_the_rmcp_client_and_continues_a_session() {
    use rmcp::model::CallToolRequestParams;
    use rmcp::ServiceExt;
    let env = Env::new();
    greeter(&env);
    let mut cmd = tokio::process::Command::new(binary());
    cmd.args(["mcp", "serve", "--approve"])
        .env("SERVICE_HOME", env.home.path())
        .env_remove("RUST_LOG")
        .kill_on_drop(true);
    let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let client = ().serve(transport).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    assert_eq!(names, ["list_bundles", "run_bundle"]);
    let call = |name: &str, args: Value| {
        let mut p = CallToolRequestParams::new(name.to_string());
        p.arguments = args.as_object().cloned();
        p
    };
    let listed = client
        .call_tool(call("list_bundles", json!({})))
        .await
        .unwrap();
    let listed = serde_json::to_value(&listed).unwrap();
    assert_eq!(
        listed["structuredContent"]["bundles"][0]["reference"],
        "local/greeter:1.0.0"
    );
    let ran = client
        .call_tool(call(
            "run_bundle",
            json!({"bundle": "greeter", "prompt": "world"}),
        ))
        .await
        .unwrap();
    let ran = serde_json::to_value(&ran).unwrap();
    let text = ran["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("Hello, world! (from-bash"),
        "--approve allowed the Bash call: {ran}"
    );
    let session = ran["structuredContent"]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let again = client
        .call_tool(call(
            "run_bundle",
            json!({"bundle": "greeter", "prompt": "again", "session_id": session}),
        ))
        .await
        .unwrap();
    let again = serde_json::to_value(&again).unwrap();
    assert_eq!(again["structuredContent"]["session_id"], session.as_str());
    let missing = client
        .call_tool(call("run_bundle", json!({"bundle": "nope", "prompt": "x"})))
        .await
        .unwrap();
    let missing = serde_json::to_value(&missing).unwrap();
    assert_eq!(missing["isError"], true, "{missing}");
    // A new session in a directory of the client's: its sandbox sees that directory.
    let project = super::support::sandbox_tempdir();
    std::fs::write(project.path().join("marker-file"), "x").unwrap();
    let there = client
        .call_tool(call(
            "run_bundle",
            json!({"bundle": "greeter", "prompt": "there", "cwd": project.path()}),
        ))
        .await
        .unwrap();
    let there = serde_json::to_value(&there).unwrap();
    assert!(
        there["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("marker-file"),
        "{there}"
    );
    let relative = client
        .call_tool(call(
            "run_bundle",
            json!({"bundle": "greeter", "prompt": "x", "cwd": "project"}),
        ))
        .await
        .unwrap();
    let relative = serde_json::to_value(&relative).unwrap();
    assert!(
        relative["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("absolute"),
        "{relative}"
    );
    client.cancel().await.unwrap();
    // No log lines unasked, only its one line of greeting: the client shows stderr to its user.
    let mut said = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut stderr.unwrap(), &mut said)
        .await
        .unwrap();
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 1, "mcp serve wrote on stderr: {said}");
    assert!(
        lines[0].starts_with("service-rs: serving the installed bundles"),
        "{said}"
    );
}

#[test]
fn mcp_serve_answers_the_official_python_sdk_client_and_says_why_requests_were_denied() {
    let Some(dir) = mcp_dir("python-sdk") else {
        return;
    };
    let env = Env::new();
    greeter(&env);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/mcp_client.py");
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(binary())
        .args(["greeter", "world"])
        .env("PYTHONPATH", dir.join("py"))
        .env("SERVICE_HOME", env.home.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["tools"], json!(["list_bundles", "run_bundle"]));
    assert!(
        v["list_bundles"]
            .as_str()
            .unwrap()
            .contains("local/greeter:1.0.0"),
        "{v}"
    );
    let text = v["run_bundle"]["text"].as_str().unwrap();
    assert!(text.contains("was denied by the operator"), "{text}");
    assert!(
        text.contains("service-rs mcp serve --approve"),
        "the answer says how to allow it: {text}"
    );
    assert_eq!(
        v["run_bundle"]["structured"]["denied"],
        json!(["Bash echo from-bash; ls"])
    );
}
