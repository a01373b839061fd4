//! The TUI end to end: the real binary in tmux, driven with send-keys and read with capture-pane.

use std::time::Duration;

use super::support::{binary, wait_until, write_bundle, Env};
use super::tmux::Tmux;

const SCRIPT: &str = r#"{turns: [
  {when: "write", replies: [{tool_calls: [{name: "Write", arguments: {file_path: "out.txt", content: "from the tui"}}]}, {text: "wrote: {{last_tool_output}}"}]},
  {replies: [{text: "seen {{message_count}}"}]},
]}"#;

#[test]
fn the_tui_chats_runs_operator_commands_answers_approvals_and_quits_cleanly() {
    let env = Env::new();
    write_bundle(
        &env.path("tuibundle"),
        SCRIPT,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n",
        "workspace_write",
    );
    let tmux = Tmux::service_rs(&env, "tui --bundle ./tuibundle");
    tmux.wait_for("sandbox workspace_write");
    // The header says which host directory the session sees, and that it may write there.
    tmux.wait_for(&format!(
        "workspace {} (writable",
        env.work.path().display()
    ));

    tmux.type_line("hello");
    tmux.wait_for("seen 2");
    tmux.wait_for(" idle │");

    tmux.type_line("!echo bang-$((6*7))");
    tmux.wait_for("bang-42");

    tmux.type_line("/help");
    tmux.wait_for("show or hide reasoning");
    tmux.type_line("/fly");
    tmux.wait_for("unknown command /fly; known commands:");

    // The operator command was not stored as a turn: system + hello, seen 2, again.
    tmux.type_line("again");
    tmux.wait_for("seen 4");

    tmux.type_line("please write");
    tmux.wait_for("permission needed");
    tmux.wait_for("[o] once  [a] always");
    tmux.keys(&["o"]);
    tmux.wait_for("permission allowed once");
    tmux.wait_for("wrote: wrote 12 bytes");
    assert_eq!(
        std::fs::read_to_string(env.path("out.txt")).unwrap(),
        "from the tui",
        "the approved Write created the file in the directory the TUI started in"
    );

    tmux.type_line("/quit");
    wait_until(
        Duration::from_secs(10),
        || !tmux.running(),
        || format!("the TUI did not exit on /quit:\n{}", tmux.screen()),
    );
    let sessions = env.run(&["sessions", "--json"]).json();
    assert_eq!(sessions[0]["turn_count"], 3);
}

#[test]
fn the_tui_restores_the_terminal_when_it_exits() {
    // Run the TUI inside a shell in tmux; after /quit the shell prints a marker and the screen must be the normal
    // screen again (not the TUI's alternate screen), and the terminal must echo typed text (raw mode off).
    let env = Env::new();
    write_bundle(&env.path("b"), SCRIPT, "", "workspace_write");
    let tmux = Tmux::service_rs(
        &env,
        "tui --bundle ./b; echo TUI-EXITED-$?; stty -a | grep -o ' -icanon\\| icanon' ; sleep 30",
    );
    tmux.wait_for("sandbox workspace_write");
    tmux.type_line("/quit");
    let screen = tmux.wait_for("TUI-EXITED-0");
    assert!(
        !screen.contains("sandbox workspace_write"),
        "still on the alternate screen:\n{screen}"
    );
    tmux.wait_for(" icanon");
}

#[test]
fn the_tui_works_against_a_server_with_remote() {
    let env = Env::new();
    let bundle = env.path("remotebundle");
    write_bundle(
        &bundle,
        SCRIPT,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n",
        "workspace_write",
    );
    let server = super::support::Server::start(env.home.path(), &[], &[]);
    // The TUI finds the server's token in the store the server wrote it to.
    let command = format!(
        "SERVICE_HOME={} {} --remote {} tui --bundle {}",
        env.home.path().display(),
        binary().display(),
        server.base,
        bundle.display()
    );
    let tmux = Tmux::start(&command);
    tmux.wait_for("sandbox workspace_write");
    tmux.type_line("hello");
    tmux.wait_for("seen 2");
    tmux.wait_for(" idle │");
    tmux.type_line("!echo remote-$((6*7))");
    tmux.wait_for("remote-42");
    tmux.type_line("write it");
    tmux.wait_for("[o] once  [a] always");
    tmux.keys(&["d"]);
    tmux.wait_for("permission denied");
    tmux.wait_for("was denied by the operator");
    tmux.type_line("/quit");
    wait_until(
        Duration::from_secs(10),
        || !tmux.running(),
        || format!("the TUI did not exit:\n{}", tmux.screen()),
    );
}

