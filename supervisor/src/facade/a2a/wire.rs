//! A2A 1.0's JSON forms (the protocol buffers' JSON mapping: camelCase fields, enum values such as
//! `TASK_STATE_WORKING`), for the parts this server reads and writes.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Where a task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskState {
    /// Accepted, not yet running.
    #[serde(rename = "TASK_STATE_SUBMITTED")]
    Submitted,
    /// Running.
    #[serde(rename = "TASK_STATE_WORKING")]
    Working,
    /// Waiting for the client's answer (a permission question).
    #[serde(rename = "TASK_STATE_INPUT_REQUIRED")]
    InputRequired,
    /// Finished with an answer.
    #[serde(rename = "TASK_STATE_COMPLETED")]
    Completed,
    /// Ended by an error.
    #[serde(rename = "TASK_STATE_FAILED")]
    Failed,
    /// Interrupted.
    #[serde(rename = "TASK_STATE_CANCELED")]
    Canceled,
    /// The model refused it.
    #[serde(rename = "TASK_STATE_REJECTED")]
    Rejected,
    /// Never set by this server; accepted in filters.
    #[serde(rename = "TASK_STATE_AUTH_REQUIRED")]
    AuthRequired,
    /// The protocol's zero value; accepted in filters as "any".
    #[serde(rename = "TASK_STATE_UNSPECIFIED")]
    Unspecified,
}

impl TaskState {
    /// Whether the task can change no more.
    pub fn terminal(self) -> bool {
        matches!(
            self,
            TaskState::Completed | TaskState::Failed | TaskState::Canceled | TaskState::Rejected
        )
    }

    /// The state in words, for messages.
    pub fn label(self) -> &'static str {
        match self {
            TaskState::Submitted => "submitted",
            TaskState::Working => "working",
            TaskState::InputRequired => "input-required",
            TaskState::Completed => "completed",
            TaskState::Failed => "failed",
            TaskState::Canceled => "canceled",
            TaskState::Rejected => "rejected",
            TaskState::AuthRequired => "auth-required",
            TaskState::Unspecified => "unspecified",
        }
    }

    /// Whether the task waits for the client (a blocking call returns there).
    pub fn interrupted(self) -> bool {
        matches!(self, TaskState::InputRequired | TaskState::AuthRequired)
    }
}

/// Who wrote a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// The client.
    #[serde(rename = "ROLE_USER")]
    User,
    /// This agent.
    #[serde(rename = "ROLE_AGENT")]
    Agent,
    /// The protocol's zero value.
    #[serde(rename = "ROLE_UNSPECIFIED")]
    Unspecified,
}

/// One piece of a message or artifact: text, structured data, or a file by URL or bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Part {
    /// Text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Structured data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    /// A file by URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// A file's bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<String>,
    /// The content's media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
}

impl Part {
    /// A text part.
    pub fn text(text: impl Into<String>) -> Part {
        Part {
            text: Some(text.into()),
            ..Part::default()
        }
    }

    /// A data part.
    pub fn data(data: Value) -> Part {
        Part {
            data: Some(data),
            media_type: Some("application/json".into()),
            ..Part::default()
        }
    }
}

/// A message between client and agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Message {
    /// Its id.
    #[serde(default)]
    pub message_id: String,
    /// The conversation it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
    /// The task it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<String>,
    /// Who wrote it.
    pub role: Role,
    /// Its content.
    #[serde(default)]
    pub parts: Vec<Part>,
}

/// A task's state, with the agent's message about it.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatus {
    /// The state.
    pub state: TaskState,
    /// What the agent says about it (a question, an error).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<Message>,
    /// When it was reached (RFC 3339).
    pub timestamp: String,
}

/// Something a task produced: here, the answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Its id.
    pub artifact_id: String,
    /// Its name.
    pub name: String,
    /// Its content.
    pub parts: Vec<Part>,
}

/// A task: one turn of a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The turn id.
    pub id: String,
    /// The conversation (session) it belongs to.
    pub context_id: String,
    /// Where it stands.
    pub status: TaskStatus,
    /// What it produced.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub artifacts: Vec<Artifact>,
    /// Its messages.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<Message>,
}

/// A change of a task's state, streamed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusUpdate {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    pub context_id: String,
    /// The new status.
    pub status: TaskStatus,
}

/// A piece of an artifact, streamed.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactUpdate {
    /// The task.
    pub task_id: String,
    /// Its conversation.
    pub context_id: String,
    /// The piece.
    pub artifact: Artifact,
    /// Whether it extends what came before.
    pub append: bool,
    /// Whether it is the artifact's last piece.
    pub last_chunk: bool,
}

/// One event of a stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StreamResponse {
    /// The task as it stands (a stream's first event).
    Task(Task),
    /// A status change.
    StatusUpdate(StatusUpdate),
    /// A piece of the answer.
    ArtifactUpdate(ArtifactUpdate),
}

/// `SendMessage` and `SendStreamingMessage` parameters.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendParams {
    /// The message.
    pub message: Message,
    /// How to answer.
    #[serde(default)]
    pub configuration: Option<SendConfiguration>,
}

/// How to answer a message.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SendConfiguration {
    /// Output media types the client takes; none means any.
    #[serde(default)]
    pub accepted_output_modes: Vec<String>,
    /// How many of the task's messages to return.
    #[serde(default)]
    pub history_length: Option<i64>,
    /// Answer at once, with the task as it starts.
    #[serde(default)]
    pub return_immediately: bool,
    /// Push notifications, which this server does not send.
    #[serde(default)]
    pub task_push_notification_config: Option<Value>,
}

/// Parameters naming a task (`GetTask`, `CancelTask`, `SubscribeToTask`).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskParams {
    /// The task id.
    pub id: String,
    /// How many of its messages to return.
    #[serde(default)]
    pub history_length: Option<i64>,
}

/// `ListTasks` parameters.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListParams {
    /// Only this conversation's tasks.
    #[serde(default)]
    pub context_id: Option<String>,
    /// Only tasks in this state.
    #[serde(default)]
    pub status: Option<TaskState>,
    /// At most this many (1 to 100; 50 by default).
    #[serde(default)]
    pub page_size: Option<i64>,
    /// Where the previous page ended.
    #[serde(default)]
    pub page_token: Option<String>,
    /// How many messages of each task to return.
    #[serde(default)]
    pub history_length: Option<i64>,
    /// Whether to return the tasks' artifacts.
    #[serde(default)]
    pub include_artifacts: Option<bool>,
}

/// `ListTasks`' answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListAnswer {
    /// The page's tasks, newest first.
    pub tasks: Vec<Task>,
    /// The next page's token; empty on the last page.
    pub next_page_token: String,
    /// The page size used.
    pub page_size: i64,
    /// Tasks matching in all.
    pub total_size: i64,
}

impl Task {
    /// The task with only its last `n` messages, when `n` is given (0 keeps none).
    pub fn keep_history(mut self, n: Option<i64>) -> Task {
        if let Some(n) = n.and_then(|n| usize::try_from(n).ok()) {
            let cut = self.history.len().saturating_sub(n);
            self.history.drain(..cut);
        }
        self
    }
}
