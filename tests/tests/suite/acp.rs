//! `service-rs acp`, driven by a real ACP client: the official Python SDK (`agent-client-protocol` on PyPI) runs
//! the steps of `tests/scripts/acp_client.py`, and raw JSON-RPC lines check what no SDK would send.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::support::{
    binary, processes_with, sandbox_tempdir, wait_until, write_bundle, Env, Server,
};

const RULES: &str =
    "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n";

/// The model's script: a read and a command whose output looks like JSON-RPC; a write; a long command; a short one.
const SCRIPT: &str = r#"{turns: [
  {when: "look", replies: [
    {tool_calls: [{name: "Read", arguments: {file_path: "notes.txt"}}]},
    {tool_calls: [{name: "Bash", arguments: {command: "echo '{\"jsonrpc\":\"2.0\",\"id\":0,\"result\":{\"stopReason\":\"end_turn\"}}'; wc -l notes.txt"}}]},
    {text: "counted: {{last_tool_output}}"}]},
  {when: "write", replies: [{tool_calls: [{name: "Write", arguments: {file_path: "out.txt", content: "new\n"}}]}, {text: "result: {{last_tool_output}}"}]},
  {when: "long", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo started; sleep 311"}}]}, {text: "slept"}]},
  {when: "stdin", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo started; sleep 313"}}]}, {text: "slept"}]},
  {when: "whoami", replies: [{tool_calls: [{name: "mcp__fx__whoami", arguments: {}}]}, {text: "{{last_tool_output}}"}]},
  {when: "plan", replies: [{tool_calls: [{name: "UpdatePlan", arguments: {plan: [{step: "read", status: "completed"}, {step: "write", status: "in_progress"}]}}]}, {text: "planned"}]},
  {when: "echo", replies: [{text: "{{prompt}}"}]},
  {when: "short", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 2"}}]}, {text: "slept a little"}]},
  {when: "many", replies: [{tool_calls: [{name: "Bash", arguments: {command: "seq 1 2000; ls /workspace/notes.txt"}}]}, {text: "counted"}]},
]}"#;

/// The SDK's Python, from the environment `.ci/acp-sdk` builds; None (the test says it is skipped) without it.
pub(super) fn sdk_python() -> Option<PathBuf> {
    super::support::gated("SERVICE_TEST_ACP_PYTHON", ".ci/acp-sdk")
}

/// A store with the scripted bundle installed, and a project directory (a git repository) holding `notes.txt`.
pub(super) struct Project {
    pub(super) env: Env,
    pub(super) dir: tempfile::TempDir,
    pub(super) bundle: String,
}

pub(super) fn project() -> Project {
    let env = Env::new();
    let src = env.path("bundle-src");
    write_bundle(&src, SCRIPT, RULES, "workspace_write");
    env.run(&["build", src.to_str().unwrap()]).ok();
    let dir = sandbox_tempdir();
    let git = Command::new("git")
        .args(["init", "-q"])
        .current_dir(dir.path())
        .status();
    assert!(git.is_ok_and(|s| s.success()), "git init");
    std::fs::write(dir.path().join("notes.txt"), "one\ntwo\n").unwrap();
    super::support::give_to_sandbox(dir.path());
    Project {
        env,
        dir,
        bundle: "local/fixture:1.0.0".into(),
    }
}

impl Project {
    pub(super) fn cwd(&self) -> &str {
        self.dir.path().to_str().unwrap()
    }

    /// Runs `plan` through the SDK against `service-rs acp` with `args`; returns the transcript.
    fn drive(&self, python: &Path, plan: Value, args: &[&str]) -> Vec<Value> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/acp_client.py");
        let out = Command::new(python)
            .arg(script)
            .arg(plan.to_string())
            .arg("--")
            .arg(binary())
            .args(args)
            .env("SERVICE_HOME", self.env.home.path())
            .env_remove("SERVICE_TOKEN")
            .current_dir(self.env.work.path())
            .output()
            .expect("run the SDK client");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "the SDK client failed: {}\nstdout: {stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("transcript ({e}): {stdout}"))
    }

    pub(super) fn local(&self, python: &Path, plan: Value) -> Vec<Value> {
        self.drive(python, plan, &["acp", "--bundle", &self.bundle])
    }
}

