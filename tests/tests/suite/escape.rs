//! The escape suite of the trust boundary: each case runs a real attack from Bash inside a real bubblewrap sandbox
//! (or from a hostile HTTP client) and shows that it fails. Grown from the security review's findings; every new
//! capability adds its probes here.

use std::io::{Read, Write};
use std::time::Duration;

use super::support::{landlock, processes_with, wait_until, Env, Server};

/// A bundle at `work/<name>` whose scripted model runs `command` with Bash in sandbox `mode`, with `network: ["*"]`.
fn bundle(env: &Env, name: &str, mode: &str, command: &str) {
    let sandbox = format!(r#"{{ mode: "{mode}", permissions: {{ network: ["*"] }} }}"#);
    super::sandbox::bundle(env, name, &sandbox, command);
}

/// Runs the attack and returns what it printed.
fn attack(env: &Env, name: &str, mode: &str, command: &str) -> String {
    bundle(env, name, mode, command);
    env.run(&["run", &format!("./{name}"), "--prompt", "go"])
        .ok()
        .to_string()
}

/// Perl one-liners: perl is in every Debian base system, so the probes need no extra package.
const FIND_WORKER: &str = r#"W=$(for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q "^$WORKER worker --ipc-fd" && basename $p; done | head -1); echo "worker=$W";"#;

/// [`FIND_WORKER`] for this backend: bwrap's mount of the worker, or under Landlock the host's binary.
fn find_worker() -> String {
    let worker = match landlock() {
        true => "[^ ]*/service-[a-z]*",
        false => "/run/service/worker",
    };
    format!("WORKER='{worker}'; {FIND_WORKER}")
}

#[test]
fn a_command_cannot_ptrace_steal_descriptors_or_read_the_memory_of_the_worker() {
    let env = Env::new();
    let find_worker = find_worker();
    let probe = format!(
        r#"{find_worker}
perl -e '$r = syscall(101, 16, $ARGV[0], 0, 0); print "ptrace: ", ($r == -1 ? "denied $!" : "ATTACHED"), "\n"' $W
perl -e '$fd = syscall(434, $ARGV[0], 0); print "pidfd_open: ", ($fd == -1 ? "denied $!" : "OPENED"), "\n"' $W
perl -e '$r = syscall(438, 0, 3, 0); print "pidfd_getfd: ", ($r == -1 ? "denied $!" : "STOLEN"), "\n"'
head -c 16 /proc/$W/mem >/dev/null 2>&1 && echo "mem: READ" || echo "mem: denied"
readlink /proc/$W/fd/0 >/dev/null 2>&1 && echo "fds: OPENED" || echo "fds: denied"
cat /proc/$W/environ >/dev/null 2>&1 && echo "environ: READ" || echo "environ: denied"
sleep 31 & K=$!; sleep 0.1
S=$(for p in /proc/[0-9]*; do [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "sleep 31 " ] && basename $p; done | head -1)
readlink /proc/$S/fd/0 >/dev/null 2>&1 && echo "sibling fds: opened"; kill $K"#
    );
    let out = attack(&env, "ptrace", "read_only", &probe);
    assert!(
        !out.contains("worker=\n"),
        "the probe found no worker: {out}"
    );
    for line in [
        "ptrace: denied Operation not permitted",
        "pidfd_open: denied Operation not permitted",
        "pidfd_getfd: denied Operation not permitted",
        "mem: denied",
        "fds: denied",
        "environ: denied",
        // The same /proc probe works against a dumpable process, so the denials above are not vacuous.
        "sibling fds: opened",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}

#[test]
fn a_spare_shell_cannot_be_fed_a_command_through_proc() {
    let env = Env::new();
    // A waiting spare runs the hand-over script: under bwrap in another pid namespace than this command's; under
    // Landlock, where there is none, any such shell but this command's own and its subshells.
    let other = match landlock() {
        true => r#"[ "${p#/proc/}" != "$$" ] && ! grep -q "^PPid:[[:space:]]*$$\$" $p/status"#,
        false => r#"[ "$(readlink $p/ns/pid 2>/dev/null)" != "$(readlink /proc/self/ns/pid)" ]"#,
    };
    let probe = format!(
        r#"sleep 0.5; W=$PWD
for p in /proc/[0-9]*; do
  if tr '\0' ' ' < $p/cmdline 2>/dev/null | grep -q __service_dir && {other}; then
    (printf "/\0touch $W/pwned\0" > $p/fd/0) 2>/dev/null && echo "spare: INJECTED" || echo "spare: refused"
  fi
done
sleep 0.5; test -e $W/pwned && echo "pwned: yes" || echo "pwned: no""#
    );
    let probe = probe.as_str();
    // Spares wait only once commands come back to back: a first command makes the probe the second.
    bundle(&env, "inject", "workspace_write", probe);
    let script = serde_json::json!({"turns": [{"replies": [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": probe}}]},
        {"text": "{{last_tool_output}}\n[done]"},
    ]}]});
    std::fs::write(
        env.path("inject").join("resources/script.json5"),
        script.to_string(),
    )
    .unwrap();
    let out = env
        .run(&["run", "./inject", "--prompt", "go"])
        .ok()
        .to_string();
    assert!(out.contains("spare: refused"), "no spare was probed: {out}");
    assert!(
        !out.contains("INJECTED") && out.contains("pwned: no"),
        "{out}"
    );
}

#[test]
fn nothing_a_command_started_outlives_it_setsid_or_not() {
    let env = Env::new();
    let probe = "setsid sleep 3171 & (sleep 3172 &); nohup sleep 3173 >/dev/null 2>&1 & \
                 (setsid sh -c 'sleep 3174' &); sleep 0.2; echo started";
    let out = attack(&env, "leftovers", "read_only", probe);
    // Under bwrap the command's PID namespace ends with it; under Landlock the worker adopts what escaped the
    // command's process group and kills it (the worker's `leftovers`).
    assert!(out.contains("started"), "{out}");
    wait_until(
        Duration::from_secs(5),
        || processes_with("sleep 317") == 0,
        || format!("{} leftovers still run", processes_with("sleep 317")),
    );
}

#[test]
fn no_host_backed_mount_is_writable_in_read_only() {
    let env = Env::new();
    // Mount point, options and filesystem type of every mount; kernel filesystems and the sandbox's own tmpfs hold
    // no host file.
    let probe = r#"awk '{ for (i = 7; $i != "-"; i++); print $5, $6, $(i+1) }' /proc/self/mountinfo
touch /workspace/x 2>/dev/null && echo "workspace: WRITTEN" || echo "workspace: refused""#;
    if landlock() {
        // Landlock has the host's mounts, writable as the host has them: what holds is that the sandbox can write
        // under none of them, the workspace included.
        let probe = r#"awk '{ print $5 }' /proc/self/mountinfo | while read -r m; do
  case "$m" in /proc*|/sys*|/dev*) continue;; esac
  touch "$m/.service-probe" 2>/dev/null && echo "WRITTEN under $m" || echo "refused under $m"
done
touch x 2>/dev/null && echo "workspace: WRITTEN" || echo "workspace: refused""#;
        let out = attack(&env, "mounts", "read_only", probe);
        assert!(
            out.contains("refused under /") && out.contains("workspace: refused"),
            "{out}"
        );
        assert!(!out.contains("WRITTEN"), "{out}");
        return;
    }
    let out = attack(&env, "mounts", "read_only", probe);
    assert!(out.contains("workspace: refused"), "{out}");
    let mut checked = 0;
    for line in out.lines().filter(|l| l.starts_with('/')) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [point, options, fstype] = f[..] else {
            continue;
        };
        let kernel = ["tmpfs", "proc", "devtmpfs", "devpts", "mqueue", "sysfs"].contains(&fstype);
        let device = point.starts_with("/dev/");
        if kernel || device {
            continue;
        }
        checked += 1;
        assert!(
            options.split(',').any(|o| o == "ro"),
            "{point} ({fstype}) is writable: {line}"
        );
    }
    assert!(checked >= 3, "too few host mounts seen: {out}");
}

