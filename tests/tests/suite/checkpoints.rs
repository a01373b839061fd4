//! Workspace checkpoints, rewinds and forks: a scripted bundle edits, creates and deletes files with Bash over
//! several turns in a real sandbox; a rewind restores exactly the tree before a turn and cuts the conversation;
//! forks copy a fresh workspace or share a host directory; the sandbox's link swaps never make a restore write
//! outside the workspace; the size bound drops the oldest checkpoints and says so.

use std::path::Path;

use serde_json::{json, Value};

use super::http_client::{task, Api};
use super::providers::of_type;
use super::support::{give_to_sandbox, sandbox_tempdir, write_bundle, Env, Server};

const TOKEN: &str = "checkpoints-token";

/// Turns that change the workspace with commands; any other prompt answers with the number of messages sent.
const SCRIPT: &str = r#"{turns: [
  {when: "first", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "echo one > edit.txt && echo doomed > doomed.txt && mkdir dir && echo x > dir/x.txt"}}]},
    {text: "did first"}]},
  {when: "second", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "echo two >> edit.txt && rm doomed.txt && echo new > created.txt"}}]},
    {text: "did second"}]},
  {when: "third", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "rm -r dir && echo three > edit.txt"}}]},
    {text: "did third"}]},
  {when: "swap", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "rm victim.txt && ln -s HOST/secret.txt victim.txt && rm -r sub && ln -s HOST/dir sub && rm peek && echo replaced > peek"}}]},
    {text: "swapped"}]},
  {when: "plant", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "echo mine > victim.txt && mkdir sub && echo inside > sub/f.txt && ln -s HOST/secret.txt peek"}}]},
    {text: "planted"}]},
  {when: "hide", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "mkdir -p .git/info && rm -f .git/info/exclude && ln -s HOST/rules .git/info/exclude && echo mine > new.txt"}}]},
    {text: "hidden"}]},
  {when: "cover", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "echo '*' > .gitignore && echo tampered > src.txt"}}]},
    {text: "covered"}]},
  {when: "build", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "echo fixed >> src.txt && echo rebuilt > target/debug/app && echo fresh > target/fresh.o"}}]},
    {text: "built"}]},
  {when: "grow", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "head -c 460000 /dev/urandom > big.bin"}}]},
    {text: "grown"}]},
  {replies: [{text: "count {{message_count}}"}]},
]}"#;

/// Builds the scripted bundle `fixture` (writable, Bash allowed) into `env`'s store, with `HOST` in its commands
/// replaced by `host`.
fn build(env: &Env, host: &Path) {
    let src = tempfile::tempdir().unwrap();
    let script = SCRIPT.replace("HOST", &host.display().to_string());
    write_bundle(
        src.path(),
        &script,
        "permissions:\n  default: allow\n",
        "workspace_write",
    );
    env.run(&["build", src.path().to_str().unwrap()]).ok();
}

/// The directory as sorted (path, content) pairs: file contents, link targets, `dir` for directories.
fn listing(dir: &Path) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .flatten()
        .map(|e| {
            let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
            let what = if e.path_is_symlink() {
                format!("-> {}", std::fs::read_link(e.path()).unwrap().display())
            } else if e.file_type().is_dir() {
                "dir".into()
            } else {
                String::from_utf8_lossy(&std::fs::read(e.path()).unwrap()).into_owned()
            };
            (rel, what)
        })
        .collect();
    out.sort();
    out
}

fn session_id(env: &Env) -> String {
    let list = env.run(&["sessions", "--json"]).json();
    list.as_array().unwrap().last().unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string()
}

fn turn(env: &Env, prompt: &str) -> String {
    env.run(&["run", "--continue", "fixture", prompt])
        .ok()
        .trim()
        .to_string()
}

