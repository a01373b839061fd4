//! Permission rules and approvals: ask / allow_once / allow_always / deny, through real workers.

use std::time::Duration;

use futures::StreamExt;
use pretty_assertions::assert_eq;
use service_ipc::{
    ApprovalDecision, EventMsg, EventPayload, Task, ToolCallStatus, TurnOverrides, TurnStatus,
};
use service_supervisor::runtime::{EventStream, RuntimeError};
use service_supervisor::ServiceRuntime;
use tempfile::TempDir;

use super::support::{events_of_turn, final_message, kinds, run_turn, runtime, write_bundle, Env};

const RULES: &str = "permissions:\n  default: allow\n  rules:\n    - { tool: Bash, match: \"rm *\", action: deny }\n    - { tool: Write, action: ask }\n";

const SCRIPT: &str = r#"{turns: [
  {when: "remove", replies: [{tool_calls: [{name: "Bash", arguments: {command: "rm -rf precious"}}]}, {text: "result: {{last_tool_output}}"}]},
  {replies: [{tool_calls: [{name: "Write", arguments: {file_path: "out.txt", content: "written"}}]}, {text: "result: {{last_tool_output}}"}]},
]}"#;

struct Setup {
    home: TempDir,
    bundle: TempDir,
}

fn setup() -> Setup {
    let s = Setup {
        home: TempDir::new().unwrap(),
        bundle: TempDir::new().unwrap(),
    };
    write_bundle(s.bundle.path(), SCRIPT, RULES, "workspace_write");
    s
}

struct Session {
    id: String,
    cwd: TempDir,
}

async fn session(rt: &ServiceRuntime, s: &Setup) -> Session {
    let cwd = super::support::sandbox_tempdir();
    let id = rt
        .create_session(s.bundle.path().to_str().unwrap(), Some(cwd.path()))
        .await
        .unwrap()
        .id;
    Session { id, cwd }
}

/// Reads events until one of `kind`, returning everything read.
async fn until_kind(events: &mut EventStream, kind: &str) -> Vec<EventMsg> {
    let mut out = Vec::new();
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(20), events.next())
            .await
            .unwrap()
            .unwrap();
        let done = msg.payload.kind() == kind;
        out.push(msg);
        if done {
            return out;
        }
    }
}

fn request_id(events: &[EventMsg]) -> String {
    events
        .iter()
        .find_map(|e| match &e.payload {
            EventPayload::PermissionRequested { request_id, .. } => Some(request_id.clone()),
            _ => None,
        })
        .expect("a permission_requested event")
}

async fn turn_until_ask(
    rt: &ServiceRuntime,
    id: &str,
    prompt: &str,
) -> (EventStream, String, Vec<EventMsg>, String) {
    let mut events = rt.subscribe_session(id).await.unwrap();
    let pending = rt
        .start_turn(id, Task::new(prompt), TurnOverrides::default())
        .await
        .unwrap();
    let before = until_kind(&mut events, "permission_requested").await;
    let rid = request_id(&before);
    // keep the outcome receiver alive by polling it later through the events
    std::mem::forget(pending.outcome);
    (events, pending.turn_id, before, rid)
}

