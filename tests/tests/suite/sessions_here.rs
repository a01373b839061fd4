//! Sessions by directory through the real binary: `run --continue` continues this directory's latest session and
//! never another directory's without being told which; `sessions` lists the most recently used first with their
//! directory, filtered with `--here` or `--cwd`; `show`, `diff` and `rewind` take `--last`.

use super::support::{give_to_sandbox, write_bundle, Env};

const SCRIPT: &str = r#"{turns: [{replies: [{text: "you said {{prompt}}"}]}]}"#;

/// A store with the `fixture` bundle, and two project directories under the work directory.
fn setup() -> (Env, std::path::PathBuf, std::path::PathBuf) {
    let env = Env::new();
    write_bundle(&env.path("b"), SCRIPT, "", "read_only");
    env.run(&["build", "b"]).ok();
    let (one, two) = (env.path("one"), env.path("two"));
    for dir in [&one, &two] {
        std::fs::create_dir_all(dir).unwrap();
        give_to_sandbox(dir);
    }
    (
        env,
        one.canonicalize().unwrap(),
        two.canonicalize().unwrap(),
    )
}

fn run_in(env: &Env, dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    env.command(args).current_dir(dir).output().unwrap()
}

/// Runs `args` in `dir`, asserting success; its stdout.
fn ok_in(env: &Env, dir: &std::path::Path, args: &[&str]) -> String {
    let out = run_in(env, dir, args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn listed(env: &Env, dir: &std::path::Path, args: &[&str]) -> Vec<serde_json::Value> {
    let out = run_in(env, dir, args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice::<serde_json::Value>(&out.stdout)
        .unwrap()
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn continue_never_takes_another_directorys_session_without_saying_which() {
    let (env, one, two) = setup();
    let first = run_in(&env, &one, &["run", "fixture", "hello from one"]);
    assert!(first.status.success());
    let one_id = listed(&env, &one, &["sessions", "--json"])[0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    // In `two`, where nothing was started: refused, with the latest sessions elsewhere and how to continue one.
    let refused = run_in(&env, &two, &["run", "--continue", "fixture", "go on"]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success());
    assert!(err.contains("no session was started in"), "{err}");
    assert!(
        err.contains(&one_id[..8]) && err.contains(one.to_str().unwrap()),
        "{err}"
    );
    assert!(err.contains("--session"), "{err}");
    assert_eq!(
        listed(&env, &one, &["sessions", "--json"]).len(),
        1,
        "no session made"
    );

    // In `one`: its own session goes on.
    let again = run_in(&env, &one, &["run", "--continue", "fixture", "go on"]);
    assert!(String::from_utf8_lossy(&again.stdout).contains("you said go on"));
    let sessions = listed(&env, &one, &["sessions", "--json"]);
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["turn_count"], 2);
}

#[test]
fn sessions_list_newest_first_with_their_directory_and_filter_by_directory() {
    let (env, one, two) = setup();
    for (dir, prompt) in [(&one, "a"), (&two, "b"), (&one, "c")] {
        assert!(run_in(&env, dir, &["run", "fixture", prompt])
            .status
            .success());
    }
    let all = listed(&env, &one, &["sessions", "--json"]);
    let titles: Vec<&str> = all.iter().map(|s| s["title"].as_str().unwrap()).collect();
    assert_eq!(titles, ["c", "b", "a"], "the most recently used first");

    let here = listed(&env, &one, &["sessions", "--here", "--json"]);
    assert!(here.iter().all(|s| s["cwd"] == one.to_str().unwrap()));
    assert_eq!(here.len(), 2);
    let there = listed(
        &env,
        &one,
        &["sessions", "list", "--cwd", "../two", "--json"],
    );
    assert_eq!(there.len(), 1);
    assert_eq!(there[0]["cwd"], two.to_str().unwrap());

    let table = String::from_utf8_lossy(&run_in(&env, &one, &["sessions"]).stdout).to_string();
    assert!(
        table.lines().next().unwrap().contains("DIRECTORY"),
        "{table}"
    );
    assert!(table.contains(two.to_str().unwrap()), "{table}");
}

#[test]
fn show_diff_and_rewind_take_the_last_session_of_this_directory() {
    let (env, one, two) = setup();
    assert!(run_in(&env, &one, &["run", "fixture", "in one"])
        .status
        .success());
    assert!(run_in(&env, &two, &["run", "fixture", "in two"])
        .status
        .success());
    // The latest of all is in `two`; from `one`, --last is one's.
    let shown = run_in(&env, &one, &["sessions", "show", "--last"]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        text.contains("> in one") && !text.contains("in two"),
        "{text}"
    );
    ok_in(&env, &one, &["sessions", "diff", "--last"]);
    let rewound = ok_in(
        &env,
        &one,
        &[
            "sessions",
            "rewind",
            "--last",
            "--turn",
            "1",
            "--conversation",
        ],
    );
    let ones = listed(&env, &one, &["sessions", "--here", "--json"]);
    let one_id = ones[0]["id"].as_str().unwrap();
    assert!(
        rewound.starts_with(&format!("rewound {one_id}")),
        "{rewound}"
    );
    // Elsewhere, the latest of all.
    let elsewhere = run_in(&env, env.home.path(), &["sessions", "show", "--last"]);
    assert!(String::from_utf8_lossy(&elsewhere.stdout).contains("> in two"));
    let neither = run_in(&env, &one, &["sessions", "show"]);
    assert!(String::from_utf8_lossy(&neither.stderr).contains("--last"));
}

/// The TUI on `fixture` in `dir`, saying when it has exited.
fn tui_in(env: &Env, dir: &std::path::Path) -> super::tmux::Tmux {
    super::tmux::Tmux::start(&format!(
        "cd {} && env SERVICE_HOME={} {} tui --bundle fixture; echo TUI-EXITED-$?; sleep 30",
        dir.display(),
        env.home.path().display(),
        super::support::binary().display()
    ))
}

#[test]
fn a_tui_session_left_without_a_prompt_is_not_kept_and_one_with_a_turn_is() {
    let (env, one, _) = setup();
    let tmux = tui_in(&env, &one);
    tmux.wait_for("new session");
    tmux.type_line("/quit");
    tmux.wait_for("TUI-EXITED-0");
    assert!(listed(&env, &one, &["sessions", "--json"]).is_empty());

    let tmux = tui_in(&env, &one);
    tmux.wait_for("new session");
    tmux.type_line("kept");
    tmux.wait_for("you said kept");
    tmux.type_line("/quit");
    tmux.wait_for("TUI-EXITED-0");
    assert_eq!(listed(&env, &one, &["sessions", "--json"]).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_deletes_a_session_that_waited_too_long_for_its_first_turn() {
    let (env, _, _) = setup();
    let api = super::http_client::Api::new(super::support::Server::start(
        env.home.path(),
        &["--unused-session-timeout", "1s"],
        &[],
    ));
    let bundle = env.path("b");
    let unused = api.session(bundle.to_str().unwrap()).await;
    let used = api.session(bundle.to_str().unwrap()).await;
    assert_eq!(api.answer(&used, "hi").await, "you said hi");
    super::support::wait_until(
        std::time::Duration::from_secs(15),
        || !env.home.path().join("sessions").join(&unused).exists(),
        || "the unused session is still there".to_string(),
    );
    let (status, _) = api.get(&format!("/sessions/{unused}")).await;
    assert_eq!(status, 404);
    let (status, record) = api.get(&format!("/sessions/{used}")).await;
    assert_eq!(
        (status, &record["turn_count"]),
        (200, &serde_json::json!(1))
    );
}

#[test]
fn after_a_rewind_of_the_conversation_fork_and_rewind_count_the_turns_that_are_there() {
    let (env, one, _) = setup();
    assert!(run_in(&env, &one, &["run", "fixture", "first"])
        .status
        .success());
    for prompt in ["second", "third"] {
        ok_in(&env, &one, &["run", "--continue", "fixture", prompt]);
    }
    let cut = [
        "sessions",
        "rewind",
        "--last",
        "--turn",
        "2",
        "--conversation",
    ];
    ok_in(&env, &one, &cut);
    let forked = run_in(&env, &one, &["sessions", "fork", "--last"]);
    let said = String::from_utf8_lossy(&forked.stdout);
    assert!(
        said.contains(": 1 turn inherited"),
        "{said}{}",
        String::from_utf8_lossy(&forked.stderr)
    );
    // Turn 2 is no longer there to go back to.
    let again = run_in(&env, &one, &cut);
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("valid turns are 1..1"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
}

#[test]
fn a_run_killed_mid_turn_is_listed_interrupted_at_once() {
    let (env, one, _) = setup();
    let script = r#"{turns: [{replies: [
        {tool_calls: [{name: "Bash", arguments: {command: "sleep 30"}}]},
        {text: "never"}]}]}"#;
    std::fs::write(env.path("b/resources/script.json5"), script).unwrap();
    env.run(&["build", "b"]).ok();
    let mut child = env
        .command(&["run", "fixture", "--approve", "go"])
        .current_dir(&one)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = || {
        std::fs::read_dir(env.home.path().join("sessions"))
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| {
                std::fs::read_to_string(d.path().join("events.jsonl"))
                    .is_ok_and(|j| j.contains("tool_call_started"))
            })
    };
    super::support::wait_until(std::time::Duration::from_secs(20), started, || {
        "the command never started".into()
    });
    child.kill().unwrap(); // SIGKILL: the run cleans nothing up
    child.wait().unwrap();
    let sessions = listed(&env, &one, &["sessions", "--json"]);
    assert_eq!(sessions[0]["status"], "idle", "{:?}", sessions[0]);
    assert_eq!(
        sessions[0]["last_turn"]["status"], "interrupted",
        "{:?}",
        sessions[0]
    );
    let table = ok_in(&env, &one, &["sessions"]);
    assert!(table.contains("interrupted"), "{table}");
}
