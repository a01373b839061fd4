//! MCP server processes as the host sees them: they start inside the session's cgroups, live as long as the
//! session (not its turn), die with it, and reach an HTTP server only through the session's egress proxy.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::mcp::{assert_gone, bundle, manifest, outputs, run, write_bundle};
use super::providers::of_type;
use super::support::{landlock, pids_with, Env};

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
        .filter(|pid| match landlock() {
            // No bwrap and no reapers: the worker is this process's child.
            true => parent(*pid) == std::process::id() as i32,
            false => comm(*pid) == "worker" && comm(parent(*pid)) == "bwrap",
        })
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
