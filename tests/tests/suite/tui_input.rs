//! The TUI's daily habits under tmux, the way a terminal pastes: a bracketed paste stays in the input until Enter;
//! an answer keeps its line breaks and its tables; `@` and `/` open their pickers; tool calls read as a person
//! would say them, without the sandbox's paths; quitting leaves the conversation and how to resume it in the
//! scrollback.

use super::support::{give_to_sandbox, write_bundle, Env};
use super::tmux::Tmux;

const SCRIPT: &str = r#"{turns: [
  {when: "table", replies: [{text: "a\nb\n\n| name | size |\n|---|---|\n| alpha | 1 |\n| beta | 22 |\n| gamma | 333 |"}]},
  {when: "edit", replies: [
    {tool_calls: [{name: "Edit", arguments: {file_path: "/workspace/notes.md", old_string: "old", new_string: "new"}}]},
    {tool_calls: [{name: "Bash", arguments: {command: "ls /workspace"}}]},
    {text: "edited"}]},
  {replies: [{text: "got {{prompt}}"}]},
]}"#;

fn setup() -> Env {
    let env = Env::with_bundle(SCRIPT, "permissions: { default: allow }", "workspace_write");
    let proj = env.path("proj");
    std::fs::create_dir_all(proj.join("src")).unwrap();
    std::fs::create_dir_all(proj.join("target")).unwrap();
    std::fs::write(proj.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(proj.join("src/lib.rs"), "pub fn lib() {}\n").unwrap();
    std::fs::write(proj.join("target/built.rs"), "").unwrap();
    std::fs::write(proj.join("notes.md"), "old\n").unwrap();
    give_to_sandbox(&proj);
    env
}

/// The TUI on `fixture` in `proj`; the shell stays after it ends.
fn tui(env: &Env) -> Tmux {
    let tmux = Tmux::start(&format!(
        "cd {} && env SERVICE_HOME={} {} tui fixture; echo TUI-ENDED; sleep 60",
        env.path("proj").display(),
        env.home.path().display(),
        super::support::binary().display()
    ));
    tmux.wait_for("sandbox workspace_write");
    tmux
}

/// Pastes `text` as a terminal does: bracketed (the TUI asks for it), line breaks sent as carriage returns.
fn paste(tmux: &Tmux, text: &str) {
    assert!(tmux
        .cmd(&["set-buffer", "-b", "p", text])
        .status()
        .unwrap()
        .success());
    assert!(tmux
        .cmd(&["paste-buffer", "-p", "-b", "p", "-t", "main"])
        .status()
        .unwrap()
        .success());
}

/// The prompts of the session's turns, from its journal.
fn prompts(env: &Env) -> Vec<String> {
    let sessions = env.run(&["sessions", "--json"]).json();
    let id = sessions[0]["id"].as_str().unwrap().to_string();
    let journal =
        std::fs::read_to_string(env.home.path().join(format!("sessions/{id}/events.jsonl")))
            .unwrap();
    journal
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["payload"]["type"] == "turn_started")
        .map(|e| {
            e["payload"]["payload"]["prompt"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn a_pasted_three_line_text_is_one_prompt_sent_only_on_enter() {
    let env = setup();
    let tmux = tui(&env);
    paste(&tmux, "first line\nsecond line\nthird line");
    let screen = tmux.wait_for("third line");
    assert!(
        screen.contains("first line") && screen.contains("second line"),
        "{screen}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !tmux.screen().contains("got first"),
        "nothing is sent before Enter:\n{}",
        tmux.screen()
    );
    tmux.keys(&["Enter"]);
    tmux.wait_for("got first line");
    tmux.wait_for(" idle │");
    assert_eq!(prompts(&env), ["first line\nsecond line\nthird line"]);

    // A long paste folds in the input and goes out whole.
    let long: Vec<String> = (1..=12).map(|n| format!("trace line {n}")).collect();
    paste(&tmux, &long.join("\n"));
    tmux.wait_for("[Pasted 12 lines]");
    tmux.keys(&["Enter"]);
    tmux.wait_for("got trace line 1");
    tmux.wait_for(" idle │");
    assert_eq!(prompts(&env)[1], long.join("\n"));
}

#[test]
fn an_answers_line_breaks_stay_and_its_table_is_drawn() {
    let env = setup();
    let tmux = tui(&env);
    tmux.type_line("show a table");
    let screen = tmux.wait_for("gamma");
    let lines: Vec<&str> = screen.lines().map(str::trim_end).collect();
    let a = lines
        .iter()
        .position(|l| *l == "a")
        .expect("a alone on its line");
    assert_eq!(lines[a + 1], "b", "{screen}");
    for row in [
        "name  │ size",
        "──────┼─────",
        "alpha │ 1",
        "beta  │ 22",
        "gamma │ 333",
    ] {
        assert!(lines.contains(&row), "missing {row:?} in\n{screen}");
    }
}

#[test]
fn at_opens_a_file_picker_that_skips_ignored_files_and_slash_opens_the_commands() {
    let env = setup();
    let tmux = tui(&env);
    tmux.keys(&["-l", "read @lib"]);
    let screen = tmux.wait_for("files · Tab inserts");
    assert!(screen.contains("src/lib.rs"), "{screen}");
    tmux.keys(&["-l", "."]);
    std::thread::sleep(std::time::Duration::from_millis(200));
    tmux.keys(&["Tab"]);
    tmux.wait_for("read @src/lib.rs");
    tmux.keys(&["Enter"]);
    tmux.wait_for("(attached: src/lib.rs)");
    tmux.wait_for(" idle │");
    let prompt = &prompts(&env)[0];
    assert!(
        prompt.contains("<attached uri=\"src/lib.rs\">\npub fn lib() {}"),
        "{prompt}"
    );

    tmux.keys(&["-l", "@built"]);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(
        !tmux.screen().contains("target/built.rs"),
        "{}",
        tmux.screen()
    );
    tmux.keys(&["C-c"]);
    // The input is cleared before the next keys come, or they would land in it.
    tmux.wait_gone("@built");

    tmux.keys(&["-l", "/he"]);
    // The whole of it typed: "/" alone opens the picker too, on the commands' first rows.
    tmux.wait_for("│/he ");
    let screen = tmux.wait_for("commands · Tab completes");
    assert!(screen.contains("/help"), "{screen}");
    tmux.keys(&["Tab"]);
    tmux.keys(&["Enter"]);
    tmux.wait_for("show or hide reasoning");
}

#[test]
fn tool_calls_read_as_people_say_them_and_quitting_leaves_the_conversation_and_the_resume_line() {
    let env = setup();
    let tmux = tui(&env);
    tmux.type_line("edit the notes");
    tmux.wait_for("edited");
    let screen = tmux.wait_for(" idle │");
    assert!(screen.contains("✓ Edited notes.md (+1 -1)"), "{screen}");
    assert!(
        screen.contains("+new"),
        "an edit a rule allowed shows its change:\n{screen}"
    );
    assert!(
        screen.contains("$ ls /workspace"),
        "the model's own command is its own:\n{screen}"
    );
    assert!(!screen.contains("\"file_path\""), "{screen}");
    tmux.type_line("/quit");
    tmux.wait_for("TUI-ENDED");
    let out = tmux
        .cmd(&["capture-pane", "-p", "-S", "-", "-t", "main"])
        .output()
        .unwrap();
    let history = String::from_utf8_lossy(&out.stdout);
    let id = env.run(&["sessions", "--json"]).json()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(history.contains("› edit the notes"), "{history}");
    assert!(history.contains("Edited notes.md (+1 -1)"), "{history}");
    assert!(
        history.contains(&format!("resume: service-rs tui --session {id}")),
        "{history}"
    );
}

#[test]
fn model_status_mcp_and_init_answer_in_the_tui() {
    let env = setup();
    let tmux = Tmux::start(&format!(
        "cd {} && env -u OPENAI_API_KEY -u ANTHROPIC_API_KEY SERVICE_HOME={} {} tui fixture; sleep 60",
        env.path("proj").display(),
        env.home.path().display(),
        super::support::binary().display()
    ));
    tmux.wait_for("sandbox workspace_write");
    tmux.type_line("/model openai/gpt-4o");
    tmux.wait_for("OPENAI_API_KEY is not set");
    let screen = tmux.screen();
    assert!(
        screen.contains("scripted/fixture"),
        "the model stays:\n{screen}"
    );

    tmux.type_line("/model");
    tmux.wait_for("model: scripted/fixture");
    tmux.wait_for("models · Enter switches");
    // The current model is highlighted: Enter keeps it.
    tmux.keys(&["Enter"]);
    tmux.wait_for("next turns use scripted/fixture");

    tmux.type_line("/status");
    // (Not "instructions" alone: the popup's help line for /status says it too.)
    let screen = tmux.wait_for("instructions none read");
    assert!(
        screen.contains(&format!("directory  {}", env.path("proj").display())),
        "{screen}"
    );
    tmux.type_line("/mcp");
    tmux.wait_for("no MCP server has started");

    tmux.type_line("/init");
    tmux.wait_for("got Write an AGENTS.md");
}

#[test]
fn an_approval_that_waits_rings_the_terminal_bell() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [{tool_calls: [{name: "Bash", arguments: {command: "true"}}]}, {text: "done"}]}]}"#,
        "permissions: { default: ask }",
        "read_only",
    );
    env.run(&["build", "b"]).ok();
    let tmux = Tmux::service_rs(&env, "tui fixture");
    tmux.wait_for("sandbox read_only");
    let bell = || {
        let out = tmux
            .cmd(&["display-message", "-p", "-t", "main", "#{window_bell_flag}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(bell(), "0");
    tmux.type_line("go");
    tmux.wait_for("permission needed");
    super::support::wait_until(
        std::time::Duration::from_secs(5),
        || bell() == "1",
        || "no bell rang".into(),
    );
    tmux.keys(&["o"]);
    tmux.wait_for("done");
}
