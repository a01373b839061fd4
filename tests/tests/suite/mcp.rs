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
fn bundle(
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
fn run(env: &Env, name: &str, envs: &[(&str, &str)]) -> (std::process::Output, Vec<Value>) {
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
            "TEAM_TOKEN", "OPENAI_API_KEY", "SERVICE_CLUSTER_TOKEN", "SERVICE_STORE_URL", "PGPASSWORD"
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
        who["uid"].as_str().unwrap().contains("1000"),
        "the sandbox user: {who}"
    );
    assert_eq!(who["cwd"], "/workspace");
    assert_eq!(
        who["pid"], 1,
        "pid 1 of a namespace of its own: the worker is out of its sight"
    );
    assert!(
        who["seccomp"].as_str().unwrap().ends_with('2'),
        "under the seccomp filter: {who}"
    );
    assert_eq!(
        who["home_visible"], false,
        "the host's home is not in the sandbox"
    );
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
            &[("Bash", json!({"command": "echo still-here"}))],
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
        assert!(outputs(&events)[0].1.contains("still-here"));
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

fn comm(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn parent(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name, which is in parentheses and may hold spaces.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
    rest.split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0)
}

/// Waits until `pids_with(marker)` is not empty: the server has started.
fn wait_running(marker: &str) -> Vec<i32> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids = pids_with(marker);
        if !pids.is_empty() {
            return pids;
        }
        assert!(Instant::now() < deadline, "the MCP server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_live_with_the_session_and_die_with_it_after_an_interrupt_a_deletion_or_a_worker_crash(
) {
    use service_ipc::{Task, TurnOverrides};
    let env = Env::new();
    let marker = bundle(
        &env,
        "life",
        "ok",
        json!({}),
        json!({}),
        &[("mcp__fx__sleep", json!({"ms": 60000}))],
    );
    let rt = super::support::runtime(env.home.path());
    let ws = env.path("ws");

    // An interrupt ends the call, not the server; deleting the session ends the server.
    let id = rt
        .create_session(env.path("life").to_str().unwrap(), Some(&ws))
        .await
        .unwrap()
        .id;
    let pending = rt
        .start_turn(&id, Task::new("go"), TurnOverrides::default())
        .await
        .unwrap();
    let before = wait_running(&marker);
    tokio::time::sleep(Duration::from_millis(300)).await;
    rt.interrupt(&id).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), pending.outcome)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.status, service_ipc::TurnStatus::Interrupted);
    assert_eq!(
        pids_with(&marker),
        before,
        "the server outlives an interrupted turn"
    );
    rt.delete_session(&id).await.unwrap();
    assert_gone(&marker);

    // A worker killed outright (not its bwrap) takes its servers with it.
    let id = rt
        .create_session(env.path("life").to_str().unwrap(), Some(&ws))
        .await
        .unwrap()
        .id;
    rt.start_worker(&id).await.unwrap();
    wait_running(&marker);
    let worker: Vec<i32> = pids_with(&format!("--label {id}"))
        .into_iter()
        .filter(|pid| comm(*pid) == "worker" && comm(parent(*pid)) == "bwrap")
        .collect();
    assert_eq!(
        worker.len(),
        1,
        "one worker process (the others are the servers' reapers, forked from it)"
    );
    for pid in worker {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
    assert_gone(&marker);
    rt.shutdown("test done").await;
}

/// A bundle whose only MCP server `web` is the streamable-HTTP endpoint `url`, in a sandbox that may reach `hosts`.
fn http_bundle(env: &Env, name: &str, url: &str, hosts: Value) {
    write_bundle(
        env,
        name,
        manifest(name, "workspace_write", hosts),
        json!({"mcp_servers": {"web": {"url": url, "startup_timeout_ms": 5000}}}),
        &[("mcp__web__echo", json!({"text": "over http"}))],
    );
}

#[test]
fn a_streamable_http_server_is_reached_through_the_egress_proxy_only_when_the_manifest_lists_it() {
    use std::io::BufRead;
    let env = Env::new();
    let mut server =
        std::process::Command::new(super::support::binary().with_file_name("mcp-fixture"))
            .arg("http")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().parse().unwrap();
    let url = format!("http://127.0.0.1:{port}/mcp");

    http_bundle(&env, "listed", &url, json!([format!("127.0.0.1:{port}")]));
    let (out, events) = run(&env, "listed", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        of_type(&events, "mcp_server_failed").is_empty(),
        "{:?}",
        of_type(&events, "mcp_server_failed")
    );
    assert_eq!(
        outputs(&events)[0],
        ("ok".to_string(), "echo: over http".to_string())
    );
    let access = of_type(&events, "network_access");
    assert!(
        access
            .iter()
            .all(|a| a["decision"] == "allow" && a["port"] == port),
        "{access:?}"
    );
    assert!(!access.is_empty(), "the connection went through the proxy");

    for (name, hosts) in [
        ("nohosts", json!([])),
        ("otherhost", json!(["example.com"])),
    ] {
        http_bundle(&env, name, &url, hosts);
        let (out, events) = run(&env, name, &[]);
        assert!(
            out.status.success(),
            "{name}: the session goes on without the server"
        );
        let failed = &of_type(&events, "mcp_server_failed")[0];
        assert!(
            failed["message"].as_str().unwrap().contains(&url),
            "{name}: {failed}"
        );
        assert_eq!(
            outputs(&events)[0].0,
            "error",
            "{name}: its tool is not there"
        );
    }
    let _ = server.kill();
    let _ = server.wait();
}

/// The host's view of a process's `pids` cgroup (its line of /proc/<pid>/cgroup).
fn pids_cgroup(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .ok()?
        .lines()
        .find(|l| l.split(':').nth(1) == Some("pids"))
        .map(String::from)
}

/// Attack: a bundle's MCP server is code of the bundle's choosing, started as soon as the worker is configured. A
/// server forked before the worker had moved into its cgroups stayed outside them, free of `pids.max` and the
/// memory limit (the move can wait 5-15 ms for the kernel). Several sessions, so a race would show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundles_mcp_server_starts_inside_the_sessions_cgroups() {
    if !super::support::own_cgroups()
        .iter()
        .any(|(c, dir)| c == "pids" && std::fs::create_dir_all(dir).is_ok())
    {
        eprintln!("skipped: no cgroup v1 pids hierarchy here");
        return;
    }
    let env = Env::new();
    let marker = bundle(&env, "cg", "ok", json!({}), json!({}), &[]);
    let rt = super::support::runtime(env.home.path());
    for _ in 0..8 {
        let id = rt
            .create_session(env.path("cg").to_str().unwrap(), Some(&env.path("ws")))
            .await
            .unwrap()
            .id;
        rt.start_worker(&id).await.unwrap();
        let worker = super::support::confined_worker(&id).expect("the session's worker");
        let session_cgroup = pids_cgroup(worker).unwrap();
        assert!(
            session_cgroup.ends_with(&format!("/service-rs-{id}")),
            "the worker is not in its session's cgroup: {session_cgroup}"
        );
        let deadline = Instant::now() + Duration::from_secs(5);
        let server = loop {
            if let Some(p) = pids_with(&marker).into_iter().next() {
                break p;
            }
            assert!(Instant::now() < deadline, "the MCP server never started");
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        assert_eq!(
            pids_cgroup(server).as_deref(),
            Some(session_cgroup.as_str()),
            "the bundle's MCP server runs outside its session's cgroup"
        );
        rt.delete_session(&id).await.unwrap();
        assert_gone(&marker);
    }
    rt.shutdown("test over").await;
}
