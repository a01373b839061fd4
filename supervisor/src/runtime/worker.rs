//! The supervisor's handle on one session worker.
//!
//! `spawn.rs` starts the worker and runs the handshake; `run` hands the child and the socket to one actor task. The
//! [`WorkerHandle`] is a cloneable queue into that task. The actor journals the worker's events, serves its model
//! requests through the providers, routes permission requests to the approval store, and finishes turns and commands.
//! When the worker exits, hangs (no heartbeat) or breaks the protocol, the actor kills it and fails whatever was
//! running with a `worker_died` error; the next turn spawns a new worker.
//!
//! The worker is untrusted: it shares its sandbox with the commands it runs, and they may have taken it over. Every
//! frame is checked against the supervisor's own state before it has any effect (see `frame_guard`): events only of
//! the kinds a worker may emit and only for the running turn or a running operator command; model requests only for
//! the running turn, served with the model the supervisor chose for it; bounded output per command and a journal
//! quota per session. A frame that breaks these rules ends the worker.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, SinkExt, StreamExt};
use service_ipc::{shrink_idle, EventPayload, ModelRequest, SandboxMode, ToSupervisor, ToWorker};
use tokio::sync::{mpsc, watch};
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;

use super::approvals::{Grant, Pending, Reply};
use super::error::Result;
use super::frame_guard::{self, Guard};
use super::handle::WorkerHandle;
use super::session::{Session, TurnEnd};
use super::spawn::{self, describe_exit, Assignment, Conn, Started, CGROUP_RELEASE};
use super::worker_process::WorkerProcess;
use super::Inner;
use crate::sandbox::limits::Limits;

/// Frames queued for one worker before senders wait.
const QUEUE: usize = 1024;

/// Most frames handled (and events committed) as one batch before the actor looks at its other duties.
const MAX_BATCH: usize = 256;

/// Starts a worker for `session` and attaches it.
pub(crate) async fn spawn(rt: Arc<Inner>, session: Arc<Session>) -> Result<WorkerHandle> {
    let workspace = session.cwd();
    let started = spawn::start(&rt, &session.id, &session.bundle, &workspace).await?;
    attach(rt, session, started).await
}

/// Configures a started worker with `session` and hands it to its actor.
pub(crate) async fn attach(
    rt: Arc<Inner>,
    session: Arc<Session>,
    started: Started,
) -> Result<WorkerHandle> {
    let history = match session.history().await {
        Ok(h) => h,
        Err(e) => {
            started.discard().await;
            return Err(e);
        }
    };
    let assignment = Assignment {
        id: &session.id,
        bundle: &session.bundle,
        history,
        instructions: session.instructions(&rt.options.workspace_roots),
        may_delegate: session.record().parent.map_or(0, |p| p.depth)
            < rt.options.max_subagent_depth,
        hooks: session.hooks(&rt.home),
        fork_fresh: session.record().fork_fresh,
    };
    let sink = Arc::new(super::egress_sink::SessionSink::new(&rt, &session));
    let started = spawn::configure(&rt, started, assignment, sink).await?;
    let host_workspace = session.cwd();
    tracing::info!(session = %session.id, bundle = %session.bundle.reference(), "worker started");
    Ok(run(rt, session, started, host_workspace))
}

/// Hands a configured worker to its actor and returns the handle on it.
fn run(
    rt: Arc<Inner>,
    session: Arc<Session>,
    started: Started,
    host_workspace: PathBuf,
) -> WorkerHandle {
    let kill = CancellationToken::new();
    let Started {
        child,
        conn,
        limits,
        run_dir,
        workspace,
        confinement,
        egress,
        pid,
        ..
    } = started;
    let (tx, rx) = mpsc::channel(QUEUE);
    let (exited_tx, exited) = watch::channel(false);
    let handle = WorkerHandle {
        tx: tx.clone(),
        kill: kill.clone(),
        exited,
        confinement,
        sandbox_pid: pid.filter(|_| confinement != SandboxMode::DangerFullAccess),
        paths: (host_workspace, workspace),
        remains: (
            limits.as_ref().map(|l| l.dirs()).unwrap_or_default(),
            run_dir.clone(),
        ),
    };
    let rt_metrics = rt.metrics.workers.clone();
    let lease = super::store::files_lock::live(&session.dir);
    let actor = Actor {
        rt,
        session,
        tx,
        model_tasks: HashMap::new(),
        subagent_calls: Vec::new(),
        last_seen: Instant::now(),
        pending: Vec::new(),
        run_dir,
        limits,
        guard: Guard::default(),
        egress,
        _alive: crate::metrics::GaugeGuard::new(&rt_metrics),
        _lease: lease,
    };
    tokio::spawn(actor.run(conn, child, rx, kill, exited_tx));
    handle
}