#[test]
fn a_rewind_restores_exactly_the_tree_before_a_turn_and_cuts_the_conversation() {
    let env = Env::new();
    build(&env, env.home.path());
    std::fs::write(env.path("user.txt"), "the user's own file\n").unwrap();
    give_to_sandbox(env.work.path());
    assert_eq!(
        env.run(&["run", "fixture", "first"]).ok().trim(),
        "did first"
    );
    let before_two = listing(env.work.path());
    let counted = turn(&env, "count");
    assert_eq!(turn(&env, "second"), "did second");
    assert_eq!(turn(&env, "third"), "did third");
    let id = session_id(&env);

    // What each turn changed, Bash included.
    let diff = env
        .run(&["sessions", "diff", &id, "--turn", "3"])
        .ok()
        .to_string();
    assert!(diff.contains("+two\n"), "{diff}");
    assert!(
        diff.contains("-doomed\n") && diff.contains("+new\n"),
        "{diff}"
    );

    let out = env
        .run(&["sessions", "rewind", &id, "--turn", "2"])
        .ok()
        .to_string();
    assert!(out.contains("to before turn 2"), "{out}");
    assert_eq!(listing(env.work.path()), before_two);
    // The conversation is as it was before turn 2: the model is sent what it was sent then.
    assert_eq!(turn(&env, "count"), counted);

    let journal = env
        .run(&["sessions", "show", &id, "--json"])
        .ok()
        .to_string();
    let events: Vec<Value> = journal
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let rewound = of_type(&events, "session_rewound");
    assert_eq!(
        *rewound[0],
        json!({"to_turn": 2, "files": true, "conversation": true, "restored": 4})
    );
    let created = of_type(&events, "checkpoint_created");
    assert_eq!(created.len(), 5, "one before each turn");
    // The journal keeps everything, and `sessions show` numbers the turns.
    let shown = env.run(&["sessions", "show", &id]).ok().to_string();
    assert!(
        shown.contains("did third") && shown.contains("(turn 5 · "),
        "{shown}"
    );
    assert!(shown.contains("~ rewound to before turn 2"), "{shown}");
}

#[test]
fn a_rewind_names_the_valid_turns_and_refuses_host_changes_unless_forced() {
    let env = Env::new();
    build(&env, env.home.path());
    env.run(&["run", "fixture", "first"]).ok();
    turn(&env, "second");
    let id = session_id(&env);
    let err = env
        .run(&["sessions", "rewind", &id, "--turn", "7"])
        .failed()
        .to_string();
    assert!(err.contains("1..2"), "{err}");

    std::fs::write(env.path("edit.txt"), "changed by the user\n").unwrap();
    std::fs::write(env.path("notes.md"), "new on the host\n").unwrap();
    let err = env
        .run(&["sessions", "rewind", &id, "--turn", "1", "--files"])
        .failed()
        .to_string();
    assert!(
        err.contains("edit.txt") && err.contains("notes.md") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(env.path("edit.txt")).unwrap(),
        "changed by the user\n"
    );

    env.run(&[
        "sessions", "rewind", &id, "--turn", "1", "--files", "--force",
    ])
    .ok();
    assert!(
        listing(env.work.path()).is_empty(),
        "{:?}",
        listing(env.work.path())
    );
    // Only the files: the conversation still has both turns.
    let shown = env.run(&["sessions", "show", &id]).ok().to_string();
    assert!(
        shown.contains("~ rewound to before turn 1: 4 files restored\n"),
        "{shown}"
    );
}

#[test]
fn the_sandbox_swapping_files_for_links_to_host_files_never_makes_a_restore_write_outside() {
    let env = Env::new();
    let host = tempfile::tempdir().unwrap();
    std::fs::create_dir(host.path().join("dir")).unwrap();
    std::fs::write(host.path().join("secret.txt"), "host secret\n").unwrap();
    std::fs::write(host.path().join("dir/f.txt"), "host file\n").unwrap();
    build(&env, host.path());
    env.run(&["run", "fixture", "plant"]).ok();
    let planted = listing(env.work.path());
    assert_eq!(turn(&env, "swap"), "swapped");
    assert!(std::fs::symlink_metadata(env.path("sub"))
        .unwrap()
        .is_symlink());
    let id = session_id(&env);
    env.run(&["sessions", "rewind", &id, "--turn", "2"]).ok();
    assert_eq!(listing(env.work.path()), planted);
    assert_eq!(
        std::fs::read_to_string(host.path().join("secret.txt")).unwrap(),
        "host secret\n"
    );
    assert_eq!(
        std::fs::read_to_string(host.path().join("dir/f.txt")).unwrap(),
        "host file\n"
    );
    assert_eq!(listing(host.path()).len(), 3, "{:?}", listing(host.path()));
    // Links are kept as links: no checkpoint holds the host file's content.
    for object in walkdir::WalkDir::new(env.home.path().join("checkpoints"))
        .into_iter()
        .flatten()
    {
        if object.file_type().is_file() {
            assert_ne!(std::fs::read(object.path()).unwrap(), b"host secret\n");
        }
    }
}