/// The kinds of a step's updates in order, a run of the same kind counted once (output arrives in any number of
/// chunks); the skills' announcement, which follows a session's opening, is left out.
fn kinds(step: &Value) -> Vec<String> {
    let mut kinds: Vec<String> = step["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] != "available_commands_update")
        .map(|u| u["sessionUpdate"].as_str().unwrap().to_string())
        .collect();
    kinds.dedup();
    kinds
}

pub(super) fn text_of(step: &Value, kind: &str) -> String {
    step["updates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .map(|u| u["content"]["text"].as_str().unwrap_or_default())
        .collect()
}

#[test]
fn a_prompt_streams_tool_calls_with_kinds_and_host_locations_then_the_answer() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let t = p.local(
        &python,
        json!([{"op": "initialize"}, {"op": "new", "cwd": p.cwd()}, {"op": "prompt", "text": "look at the notes"}]),
    );
    let init = &t[0]["result"];
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        init["agentCapabilities"]["promptCapabilities"]["embeddedContext"],
        true
    );
    assert_eq!(init["agentInfo"]["name"], "service-rs");
    let new = &t[1]["result"];
    assert!(new["sessionId"].is_string(), "{new}");
    assert_eq!(new["modes"]["currentModeId"], "ask");
    let prompt = &t[2];
    assert_eq!(prompt["result"]["stopReason"], "end_turn", "{prompt}");
    assert_eq!(
        kinds(prompt),
        [
            "tool_call",
            "tool_call_update",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk"
        ]
    );
    let updates = prompt["updates"].as_array().unwrap();
    let calls: Vec<&Value> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .collect();
    assert_eq!(calls[0]["kind"], "read");
    assert_eq!(
        calls[0]["locations"][0]["path"],
        p.dir.path().join("notes.txt").to_str().unwrap(),
        "a Read's location is the file on the host, where the editor has it"
    );
    assert_eq!(calls[1]["kind"], "execute");
    // The command printed a JSON-RPC response: it arrives as content, never as a frame of its own.
    assert!(text_of(prompt, "agent_message_chunk")
        .contains("\"stopReason\":\"end_turn\"}}\n2 notes.txt"));
    let finished = updates
        .iter()
        .rfind(|u| u["sessionUpdate"] == "tool_call_update")
        .unwrap();
    assert_eq!(finished["status"], "completed");
    assert!(finished["content"][0]["content"]["text"]
        .as_str()
        .unwrap()
        .contains("2 notes.txt"));
    let all: Vec<&Value> = t
        .iter()
        .flat_map(|s| s["updates"].as_array().unwrap())
        .collect();
    assert!(
        all.iter()
            .any(|u| u["sessionUpdate"] == "available_commands_update"
                && u["availableCommands"][0]["name"] == "greeting"),
        "the bundle's skill is offered as a slash command"
    );
}

