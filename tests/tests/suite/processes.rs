//! A session's processes on the host, seen from `/proc`: what an idle sandboxed session keeps running, and what an
//! interrupted command leaves behind.

use std::time::Duration;

use pretty_assertions::assert_eq;
use service_ipc::TurnStatus;
use service_supervisor::ServiceRuntime;

use super::support::{run_turn as turn, runtime};
use super::turns::{fixture, interrupt_slow_tool, Fixture, SLOW_TOOL};

/// The host pids of a session's processes (bwrap's and the worker's command lines name the session).
fn session_pids(id: &str) -> Vec<i32> {
    super::support::pids_with(&format!("--label {id}"))
}

/// A field of a process's status in the host's /proc (`State:`, `PPid:`), trimmed.
fn status_field(pid: i32, key: &str) -> Option<String> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .map(|v| v.trim().to_string())
}

/// The `State:` letter of a process.
fn state(pid: i32) -> Option<char> {
    status_field(pid, "State:").and_then(|s| s.chars().next())
}

/// The parent of a process.
fn parent(pid: i32) -> Option<i32> {
    status_field(pid, "PPid:").and_then(|p| p.parse().ok())
}

/// Every child of `pid`, over all its threads.
fn children(pid: i32) -> Vec<i32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("children")).ok())
                .flat_map(|c| {
                    c.split_whitespace()
                        .filter_map(|p| p.parse().ok())
                        .collect::<Vec<i32>>()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The session's processes, with their command lines, when there are `n` of them (within 5 s).
async fn settle_at(id: &str, n: usize) -> Vec<(i32, String)> {
    let mut found = Vec::new();
    for _ in 0..250 {
        found = session_pids(id)
            .into_iter()
            .map(|p| {
                let line = std::fs::read(format!("/proc/{p}/cmdline")).unwrap_or_default();
                (p, String::from_utf8_lossy(&line).replace('\0', " "))
            })
            .collect();
        if found.len() == n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    found
}

/// A session whose turn ran a tool (a text-only one starts no sandbox) that starts no shell, so that its sandbox is
/// up and idle: the fixture to keep, the runtime, the session and its two processes.
async fn idle_after_a_tool() -> (Fixture, ServiceRuntime, String, Vec<(i32, String)>) {
    let f = fixture(
        r#"{turns: [{replies: [{tool_calls: [{name: "Glob", arguments: {pattern: "*"}}]}, {text: "hello"}]}]}"#,
        "",
    );
    let rt = runtime(f.home.path());
    let id = f.session(&rt).await;
    assert_eq!(turn(&rt, &id, "hi").await.0.final_message, "hello");
    let procs = settle_at(&id, 2).await;
    assert_eq!(procs.len(), 2, "processes of the session: {procs:#?}");
    (f, rt, id, procs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_sandboxed_session_is_bwrap_and_the_small_worker_as_pid_1() {
    let (_f, rt, _, procs) = idle_after_a_tool().await;
    let (worker, _) = procs
        .iter()
        .find(|(_, line)| line.starts_with("/run/service/worker worker "))
        .expect("the worker among the session's processes");
    let status = std::fs::read_to_string(format!("/proc/{worker}/status")).unwrap();
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("NSpid:") && l.trim_end().ends_with("\t1")),
        "the worker is not pid 1 of its sandbox:\n{status}"
    );
    // The host sees the binary the sandbox bound: the small one built beside service-rs.
    let host_binary = super::support::binary().with_file_name("service-worker");
    let mapped = std::fs::read_to_string(format!("/proc/{worker}/maps")).unwrap_or_default();
    assert!(
        std::fs::read_link(format!("/proc/{worker}/exe")).is_ok_and(|e| e.ends_with("worker"))
            && host_binary.is_file()
            && std::fs::metadata(&host_binary).unwrap().len()
                < std::fs::metadata(super::support::binary()).unwrap().len(),
        "the worker is not the small binary ({}):\n{mapped:.400}",
        host_binary.display()
    );
    rt.shutdown("test over").await;
}

/// bwrap dies with the thread that started it (`--die-with-parent` applies to bwrap itself), so a sandbox must be
/// started by a thread that lives as long as the runtime, not by one of its blocking pool, which exits once idle
/// (here after 50 ms). A sandbox that died would go unnoticed by the next turn, which starts another: the pids tell.
#[test]
fn a_sandbox_outlives_the_idle_threads_of_the_runtime_that_started_it() {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_keep_alive(Duration::from_millis(50))
        .enable_all()
        .build()
        .unwrap();
    tokio.block_on(async {
        let (_f, rt, id, before) = idle_after_a_tool().await;
        // Well past the keep-alive of every blocking thread that worked on the start.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(turn(&rt, &id, "again").await.0.final_message, "hello");
        let after = settle_at(&id, 2).await;
        assert_eq!(
            after, before,
            "the session's sandbox died and was started again"
        );
        rt.shutdown("test over").await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_command_leaves_no_zombie_and_idle_spares_are_let_go() {
    let f = fixture(SLOW_TOOL, "");
    let rt = super::support::runtime_with(f.home.path(), |o| {
        o.spare_shell_idle = Duration::from_millis(1500)
    });
    let (id, outcome, _) = interrupt_slow_tool(&rt, &f).await;
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    let worker_line = |p: i32| {
        std::fs::read(format!("/proc/{p}/cmdline"))
            .is_ok_and(|c| c.starts_with(b"/run/service/worker\0worker\0"))
    };
    // The worker's forked reapers share its command line; their parent is the worker, and the worker's is bwrap.
    let worker = session_pids(&id)
        .into_iter()
        .find(|p| worker_line(*p) && !parent(*p).is_some_and(worker_line))
        .expect("the worker among the session's processes");
    // The killed command's shell was handed to the worker when its reaper died; the worker reaps it.
    let mut zombies = Vec::new();
    for _ in 0..100 {
        zombies = children(worker)
            .into_iter()
            .filter(|c| state(*c) == Some('Z'))
            .collect();
        if zombies.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        zombies.is_empty(),
        "zombies left in the sandbox: {zombies:?}"
    );
    // Spares start once commands come back to back: two in a row. They (a reaper each, as the worker's children)
    // then wait for a command, and go once idle. The first ones start `FIRST_START_AFTER` after the command.
    for _ in 0..2 {
        assert_eq!(super::commands::command(&rt, &id, "true").await.0, Some(0));
    }
    let mut spares = children(worker);
    for _ in 0..250 {
        if !spares.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        spares = children(worker);
    }
    assert!(
        !spares.is_empty(),
        "no spare shell was started after the command"
    );
    let procs = settle_at(&id, 2).await;
    assert_eq!(procs.len(), 2, "the idle spares were kept: {procs:#?}");
    // Their killed reapers are reaped by tokio once their SIGCHLD is handled, the shells by the worker.
    let mut left = children(worker);
    for _ in 0..250 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = children(worker);
    }
    assert!(left.is_empty(), "the worker still has children: {left:?}");
    // And the next command still runs.
    assert_eq!(turn(&rt, &id, "next").await.0.final_message, "quick 5");
    rt.shutdown("test over").await;
}

#[test]
fn ipc_objects_a_command_makes_end_with_it_so_no_later_command_or_an_idle_stop_finds_state_outside_files(
) {
    use super::mcp::{manifest, outputs, run, write_bundle};
    let env = super::support::Env::new();
    // `ipcs` lists the objects of the caller's IPC namespace: keys are printed as 0x...
    let count = "ipcs -m -q -s | grep -c '^0x'; true";
    write_bundle(
        &env,
        "ipc",
        manifest("ipc", "workspace_write", serde_json::json!([])),
        serde_json::json!({}),
        &[
            (
                "Bash",
                serde_json::json!({"command": format!("ipcmk -M 4096 >/dev/null && ipcmk -Q >/dev/null && ipcmk -S 1 >/dev/null && {count}")}),
            ),
            ("Bash", serde_json::json!({"command": count})),
        ],
    );
    let (out, events) = run(&env, "ipc", &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outputs = outputs(&events);
    assert_eq!(
        outputs.iter().map(|(_, o)| o.trim()).collect::<Vec<_>>(),
        ["3", "0"],
        "the first command sees the shared memory, queue and semaphores it made; the next sees none: {outputs:?}"
    );
}
