//! Checkpoints of real directories: exact restores, refusals, link swaps, hard links, the bound and sharing.
use super::*;
use std::os::unix::fs::symlink;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    ws: PathBuf,
    cp: Checkpoints,
}

fn fixture(max_bytes: u64) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let cp = Checkpoints::new(&root.join("session"), &root.join("pool"), max_bytes);
    Fixture {
        _tmp: tmp,
        root,
        ws,
        cp,
    }
}

/// The workspace as (path, what) pairs: file contents, link targets, directories.
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
                std::fs::read_to_string(e.path()).unwrap()
            };
            (rel, what)
        })
        .collect();
    out.sort();
    out
}

fn turn(f: &Fixture, id: &str, work: impl FnOnce(&Path)) {
    f.cp.start(&f.ws, id).unwrap();
    work(&f.ws);
    f.cp.expect_end();
    f.cp.end(&f.ws, id).unwrap();
}

#[test]
fn a_rewind_to_a_turn_restores_exactly_the_tree_before_it() {
    let f = fixture(u64::MAX);
    std::fs::write(f.ws.join("keep.txt"), "same").unwrap();
    turn(&f, "t1", |ws| {
        std::fs::write(ws.join("a.txt"), "one\n").unwrap();
        std::fs::create_dir(ws.join("d")).unwrap();
        std::fs::write(ws.join("d/gone.txt"), "soon gone").unwrap();
    });
    let before_two = listing(&f.ws);
    turn(&f, "t2", |ws| {
        std::fs::write(ws.join("a.txt"), "two\n").unwrap();
        std::fs::remove_file(ws.join("d/gone.txt")).unwrap();
        std::fs::write(ws.join("new.txt"), "new").unwrap();
        symlink("a.txt", ws.join("link")).unwrap();
    });
    turn(&f, "t3", |ws| {
        std::fs::remove_dir_all(ws.join("d")).unwrap();
        std::fs::write(ws.join("d"), "a file where the directory was").unwrap();
    });
    let (changed, skipped) = f.cp.rewind(&f.ws, "t2", "r1", false).unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(listing(&f.ws), before_two);
    assert!(!changed.is_empty());
    let diff = f.cp.turn_changes("t2").unwrap().unwrap();
    let paths: Vec<&str> = diff.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["a.txt", "d/gone.txt", "link", "new.txt"]);
    assert!(diff[0].diff.as_deref().unwrap().contains("-one\n+two"));
}

#[test]
fn a_rewind_refuses_files_changed_outside_the_session_unless_forced() {
    let f = fixture(u64::MAX);
    turn(&f, "t1", |ws| {
        std::fs::write(ws.join("a.txt"), "agent").unwrap()
    });
    std::fs::write(f.ws.join("mine.txt"), "the user's").unwrap();
    match f.cp.rewind(&f.ws, "t1", "r1", false) {
        Err(CheckpointError::ChangedOutside(paths)) => assert_eq!(paths, ["mine.txt"]),
        other => panic!("{other:?}"),
    }
    assert!(
        f.ws.join("a.txt").exists(),
        "a refused rewind changes nothing"
    );
    f.cp.rewind(&f.ws, "t1", "r1", true).unwrap();
    assert!(listing(&f.ws).is_empty());
}