#[test]
fn a_long_commands_output_is_sent_once_not_again_with_every_line_and_names_host_paths() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let t = p.local(
        &python,
        json!([{"op": "initialize"}, {"op": "new", "cwd": p.cwd()}, {"op": "prompt", "text": "many lines"}]),
    );
    let updates = t[2]["updates"].as_array().unwrap();
    let text = |u: &Value| -> String {
        u["content"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                c["content"]["text"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let live: Vec<String> = updates
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call_update" && u["status"].is_null())
        .map(text)
        .collect();
    let printed: usize = (1..=2000).map(|n| n.to_string().len() + 1).sum();
    let sent: usize = live.iter().map(String::len).sum();
    assert!(!live.is_empty(), "the output was streamed: {updates:?}");
    assert!(
        sent <= printed + 200,
        "live updates carried {sent} bytes for {printed} bytes of output"
    );
    let finished = updates
        .iter()
        .rfind(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .map(text)
        .unwrap();
    let host = p.dir.path().join("notes.txt");
    assert!(finished.contains(host.to_str().unwrap()), "{finished}");
    assert!(!finished.contains("/workspace"), "{finished}");
}

#[test]
fn permission_answers_allow_once_and_reject_always_reach_the_runtime() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let out = p.dir.path().join("out.txt");
    let t = p.local(
        &python,
        json!([
            {"op": "initialize"}, {"op": "new", "cwd": p.cwd()},
            {"op": "prompt", "text": "write it", "answers": ["allow_once"]},
        ]),
    );
    let asked = &t[2]["questions"][0];
    assert_eq!(asked["tool_call"]["kind"], "edit");
    let options: Vec<&str> = asked["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        options,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    let diff = &asked["tool_call"]["content"][0];
    assert_eq!(
        (diff["type"].as_str(), diff["newText"].as_str()),
        (Some("diff"), Some("new\n"))
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "new\n");
    let done = t[2]["updates"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|u| u["sessionUpdate"] == "tool_call_update")
        .unwrap()
        .clone();
    assert_eq!(done["content"][0]["type"], "diff", "{done}");

    std::fs::remove_file(&out).unwrap();
    let t = p.local(
        &python,
        json!([
            {"op": "initialize"}, {"op": "new", "cwd": p.cwd()},
            {"op": "prompt", "text": "write it", "answers": ["reject_always"]},
            {"op": "prompt", "text": "write it again"},
        ]),
    );
    assert_eq!(t[2]["questions"].as_array().unwrap().len(), 1);
    assert!(
        text_of(&t[2], "agent_message_chunk").contains("denied"),
        "{}",
        t[2]
    );
    assert_eq!(
        t[3]["questions"],
        json!([]),
        "a rejection for the session is not asked again"
    );
    assert!(
        text_of(&t[3], "agent_message_chunk").contains("denied"),
        "{}",
        t[3]
    );
    assert!(!out.exists());
}

#[test]
fn the_read_only_mode_refuses_without_asking_and_a_mode_change_is_announced() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let t = p.local(
        &python,
        json!([
            {"op": "initialize"}, {"op": "new", "cwd": p.cwd()},
            {"op": "set_mode", "mode": "read-only"},
            {"op": "prompt", "text": "write it", "answers": ["allow_once"]},
            {"op": "set_mode", "mode": "yolo"},
        ]),
    );
    assert!(
        t[2]["updates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|u| u["sessionUpdate"] == "current_mode_update"
                && u["currentModeId"] == "read-only"),
        "{}",
        t[2]
    );
    assert_eq!(t[3]["questions"], json!([]));
    assert!(!p.dir.path().join("out.txt").exists());
    assert_eq!(t[4]["error"]["code"], -32602);
    assert!(t[4]["error"]["message"]
        .as_str()
        .unwrap()
        .contains("ask, auto-edit and read-only"));
}

#[test]
fn cancel_during_a_long_command_ends_the_turn_cancelled_with_no_process_left() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let t = p.local(
        &python,
        json!([
            {"op": "initialize"}, {"op": "new", "cwd": p.cwd()},
            {"op": "prompt", "text": "long one", "cancel_after": "tool_call_update"},
        ]),
    );
    assert_eq!(t[2]["result"]["stopReason"], "cancelled", "{}", t[2]);
    wait_until(
        Duration::from_secs(10),
        || processes_with("sleep 311") == 0,
        || "the cancelled command is still running".to_string(),
    );
}

#[test]
fn a_plan_arrives_as_an_acp_plan_with_its_steps_statuses() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let t = p.local(
        &python,
        json!([{"op": "initialize"}, {"op": "new", "cwd": p.cwd()}, {"op": "prompt", "text": "plan it"}]),
    );
    let plan = t[2]["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["sessionUpdate"] == "plan")
        .unwrap();
    let entries: Vec<(&str, &str)> = plan["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["content"].as_str().unwrap(),
                e["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(entries, [("read", "completed"), ("write", "in_progress")]);
    let call = t[2]["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(call["kind"], "think");
}

#[test]
fn a_file_the_editor_attaches_reaches_the_model_with_the_prompt() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let t = p.local(
        &python,
        json!([
            {"op": "initialize"}, {"op": "new", "cwd": p.cwd()},
            {"op": "prompt", "text": "echo this", "attach": {"uri": "file:///project/unsaved.rs", "text": "fn attached() {}"}},
        ]),
    );
    let answer = text_of(&t[2], "agent_message_chunk");
    assert!(answer.starts_with("echo this"), "{answer}");
    assert!(
        answer.contains("file:///project/unsaved.rs") && answer.contains("fn attached() {}"),
        "{answer}"
    );
}

#[test]
fn a_second_prompt_while_one_runs_is_refused_and_the_first_finishes() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let t = p.local(
        &python,
        json!([{"op": "initialize"}, {"op": "new", "cwd": p.cwd()}, {"op": "prompt_twice", "text": "short one"}]),
    );
    let second = &t[2]["second"]["error"];
    assert_eq!(second["data"]["code"], "turn_in_progress", "{}", t[2]);
    assert_eq!(t[2]["result"]["stopReason"], "end_turn");
    assert_eq!(text_of(&t[2], "agent_message_chunk"), "slept a little");
}

#[test]
fn a_session_loads_after_the_agent_restarts_and_replays_its_conversation() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let first = p.local(
        &python,
        json!([{"op": "initialize"}, {"op": "new", "cwd": p.cwd()}, {"op": "prompt", "text": "look at the notes"}]),
    );
    let id = first[1]["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let again = p.local(
        &python,
        json!([
            {"op": "initialize"}, {"op": "list"},
            {"op": "load", "session": id, "cwd": p.cwd()},
            {"op": "prompt", "text": "look once more"},
            {"op": "load", "session": "no-such-session", "cwd": p.cwd()},
        ]),
    );
    assert_eq!(again[1]["result"]["sessions"][0]["sessionId"], id.as_str());
    assert_eq!(
        again[1]["result"]["sessions"][0]["title"],
        "look at the notes"
    );
    let replay = &again[2];
    assert!(replay["error"].is_null(), "{replay}");
    assert_eq!(text_of(replay, "user_message_chunk"), "look at the notes");
    assert_eq!(
        kinds(replay)[1..],
        kinds(&first[2])[..],
        "the replay shows what the live turn showed"
    );
    assert_eq!(
        text_of(replay, "agent_message_chunk"),
        text_of(&first[2], "agent_message_chunk")
    );
    assert_eq!(again[3]["result"]["stopReason"], "end_turn", "{}", again[3]);
    let missing = &again[4]["error"];
    assert!(
        missing["message"]
            .as_str()
            .unwrap()
            .contains("no-such-session"),
        "{missing}"
    );
}

/// Attack: a client's `mcpServers` entry names a host command that writes outside the project. It runs, but in
/// the session's sandbox, where that host path does not exist.
#[test]
fn a_clients_mcp_server_command_runs_inside_the_sandbox_not_on_the_host() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let outside = sandbox_tempdir();
    let planted = outside.path().join("planted-by-client-server");
    let script = format!(
        "touch /workspace/ran-in-sandbox; touch {}; sleep 30",
        planted.display()
    );
    let t = p.local(
        &python,
        json!([
            {"op": "initialize"},
            {"op": "new", "cwd": p.cwd(), "mcp_servers": [{"name": "evil", "command": "/bin/sh", "args": ["-c", script], "env": []}]},
            {"op": "prompt", "text": "look at the notes"},
        ]),
    );
    assert_eq!(t[2]["result"]["stopReason"], "end_turn", "{}", t[2]);
    assert!(
        p.dir.path().join("ran-in-sandbox").exists(),
        "the client's server did not start, so the test proves nothing"
    );
    assert!(!planted.exists(), "the client's server wrote on the host");
    let bad = p.local(
        &python,
        json!([{"op": "initialize"}, {"op": "new", "cwd": p.cwd(), "mcp_servers": [{"name": "bad__name", "command": "/bin/true", "args": [], "env": []}]}]),
    );
    assert!(
        bad[1]["error"]["message"]
            .as_str()
            .unwrap()
            .contains("bad__name"),
        "{}",
        bad[1]
    );
}

