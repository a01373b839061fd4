//! A task is a turn: its state, messages and answer follow from the turn's events. [`Tracker`] reads them one by
//! one, for a stream (each event's A2A updates) and for a snapshot (the journal folded), so both say the same.

use serde_json::json;
use service_ipc::{EventMsg, EventPayload};

use super::wire::{
    Artifact, ArtifactUpdate, Message, Part, Role, StatusUpdate, StreamResponse, Task, TaskState,
    TaskStatus,
};
use crate::facade::turn_end::{self, TurnEnd};
use crate::runtime::approvals::{self, Asked};

/// The id of a task's answer artifact.
const ANSWER: &str = "answer";

/// One task's state, built from its turn's events.
#[derive(Debug, Clone)]
pub struct Tracker {
    task: Task,
    answer: String,
    /// Whether a piece of the answer was streamed.
    streamed: bool,
    pending: Option<Asked>,
}

impl Tracker {
    /// A task for turn `turn_id` of conversation `context_id`, submitted.
    pub fn new(turn_id: &str, context_id: &str) -> Tracker {
        Tracker {
            task: Task {
                id: turn_id.to_string(),
                context_id: context_id.to_string(),
                status: TaskStatus {
                    state: TaskState::Submitted,
                    message: None,
                    timestamp: crate::runtime::record::now(),
                },
                artifacts: Vec::new(),
                history: Vec::new(),
            },
            answer: String::new(),
            streamed: false,
            pending: None,
        }
    }

    /// The task as it stands, with the answer so far.
    pub fn task(&self) -> Task {
        let mut task = self.task.clone();
        if !self.answer.is_empty() {
            task.artifacts = vec![self.artifact(self.answer.clone())];
        }
        task
    }

    /// The permission question the task waits on, if any.
    pub fn pending(&self) -> Option<&Asked> {
        self.pending.as_ref()
    }

    /// Its state.
    pub fn state(&self) -> TaskState {
        self.task.status.state
    }

    fn artifact(&self, text: String) -> Artifact {
        Artifact {
            artifact_id: ANSWER.into(),
            name: ANSWER.into(),
            parts: vec![Part::text(text)],
        }
    }

    fn message(&self, id: String, role: Role, parts: Vec<Part>) -> Message {
        Message {
            message_id: id,
            context_id: Some(self.task.context_id.clone()),
            task_id: Some(self.task.id.clone()),
            role,
            parts,
        }
    }

    fn status(&mut self, state: TaskState, message: Option<Message>, at: &str) -> StreamResponse {
        self.task.status = TaskStatus {
            state,
            message,
            timestamp: at.to_string(),
        };
        StreamResponse::StatusUpdate(StatusUpdate {
            task_id: self.task.id.clone(),
            context_id: self.task.context_id.clone(),
            status: self.task.status.clone(),
        })
    }

    fn piece(&mut self, text: String, last: bool) -> StreamResponse {
        let append = self.streamed;
        self.streamed = true;
        StreamResponse::ArtifactUpdate(ArtifactUpdate {
            task_id: self.task.id.clone(),
            context_id: self.task.context_id.clone(),
            artifact: self.artifact(text),
            append,
            last_chunk: last,
        })
    }

    /// Takes event `msg` into the task; returns the stream updates it makes (none for another turn's events).
    pub fn on(&mut self, msg: &EventMsg) -> Vec<StreamResponse> {
        let payload = &msg.payload;
        if payload.turn_id() != Some(self.task.id.as_str()) {
            return Vec::new();
        }
        let at = msg.created_at.as_str();
        match payload {
            EventPayload::TurnStarted { prompt, .. } => {
                let asked = self.message(
                    format!("{}-prompt", self.task.id),
                    Role::User,
                    vec![Part::text(prompt.clone())],
                );
                self.task.history.push(asked);
                return vec![self.status(TaskState::Working, None, at)];
            }
            EventPayload::AgentMessageDelta { delta, .. } => {
                self.answer.push_str(delta);
                return vec![self.piece(delta.clone(), false)];
            }
            EventPayload::ApprovalResolved { request_id, .. } => {
                if self
                    .pending
                    .as_ref()
                    .is_some_and(|p| &p.request_id == request_id)
                {
                    self.pending = None;
                    return vec![self.status(TaskState::Working, None, at)];
                }
                return Vec::new();
            }
            _ => {}
        }
        if let Some(asked) = approvals::asked(payload) {
            let question = self.message(
                format!("{}-question-{}", self.task.id, asked.request_id),
                Role::Agent,
                vec![
                    Part::text(format!(
                        "Permission needed: {} {}. Answer with a data part {{\"decision\": \"allow_once\"}}, \
                         \"allow_always\" or \"deny\".",
                        asked.tool, asked.summary
                    )),
                    Part::data(json!({
                        "request_id": asked.request_id,
                        "tool": asked.tool,
                        "summary": asked.summary,
                    })),
                ],
            );
            self.pending = Some(asked);
            return vec![self.status(TaskState::InputRequired, Some(question), at)];
        }
        let Some(end) = turn_end::of(payload, &self.task.id) else {
            return Vec::new();
        };
        self.pending = None;
        let mut updates = Vec::new();
        let (state, said) = match end {
            TurnEnd::Completed { final_message, .. } => {
                // The last piece is what the streamed pieces lack of the final answer (all of it when none came).
                let rest = final_message
                    .strip_prefix(self.answer.as_str())
                    .unwrap_or_default()
                    .to_string();
                self.answer = final_message.clone();
                updates.push(self.piece(rest, true));
                let answer = self.message(
                    format!("{}-answer", self.task.id),
                    Role::Agent,
                    vec![Part::text(final_message)],
                );
                self.task.history.push(answer);
                (TaskState::Completed, None)
            }
            TurnEnd::Interrupted => (TaskState::Canceled, None),
            TurnEnd::Refused { message } => (TaskState::Rejected, Some(message)),
            TurnEnd::MaxSteps { message } => (TaskState::Failed, Some(message)),
            TurnEnd::Failed { code, message } => {
                (TaskState::Failed, Some(format!("{code}: {message}")))
            }
        };
        let said = said.map(|text| {
            self.message(
                format!("{}-status", self.task.id),
                Role::Agent,
                vec![Part::text(text)],
            )
        });
        updates.push(self.status(state, said, at));
        updates
    }
}

/// Every task in `events` (one session's journal), oldest first.
pub fn all(events: &[EventMsg], context_id: &str) -> Vec<Tracker> {
    let mut tasks: Vec<Tracker> = Vec::new();
    for msg in events {
        if let EventPayload::TurnStarted { turn_id, .. } = &msg.payload {
            tasks.push(Tracker::new(turn_id, context_id));
        }
        if let Some(t) = msg
            .payload
            .turn_id()
            .and_then(|id| tasks.iter_mut().rev().find(|t| t.task.id == id))
        {
            t.on(msg);
        }
    }
    tasks
}

/// Task `turn_id` in `events`, with the sequence number of the last event read; None when the journal has no such
/// turn.
pub fn one(events: &[EventMsg], turn_id: &str, context_id: &str) -> Option<(Tracker, u64)> {
    let mut tracker: Option<Tracker> = None;
    for msg in events {
        if let EventPayload::TurnStarted { turn_id: t, .. } = &msg.payload {
            if t == turn_id {
                tracker = Some(Tracker::new(turn_id, context_id));
            }
        }
        if let Some(t) = tracker.as_mut() {
            t.on(msg);
        }
    }
    let last = events.last().and_then(EventMsg::seq).unwrap_or(0);
    tracker.map(|t| (t, last))
}
