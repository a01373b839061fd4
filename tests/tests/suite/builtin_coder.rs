//! The built-in coding agent, `builtin/coder`, from a fresh store: it resolves without a build, picks its model from
//! what the machine has (a key, or a local OpenAI-compatible server listing its models), reads without asking,
//! asks before it edits, and says how to set a model when there is none, before any session is made. Typos of a
//! bundle's name are refused before any session too. The model server is a real HTTP server on loopback.

use serde_json::{json, Value};

use super::provider_server::{ProviderServer, Reply};
use super::providers::with_openai_key;
use super::providers::{oa, of_type, openai_text};
use super::support::{give_to_sandbox, Env};

/// An OpenAI reply that calls `tool` with `arguments`.
fn tool_call(id: &str, tool: &str, arguments: Value) -> Reply {
    Reply::openai(&[
        oa(
            json!({"role": "assistant", "tool_calls": [{"index": 0, "id": id, "type": "function",
                "function": {"name": tool, "arguments": arguments.to_string()}}]}),
            Value::Null,
        ),
        oa(json!({}), json!("tool_calls")),
    ])
}

/// A repository with a failing test: `calc.sh` adds wrong, `test.sh` says so.
fn repository(env: &Env) {
    std::fs::write(env.path("AGENTS.md"), "Run ./test.sh to test.\n").unwrap();
    std::fs::write(env.path("calc.sh"), "echo $(( $1 - $2 ))\n").unwrap();
    std::fs::write(
        env.path("test.sh"),
        "[ \"$(sh calc.sh 2 3)\" = 5 ] && echo pass || echo FAIL\n",
    )
    .unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(env.work.path())
        .status()
        .unwrap();
    assert!(git.success());
    give_to_sandbox(env.work.path());
}