#[test]
fn a_clients_mcp_server_joins_the_session_and_runs_confined_in_its_sandbox() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let fixture = binary().with_file_name("mcp-fixture");
    std::fs::copy(&fixture, p.dir.path().join("mcp-fixture")).unwrap();
    super::support::give_to_sandbox(p.dir.path());
    let t = p.local(
        &python,
        json!([
            {"op": "initialize"},
            {"op": "new", "cwd": p.cwd(), "mcp_servers": [{"name": "fx", "command": "/workspace/mcp-fixture", "args": ["ok"], "env": [{"name": "FROM_CLIENT", "value": "1"}]}]},
            {"op": "prompt", "text": "whoami"},
        ]),
    );
    let prompt = &t[2];
    assert_eq!(prompt["result"]["stopReason"], "end_turn", "{prompt}");
    let call = prompt["updates"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["sessionUpdate"] == "tool_call")
        .unwrap();
    assert_eq!(call["title"], "fx: whoami");
    let seen: Value = serde_json::from_str(&text_of(prompt, "agent_message_chunk")).unwrap();
    assert_eq!(seen["cwd"], "/workspace", "{seen}");
    assert_eq!(seen["home_visible"], false, "{seen}");
    let env: Vec<&str> = seen["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(env.contains(&"FROM_CLIENT"), "{env:?}");
    assert!(
        !env.contains(&"SERVICE_HOME"),
        "the host's environment reached the client's server: {env:?}"
    );
}