#[test]
fn a_flood_of_output_is_cut_at_the_live_cap_and_the_journal_stays_small() {
    let env = Env::new();
    let out = attack(
        &env,
        "flood",
        "read_only",
        "head -c 100000000 /dev/zero | tr '\\0' a; echo; echo flood-done",
    );
    assert!(
        out.contains("bytes of output omitted"),
        "{}",
        &out[out.len().saturating_sub(300)..]
    );
    let sessions = env.home.path().join("sessions");
    let session = std::fs::read_dir(&sessions)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let journal = std::fs::read_to_string(session.join("events.jsonl")).unwrap();
    assert!(
        journal.len() < 3 * 1024 * 1024,
        "journal grew to {} bytes",
        journal.len()
    );
    assert_eq!(
        journal.matches("\"exec_command_output_truncated\"").count(),
        1
    );
}

#[test]
fn with_network_star_the_server_api_on_host_loopback_is_unreachable() {
    let env = Env::new();
    let server = Server::start(env.home.path(), &["--no-auth"], &[]);
    let port = server.base.rsplit(':').next().unwrap().to_string();
    let probe = format!(
        "(exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET /sessions HTTP/1.0\\r\\n\\r\\n' >&3 && cat <&3) 2>&1 | head -3; echo probe-done"
    );
    let other = Env::new();
    let out = attack(&other, "api", "workspace_write", &probe);
    assert!(
        out.contains("probe-done") && !out.contains("HTTP/1"),
        "{out}"
    );
}