fn finished(events: &[EventMsg]) -> Vec<(ToolCallStatus, String)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolCallFinished { status, output, .. } => {
                Some((*status, output.clone()))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_is_resolved_by_each_decision() {
    let s = setup();
    let rt = runtime(s.home.path());
    for decision in [
        ApprovalDecision::AllowOnce,
        ApprovalDecision::AllowAlways,
        ApprovalDecision::Deny,
    ] {
        let sess = session(&rt, &s).await;
        let (mut events, turn_id, before, rid) = turn_until_ask(&rt, &sess.id, "write it").await;
        let EventPayload::PermissionRequested {
            tool,
            summary,
            rule,
            ..
        } = &before.last().unwrap().payload
        else {
            panic!()
        };
        assert_eq!(tool.as_str(), "Write");
        assert!(summary.ends_with("/out.txt"), "{summary}");
        assert_eq!(rule.as_deref(), Some("rules[1]: Write -> ask"));
        assert!(
            !sess.cwd.path().join("out.txt").exists(),
            "the tool must pause until a decision"
        );

        rt.resolve_approval(&rid, decision).await.unwrap();
        let mut all = before;
        all.extend(events_of_turn(&mut events, &turn_id).await);
        let ks = kinds(&all);
        let at = |k: &str| ks.iter().position(|x| *x == k).unwrap();
        assert!(at("tool_call_started") < at("permission_requested"));
        assert!(at("permission_requested") < at("approval_resolved"));
        assert!(at("approval_resolved") < at("tool_call_finished"));
        let resolved = all.iter().find_map(|e| match &e.payload {
            EventPayload::ApprovalResolved {
                decision,
                request_id,
                ..
            } => Some((*decision, request_id.clone())),
            _ => None,
        });
        assert_eq!(resolved, Some((decision, rid.clone())));
        let results = finished(&all);
        let written = sess.cwd.path().join("out.txt");
        if decision == ApprovalDecision::Deny {
            assert_eq!(results[0].0, ToolCallStatus::Denied);
            assert!(
                final_message(&all).contains("was denied by the operator"),
                "{}",
                final_message(&all)
            );
            assert!(!written.exists());
        } else {
            assert_eq!(results[0].0, ToolCallStatus::Ok);
            assert_eq!(std::fs::read_to_string(&written).unwrap(), "written");
        }
    }
    rt.shutdown("test over").await;
}

/// Runs a turn of `prompt` in session `id` to its end, asserting that it asked the operator nothing.
async fn turn_without_ask(rt: &ServiceRuntime, id: &str, prompt: &str) {
    let (_, evs) = run_turn(rt, id, prompt).await;
    assert!(
        !kinds(&evs).contains(&"permission_requested"),
        "{:?}",
        kinds(&evs)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_always_holds_for_its_session_only_and_a_restart_forgets_it_unless_the_store_is_shared(
) {
    let s = setup();
    let (first_id, first_cwd) = {
        let rt = runtime(s.home.path());
        let a = session(&rt, &s).await;
        let (mut events, turn_id, _, rid) = turn_until_ask(&rt, &a.id, "write").await;
        rt.resolve_approval(&rid, ApprovalDecision::AllowAlways)
            .await
            .unwrap();
        events_of_turn(&mut events, &turn_id).await;

        // Same session, same tool and path: no second ask.
        std::fs::remove_file(a.cwd.path().join("out.txt")).unwrap();
        turn_without_ask(&rt, &a.id, "write again").await;
        assert!(a.cwd.path().join("out.txt").exists());

        // Another session of the same runtime still asks.
        let b = session(&rt, &s).await;
        let (mut events, turn_id, _, rid) = turn_until_ask(&rt, &b.id, "write").await;
        rt.resolve_approval(&rid, ApprovalDecision::Deny)
            .await
            .unwrap();
        events_of_turn(&mut events, &turn_id).await;
        rt.shutdown("restart").await;
        (a.id, a.cwd)
    };
    let rt = runtime(s.home.path());
    if super::store_backend::postgres() {
        // A shared store keeps the grant for the session's next runner, this node after its restart included: in a
        // cluster a node's restart is not the service's (SCALING.md).
        turn_without_ask(&rt, &first_id, "write").await;
    } else {
        // A new runtime has forgotten the grant.
        let (mut events, turn_id, _, rid) = turn_until_ask(&rt, &first_id, "write").await;
        rt.resolve_approval(&rid, ApprovalDecision::AllowOnce)
            .await
            .unwrap();
        events_of_turn(&mut events, &turn_id).await;
    }
    drop(first_cwd);
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_rules_never_reach_the_operator_and_the_model_sees_the_denial() {
    let s = setup();
    let rt = runtime(s.home.path());
    let sess = session(&rt, &s).await;
    std::fs::create_dir(sess.cwd.path().join("precious")).unwrap();
    let mut events = rt.subscribe_session(&sess.id).await.unwrap();
    let pending = rt
        .start_turn(&sess.id, Task::new("remove it"), TurnOverrides::default())
        .await
        .unwrap();
    let evs = events_of_turn(&mut events, &pending.turn_id).await;
    assert!(!kinds(&evs).contains(&"permission_requested"));
    assert_eq!(
        finished(&evs),
        [(
            ToolCallStatus::Denied,
            "Bash \"rm -rf precious\" was denied by agent.yaml (rules[0]: Bash \"rm *\" -> deny)"
                .to_string()
        )]
    );
    assert!(final_message(&evs).starts_with("result: Bash \"rm -rf precious\" was denied"));
    assert!(sess.cwd.path().join("precious").is_dir());
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_repeated_and_orphaned_request_ids_give_distinct_errors() {
    let s = setup();
    let rt = runtime(s.home.path());
    assert!(matches!(
        rt.resolve_approval("no-such-id", ApprovalDecision::AllowOnce)
            .await,
        Err(RuntimeError::ApprovalNotFound(_))
    ));

    let sess = session(&rt, &s).await;
    let (mut events, turn_id, _, rid) = turn_until_ask(&rt, &sess.id, "write").await;
    rt.resolve_approval(&rid, ApprovalDecision::AllowOnce)
        .await
        .unwrap();
    let again = rt
        .resolve_approval(&rid, ApprovalDecision::Deny)
        .await
        .unwrap_err();
    assert!(
        matches!(again, RuntimeError::ApprovalNotPending(_)),
        "{again}"
    );
    events_of_turn(&mut events, &turn_id).await;

    // A turn interrupted while waiting drops its request.
    let (mut events, turn_id, _, rid) = turn_until_ask(&rt, &sess.id, "write").await;
    rt.interrupt(&sess.id).await.unwrap();
    let evs = events_of_turn(&mut events, &turn_id).await;
    assert_eq!(evs.last().unwrap().payload.kind(), "error");
    assert!(matches!(
        rt.resolve_approval(&rid, ApprovalDecision::AllowOnce).await,
        Err(RuntimeError::ApprovalNotPending(_))
    ));

    // A deleted session's request says so.
    let other = session(&rt, &s).await;
    let (_events, _turn, _, rid) = turn_until_ask(&rt, &other.id, "write").await;
    rt.delete_session(&other.id).await.unwrap();
    assert!(matches!(
        rt.resolve_approval(&rid, ApprovalDecision::AllowOnce).await,
        Err(RuntimeError::ApprovalSessionGone(_))
    ));
    rt.shutdown("test over").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sessions_waiting_at_once_resolve_in_the_opposite_order() {
    let s = setup();
    let rt = runtime(s.home.path());
    let a = session(&rt, &s).await;
    let b = session(&rt, &s).await;
    let (mut ea, ta, _, ra) = turn_until_ask(&rt, &a.id, "write").await;
    let (mut eb, tb, _, rb) = turn_until_ask(&rt, &b.id, "write").await;
    rt.resolve_approval(&rb, ApprovalDecision::AllowOnce)
        .await
        .unwrap();
    let evb = events_of_turn(&mut eb, &tb).await;
    assert_eq!(finished(&evb)[0].0, ToolCallStatus::Ok);
    assert!(b.cwd.path().join("out.txt").exists());
    assert!(!a.cwd.path().join("out.txt").exists(), "a is still waiting");
    rt.resolve_approval(&ra, ApprovalDecision::Deny)
        .await
        .unwrap();
    let eva = events_of_turn(&mut ea, &ta).await;
    assert_eq!(finished(&eva)[0].0, ToolCallStatus::Denied);
    assert!(!a.cwd.path().join("out.txt").exists());
    assert_eq!(
        rt.get_session(&a.id)
            .await
            .unwrap()
            .last_turn
            .unwrap()
            .status,
        TurnStatus::Completed
    );
    rt.shutdown("test over").await;
}

#[test]
fn one_shot_run_without_a_terminal_denies_and_says_which_flag_allows() {
    let env = Env::new();
    write_bundle(&env.path("asking"), SCRIPT, RULES, "workspace_write");
    std::fs::create_dir(env.path("ws")).unwrap();
    super::support::give_to_sandbox(&env.path("ws"));
    let run = env.run(&["run", "./asking", "--prompt", "write", "--cwd", "ws"]);
    let out = run.ok().to_string();
    assert!(out.contains("was denied by the operator"), "{out}");
    assert!(
        run.stderr.contains("denied Write") && run.stderr.contains("--approve"),
        "{}",
        run.stderr
    );
    assert!(!env.path("ws/out.txt").exists());

    let run = env.run(&[
        "run",
        "./asking",
        "--prompt",
        "write",
        "--cwd",
        "ws",
        "--approve",
    ]);
    run.ok();
    assert_eq!(
        std::fs::read_to_string(env.path("ws/out.txt")).unwrap(),
        "written"
    );
}
