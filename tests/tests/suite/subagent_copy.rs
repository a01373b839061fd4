//! The attack on `isolation: copy`: a session working in a parent directory of another session's cwd swaps that cwd
//! for a link to a second host user's private directory between the other's turns. The copy for the other's next
//! `Agent` call must refuse the link, and never hand the child those files.

use std::os::unix::fs::PermissionsExt;

use serde_json::json;

use super::subagents::{agent_call, bundle, plain, session, subagent, tool_results};
use super::support::{final_message, run_turn, runtime, sandbox_tempdir, Env};

/// A read-only parent bundle whose model `replies`, with a subagent `reader` of `isolation: copy` that runs `command`
/// and answers `prefix` and its output; the parent's directory.
fn copy_pair(
    env: &Env,
    command: &str,
    prefix: &str,
    replies: serde_json::Value,
) -> std::path::PathBuf {
    let reader = env.path("reader");
    plain(
        &reader,
        "reader",
        "workspace_write",
        json!([
            {"tool_calls": [{"name": "Bash", "arguments": {"command": command}}]},
            {"text": format!("{prefix}{{{{last_tool_output}}}}")},
        ]),
    );
    let parent = env.path("parent");
    let mut copy = subagent("reader", &reader);
    copy["isolation"] = json!("copy");
    bundle(
        &parent,
        "parent",
        "read_only",
        &[],
        json!({"subagents": [copy]}),
        replies,
    );
    parent
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cwd_another_session_swapped_for_a_link_is_not_copied_for_a_subagent() {
    let env = Env::new();
    // A second host user's private directory, with a secret only that user may read.
    let victim = tempfile::tempdir().unwrap();
    let private = victim.path().join("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::write(private.join("secret.txt"), "s3cret-of-user-4242\n").unwrap();
    std::fs::set_permissions(
        private.join("secret.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    if nix::unistd::geteuid().is_root() {
        for p in [private.join("secret.txt"), private.clone()] {
            std::os::unix::fs::lchown(&p, Some(4242), Some(4242)).unwrap();
        }
    }

    // The child prints what its copy holds. The victim session A is read-only, so no checkpoint looks at its cwd
    // first; its first turn starts its worker, its second asks for the copy-isolated child.
    let parent = copy_pair(&env, "ls; cat secret.txt 2>&1", "child saw: ", json!([]));
    std::fs::write(
        parent.join("resources/script.json5"),
        json!({"turns": [
            {"when": "warm", "replies": [
                {"tool_calls": [{"name": "Bash", "arguments": {"command": "true"}}]},
                {"text": "warm"},
            ]},
            {"replies": [
                {"tool_calls": [agent_call("reader", "look")]},
                {"text": "parent: {{last_tool_output}}"},
            ]},
        ]})
        .to_string(),
    )
    .unwrap();
    // The attacker B works in the directory above A's cwd and swaps it for a link.
    let attacker = env.path("attacker");
    plain(
        &attacker,
        "attacker",
        "workspace_write",
        json!([
            {"tool_calls": [{"name": "Bash", "arguments": {"command": format!(
                "mv a a.orig && ln -s {} a && echo swapped", private.display())}}]},
            {"text": "{{last_tool_output}}"},
        ]),
    );

    let above = sandbox_tempdir();
    let a_cwd = above.path().join("a");
    std::fs::create_dir(&a_cwd).unwrap();
    std::fs::write(a_cwd.join("mine.txt"), "a's own file\n").unwrap();
    super::support::give_to_sandbox(above.path());

    let rt = runtime(env.home.path());
    let a = session(&rt, &parent, Some(&a_cwd)).await;
    let b = session(&rt, &attacker, Some(above.path())).await;
    let (_, warm) = run_turn(&rt, &a, "warm up").await;
    assert_eq!(final_message(&warm), "warm");
    let (_, swap) = run_turn(&rt, &b, "swap").await;
    assert_eq!(final_message(&swap).trim(), "swapped");
    assert!(std::fs::symlink_metadata(&a_cwd)
        .unwrap()
        .file_type()
        .is_symlink());

    let (_, events) = run_turn(&rt, &a, "delegate").await;
    let results = tool_results(&events);
    let agent = results
        .iter()
        .find(|(tool, _)| tool == "Agent")
        .map(|(_, out)| out.clone())
        .unwrap_or_default();
    let answer = final_message(&events);
    assert!(
        !answer.contains("s3cret"),
        "the child read the secret: {answer}"
    );
    assert!(
        agent.contains("copy of the workspace failed") && agent.contains("is a symbolic link"),
        "the Agent call names the link: {agent}"
    );
    // No child session was kept, and nothing of the private directory was copied anywhere.
    let sessions = rt.list_sessions().await.unwrap();
    assert!(sessions.iter().all(|s| s.parent.is_none()), "{sessions:?}");
    let copied = walkdir::WalkDir::new(env.home.path())
        .into_iter()
        .flatten()
        .any(|e| e.file_name() == "secret.txt");
    assert!(!copied, "secret.txt was copied into the store");
    rt.shutdown("test done").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_belongs_to_the_childs_sandbox_user_not_to_the_files_owner() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipped: only a root supervisor gives files to another user");
        return;
    }
    let env = Env::new();
    let parent = copy_pair(
        &env,
        "stat -c '%u %n' notes.txt",
        "",
        json!([
            {"tool_calls": [agent_call("reader", "look")]},
            {"text": "{{last_tool_output}}"},
        ]),
    );
    // A project that user 4242 owns, readable by everyone.
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), "notes\n").unwrap();
    for p in [
        project.path().join("notes.txt"),
        project.path().to_path_buf(),
    ] {
        std::os::unix::fs::lchown(&p, Some(4242), Some(4242)).unwrap();
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    let rt = runtime(env.home.path());
    let a = session(&rt, &parent, Some(project.path())).await;
    let (_, events) = run_turn(&rt, &a, "go").await;
    let child = rt
        .list_sessions()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.parent.is_some())
        .expect("the child");
    let copied = std::path::Path::new(&child.cwd).join("notes.txt");
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        std::fs::metadata(&copied).unwrap().uid(),
        65534,
        "the copy is the sandbox user's: {}",
        final_message(&events)
    );
    rt.shutdown("test done").await;
}
