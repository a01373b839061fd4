//! The attack on checkpoints' bound: a 1 GiB sparse file (a few blocks on disk) and a 200 MB dense one, written by a
//! turn, against `checkpoint_max_mb = 8`. Files are counted by their size before they are read: neither is read or
//! stored, the store stays within its bound, the journal and `sessions diff` name them, and a rewind says so.

use serde_json::Value;

use super::providers::of_type;
use super::support::{write_bundle, Env};

const SCRIPT: &str = r#"{turns: [
  {when: "fill", replies: [
    {tool_calls: [{name: "Bash", arguments: {command: "truncate -s 1G sparse.bin && head -c 200000000 /dev/zero > dense.bin && echo small > note.txt && echo ok"}}]},
    {text: "filled"}]},
  {replies: [{text: "count {{message_count}}"}]},
]}"#;

/// Bytes of the files under `dir`, as the disk holds them (blocks, so a sparse copy counts for what it uses).
fn on_disk(dir: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    walkdir::WalkDir::new(dir)
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| e.metadata().unwrap().blocks() * 512)
        .sum()
}

#[test]
fn files_past_the_bound_are_counted_by_size_never_stored_and_named() {
    let env = Env::new();
    let src = tempfile::tempdir().unwrap();
    write_bundle(
        src.path(),
        SCRIPT,
        "permissions:\n  default: allow\n",
        "workspace_write",
    );
    env.run(&["build", src.path().to_str().unwrap()]).ok();
    env.run(&["config", "set", "checkpoint_max_mb", "8"]).ok();
    env.run(&["run", "fixture", "fill"]).ok();
    let events: Vec<Value> = env
        .run(&["run", "--continue", "fixture", "count", "--json"])
        .ok()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let skipped = of_type(&events, "checkpoint_skipped");
    assert_eq!(skipped.len(), 1, "{events:?}");
    let files: Vec<(String, u64)> = skipped[0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().into(),
                f["size"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        files,
        vec![
            ("sparse.bin".into(), 1 << 30),
            ("dense.bin".into(), 200_000_000)
        ]
    );
    assert_eq!(skipped[0]["max_bytes"], 8 * 1024 * 1024);

    // The store never grew past its bound: not by the dense file, nor by the sparse one read out in full.
    let held =
        on_disk(&env.home.path().join("checkpoints")) + on_disk(&env.home.path().join("sessions"));
    assert!(held < 8 * 1024 * 1024, "{held} bytes held");

    let list = env.run(&["sessions", "--json"]).json();
    let id = list[0]["id"].as_str().unwrap().to_string();
    let diff = env
        .run(&["sessions", "diff", &id, "--turn", "1"])
        .ok()
        .to_string();
    assert!(
        diff.contains("dense.bin (200000000 bytes: not checkpointed")
            && diff.contains("sparse.bin (1073741824 bytes: not checkpointed")
            && diff.contains("+small"),
        "{diff}"
    );
    // Going back to before the second turn cannot bring those files back: a clear error first, then --force
    // restores the rest and leaves them as they are.
    let refused = env
        .run(&["sessions", "rewind", &id, "--turn", "2", "--files"])
        .failed()
        .to_string();
    assert!(
        refused.contains("does not hold") && refused.contains("dense.bin (200000000 bytes)"),
        "{refused}"
    );
    std::fs::write(env.path("note.txt"), "changed\n").unwrap();
    env.run(&[
        "sessions", "rewind", &id, "--turn", "2", "--files", "--force",
    ])
    .ok();
    assert_eq!(
        std::fs::read_to_string(env.path("note.txt")).unwrap(),
        "small\n"
    );
    assert_eq!(
        std::fs::metadata(env.path("dense.bin")).unwrap().len(),
        200_000_000
    );
}
