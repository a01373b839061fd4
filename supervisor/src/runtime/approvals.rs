//! The in-memory approval store: pending permission requests by id, and which ids were already answered; and what an
//! `allow_always` answer grants.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use service_ipc::{ApprovalDecision, EventPayload, ToWorker};
use tokio::sync::mpsc;

use super::error::{Result, RuntimeError};

/// Answered or dropped ids remembered, to tell "already resolved" from "never existed".
const REMEMBERED: usize = 4096;

/// What an `allow_always` decision allows for the rest of the session.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Grant {
    /// A tool (builtin or `mcp__<server>__<tool>`) with this key argument.
    Tool {
        /// The tool.
        tool: String,
        /// Its key argument (the command, the path, …).
        key: String,
    },
    /// Connections to this host and port through the egress proxy, while it resolves to these addresses.
    Host {
        /// Host name as asked.
        host: String,
        /// Port.
        port: u16,
        /// The addresses it resolved to, sorted: another resolution asks again.
        addresses: Vec<String>,
    },
}

/// A request waiting for an operator.
#[derive(Debug, Clone)]
pub struct Pending {
    /// Session of the request.
    pub session_id: String,
    /// Turn of the request.
    pub turn_id: String,
    /// What an `allow_always` answer grants.
    pub grant: Grant,
    /// Where to send the decision.
    pub reply: Reply,
}

/// Who waits for a decision.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A worker's paused tool call.
    Worker(mpsc::Sender<ToWorker>),
    /// A connection held by the egress proxy.
    Network(mpsc::Sender<ApprovalDecision>),
    /// A call the supervisor holds while it asks (a subagent about to start).
    Supervisor(mpsc::Sender<ApprovalDecision>),
}

/// The longest denial reason passed on to the model, in characters.
pub const MAX_REASON_CHARS: usize = 2000;

/// The reason a denial carries to the model: on one line, with no control character (it is journaled and shown
/// on every client's terminal), trimmed, cut at [`MAX_REASON_CHARS`]; none when empty or with an allow.
pub fn reason(decision: ApprovalDecision, reason: Option<String>) -> Option<String> {
    let text: String = reason?
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let text = text.trim();
    (decision == ApprovalDecision::Deny && !text.is_empty())
        .then(|| text.chars().take(MAX_REASON_CHARS).collect())
}

/// Pending requests and recently closed ids.
#[derive(Default)]
pub struct ApprovalStore {
    state: Mutex<State>,
}

/// Why a request is no longer pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closed {
    /// Resolved, or dropped with its turn.
    Done,
    /// Its session was deleted.
    SessionGone,
}

#[derive(Default)]
struct State {
    pending: HashMap<String, Pending>,
    closed: HashMap<String, Closed>,
    closed_order: VecDeque<String>,
}

impl State {
    fn close(&mut self, id: String, why: Closed) {
        if self.closed.insert(id.clone(), why).is_none() {
            self.closed_order.push_back(id);
            while self.closed_order.len() > REMEMBERED {
                if let Some(old) = self.closed_order.pop_front() {
                    self.closed.remove(&old);
                }
            }
        }
    }

    fn close_where(&mut self, why: Closed, pred: impl Fn(&Pending) -> bool) {
        let ids: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, p)| pred(p))
            .map(|(id, _)| id.clone())
            .collect();
        for id in ids {
            self.pending.remove(&id);
            self.close(id, why);
        }
    }
}

