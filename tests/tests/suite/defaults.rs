//! The user's defaults in `$SERVICE_HOME/config.toml`, set with `service-rs config`: the default bundle a bare
//! prompt runs, the default model, and how approvals are answered (`ask`, `auto-edit`, `deny`).

use super::support::{write_bundle, Env};

const SCRIPT: &str = r#"{turns: [
  {when: "edit", replies: [
    {tool_calls: [{name: "Write", arguments: {file_path: "out.txt", content: "auto"}}]},
    {tool_calls: [{name: "Write", arguments: {file_path: "/tmp/outside.txt", content: "no"}}]},
    {tool_calls: [{name: "Bash", arguments: {command: "echo ran-bash"}}]},
    {text: "done: {{last_tool_output}}"},
  ]},
  {replies: [{text: "you said {{prompt}}"}]},
]}"#;

fn setup() -> Env {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        SCRIPT,
        "permissions:\n  default: ask\n  rules:\n    - { tool: Read, action: allow }\n",
        "workspace_write",
    );
    env.run(&["build", "b"]).ok();
    env
}

#[test]
fn a_bare_prompt_runs_the_default_bundle_and_says_how_to_set_one() {
    let env = setup();
    // With no default bundle, a bare prompt goes to the built-in coding agent, which says how to give it a model
    // when the machine has none (a closed port stands for no local server).
    let none = env
        .command(&["fix the failing test"])
        .env("SERVICE_LOCAL_MODELS", "http://127.0.0.1:9/v1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&none.stderr);
    assert!(
        !none.status.success() && err.contains("service-rs config set default_model"),
        "{err}"
    );
    // A single unknown word is a mistyped command, not a prompt.
    assert!(env
        .run(&["bundels"])
        .failed()
        .contains("unrecognized subcommand"));

    std::fs::write(
        env.home.path().join("config.toml"),
        "# mine\napprovals = \"ask\"\n",
    )
    .unwrap();
    env.run(&["config", "set", "default_bundle", "fixture"])
        .ok();
    assert!(env
        .run(&["fix the failing test"])
        .ok()
        .contains("you said fix the failing test"));
    // `run` takes the prompt positionally, after a bundle or alone.
    assert!(env
        .run(&["run", "fixture", "hi there"])
        .ok()
        .contains("you said hi there"));
    assert!(env.run(&["run", "hello"]).ok().contains("you said hello"));

    // default_model is a --model for every run; --model still wins.
    env.run(&["config", "set", "default_model", "scripted/other"])
        .ok();
    let model_of = |extra: &[&str]| {
        let mut args = vec!["run", "x", "--json"];
        args.extend_from_slice(extra);
        let run = env.run(&args);
        let started: serde_json::Value = run
            .ok()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .find(|e| e["payload"]["type"] == "turn_started")
            .expect("a turn_started event");
        started["payload"]["payload"]["context"]["model"]["name"].clone()
    };
    assert_eq!(model_of(&[]), "other");
    assert_eq!(model_of(&["--model", "scripted/mine"]), "mine");

    let listed = env.run(&["config", "list"]);
    assert!(
        listed.ok().contains("default_bundle = fixture"),
        "{}",
        listed.stdout
    );
    assert!(listed.ok().contains("default_model = scripted/other"));
    let text = std::fs::read_to_string(env.home.path().join("config.toml")).unwrap();
    assert!(
        text.starts_with("# mine\napprovals = \"ask\"\n"),
        "config set keeps the file's comments: {text}"
    );
    assert!(env
        .run(&["config", "set", "approvals", "sometimes"])
        .failed()
        .contains("not one of ask, auto-edit, deny"));
    assert!(env
        .run(&["config", "get", "colour"])
        .failed()
        .contains("unknown key"));
    env.run(&["config", "unset", "default_model"]).ok();
    assert_eq!(env.run(&["config", "get", "default_model"]).code, Some(1));
}

#[test]
fn auto_edit_allows_writes_inside_the_workspace_and_asks_for_the_rest() {
    let env = setup();
    env.run(&["config", "set", "approvals", "auto-edit"]).ok();
    // No terminal to ask on: what auto-edit does not allow is denied, with the message that says so.
    let run = env.run(&["run", "fixture", "please edit"]);
    assert_eq!(
        std::fs::read_to_string(env.path("out.txt")).unwrap(),
        "auto"
    );
    assert!(!std::path::Path::new("/tmp/outside.txt").exists());
    assert!(
        run.stderr.contains("denied Write `/tmp/outside.txt`"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains("denied Bash `echo ran-bash`"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("denied Write `/workspace/out.txt`"),
        "{}",
        run.stderr
    );

    std::fs::remove_file(env.path("out.txt")).unwrap();
    env.run(&["config", "set", "approvals", "deny"]).ok();
    let run = env.run(&["run", "fixture", "please edit"]);
    assert!(
        run.ok().contains("was denied by the operator"),
        "{}",
        run.stdout
    );
    assert!(!env.path("out.txt").exists());
    // --approve still answers for this run.
    env.run(&["run", "fixture", "please edit", "--approve"])
        .ok();
    assert_eq!(
        std::fs::read_to_string(env.path("out.txt")).unwrap(),
        "auto"
    );
}