#[test]
fn past_checkpoint_max_mb_the_oldest_checkpoints_go_and_the_event_says_so() {
    let env = Env::new();
    build(&env, env.home.path());
    env.run(&["config", "set", "checkpoint_max_mb", "1"]).ok();
    // Each turn writes 460 KB anew: the third one's end checkpoint takes the session past 1 MB, which drops the
    // first two turns' checkpoints; the next turn's start says so.
    env.run(&["run", "fixture", "grow"]).ok();
    turn(&env, "grow");
    turn(&env, "grow");
    let events: Vec<Value> = env
        .run(&["run", "--continue", "fixture", "count", "--json"])
        .ok()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let created = of_type(&events, "checkpoint_created");
    assert_eq!(
        created[0]["dropped"].as_array().map(Vec::len),
        Some(2),
        "{created:?}"
    );
    let id = session_id(&env);
    let err = env
        .run(&["sessions", "rewind", &id, "--turn", "1"])
        .failed()
        .to_string();
    assert!(err.contains("checkpoint_max_mb"), "{err}");
    let held: u64 = std::fs::read_dir(
        env.home
            .path()
            .join("sessions")
            .join(&id)
            .join("checkpoints/objects"),
    )
    .unwrap()
    .flatten()
    .map(|e| e.metadata().unwrap().len())
    .sum();
    assert!(held <= 1024 * 1024, "never past the bound: {held}");
    // The latest turns can still be undone.
    env.run(&["sessions", "rewind", &id, "--turn", "3", "--files"])
        .ok();
}

fn serve(env: &Env, root: &Path) -> Api {
    let root = root.to_str().unwrap();
    Api::with_token(
        Server::start(
            env.home.path(),
            &["--token", TOKEN, "--workspace-root", root],
            &[],
        ),
        TOKEN,
    )
}