fn events(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn with_only_an_openai_key_the_builtin_agent_reads_freely_and_asks_only_before_its_edit_and_its_test_run(
) {
    let env = Env::new();
    repository(&env);
    let server = ProviderServer::start(vec![
        tool_call("c1", "Read", json!({"file_path": "calc.sh"})),
        tool_call("c2", "Bash", json!({"command": "git status --short"})),
        tool_call(
            "c3",
            "Edit",
            json!({"file_path": "calc.sh", "old_string": "$1 - $2", "new_string": "$1 + $2"}),
        ),
        tool_call("c4", "Bash", json!({"command": "sh test.sh"})),
        openai_text("Fixed calc.sh: it subtracted. ./test.sh passes."),
    ]);
    // `service-rs "PROMPT"` with no bundle and no default: the built-in agent, in the current directory.
    let out = with_openai_key(
        &env,
        &server.base,
        &["fix the failing test", "--json", "--approve"],
    )
    .output()
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let evs = events(&out);
    assert_eq!(
        std::fs::read_to_string(env.path("calc.sh")).unwrap(),
        "echo $(( $1 + $2 ))\n"
    );
    // Asked: the edit and the test run; not the Read nor the read-only git command.
    let asked: Vec<String> = of_type(&evs, "permission_requested")
        .iter()
        .map(|p| p["tool"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(asked, ["Edit", "Bash"], "{evs:#?}");
    let finished = of_type(&evs, "tool_call_finished");
    let outputs: Vec<&str> = finished
        .iter()
        .map(|p| p["output"].as_str().unwrap_or_default())
        .collect();
    assert!(
        finished.iter().all(|p| p["status"] != "error"),
        "{outputs:?}"
    );
    assert_eq!(outputs.last(), Some(&"pass\n"), "{outputs:?}");
    let requests = server.recorded();
    assert_eq!(requests.len(), 5);
    assert_eq!(requests[0].body["model"], "gpt-4.1");
    assert_eq!(requests[0].header("authorization"), Some("Bearer sk-test"));
    let system = requests[0].body["messages"][0]["content"].to_string();
    assert!(system.contains("coding agent"), "{system}");
    assert!(system.contains("Run ./test.sh"), "AGENTS.md: {system}");
}

#[test]
fn with_no_key_the_builtin_agent_uses_the_first_model_a_local_server_lists_and_sends_it_no_key() {
    let env = Env::new();
    let server = ProviderServer::start(vec![
        Reply::status(
            200,
            r#"{"object": "list", "data": [{"id": "qwen-local", "object": "model"}]}"#,
            None,
        ),
        openai_text("Hello from the local model."),
    ]);
    let base = format!("{}/v1", server.base);
    let out = env
        .command(&["run", "--prompt", "hi", "--json"])
        .env("SERVICE_LOCAL_MODELS", &base)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.recorded();
    assert_eq!(requests[0].path, "/v1/models");
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].body["model"], "qwen-local");
    assert_eq!(requests[1].header("authorization"), None);
    let evs = events(&out);
    let done = of_type(&evs, "turn_completed");
    assert_eq!(done[0]["final_message"], "Hello from the local model.");
}

#[test]
fn with_no_model_anywhere_the_builtin_agent_says_how_to_set_one_and_makes_no_session() {
    let env = Env::new();
    let out = env
        .command(&["fix the failing test"])
        // A port nothing listens on: no local server.
        .env("SERVICE_LOCAL_MODELS", "http://127.0.0.1:9/v1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    for hint in [
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "11434",
        "default_model",
    ] {
        assert!(err.contains(hint), "{hint}: {err}");
    }
    assert!(
        !err.contains("scripted"),
        "no silent fallback to the scripted model: {err}"
    );
    assert_eq!(env.run(&["sessions", "--json"]).json(), json!([]));
}

#[test]
fn the_builtin_agent_is_listed_inspected_and_written_out_as_a_project_to_change() {
    let env = Env::new();
    let listed = env.run(&["bundles"]).ok().to_string();
    assert!(
        listed.contains("builtin") && listed.contains("coder"),
        "{listed}"
    );
    let info = env.run(&["inspect", "builtin/coder", "--json"]).json();
    assert_eq!(info["sandbox"]["mode"], "workspace_write");
    assert_eq!(info["model"]["provider"], "auto");
    let project = env.path("my-coder");
    env.run(&["init", "--template", "coder", project.to_str().unwrap()])
        .ok();
    env.run(&["build", project.to_str().unwrap()]).ok();
    let mine = env.run(&["inspect", "coder", "--json"]).json();
    assert_eq!(mine["reference"], "local/coder:1.0.0");
    assert_eq!(mine["tools"], info["tools"]);
    let unknown = env.run(&["init", "--template", "nope", "x"]);
    assert!(unknown.failed().contains("coder"), "{}", unknown.failed());
}

#[test]
fn a_word_close_to_a_bundles_name_is_refused_as_a_typo_before_any_session() {
    let env = Env::new();
    let hello = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    env.run(&["build", hello.to_str().unwrap()]).ok();
    let run = env.run(&["run", "helo"]);
    assert!(
        run.failed().contains("did you mean hello?"),
        "{}",
        run.failed()
    );
    let top = env.run(&["helo"]);
    assert!(
        top.failed().contains("did you mean the bundle hello"),
        "{}",
        top.failed()
    );
    let bundle = env.run(&["hello"]);
    assert!(
        bundle.failed().contains("service-rs run hello"),
        "{}",
        bundle.failed()
    );
    assert_eq!(env.run(&["sessions", "--json"]).json(), json!([]));
}

#[test]
fn service_rs_alone_opens_the_tui_on_the_builtin_agent_which_edits_after_one_approval() {
    let env = Env::new();
    repository(&env);
    let server = ProviderServer::start(vec![
        tool_call("c1", "Read", json!({"file_path": "calc.sh"})),
        tool_call(
            "c2",
            "Edit",
            json!({"file_path": "calc.sh", "old_string": "$1 - $2", "new_string": "$1 + $2"}),
        ),
        openai_text("Fixed calc.sh."),
    ]);
    let tmux = super::tmux::Tmux::start(&format!(
        "cd {} && env -u ANTHROPIC_API_KEY SERVICE_HOME={} OPENAI_API_KEY=sk-test OPENAI_BASE_URL={} {}",
        env.work.path().display(),
        env.home.path().display(),
        server.base,
        super::support::binary().display()
    ));
    tmux.wait_for("builtin/coder");
    tmux.wait_for("openai/gpt-4.1");
    tmux.wait_for("sandbox workspace_write");
    tmux.type_line("fix the failing test");
    // The Read went through without a question; the Edit asks once.
    tmux.wait_for("[o] once  [a] always");
    tmux.keys(&["o"]);
    tmux.wait_for("Fixed calc.sh.");
    assert_eq!(
        std::fs::read_to_string(env.path("calc.sh")).unwrap(),
        "echo $(( $1 + $2 ))\n"
    );
    assert_eq!(server.recorded().len(), 3);
}

#[test]
fn as_root_a_writable_session_in_a_root_owned_project_is_refused_before_any_model_call_until_sandbox_user_is_set(
) {
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "skipped: the sandbox user question arises only for a supervisor running as root"
        );
        return;
    }
    let env = Env::new();
    // Root's project, as in a container: root owns it, others may enter but not write.
    let project = tempfile::TempDir::new().unwrap();
    std::fs::set_permissions(
        project.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::write(project.path().join("calc.sh"), "echo $(( $1 - $2 ))\n").unwrap();
    let server = ProviderServer::start(vec![
        tool_call(
            "c1",
            "Edit",
            json!({"file_path": "calc.sh", "old_string": "$1 - $2", "new_string": "$1 + $2"}),
        ),
        openai_text("Fixed."),
    ]);
    let run = || {
        with_openai_key(
            &env,
            &server.base,
            &["fix the failing test", "--approve", "--verbose"],
        )
        .current_dir(project.path())
        .env_remove("SERVICE_SANDBOX_USER")
        .output()
        .unwrap()
    };
    let refused = run();
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{err}");
    assert!(
        err.contains("may not write there") && err.contains("config set sandbox_user"),
        "{err}"
    );
    assert_eq!(server.recorded().len(), 0, "no model call was paid for");
    assert_eq!(
        env.run(&["sessions", "--json"]).json(),
        json!([]),
        "no session left"
    );

    // (No key for doctor: its model check would ask the scripted server for its model list.)
    let doctor = env
        .command(&["doctor", "builtin/coder"])
        .current_dir(project.path())
        .env("SERVICE_LOCAL_MODELS", "http://127.0.0.1:9/v1")
        .env_remove("SERVICE_SANDBOX_USER")
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&doctor.stdout);
    assert!(report.contains("may not write there"), "{report}");

    env.run(&["config", "set", "sandbox_user", "root"]).ok();
    let fixed = run();
    assert!(
        fixed.status.success(),
        "{}",
        String::from_utf8_lossy(&fixed.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("calc.sh")).unwrap(),
        "echo $(( $1 + $2 ))\n",
        "{}",
        String::from_utf8_lossy(&fixed.stderr)
    );
    // What the sandbox may really do is said before the turn.
    let said = String::from_utf8_lossy(&fixed.stderr);
    assert!(
        said.contains("(writable, as root, with root's rights over what it sees)"),
        "{said}"
    );
}