#[test]
fn links_swapped_in_by_the_sandbox_are_replaced_never_followed() {
    let f = fixture(u64::MAX);
    let host = f.root.join("host");
    std::fs::create_dir_all(host.join("dir")).unwrap();
    std::fs::write(host.join("secret"), "host secret").unwrap();
    std::fs::write(host.join("dir/f.txt"), "host file").unwrap();
    std::fs::create_dir(f.ws.join("sub")).unwrap();
    std::fs::write(f.ws.join("sub/f.txt"), "workspace file").unwrap();
    std::fs::write(f.ws.join("victim.txt"), "workspace victim").unwrap();
    symlink(host.join("secret"), f.ws.join("peek")).unwrap();
    turn(&f, "t1", |ws| {
        // The sandbox swaps a file and a directory for links to host files.
        std::fs::remove_file(ws.join("victim.txt")).unwrap();
        symlink(host.join("secret"), ws.join("victim.txt")).unwrap();
        std::fs::remove_dir_all(ws.join("sub")).unwrap();
        symlink(host.join("dir"), ws.join("sub")).unwrap();
    });
    f.cp.rewind(&f.ws, "t1", "r1", false).unwrap();
    assert_eq!(
        std::fs::read_to_string(host.join("secret")).unwrap(),
        "host secret"
    );
    assert_eq!(
        std::fs::read_to_string(host.join("dir/f.txt")).unwrap(),
        "host file"
    );
    assert!(!f.ws.join("victim.txt").is_symlink());
    assert_eq!(
        std::fs::read_to_string(f.ws.join("victim.txt")).unwrap(),
        "workspace victim"
    );
    assert!(f.ws.join("sub").is_dir() && !f.ws.join("sub").is_symlink());
    assert_eq!(
        std::fs::read_to_string(f.ws.join("sub/f.txt")).unwrap(),
        "workspace file"
    );
    assert_eq!(
        std::fs::read_link(f.ws.join("peek")).unwrap(),
        host.join("secret")
    );
    // A link is kept as its target: the host file's content was never read into a checkpoint.
    let stored: Vec<String> = walkdir::WalkDir::new(f.root.join("pool"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(!stored.iter().any(|c| c.contains("host")), "{stored:?}");
}

#[test]
fn a_hard_link_is_kept_as_content_and_a_restore_does_not_write_through_it() {
    let f = fixture(u64::MAX);
    let host = f.root.join("host.txt");
    std::fs::write(&host, "host").unwrap();
    std::fs::write(f.ws.join("x.txt"), "workspace").unwrap();
    turn(&f, "t1", |ws| {
        std::fs::remove_file(ws.join("x.txt")).unwrap();
        std::fs::hard_link(&host, ws.join("x.txt")).unwrap();
    });
    f.cp.rewind(&f.ws, "t1", "r1", false).unwrap();
    assert_eq!(std::fs::read_to_string(&host).unwrap(), "host");
    assert_eq!(
        std::fs::read_to_string(f.ws.join("x.txt")).unwrap(),
        "workspace"
    );
}

#[test]
fn past_the_bound_the_oldest_turns_go_with_content_nothing_else_holds() {
    let f = fixture(3000);
    // Each turn rewrites one file: its history grows by a thousand bytes a turn.
    for n in 1..=5u8 {
        turn(&f, &format!("t{n}"), |ws| {
            std::fs::write(ws.join("big"), vec![n; 1000]).unwrap();
        });
    }
    let turns: Vec<String> =
        f.cp.points()
            .unwrap()
            .iter()
            .map(|p| p.turn_id.clone())
            .collect();
    assert_eq!(turns, ["t4", "t4", "t5", "t5"]);
    assert_eq!(f.cp.objects.bytes(), 3000);
    assert_eq!(
        std::fs::read_dir(f.root.join("pool/objects"))
            .unwrap()
            .flatten()
            .filter(|e| e.path().is_dir() && e.file_name() != "tmp")
            .map(|d| std::fs::read_dir(d.path()).unwrap().count())
            .sum::<usize>(),
        3,
        "the pool dropped what no session holds"
    );
    assert!(matches!(
        f.cp.rewind(&f.ws, "t1", "r", false),
        Err(CheckpointError::Missing(_))
    ));
    // What is left still restores exactly.
    f.cp.rewind(&f.ws, "t5", "r", false).unwrap();
    assert_eq!(std::fs::read(f.ws.join("big")).unwrap(), vec![4; 1000]);
}

#[test]
fn content_shared_by_two_sessions_is_stored_once_and_outlives_one_of_them() {
    let f = fixture(u64::MAX);
    let other = Checkpoints::new(&f.root.join("other"), &f.root.join("pool"), u64::MAX);
    std::fs::write(f.ws.join("same.txt"), "shared content").unwrap();
    f.cp.start(&f.ws, "a").unwrap();
    let again = other.start(&f.ws, "b").unwrap();
    assert_eq!(again.bytes_new, 0, "the pool had it");
    f.cp.forget();
    std::fs::write(f.ws.join("same.txt"), "changed").unwrap();
    other.rewind(&f.ws, "b", "r", true).unwrap();
    assert_eq!(
        std::fs::read_to_string(f.ws.join("same.txt")).unwrap(),
        "shared content"
    );
}

#[test]
fn each_checkpoint_appends_one_line_and_an_older_or_torn_index_still_reads() {
    let f = fixture(u64::MAX);
    let dir = f.root.join("session/checkpoints");
    turn(&f, "t1", |ws| {
        std::fs::write(ws.join("a.txt"), "one").unwrap()
    });
    turn(&f, "t2", |ws| {
        std::fs::write(ws.join("a.txt"), "two").unwrap()
    });
    let text = std::fs::read_to_string(dir.join("index.jsonl")).unwrap();
    assert_eq!(text.lines().count(), 4, "{text}");
    // A crash in the middle of an append leaves a cut last line: the checkpoints before it are all there.
    std::fs::write(dir.join("index.jsonl"), format!("{text}{{\"id\": 4, \"tur")).unwrap();
    let reopened = Checkpoints::new(&f.root.join("session"), &f.root.join("pool"), u64::MAX);
    assert_eq!(reopened.points().unwrap().len(), 4);
    // The single document of older versions is read and rewritten as lines.
    let old: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    std::fs::remove_file(dir.join("index.jsonl")).unwrap();
    std::fs::write(
        dir.join("index.json"),
        serde_json::json!({"next": 4, "points": old, "bytes": 6}).to_string(),
    )
    .unwrap();
    let migrated = Checkpoints::new(&f.root.join("session"), &f.root.join("pool"), u64::MAX);
    let points = migrated.points().unwrap();
    assert_eq!(
        points
            .iter()
            .map(|p| p.turn_id.as_str())
            .collect::<Vec<_>>(),
        ["t1", "t1", "t2", "t2"]
    );
    assert!(dir.join("index.jsonl").is_file() && !dir.join("index.json").exists());
    let restored = migrated.rewind(&f.ws, "t2", "r1", false).unwrap();
    assert!(!restored.0.is_empty());
    assert_eq!(std::fs::read_to_string(f.ws.join("a.txt")).unwrap(), "one");
}

#[test]
fn a_checkpoint_of_an_unchanged_workspace_shares_the_previous_manifest_and_still_restores() {
    let f = fixture(u64::MAX);
    turn(&f, "t1", |ws| {
        std::fs::write(ws.join("a.txt"), "one").unwrap()
    });
    turn(&f, "t2", |_| {});
    turn(&f, "t3", |ws| {
        std::fs::write(ws.join("a.txt"), "three").unwrap()
    });
    let manifests = std::fs::read_dir(f.root.join("session/checkpoints"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".manifest"))
        .count();
    assert_eq!(
        manifests, 3,
        "t1's start and end and t3's end; t2's checkpoints and t3's start share t1's end"
    );
    let reopened = Checkpoints::new(&f.root.join("session"), &f.root.join("pool"), u64::MAX);
    let unchanged = reopened.turn_changes("t2").unwrap().unwrap_or_default();
    assert!(unchanged.is_empty(), "{unchanged:?}");
    reopened.rewind(&f.ws, "t3", "r", false).unwrap();
    assert_eq!(std::fs::read_to_string(f.ws.join("a.txt")).unwrap(), "one");
}

#[test]
fn a_checkpoint_taken_while_the_host_removes_directories_skips_what_vanished() {
    let f = fixture(u64::MAX);
    std::fs::write(f.ws.join("keep.txt"), "kept").unwrap();
    let churn = f.ws.join("target");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    // A build tool on the host, making and removing trees of directories as a scan reads them.
    let remover = {
        let (churn, stop) = (churn.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let dir = churn.join(format!("d{}", n % 8));
                let _ = std::fs::remove_dir_all(&dir);
                for i in 0..20 {
                    let sub = dir.join(format!("s{i}"));
                    if std::fs::create_dir_all(&sub).is_ok() {
                        let _ = std::fs::write(sub.join("f"), "x");
                    }
                }
                n += 1;
            }
        })
    };
    let mut failed = Vec::new();
    for i in 0..50 {
        if let Err(e) = f.cp.start(&f.ws, &format!("t{i}")) {
            failed.push(e.to_string());
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    remover.join().unwrap();
    assert!(
        failed.is_empty(),
        "{} of 50 failed, first: {}",
        failed.len(),
        failed[0]
    );
}

#[test]
fn threads_storing_the_same_new_content_at_once_all_link_it() {
    let f = fixture(u64::MAX);
    let objects = objects::Objects::new(f.root.join("pool"), f.root.join("mine"));
    let mut failed = Vec::new();
    // Each round is content the pool has never held, stored by several threads at once, as a scan's threads store
    // a workspace's copies of one file.
    for round in 0..200 {
        let source = f.root.join(format!("content-{round}"));
        std::fs::write(&source, format!("round {round}")).unwrap();
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            let stores: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        let file = std::fs::File::open(&source).unwrap();
                        start.wait();
                        objects.store(file, u64::MAX).map(|stored| stored.hash)
                    })
                })
                .collect();
            for store in stores {
                match store.join().unwrap() {
                    Ok(hash) => assert!(objects.has(&hash)),
                    Err(e) => failed.push(format!("round {round}: {e}")),
                }
            }
        });
    }
    assert!(
        failed.is_empty(),
        "{} stores failed, first: {}",
        failed.len(),
        failed[0]
    );
}