/// Sends raw request bytes and returns the status line.
fn raw(server: &Server, request: &str) -> String {
    let addr = server.base.trim_start_matches("http://");
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or("").to_string()
}

#[test]
fn foreign_hosts_origins_and_non_json_bodies_are_refused() {
    let env = Env::new();
    let server = Server::start(env.home.path(), &[], &[]);
    let token = server.token.clone().unwrap();
    let rebinding = format!("GET /sessions HTTP/1.1\r\nHost: evil.example:8472\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n");
    assert!(
        raw(&server, &rebinding).contains("403"),
        "a foreign Host was answered"
    );
    let port = server.base.rsplit(':').next().unwrap();
    let cross = format!("POST /sessions/x/interrupt HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    assert!(
        raw(&server, &cross).contains("403"),
        "a foreign Origin was answered"
    );
    let plain = format!("POST /sessions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {token}\r\nContent-Type: text/plain\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi");
    assert!(
        raw(&server, &plain).contains("415"),
        "a text/plain body was accepted"
    );
    let same = format!("GET /sessions HTTP/1.1\r\nHost: localhost:{port}\r\nOrigin: http://localhost:{port}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n");
    assert!(
        raw(&server, &same).contains("200"),
        "the server's own origin was refused"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_cannot_name_server_directories_host_cwds_dangerous_bundles_or_other_models() {
    let env = Env::new();
    let allowed = env.path("allowed");
    std::fs::create_dir_all(&allowed).unwrap();
    super::support::write_bundle(
        &allowed.join("b"),
        "{turns: [{replies: [{text: 'hi'}]}]}",
        "",
        "workspace_write",
    );
    let danger = allowed.join("danger");
    super::support::write_bundle(
        &danger,
        "{turns: [{replies: [{text: 'hi'}]}]}",
        "",
        "danger_full_access",
    );
    let server = Server::start(
        env.home.path(),
        &["--allow-path", allowed.to_str().unwrap()],
        &[],
    );
    let client = server.client();
    let post = |path: &str, body: serde_json::Value| {
        let req = client.post(server.url(path)).json(&body);
        async move {
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (status, body) = post("/sessions", serde_json::json!({"bundle_ref": "/etc"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("bundle_path_refused"))
    );
    let (status, body) = post(
        "/sessions",
        serde_json::json!({"bundle_ref": "/nonexistent/x"}),
    )
    .await;
    assert_eq!(
        status, 403,
        "an absent directory must look the same as a present one: {body}"
    );
    let (status, _) = post(
        "/sessions",
        serde_json::json!({"bundle_ref": allowed.join("b").to_str().unwrap(), "cwd": "/"}),
    )
    .await;
    assert_eq!(status, 403, "a host cwd was accepted");
    let (status, body) = post(
        "/sessions",
        serde_json::json!({"bundle_ref": danger.to_str().unwrap()}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("dangerous_bundle_refused"))
    );
    let (status, record) = post(
        "/sessions",
        serde_json::json!({"bundle_ref": allowed.join("b").to_str().unwrap()}),
    )
    .await;
    assert_eq!(status, 201, "{record}");
    let id = record["id"].as_str().unwrap();
    let task =
        serde_json::json!({"prompt": "x", "submission_id": "6f1c1c2e-8f1a-4c59-9d0e-4f4a4f7f0a11"});
    let (status, body) = post(
        &format!("/sessions/{id}/run-sync"),
        serde_json::json!({"input": task, "turn_context": {"model": {"provider": "openai", "name": "gpt-x", "config": {"base_url": "http://evil.example/v1"}}}}),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("model_refused"))
    );
}

#[test]
fn half_open_connections_are_closed_after_the_header_time_out() {
    let env = Env::new();
    let server = Server::start(env.home.path(), &["--header-timeout", "1"], &[]);
    let addr = server.base.trim_start_matches("http://").to_string();
    let mut held: Vec<std::net::TcpStream> = (0..100)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(&addr).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
                .unwrap();
            s
        })
        .collect();
    // The server still answers others meanwhile.
    assert!(raw(
        &server,
        "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .contains("200"));
    std::thread::sleep(Duration::from_millis(2500));
    let mut closed = 0;
    for s in &mut held {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 256];
        if s.read(&mut buf).is_ok() {
            closed += 1;
        }
    }
    assert_eq!(closed, held.len(), "slowloris connections still open");
}

/// The turn outcome and every event kind of a session whose worker is the hostile one, playing `attack`.
async fn hostile_turn(
    attack: &str,
) -> (service_supervisor::runtime::TurnOutcome, Vec<&'static str>) {
    let (outcome, events) = hostile_events(attack).await;
    // `checkpoint_created` lands anywhere among the first reply's events; `checkpoints.rs` tests it.
    let kinds = events
        .iter()
        .map(|m| m.payload.kind())
        .filter(|k| *k != "checkpoint_created")
        .collect();
    (outcome, kinds)
}

/// [`hostile_turn`], with the journaled events themselves.
async fn hostile_events(
    attack: &str,
) -> (
    service_supervisor::runtime::TurnOutcome,
    Vec<service_ipc::EventMsg>,
) {
    let env = Env::new();
    let sandbox = r#"{ mode: "workspace_write", permissions: { network: [] } }"#;
    super::sandbox::bundle(&env, attack, sandbox, "true");
    std::fs::write(env.path(attack).join("resources/attack.txt"), attack).unwrap();
    let exe = super::support::binary().with_file_name("hostile-worker");
    assert!(
        exe.is_file(),
        "{} is missing: cargo build --workspace --bins",
        exe.display()
    );
    let rt = service_supervisor::ServiceRuntime::new(
        service_supervisor::ServiceHome::new(env.home.path()),
        service_supervisor::RuntimeOptions::new(exe),
    );
    let id = rt
        .create_session(env.path(attack).to_str().unwrap(), None)
        .await
        .unwrap()
        .id;
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        rt.run_turn(&id, service_ipc::Task::new("go"), Default::default()),
    )
    .await;
    let mut events = rt.subscribe_session_from(&id, 0).await.unwrap();
    let seen = super::support::until_quiet(&mut events).await;
    let outcome = outcome
        .unwrap_or_else(|_| {
            let kinds: Vec<&str> = seen.iter().map(|m| m.payload.kind()).collect();
            panic!(
                "{attack}: the turn did not end; events {kinds:?}, processes {:?}",
                super::support::pids_with(&format!("--label {id}"))
            )
        })
        .expect("an outcome");
    rt.shutdown("test done").await;
    (outcome, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_worker_cannot_forge_supervisor_events_other_turns_or_requests() {
    for attack in [
        "approval_resolved",
        "checkpoint_created",
        "session_rewound",
        "session_forked",
        "subagent_finished",
        "turn_completed",
        "network_access",
        "model_retry",
        "mcp_undeclared",
        "mcp_tool_of_undeclared_server",
        "a2a_undeclared",
        "a2a_tool_of_undeclared_agent",
        "other_turn",
        "model_for_other_turn",
        "model_flood",
        "unlisted_tool",
        "diff_with_bash",
        "oversized_diff",
        "forged_hook_answer",
        "forged_hook_event",
        "turnless_hook_event",
    ] {
        let (outcome, kinds) = hostile_turn(attack).await;
        let (code, message) = outcome
            .error
            .unwrap_or_else(|| panic!("{attack}: the turn did not fail"));
        assert_eq!(code, "worker_violation", "{attack}: {message}");
        // Only the supervisor's own events are journaled: the turn's start, what its first call (which the
        // supervisor made and which called a tool) used, and the error that ended it.
        assert_eq!(
            kinds,
            ["turn_started", "usage_update", "error"],
            "{attack}: {message}"
        );
    }
}

/// What a worker sent before it died is journaled even when it arrives in the same read as the end of its
/// connection; the turn then fails for the death.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_last_events_before_it_dies_are_kept() {
    let (outcome, events) = hostile_events("last_words").await;
    let said: Vec<&str> = events
        .iter()
        .filter_map(|m| match &m.payload {
            service_ipc::EventPayload::AgentMessageDelta { delta, .. } => Some(delta.trim()),
            _ => None,
        })
        .collect();
    // All of the hostile worker's 5000, in order.
    let in_order = said.iter().enumerate().all(|(i, d)| *d == i.to_string());
    assert!(
        said.len() == 5000 && in_order,
        "{} deltas kept, the last {:?}",
        said.len(),
        said.last()
    );
    assert_eq!(
        outcome.error.map(|(code, _)| code).as_deref(),
        Some("worker_died")
    );
}

/// A taken-over worker that asks for a subagent its agent.yaml does not declare gets an error for an answer, and no
/// session starts: the supervisor looks the name up in the bundle it loaded, not in the frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_taken_over_worker_cannot_start_a_subagent_its_bundle_does_not_declare() {
    let (outcome, events) = hostile_events("undeclared_subagent").await;
    let kinds: Vec<&str> = events.iter().map(|m| m.payload.kind()).collect();
    assert_eq!(outcome.error, None, "{kinds:?}");
    assert!(
        outcome
            .final_message
            .starts_with("there is no subagent \"wide\""),
        "{}",
        outcome.final_message
    );
    assert!(!kinds.contains(&"subagent_started"), "{kinds:?}");
}

/// A taken-over worker that claims a billion tokens and a hundred tool calls is not believed: a turn's usage is what
/// the supervisor counted at the provider, the one call it made and the one tool call that call asked for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_usage_is_the_supervisors_count_not_the_workers_claim() {
    let (outcome, events) = hostile_events("inflated_usage").await;
    let kinds: Vec<&str> = events.iter().map(|m| m.payload.kind()).collect();
    assert_eq!(outcome.error, None, "{kinds:?}");
    let updates: Vec<service_ipc::Usage> = events
        .iter()
        .filter_map(|m| match &m.payload {
            service_ipc::EventPayload::UsageUpdate { usage, .. } => Some(*usage),
            _ => None,
        })
        .collect();
    // The supervisor's update after its own call, and the worker's claim journaled with the supervisor's count.
    assert_eq!(updates.len(), 2, "{kinds:?}");
    assert!(
        updates
            .iter()
            .all(|u| u.input_tokens.is_some_and(|t| t < 1_000)),
        "{updates:?}"
    );
    assert_eq!(outcome.final_message, "cheap");
    assert_eq!(outcome.usage.model_calls, Some(1), "{:?}", outcome.usage);
    // The turn's tool calls are the one its model asked for, not the hundred the worker says it started.
    let activity = events.iter().find_map(|m| match &m.payload {
        service_ipc::EventPayload::TurnCompleted { activity, .. } => *activity,
        _ => None,
    });
    assert_eq!(activity.map(|a| a.tool_calls), Some(1), "{kinds:?}");
    assert!(
        outcome.usage.input_tokens.is_some_and(|t| t < 1_000),
        "{:?}",
        outcome.usage
    );
}

/// Attack on the buffers' swap: a taken-over worker writes a delta together with the first bytes of a 100 KB
/// `TurnFinished`, then the rest in pieces with pauses, so that the supervisor handles a complete frame while the
/// next one is half read. A swap of a buffer that holds part of a frame would lose those bytes: the frame would
/// not decode, or decode as something else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_a_taken_over_worker_trickles_in_pieces_is_read_whole() {
    let (outcome, kinds) = hostile_turn("trickle").await;
    assert_eq!(outcome.error, None, "{kinds:?}");
    let expected: String = (0..100_000u32)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    assert!(
        outcome.final_message == expected,
        "the trickled answer arrived as {} bytes, not 100,000 letters",
        outcome.final_message.len()
    );
    assert_eq!(
        kinds,
        [
            "turn_started",
            "usage_update",
            "agent_message_delta",
            "turn_completed"
        ]
    );
}

