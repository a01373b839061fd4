//! Turns through `ServiceRuntime` with real worker processes: event order, every tool, memory, faults.

use std::time::Duration;

use pretty_assertions::assert_eq;
use service_ipc::{EventPayload, Task, ToolCallStatus, TurnOverrides, TurnStatus};
use tempfile::TempDir;

use super::support::{events_of_turn, kinds, run_turn as turn, runtime, write_bundle};

pub(super) struct Fixture {
    pub(super) home: TempDir,
    bundle: TempDir,
    cwd: TempDir,
}

/// A sandboxed (workspace_write) session fixture.
pub(super) fn fixture(script: &str, agent_extra: &str) -> Fixture {
    fixture_in(script, agent_extra, "workspace_write")
}

fn fixture_in(script: &str, agent_extra: &str, mode: &str) -> Fixture {
    let f = Fixture {
        home: TempDir::new().unwrap(),
        bundle: TempDir::new().unwrap(),
        // A host worker runs as the tests' user, and root keeps its rights only over its own files.
        cwd: if mode == "danger_full_access" {
            TempDir::new().unwrap()
        } else {
            super::support::sandbox_tempdir()
        },
    };
    write_bundle(f.bundle.path(), script, agent_extra, mode);
    f
}

impl Fixture {
    pub(super) async fn session(&self, rt: &service_supervisor::ServiceRuntime) -> String {
        rt.create_session(self.bundle.path().to_str().unwrap(), Some(self.cwd.path()))
            .await
            .unwrap()
            .id
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_only_turn_streams_reasoning_then_text_then_completes() {
    let f = fixture(
        r#"{turns: [{replies: [{reasoning: ["first idea", "second idea"], text: "Hello there, operator."}]}]}"#,
        "",
    );
    let rt = runtime(f.home.path());
    let id = f.session(&rt).await;
    let (outcome, events) = turn(&rt, &id, "hi").await;
    assert_eq!(outcome.status, TurnStatus::Completed);
    assert_eq!(outcome.final_message, "Hello there, operator.");
    assert_eq!(
        kinds(&events),
        [
            "turn_started",
            "reasoning_delta",
            "reasoning_section_break",
            "reasoning_delta",
            "agent_message_delta",
            "turn_completed"
        ]
    );
    let ids: Vec<u64> = events.iter().map(|e| e.seq().unwrap()).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
    let EventPayload::TurnStarted {
        context, prompt, ..
    } = &events[0].payload
    else {
        panic!()
    };
    assert_eq!(prompt, "hi");
    assert_eq!(context.model.provider, "scripted");
    // The context reports what ran: the sandbox's view of the workspace and the mode that confined it.
    assert_eq!(context.cwd, "/workspace");
    assert_eq!(
        context.sandbox_mode,
        service_ipc::SandboxMode::WorkspaceWrite
    );
    let text: String = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::AgentMessageDelta { delta, .. } => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hello there, operator.");
    rt.shutdown("test over").await;
}

const EVERY_TOOL: &str = r#"{turns: [{replies: [
  {tool_calls: [{name: "Write", arguments: {file_path: "notes/a.txt", content: "alpha\nbeta\n"}}]},
  {tool_calls: [{name: "Read", arguments: {file_path: "notes/a.txt"}}]},
  {tool_calls: [{name: "Edit", arguments: {file_path: "notes/a.txt", old_string: "beta", new_string: "gamma"}}]},
  {tool_calls: [{name: "Bash", arguments: {command: "cat notes/a.txt; echo oops >&2"}}]},
  {tool_calls: [{name: "Glob", arguments: {pattern: "**/*.txt"}}]},
  {tool_calls: [{name: "Grep", arguments: {pattern: "gam+a"}}]},
  {tool_calls: [{name: "Skill", arguments: {name: "greeting"}}]},
  {tool_calls: [{name: "UpdatePlan", arguments: {plan: [{step: "write", status: "completed"}, {step: "report", status: "in_progress"}]}}]},
  {text: "done"},
]}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_builtin_tool_runs_with_exact_event_order_and_files_on_disk() {
    let f = fixture(EVERY_TOOL, "");
    let rt = runtime(f.home.path());
    let id = f.session(&rt).await;
    let (outcome, events) = turn(&rt, &id, "use every tool").await;
    assert_eq!(outcome.status, TurnStatus::Completed, "{:?}", outcome.error);
    // Each call that calls a tool is followed by what the turn has used so far.
    let tool = [
        "usage_update",
        "tool_call_started",
        "tool_call_delta",
        "tool_call_finished",
    ];
    let mut expected = vec!["turn_started"];
    for _ in 0..3 {
        expected.extend(tool);
    }
    expected.extend([
        "usage_update",
        "tool_call_started",
        "tool_call_delta",
        "exec_command_begin",
        "exec_command_output_delta",
        "exec_command_end",
        "tool_call_finished",
    ]);
    for _ in 0..3 {
        expected.extend(tool);
    }
    expected.extend([
        "usage_update",
        "tool_call_started",
        "tool_call_delta",
        "plan_update",
        "tool_call_finished",
    ]);
    expected.extend(["agent_message_delta", "turn_completed"]);
    assert_eq!(kinds(&events), expected);

    let results: Vec<(String, ToolCallStatus, String)> = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolCallFinished {
                tool,
                status,
                output,
                ..
            } => Some((tool.clone(), *status, output.clone())),
            _ => None,
        })
        .collect();
    let output = |name: &str| results.iter().find(|r| r.0 == name).unwrap();
    for r in &results {
        assert_eq!(r.1, ToolCallStatus::Ok, "{} failed: {}", r.0, r.2);
    }
    assert!(
        output("Read").2.contains("     1\talpha\n     2\tbeta"),
        "{}",
        output("Read").2
    );
    assert!(output("Bash").2.contains("alpha\ngamma") && output("Bash").2.contains("oops"));
    assert_eq!(output("Glob").2, "notes/a.txt");
    assert!(
        output("Grep").2.ends_with("notes/a.txt:2:gamma"),
        "{}",
        output("Grep").2
    );
    assert!(output("Skill").2.contains("Say hello warmly"));
    assert_eq!(
        std::fs::read_to_string(f.cwd.path().join("notes/a.txt")).unwrap(),
        "alpha\ngamma\n"
    );

    let streams: Vec<(service_ipc::ExecStream, String)> = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ExecCommandOutputDelta { stream, chunk, .. } => {
                Some((*stream, chunk.clone()))
            }
            _ => None,
        })
        .collect();
    let text = |s| {
        streams
            .iter()
            .filter(|(k, _)| *k == s)
            .map(|(_, c)| c.as_str())
            .collect::<String>()
    };
    assert_eq!(text(service_ipc::ExecStream::Stdout), "alpha\ngamma\n");
    assert_eq!(text(service_ipc::ExecStream::Stderr), "oops\n");
    let plan = events.iter().find_map(|e| match &e.payload {
        EventPayload::PlanUpdate { plan, .. } => Some(plan.len()),
        _ => None,
    });
    assert_eq!(plan, Some(2));
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_window_drops_old_messages_and_history_persists_across_turns() {
    let f = fixture(
        r#"{turns: [{replies: [{text: "seen {{message_count}}"}]}]}"#,
        "memory: { window: 4 }",
    );
    let rt = runtime(f.home.path());
    let id = f.session(&rt).await;
    let mut seen = Vec::new();
    for prompt in ["one", "two", "three", "four"] {
        seen.push(turn(&rt, &id, prompt).await.0.final_message);
    }
    // system + [u1]; system + [u1 a1 u2]; then the window keeps 4 messages plus the system prompt.
    assert_eq!(seen, ["seen 2", "seen 4", "seen 5", "seen 5"]);
    assert_eq!(rt.get_session(&id).await.unwrap().turn_count, 4);
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supervisor_restart_between_turns_continues_the_history() {
    let f = fixture(
        r#"{turns: [{replies: [{text: "seen {{message_count}}"}]}]}"#,
        "",
    );
    let id = {
        let rt = runtime(f.home.path());
        let id = f.session(&rt).await;
        assert_eq!(turn(&rt, &id, "before").await.0.final_message, "seen 2");
        rt.shutdown("restart").await;
        id
    };
    let rt = runtime(f.home.path());
    assert_eq!(turn(&rt, &id, "after").await.0.final_message, "seen 4");
    let listed = rt.list_sessions().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].turn_count, 2);
    rt.shutdown("test over").await;
}

