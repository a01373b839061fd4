//! SIGTERM drains a server, as an orchestrator stops a node in a rolling restart: `readyz` answers 503 at once,
//! new turns are taken through `--pre-stop-delay` and refused with 503 `draining` after it, and a running turn
//! ends as it would have before the process exits on its own.

use std::time::{Duration, Instant};

use serde_json::json;
use tempfile::TempDir;

use super::http_client::{task, Api};
use super::support::{write_bundle, Server};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_turns_readyz_503_at_once_lets_the_running_turn_finish_and_refuses_new_turns_after_the_delay(
) {
    let home = TempDir::new().unwrap();
    let bundle = TempDir::new().unwrap();
    write_bundle(
        bundle.path(),
        r#"{turns: [{when: "slow", replies: [{tool_calls: [{name: "Bash", arguments: {command: "sleep 3"}}]}, {text: "finished"}]}, {replies: [{text: "quick"}]}]}"#,
        "",
        "workspace_write",
    );
    let bundle_ref = bundle.path().to_str().unwrap().to_string();
    let drain = ["--pre-stop-delay", "1s", "--drain-timeout", "20s"];
    let mut api = Api::new(Server::start(home.path(), &drain, &[]));
    let slow = api.session(&bundle_ref).await;
    let other = api.session(&bundle_ref).await;
    let mut sse = api.events(&slow, None).await;
    let (status, _) = api
        .post(
            &format!("/sessions/{slow}/run"),
            json!({"input": task("slow")}),
        )
        .await;
    assert_eq!(status, 202);
    sse.until("exec_command_begin").await;

    let pid = nix::unistd::Pid::from_raw(api.server().child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let signalled = Instant::now();
    loop {
        let (status, body) = api.get("/readyz").await;
        if status == 503 {
            assert_eq!(body["error"]["code"], "draining", "{body}");
            break;
        }
        assert!(
            signalled.elapsed() < Duration::from_millis(500),
            "still ready: {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Within the pre-stop delay a turn on its way is still taken.
    assert_eq!(api.answer(&other, "quick one").await, "quick");

    tokio::time::sleep(Duration::from_millis(1200).saturating_sub(signalled.elapsed())).await;
    let refused = api
        .req(
            reqwest::Method::POST,
            &format!("/sessions/{other}/run-sync"),
        )
        .json(&json!({"input": task("too late")}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status().as_u16(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "draining", "{body}");

    // The running turn ends as it would have, and then the server exits by itself.
    let end = sse.until("turn_completed").await;
    assert_eq!(
        end.last().unwrap().1["payload"]["payload"]["final_message"],
        "finished"
    );
    let status = api.into_server().wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    assert!(signalled.elapsed() < Duration::from_secs(10));
}