async fn kinds(api: &Api, session: &str) -> Vec<String> {
    let (_, journal) = api.get(&format!("/sessions/{session}/journal")).await;
    journal
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            e["payload"]["type"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_copies_a_fresh_workspace_as_it_was_and_shares_a_host_directory() {
    let env = Env::new();
    build(&env, env.home.path());
    let api = serve(&env, env.work.path());
    let parent = api.session("fixture").await;
    api.answer(&parent, "first").await;
    let counted = api.answer(&parent, "count").await;
    api.answer(&parent, "second").await;
    let parent_ws = env
        .home
        .path()
        .join("sessions")
        .join(&parent)
        .join("workspace");
    let before_three = listing(&parent_ws);

    let (status, forked) = api
        .post(&format!("/sessions/{parent}/fork"), json!({"turn": 2}))
        .await;
    assert_eq!(status, 201, "{forked}");
    assert_eq!(forked["workspace"], "copied");
    assert_eq!(forked["turns"], 1);
    let child = forked["session"]["id"].as_str().unwrap().to_string();
    let child_ws = env
        .home
        .path()
        .join("sessions")
        .join(&child)
        .join("workspace");
    let files = listing(&child_ws);
    assert!(
        files.iter().any(|(p, _)| p == "doomed.txt"),
        "before turn 2: {files:?}"
    );
    assert!(!files.iter().any(|(p, _)| p == "created.txt"), "{files:?}");
    let inherited = kinds(&api, &child).await;
    assert_eq!(inherited.iter().filter(|k| *k == "turn_started").count(), 1);
    assert_eq!(inherited.last().unwrap(), "session_forked");
    // The fork's conversation is the parent's before turn 2, and it goes its own way.
    assert_eq!(api.answer(&child, "count").await, counted);
    api.answer(&child, "third").await;
    assert_eq!(
        listing(&parent_ws),
        before_three,
        "the parent's files are its own"
    );
    let (_, journal) = api.get(&format!("/sessions/{child}/journal")).await;
    let notes: Vec<&str> = journal
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["payload"]["type"] == "checkpoint_created")
        .filter_map(|e| e["payload"]["payload"]["note"].as_str())
        .collect();
    assert_eq!(
        notes.len(),
        1,
        "the fork's first checkpoint says its inherited turns have none: {journal}"
    );
    assert!(
        notes[0].contains("1 earlier turns have no checkpoint here"),
        "{}",
        notes[0]
    );

    // A fork of now, of a session in a host directory, shares the directory.
    let project = sandbox_tempdir();
    let (status, made) = api
        .post(
            "/sessions",
            json!({"bundle_ref": "fixture", "cwd": env.work.path()}),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let host = made["id"].as_str().unwrap().to_string();
    api.answer(&host, "first").await;
    let (status, forked) = api
        .post(&format!("/sessions/{host}/fork"), Value::Null)
        .await;
    assert_eq!(status, 201, "{forked}");
    assert_eq!(forked["workspace"], "shared");
    assert_eq!(forked["session"]["cwd"], made["cwd"]);
    drop(project);

    // Bad input: an unknown turn names the range; a malformed body says what is wrong.
    let (status, err) = api
        .post(&format!("/sessions/{parent}/fork"), json!({"turn": 9}))
        .await;
    assert_eq!(status, 404, "{err}");
    assert_eq!(err["error"]["code"], "turn_out_of_range");
    assert!(
        err["error"]["message"].as_str().unwrap().contains("1..3"),
        "{err}"
    );
    let (status, err) = api
        .post(
            &format!("/sessions/{parent}/rewind"),
            json!({"turn": "two"}),
        )
        .await;
    assert_eq!(status, 422, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_over_http_is_refused_while_a_turn_runs_and_works_after() {
    let env = Env::new();
    let src = tempfile::tempdir().unwrap();
    write_bundle(
        src.path(),
        SCRIPT,
        "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, match: \"*doomed*\", action: ask }\n",
        "workspace_write",
    );
    env.run(&["build", src.path().to_str().unwrap()]).ok();
    let api = serve(&env, env.work.path());
    let id = api.session("fixture").await;
    api.answer(&id, "count").await;
    let mut events = api.events(&id, None).await;
    let (status, body) = api
        .post(
            &format!("/sessions/{id}/run"),
            json!({"input": task("first")}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let asked = events.until("permission_requested").await;
    let request = asked.last().unwrap().1["payload"]["payload"]["request_id"].clone();
    let (status, err) = api
        .post(&format!("/sessions/{id}/rewind"), json!({"turn": 1}))
        .await;
    assert_eq!(status, 409, "{err}");
    assert_eq!(err["error"]["code"], "turn_in_progress");
    let (status, _) = api
        .post(
            &format!("/approvals/{}", request.as_str().unwrap()),
            json!({"decision": "allow_once"}),
        )
        .await;
    assert_eq!(status, 200);
    events.until("turn_completed").await;
    let ws = env.home.path().join("sessions").join(&id).join("workspace");
    let rewound = api
        .post(&format!("/sessions/{id}/rewind"), json!({"turn": 2}))
        .await;
    assert_eq!(rewound.0, 200, "{}", rewound.1);
    assert_eq!(
        rewound.1["restored"].as_array().unwrap().len(),
        3,
        "{}",
        rewound.1
    );
    assert!(listing(&ws).is_empty());
    let (status, changes) = api.get(&format!("/sessions/{id}/changes?turn=2")).await;
    assert_eq!(status, 200);
    assert_eq!(changes["checkpointed"], true);
    assert_eq!(changes["changes"].as_array().unwrap().len(), 3, "{changes}");
}

/// A git repository `project` in `env`'s work directory.
fn git_project(env: &Env) -> std::path::PathBuf {
    let project = env.path("project");
    std::fs::create_dir_all(&project).unwrap();
    let git = std::process::Command::new("git")
        .args(["init", "-q"])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(git.success());
    project
}

/// Runs `args` in `project`, which must succeed; its stdout.
fn in_project(env: &Env, project: &Path, args: &[&str]) -> String {
    let out = env.command(args).current_dir(project).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn git_ignored_build_output_is_not_copied_reported_as_not_checkpointed_and_left_alone_by_a_rewind()
{
    let env = Env::new();
    build(&env, env.home.path());
    let project = git_project(&env);
    std::fs::create_dir_all(project.join("target/debug")).unwrap();
    std::fs::write(project.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(project.join("src.txt"), "source\n").unwrap();
    // 20 MB of build output in 40 files, which no checkpoint should copy.
    for i in 0..40 {
        std::fs::write(
            project.join(format!("target/debug/dep{i}.rlib")),
            vec![b'x'; 512 * 1024],
        )
        .unwrap();
    }
    std::fs::write(project.join("target/debug/app"), "old build\n").unwrap();
    give_to_sandbox(&project);
    let stored = || -> u64 {
        walkdir::WalkDir::new(env.home.path().join("checkpoints"))
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file())
            .map(|e| e.metadata().unwrap().len())
            .sum()
    };
    in_project(&env, &project, &["run", "fixture", "build it"]);
    assert!(stored() < 1024 * 1024, "{} bytes of checkpoints", stored());

    let diff = in_project(&env, &project, &["sessions", "diff", "--last"]);
    assert!(diff.contains("+fixed"), "{diff}");
    assert!(diff.contains("changed, not checkpointed: target"), "{diff}");

    in_project(
        &env,
        &project,
        &["sessions", "rewind", "--last", "--turn", "1"],
    );
    assert_eq!(
        std::fs::read_to_string(project.join("src.txt")).unwrap(),
        "source\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("target/debug/app")).unwrap(),
        "rebuilt\n",
        "the build output is left as the turn left it"
    );
    assert!(project.join("target/fresh.o").exists());
    assert_eq!(
        std::fs::read_dir(project.join("target/debug"))
            .unwrap()
            .count(),
        41
    );
}

/// The sandbox writes ignore rules to hide its work from checkpoints: a `.git/info/exclude` that is a link to a host
/// file saying `*`, then a `.gitignore` saying `*`. Neither hides anything: the link is not followed, and a file an
/// earlier checkpoint held stays held, so the rewind undoes the turn.
#[test]
fn ignore_rules_the_sandbox_writes_or_links_hide_nothing_from_checkpoints_and_the_rewind() {
    let env = Env::new();
    let host = tempfile::tempdir().unwrap();
    std::fs::write(host.path().join("rules"), "*\n").unwrap();
    build(&env, host.path());
    let project = git_project(&env);
    std::fs::write(project.join("src.txt"), "source\n").unwrap();
    give_to_sandbox(&project);
    let in_project = |args: &[&str]| in_project(&env, &project, args);
    assert_eq!(in_project(&["run", "fixture", "hide"]).trim(), "hidden");
    assert!(
        std::fs::symlink_metadata(project.join(".git/info/exclude"))
            .unwrap()
            .file_type()
            .is_symlink(),
        "the sandbox made the link"
    );
    let diff = in_project(&["sessions", "diff", "--last"]);
    assert!(
        diff.contains("+mine"),
        "the new file was checkpointed: {diff}"
    );
    assert!(!diff.contains("not checkpointed"), "{diff}");

    assert_eq!(
        in_project(&["run", "--continue", "fixture", "cover"]).trim(),
        "covered"
    );
    let diff = in_project(&["sessions", "diff", "--last", "--turn", "2"]);
    assert!(diff.contains("+tampered"), "{diff}");
    in_project(&["sessions", "rewind", "--last", "--turn", "2"]);
    assert_eq!(
        std::fs::read_to_string(project.join("src.txt")).unwrap(),
        "source\n"
    );
    assert!(!project.join(".gitignore").exists());
}