struct Actor {
    rt: Arc<Inner>,
    session: Arc<Session>,
    tx: mpsc::Sender<ToWorker>,
    model_tasks: HashMap<String, tokio::task::AbortHandle>,
    /// The `Agent` calls being run (see `subagents`); each interrupts its child when the turn ends.
    subagent_calls: Vec<tokio::task::AbortHandle>,
    last_seen: Instant,
    /// Events received but not yet journaled (see `commit`).
    pending: Vec<EventPayload>,
    /// The worker's socket directory, removed when it ends.
    run_dir: PathBuf,
    /// Its limits, released when it ends.
    limits: Option<Arc<Limits>>,
    /// Output accounting of its commands.
    guard: Guard,
    /// Its egress proxy, stopped when it ends.
    egress: Option<crate::egress::Egress>,
    /// Counts it among the running workers while it lives.
    _alive: crate::metrics::GaugeGuard,
    /// Tells other processes on the store that the session is live while its worker runs.
    _lease: Option<super::store::files_lock::LiveLease>,
}

/// Why the actor stopped.
enum End {
    Closed,
    Hung(Duration),
    Killed,
    Protocol(String),
    /// A frame broke the rules a worker must keep (see `frame_guard`).
    Violation(String),
    /// The session's journal reached its quota.
    Quota(u64),
}

