//! A newcomer's commands through the real binary: session commands (also with `--remote`), `init --provider`,
//! `--model scripted/<name>`, `doctor`, and errors said once.

use serde_json::{json, Value};

use super::provider_server::{ProviderServer, Reply};
use super::providers::{bundle, local};
use super::support::{write_bundle, Env, Server};

const TWO_STEP: &str = r#"{turns: [{replies: [
  {tool_calls: [{name: "Bash", arguments: {command: "echo step-$((40+2))"}}]},
  {text: "answered {{prompt}} after {{last_tool_output}}"}
]}]}"#;

fn ids(env: &Env, remote: &[&str]) -> Vec<String> {
    let mut args = remote.to_vec();
    args.extend(["sessions", "--json"]);
    env.run(&args)
        .json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

/// The session commands, run locally (`remote` empty) or against a server (`["--remote", url]`).
fn session_commands_work(env: &Env, remote: &[&str]) {
    let cmd = |rest: &[&str]| {
        let mut args = remote.to_vec();
        args.extend_from_slice(rest);
        env.run(&args)
    };
    let bundle_dir = env.path("sb").display().to_string();
    let first = cmd(&["run", &bundle_dir, "--prompt", "first", "--verbose"]);
    assert!(first.ok().contains("answered first after step-42"));
    let all = ids(env, remote);
    assert_eq!(all.len(), 1);
    let id = &all[0];
    assert!(
        first.stderr.contains(&format!("session: {id}")),
        "--verbose names the session: {}",
        first.stderr
    );
    let quiet = cmd(&["run", &bundle_dir, "--prompt", "second"]);
    assert!(
        !quiet.stderr.contains("session:"),
        "not a terminal and not --verbose: stderr stays quiet: {}",
        quiet.stderr
    );
    let second = ids(env, remote).into_iter().find(|s| s != id).unwrap();

    // Continue by an id prefix, then the most recent one.
    let prefix = &id[..8];
    assert!(cmd(&["run", "--session", prefix, "--prompt", "third"])
        .ok()
        .contains("answered third"));
    assert!(cmd(&["run", "--continue", "--prompt", "fourth"])
        .ok()
        .contains("answered fourth"));
    let list = {
        let mut args = remote.to_vec();
        args.extend(["sessions", "--json"]);
        env.run(&args).json()
    };
    let turns = |sid: &str| {
        list.as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == sid)
            .unwrap()["turn_count"]
            .clone()
    };
    assert_eq!(
        turns(id),
        3,
        "first, third and fourth ran in the first session"
    );
    assert_eq!(turns(&second), 1);

    // The transcript, as text and as events.
    let shown = cmd(&["sessions", "show", prefix]);
    let text = shown.ok();
    for part in [
        "> first",
        "> third",
        "> fourth",
        "[Bash]",
        "step-42",
        "answered fourth after step-42",
    ] {
        assert!(text.contains(part), "missing {part:?} in:\n{text}");
    }
    let json = cmd(&["sessions", "show", prefix, "--json"]);
    let events: Vec<Value> = json
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(events[0]["payload"]["type"], "turn_started");
    assert_eq!(
        events
            .iter()
            .filter(|e| e["payload"]["type"] == "turn_completed")
            .count(),
        3
    );

    let unknown = cmd(&["sessions", "show", "zzzz"]);
    assert_eq!(unknown.code, Some(1));
    assert!(
        unknown
            .stderr
            .contains("no session id starts with \"zzzz\""),
        "{}",
        unknown.stderr
    );

    // Delete by prefix; prune what is older than an age.
    assert!(cmd(&["sessions", "delete", &second[..8]])
        .ok()
        .contains(&second));
    assert_eq!(ids(env, remote), vec![id.clone()]);
    assert!(cmd(&["sessions", "prune", "--older-than", "1h"])
        .ok()
        .contains("no session is older"));
    assert!(
        cmd(&["sessions", "prune", "--older-than", "0s", "--dry-run"])
            .ok()
            .contains(&format!("would delete {id}"))
    );
    assert_eq!(ids(env, remote).len(), 1, "a dry run deletes nothing");
    cmd(&["sessions", "prune", "--older-than", "0s"]).ok();
    assert!(ids(env, remote).is_empty());
}

#[test]
fn sessions_are_shown_continued_deleted_and_pruned_by_id_prefix() {
    let env = Env::new();
    write_bundle(&env.path("sb"), TWO_STEP, "", "workspace_write");
    session_commands_work(&env, &[]);
    assert!(
        !env.home
            .path()
            .join("sessions")
            .read_dir()
            .unwrap()
            .any(|_| true),
        "deleting removes the session directories"
    );
}

