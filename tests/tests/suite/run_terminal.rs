//! `run` as a person sees it on a terminal (tmux), and as a script sees it through a pipe: what the agent did, in
//! the shared tool view with paths relative to the project; single-key questions; `-q` and `--verbose`; a reader
//! that goes away (`| head -1`) ending the run quietly with its turn interrupted.

use std::time::{Duration, Instant};

use super::support::{give_to_sandbox, Env};
use super::tmux::Tmux;

const SCRIPT: &str = r#"{turns: [{replies: [
  {reasoning: "First line of thought.\nSecond line of thought.", tool_calls: [{name: "Bash", arguments: {command: "cat calc.py; false"}}]},
  {tool_calls: [{name: "Edit", arguments: {file_path: "calc.py", old_string: "a - b", new_string: "a + b"}}]},
  {tool_calls: [{name: "Read", arguments: {file_path: "/workspace/calc.py"}}]},
  {text: "Fixed calc.py.\nTests output:\nok"}]}]}"#;

/// A store with the `fixture` bundle (writable, asking before every call), and a project `proj` with `calc.py`.
fn setup(script: &str) -> Env {
    let env = Env::with_bundle(script, "permissions: { default: ask }", "workspace_write");
    let proj = env.path("proj");
    std::fs::create_dir_all(&proj).unwrap();
    std::fs::write(proj.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    give_to_sandbox(&proj);
    env
}

/// `service-rs <args>` in `proj` on a terminal, which stays open after the run ends.
fn on_terminal(env: &Env, args: &str) -> Tmux {
    Tmux::start(&format!(
        "cd {} && env SERVICE_HOME={} {} {args}; echo RUN-ENDED $?; sleep 60",
        env.path("proj").display(),
        env.home.path().display(),
        super::support::binary().display()
    ))
}

#[test]
fn on_a_terminal_run_shows_each_command_with_its_exit_code_and_each_edit_with_its_hunk() {
    let env = setup(SCRIPT);
    let tmux = on_terminal(&env, "run fixture go --approve");
    let screen = tmux.wait_for("RUN-ENDED 0");
    for line in [
        "$ cat calc.py; false (exit 1,",
        "Edited calc.py (+1 -1)",
        "-    return a - b",
        "+    return a + b",
        "Read calc.py (2 lines)",
        "Fixed calc.py.",
        "Tests output:",
    ] {
        assert!(screen.contains(line), "missing {line:?} in\n{screen}");
    }
    assert!(!screen.contains("/workspace"), "{screen}");
}

#[test]
fn the_approval_question_takes_a_single_key_and_names_paths_as_the_project_does() {
    let env = setup(SCRIPT);
    let tmux = on_terminal(&env, "run fixture go");
    let screen = tmux.wait_for("(one key)");
    assert!(
        screen.contains("Allow Bash `cat calc.py; false`"),
        "{screen}"
    );
    tmux.keys(&["o"]);
    let screen = tmux.wait_for("Allow Edit `calc.py`");
    assert!(screen.contains("--- calc.py"), "{screen}");
    tmux.keys(&["o"]);
    tmux.wait_for("Allow Read");
    tmux.keys(&["a"]);
    let screen = tmux.wait_for("RUN-ENDED 0");
    assert!(!screen.contains("/workspace"), "{screen}");
    // (The question wraps at the pane's width.)
    let joined = screen.replace('\n', "");
    assert!(
        joined.contains("[p] always `Edit(**)` in this project"),
        "{screen}"
    );
    assert_eq!(
        std::fs::read_to_string(env.path("proj/calc.py")).unwrap(),
        "def add(a, b):\n    return a + b\n"
    );
}

#[test]
fn quiet_prints_only_the_answer_and_verbose_prints_whole_lines_without_sandbox_paths() {
    let env = setup(SCRIPT);
    let quiet = env
        .command(&["run", "fixture", "go", "--approve", "-q"])
        .current_dir(env.path("proj"))
        .output()
        .unwrap();
    assert!(quiet.status.success());
    assert_eq!(
        String::from_utf8_lossy(&quiet.stdout),
        "Fixed calc.py.\nTests output:\nok\n"
    );
    assert_eq!(String::from_utf8_lossy(&quiet.stderr), "");

    std::fs::write(
        env.path("proj/calc.py"),
        "def add(a, b):\n    return a - b\n",
    )
    .unwrap();
    let verbose = env
        .command(&["run", "fixture", "go", "--approve", "--verbose"])
        .current_dir(env.path("proj"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&verbose.stderr);
    let thinking: Vec<&str> = log.lines().filter(|l| l.contains("thinking:")).collect();
    assert_eq!(thinking.len(), 2, "{log}");
    assert!(
        thinking[0].ends_with("thinking: First line of thought."),
        "{log}"
    );
    assert!(
        thinking[1].ends_with("thinking: Second line of thought."),
        "{log}"
    );
    assert!(log.contains("Edited calc.py (+1 -1)"), "{log}");
    assert!(!log.contains("/workspace"), "{log}");
}

#[test]
fn a_reader_that_goes_away_ends_the_run_quietly_and_its_turn_interrupted() {
    let env = setup(
        r#"{turns: [{replies: [
          {tool_calls: [{name: "Bash", arguments: {command: "sleep 20"}}]},
          {text: "never"}]}]}"#,
    );
    let began = Instant::now();
    let out = std::process::Command::new("bash")
        .arg("-c")
        .arg(format!(
            "{} run fixture go --approve --json | head -1 >/dev/null; echo \"${{PIPESTATUS[0]}}\"",
            super::support::binary().display()
        ))
        .current_dir(env.path("proj"))
        .env("SERVICE_HOME", env.home.path())
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(status == "141" || status == "0", "status {status}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
    // The turn was cut long before its command would have ended.
    assert!(began.elapsed() < Duration::from_secs(15));
    let listed = loop {
        let sessions = env.run(&["sessions", "--json"]).json();
        let last = sessions[0]["last_turn"]["status"].clone();
        if last == "interrupted" || began.elapsed() > Duration::from_secs(20) {
            break sessions;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(listed[0]["status"], "idle", "{listed}");
    assert_eq!(listed[0]["last_turn"]["status"], "interrupted", "{listed}");
    // Recorded by the run itself, as an interrupt, not repaired later as a lost process.
    let id = listed[0]["id"].as_str().unwrap();
    let journal =
        std::fs::read_to_string(env.home.path().join(format!("sessions/{id}/events.jsonl")))
            .unwrap();
    assert!(journal.contains("\"code\":\"interrupted\""), "{journal}");
}
