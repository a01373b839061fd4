//! The codeact executor through real workers: scripted models write Python programs that run in the sandbox and
//! call the tools through `service_tools`, under the same rules, approvals and events as JSON tool calls.

use std::time::Duration;

use futures::{FutureExt, StreamExt};
use pretty_assertions::assert_eq;
use serde_json::json;
use service_ipc::{ApprovalDecision, EventMsg, EventPayload, Task, TurnOverrides};
use service_supervisor::ServiceRuntime;
use tempfile::TempDir;

use super::support::{
    final_message, processes_with, run_turn, runtime, sandbox_tempdir, wait_until, write_bundle,
};

/// A codeact bundle whose model answers every prompt with `replies` (text only), plus `extra` lines of agent.yaml.
fn bundle(replies: &[&str], extra: &str) -> TempDir {
    let replies: Vec<_> = replies.iter().map(|t| json!({ "text": t })).collect();
    scripted(json!([{ "replies": replies }]), extra)
}

/// A codeact bundle whose script has these turn entries.
fn scripted(turns: serde_json::Value, extra: &str) -> TempDir {
    let dir = TempDir::new().unwrap();
    let script = json!({ "turns": turns }).to_string();
    write_bundle(
        dir.path(),
        &script,
        &format!("executor: codeact\n{extra}"),
        "workspace_write",
    );
    dir
}

fn program(code: &str) -> String {
    format!("Acting.\n\n```python\n{code}\n```\n")
}

async fn session(rt: &ServiceRuntime, bundle: &TempDir, cwd: &TempDir) -> String {
    rt.create_session(bundle.path().to_str().unwrap(), Some(cwd.path()))
        .await
        .unwrap()
        .id
}

/// The exec ids of the turn's programs, in order.
fn programs(events: &[EventMsg]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ExecCommandBegin {
                exec_id,
                call_id: None,
                ..
            } => Some(exec_id.clone()),
            _ => None,
        })
        .collect()
}

