//! Permission rules name `Agent`: a rule or `default: deny` stops a subagent from starting, whether the model's
//! reply or a CodeAct program asks, and an `ask` is asked by the supervisor itself. The worker is not asked: it runs
//! with the model's commands, so a taken-over one must not be able to start what agent.yaml denies.

use serde_json::json;
use service_ipc::{ApprovalDecision, EventPayload, ToolCallStatus};
use tempfile::TempDir;

use super::subagents::{agent_call, bundle, plain, session, subagent, tool_results};
use super::support::{final_message, run_turn, runtime};

/// A helper subagent's bundle and a parent bundle whose agent.yaml adds `extra` and whose model `replies`.
fn parent_and_helper(
    dirs: &TempDir,
    extra: serde_json::Value,
    replies: serde_json::Value,
) -> std::path::PathBuf {
    let helper = dirs.path().join("helper");
    plain(
        &helper,
        "helper",
        "read_only",
        json!([{"text": "helper ran"}]),
    );
    let parent = dirs.path().join("parent");
    let mut extra = extra;
    extra["subagents"] = json!([subagent("helper", &helper)]);
    bundle(&parent, "parent", "read_only", &[], extra, replies);
    parent
}

fn finished(events: &[service_ipc::EventMsg]) -> Vec<(String, ToolCallStatus)> {
    events
        .iter()
        .filter_map(|e| match &e.payload {
            EventPayload::ToolCallFinished { tool, status, .. } => Some((tool.clone(), *status)),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_rule_or_default_deny_stops_a_subagent_from_a_reply_and_from_codeact() {
    let replies =
        json!([{"tool_calls": [agent_call("helper", "go")]}, {"text": "{{last_tool_output}}"}]);
    let cases = [
        json!({"permissions": {"default": "allow", "rules": [{"tool": "Agent", "action": "deny"}]}}),
        json!({"permissions": {"default": "allow", "rules": [{"tool": "Agent(helper)", "action": "deny"}]}}),
        json!({"permissions": {"default": "deny"}}),
    ];
    for extra in cases {
        let (home, dirs) = (TempDir::new().unwrap(), TempDir::new().unwrap());
        let parent = parent_and_helper(&dirs, extra.clone(), replies.clone());
        let rt = runtime(home.path());
        let id = session(&rt, &parent, None).await;
        let (_, events) = run_turn(&rt, &id, "go").await;
        assert_eq!(
            finished(&events),
            vec![("Agent".into(), ToolCallStatus::Denied)],
            "{extra}"
        );
        assert!(final_message(&events).contains("denies it"), "{extra}");
        assert_eq!(
            rt.list_sessions().await.unwrap().len(),
            1,
            "no child: {extra}"
        );
        rt.shutdown("test done").await;
    }

    // A CodeAct program's agent() goes the same way.
    let (home, dirs) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let parent = parent_and_helper(
        &dirs,
        json!({"executor": "codeact", "permissions": {"default": "deny"}}),
        json!([
            {"text": "```python\nfinal_answer(agent('helper', 'hello from code'))\n```"},
            {"text": "done"},
        ]),
    );
    let rt = runtime(home.path());
    let id = session(&rt, &parent, None).await;
    let (_, events) = run_turn(&rt, &id, "go").await;
    let results = tool_results(&events);
    assert!(
        results
            .iter()
            .any(|(tool, out)| tool == "Agent" && out.contains("denies it")),
        "{results:?}"
    );
    assert!(!format!("{events:?}").contains("helper ran"));
    assert_eq!(rt.list_sessions().await.unwrap().len(), 1, "no child");
    rt.shutdown("test done").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_ask_is_asked_by_the_supervisor_and_a_denial_stops_it() {
    let (home, dirs) = (TempDir::new().unwrap(), TempDir::new().unwrap());
    let parent = parent_and_helper(
        &dirs,
        json!({"permissions": {"default": "allow", "rules": [{"tool": "Agent", "match": "help*", "action": "ask"}]}}),
        json!([
            {"tool_calls": [agent_call("helper", "one")]},
            {"tool_calls": [agent_call("helper", "two")]},
            {"text": "{{last_tool_output}}"},
        ]),
    );
    let rt = runtime(home.path());
    let id = session(&rt, &parent, None).await;
    let mut stream = rt.subscribe_session(&id).await.unwrap();
    let pending = rt
        .start_turn(&id, service_ipc::Task::new("go"), Default::default())
        .await
        .unwrap();
    use futures::StreamExt;
    let mut answered = Vec::new();
    while answered.len() < 2 {
        let msg = stream.next().await.unwrap();
        if let EventPayload::PermissionRequested {
            request_id,
            tool,
            summary,
            ..
        } = msg.payload
        {
            assert_eq!((tool.as_str(), summary.as_str()), ("Agent", "helper"));
            let decision = match answered.len() {
                0 => ApprovalDecision::AllowOnce,
                _ => ApprovalDecision::Deny,
            };
            rt.resolve_approval(&request_id, decision).await.unwrap();
            answered.push(decision);
        }
    }
    let outcome = pending.outcome.await.unwrap();
    assert!(
        outcome.final_message.contains("the operator denied it"),
        "{}",
        outcome.final_message
    );
    // The first call ran its child; the denied one did not.
    assert_eq!(rt.list_sessions().await.unwrap().len(), 2);
    rt.shutdown("test done").await;
}
