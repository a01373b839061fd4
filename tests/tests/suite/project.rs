//! Working in the user's project: the current directory as the workspace of `run` and `tui`, the refusals of `$HOME`
//! and `/`, and project instructions (`AGENTS.md`) in the system prompt of a real HTTP provider's requests.

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::provider_server::ProviderServer;
use super::providers::{bundle, local, of_type, openai_text, openai_tool_call};
use super::support::{sandbox_tempdir, write_bundle, Env};
use super::tmux::Tmux;

/// A git repository given to the sandbox user: `.git/`, `AGENTS.md`, `src/main.rs`, and `src/CLAUDE.md`.
fn repository() -> tempfile::TempDir {
    let repo = sandbox_tempdir();
    let root = repo.path();
    std::fs::create_dir_all(root.join(".git")).unwrap();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::write(root.join("AGENTS.md"), "Answer in French.\n").unwrap();
    std::fs::write(root.join("src/main.rs"), "fn main() {}\n").unwrap();
    std::fs::write(root.join("src/CLAUDE.md"), "Keep src tidy.\n").unwrap();
    super::support::give_to_sandbox(root);
    repo
}

/// `run` of the openai bundle `oa` from `dir` with `extra` arguments: its events.
fn run_in(env: &Env, server: &ProviderServer, dir: &std::path::Path, extra: &[&str]) -> Vec<Value> {
    let mut args = vec!["run", "oa", "--prompt", "go", "--json"];
    args.extend_from_slice(extra);
    let out = env
        .command(&args)
        .current_dir(dir)
        .env("OPENAI_API_KEY", "sk-test")
        .env("OPENAI_BASE_URL", &server.base)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn run_in_a_repository_sees_its_files_and_gives_the_model_its_instructions() {
    let env = Env::new();
    let repo = repository();
    let src = repo.path().canonicalize().unwrap().join("src");
    let server = ProviderServer::start(vec![
        openai_tool_call("ls -A; ls ..; echo wrote > note.txt && echo writable"),
        openai_text("Bonjour."),
        openai_text("fresh"),
    ]);
    bundle(&env, "oa", "openai", "gpt-test", local(&server));
    env.run(&["build", "oa"]).ok();

    // From src/ of the repository: the session works there and reads the instructions from the root down.
    let events = run_in(&env, &server, &src, &[]);
    let started = of_type(&events, "turn_started")[0];
    let root = src.parent().unwrap();
    assert_eq!(
        started["context"]["instructions"],
        json!([
            root.join("AGENTS.md").display().to_string(),
            src.join("CLAUDE.md").display().to_string()
        ])
    );
    let output = of_type(&events, "tool_call_finished")[0]["output"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        output.contains("CLAUDE.md") && output.contains("main.rs"),
        "{output}"
    );
    // The sandbox sees src/ and nothing above it: `ls ..` lists its own root, not the repository.
    assert!(!output.contains("AGENTS.md"), "{output}");
    assert!(output.contains("writable"), "{output}");
    assert_eq!(
        std::fs::read_to_string(src.join("note.txt")).unwrap(),
        "wrote\n"
    );

    let reqs = server.recorded();
    let system = reqs[0].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    let agents = system
        .find("Answer in French.")
        .expect("AGENTS.md is in the system prompt");
    let claude = system
        .find("Keep src tidy.")
        .expect("src/CLAUDE.md is in the system prompt");
    assert!(
        system.starts_with("Be brief."),
        "the bundle's prompt comes first: {system}"
    );
    assert!(agents < claude, "outermost first: {system}");
    // The worker's call after the tool result sends the same system prompt as the supervisor's first call.
    assert_eq!(
        reqs[1].body["messages"][0]["content"],
        reqs[0].body["messages"][0]["content"]
    );

    // A fresh workspace has no instructions, wherever it is started from.
    let events = run_in(&env, &server, &src, &["--workspace", "fresh"]);
    assert!(of_type(&events, "turn_started")[0]["context"]
        .get("instructions")
        .is_none());
    assert_eq!(reqs.len() + 1, server.recorded().len());
    assert_eq!(
        server.recorded()[2].body["messages"][0]["content"],
        "Be brief."
    );

    // inspect --cwd says what a session there would read.
    let shown = env.run(&["inspect", "oa", "--cwd", src.to_str().unwrap()]);
    assert!(
        shown.ok().contains(&format!(
            "instructions {}",
            root.join("AGENTS.md").display()
        )),
        "{}",
        shown.stdout
    );
}

#[test]
fn a_bundle_can_turn_project_instructions_off() {
    let env = Env::new();
    let repo = repository();
    let server = ProviderServer::start(vec![openai_text("ok")]);
    bundle(&env, "oa", "openai", "gpt-test", local(&server));
    let agent = env.path("oa/agent.yaml");
    let mut spec: Value = serde_json::from_str(&std::fs::read_to_string(&agent).unwrap()).unwrap();
    spec["project_instructions"] = json!(false);
    std::fs::write(&agent, spec.to_string()).unwrap();
    env.run(&["build", "oa"]).ok();
    let events = run_in(&env, &server, repo.path(), &[]);
    assert!(of_type(&events, "turn_started")[0]["context"]
        .get("instructions")
        .is_none());
    assert_eq!(
        server.recorded()[0].body["messages"][0]["content"],
        "Be brief."
    );
    let shown = env.run(&["inspect", "oa", "--cwd", repo.path().to_str().unwrap()]);
    assert!(shown.ok().contains("off (project_instructions: false"));
}

#[test]
fn a_read_only_bundle_cannot_write_the_project_and_a_writable_one_can() {
    let env = Env::new();
    let project = sandbox_tempdir();
    let script = r#"{turns: [{replies: [
  {tool_calls: [{name: "Bash", arguments: {command: "echo made > made.txt && echo WROTE || echo REFUSED"}}]},
  {text: "{{last_tool_output}}"}
]}]}"#;
    write_bundle(&env.path("ro"), script, "", "read_only");
    env.run(&["build", "ro"]).ok();
    let run = |bundle: &str| {
        env.command(&["run", bundle, "--prompt", "go"])
            .current_dir(project.path())
            .output()
            .unwrap()
    };
    let out = run("fixture");
    assert!(String::from_utf8_lossy(&out.stdout).contains("REFUSED"));
    assert!(!project.path().join("made.txt").exists());

    write_bundle(&env.path("rw"), script, "", "workspace_write");
    std::fs::write(
        env.path("rw/service.bundle.json5"),
        std::fs::read_to_string(env.path("rw/service.bundle.json5"))
            .unwrap()
            .replace("\"fixture\"", "\"writer\""),
    )
    .unwrap();
    env.run(&["build", "rw"]).ok();
    let out = run("writer");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("WROTE"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(project.path().join("made.txt")).unwrap(),
        "made\n"
    );
}