impl ApprovalStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores a pending request; false when the id was pending or used before (it is not stored then).
    pub fn insert(&self, request_id: String, pending: Pending) -> bool {
        let mut state = self.lock();
        if state.pending.contains_key(&request_id) || state.closed.contains_key(&request_id) {
            return false;
        }
        let what = match &pending.grant {
            Grant::Tool { tool, .. } => tool.as_str(),
            Grant::Host { .. } => "network",
        };
        tracing::info!(session = %pending.session_id, turn = %pending.turn_id, request_id = %request_id, tool = what, "approval asked");
        state.pending.insert(request_id, pending);
        true
    }

    /// Takes a pending request for resolution; errors tell unknown ids from closed ones.
    pub fn take(&self, request_id: &str) -> Result<Pending> {
        let mut state = self.lock();
        match state.pending.remove(request_id) {
            Some(p) => {
                state.close(request_id.to_string(), Closed::Done);
                Ok(p)
            }
            None => Err(match state.closed.get(request_id) {
                Some(Closed::Done) => RuntimeError::ApprovalNotPending(request_id.into()),
                Some(Closed::SessionGone) => RuntimeError::ApprovalSessionGone(request_id.into()),
                None => RuntimeError::ApprovalNotFound(request_id.into()),
            }),
        }
    }

    /// The session of a pending request.
    pub fn session_of(&self, request_id: &str) -> Option<String> {
        self.lock()
            .pending
            .get(request_id)
            .map(|p| p.session_id.clone())
    }

    /// Drops the pending requests of a turn that ended.
    pub fn drop_turn(&self, turn_id: &str) {
        self.lock()
            .close_where(Closed::Done, |p| p.turn_id == turn_id);
    }

    /// Drops the pending requests of a deleted session.
    pub fn drop_session(&self, session_id: &str) {
        self.lock()
            .close_where(Closed::SessionGone, |p| p.session_id == session_id);
    }
}

/// A pending request as an operator reads it, from its event: the TUI and `run` ask with it.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    /// Request id to answer.
    pub request_id: String,
    /// The tool, or `network` for a host.
    pub tool: String,
    /// The key argument, or `host:port (addresses)` with a warning for internal ones.
    pub summary: String,
    /// For Write and Edit: what would change, as a unified diff.
    pub diff: Option<String>,
    /// The rule `allow_project` would keep for the session's project, when one is offered.
    pub project_rule: Option<String>,
    /// What would make the call fail if allowed (a file the sandbox may not write).
    pub warning: Option<String>,
}

/// The request a `permission_requested` or `network_permission_requested` event asks about; None for others.
pub fn asked(payload: &EventPayload) -> Option<Asked> {
    match payload {
        EventPayload::PermissionRequested {
            request_id,
            tool,
            summary,
            diff,
            project_rule,
            warning,
            child_session_id,
            ..
        } => Some(Asked {
            request_id: request_id.clone(),
            // A subagent's request names it (and is never allowed by `auto-edit` on the parent's behalf).
            tool: match child_session_id {
                Some(child) => format!("{tool} (subagent session {child})"),
                None => tool.to_string(),
            },
            summary: summary.clone(),
            diff: diff.clone(),
            // A subagent's project is its parent's to keep rules for, from the parent's own questions.
            project_rule: project_rule.clone().filter(|_| child_session_id.is_none()),
            warning: warning.clone(),
        }),
        EventPayload::NetworkPermissionRequested {
            request_id,
            host,
            port,
            addresses,
            internal,
            ..
        } => Some(Asked {
            request_id: request_id.clone(),
            tool: "network".into(),
            summary: network_summary(host, *port, addresses, *internal),
            diff: None,
            project_rule: None,
            warning: None,
        }),
        _ => None,
    }
}

/// Whether `approvals = "auto-edit"` allows `asked` without asking: a Write or an Edit of a path inside the
/// workspace, whose root the worker sees as `root` (`/workspace` in a sandbox; the host directory unconfined).
pub fn auto_edit_allows(asked: &Asked, root: &str) -> bool {
    let path = std::path::Path::new(&asked.summary);
    matches!(asked.tool.as_str(), "Write" | "Edit")
        && path.is_absolute()
        && path
            .components()
            .all(|c| c != std::path::Component::ParentDir)
        && path.starts_with(root)
}

/// `host:port (addresses)`, with a warning when one of them is on the supervisor's side.
pub fn network_summary(host: &str, port: u16, addresses: &[String], internal: bool) -> String {
    let warning = if internal {
        ", an internal address: approving opens a service on the supervisor's side, not the internet"
    } else {
        ""
    };
    format!("{host}:{port} ({}{warning})", addresses.join(", "))
}