#[test]
fn a_pool_copy_whose_bytes_are_not_its_hash_is_never_restored() {
    // A copy already in the pool is linked, never written over (see `Objects::store`); a rewind checks each copy
    // against its name, so a copy changed after it was stored cannot put other bytes into the workspace.
    use sha2::Digest as _;
    let f = fixture(u64::MAX);
    std::fs::write(f.ws.join("a.txt"), "one\n").unwrap();
    turn(&f, "t1", |ws| {
        std::fs::write(ws.join("a.txt"), "two\n").unwrap()
    });
    let hex = tree::Digest(sha2::Sha256::digest(b"one\n").into()).to_string();
    let pooled = f.root.join("pool/objects").join(&hex[..2]).join(&hex);
    std::fs::write(&pooled, "planted\n").unwrap();
    let rewound = f.cp.rewind(&f.ws, "t1", "r1", false);
    let kept = std::fs::read_to_string(f.ws.join("a.txt")).unwrap();
    assert_eq!(
        kept, "two\n",
        "the workspace got {kept:?}; the rewind said {rewound:?}"
    );
    match rewound {
        Err(_) => {}
        Ok((_, skipped)) => assert!(
            !skipped.is_empty(),
            "a damaged copy was reported as restored"
        ),
    }
}

#[test]
fn ignored_build_output_is_neither_stored_nor_touched_by_a_rewind_and_is_reported() {
    let f = fixture(u64::MAX);
    std::fs::create_dir_all(f.ws.join(".git")).unwrap();
    std::fs::write(f.ws.join(".gitignore"), "target/\n*.log\n").unwrap();
    std::fs::write(f.ws.join("main.rs"), "fn main() {}\n").unwrap();
    std::fs::create_dir_all(f.ws.join("target/debug")).unwrap();
    std::fs::write(f.ws.join("target/debug/app"), vec![7u8; 64 * 1024]).unwrap();
    turn(&f, "t1", |ws| {
        std::fs::write(ws.join("main.rs"), "fn main() { println!(); }\n").unwrap();
        std::fs::write(ws.join("target/new-output"), "built").unwrap();
        std::fs::write(ws.join("run.log"), "log").unwrap();
    });
    // Nothing under target/ was stored: the pool holds the sources alone.
    let pool: u64 = walkdir::WalkDir::new(f.root.join("pool"))
        .into_iter()
        .flatten()
        .filter(|e| e.file_type().is_file())
        .map(|e| e.metadata().unwrap().len())
        .sum();
    assert!(pool < 1024, "{pool} bytes stored");
    let changes = f.cp.turn_changes("t1").unwrap().unwrap();
    let target = changes
        .iter()
        .find(|c| c.path == "target")
        .expect("target/ reported");
    assert!(target.not_checkpointed, "{changes:?}");
    assert!(changes
        .iter()
        .any(|c| c.path == "run.log" && c.not_checkpointed));
    let (_, skipped) = f.cp.rewind(&f.ws, "t1", "r1", false).unwrap();
    assert_eq!(
        std::fs::read_to_string(f.ws.join("main.rs")).unwrap(),
        "fn main() {}\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("target/new-output")).unwrap(),
        "built"
    );
    assert!(
        f.ws.join("run.log").exists(),
        "an ignored file the turn made stays"
    );
    assert!(
        skipped
            .iter()
            .any(|(p, why)| p.display() == "target" && why.contains("not checkpointed")),
        "{skipped:?}"
    );
}

