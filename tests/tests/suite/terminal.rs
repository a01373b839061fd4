//! `run` on a real terminal (tmux): the session line, the streamed answer, the spinner, and Ctrl-C at a question
//! and during a command.

use std::time::Duration;

use super::support::{pids_with, wait_until, write_bundle, Env};
use super::tmux::Tmux;

/// `run` of bundle `./b` with `prompt` in a terminal; the shell then prints the exit code as `EXIT=<code>`.
pub(super) fn run_in_terminal(env: &Env, prompt: &str) -> Tmux {
    Tmux::service_rs(
        env,
        &format!("run ./b --prompt '{prompt}'; echo EXIT=$?; sleep 60"),
    )
}

/// The session id `run` printed on the terminal.
fn session_on(screen: &str) -> String {
    screen
        .lines()
        .find_map(|l| l.trim().strip_prefix("session: "))
        .unwrap_or_else(|| panic!("no session line on the screen:\n{screen}"))
        .trim()
        .to_string()
}

#[track_caller]
fn assert_no_process_left(markers: &[&str]) {
    for marker in markers {
        wait_until(
            Duration::from_secs(10),
            || pids_with(marker).is_empty(),
            || {
                format!(
                    "processes with {marker:?} are still running: {:?}",
                    pids_with(marker)
                )
            },
        );
    }
}

#[test]
fn on_a_terminal_run_names_the_session_shows_what_it_waits_for_and_streams_the_answer() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [
          {tool_calls: [{name: "Bash", arguments: {command: "sleep 2.5; echo slept"}}]},
          {text: "the long answer arrives a few words at a time and ends here", delay_ms: 400}
        ]}]}"#,
        "",
        "workspace_write",
    );
    let tmux = run_in_terminal(&env, "go");
    let screen = tmux.wait_for("running: sleep 2.5; echo slept");
    assert!(screen.contains("Ctrl-C interrupts"), "{screen}");
    session_on(&screen);
    // The first words are on the screen while the rest is still on its way.
    let partial = tmux.wait_for("the long answer");
    assert!(
        !partial.contains("ends here") && !partial.contains("EXIT="),
        "the answer came in one piece:\n{partial}"
    );
    let done = tmux.wait_for("EXIT=0");
    assert_eq!(
        done.matches("ends here").count(),
        1,
        "streamed once, not printed again:\n{done}"
    );
    assert!(
        !done.contains("Ctrl-C interrupts"),
        "the spinner line is cleared:\n{done}"
    );
    // It says where the session works, and ends with what the turn cost.
    assert!(
        done.contains(&format!(
            "workspace: {} (writable",
            env.work.path().display()
        )),
        "{done}"
    );
    let usage = done
        .lines()
        .find(|l| l.starts_with("tokens "))
        .unwrap_or_else(|| panic!("no usage line:\n{done}"));
    assert!(
        usage.contains(" in · ") && usage.contains(" out · "),
        "{usage}"
    );
    assert!(
        usage.contains("2 steps") && usage.ends_with(" s"),
        "{usage}"
    );
}

#[test]
fn ctrl_c_during_a_command_interrupts_the_turn_exits_130_and_leaves_no_process() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [
          {tool_calls: [{name: "Bash", arguments: {command: "sleep 29.5; echo never"}}]},
          {text: "not reached"}
        ]}]}"#,
        "",
        "workspace_write",
    );
    let tmux = run_in_terminal(&env, "go");
    let screen = tmux.wait_for("running: sleep 29.5");
    let session = session_on(&screen);
    tmux.keys(&["C-c"]);
    let screen = tmux.wait_for("EXIT=130");
    assert!(screen.contains("interrupting…"), "{screen}");
    assert!(
        screen.contains("(interrupted)"),
        "reported as an interrupt:\n{screen}"
    );
    assert!(!screen.contains("crashed"), "{screen}");
    assert_no_process_left(&["sleep 29.5", &session]);
    let sessions = env.run(&["sessions", "--json"]).json();
    assert_eq!(sessions[0]["status"], "idle");
    assert_eq!(sessions[0]["last_turn"]["status"], "interrupted");
}

#[test]
fn ctrl_c_at_the_approval_question_exits_130_and_leaves_no_process() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [
          {tool_calls: [{name: "Bash", arguments: {command: "echo approved-run"}}]},
          {text: "not reached"}
        ]}]}"#,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, action: ask }\n",
        "workspace_write",
    );
    let tmux = run_in_terminal(&env, "go");
    let screen = tmux.wait_for("Allow Bash `echo approved-run` in ");
    let session = session_on(&screen);
    tmux.keys(&["C-c"]);
    let screen = tmux.wait_for("EXIT=130");
    assert!(!screen.contains("approved-run\n"), "{screen}");
    assert_no_process_left(&[&session]);
    let sessions = env.run(&["sessions", "--json"]).json();
    assert_eq!(sessions[0]["status"], "idle", "{sessions}");
    assert_ne!(sessions[0]["last_turn"]["status"], "completed");
}
