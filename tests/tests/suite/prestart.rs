//! Sandboxed workers started ahead of their session: the next session of the bundle gets one, with its own
//! workspace and the same confinement, and nothing of them is left after shutdown.

use std::path::Path;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::commands::command;
use super::support::{own_cgroups, processes_with, write_bundle};

fn prestarting_runtime(home: &Path) -> service_supervisor::ServiceRuntime {
    prestarting_runtime_with(home, |_| {})
}

/// [`prestarting_runtime`], with `tune` applied to its options too.
fn prestarting_runtime_with(
    home: &Path,
    tune: impl FnOnce(&mut service_supervisor::RuntimeOptions),
) -> service_supervisor::ServiceRuntime {
    super::support::runtime_with(home, |o| {
        o.prestart_sandboxes = true;
        tune(o);
    })
}

/// A new home, and a confined (`workspace_write`) bundle whose model answers "ok".
fn home_and_confined_bundle() -> (TempDir, TempDir) {
    home_and_confined_bundle_scripted(r#"{turns: [{replies: [{text: "ok"}]}]}"#)
}

/// A new home, and a confined (`workspace_write`) bundle whose model plays `script`.
fn home_and_confined_bundle_scripted(script: &str) -> (TempDir, TempDir) {
    let (home, bundle) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    write_bundle(bundle.path(), script, "", "workspace_write");
    (home, bundle)
}

async fn wait_for_a_spare(rt: &service_supervisor::ServiceRuntime) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while rt.spare_workers() == 0 {
        assert!(Instant::now() < deadline, "no spare worker was started");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// The cgroup directories (any controller) a worker started under the name `name` would have.
fn cgroups_of(name: &str) -> Vec<std::path::PathBuf> {
    own_cgroups()
        .into_iter()
        .map(|(_, dir)| dir.join(format!("service-rs-{name}")))
        .collect()
}

/// Entries of `dir` whose name starts with `prefix`.
fn entries(dir: &Path, prefix: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_session_gets_the_spare_sandbox_with_its_own_workspace_and_nothing_outlives_shutdown(
) {
    let (home, bundle) = home_and_confined_bundle();
    let reference = bundle.path().to_str().unwrap();
    let rt = prestarting_runtime(home.path());
    let first = rt.create_session(reference, None).await.unwrap().id;
    command(&rt, &first, "echo first > first.txt").await;
    wait_for_a_spare(&rt).await;

    let second = rt.create_session(reference, None).await.unwrap().id;
    let store = home.path().display();
    let (code, out, _) = command(
        &rt,
        &second,
        &format!("echo second > second.txt; pwd; ls; ls {store} 2>&1; true"),
    )
    .await;
    assert_eq!(code, Some(0), "{out}");
    assert_eq!(
        out,
        format!("/workspace\nsecond.txt\nls: cannot access '{store}': No such file or directory\n")
    );
    let sessions = home.path().join("sessions");
    assert_eq!(
        std::fs::read_to_string(sessions.join(&second).join("workspace/second.txt")).unwrap(),
        "second\n"
    );
    assert!(!sessions.join(&first).join("workspace/second.txt").exists());
    let run = home.path().join("run");
    // A worker started for a session is labelled with its id; a spare keeps its own label once taken.
    assert_eq!(
        processes_with(&format!("--label {second}")),
        0,
        "the second session's worker was started for it, not taken from the spare"
    );

    // A session with a directory of its own as workspace gets a worker started for it.
    let own = super::support::sandbox_tempdir();
    let third = rt
        .create_session(reference, Some(own.path()))
        .await
        .unwrap()
        .id;
    let (_, out, _) = command(&rt, &third, "pwd; echo third > third.txt").await;
    assert_eq!(out, "/workspace\n");
    assert!(own.path().join("third.txt").exists());
    assert!(processes_with(&format!("--label {third}")) > 0);

    wait_for_a_spare(&rt).await;
    let spare = "--label spare-";
    assert!(processes_with(spare) > 0, "no process of the spare");
    // This runtime's spares by name: other tests run servers with spares of their own at the same time.
    let spares = entries(&run.join("workspaces"), "spare-");
    let spare_cgroups: Vec<_> = spares.iter().flat_map(|name| cgroups_of(name)).collect();
    rt.shutdown("test over").await;
    let left: Vec<_> = spare_cgroups.iter().filter(|d| d.exists()).collect();
    assert!(
        left.is_empty(),
        "spare cgroups left after shutdown: {left:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = (
            entries(&run, "spare-"),
            entries(&run.join("workspaces"), "spare-"),
            spares
                .iter()
                .map(|name| processes_with(name))
                .sum::<usize>(),
        );
        if left == (vec![], vec![], 0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "spares left after shutdown: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_makes_the_sandbox_etc_snapshot_when_a_session_is_created_not_at_its_first_turn() {
    let (home, bundle) = home_and_confined_bundle();
    let reference = bundle.path().to_str().unwrap();
    let rt = prestarting_runtime(home.path());
    let id = rt.create_session(reference, None).await.unwrap().id;
    let cache = home.path().join("run/sandbox");
    let deadline = Instant::now() + Duration::from_secs(10);
    while entries(&cache, "etc-").is_empty() {
        assert!(
            Instant::now() < deadline,
            "no /etc snapshot was made for the new session: {:?}",
            entries(&cache, "")
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Made with no worker: the session has had no turn, and no spare is started before a first worker.
    assert_eq!(processes_with(&id), 0);
    assert_eq!(rt.spare_workers(), 0);
    // The first turn's worker takes it as it is.
    let (code, out, _) = command(&rt, &id, "ls /etc/passwd").await;
    assert_eq!((code, out.as_str()), (Some(0), "/etc/passwd\n"));
    assert_eq!(entries(&cache, "etc-").len(), 1);
    rt.shutdown("test over").await;
}

/// A new session's first turn checkpoints its workspace beside its first model call, and here its worker starts
/// beside that call too, taking the spare: the two meet on the session's workspace directory, which the spare's
/// replaces. The checkpoint always finds one there, and every first turn completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_turns_that_take_the_spare_as_they_checkpoint_their_workspace_all_complete() {
    // A model slow enough that each turn's worker has started, from the spare, before the turn ends, even on a
    // busy machine.
    let (home, bundle) =
        home_and_confined_bundle_scripted(r#"{turns: [{replies: [{text: "ok", delay_ms: 100}]}]}"#);
    let reference = bundle.path().to_str().unwrap();
    // As a turn starts, not 10 ms into its first call: the worker's start meets the checkpoint's.
    let rt = prestarting_runtime_with(home.path(), |o| o.worker_ahead_after = Some(Duration::ZERO));
    let first = rt.create_session(reference, None).await.unwrap().id;
    command(&rt, &first, "true").await;
    let spares = home.path().join("run/workspaces");
    // The two meet in a few of these rounds: a build that left the workspace missing for an instant failed four
    // runs of four, at rounds 12, 22, 27 and 37.
    for round in 0..60 {
        wait_for_a_spare(&rt).await;
        let ready = entries(&spares, "spare-");
        let id = rt.create_session(reference, None).await.unwrap().id;
        let (outcome, _) = super::support::run_turn(&rt, &id, "hi").await;
        assert_eq!(
            (outcome.status, outcome.error),
            (service_ipc::TurnStatus::Completed, None),
            "round {round}"
        );
        // The spare's workspace became the session's: the turn's worker was the spare.
        let left = entries(&spares, "spare-");
        assert!(
            ready.iter().all(|name| !left.contains(name)),
            "round {round}: {ready:?} not taken"
        );
    }
    rt.shutdown("test over").await;
}

/// A command in a session that took the spare plays a hostile agent against the exchange's two directories: it tries
/// to remove or move its workspace (the spare's directory, now the session's), and to write where the spare's
/// directory was and into the session's directory on the host. All of it fails: the workspace stays the session's
/// directory, what the command writes lands there only, and the spare's old place stays gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_in_a_taken_spare_can_neither_move_its_workspace_nor_reach_what_it_replaced() {
    let (home, bundle) = home_and_confined_bundle();
    let reference = bundle.path().to_str().unwrap();
    let rt = prestarting_runtime(home.path());
    let first = rt.create_session(reference, None).await.unwrap().id;
    command(&rt, &first, "true").await;
    wait_for_a_spare(&rt).await;
    let spares = home.path().join("run/workspaces");
    let ready = entries(&spares, "spare-");
    assert_eq!(ready.len(), 1, "{ready:?}");
    let spare = spares.join(&ready[0]);

    let second = rt.create_session(reference, None).await.unwrap().id;
    let session = home.path().join("sessions").join(&second);
    let attack = format!(
        "rmdir /workspace; mv /workspace /tmp/moved; mkdir -p {spare} && echo spare > {spare}/planted.txt; \
         echo session > {session}/planted.txt; echo in > /workspace/in.txt; true",
        spare = spare.display(),
        session = session.display()
    );
    let (code, out, err) = command(&rt, &second, &attack).await;
    assert_eq!(code, Some(0), "{out}{err}");
    // The sandbox's root and the workspace's place in it are read-only; the host paths do not exist inside.
    assert!(
        err.contains("rmdir: failed to remove '/workspace'"),
        "{err}"
    );
    assert!(err.contains("mv: cannot remove '/workspace'"), "{err}");
    assert!(
        err.contains("planted.txt: No such file or directory"),
        "{err}"
    );

    let workspace = session.join("workspace");
    assert!(
        workspace.symlink_metadata().unwrap().is_dir(),
        "the session's workspace is no longer a directory"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("in.txt")).unwrap(),
        "in\n",
        "the command's file did not land in the session's workspace: {err}"
    );
    assert!(!spare.exists(), "the spare's old place exists again: {err}");
    assert!(!session.join("planted.txt").exists(), "{err}");
    // The command's own view of where it wrote: the workspace, as every session sees it.
    let (_, out, _) = command(&rt, &second, "pwd; ls").await;
    assert_eq!(out, "/workspace\nin.txt\n");
    rt.shutdown("test over").await;
}
