//! Operator commands run back to back in one sandboxed session: the first starts a shell, later ones are handed to
//! the spare bash the worker keeps waiting, and both must behave the same.

use std::time::Duration;

use futures::StreamExt;
use service_ipc::{EventPayload, ExecStream};
use tempfile::TempDir;

use super::support::{runtime, write_bundle};

/// Exit code, stdout and stderr of one operator command, read from its events.
pub(super) async fn command(
    rt: &service_supervisor::ServiceRuntime,
    id: &str,
    text: &str,
) -> (Option<i32>, String, String) {
    let mut events = rt.subscribe_session(id).await.unwrap();
    let outcome = rt.run_session_command(id, text).await.unwrap();
    let (mut stdout, mut stderr) = (String::new(), String::new());
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .unwrap()
            .unwrap();
        match msg.payload {
            EventPayload::ExecCommandOutputDelta { stream, chunk, .. } => match stream {
                ExecStream::Stdout => stdout.push_str(&chunk),
                ExecStream::Stderr => stderr.push_str(&chunk),
            },
            EventPayload::ExecCommandEnd { .. } => break,
            _ => {}
        }
    }
    (outcome.exit_code, stdout, stderr)
}

/// A live session of a writable bundle in a workspace with a directory `sub`; the directories live as long as the
/// first value.
async fn session() -> ([TempDir; 3], service_supervisor::ServiceRuntime, String) {
    let (home, bundle, cwd) = (
        TempDir::new().unwrap(),
        TempDir::new().unwrap(),
        super::support::sandbox_tempdir(),
    );
    write_bundle(
        bundle.path(),
        r#"{turns: [{replies: [{text: "ok"}]}]}"#,
        "",
        "workspace_write",
    );
    std::fs::create_dir(cwd.path().join("sub")).unwrap();
    super::support::give_to_sandbox(cwd.path());
    let rt = runtime(home.path());
    let id = rt
        .create_session(bundle.path().to_str().unwrap(), Some(cwd.path()))
        .await
        .unwrap()
        .id;
    ([home, bundle, cwd], rt, id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_handed_to_the_waiting_shell_behaves_as_one_started_for_it() {
    let (_dirs, rt, id) = session().await;
    let probe = r#"echo "[$BASH_EXECUTION_STRING]"; pwd; echo err >&2; read x; echo "read=$?"; set | grep -c '^__service_'; exit 5"#;
    let first = command(&rt, &id, probe).await;
    assert_eq!(
        first,
        (
            Some(5),
            format!("[{probe}]\n/workspace\nread=1\n0\n"),
            "err\n".to_string()
        )
    );
    // A second command right after the first: commands back to back make the worker keep spares. Given time to
    // start one, `$SECONDS` then tells a waiting shell from a new one.
    assert_eq!(command(&rt, &id, probe).await, first);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (_, age, _) = command(&rt, &id, "echo $SECONDS").await;
    assert_ne!(
        age.trim(),
        "0",
        "the command did not go to the waiting shell"
    );
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(command(&rt, &id, probe).await, first);
    }
    let (code, out, _) = command(&rt, &id, "cd sub && pwd; if").await;
    assert_eq!((code, out.as_str()), (Some(2), ""));
    let (code, out, _) = command(&rt, &id, "pwd").await;
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "/workspace\n"),
        "a cd must not leak into the next command"
    );
    rt.shutdown("test over").await;
}

/// A command's output reaches the session's readers while the command runs, not with its end; the worker lets an
/// event wait a moment for others to share its write, and the first line of a command that then sleeps is one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commands_first_output_is_seen_while_it_still_runs() {
    let (_dirs, rt, id) = session().await;
    // Back to back, so the second goes to a waiting shell: its begin and first line come within the moment.
    command(&rt, &id, "true").await;
    let mut events = rt.subscribe_session(&id).await.unwrap();
    let started = std::time::Instant::now();
    let running = tokio::spawn({
        let (rt, id) = (rt.clone(), id.clone());
        async move {
            rt.run_session_command(&id, "echo first; sleep 4; echo second")
                .await
        }
    });
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), events.next())
            .await
            .expect("no event for 10 s")
            .unwrap();
        match msg.payload {
            EventPayload::ExecCommandOutputDelta { chunk, .. } if chunk.contains("first") => break,
            EventPayload::ExecCommandEnd { .. } => {
                panic!("the first line came only with the command's end")
            }
            _ => {}
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the first line took {:?}",
        started.elapsed()
    );
    assert_eq!(running.await.unwrap().unwrap().exit_code, Some(0));
    rt.shutdown("test over").await;
}