#[test]
fn in_the_tui_the_first_ctrl_c_interrupts_the_turn_and_the_next_quits() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [
          {tool_calls: [{name: "Bash", arguments: {command: "sleep 27.5; echo never"}}]},
          {text: "not reached"}
        ]}]}"#,
        "",
        "workspace_write",
    );
    let tmux = Tmux::service_rs(&env, "tui --bundle ./b; echo TUI-EXITED-$?; sleep 30");
    tmux.wait_for("sandbox workspace_write");
    tmux.type_line("go");
    tmux.wait_for("sleep 27.5");
    tmux.keys(&["C-c"]);
    tmux.wait_for("interrupting… (Ctrl-C again quits)");
    tmux.wait_for("interrupted:");
    let screen = tmux.screen();
    assert!(
        !screen.contains("TUI-EXITED"),
        "the first Ctrl-C only interrupts:\n{screen}"
    );
    wait_until(
        Duration::from_secs(10),
        || super::support::pids_with("sleep 27.5").is_empty(),
        || "the interrupted command still runs".into(),
    );
    tmux.keys(&["C-c"]);
    tmux.wait_for("TUI-EXITED-0");
}

#[test]
fn the_tui_draws_an_answers_markdown_instead_of_showing_its_marks() {
    let env = Env::new();
    write_bundle(
        &env.path("md"),
        r#"{turns: [{replies: [{text: "Intro line.\n\n## Results\n\n- **first** point\n- second with `code`\n\n```\nlet x = 1;\n```\n"}]}]}"#,
        "",
        "read_only",
    );
    let tmux = Tmux::service_rs(&env, "tui --bundle ./md");
    tmux.wait_for("sandbox read_only");
    tmux.type_line("show me");
    let screen = tmux.wait_for("let x = 1;");
    let lines: Vec<&str> = screen.lines().map(str::trim_end).collect();
    assert!(lines.contains(&"Results"), "{screen}");
    assert!(lines.contains(&"• first point"), "{screen}");
    assert!(lines.contains(&"• second with code"), "{screen}");
    assert!(
        !screen.contains("##") && !screen.contains("**") && !screen.contains("```"),
        "{screen}"
    );
    tmux.type_line("/quit");
}

#[test]
fn tui_resume_picks_from_this_directorys_sessions_newest_first_filtered_as_typed() {
    let env = Env::new();
    write_bundle(
        &env.path("rb"),
        r#"{turns: [{replies: [{text: "answered {{prompt}}"}]}]}"#,
        "",
        "read_only",
    );
    for prompt in ["fix the parser", "write the docs", "tune the cache"] {
        env.run(&["run", "./rb", prompt]).ok();
    }
    // A session of another directory is not offered.
    let elsewhere = super::support::sandbox_tempdir();
    env.run(&[
        "run",
        "./rb",
        "elsewhere task",
        "--cwd",
        elsewhere.path().to_str().unwrap(),
    ])
    .ok();
    let tmux = Tmux::service_rs(&env, "tui --resume");
    let screen = tmux.wait_for("resume: sessions in");
    let rows: Vec<&str> = screen.lines().filter(|l| l.contains(" ago ")).collect();
    assert_eq!(rows.len(), 3, "{screen}");
    assert!(
        rows[0].contains("tune the cache") && rows[2].contains("fix the parser"),
        "newest first: {screen}"
    );
    assert!(!screen.contains("elsewhere task"), "{screen}");
    assert!(
        rows.iter()
            .all(|r| r.contains("completed") && r.contains("ago")),
        "{screen}"
    );
    tmux.keys(&["-l", "docs"]);
    let filtered = tmux.wait_for("filter: docs");
    assert!(
        filtered.contains("write the docs") && !filtered.contains("tune the cache"),
        "{filtered}"
    );
    tmux.keys(&["Enter"]);
    tmux.wait_for("resumed session");
    tmux.wait_for("answered write the docs");
    tmux.type_line("/quit");
}