/// Whether this host has a cgroup v1 `pids` hierarchy that the tests can write (where the supervisor makes its
/// workers' cgroups).
fn pids_hierarchy() -> bool {
    super::support::own_cgroups()
        .iter()
        .any(|(c, dir)| c == "pids" && std::fs::create_dir_all(dir).is_ok())
}

/// The last component of the `pids` line of a `/proc/<pid>/cgroup` text.
fn pids_leaf(cgroups: &str) -> Option<&str> {
    cgroups
        .lines()
        .find(|l| l.split(':').nth(1) == Some("pids"))
        .and_then(|l| l.rsplit('/').next())
}

/// Attack: a worker taken over before its hello drops the cgroups the supervisor hands it, so as to run, and fork,
/// free of `pids.max` and the memory limit. The supervisor checks the move before it configures the worker, and
/// moves the worker itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_does_not_move_into_its_cgroups_is_moved_before_it_is_configured() {
    if !pids_hierarchy() {
        eprintln!("skipped: no cgroup v1 pids hierarchy here");
        return;
    }
    let (outcome, _) = hostile_turn("stay_outside_cgroups").await;
    assert_eq!(outcome.error, None);
    let leaf = pids_leaf(&outcome.final_message);
    assert!(
        leaf.is_some_and(|l| l.starts_with("service-rs-")),
        "the worker runs outside its session's cgroups: {}",
        outcome.final_message
    );
}