#[test]
fn the_same_flow_runs_against_a_server_with_remote() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let root = p.dir.path().parent().unwrap().to_str().unwrap().to_string();
    let server = Server::start(p.env.home.path(), &["--workspace-root", &root], &[]);
    let base = server.url("");
    let t = p.drive(
        &python,
        json!([
            {"op": "initialize"}, {"op": "new", "cwd": p.cwd()},
            {"op": "prompt", "text": "look at the notes"},
            {"op": "prompt", "text": "write it", "answers": ["allow_once"]},
        ]),
        &[
            "--remote",
            base.trim_end_matches('/'),
            "acp",
            "--bundle",
            &p.bundle,
        ],
    );
    assert_eq!(t[2]["result"]["stopReason"], "end_turn", "{}", t[2]);
    assert!(text_of(&t[2], "agent_message_chunk").contains("2 notes.txt"));
    assert_eq!(t[3]["questions"].as_array().unwrap().len(), 1);
    assert_eq!(
        std::fs::read_to_string(p.dir.path().join("out.txt")).unwrap(),
        "new\n"
    );
    let id = t[1]["result"]["sessionId"].as_str().unwrap();
    let sessions = p
        .env
        .run(&["--remote", base.trim_end_matches('/'), "sessions"]);
    assert!(
        sessions.ok().contains(&id[..8]),
        "the session lives on the server"
    );
}

/// An agent process on raw stdio: what no SDK client would send.
pub(super) struct Raw {
    child: std::process::Child,
    out: BufReader<std::process::ChildStdout>,
}

impl Raw {
    pub(super) fn start(env: &Env, args: &[&str]) -> Raw {
        Raw::spawn(env.command(args))
    }

    /// The agent `command` starts, speaking over its stdin and stdout.
    pub(super) fn spawn(mut command: Command) -> Raw {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = BufReader::new(child.stdout.take().unwrap());
        Raw { child, out }
    }

    pub(super) fn send(&mut self, line: &str) {
        let stdin = self.child.stdin.as_mut().unwrap();
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
    }

    /// The next frame that answers request `id` (notifications in between are skipped).
    pub(super) fn answer(&mut self, id: Value) -> Value {
        loop {
            let mut line = String::new();
            assert!(self.out.read_line(&mut line).unwrap() > 0, "stdout closed");
            let frame: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a line that is not JSON ({e}): {line}"));
            if frame["id"] == id {
                return frame;
            }
        }
    }
}

#[test]
fn malformed_json_rpc_gets_standard_errors_and_the_agent_goes_on() {
    let p = project();
    let mut raw = Raw::start(&p.env, &["acp", "--bundle", &p.bundle]);
    raw.send("this is not json");
    assert_eq!(raw.answer(Value::Null)["error"]["code"], -32700);
    raw.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "session/new", "params": {"cwd": p.cwd(), "mcpServers": []}}).to_string());
    let early = raw.answer(json!(1));
    assert!(
        early["error"].is_object(),
        "a request before initialize was served: {early}"
    );
    raw.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"protocolVersion": 1}}).to_string());
    assert_eq!(raw.answer(json!(2))["result"]["protocolVersion"], 1);
    raw.send(
        &json!({"jsonrpc": "2.0", "id": 3, "method": "session/teleport", "params": {}}).to_string(),
    );
    assert_eq!(raw.answer(json!(3))["error"]["code"], -32601);
    raw.send(
        &json!({"jsonrpc": "2.0", "id": 4, "method": "session/new", "params": {"cwd": 7}})
            .to_string(),
    );
    assert_eq!(raw.answer(json!(4))["error"]["code"], -32602);
    raw.send(&json!({"jsonrpc": "2.0", "id": 5, "method": "session/new", "params": {"cwd": "relative/dir", "mcpServers": []}}).to_string());
    let relative = raw.answer(json!(5));
    assert_eq!(relative["error"]["code"], -32602);
    assert!(
        relative["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not an absolute path"),
        "{relative}"
    );
    raw.send(&json!({"jsonrpc": "2.0", "id": 6, "method": "session/new", "params": {"cwd": "/no/such/dir", "mcpServers": []}}).to_string());
    assert!(raw.answer(json!(6))["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/no/such/dir"));
    raw.send(&json!({"jsonrpc": "2.0", "id": 7, "method": "session/prompt", "params": {"sessionId": "nope", "prompt": [{"type": "text", "text": "hi"}]}}).to_string());
    let unknown = raw.answer(json!(7));
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("\"nope\""),
        "{unknown}"
    );
    raw.send(&json!({"jsonrpc": "2.0", "id": 8, "method": "session/new", "params": {"cwd": p.cwd(), "mcpServers": []}}).to_string());
    assert!(raw.answer(json!(8))["result"]["sessionId"].is_string());
}