#[test]
fn session_commands_work_against_a_server_with_remote() {
    let env = Env::new();
    write_bundle(&env.path("sb"), TWO_STEP, "", "workspace_write");
    let server = Server::start(env.home.path(), &[], &[]);
    let base = server.base.clone();
    session_commands_work(&env, &["--remote", &base]);
}

#[test]
fn continue_without_a_session_and_a_run_whose_turn_cannot_start_leave_no_session() {
    let env = Env::new();
    write_bundle(&env.path("sb"), TWO_STEP, "", "workspace_write");
    let none = env.run(&["run", "--continue", "--prompt", "x"]);
    assert_eq!(none.code, Some(1));
    assert!(
        none.stderr.contains("there is no session yet"),
        "{}",
        none.stderr
    );
    let bad = env.run(&["run", "./sb", "--model", "nope/x", "--prompt", "x"]);
    assert_eq!(bad.code, Some(1));
    assert!(
        bad.stderr.contains("unknown model provider \"nope\""),
        "{}",
        bad.stderr
    );
    assert!(
        ids(&env, &[]).is_empty(),
        "the failed run removed the session it made"
    );
    let both = env.run(&["run", "./sb", "--session", "abc", "--prompt", "x"]);
    assert!(
        both.failed()
            .contains("--session continues a session of its own bundle"),
        "a bundle and --session conflict: {}",
        both.stderr
    );
}

/// Makes `dir` look unchanged for `secs`.
fn age(dir: &std::path::Path, secs: u64) {
    let then = std::time::SystemTime::now() - std::time::Duration::from_secs(secs);
    std::fs::File::open(dir)
        .unwrap()
        .set_modified(then)
        .unwrap();
}

/// Runs `sessions prune --older-than 1h` and checks that it deleted `dir`, and said so.
fn prune_deletes(env: &Env, dir: &std::path::Path) {
    let pruned = env.run(&["sessions", "prune", "--older-than", "1h"]);
    assert!(
        pruned.ok().contains(&format!("deleted {}", dir.display())),
        "{}",
        pruned.stdout
    );
    assert!(!dir.exists());
}

#[test]
fn prune_removes_old_session_directories_a_killed_run_left_without_a_record_and_nothing_else() {
    let env = Env::new();
    write_bundle(&env.path("sb"), TWO_STEP, "", "workspace_write");
    env.run(&["run", "./sb", "--prompt", "kept"]).ok();
    let sessions = env.home.path().join("sessions");
    // What a run killed between making its directory and writing its record leaves behind.
    let leftover = |id: &str, age_s: u64, record: Option<&str>| {
        let dir = sessions.join(id);
        std::fs::create_dir_all(dir.join("workspace")).unwrap();
        std::fs::write(dir.join(".tmpXr3kQ9"), "{\"id\":").unwrap();
        if let Some(text) = record {
            std::fs::write(dir.join("session.json"), text).unwrap();
        }
        age(&dir, age_s);
        dir
    };
    let old = leftover("0b6f1c52-3f0e-4d7a-9a51-1f2e3d4c5b6a", 7200, None);
    let young = leftover("1c7a2d63-4a1f-4e8b-8b62-2a3f4e5d6c7b", 120, None);
    let damaged = leftover(
        "2d8b3e74-5b2a-4f9c-9c73-3b4a5f6e7d8c",
        7200,
        Some("not json"),
    );
    let foreign = leftover("notes", 7200, None);

    let dry = env.run(&["sessions", "prune", "--older-than", "1h", "--dry-run"]);
    let line = format!(
        "would delete {} (a session directory with no record",
        old.display()
    );
    assert!(dry.ok().contains(&line), "{}", dry.stdout);
    assert!(old.is_dir(), "a dry run deletes nothing");

    prune_deletes(&env, &old);
    assert!(
        young.is_dir(),
        "under ten minutes old, it may be a create under way"
    );
    assert!(
        damaged.is_dir(),
        "a record that cannot be read is a damaged session, not a leftover"
    );
    assert!(
        foreign.is_dir(),
        "a name the runtime never gives is not its to delete"
    );
    assert_eq!(
        ids(&env, &[]).len(),
        1,
        "the recorded session is young and stays"
    );
}

