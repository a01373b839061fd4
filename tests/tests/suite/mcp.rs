//! MCP servers in the session sandbox, with the in-repo fixture server (`tests/mcp-fixture`) for the cases a
//! real server does not show on demand: a crash at start, a handshake that never comes, death mid-call, a hang,
//! 20 MB of output, a tool list that changes. After each test no server process remains.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::providers::{of_type, run_json};
use super::support::{pids_with, Env};

/// Writes the bundle `name`: `manifest` as its service.bundle.json5, and an agent with a scripted model that makes
/// `calls` (tool name and arguments, one model call each) and then answers with the last tool output, plus
/// `agent_extra` (its `mcp_servers`, `permissions`).
pub(super) fn write_bundle(
    env: &Env,
    name: &str,
    manifest: Value,
    agent_extra: Value,
    calls: &[(&str, Value)],
) {
    let dir = env.path(name);
    std::fs::create_dir_all(dir.join("resources")).unwrap();
    std::fs::create_dir_all(env.path("ws")).unwrap();
    super::support::give_to_sandbox(&env.path("ws"));
    std::fs::write(dir.join("service.bundle.json5"), manifest.to_string()).unwrap();
    let mut agent = json!({
        "model": {"provider": "scripted", "name": "s", "config": {"script": "resources/script.json5"}},
    });
    agent
        .as_object_mut()
        .unwrap()
        .extend(agent_extra.as_object().unwrap().clone());
    std::fs::write(dir.join("agent.yaml"), agent.to_string()).unwrap();
    let mut replies: Vec<Value> = calls
        .iter()
        .map(|(tool, args)| json!({"tool_calls": [{"name": tool, "arguments": args}]}))
        .collect();
    replies.push(json!({"text": "answer: {{last_tool_output}}"}));
    std::fs::write(
        dir.join("resources/script.json5"),
        json!({"turns": [{"replies": replies}]}).to_string(),
    )
    .unwrap();
}

/// A manifest `name` with the Bash tool in a `mode` sandbox that may reach `hosts`.
pub(super) fn manifest(name: &str, mode: &str, hosts: Value) -> Value {
    json!({
        "manifest_version": "service.bundle/v1", "id": name, "version": "1.0.0", "tools": ["Bash"],
        "sandbox": {"mode": mode, "permissions": {"network": hosts}},
    })
}

/// A bundle `name` whose MCP server `fx` is the fixture in `mode`, copied into the workspace; returns a marker in
/// the server's command line, to find its processes.
pub(super) fn bundle(
    env: &Env,
    name: &str,
    mode: &str,
    server_extra: Value,
    agent_extra: Value,
    calls: &[(&str, Value)],
) -> String {
    let marker = format!("marker-{name}-{}", std::process::id());
    let mut server = json!({"command": "/workspace/mcp-fixture", "args": [mode, marker], "startup_timeout_ms": 5000});
    server
        .as_object_mut()
        .unwrap()
        .extend(server_extra.as_object().unwrap().clone());
    let mut agent = json!({"mcp_servers": {"fx": server}});
    agent
        .as_object_mut()
        .unwrap()
        .extend(agent_extra.as_object().unwrap().clone());
    write_bundle(
        env,
        name,
        manifest(name, "workspace_write", json!([])),
        agent,
        calls,
    );
    let fixture = super::support::binary().with_file_name("mcp-fixture");
    std::fs::copy(&fixture, env.path("ws/mcp-fixture")).unwrap();
    marker
}

/// Runs the bundle's turn in `ws` with `--json`: the process output and the events.
pub(super) fn run(
    env: &Env,
    name: &str,
    envs: &[(&str, &str)],
) -> (std::process::Output, Vec<Value>) {
    run_json(env, &format!("./{name}"), envs, &["--cwd", "ws"])
}

