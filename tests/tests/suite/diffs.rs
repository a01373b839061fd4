//! Diffs of what Write and Edit change: in the approval question (terminal, `permission_requested`), in the result
//! (`tool_call_finished`), and afterwards with `sessions diff` and the TUI's `/diff`.

use serde_json::Value;

use super::providers::of_type;
use super::support::{give_to_sandbox, write_bundle, Env};
use super::tmux::Tmux;

const SCRIPT: &str = r#"{turns: [
  {when: "edit", replies: [
    {tool_calls: [{name: "Edit", arguments: {file_path: "notes.txt", old_string: "two", new_string: "TWO"}}]},
    {tool_calls: [{name: "Write", arguments: {file_path: "fresh.txt", content: "fresh\n\u001b]0;retitled\u0007\n"}}]},
    {text: "edited"},
  ]},
  {replies: [{text: "nothing to do"}]},
]}"#;

/// A writable bundle that asks before Write and Edit, with `notes.txt` in the work directory.
fn setup() -> Env {
    let env = Env::new();
    std::fs::write(env.path("notes.txt"), "one\ntwo\nthree\n").unwrap();
    give_to_sandbox(env.work.path());
    write_bundle(
        &env.path("b"),
        SCRIPT,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Write, action: ask }\n    - { tool: Edit, action: ask }\n",
        "workspace_write",
    );
    env
}

#[test]
fn the_diff_of_a_write_or_an_edit_is_in_its_request_its_result_and_sessions_diff() {
    let env = setup();
    let run = env.run(&["run", "./b", "please edit", "--approve", "--json"]);
    let events: Vec<Value> = run
        .ok()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let asked = of_type(&events, "permission_requested");
    assert_eq!(asked.len(), 2);
    let edit = asked[0]["diff"].as_str().unwrap();
    assert!(edit.contains("\n-two\n+TWO\n"), "{edit}");
    assert!(
        edit.contains(" one\n") && edit.contains(" three\n"),
        "context lines: {edit}"
    );
    assert!(asked[1]["diff"].as_str().unwrap().contains("+fresh\n"));
    let done = of_type(&events, "tool_call_finished");
    assert_eq!(
        done[0]["diff"], asked[0]["diff"],
        "the result's diff is the change made"
    );
    assert_eq!(
        std::fs::read_to_string(env.path("notes.txt")).unwrap(),
        "one\nTWO\nthree\n"
    );
    let id = events[0]["session_id"].as_str().unwrap().to_string();

    env.run(&["run", "--session", &id, "anything else"]).ok();
    let all = env.run(&["sessions", "diff", &id]);
    let out = all.ok();
    assert!(out.contains("# turn 1: please edit"), "{out}");
    assert!(
        out.contains("-two\n+TWO\n") && out.contains("+fresh\n"),
        "{out}"
    );
    // A control sequence in a file's text is shown, not sent to the terminal.
    assert!(
        !out.contains('\u{1b}') && out.contains("+^[]0;retitled^G"),
        "{out}"
    );
    let second = env.run(&["sessions", "diff", &id, "--turn", "-1"]);
    assert!(second.ok().contains("# turn 2: anything else"));
    assert!(!second.stdout.contains("TWO"));
    assert!(second.stderr.contains("no file was changed in turn 2"));
    let bad = env.run(&["sessions", "diff", &id, "--turn", "3"]);
    assert!(
        bad.failed()
            .contains("has no such turn; valid turns are 1..2"),
        "{}",
        bad.stderr
    );
}

#[test]
fn on_a_terminal_the_edit_question_shows_the_diff_first() {
    let env = setup();
    let tmux = super::terminal::run_in_terminal(&env, "please edit");
    let screen = tmux.wait_for("Allow Edit `");
    let question = screen
        .lines()
        .position(|l| l.contains("Allow Edit `"))
        .unwrap();
    let minus = screen
        .lines()
        .position(|l| l == "-two")
        .expect("the - line");
    let plus = screen
        .lines()
        .position(|l| l == "+TWO")
        .expect("the + line");
    assert!(minus < plus && plus < question, "{screen}");
    tmux.keys(&["o", "Enter"]);
    tmux.wait_for("+fresh");
    tmux.keys(&["d", "Enter"]);
    tmux.wait_for("EXIT=0");
    assert_eq!(
        std::fs::read_to_string(env.path("notes.txt")).unwrap(),
        "one\nTWO\nthree\n"
    );
    assert!(!env.path("fresh.txt").exists());
}

#[test]
fn the_tui_shows_the_diff_in_the_approval_box_and_with_slash_diff() {
    let env = setup();
    let tmux = Tmux::service_rs(&env, "tui --bundle ./b");
    tmux.wait_for("sandbox workspace_write");
    tmux.type_line("please edit");
    let screen = tmux.wait_for("+TWO");
    assert!(
        screen.contains("-two") && screen.contains("Allow Edit"),
        "{screen}"
    );
    tmux.keys(&["o"]);
    tmux.wait_for("+fresh");
    tmux.keys(&["o"]);
    tmux.wait_for("edited");
    tmux.type_line("/clear");
    tmux.type_line("/diff");
    let shown = tmux.wait_for("+fresh");
    assert!(shown.contains("-two") && shown.contains("+TWO"), "{shown}");
    tmux.type_line("/quit");
}