#[test]
fn prune_deletes_a_leftover_without_following_a_link_its_sandbox_made_to_the_host() {
    let env = Env::new();
    let canary = env.path("canary");
    std::fs::create_dir_all(&canary).unwrap();
    std::fs::write(canary.join("keep"), "a host file").unwrap();
    // The model's command, in the real sandbox, links the workspace to a host directory it cannot see.
    let script = r#"{turns: [{replies: [
  {tool_calls: [{name: "Bash", arguments: {command: "ln -s CANARY escape && echo linked"}}]},
  {text: "done {{last_tool_output}}"}
]}]}"#
        .replace("CANARY", &canary.display().to_string());
    write_bundle(&env.path("sb"), &script, "", "workspace_write");
    assert!(env
        .run(&["run", "./sb", "--workspace", "fresh", "--prompt", "x"])
        .ok()
        .contains("done linked"));
    let id = ids(&env, &[]).remove(0);
    let dir = env.home.path().join("sessions").join(&id);
    assert!(
        dir.join("workspace/escape").is_symlink(),
        "the sandbox made its link"
    );
    // Its record lost, as a run killed before writing one leaves a directory, and old enough to go.
    std::fs::remove_file(dir.join("session.json")).unwrap();
    age(&dir, 7200);

    prune_deletes(&env, &dir);
    assert!(
        canary.join("keep").is_file(),
        "prune followed the sandbox's link out of the session directory"
    );
}

#[test]
fn init_writes_a_commented_starter_for_each_provider_and_the_scripted_one_answers_offline() {
    let env = Env::new();
    for (provider, model, hint) in [
        (
            "anthropic",
            "anthropic/claude-sonnet-4-5",
            "ANTHROPIC_API_KEY",
        ),
        ("openai", "openai/gpt-4o-mini", "OPENAI_API_KEY"),
        ("local", "openai/qwen2.5:7b", "http://127.0.0.1:11434/v1"),
        ("scripted", "scripted/starter", "resources/script.json5"),
    ] {
        let dir = format!("start-{provider}");
        let out = env.run(&["init", &dir, "--provider", provider]);
        assert!(out.ok().contains(model), "{}", out.stdout);
        let agent = std::fs::read_to_string(env.path(&dir).join("agent.yaml")).unwrap();
        assert!(agent.contains(hint), "{provider}: {agent}");
        let manifest =
            std::fs::read_to_string(env.path(&dir).join("service.bundle.json5")).unwrap();
        assert!(
            manifest.contains("mode: \"read_only\"") && manifest.contains("Write and Edit fail"),
            "{manifest}"
        );
        env.run(&["build", &dir]).ok();
        let info = env.run(&["inspect", &dir, "--json"]).json();
        assert_eq!(
            format!(
                "{}/{}",
                info["model"]["provider"].as_str().unwrap(),
                info["model"]["name"].as_str().unwrap()
            ),
            model
        );
    }
    let missing_key = env.run(&["init", "keyless", "--provider", "anthropic"]);
    assert!(missing_key.ok().contains("ANTHROPIC_API_KEY is not set"));
    // It works in the directory it is run from.
    let here = std::fs::read_dir(env.work.path()).unwrap().count();
    let answer = env.run(&[
        "run",
        "start-scripted",
        "--prompt",
        "What is in this workspace?",
    ]);
    assert!(
        answer
            .ok()
            .contains(&format!("I looked in the workspace:\nfiles: {here}")),
        "{}",
        answer.stdout
    );
}

#[test]
fn model_scripted_name_works_on_any_bundle_and_never_reads_outside_it() {
    let env = Env::new();
    env.run(&["init", "claude", "--provider", "anthropic"]).ok();
    // No script of that name in the bundle: the model echoes, offline, with no key.
    let echo = env.run(&[
        "run",
        "./claude",
        "--model",
        "scripted/demo",
        "--prompt",
        "ping",
    ]);
    assert!(
        echo.ok()
            .contains("[scripted/demo: this bundle has no resources/demo.json5"),
        "{}",
        echo.stdout
    );
    assert!(echo.stdout.trim_end().ends_with("ping"));
    // A script of that name in resources/ is replayed.
    std::fs::write(
        env.path("claude/resources/demo.json5"),
        r#"{turns: [{replies: [{text: "from the demo script"}]}]}"#,
    )
    .unwrap();
    let scripted = env.run(&[
        "run",
        "./claude",
        "--model",
        "scripted/demo",
        "--prompt",
        "ping",
    ]);
    assert_eq!(scripted.ok().trim(), "from the demo script");
    // A name that climbs out of resources/ is not a path: the script beside the bundle is never read.
    std::fs::write(
        env.path("outside.json5"),
        r#"{turns: [{replies: [{text: "read from outside"}]}]}"#,
    )
    .unwrap();
    let climb = env.run(&[
        "run",
        "./claude",
        "--model",
        "scripted/../../outside",
        "--prompt",
        "p",
    ]);
    assert!(
        !climb.ok().contains("read from outside"),
        "{}",
        climb.stdout
    );
}

