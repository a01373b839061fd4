//! The operator's host hooks: `PermissionRequest` hooks that config.toml runs on the host (`run = "host"`), for
//! an approval service the sandbox cannot reach. The supervisor starts them itself when the rules put a call to a
//! person, before anyone is asked; what they decide answers the question as a person would, naming the hook, and
//! only when they decide nothing is a person asked. While the operator has such hooks for a call, a sandbox hook's
//! answer does not count: the operator's hooks are not the bundle's to outvote.
//!
//! Their input is what the supervisor knows of the call: the tool and what it is about (`command` for Bash,
//! `file_path` for the file tools, `key` otherwise), as the question shows it. They run in the operator's scripts
//! folder (`$SERVICE_HOME/hooks`), never in the workspace the sandbox writes.

use std::sync::Arc;

use serde_json::{json, Value};
use service_ipc::{ApprovalDecision, EventPayload, HookEvent, HookRef, HookSpec, ToWorker};
use service_worker::hooks::{self, Decision, Matcher, Verdict, Where};
use tokio_util::sync::CancellationToken;

use super::approvals::{Pending, Reply};
use super::session::Session;
use super::Inner;

/// A question about to be asked: journaled with its answer when a hook gave one, else put to a person.
pub(super) struct Pose {
    pub session: Arc<Session>,
    pub pending: Pending,
    pub request_id: String,
    /// Its `permission_requested` event.
    pub requested: EventPayload,
}

impl Pose {
    /// A hook answered, as a person would have: the question and its answer are journaled together, naming the
    /// hook, and the worker is told who decided.
    pub fn answered(self, hook: HookRef, decision: ApprovalDecision, message: Option<String>) {
        let decision = match decision {
            ApprovalDecision::Deny => ApprovalDecision::Deny,
            _ => ApprovalDecision::AllowOnce,
        };
        let reason = super::approvals::reason(decision, message);
        self.session.emit(self.requested);
        self.session.emit(EventPayload::ApprovalResolved {
            turn_id: self.pending.turn_id,
            request_id: self.request_id.clone(),
            decision,
            reason: reason.clone(),
            child_session_id: None,
            hook: Some(hook.clone()),
        });
        if let Reply::Worker(worker) = self.pending.reply {
            let _ = worker.try_send(ToWorker::ApprovalDecision {
                request_id: self.request_id,
                decision,
                reason,
                hook: Some(hook),
            });
        }
    }

    /// No hook answered: the question waits for a person, unless its turn ended while the hooks ran.
    pub fn ask_a_person(self, rt: &Inner) {
        if self.session.active_turn().as_deref() != Some(self.pending.turn_id.as_str()) {
            return;
        }
        if rt.approvals.insert(self.request_id, self.pending) {
            self.session.emit(self.requested);
        }
    }
}

/// A question the rules put to a person.
pub(super) struct Question {
    pub request_id: String,
    pub turn_id: String,
    pub call_id: String,
    pub tool: String,
    pub key: String,
}

impl Question {
    fn tool_input(&self) -> Value {
        match self.tool.as_str() {
            "Bash" => json!({ "command": self.key }),
            "Read" | "Write" | "Edit" => json!({ "file_path": self.key }),
            _ => json!({ "key": self.key }),
        }
    }
}

/// The session's host hooks (read with its other hooks) whose matcher selects this call.
pub(super) fn selecting(rt: &Inner, session: &Session, tool: &str, key: &str) -> Vec<HookSpec> {
    let input = json!({ "command": key });
    session
        .host_hooks(&rt.home)
        .iter()
        .filter(|h| h.event == HookEvent::PermissionRequest)
        .filter(|h| Matcher::parse(h.matcher.as_deref()).is_ok_and(|m| m.selects(tool, &input)))
        .cloned()
        .collect()
}

/// Runs `specs` for `question` in the background; a decision they make answers it, else `pose` is put to a
/// person once they ended.
pub(super) fn ask(rt: Arc<Inner>, specs: Vec<HookSpec>, question: Question, pose: Pose) {
    tokio::spawn(async move {
        let session = pose.session.clone();
        let cwd = session.cwd();
        // The hook runs on the host, so not in the workspace the sandbox writes: a relative path in its command
        // would name whatever the agent put there. It runs where the operator's scripts are (the store's root
        // without them); the input's `cwd` and `CLAUDE_PROJECT_DIR` still name the workspace.
        let scripts = Some(rt.home.operator_hooks_dir())
            .filter(|d| d.is_dir())
            .unwrap_or_else(|| rt.home.root().to_path_buf());
        let input = json!({
            "session_id": session.id,
            "transcript_path": null,
            "cwd": cwd,
            "hook_event_name": HookEvent::PermissionRequest.as_str(),
            "permission_mode": "default",
            "turn_id": question.turn_id,
            "tool_name": question.tool,
            "tool_input": question.tool_input(),
            "tool_use_id": question.call_id,
        });
        let input = serde_json::to_vec(&input).unwrap_or_default();
        let env = [
            ("SERVICE_SESSION_ID", session.id.clone()),
            ("CLAUDE_PROJECT_DIR", cwd.display().to_string()),
        ];
        let at = Where {
            event: HookEvent::PermissionRequest,
            turn_id: Some(&question.turn_id),
            call_id: Some(&question.call_id),
            cwd: &scripts,
            env: &env,
            confine: false,
        };
        let cancel = CancellationToken::new();
        let runs = specs.iter().map(|spec| {
            let (session, input, cancel) = (&session, &input, &cancel);
            let emit = move |e: EventPayload| {
                session.emit(e);
                std::future::ready(())
            };
            hooks::run_one(spec, at, input, cancel, emit)
        });
        let verdict = Verdict::of(futures::future::join_all(runs).await);
        let decision = match verdict.decision {
            Some(Decision::Allow) => ApprovalDecision::AllowOnce,
            Some(Decision::Deny | Decision::Block) => ApprovalDecision::Deny,
            _ => return pose.ask_a_person(&rt),
        };
        let reason = verdict.reason_or("decided");
        match verdict.by {
            Some(hook) => pose.answered(hook, decision, Some(reason)),
            None => pose.ask_a_person(&rt),
        }
    });
}
