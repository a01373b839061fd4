//! `service-rs run` and `service-rs sessions` through the real binary.

use super::support::{write_bundle, Env};

fn repo_example() -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap();
    root.join("examples/hello").display().to_string()
}

#[test]
fn run_answers_a_prompt_offline_with_a_real_bash_call() {
    let env = Env::new();
    let run = env.run(&["run", &repo_example(), "--prompt", "What is in here?"]);
    let out = run.ok();
    assert!(out.starts_with("You asked: \"What is in here?\""), "{out}");
    assert!(
        out.contains("kernel: Linux"),
        "the answer carries the real command output: {out}"
    );
    let sessions = env.run(&["sessions", "--json"]).json();
    assert_eq!(sessions.as_array().unwrap().len(), 1);
    assert_eq!(sessions[0]["turn_count"], 1);
    assert_eq!(sessions[0]["last_turn"]["status"], "completed");
}

#[test]
fn run_from_the_store_after_build() {
    let env = Env::new();
    env.run(&["build", &repo_example()]).ok();
    let out = env
        .run(&["run", "hello", "--prompt", "hi"])
        .ok()
        .to_string();
    assert!(out.contains("You asked: \"hi\""), "{out}");
}

#[test]
fn run_json_streams_every_event_as_a_json_line() {
    let env = Env::new();
    let run = env.run(&["run", &repo_example(), "--prompt", "hi", "--json"]);
    let lines: Vec<serde_json::Value> = run
        .ok()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.first().unwrap()["payload"]["type"], "turn_started");
    assert_eq!(lines.last().unwrap()["payload"]["type"], "turn_completed");
    assert!(lines
        .iter()
        .any(|l| l["payload"]["type"] == "exec_command_output_delta"));
    let ids: Vec<u64> = lines
        .iter()
        .map(|l| l["id"].as_str().unwrap().parse().unwrap())
        .collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>());
}

#[test]
fn run_fails_with_the_provider_error_and_a_non_zero_exit() {
    let env = Env::new();
    write_bundle(
        &env.path("failing"),
        r#"{turns: [{replies: [{error: "the scripted model is down"}]}]}"#,
        "",
        "read_only",
    );
    let err = env
        .run(&["run", "./failing", "--prompt", "hi"])
        .failed()
        .to_string();
    assert!(
        err.contains("(provider_error): the scripted model is down"),
        "{err}"
    );
}

#[test]
fn run_with_an_unknown_bundle_or_model_says_what_is_wrong() {
    let env = Env::new();
    let err = env
        .run(&["run", "ghost", "--prompt", "hi"])
        .failed()
        .to_string();
    assert!(
        err.contains("no bundle named \"ghost\" is installed"),
        "{err}"
    );
    let err = env
        .run(&["run", &repo_example(), "--prompt", "hi", "--model", "nope"])
        .failed()
        .to_string();
    assert!(err.contains("--model takes provider/name"), "{err}");
    let err = env
        .run(&[
            "run",
            &repo_example(),
            "--prompt",
            "hi",
            "--model",
            "acme/x",
        ])
        .failed()
        .to_string();
    assert!(err.contains("unknown model provider \"acme\""), "{err}");
}