#[test]
fn compact_in_the_tui_summarises_the_older_turns_and_says_so() {
    let env = Env::new();
    write_bundle(
        &env.path("compacting"),
        r#"{turns: [
          {when: "Summarise the conversation", replies: [{text: "SUMMARY"}]},
          {replies: [{text: "seen {{message_count}}"}]},
        ]}"#,
        "memory: { provider: compact, keep_recent_turns: 1 }\n",
        "workspace_write",
    );
    let tmux = Tmux::service_rs(&env, "tui --bundle ./compacting");
    tmux.wait_for("sandbox workspace_write");
    // Each answer shows before its turn ends (the end checkpoint is written after it): the next prompt waits.
    for (prompt, answer) in [
        ("first", "seen 2"),
        ("second", "seen 4"),
        ("third", "seen 6"),
    ] {
        tmux.type_line(prompt);
        tmux.wait_for(answer);
        tmux.wait_for(" idle │");
    }
    tmux.type_line("/compact the numbers");
    tmux.wait_for("context compacted (manual): 2 turns summarised");
    // System, summary, the kept turn's prompt and answer, the new prompt.
    tmux.type_line("fourth");
    tmux.wait_for("seen 5");
}

#[test]
fn the_status_line_shows_the_turns_usage_while_it_runs_a_tool() {
    let env = Env::new();
    write_bundle(
        &env.path("slow"),
        r#"{turns: [{replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 3"}}]}, {text: "slept"}]}]}"#,
        "",
        "workspace_write",
    );
    let tmux = Tmux::service_rs(&env, "tui --bundle ./slow");
    tmux.wait_for("sandbox workspace_write");
    tmux.type_line("take a nap");
    // While the command runs, the first call's usage is on the status line.
    let screen = tmux.wait_for("so far: tokens");
    assert!(!screen.contains("slept"), "{screen}");
    tmux.wait_for("slept");
}

#[test]
fn rewind_in_the_tui_picks_a_turn_and_fork_opens_the_session_as_it_was() {
    let env = Env::new();
    write_bundle(
        &env.path("rewinding"),
        r#"{turns: [
          {when: "make", replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo made > made.txt"}}]}, {text: "made it"}]},
          {when: "again", replies: [{text: "again, seen {{message_count}}"}]},
          {replies: [{text: "seen {{message_count}}"}]},
        ]}"#,
        "permissions: { default: allow }\n",
        "workspace_write",
    );
    let tmux = Tmux::service_rs(&env, "tui --bundle ./rewinding");
    tmux.wait_for("sandbox workspace_write");
    tmux.type_line("hello");
    tmux.wait_for("seen 2");
    tmux.wait_for(" idle │");
    tmux.type_line("make a file");
    tmux.wait_for("made it");
    tmux.wait_for(" idle │");
    assert!(env.path("made.txt").exists());
    tmux.type_line("/diff");
    tmux.wait_for("+made");
    // The picker lists the turns, the last first; the second row is turn 1.
    tmux.type_line("/rewind");
    tmux.wait_for("turn 2: make a file");
    tmux.keys(&["Down", "Enter"]);
    // Asked first: files, conversation or both.
    tmux.wait_for("rewind to before turn 1? [b] files and conversation");
    tmux.keys(&["b"]);
    tmux.wait_for("rewound to before turn 1: 1 files restored");
    assert!(!env.path("made.txt").exists());
    tmux.type_line("again");
    // Its own words: the first turn's "seen 2" is still on the screen, and so is " idle" until the turn starts.
    tmux.wait_for("again, seen 2");
    tmux.wait_for(" idle │");
    tmux.type_line("/fork 1");
    tmux.wait_for("0 turns inherited");
}

#[test]
fn cost_says_what_the_session_spent_at_the_configured_price() {
    let env = Env::new();
    write_bundle(&env.path("b"), SCRIPT, "", "read_only");
    std::fs::write(
        env.home.path().join("config.toml"),
        "[prices.\"scripted/fixture\"]\ninput = 1000.0\noutput = 1000.0\n",
    )
    .unwrap();
    let tmux = Tmux::service_rs(&env, "tui --bundle ./b");
    tmux.wait_for("sandbox read_only");
    tmux.type_line("hello");
    tmux.wait_for("seen 2");
    tmux.type_line("/cost");
    let screen = tmux.wait_for("at scripted/fixture's price");
    let line = screen
        .lines()
        .find(|l| l.contains("this session:"))
        .unwrap_or_default()
        .to_string();
    // The scripted model reports its tokens; at $1000 per million each costs a tenth of a cent.
    let record = &env.run(&["sessions", "--json"]).json()[0]["usage"];
    let tokens =
        record["input_tokens"].as_u64().unwrap() + record["output_tokens"].as_u64().unwrap();
    assert!(
        line.contains(&format!("${:.4}", tokens as f64 / 1000.0)),
        "{line} ({tokens} tokens)"
    );
}