/// The outputs of the turn's tool calls, in order.
pub(super) fn outputs(events: &[Value]) -> Vec<(String, String)> {
    of_type(events, "tool_call_finished")
        .iter()
        .map(|e| {
            (
                e["status"].as_str().unwrap().to_string(),
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Waits up to 5 s for every process whose command line holds `marker` to be gone.
pub(super) fn assert_gone(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !pids_with(marker).is_empty() {
        assert!(
            Instant::now() < deadline,
            "MCP server processes remain: {:?}",
            pids_with(marker)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn an_mcp_tool_runs_confined_in_the_sandbox_and_its_result_reaches_the_answer() {
    let env = Env::new();
    let marker = bundle(
        &env,
        "confined",
        "ok",
        json!({"env": {"GREETING": "hi"}, "env_from_host": [
            "TEAM_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "SERVICE_CLUSTER_TOKEN", "SERVICE_STORE_URL",
            "PGPASSWORD"
        ]}),
        json!({}),
        &[
            ("mcp__fx__echo", json!({"text": "hello"})),
            ("mcp__fx__whoami", json!({})),
        ],
    );
    let (out, events) = run(
        &env,
        "confined",
        &[
            ("TEAM_TOKEN", "t0k"),
            ("AWS_SECRET_ACCESS_KEY", "aws-secret"),
            // The operator's allow list: the keys and the cluster's secrets are withheld even when listed.
            (
                "SERVICE_PASS_ENV",
                "TEAM_TOKEN, OPENAI_API_KEY,SERVICE_CLUSTER_TOKEN,SERVICE_STORE_URL,PGPASSWORD",
            ),
            ("OPENAI_API_KEY", "sk-secret"),
            ("HOST_ONLY", "x"),
            ("SERVICE_CLUSTER_TOKEN", "cluster-secret"),
            ("SERVICE_STORE_URL", "postgres://service:pw@db/sessions"),
            ("PGPASSWORD", "pw"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = &of_type(&events, "mcp_server_started")[0];
    let names: Vec<&str> = started["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"mcp__fx__echo") && names.contains(&"mcp__fx__whoami"),
        "{names:?}"
    );
    let results = outputs(&events);
    assert_eq!(results[0], ("ok".to_string(), "echo: hello".to_string()));
    let who: Value = serde_json::from_str(&results[1].1).unwrap();
    assert!(
        who["seccomp"].as_str().unwrap().ends_with('2'),
        "under the seccomp filter: {who}"
    );
    if super::support::landlock() {
        // No namespaces: the server is the sandbox user (nobody under a root supervisor), at the host's path of
        // the workspace, in the host's PID space; the home's name resolves, its contents stay refused
        // (`sandbox_landlock`). SECURITY.md, "The Landlock backend".
        if nix::unistd::geteuid().is_root() {
            assert!(
                who["uid"].as_str().unwrap().contains("65534"),
                "the sandbox user: {who}"
            );
        }
        assert_eq!(who["cwd"], env.path("ws").display().to_string());
        assert_ne!(who["pid"], 1, "{who}");
    } else {
        assert!(
            who["uid"].as_str().unwrap().contains("1000"),
            "the sandbox user: {who}"
        );
        assert_eq!(who["cwd"], "/workspace");
        assert_eq!(
            who["pid"], 1,
            "pid 1 of a namespace of its own: the worker is out of its sight"
        );
        assert_eq!(
            who["home_visible"], false,
            "the host's home is not in the sandbox"
        );
    }
    let env_names: Vec<&str> = who["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        env_names.contains(&"GREETING") && env_names.contains(&"TEAM_TOKEN"),
        "{env_names:?}"
    );
    assert!(
        !env_names.contains(&"HOST_ONLY"),
        "nothing else of the host environment enters: {env_names:?}"
    );
    assert!(
        !env_names.contains(&"AWS_SECRET_ACCESS_KEY"),
        "a variable the bundle names but the operator did not list stays out: {env_names:?}"
    );
    assert!(
        !env_names.contains(&"OPENAI_API_KEY"),
        "a provider key never enters: {env_names:?}"
    );
    for secret in ["SERVICE_CLUSTER_TOKEN", "SERVICE_STORE_URL", "PGPASSWORD"] {
        assert!(
            !env_names.contains(&secret),
            "the cluster's secrets never enter, even when a bundle names them: {env_names:?}"
        );
    }
    assert_gone(&marker);
}

#[test]
fn a_hostile_mcp_server_cannot_reach_the_host_loopback_the_workers_socket_or_a_key() {
    let env = Env::new();
    // A service on the host's loopback, as the API or a database would be.
    let host_service = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host_service.local_addr().unwrap().port();
    let marker = bundle(
        &env,
        "hostile",
        "ok",
        json!({}),
        json!({}),
        &[("mcp__fx__probe", json!({"port": port}))],
    );
    let (out, events) = run(&env, "hostile", &[("OPENAI_API_KEY", "sk-probe-secret")]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let probe: Value = serde_json::from_str(&outputs(&events)[0].1).unwrap();
    assert_eq!(
        probe["loopback_connected"], false,
        "the host's loopback is out of reach: {probe}"
    );
    assert!(
        !probe["workers"].as_array().unwrap().is_empty(),
        "the probe found the worker in the sandbox's /proc: {probe}"
    );
    assert_eq!(
        probe["worker_fds_read"],
        json!([]),
        "the worker's descriptors (its socket) cannot be reached: {probe}"
    );
    assert_eq!(
        probe["secret_found"], false,
        "no key in any environment it can read: {probe}"
    );
    assert_gone(&marker);
}

#[test]
fn permission_rules_match_mcp_tool_names_with_globs() {
    let env = Env::new();
    let marker = bundle(
        &env,
        "denied",
        "ok",
        json!({}),
        json!({"permissions": {"rules": [{"tool": "mcp__fx__*", "match": "*secret*", "action": "deny"}]}}),
        &[
            ("mcp__fx__echo", json!({"text": "a secret"})),
            ("mcp__fx__echo", json!({"text": "fine"})),
        ],
    );
    let (out, events) = run(&env, "denied", &[]);
    assert!(out.status.success());
    let results = outputs(&events);
    assert_eq!(results[0].0, "denied", "{results:?}");
    assert!(results[0].1.contains("mcp__fx__echo"), "{results:?}");
    assert_eq!(results[1], ("ok".to_string(), "echo: fine".to_string()));
    assert_gone(&marker);
}

#[test]
fn an_ask_rule_routes_an_mcp_call_to_the_operator() {
    let env = Env::new();
    let marker = bundle(
        &env,
        "asks",
        "ok",
        json!({}),
        json!({"permissions": {"rules": [{"tool": "mcp__fx__echo", "action": "ask"}]}}),
        &[("mcp__fx__echo", json!({"text": "may I"}))],
    );
    let (out, events) = run_json(&env, "./asks", &[], &["--cwd", "ws", "--approve"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let asked = &of_type(&events, "permission_requested")[0];
    assert_eq!(asked["tool"], "mcp__fx__echo");
    assert_eq!(
        asked["summary"], r#"{"text":"may I"}"#,
        "the key is the arguments as JSON"
    );
    assert_eq!(
        of_type(&events, "approval_resolved")[0]["decision"],
        "allow_once"
    );
    assert_eq!(
        outputs(&events)[0],
        ("ok".to_string(), "echo: may I".to_string())
    );
    assert_gone(&marker);
}

#[test]
fn a_result_keeps_its_text_notes_images_and_adds_structured_content_as_json() {
    let env = Env::new();
    let marker = bundle(
        &env,
        "rich",
        "ok",
        json!({}),
        json!({}),
        &[("mcp__fx__rich", json!({}))],
    );
    let (out, events) = run(&env, "rich", &[]);
    assert!(out.status.success());
    let output = &outputs(&events)[0].1;
    assert!(
        output.starts_with("a chart:\n[image omitted: image/png"),
        "{output}"
    );
    assert!(output.ends_with(r#"{"points":[1,2,3]}"#), "{output}");
    assert_gone(&marker);
}

#[test]
fn inspect_lists_the_servers_and_mcp_tools_starts_them_and_lists_their_tools() {
    let env = Env::new();
    let marker = bundle(&env, "looked", "ok", json!({}), json!({}), &[]);
    let inspect = env.run(&["inspect", "./looked"]);
    assert!(
        inspect
            .ok()
            .contains("mcp servers  fx (stdio /workspace/mcp-fixture ok"),
        "{}",
        inspect.ok()
    );
    let tools = env.run(&["mcp", "tools", "./looked", "--cwd", "ws"]);
    assert!(
        tools
            .ok()
            .starts_with("fx: 8 tools\n  mcp__fx__echo  Echo the text back"),
        "{}",
        tools.ok()
    );
    let json = env
        .run(&["mcp", "tools", "./looked", "--cwd", "ws", "--json"])
        .json();
    assert_eq!(
        json["fx"]["tools"][0]["parameters"]["required"],
        json!(["text"]),
        "schemas under --json"
    );
    assert_gone(&marker);
    assert!(
        env.run(&["sessions", "--json"])
            .json()
            .as_array()
            .unwrap()
            .is_empty(),
        "its session is deleted"
    );
    // A server that fails makes the command fail, with the reason.
    let crashed = bundle(&env, "crashing", "crash", json!({}), json!({}), &[]);
    let run = env.run(&["mcp", "tools", "./crashing", "--cwd", "ws"]);
    run.failed();
    assert!(
        run.stdout.contains("fx: failed") && run.stdout.contains("missing configuration file"),
        "{}",
        run.stdout
    );
    assert_gone(&crashed);
}

#[test]
fn servers_that_crash_or_never_answer_at_start_are_reported_and_the_session_keeps_working() {
    let env = Env::new();
    for (mode, expected, stderr) in [
        (
            "crash",
            "the MCP handshake failed",
            "missing configuration file",
        ),
        (
            "silent",
            "did not finish the MCP handshake within 800 ms",
            "",
        ),
    ] {
        let name = format!("start-{mode}");
        let marker = bundle(
            &env,
            &name,
            mode,
            json!({"startup_timeout_ms": 800}),
            json!({}),
            &[
                ("mcp__fx__echo", json!({"text": "hello"})),
                ("Bash", json!({"command": "echo still-here"})),
            ],
        );
        let (out, events) = run(&env, &name, &[]);
        assert!(
            out.status.success(),
            "{mode}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let failed = &of_type(&events, "mcp_server_failed")[0];
        assert_eq!(failed["server"], "fx");
        assert!(
            failed["message"].as_str().unwrap().contains(expected),
            "{mode}: {failed}"
        );
        assert!(
            failed["stderr_tail"].as_str().unwrap().contains(stderr),
            "{mode}: {failed}"
        );
        // The model's call of one of its tools says why it is missing.
        let missing = &outputs(&events)[0].1;
        assert!(
            missing.contains("is not available: the MCP server \"fx\" that would offer it failed")
                && missing.contains(expected),
            "{mode}: {missing}"
        );
        assert!(outputs(&events)[1].1.contains("still-here"));
        assert_gone(&marker);
        // --verbose and `sessions show` say it too, with the tools it takes away.
        let said = "MCP server fx failed: ";
        let verbose = env.run(&[
            "run",
            &format!("./{name}"),
            "--cwd",
            "ws",
            "--verbose",
            "go",
        ]);
        verbose.ok();
        assert!(
            verbose.stderr.contains(said)
                && verbose
                    .stderr
                    .contains("its tools (mcp__fx__*) are not available"),
            "{mode}: {}",
            verbose.stderr
        );
        let id = events[0]["session_id"].as_str().unwrap();
        let shown = env.run(&["sessions", "show", id]);
        assert!(shown.ok().contains(said), "{mode}: {}", shown.stdout);
        assert_gone(&marker);
    }
}

#[test]
fn a_server_that_dies_mid_call_fails_that_call_and_its_tools_disappear() {
    let env = Env::new();
    let marker = bundle(
        &env,
        "dies",
        "ok",
        json!({}),
        json!({}),
        &[
            ("mcp__fx__die", json!({})),
            ("mcp__fx__echo", json!({"text": "after"})),
        ],
    );
    let (out, events) = run(&env, "dies", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = outputs(&events);
    assert_eq!(results[0].0, "error", "{results:?}");
    assert_eq!(results[1].0, "error");
    assert!(results[1].1.contains("not available"), "{results:?}");
    let failed = &of_type(&events, "mcp_server_failed")[0];
    assert!(
        failed["stderr_tail"]
            .as_str()
            .unwrap()
            .contains("dying mid-call"),
        "{failed}"
    );
    assert_gone(&marker);
}

#[test]
fn a_call_past_tool_timeout_ms_returns_an_error_and_does_not_hang_the_turn() {
    let env = Env::new();
    let marker = bundle(
        &env,
        "hangs",
        "ok",
        json!({"tool_timeout_ms": 500}),
        json!({}),
        &[("mcp__fx__sleep", json!({"ms": 60000}))],
    );
    let started = Instant::now();
    let (out, events) = run(&env, "hangs", &[]);
    assert!(out.status.success());
    assert!(started.elapsed() < Duration::from_secs(20));
    let results = outputs(&events);
    assert_eq!(results[0].0, "error");
    assert!(
        results[0].1.contains("within 500 ms (tool_timeout_ms)"),
        "{results:?}"
    );
    assert_gone(&marker);
}

#[test]
fn an_oversized_result_is_cut_with_a_marker() {
    let env = Env::new();
    let marker = bundle(
        &env,
        "huge",
        "ok",
        json!({}),
        json!({}),
        &[("mcp__fx__huge", json!({}))],
    );
    let (out, events) = run(&env, "huge", &[]);
    assert!(out.status.success());
    let output = &outputs(&events)[0].1;
    assert!(output.len() < 70 * 1024, "{}", output.len());
    assert!(
        output.ends_with("bytes of output omitted]"),
        "{}",
        &output[output.len() - 60..]
    );
    assert_gone(&marker);
}

#[test]
fn a_changed_tool_list_reaches_the_next_model_call() {
    let env = Env::new();
    let marker = bundle(
        &env,
        "grows",
        "ok",
        json!({}),
        json!({}),
        &[("mcp__fx__grow", json!({})), ("mcp__fx__late", json!({}))],
    );
    let (out, events) = run(&env, "grows", &[]);
    assert!(out.status.success());
    let changed = &of_type(&events, "mcp_tools_changed")[0];
    assert!(
        changed["tools"].to_string().contains("mcp__fx__late"),
        "{changed}"
    );
    assert_eq!(
        outputs(&events)[1],
        ("ok".to_string(), "late tool here".to_string())
    );
    assert_gone(&marker);
}

#[test]
fn bad_mcp_server_entries_fail_the_build_naming_the_key() {
    let env = Env::new();
    for (server, key) in [
        (json!({"args": ["x"]}), "mcp_servers.fx.command"),
        (json!({"command": "x", "colour": "red"}), "colour"),
        (json!({"url": "ftp://h/mcp"}), "mcp_servers.fx.url"),
    ] {
        let dir = env.path("bad");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("service.bundle.json5"),
            r#"{ manifest_version: "service.bundle/v1", id: "bad", version: "1.0.0", tools: [] }"#,
        )
        .unwrap();
        let agent =
            json!({"model": {"provider": "openai", "name": "m"}, "mcp_servers": {"fx": server}});
        std::fs::write(dir.join("agent.yaml"), agent.to_string()).unwrap();
        let err = env.run(&["build", "./bad"]).failed().to_string();
        assert!(err.contains(key), "{key}: {err}");
    }
}
