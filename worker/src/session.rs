//! The worker's dispatch loop: routes supervisor frames to the running turn, operator commands, model streams and
//! pending approvals, and sends heartbeats.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use service_ipc::{
    ApprovalDecision, ChatMessage, ModelChunk, ToSupervisor, ToWorker, TurnStatus, Usage,
    WorkerConfig,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::conn::{self, Outbox};
use crate::error::Result;
use crate::{react, tools};

/// Chunks buffered per model stream before the reader waits for the turn to catch up.
const MODEL_STREAM_CAPACITY: usize = 256;

/// State shared by the dispatch loop and the tasks it starts.
pub struct Shared {
    /// Configuration from the handshake.
    pub config: WorkerConfig,
    /// Frames to the supervisor.
    pub outbox: Outbox,
    /// The conversation so far; a turn holds the lock while it runs.
    pub history: tokio::sync::Mutex<Vec<ChatMessage>>,
    model_streams: Mutex<HashMap<String, mpsc::Sender<ModelChunk>>>,
    approvals: Mutex<HashMap<String, oneshot::Sender<ApprovalDecision>>>,
}

impl Shared {
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
    pub fn open_approval(&self, request_id: &str) -> oneshot::Receiver<ApprovalDecision> {
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

struct RunningTurn {
    turn_id: String,
    cancel: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// Serves the supervisor over `socket` until `shutdown` or the socket closes.
pub async fn serve(socket: std::os::unix::net::UnixStream) -> Result<()> {
    let Some(conn::Connection {
        config,
        mut inbound,
        outbox,
        writer,
    }) = conn::connect(socket).await?
    else {
        return Ok(());
    };
    crate::confine::set_strictness(
        if config.sandbox_mode == service_ipc::SandboxMode::DangerFullAccess {
            crate::confine::Strictness::BestEffort
        } else {
            crate::confine::Strictness::Required
        },
    );
    if let Some(socket) = config.egress_proxy.clone() {
        // Without the forwarder every command would find its proxy variables pointing nowhere; the sandbox still
        // has no other way out, so this only costs the session its network.
        if let Err(e) = crate::egress::start(socket).await {
            eprintln!("service-rs worker: cannot open the loopback port to the egress proxy: {e}");
        }
    }
    let heartbeat = tokio::spawn(heartbeat(
        outbox.clone(),
        Duration::from_millis(config.heartbeat_ms.max(10)),
    ));
    let shared = Arc::new(Shared {
        history: tokio::sync::Mutex::new(config.history.clone()),
        config,
        outbox,
        model_streams: Mutex::new(HashMap::new()),
        approvals: Mutex::new(HashMap::new()),
    });
    let stop = CancellationToken::new();
    let mut turn: Option<RunningTurn> = None;
    let mut result = Ok(());

    while let Some(frame) = inbound.next().await {
        let frame = match frame {
            Ok(f) => f,
            Err(e) => {
                result = Err(e.into());
                break;
            }
        };
        match frame {
            ToWorker::RunTurn {
                turn_id,
                task,
                context,
            } => {
                if turn.as_ref().is_some_and(|t| !t.task.is_finished()) {
                    refuse_turn(&shared.outbox, turn_id).await;
                    continue;
                }
                let cancel = stop.child_token();
                let task = tokio::spawn(react::run_turn(
                    shared.clone(),
                    turn_id.clone(),
                    task,
                    context,
                    cancel.clone(),
                ));
                turn = Some(RunningTurn {
                    turn_id,
                    cancel,
                    task,
                });
            }
            ToWorker::ModelChunk { request_id, chunk } => {
                let tx = lock(&shared.model_streams).get(&request_id).cloned();
                if let Some(tx) = tx {
                    let _ = tx.send(chunk).await;
                }
            }
            ToWorker::ApprovalDecision {
                request_id,
                decision,
            } => {
                if let Some(tx) = lock(&shared.approvals).remove(&request_id) {
                    let _ = tx.send(decision);
                }
            }
            ToWorker::RunCommand {
                exec_id,
                command,
                cwd,
            } => {
                tokio::spawn(tools::exec::operator_command(
                    shared.clone(),
                    exec_id,
                    command,
                    cwd,
                    stop.child_token(),
                ));
            }
            ToWorker::Interrupt { turn_id } => {
                if let Some(t) = turn.as_ref().filter(|t| t.turn_id == turn_id) {
                    t.cancel.cancel();
                }
            }
            ToWorker::Shutdown => break,
            ToWorker::Configure(_) => {
                result = Err(crate::WorkerError::Protocol(
                    "configure received twice".into(),
                ));
                break;
            }
        }
    }

    // Ending: stop running work, let the turn report how it ended, then flush what is queued.
    stop.cancel();
    if let Some(t) = turn {
        let _ = tokio::time::timeout(Duration::from_secs(5), t.task).await;
    }
    heartbeat.abort();
    drop(shared);
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    result
}

async fn heartbeat(outbox: Outbox, every: Duration) {
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        if !outbox.send(ToSupervisor::Heartbeat).await {
            return;
        }
    }
}

async fn refuse_turn(outbox: &Outbox, turn_id: String) {
    outbox
        .send(ToSupervisor::TurnFinished {
            turn_id,
            status: TurnStatus::Failed,
            final_message: String::new(),
            messages: Vec::new(),
            usage: Usage::default(),
            error: Some((
                "turn_in_progress".into(),
                "another turn is still running in this session; wait for it or interrupt it".into(),
            )),
        })
        .await;
}