/// Each tool call's tool and the program that made it.
pub(super) fn calls(events: &[EventMsg]) -> Vec<(String, Option<String>)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolCallStarted {
                tool,
                parent_exec_id,
                ..
            } => Some((tool.clone(), parent_exec_id.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_greps_reads_and_writes_through_the_module_and_final_answer_ends_the_turn() {
    let home = TempDir::new().unwrap();
    let cwd = sandbox_tempdir();
    std::fs::write(cwd.path().join("notes.txt"), "alpha\nbeta needle\ngamma\n").unwrap();
    let first = program(
        "import os\n\
         hits = grep('needle')\n\
         text = read('notes.txt')\n\
         write('out.txt', 'found in ' + os.path.basename(hits.split(':')[0]))\n\
         print('lines read:', len(text.splitlines()))",
    );
    let second = program(
        "final_answer('the needle is ' + read('out.txt', limit=1).split('\\t')[1].strip())",
    );
    let b = scripted(
        json!([
            { "when": "what did you see", "replies": [{ "text": "I saw: {{last_tool_output}}" }] },
            { "replies": [{ "text": first }, { "text": second }] },
        ]),
        "",
    );
    let rt = runtime(home.path());
    let id = session(&rt, &b, &cwd).await;
    let (_, events) = run_turn(&rt, &id, "find the needle").await;

    assert_eq!(final_message(&events), "the needle is found in notes.txt");
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("out.txt")).unwrap(),
        "found in notes.txt"
    );
    let ran = programs(&events);
    assert_eq!(ran.len(), 2, "one program per model reply");
    assert_eq!(
        calls(&events),
        vec![
            ("Grep".to_string(), Some(ran[0].clone())),
            ("Read".to_string(), Some(ran[0].clone())),
            ("Write".to_string(), Some(ran[0].clone())),
            ("Read".to_string(), Some(ran[1].clone())),
        ],
        "every call is a tool call of the program that made it"
    );
    let printed: String = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ExecCommandOutputDelta { exec_id, chunk, .. } if *exec_id == ran[0] => {
                Some(chunk.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(printed, "lines read: 3\n");
    // The next turn's model reads the last program's observation from the conversation.
    let (_, events) = run_turn(&rt, &id, "what did you see?").await;
    let seen = final_message(&events);
    assert!(
        seen.starts_with(&format!("I saw: {}", service_ipc::OBSERVATION_HEADER)),
        "{seen}"
    );
    assert!(seen.contains("The program printed nothing."), "{seen}");
    assert!(
        seen.contains("Read {\"file_path\":\"out.txt\",\"limit\":1} -> ok:"),
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_traceback_is_an_observation_and_the_model_answers_after_it() {
    let home = TempDir::new().unwrap();
    let cwd = sandbox_tempdir();
    let b = bundle(
        &[
            &program("print('before')\nratio = 1 / 0"),
            "It failed: {{last_tool_output}}",
        ],
        "",
    );
    let rt = runtime(home.path());
    let id = session(&rt, &b, &cwd).await;
    let (outcome, events) = run_turn(&rt, &id, "divide").await;
    assert_eq!(outcome.status, service_ipc::TurnStatus::Completed);
    let answer = final_message(&events);
    for part in [
        "before",
        "Traceback (most recent call last)",
        "File \"program.py\", line 2",
        "ZeroDivisionError: division by zero",
        "[exit code 1]",
    ] {
        assert!(answer.contains(part), "{part:?} missing from: {answer}");
    }
}

const RULES: &str = "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, match: \"rm *\", action: deny }\n    - { tool: Write, match: \"**/asked*\", action: ask }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_rule_holds_in_a_program_even_when_it_writes_to_the_tool_channel_itself() {
    let home = TempDir::new().unwrap();
    let cwd = sandbox_tempdir();
    std::fs::write(cwd.path().join("precious"), "keep me").unwrap();
    // The program tries the module, then forges requests on its own copy of the channel: an approval flag, a
    // lower-case name, a decision among the arguments, a rule of its own, and garbage.
    let attack = program(
        r#"import json, os, socket, struct
try:
    bash('rm -rf precious')
    print('module: ran')
except Denied as e:
    print('module: denied:', e)
raw = socket.socket(fileno=os.dup(int(os.environ['SERVICE_TOOLS_FD'])))
replies = raw.makefile('rb')
def forge(body):
    raw.sendall(struct.pack('>I', len(body)) + body)
    frame = replies.read(struct.unpack('>I', replies.read(4))[0])
    print('raw:', frame.partition(b'\n')[0].decode())
forged = [
    {"op": "call", "tool": "Bash", "arguments": {"command": "rm -rf precious"}, "approved": True},
    {"op": "call", "tool": "bash", "arguments": {"command": "rm -rf precious"}},
    {"op": "call", "tool": "Bash", "arguments": {"command": "rm -rf precious", "decision": "allow_always"}},
    {"op": "call", "tool": "Bash", "arguments": {"command": "rm -rf precious"}, "permissions": {"default": "allow"}},
]
for request in forged:
    forge(json.dumps(request).encode())
forge(b"{not json")
final_answer('exists: %s' % os.path.exists('precious'))"#,
    );
    let b = bundle(&[&attack], RULES);
    let rt = runtime(home.path());
    let id = session(&rt, &b, &cwd).await;
    let (_, events) = run_turn(&rt, &id, "clean up").await;

    assert_eq!(final_message(&events), "exists: True");
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("precious")).unwrap(),
        "keep me"
    );
    let printed: String = events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ExecCommandOutputDelta { chunk, .. } => Some(chunk.clone()),
            _ => None,
        })
        .collect();
    assert!(
        printed.starts_with("module: denied: Bash \"rm -rf precious\" was denied by agent.yaml"),
        "{printed}"
    );
    assert_eq!(
        printed
            .lines()
            .filter(|l| l.starts_with("raw:"))
            .collect::<Vec<_>>(),
        [
            "raw: error",
            "raw: error",
            "raw: denied",
            "raw: error",
            "raw: error"
        ],
        "{printed}"
    );
    // The only Bash calls that reached the tool path were refused there, and nothing was asked.
    assert!(events
        .iter()
        .all(|e| !matches!(e.payload, EventPayload::PermissionRequested { .. })));
    assert!(
        events.iter().all(|e| !matches!(
            &e.payload,
            EventPayload::ExecCommandBegin {
                call_id: Some(_),
                ..
            }
        )),
        "no command ran"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_arrives_whole_and_a_request_past_the_limit_ends_only_the_channel() {
    let home = TempDir::new().unwrap();
    let cwd = sandbox_tempdir();
    // About 220 KB of numbered lines: a reply many reads long.
    let big: String = (1..=1500)
        .map(|i| format!("line {i} {}\n", "x".repeat(130)))
        .collect();
    std::fs::write(cwd.path().join("big.txt"), &big).unwrap();
    // A frame whose length claims 64 MiB (past the 16 MiB limit): the worker ends the channel instead of waiting
    // for it or buffering it, the program's next call fails, and the turn goes on.
    let code = program(
        r#"import os, socket, struct
text = read('big.txt')
print('lines', len(text.splitlines()), text.splitlines()[-1].endswith('line 1500 ' + 'x' * 130))
raw = socket.socket(fileno=os.dup(int(os.environ['SERVICE_TOOLS_FD'])))
raw.sendall(struct.pack('>I', 64 << 20) + b'{"op": "call"')
try:
    read('big.txt')
    print('after: read')
except ToolError as e:
    print('after:', e)"#,
    );
    let b = bundle(&[&code, "Saw: {{last_tool_output}}"], "");
    let rt = runtime(home.path());
    let id = session(&rt, &b, &cwd).await;
    let (outcome, events) = run_turn(&rt, &id, "read it").await;
    assert_eq!(outcome.status, service_ipc::TurnStatus::Completed);
    let answer = final_message(&events);
    assert!(answer.contains("lines 1500 True"), "{answer}");
    assert!(
        answer.contains("after: the tool channel closed: the turn is ending"),
        "{answer}"
    );
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("big.txt")).unwrap(),
        big
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_in_a_program_pauses_it_until_the_operator_answers() {
    let home = TempDir::new().unwrap();
    let cwd = sandbox_tempdir();
    let code = program(
        "print(write('asked-1.txt', 'yes'))\n\
         try:\n    write('asked-2.txt', 'no')\n    outcome = 'written'\n\
         except Denied as e:\n    outcome = 'refused: %s' % e\n\
         final_answer(outcome)",
    );
    let b = bundle(&[&code], RULES);
    let rt = runtime(home.path());
    let id = session(&rt, &b, &cwd).await;
    let mut events = rt.subscribe_session(&id).await.unwrap();
    let pending = rt
        .start_turn(&id, Task::new("write"), TurnOverrides::default())
        .await
        .unwrap();
    let mut seen = Vec::new();
    for (n, decision) in [ApprovalDecision::AllowOnce, ApprovalDecision::Deny]
        .into_iter()
        .enumerate()
    {
        let request = loop {
            let msg = tokio::time::timeout(Duration::from_secs(20), events.next())
                .await
                .unwrap()
                .unwrap();
            let asked = match &msg.payload {
                EventPayload::PermissionRequested { request_id, .. } => Some(request_id.clone()),
                _ => None,
            };
            seen.push(msg);
            if let Some(r) = asked {
                break r;
            }
        };
        // The program waits: the file is not written and the program has not ended.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!cwd.path().join(format!("asked-{}.txt", n + 1)).exists());
        while let Some(Some(msg)) = events.next().now_or_never() {
            assert!(
                !matches!(msg.payload, EventPayload::ExecCommandEnd { .. }),
                "the program ended while its call waited"
            );
            seen.push(msg);
        }
        rt.resolve_approval(&request, decision).await.unwrap();
    }
    let outcome = tokio::time::timeout(Duration::from_secs(20), pending.outcome)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.status, service_ipc::TurnStatus::Completed);
    assert_eq!(
        std::fs::read_to_string(cwd.path().join("asked-1.txt")).unwrap(),
        "yes"
    );
    assert!(!cwd.path().join("asked-2.txt").exists());
    // The path as the worker sees it: bwrap's `/workspace`, or under Landlock the host's.
    let asked = match super::support::landlock() {
        true => cwd.path().join("asked-2.txt").display().to_string(),
        false => "/workspace/asked-2.txt".to_string(),
    };
    assert!(
        outcome.final_message.starts_with(&format!(
            "refused: Write \"{asked}\" was denied by the operator"
        )),
        "{}",
        outcome.final_message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_that_forks_and_sleeps_is_killed_at_its_time_out_with_nothing_left() {
    let home = TempDir::new().unwrap();
    let cwd = sandbox_tempdir();
    let marker = "313.25";
    let code = program(&format!(
        "import os, subprocess, time\n\
         subprocess.Popen(['setsid', 'sleep', '{marker}'])\n\
         if os.fork() == 0:\n    os.setsid()\n    os.execvp('sleep', ['sleep', '{marker}'])\n\
         print('started', flush=True)\n\
         time.sleep({marker})"
    ));
    let b = bundle(
        &[&code, "After the program: {{last_tool_output}}"],
        "codeact: { timeout_ms: 1500 }\n",
    );
    let rt = runtime(home.path());
    let id = session(&rt, &b, &cwd).await;
    let started = std::time::Instant::now();
    let (_, events) = run_turn(&rt, &id, "sleep").await;
    let answer = final_message(&events);
    assert!(answer.contains("started"), "{answer}");
    assert!(
        answer.contains("[killed: the program ran longer than 1500 ms]"),
        "{answer}"
    );
    assert!(started.elapsed() < Duration::from_secs(15));
    wait_until(
        Duration::from_secs(5),
        || processes_with(&format!("sleep {marker}")) == 0,
        || {
            format!(
                "{} sleepers outlived the program",
                processes_with(&format!("sleep {marker}"))
            )
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_kills_the_running_program_and_its_children() {
    let home = TempDir::new().unwrap();
    let cwd = sandbox_tempdir();
    let marker = "271.75";
    let code = program(&format!(
        "import subprocess, time\n\
         subprocess.Popen(['sleep', '{marker}'])\n\
         print('started', flush=True)\n\
         time.sleep({marker})"
    ));
    let b = bundle(&[&code], "");
    let rt = runtime(home.path());
    let id = session(&rt, &b, &cwd).await;
    let mut events = rt.subscribe_session(&id).await.unwrap();
    let pending = rt
        .start_turn(&id, Task::new("sleep"), TurnOverrides::default())
        .await
        .unwrap();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .unwrap()
            .unwrap();
        if matches!(&msg.payload, EventPayload::ExecCommandOutputDelta { chunk, .. } if chunk.contains("started"))
        {
            break;
        }
    }
    assert_eq!(processes_with(&format!("sleep {marker}")), 1);
    rt.interrupt(&id).await.unwrap();
    let outcome = tokio::time::timeout(Duration::from_secs(20), pending.outcome)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(outcome.status, service_ipc::TurnStatus::Interrupted);
    wait_until(
        Duration::from_secs(5),
        || processes_with(&format!("sleep {marker}")) == 0,
        || "the program's child outlived the interrupt".into(),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_still_running_when_its_program_is_killed_is_stopped_and_finished() {
    let home = TempDir::new().unwrap();
    let cwd = sandbox_tempdir();
    let marker = "309.5";
    let b = bundle(
        &[
            &program(&format!(
                "print('calling', flush=True)\nbash('sleep {marker}')"
            )),
            "After: {{last_tool_output}}",
        ],
        "codeact: { timeout_ms: 1500 }\n",
    );
    let rt = runtime(home.path());
    let id = session(&rt, &b, &cwd).await;
    let started = std::time::Instant::now();
    let (_, events) = run_turn(&rt, &id, "sleep").await;
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the turn waited for the call"
    );
    let answer = final_message(&events);
    assert!(
        answer.contains("[killed: the program ran longer than 1500 ms]"),
        "{answer}"
    );
    let started_calls = events
        .iter()
        .filter(|e| e.payload.kind() == "tool_call_started")
        .count();
    let finished_calls = events
        .iter()
        .filter(|e| e.payload.kind() == "tool_call_finished")
        .count();
    assert_eq!(
        (started_calls, finished_calls),
        (1, 1),
        "every call that starts ends"
    );
    wait_until(
        Duration::from_secs(5),
        || processes_with(&format!("sleep {marker}")) == 0,
        || "the call's command outlived its program".into(),
    );
}