impl Actor {
    async fn run(
        mut self,
        conn: Conn,
        mut child: WorkerProcess,
        mut rx: mpsc::Receiver<ToWorker>,
        kill: CancellationToken,
        exited: watch::Sender<bool>,
    ) {
        // Two owned halves, not `split()` of the framed socket, so that each can give its buffer back while the
        // session is idle (`shrink_idle`); the bytes already read past the hello stay in the read half.
        let parts = conn.into_parts();
        let (read, write) = parts.io.into_split();
        let mut sink = FramedWrite::new(write, parts.codec.clone());
        let mut frames = FramedRead::new(read, parts.codec);
        *frames.read_buffer_mut() = parts.read_buf;
        shrink_idle(frames.read_buffer_mut());
        shrink_idle(sink.write_buffer_mut());
        // Writing has its own task: the actor must always keep reading, or a worker that is itself blocked on a
        // full socket (while we wait to hand it a model chunk) would deadlock both sides.
        let writer_failed = CancellationToken::new();
        let writer_done = writer_failed.clone();
        let trace = Trace::from_env();
        let out_trace = trace.clone();
        let writer = tokio::spawn(async move {
            while let Some(msg) = rx.recv().await {
                out_trace.record("to_worker", &msg);
                // Flush only once the queue is drained: a stream of model chunks shares one write.
                if sink.feed(msg).await.is_err() || (rx.is_empty() && sink.flush().await.is_err()) {
                    break;
                }
                if rx.is_empty() {
                    shrink_idle(sink.write_buffer_mut());
                }
            }
            writer_done.cancel();
        });
        let hang_timeout = self.rt.options.hang_timeout;
        let mut check = tokio::time::interval(self.rt.options.heartbeat);
        let end = loop {
            tokio::select! {
                frame = frames.next() => match frame {
                    Some(Ok(frame)) => {
                        self.last_seen = Instant::now();
                        // Frames already read off the socket are handled together, so a burst of events is
                        // journaled and broadcast as one batch (group commit); the batch is bounded so a flood
                        // cannot starve the other branches.
                        let mut next = Some(frame);
                        let mut handled = 0;
                        let mut broken = None;
                        while let Some(frame) = next.take() {
                            trace.record("to_supervisor", &frame);
                            if let Err(why) = self.handle(frame) {
                                broken = Some(End::Violation(why));
                                break;
                            }
                            handled += 1;
                            if handled < MAX_BATCH {
                                match frames.next().now_or_never() {
                                    Some(Some(Ok(frame))) => next = Some(frame),
                                    Some(Some(Err(e))) => broken = Some(End::Protocol(e.to_string())),
                                    Some(None) => broken = Some(End::Closed),
                                    None => {}
                                }
                            }
                        }
                        // What came before the end of the connection, or before a frame that does not parse, is
                        // kept; a batch with a forbidden frame is not.
                        if !matches!(broken, Some(End::Violation(_))) {
                            self.commit();
                        }
                        shrink_idle(frames.read_buffer_mut());
                        if broken.is_none() && self.session.journal.bytes() >= self.rt.options.journal_quota {
                            broken = Some(End::Quota(self.rt.options.journal_quota));
                        }
                        if let Some(end) = broken {
                            break end;
                        }
                    }
                    Some(Err(e)) => break End::Protocol(e.to_string()),
                    None => break End::Closed,
                },
                _ = check.tick() => if self.last_seen.elapsed() > hang_timeout {
                    break End::Hung(hang_timeout);
                },
                _ = writer_failed.cancelled() => break End::Protocol("cannot write to the worker".into()),
                _ = kill.cancelled() => break End::Killed,
            }
        };
        writer.abort();
        for task in self.model_tasks.values() {
            task.abort();
        }
        if !matches!(end, End::Closed) {
            child.start_kill();
        }
        let end_pending = std::mem::take(&mut self.pending);
        drop(end_pending);
        let status = match tokio::time::timeout(Duration::from_secs(3), child.wait()).await {
            Ok(s) => s.ok(),
            Err(_) => {
                child.start_kill();
                child.wait().await.ok()
            }
        };
        // The proxy stops with its worker, while this actor still holds the session its summary is journaled in.
        drop(self.egress.take());
        let code = match end {
            End::Quota(_) => "journal_quota",
            End::Violation(_) => "worker_violation",
            _ => "worker_died",
        };
        // Stopped on purpose, or gone with a clean exit: nothing an operator must look at.
        let stopped = matches!(end, End::Killed)
            || (matches!(end, End::Closed) && status.as_ref().is_some_and(|s| s.success()));
        let cause = match end {
            End::Closed => describe_exit(status),
            End::Hung(t) => format!("it sent no heartbeat for {t:?} and was killed"),
            End::Killed => "it was stopped by the supervisor".to_string(),
            End::Protocol(e) => format!("it broke the protocol ({e}) and was killed"),
            End::Violation(e) => format!("it sent a frame it may not send ({e}) and was killed"),
            End::Quota(q) => format!("the session's journal reached its quota of {q} bytes"),
        };

        if stopped {
            tracing::info!(session = %self.session.id, cause = %cause, "worker stopped");
        } else {
            tracing::warn!(session = %self.session.id, code, cause = %cause, "worker ended");
        }
        if let Some(limits) = &self.limits {
            limits.release(CGROUP_RELEASE).await;
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
        // From here the handle reports the worker gone, so a turn started as soon as the interrupted one is
        // reported failed (below) gets a new worker, whose run directory the line above can no longer remove.
        kill.cancel();
        self.session.drop_commands();
        // Only a turn this worker was given: a worker that dies (or is killed for a forgery) while the supervisor
        // answers a text turn by itself does not end that turn.
        if let Some(turn_id) = self.session.handed_turn() {
            self.rt.approvals.drop_turn(&turn_id);
            let message = match code {
                "journal_quota" => format!("{cause}; the turn was stopped. Delete the session and start a new one"),
                _ => format!("the session worker ended during the turn: {cause}; the next turn starts a new worker"),
            };
            self.session.fail_turn(&turn_id, code, &message);
        }
        let _ = exited.send(true);
    }

    /// Journals and broadcasts the events gathered since the last commit.
    fn commit(&mut self) {
        if !self.pending.is_empty() {
            self.session.emit_all(std::mem::take(&mut self.pending));
        }
        // A store write failed: the turn cannot be kept, so it ends now, with the cause as its error.
        if let Some((code, cause)) = self.session.take_fault() {
            if let Some(turn_id) = self.session.active_turn() {
                tracing::error!(session = %self.session.id, turn = %turn_id, code, "ending the turn: {cause}");
                self.session.set_stop_reason(&turn_id, &code, &cause);
                let _ = self.tx.try_send(ToWorker::Interrupt { turn_id });
            }
        }
    }

    /// Acts on one frame, or says which rule it broke.
    fn handle(&mut self, frame: ToSupervisor) -> std::result::Result<(), String> {
        if !matches!(frame, ToSupervisor::Event(_)) {
            // Whatever this frame does (finish a turn, request approval) comes after the events before it.
            self.commit();
        }
        match frame {
            ToSupervisor::Event(payload) => {
                if let Some(payload) = self.guard.event(&self.session, payload)? {
                    self.pending.push(payload);
                }
            }
            ToSupervisor::ModelRequest(query) => {
                let model = self.session.turn_model(&query.turn_id).ok_or_else(|| {
                    format!(
                        "a model request for turn {}, which is not running",
                        query.turn_id
                    )
                })?;
                self.guard
                    .model_request(&query.turn_id, self.session.bundle.agent.max_steps)?;
                self.model_tasks.retain(|_, t| !t.is_finished());
                if self.model_tasks.len() >= frame_guard::MAX_MODEL_REQUESTS {
                    return Err(format!(
                        "more than {} model requests at once",
                        frame_guard::MAX_MODEL_REQUESTS
                    ));
                }
                self.serve_model(model, query);
            }
            ToSupervisor::CancelModel { request_id } => {
                if let Some(task) = self.model_tasks.remove(&request_id) {
                    task.abort();
                }
            }
            ToSupervisor::PermissionRequest {
                request_id,
                turn_id,
                call_id,
                tool,
                key,
                rule,
                diff,
                hook,
            } => {
                frame_guard::running_turn(&self.session, &turn_id)?;
                if let Some(answer) = &hook {
                    frame_guard::known_hook(
                        &self.session,
                        service_ipc::HookEvent::PermissionRequest,
                        &answer.hook,
                    )?;
                }
                frame_guard::permission_request(
                    &self.session,
                    &request_id,
                    &tool,
                    &key,
                    diff.as_deref(),
                )?;
                let grant = Grant::Tool {
                    tool: tool.clone(),
                    key: key.clone(),
                };
                // A session in a project (not a workspace of the store's) has the rules kept for it.
                let project =
                    Some(self.session.cwd()).filter(|d| !d.starts_with(self.rt.home.root()));
                let kept = project.as_deref().is_some_and(|dir| {
                    let tenant = self.session.tenant();
                    super::project_rules::kept_for(&self.rt.home, &tenant, dir, &tool, &key)
                });
                // The operator's host hooks decide before a sandbox hook may (see `host_hooks`).
                let host = super::host_hooks::selecting(&self.rt, &self.session, &tool, &key);
                let hook = hook.filter(|_| host.is_empty());
                if self.session.allowed_always(&grant) || kept {
                    let _ = self.tx.try_send(ToWorker::ApprovalDecision {
                        request_id,
                        decision: service_ipc::ApprovalDecision::AllowAlways,
                        reason: None,
                        hook: None,
                    });
                    return Ok(());
                }
                if self.rt.approvals.session_of(&request_id).is_some() {
                    return Err(format!("approval request id {request_id} was used before"));
                }
                let warning = self.unwritable(&tool, &key);
                // A rule to keep is offered to a person, never to a hook.
                let project_rule = project
                    .as_ref()
                    .filter(|_| hook.is_none() && host.is_empty())
                    .and_then(|_| super::project_rules::suggest(&tool, &key));
                let question = super::host_hooks::Question {
                    request_id: request_id.clone(),
                    turn_id: turn_id.clone(),
                    call_id: call_id.clone(),
                    tool: tool.clone(),
                    key: key.clone(),
                };
                let pose = super::host_hooks::Pose {
                    session: self.session.clone(),
                    pending: Pending {
                        session_id: self.session.id.clone(),
                        turn_id: turn_id.clone(),
                        grant,
                        reply: Reply::Worker(self.tx.clone()),
                    },
                    request_id,
                    requested: EventPayload::PermissionRequested {
                        turn_id,
                        request_id: question.request_id.clone(),
                        call_id,
                        tool,
                        summary: key,
                        rule,
                        diff,
                        project_rule,
                        warning,
                        child_session_id: None,
                    },
                };
                match hook {
                    // One of the session's hooks answered, as a person would have.
                    Some(answer) => pose.answered(answer.hook, answer.decision, answer.message),
                    None if host.is_empty() => pose.ask_a_person(&self.rt),
                    None => super::host_hooks::ask(self.rt.clone(), host, question, pose),
                }
            }
            ToSupervisor::SubagentCall {
                request_id,
                turn_id,
                call_id,
                subagent,
                prompt,
            } => {
                frame_guard::running_turn(&self.session, &turn_id)?;
                self.subagent_calls.retain(|t| !t.is_finished());
                if self.subagent_calls.len() >= frame_guard::MAX_SUBAGENT_CALLS {
                    return Err(format!(
                        "more than {} subagent calls at once",
                        frame_guard::MAX_SUBAGENT_CALLS
                    ));
                }
                let call = super::subagents::Call {
                    request_id,
                    turn_id,
                    call_id,
                    subagent,
                    prompt,
                };
                self.subagent_calls.push(super::subagents::start(
                    self.rt.clone(),
                    self.session.clone(),
                    self.tx.clone(),
                    call,
                ));
            }
            ToSupervisor::TurnFinished {
                turn_id,
                status,
                final_message,
                messages,
                usage,
                error,
            } => {
                // A turn the supervisor already ended (interrupted while the worker was slow) may still report; it
                // changes nothing. Any other turn id is a forgery, the turn the supervisor leads among them.
                if let Err(e) = frame_guard::running_turn(&self.session, &turn_id) {
                    let ended = self.session.active_turn().as_deref() != Some(turn_id.as_str());
                    if ended && self.session.knows_turn(&turn_id) {
                        return Ok(());
                    }
                    return Err(format!("finished turn {turn_id}: {e}"));
                }
                self.rt.approvals.drop_turn(&turn_id);
                self.session.finish_turn(TurnEnd {
                    turn_id,
                    status,
                    final_message,
                    messages,
                    usage,
                    error: error.map(frame_guard::turn_error),
                });
            }
            ToSupervisor::CommandFinished { exec_id, exit_code } => {
                self.guard.command_finished(&exec_id);
                self.session.finish_command(&exec_id, exit_code)
            }
            ToSupervisor::Heartbeat => {}
            ToSupervisor::Hello { .. } | ToSupervisor::Ready => {
                return Err("a handshake frame after the handshake".into())
            }
        }
        Ok(())
    }

    /// Streams the reply to `query` to the worker.
    /// For a Write or Edit of an existing file the sandbox's user may not write: why, for the question, so that no
    /// one approves a call that cannot succeed. The path is the worker's; only one under its workspace, with no
    /// `..`, is looked up on the host (without following a link).
    fn unwritable(&self, tool: &str, key: &str) -> Option<String> {
        if !matches!(tool, "Write" | "Edit") {
            return None;
        }
        let rel = std::path::Path::new(key)
            .strip_prefix(crate::sandbox::bwrap::WORKSPACE_DIR)
            .ok()?;
        if rel
            .components()
            .any(|c| !matches!(c, std::path::Component::Normal(_)))
        {
            return None;
        }
        self.rt
            .options
            .sandbox_user
            .cannot_write(&self.session.cwd(), rel)
    }

    fn serve_model(&mut self, model: service_ipc::ModelRef, query: service_ipc::ModelQuery) {
        self.model_tasks.retain(|_, t| !t.is_finished());
        let request_id = query.request_id.clone();
        let mut chunks =
            super::model_call::stream(&self.rt, &self.session, ModelRequest::new(model, query));
        let tx = self.tx.clone();
        let rid = request_id.clone();
        let task = tokio::spawn(async move {
            while let Some(chunk) = chunks.next().await {
                let msg = ToWorker::ModelChunk {
                    request_id: rid.clone(),
                    chunk,
                };
                if tx.send(msg).await.is_err() {
                    return;
                }
            }
        });
        self.model_tasks.insert(request_id, task.abort_handle());
    }
}

/// The optional frame trace: with `SERVICE_IPC_TRACE=<file>`, every frame in both directions is appended to the
/// file as a JSON line `{"dir": ..., "frame": ...}`, for debugging and for tests that inspect the traffic.
#[derive(Clone)]
struct Trace(Option<Arc<std::sync::Mutex<std::fs::File>>>);

impl Trace {
    fn from_env() -> Trace {
        let file = std::env::var_os("SERVICE_IPC_TRACE").and_then(|p| {
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .ok()
        });
        Trace(file.map(|f| Arc::new(std::sync::Mutex::new(f))))
    }

    fn record<T: serde::Serialize>(&self, dir: &str, frame: &T) {
        use std::io::Write;
        if let Some(file) = &self.0 {
            let line = serde_json::json!({"dir": dir, "frame": frame}).to_string();
            let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
            let _ = writeln!(f, "{line}");
        }
    }
}