pub(super) const SLOW_TOOL: &str = r#"{turns: [
  {when: "slow", replies: [{tool_calls: [{name: "Bash", arguments: {command: "(read -r _ _ _ B _ < /proc/self/stat; read -r _ _ _ R _ < /proc/$B/stat; read -r _ _ _ W _ < /proc/$R/stat; echo $W) > worker.pid; sleep 30"}}]}, {text: "unreachable"}]},
  {replies: [{text: "quick {{message_count}}"}]},
]}"#;

async fn wait_for_file(path: &std::path::Path) -> String {
    for _ in 0..200 {
        if let Ok(t) = std::fs::read_to_string(path) {
            if t.ends_with('\n') {
                return t;
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never appeared", path.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_killed_mid_turn_fails_the_turn_and_the_next_turn_respawns_it() {
    // On the host, so the test can read the worker's pid ($PPID of the tool's shell) and kill it.
    let f = fixture_in(SLOW_TOOL, "", "danger_full_access");
    let rt = runtime(f.home.path());
    let id = f.session(&rt).await;
    let mut events = rt.subscribe_session(&id).await.unwrap();
    let pending = rt
        .start_turn(&id, Task::new("slow please"), TurnOverrides::default())
        .await
        .unwrap();
    let pid: i32 = wait_for_file(&f.cwd.path().join("worker.pid"))
        .await
        .trim()
        .parse()
        .unwrap();
    assert!(pid > 1, "not a worker pid: {pid}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    let evs = events_of_turn(&mut events, &pending.turn_id).await;
    let outcome = pending.outcome.await.unwrap();
    assert_eq!(outcome.status, TurnStatus::Failed);
    let (code, message) = outcome.error.unwrap();
    assert_eq!(code, "worker_died");
    assert!(
        message.contains("killed by signal 9 (SIGKILL)"),
        "{message}"
    );
    assert_eq!(evs.last().unwrap().payload.kind(), "error");

    let (next, _) = turn(&rt, &id, "again").await;
    assert_eq!(next.status, TurnStatus::Completed);
    // The killed turn left no half conversation behind: system + the new prompt.
    assert_eq!(next.final_message, "quick 2");
    rt.shutdown("test over").await;
}

/// Starts the slow tool's turn in a new session of `f`, interrupts it once the command runs, and returns the
/// session, the turn's outcome and the time from the interrupt to the outcome.
pub(super) async fn interrupt_slow_tool(
    rt: &service_supervisor::ServiceRuntime,
    f: &Fixture,
) -> (
    String,
    service_supervisor::runtime::TurnOutcome,
    std::time::Duration,
) {
    let id = f.session(rt).await;
    let pending = rt
        .start_turn(&id, Task::new("slow"), TurnOverrides::default())
        .await
        .unwrap();
    wait_for_file(&f.cwd.path().join("worker.pid")).await;
    let started = std::time::Instant::now();
    rt.interrupt(&id).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), pending.outcome)
        .await
        .unwrap()
        .unwrap();
    (id, outcome, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interrupt_kills_the_running_tool_and_ends_the_turn() {
    let f = fixture(SLOW_TOOL, "");
    let rt = runtime(f.home.path());
    let (id, outcome, took) = interrupt_slow_tool(&rt, &f).await;
    assert!(took < Duration::from_secs(5));
    assert_eq!(outcome.status, TurnStatus::Interrupted);
    assert_eq!(outcome.error.unwrap().0, "interrupted");
    // The interrupted turn's prompt, call and result stay in history: system + u, a(call), tool, u.
    assert_eq!(turn(&rt, &id, "next").await.0.final_message, "quick 5");
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_worker_is_killed_and_its_turn_fails() {
    let f = fixture(
        r#"{turns: [{when: "hang", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 20"}}]}]},
                    {replies: [{text: "fine"}]}]}"#,
        "",
    );
    let rt = super::support::runtime_with(f.home.path(), |o| {
        o.heartbeat = Duration::from_millis(100);
        o.hang_timeout = Duration::from_millis(800);
    });
    let id = f.session(&rt).await;
    let pending = rt
        .start_turn(&id, Task::new("hang now"), TurnOverrides::default())
        .await
        .unwrap();
    // The test stops the worker from the host: a command cannot reach it (its own pid namespace, the seccomp
    // filter, a non-dumpable worker), which the escape suite shows.
    // bwrap's own command line holds the worker's too: the worker's is the one that starts with it.
    let own = "/run/service/worker\0worker\0--ipc-fd\0";
    let label = format!("--label {id}");
    let worker = loop {
        let found = super::support::pids_with(&label).into_iter().find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline")).is_ok_and(|c| c.starts_with(own.as_bytes()))
        });
        if let Some(p) = found {
            break p;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker),
        nix::sys::signal::Signal::SIGSTOP,
    )
    .unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(10), pending.outcome)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.status, TurnStatus::Failed);
    let (code, message) = outcome.error.unwrap();
    assert_eq!(code, "worker_died");
    assert!(message.contains("no heartbeat"), "{message}");
    assert_eq!(turn(&rt, &id, "ok?").await.0.final_message, "fine");
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_command_produces_only_exec_events_and_no_turn() {
    let f = fixture(
        r#"{turns: [{replies: [{text: "seen {{message_count}}"}]}]}"#,
        "",
    );
    let rt = runtime(f.home.path());
    let id = f.session(&rt).await;
    let mut events = rt.subscribe_session(&id).await.unwrap();
    let outcome = rt
        .run_session_command(&id, "echo out; echo err >&2; exit 3")
        .await
        .unwrap();
    assert_eq!(outcome.exit_code, Some(3));
    let mut got = Vec::new();
    while got.last().map(|e: &service_ipc::EventMsg| e.payload.kind()) != Some("exec_command_end") {
        use futures::StreamExt;
        got.push(
            tokio::time::timeout(Duration::from_secs(10), events.next())
                .await
                .unwrap()
                .unwrap(),
        );
    }
    assert!(got.iter().all(|e| e.payload.turn_id().is_none()));
    let ks: Vec<&str> = got.iter().map(|e| e.payload.kind()).collect();
    assert_eq!(ks.first(), Some(&"exec_command_begin"));
    assert!(ks[1..ks.len() - 1]
        .iter()
        .all(|k| *k == "exec_command_output_delta"));
    let EventPayload::ExecCommandEnd { exit_code, .. } = &got.last().unwrap().payload else {
        panic!()
    };
    assert_eq!(*exit_code, Some(3));
    assert_eq!(rt.get_session(&id).await.unwrap().turn_count, 0);
    // Not stored as a turn: the next turn's model sees only system + prompt.
    assert_eq!(turn(&rt, &id, "x").await.0.final_message, "seen 2");
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_steps_ends_the_turn_with_an_error_that_says_so() {
    let f = fixture(
        r#"{turns: [{replies: [{tool_calls: [{name: "Bash", arguments: {command: "true"}}]}]}]}"#,
        "max_steps: 3",
    );
    let rt = runtime(f.home.path());
    let id = f.session(&rt).await;
    let (outcome, events) = turn(&rt, &id, "loop").await;
    assert_eq!(outcome.status, TurnStatus::Failed);
    let (code, message) = outcome.error.unwrap();
    assert_eq!(code, "max_steps_exceeded");
    assert!(message.contains("all 3 model calls"), "{message}");
    assert_eq!(
        kinds(&events)
            .iter()
            .filter(|k| **k == "tool_call_started")
            .count(),
        3
    );
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tool_calls_become_results_the_model_sees() {
    let f = fixture(
        r#"{turns: [{replies: [
            {tool_calls: [
              {name: "Read", arguments: {file_path: "missing.txt"}},
              {name: "Fly", arguments: {}},
              {name: "Bash", arguments: "{not json"},
              {name: "Edit", arguments: {file_path: "x"}},
            ]},
            {text: "recovered: {{last_tool_output}}"},
        ]}]}"#,
        "",
    );
    let rt = runtime(f.home.path());
    let id = f.session(&rt).await;
    let (outcome, events) = turn(&rt, &id, "break things").await;
    assert_eq!(outcome.status, TurnStatus::Completed);
    let results: Vec<(ToolCallStatus, String)> = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolCallFinished { status, output, .. } => {
                Some((*status, output.clone()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(results.len(), 4);
    assert!(results.iter().all(|r| r.0 == ToolCallStatus::Error));
    assert!(results[0].1.contains("cannot read") && results[0].1.contains("missing.txt"));
    assert!(results[1]
        .1
        .starts_with("tool \"Fly\" is not available; available tools: Read, Write"));
    assert!(results[2].1.contains("not valid JSON"));
    assert!(
        results[3]
            .1
            .contains("invalid arguments for Edit: missing field `old_string`"),
        "{}",
        results[3].1
    );
    assert!(outcome
        .final_message
        .starts_with("recovered: invalid arguments for Edit"));
    rt.shutdown("test over").await;
}