/// `run` with `args` and `stdin` piped in.
fn run_with_stdin(env: &Env, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = env
        .command(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn a_prompt_piped_on_stdin_or_given_as_a_dash_is_run_and_an_empty_one_leaves_no_session() {
    let env = Env::new();
    let example = repo_example();
    for args in [
        vec!["run", &example],
        vec!["run", &example, "--prompt", "-"],
    ] {
        let out = run_with_stdin(&env, &args, "from a pipe\n");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.starts_with("You asked: \"from a pipe\""), "{text}");
    }
    let before = env
        .run(&["sessions", "--json"])
        .json()
        .as_array()
        .unwrap()
        .len();
    let out = run_with_stdin(&env, &["run", &example], "  \n");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the prompt on stdin is empty"));
    let after = env
        .run(&["sessions", "--json"])
        .json()
        .as_array()
        .unwrap()
        .len();
    assert_eq!(before, after, "a run without a prompt creates no session");
}

#[test]
fn completions_register_for_bash_zsh_and_fish_and_complete_bundles_and_sessions_in_bash() {
    let env = Env::new();
    for (shell, marker) in [
        ("bash", "complete -o"),
        ("zsh", "#compdef service-rs"),
        (
            "fish",
            "complete --keep-order --exclusive --command service-rs",
        ),
    ] {
        let out = env.run(&["completions", shell]).ok().to_string();
        assert!(
            out.contains(marker) && out.contains("COMPLETE"),
            "{shell}: {}",
            &out[..out.len().min(300)]
        );
    }
    let help = env.run(&["--help"]).ok().to_string();
    assert!(!help.contains("  worker "), "{help}");
    assert!(
        help.contains("push, pull") && help.contains("tui"),
        "--remote's help lists what runs remotely: {help}"
    );
    assert!(env
        .run(&["completions", "tcsh"])
        .failed()
        .contains("invalid value"));

    // A real bash, with the registration sourced, completes from the store as it is.
    let bundle = env.path("bundle");
    super::support::write_bundle(
        &bundle,
        r#"{turns: [{replies: [{text: "hi"}]}]}"#,
        "",
        "read_only",
    );
    env.run(&["build", bundle.to_str().unwrap()]).ok();
    env.run(&["run", "fixture", "--prompt", "a session to complete"])
        .ok();
    let id = env.run(&["sessions", "--json"]).json()[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let bin = super::support::binary();
    let term = super::tmux::Tmux::start(&format!(
        "cd {} && env SERVICE_HOME={} PATH={}:$PATH bash --norc --noprofile",
        env.work.path().display(),
        env.home.path().display(),
        bin.parent().unwrap().display()
    ));
    term.type_line("source <(service-rs completions bash); echo sourced");
    term.wait_for("sourced");
    term.keys(&["-l", "service-rs inspect fix"]);
    term.keys(&["Tab", "Tab"]);
    term.wait_for("service-rs inspect fixture");
    term.keys(&["C-u"]);
    term.keys(&["-l", &format!("service-rs sessions show {}", &id[..4])]);
    term.keys(&["Tab"]);
    term.wait_for(&format!("service-rs sessions show {id}"));
}

#[test]
fn a_one_shot_run_exits_without_waiting_for_its_sandbox_and_leaves_nothing_behind() {
    let env = Env::new();
    // The attack: a command that leaves a detached process behind, in its own session, as a model could write it.
    let marker = format!("sleep 3{}", std::process::id() % 1000);
    let script = format!(
        r#"{{turns: [{{replies: [{{tool_calls: [{{name: "Bash", arguments: {{command: "setsid nohup {marker} > /dev/null 2>&1 & echo left"}}}}]}}, {{text: "done: {{{{last_tool_output}}}}"}}]}}]}}"#
    );
    write_bundle(&env.path("leaver"), &script, "", "workspace_write");
    let (out, events) = super::providers::run_json(&env, "./leaver", &[], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = events
        .iter()
        .find(|e| e["payload"]["type"] == "turn_completed")
        .expect("turn_completed");
    assert!(
        done["payload"]["payload"]["final_message"]
            .as_str()
            .is_some_and(|m| m.contains("left")),
        "{done}"
    );
    let id = events[0]["session_id"]
        .as_str()
        .expect("session_id")
        .to_string();
    let cgroups: Vec<std::path::PathBuf> = super::support::own_cgroups()
        .into_iter()
        .map(|(_, dir)| dir.join(format!("service-rs-{id}")))
        .collect();
    super::support::wait_until(
        std::time::Duration::from_secs(5),
        || {
            super::support::processes_with(&format!("--label {id}")) == 0
                && super::support::processes_with(&marker) == 0
                && cgroups.iter().all(|c| !c.exists())
        },
        || {
            format!(
                "the run's sandbox outlived it: worker {}, left process {}, cgroups {:?}",
                super::support::processes_with(&format!("--label {id}")),
                super::support::processes_with(&marker),
                cgroups.iter().filter(|c| c.exists()).collect::<Vec<_>>()
            )
        },
    );
    assert!(
        !env.home.path().join("run").join(&id).exists(),
        "the worker's socket directory was left"
    );
}

#[test]
fn a_reader_that_closes_the_pipe_early_ends_listing_commands_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let env = Env::new();
    let hello = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/hello");
    env.run(&["build", hello.to_str().unwrap()]).ok();
    env.run(&["run", "hello", "--prompt", "hi"]).ok();
    for args in [
        &["sessions", "--json"][..],
        &["inspect", "hello", "--json"],
        &["bundles", "--json"],
        &["completions", "zsh"],
    ] {
        let mut child = env
            .command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // The reader goes away before the command writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.code() == Some(0) || out.status.signal() == Some(13),
            "{args:?}: {:?}",
            out.status
        );
        assert!(
            out.stderr.is_empty(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
