//! A store that runs out of space, on a real tmpfs: the turn ends with `storage_full`, the session stays usable,
//! and nothing is torn.

use std::time::Duration;

use serde_json::{json, Value};

use super::operations::Client;
use super::support::{write_bundle, Env, Server};

/// A tmpfs of `size` mounted at a new directory; unmounted when dropped. None when this process may not mount.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        ok.then_some(Tmpfs(dir))
    }

    fn path(&self) -> &std::path::Path {
        self.0.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(self.0.path())
            .status();
    }
}

/// Fills the file system of `dir` to the last byte with a file; returns it, to remove for space.
fn fill(dir: &std::path::Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let block = vec![b'x'; 4096];
    while file.write_all(&block).is_ok() {}
    while file.write_all(b"x").is_ok() {}
    path
}

#[tokio::test]
async fn a_full_store_ends_the_turn_with_storage_full_leaves_the_session_usable_and_tears_nothing()
{
    let Some(tmpfs) = Tmpfs::mount("4m") else {
        eprintln!("skipped: mounting a tmpfs needs root (CI runs as root)");
        return;
    };
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [
          {when: "slow", replies: [
            {tool_calls: [{name: "Bash", arguments: {command: "sleep 1.5; seq 1 2000"}}]},
            {text: "slow done"}
          ]},
          {replies: [{text: "quick {{message_count}}"}]}
        ]}"#,
        "",
        "workspace_write",
    );
    let home = tmpfs.path().join("home");
    let server = Server::start(&home, &["--log-format", "json"], &[]);
    let api = Client::of(&server);
    let id = api.session(&env.path("b").display().to_string()).await;
    let run = |prompt: &'static str| {
        let (api, id) = (Client::of(&server), id.clone());
        async move {
            api.json(
                reqwest::Method::POST,
                &format!("/sessions/{id}/run-sync"),
                Some(json!({"input": {"prompt": prompt}})),
            )
            .await
        }
    };
    let (status, first) = run("quick").await;
    assert_eq!(
        (status, first["final_message"].as_str()),
        (200, Some("quick 2"))
    );

    // The disk fills while a command runs: its output cannot be journaled, and the turn ends with the cause.
    let slow = tokio::spawn(run("slow"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let filler = fill(tmpfs.path());
    let (status, ended) = slow.await.unwrap();
    assert_eq!(status, 200, "{ended}");
    assert_ne!(ended["status"], "completed", "{ended}");
    assert_eq!(
        ended["error"]["code"],
        "storage_full",
        "{ended}\n{:#?}",
        server.json_log()
    );
    assert!(
        ended["error"]["message"]
            .as_str()
            .unwrap()
            .contains("out of space"),
        "{ended}"
    );

    // The session is idle, not stuck: a new turn is refused with 507 and the cause, reads still work.
    let (status, refused) = run("quick").await;
    assert_eq!(status, 507, "{refused}");
    assert_eq!(refused["error"]["code"], "storage_full");
    assert!(refused["error"]["request_id"].is_string());
    let (status, record) = api
        .json(reqwest::Method::GET, &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(
        (status, record["status"].as_str()),
        (200, Some("idle")),
        "{record}"
    );
    let (status, created) = api
        .json(
            reqwest::Method::POST,
            "/sessions",
            Some(json!({"bundle_ref": env.path("b").display().to_string()})),
        )
        .await;
    assert_eq!(
        (status, created["error"]["code"].as_str()),
        (507, Some("storage_full")),
        "{created}"
    );
    server.json_log_with("logging the storage_full failure", |l| {
        l["code"] == "storage_full"
    });

    // Space returns: the session goes on where its saved history left it.
    std::fs::remove_file(filler).unwrap();
    let (status, after) = run("quick").await;
    assert_eq!(status, 200, "{after}");
    assert!(
        after["final_message"]
            .as_str()
            .unwrap()
            .starts_with("quick "),
        "{after}"
    );
    let journal =
        std::fs::read_to_string(home.join("sessions").join(&id).join("events.jsonl")).unwrap();
    for line in journal.lines() {
        serde_json::from_str::<Value>(line)
            .unwrap_or_else(|e| panic!("torn journal line ({e}): {line}"));
    }
    assert!(journal.ends_with('\n'));
    drop(server);
}

#[tokio::test]
async fn a_checkpoint_that_does_not_fit_fails_the_turn_with_storage_full_before_anything_runs() {
    let Some(tmpfs) = Tmpfs::mount("4m") else {
        eprintln!("skipped: mounting a tmpfs needs root (CI runs as root)");
        return;
    };
    let env = Env::new();
    write_bundle(
        &env.path("b"),
        r#"{turns: [{replies: [
          {tool_calls: [{name: "Bash", arguments: {command: "echo ran > ran.txt"}}]},
          {text: "ran"}
        ]}]}"#,
        "permissions: { default: allow }\n",
        "workspace_write",
    );
    // The project is on the host's disk; the store, which holds its checkpoints, on a 4 MiB tmpfs.
    let project = super::support::sandbox_tempdir();
    std::fs::write(project.path().join("large.bin"), vec![7u8; 5 * 1024 * 1024]).unwrap();
    let home = tmpfs.path().join("home");
    let root = project.path().to_str().unwrap();
    let server = Server::start(&home, &["--workspace-root", root], &[]);
    let api = Client::of(&server);
    let (status, made) = api
        .json(
            reqwest::Method::POST,
            "/sessions",
            Some(json!({"bundle_ref": env.path("b").display().to_string(), "cwd": root})),
        )
        .await;
    assert_eq!(status, 201, "{made}");
    let id = made["id"].as_str().unwrap().to_string();
    let path = format!("/sessions/{id}/run-sync");
    let run = || {
        api.json(
            reqwest::Method::POST,
            &path,
            Some(json!({"input": {"prompt": "go"}})),
        )
    };
    let (status, failed) = run().await;
    assert_eq!(status, 200, "{failed}");
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "storage_full", "{failed}");
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("checkpointed"),
        "{failed}"
    );
    assert!(!project.path().join("ran.txt").exists(), "nothing ran");
    let (_, record) = api
        .json(reqwest::Method::GET, &format!("/sessions/{id}"), None)
        .await;
    assert_eq!(record["status"], "idle", "{record}");
    // With the large file gone, the checkpoint fits and the turn runs.
    std::fs::remove_file(project.path().join("large.bin")).unwrap();
    let (status, done) = run().await;
    assert_eq!(
        (status, done["final_message"].as_str()),
        (200, Some("ran")),
        "{done}"
    );
    assert!(project.path().join("ran.txt").exists());
    drop(server);
}