#[test]
fn ignore_rules_a_turn_writes_cannot_keep_its_edits_from_being_rewound() {
    let f = fixture(u64::MAX);
    std::fs::create_dir_all(f.ws.join(".git")).unwrap();
    std::fs::write(f.ws.join("main.rs"), "original\n").unwrap();
    std::fs::create_dir(f.ws.join("src")).unwrap();
    std::fs::write(f.ws.join("src/lib.rs"), "lib\n").unwrap();
    // The turn hides everything it did behind new ignore rules.
    turn(&f, "t1", |ws| {
        std::fs::write(ws.join(".gitignore"), "*\n").unwrap();
        std::fs::write(ws.join("main.rs"), "tampered\n").unwrap();
        std::fs::write(ws.join("src/lib.rs"), "tampered\n").unwrap();
    });
    // What the rules would hide is still checkpointed: the turn's change is there to see.
    let changes = f.cp.turn_changes("t1").unwrap().unwrap();
    let main = changes
        .iter()
        .find(|c| c.path == "main.rs")
        .expect("main.rs changed");
    assert!(
        !main.not_checkpointed
            && main
                .diff
                .as_deref()
                .is_some_and(|d| d.contains("+tampered"))
    );
    f.cp.rewind(&f.ws, "t1", "r1", false).unwrap();
    assert_eq!(
        std::fs::read_to_string(f.ws.join("main.rs")).unwrap(),
        "original\n"
    );
    assert_eq!(
        std::fs::read_to_string(f.ws.join("src/lib.rs")).unwrap(),
        "lib\n"
    );
    assert!(
        !f.ws.join(".gitignore").exists(),
        "the rules the turn wrote are undone too"
    );
}