#[test]
fn as_root_the_question_of_an_edit_names_a_file_the_sandbox_may_not_write() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!(
            "skipped: files the sandbox user may not write arise for a supervisor running as root"
        );
        return;
    }
    let env = Env::new();
    super::support::write_bundle(
        &env.path("b"),
        r#"{turns: [
          {when: "link", replies: [
            {tool_calls: [{name: "Bash", arguments: {command: "ln -s /etc etclink"}}]},
            {tool_calls: [{name: "Edit", arguments: {file_path: "etclink/shadow", old_string: "a", new_string: "b"}}]},
            {text: "done"},
          ]},
          {when: "locked", replies: [{tool_calls: [{name: "Edit", arguments: {file_path: "locked.txt", old_string: "a", new_string: "b"}}]}, {text: "done"}]},
          {replies: [{tool_calls: [{name: "Edit", arguments: {file_path: "mine.txt", old_string: "a", new_string: "b"}}]}, {text: "done"}]},
        ]}"#,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Edit, action: ask }\n",
        "workspace_write",
    );
    // The project is the user's (the sandbox's); root rewrote one file in it.
    std::fs::write(env.path("mine.txt"), "a\n").unwrap();
    give_to_sandbox(&env.path("mine.txt"));
    std::fs::write(env.path("locked.txt"), "a\n").unwrap();
    let asked = |prompt: &str| {
        let out = env
            .command(&["run", "./b", prompt, "--json"])
            .output()
            .unwrap();
        of_type(&events(&out), "permission_requested")[0].clone()
    };
    let locked = asked("locked");
    let warning = locked["warning"].as_str().unwrap_or_default();
    assert!(
        warning.contains("locked.txt") && warning.contains("may not write it"),
        "{locked}"
    );
    assert!(asked("mine")["warning"].is_null());
    // Attack: a link the sandbox made to a host directory; the question tells nothing of the file behind it
    // (root's /etc/shadow, which no sandbox user may write).
    let linked = asked("link");
    assert_eq!(linked["summary"], "/workspace/etclink/shadow", "{linked}");
    assert!(linked["warning"].is_null(), "{linked}");
}

/// Attack: a model chains a write behind a command the built-in agent lets through without asking (`ls`), in the
/// four ways a shell allows. Each chain is asked about (and, with no terminal to ask on, denied), and nothing it
/// would have written exists; the plain `ls` ran unasked.
#[test]
fn a_command_chained_behind_a_read_only_one_is_asked_about_and_never_runs_unasked() {
    let env = Env::new();
    let chains = [
        "ls; touch pwned-1",
        "ls && touch pwned-2",
        "ls $(touch pwned-3)",
        "ls `touch pwned-4`",
        "ls\ntouch pwned-5",
    ];
    let mut replies = vec![tool_call("c0", "Bash", json!({"command": "ls"}))];
    for (i, chain) in chains.iter().enumerate() {
        replies.push(tool_call(
            &format!("c{}", i + 1),
            "Bash",
            json!({"command": chain}),
        ));
    }
    replies.push(openai_text("done"));
    let server = ProviderServer::start(replies);
    let out = with_openai_key(&env, &server.base, &["fix the failing test", "--json"])
        .output()
        .unwrap();
    let evs = events(&out);
    let asked: Vec<String> = of_type(&evs, "permission_requested")
        .iter()
        .map(|p| p["summary"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(asked, chains, "{}", String::from_utf8_lossy(&out.stderr));
    for i in 1..=chains.len() {
        assert!(!env.path(&format!("pwned-{i}")).exists(), "pwned-{i}");
    }
    let first = &of_type(&evs, "tool_call_finished")[0];
    assert_ne!(first["status"], "error", "{first}");
}
