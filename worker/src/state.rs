//! The state a worker's turns share: configuration, the outbox, the conversation, the tool registry, and the
//! routes by which supervisor frames reach the model streams and approvals that wait for them.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;

use service_ipc::{ApprovalDecision, ChatMessage, ModelChunk, WorkerConfig};
use tokio::sync::{mpsc, oneshot};

use crate::conn::Outbox;
use crate::registry::Registry;

/// Chunks buffered per model stream before the reader waits for the turn to catch up.
const MODEL_STREAM_CAPACITY: usize = 256;

/// An answer to a permission request: the decision, with a denial the reason for the model, and the hook that
/// decided when one did rather than a person.
pub type Decided = (
    ApprovalDecision,
    Option<String>,
    Option<service_ipc::HookRef>,
);

/// State shared by the dispatch loop and the tasks it starts.
pub struct Shared {
    /// Configuration from the handshake.
    pub config: WorkerConfig,
    /// Frames to the supervisor.
    pub outbox: Outbox,
    /// The conversation so far; a turn holds the lock while it runs.
    pub history: tokio::sync::Mutex<Vec<ChatMessage>>,
    /// The builtin and MCP tools.
    pub registry: Registry,
    /// The session's hooks.
    pub hooks: crate::hooks::Hooks,
    /// Set once this worker's first turn ran its `SessionStart` hooks.
    pub session_started: std::sync::atomic::AtomicBool,
    /// Set when the supervisor compacted the conversation, until the next turn ran `SessionStart` (`compact`).
    pub compacted: std::sync::atomic::AtomicBool,
    /// The last hooks started outside a turn, which the next ones wait for: `PostCompact` runs after `PreCompact`.
    pub outside_turns: Mutex<Option<tokio::task::JoinHandle<()>>>,
    model_streams: Mutex<HashMap<String, mpsc::Sender<ModelChunk>>>,
    approvals: Mutex<HashMap<String, oneshot::Sender<Decided>>>,
    /// A compacted conversation that arrived while a turn ran, for it to take.
    replacement: Mutex<Option<Vec<ChatMessage>>>,
}

impl Shared {
    /// The state of a worker configured with `config`.
    pub fn new(config: WorkerConfig, outbox: Outbox, registry: Registry) -> Shared {
        Shared {
            history: tokio::sync::Mutex::new(config.history.clone()),
            hooks: crate::hooks::Hooks::new(&config),
            session_started: std::sync::atomic::AtomicBool::new(false),
            compacted: std::sync::atomic::AtomicBool::new(false),
            outside_turns: Mutex::new(None),
            config,
            outbox,
            registry,
            model_streams: Mutex::new(HashMap::new()),
            approvals: Mutex::new(HashMap::new()),
            replacement: Mutex::new(None),
        }
    }

    /// Keeps `messages` as the conversation before the running turn, for [`Shared::take_replacement`].
    pub fn replace_history_later(&self, messages: Vec<ChatMessage>) {
        *lock(&self.replacement) = Some(messages);
    }

    /// The compacted conversation that arrived during the running turn, if any.
    pub fn take_replacement(&self) -> Option<Vec<ChatMessage>> {
        lock(&self.replacement).take()
    }

    /// Hands a chunk to the model stream it answers; chunks of a closed stream are dropped.
    pub async fn deliver_chunk(&self, request_id: &str, chunk: ModelChunk) {
        let tx = lock(&self.model_streams).get(request_id).cloned();
        if let Some(tx) = tx {
            let _ = tx.send(chunk).await;
        }
    }

    /// Hands a decision to the approval that waits for it.
    pub fn deliver_decision(&self, request_id: &str, decided: Decided) {
        if let Some(tx) = lock(&self.approvals).remove(request_id) {
            let _ = tx.send(decided);
        }
    }

    /// Registers a model stream; chunks for `request_id` arrive on the returned receiver.
    pub fn open_model_stream(&self, request_id: &str) -> mpsc::Receiver<ModelChunk> {
        let (tx, rx) = mpsc::channel(MODEL_STREAM_CAPACITY);
        lock(&self.model_streams).insert(request_id.to_string(), tx);
        rx
    }

    /// Forgets a model stream; later chunks for it are dropped.
    pub fn close_model_stream(&self, request_id: &str) {
        lock(&self.model_streams).remove(request_id);
    }

    /// Registers a pending approval; the decision arrives on the returned receiver.
    pub fn open_approval(&self, request_id: &str) -> oneshot::Receiver<Decided> {
        let (tx, rx) = oneshot::channel();
        lock(&self.approvals).insert(request_id.to_string(), tx);
        rx
    }

    /// Forgets a pending approval (the turn was interrupted).
    pub fn close_approval(&self, request_id: &str) {
        lock(&self.approvals).remove(request_id);
    }

    /// The session workspace, the default working directory.
    pub fn workspace(&self) -> PathBuf {
        PathBuf::from(&self.config.workspace)
    }
}

/// Locks a std mutex; a poisoned lock still holds consistent maps (no code panics while holding these).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