/// The cgroups a confined worker is handed are descriptors of its own cgroups' `tasks` files. It moves itself in
/// with them and closes them before its hello, so that nothing in the sandbox (the worker once taken over, or a
/// command that came to hold its descriptors) keeps a handle on a cgroup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confined_worker_moves_itself_into_its_cgroups_and_keeps_no_handle_to_them() {
    if !pids_hierarchy() {
        eprintln!("skipped: no cgroup v1 pids hierarchy here");
        return;
    }
    let env = Env::new();
    bundle(&env, "cg", "workspace_write", "true");
    let rt = super::support::runtime(env.home.path());
    for _ in 0..3 {
        let id = rt
            .create_session(env.path("cg").to_str().unwrap(), None)
            .await
            .unwrap()
            .id;
        rt.start_worker(&id).await.unwrap();
        let worker = super::support::confined_worker(&id).expect("the session's worker");
        let cgroups = std::fs::read_to_string(format!("/proc/{worker}/cgroup")).unwrap();
        assert_eq!(
            pids_leaf(&cgroups),
            Some(format!("service-rs-{id}").as_str()),
            "{cgroups}"
        );
        let held: Vec<String> = std::fs::read_dir(format!("/proc/{worker}/fd"))
            .unwrap()
            .flatten()
            .filter_map(|fd| std::fs::read_link(fd.path()).ok())
            .map(|target| target.display().to_string())
            .filter(|target| target.starts_with("/sys/fs/cgroup"))
            .collect();
        assert!(held.is_empty(), "the worker still holds {held:?}");
        rt.delete_session(&id).await.unwrap();
    }
    rt.shutdown("test over").await;
}

#[test]
fn a_command_cannot_plant_the_sandbox_backend_that_later_runs_take() {
    let env = Env::new();
    // An answer kept by an `auto` run: a command that rewrote it could move the runs after it to another backend.
    bundle(&env, "first", "read_only", "true");
    env.run(&[
        "--sandbox-backend",
        "auto",
        "run",
        "./first",
        "--prompt",
        "go",
    ])
    .ok();
    let memo = env.home.path().join("run/sandbox-backend");
    let kept = std::fs::read_to_string(&memo).unwrap();
    let memo = memo.display();
    let out = attack(
        &env,
        "plant",
        "workspace_write",
        &format!(
            "printf 'planted\\nlandlock planted\\n' > {memo} 2>/dev/null && echo PLANTED || echo refused; \
             mv {memo} {memo}.gone 2>/dev/null && echo MOVED || echo kept; \
             ln -sf /dev/null {memo} 2>/dev/null && echo LINKED || echo unlinked"
        ),
    );
    assert!(
        out.contains("refused") && out.contains("kept") && out.contains("unlinked"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(env.home.path().join("run/sandbox-backend")).unwrap(),
        kept
    );
}