#[test]
fn home_and_the_root_are_refused_as_the_workspace_unless_named() {
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [{text: "answered"}]}]}"#,
        "",
        "read_only",
    );
    env.run(&["build", "b"]).ok();
    let home = sandbox_tempdir();
    let from = |dir: &std::path::Path, extra: &[&str]| {
        let mut args = vec!["run", "fixture", "--prompt", "go"];
        args.extend_from_slice(extra);
        super::support::Run::from(
            env.command(&args)
                .current_dir(dir)
                .env("HOME", home.path())
                .output()
                .unwrap(),
        )
    };
    let refused = from(home.path(), &[]);
    let err = refused.failed();
    assert!(err.contains("your home directory"), "{err}");
    assert!(
        err.contains("--cwd") && err.contains("--workspace fresh"),
        "{err}"
    );
    assert!(from(std::path::Path::new("/"), &[])
        .failed()
        .contains("the root directory /"));
    // Named, or asked for fresh, it runs.
    assert!(from(home.path(), &["--cwd", home.path().to_str().unwrap()])
        .ok()
        .contains("answered"));
    assert!(from(home.path(), &["--workspace", "fresh"])
        .ok()
        .contains("answered"));
    assert_eq!(
        env.run(&["sessions", "--json"])
            .json()
            .as_array()
            .unwrap()
            .len(),
        2
    );
}

#[test]
fn tui_cwd_sets_the_workspace_and_slash_cwd_is_checked_when_typed() {
    let env = Env::new();
    let project = sandbox_tempdir();
    std::fs::create_dir_all(project.path().join("sub")).unwrap();
    super::support::give_to_sandbox(project.path());
    write_bundle(
        &env.path("tb"),
        r#"{turns: [{replies: [{tool_calls: [{name: "Bash", arguments: {command: "echo at-$(pwd)"}}]}, {text: "{{last_tool_output}}"}]}]}"#,
        "",
        "read_only",
    );
    let tmux = Tmux::service_rs(
        &env,
        &format!("tui --bundle ./tb --cwd {}", project.path().display()),
    );
    let real = project.path().canonicalize().unwrap();
    tmux.wait_for(&format!("workspace {} (read-only", real.display()));
    tmux.type_line("/cwd /etc");
    tmux.wait_for("/cwd: /etc is outside the session's workspace");
    tmux.type_line("/cwd nowhere");
    tmux.wait_for("nowhere is not a directory");
    tmux.type_line("/cwd sub");
    tmux.wait_for(&format!("next turns run in {}", real.join("sub").display()));
    tmux.type_line("where");
    tmux.wait_for("at-/workspace/sub");
    tmux.type_line("/quit");
}

#[test]
fn a_sandbox_cannot_plant_an_instructions_link_that_makes_the_supervisor_read_a_host_file() {
    let env = Env::new();
    let project = sandbox_tempdir();
    // A file only the supervisor's user may read, outside the project.
    let host = tempfile::tempdir().unwrap();
    let secret = host.path().join("secret.txt");
    std::fs::write(&secret, "HOST-SECRET-7731").unwrap();
    std::fs::set_permissions(&secret, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let server = ProviderServer::start(vec![
        openai_tool_call(&format!(
            "ln -s {} AGENTS.md && ln -s {} CLAUDE.md && echo planted",
            secret.display(),
            secret.display()
        )),
        openai_text("planted them"),
        openai_text("next session"),
    ]);
    bundle(&env, "oa", "openai", "gpt-test", local(&server));
    env.run(&["build", "oa"]).ok();
    let first = run_in(&env, &server, project.path(), &[]);
    assert!(
        of_type(&first, "tool_call_finished")[0]["output"]
            .as_str()
            .unwrap()
            .contains("planted"),
        "{first:?}"
    );
    assert!(project.path().join("AGENTS.md").is_symlink());
    // The next session in that directory: the links lead out of the project, so nothing is read through them.
    let next = run_in(&env, &server, project.path(), &[]);
    assert!(of_type(&next, "turn_started")[0]["context"]
        .get("instructions")
        .is_none());
    for req in server.recorded() {
        let body = req.body.to_string();
        assert!(
            !body.contains("HOST-SECRET-7731"),
            "the host file reached the model: {body}"
        );
    }
}