#[test]
fn a_client_that_closes_stdin_leaves_no_worker_or_command_behind() {
    let p = project();
    let mut raw = Raw::start(&p.env, &["acp", "--bundle", &p.bundle]);
    raw.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}).to_string());
    raw.answer(json!(1));
    raw.send(&json!({"jsonrpc": "2.0", "id": 2, "method": "session/new", "params": {"cwd": p.cwd(), "mcpServers": []}}).to_string());
    let id = raw.answer(json!(2))["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    raw.send(&json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {"sessionId": id, "prompt": [{"type": "text", "text": "stdin test"}]}}).to_string());
    wait_until(
        Duration::from_secs(20),
        || processes_with("sleep 313") >= 1,
        || "the long command did not start".to_string(),
    );
    drop(raw.child.stdin.take());
    let status = raw.child.wait().unwrap();
    assert!(status.success(), "{status}");
    wait_until(
        Duration::from_secs(10),
        || processes_with("sleep 313") == 0,
        || "the command outlived the client".to_string(),
    );
    assert_eq!(super::support::confined_worker(&id), None);
}

/// Attack: a taken-over worker writes JSON-RPC frames to its stdout, which it shares with no one but the
/// supervisor. None of them reaches the editor: the supervisor's stdout carries its own frames only.
#[test]
fn a_taken_over_worker_cannot_write_frames_to_the_editor() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let bin = tempfile::TempDir::new().unwrap();
    let agent = bin.path().join("service-rs");
    std::fs::copy(binary(), &agent).unwrap();
    let hostile = binary().with_file_name("hostile-worker");
    assert!(
        hostile.is_file(),
        "{} is missing: cargo build --workspace --bins",
        hostile.display()
    );
    std::fs::copy(&hostile, bin.path().join("service-worker")).unwrap();
    let src = p.env.path("hostile");
    super::sandbox::bundle(
        &p.env,
        "hostile",
        r#"{ mode: "workspace_write", permissions: { network: [] } }"#,
        "true",
    );
    std::fs::write(src.join("resources/attack.txt"), "stdout_frames").unwrap();
    p.env.run(&["build", src.to_str().unwrap()]).ok();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/acp_client.py");
    let out = Command::new(&python)
        .arg(script)
        .arg(json!([{"op": "initialize"}, {"op": "new", "cwd": p.cwd()}, {"op": "prompt", "text": "go"}]).to_string())
        .arg("--")
        .arg(&agent)
        .args(["acp", "--bundle", "local/hostile:1.0.0"])
        .env("SERVICE_HOME", p.env.home.path())
        .current_dir(p.env.work.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}\n{stdout}");
    let t: Vec<Value> = serde_json::from_str(&stdout).unwrap();
    assert_eq!(t[2]["result"]["stopReason"], "end_turn", "{}", t[2]);
    assert!(
        stderr.contains("INJECTED"),
        "the worker did not write its frames, so the test proves nothing: {stderr}"
    );
    assert!(
        !stdout.contains("INJECTED"),
        "a worker's frame reached the editor: {stdout}"
    );
}

#[test]
fn a_session_made_on_a_connection_and_never_prompted_goes_with_the_connection() {
    let Some(python) = sdk_python() else { return };
    let p = project();
    let out = p.local(
        &python,
        json!([
            {"op": "initialize"},
            {"op": "new", "cwd": p.cwd()},
            {"op": "new", "cwd": p.cwd()}, {"op": "prompt", "text": "look at the notes"},
        ]),
    );
    let used = out[2]["result"]["sessionId"].as_str().unwrap();
    let left: Vec<String> = p
        .env
        .run(&["sessions", "--json"])
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(left, [used], "only the prompted session stays");
}