#[test]
fn doctor_checks_the_sandbox_the_store_and_a_bundles_model_server_and_key() {
    let env = Env::new();
    let fine = env.run(&["doctor"]);
    let text = fine.ok();
    assert!(text.contains("ok    bubblewrap"), "{text}");
    assert!(
        text.contains("a confined worker started and ran a command"),
        "{text}"
    );
    // The mount table every sandbox starts from: its count, on an ok line or a warning on a host with many.
    assert!(text.contains(" mounts on this host"), "{text}");
    // Which host user a sandbox is; a root supervisor's is root, and doctor says what that means.
    let who = if nix::unistd::geteuid().is_root() {
        "ok    sandboxes run as the owner of each session's directory, or as nobody (uid 65534"
    } else {
        "ok    sandboxes run as host uid"
    };
    assert!(text.contains(who), "{text}");
    assert!(
        text.contains(&format!("store {}", env.home.path().display())),
        "{text}"
    );

    // Told to use bubblewrap, without bwrap on PATH: a failing line that says how to install it (`auto` would fall
    // back to Landlock).
    let no_bwrap = env
        .command(&["doctor"])
        .env("PATH", "/nonexistent")
        .env("SERVICE_SANDBOX_BACKEND", "bwrap")
        .output()
        .unwrap();
    assert_eq!(no_bwrap.status.code(), Some(1));
    let out = String::from_utf8_lossy(&no_bwrap.stdout);
    assert!(
        out.contains("FAIL  bubblewrap (bwrap) is not installed")
            && out.contains("apt-get install bubblewrap"),
        "{out}"
    );

    // A real loopback server that lists its models.
    let listing = || {
        Reply::status(
            200,
            r#"{"object": "list", "data": [{"id": "m1"}, {"id": "m9"}]}"#,
            None,
        )
    };
    let server = ProviderServer::start(vec![listing(), listing()]);
    bundle(&env, "served", "openai", "m1", local(&server));
    bundle(&env, "unserved", "openai", "m2", local(&server));
    let served = env.run(&["doctor", "./served"]);
    assert!(
        served
            .ok()
            .contains(&format!("model openai/m1: {}/models answers", server.base)),
        "{}",
        served.stdout
    );
    let unserved = env.run(&["doctor", "./unserved"]);
    assert_eq!(unserved.code, Some(1));
    assert!(
        unserved
            .stdout
            .contains("does not serve m2; it lists m1, m9"),
        "{}",
        unserved.stdout
    );
    assert_eq!(server.recorded()[0].path, "/models");

    // Nothing listens: the line names the URL, the cause and the fix.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    bundle(
        &env,
        "down",
        "openai",
        "m1",
        json!({"base_url": format!("http://127.0.0.1:{port}/v1")}),
    );
    let down = env.run(&["doctor", "./down"]);
    assert_eq!(down.code, Some(1));
    assert!(
        down.stdout.contains(&format!(
            "cannot reach http://127.0.0.1:{port}/v1/models: connection refused"
        )) && down.stdout.contains("fix: start the model server"),
        "{}",
        down.stdout
    );

    // The official endpoint with no key: the line names the variable.
    bundle(
        &env,
        "claude",
        "anthropic",
        "claude-sonnet-4-5",
        Value::Null,
    );
    let keyless = env.run(&["doctor", "./claude"]);
    assert_eq!(keyless.code, Some(1));
    assert!(
        keyless.stdout.contains("set ANTHROPIC_API_KEY"),
        "{}",
        keyless.stdout
    );
}

#[test]
fn an_error_and_its_cause_are_printed_once() {
    let env = Env::new();
    let dir = env.init("b");
    // An I/O error quotes its cause in its own message; the chain must not add it a second time.
    std::fs::write(dir.join("agent.yaml"), b"\xff\xfe").unwrap();
    let out = env.run(&["build", "./b"]);
    let err = out.failed();
    assert!(err.contains("cannot read ./b/agent.yaml"), "{err}");
    assert_eq!(err.matches("valid UTF-8").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}