#[test]
fn outside_a_repository_dependency_directories_and_serviceignore_are_left_out() {
    let f = fixture(u64::MAX);
    std::fs::create_dir_all(f.ws.join("node_modules/pkg")).unwrap();
    std::fs::write(f.ws.join("node_modules/pkg/index.js"), "x").unwrap();
    std::fs::write(f.ws.join(".serviceignore"), "scratch/\n").unwrap();
    std::fs::create_dir(f.ws.join("scratch")).unwrap();
    std::fs::write(f.ws.join("scratch/a"), "a").unwrap();
    std::fs::write(f.ws.join("app.js"), "app").unwrap();
    let taken = f.cp.start(&f.ws, "t1").unwrap();
    assert_eq!(taken.files, 2, "app.js and .serviceignore");
}

#[test]
fn a_sessions_own_workspace_takes_no_rules_from_a_repository_the_store_sits_in() {
    let tmp = tempfile::tempdir().unwrap();
    let outer = std::fs::canonicalize(tmp.path()).unwrap();
    std::fs::create_dir_all(outer.join(".git")).unwrap();
    std::fs::write(outer.join(".gitignore"), "*.txt\n").unwrap();
    let session = outer.join("store/sessions/s1");
    let ws = session.join("workspace");
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "mine").unwrap();
    let cp = Checkpoints::new(&session, &outer.join("store/checkpoints"), u64::MAX);
    assert_eq!(cp.start(&ws, "t1").unwrap().files, 1, "notes.txt is kept");
}
