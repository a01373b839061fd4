//! The worker's dispatch loop: routes supervisor frames to the running turn, operator commands, model streams and
//! pending approvals, and sends heartbeats.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use service_ipc::{ToSupervisor, ToWorker};
use tokio_util::sync::CancellationToken;

use crate::conn::{self, Outbox};
use crate::error::Result;
use crate::registry::Registry;
use crate::state::Shared;
use crate::{mcp, session_hooks, tools};

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
        finish,
    }) = Box::pin(conn::connect(socket)).await?
    else {
        return Ok(());
    };
    tools::spare_shell::set_idle(Duration::from_millis(config.spare_shell_idle_ms));
    crate::confine::set_strictness(match (config.sandbox_mode, config.sandbox_backend) {
        (service_ipc::SandboxMode::DangerFullAccess, _) => crate::confine::Strictness::BestEffort,
        (_, service_ipc::SandboxBackend::Landlock) => crate::confine::Strictness::Landlock,
        (_, service_ipc::SandboxBackend::Bwrap) => crate::confine::Strictness::Required,
    });
    if crate::confine::strictness() == crate::confine::Strictness::Landlock {
        crate::leftovers::adopt();
    }
    if let Some(socket) = config.egress_proxy.clone() {
        // Without the forwarder every command would find its proxy variables pointing nowhere; the sandbox still
        // has no other way out, so this only costs the session its network.
        let listener = config.egress_listener_fd;
        if let Err(e) = crate::egress::start(socket, config.no_proxy.clone(), listener).await {
            eprintln!("service-rs worker: cannot open the loopback port to the egress proxy: {e}");
        }
    }
    let heartbeat = tokio::spawn(heartbeat(
        outbox.clone(),
        Duration::from_millis(config.heartbeat_ms.max(10)),
    ));
    // MCP servers start now, in the background; the first model call waits for them.
    let servers = mcp::Servers::start(
        &config.mcp_servers,
        outbox.clone(),
        std::path::Path::new(&config.workspace),
    );
    // Remote agents' cards are fetched meanwhile; the first model call waits for them too.
    let agents = crate::a2a::Agents::start(&config.a2a_agents, outbox.clone());
    let subagents = crate::subagents::Subagents::new(config.subagents.clone());
    let registry = Registry::new(config.tools.clone(), servers, agents, subagents);
    let shared = Arc::new(Shared::new(config, outbox, registry));
    let stop = CancellationToken::new();
    let mut turn: Option<RunningTurn> = None;
    let mut result = Ok(());
    let mut told_to_stop = false;

    while let Some(frame) = inbound.next().await {
        service_ipc::shrink_idle(inbound.read_buffer_mut());
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
                first_reply,
            } => {
                if turn.as_ref().is_some_and(|t| !t.task.is_finished()) {
                    refuse_turn(&shared.outbox, turn_id).await;
                    continue;
                }
                let cancel = stop.child_token();
                // Boxed, so that the turn's large future is not laid out in this loop's stack frame.
                let task = tokio::spawn(Box::pin(crate::executor::run_turn(
                    shared.clone(),
                    turn_id.clone(),
                    task,
                    context,
                    first_reply,
                    cancel.clone(),
                )));
                turn = Some(RunningTurn {
                    turn_id,
                    cancel,
                    task,
                });
            }
            ToWorker::AppendHistory { messages } => {
                // Queued behind a running turn's own messages: the supervisor sends it only between turns.
                shared.history.lock().await.extend(messages);
            }
            ToWorker::ReplaceHistory { messages, trigger } => {
                if let Some(trigger) = trigger {
                    session_hooks::post_compact(&shared, trigger, &messages, &stop);
                    shared.compacted.store(true, Ordering::SeqCst);
                }
                match shared.history.try_lock() {
                    Ok(mut history) => *history = messages,
                    // A running turn holds the conversation: it takes the new one before its next model call.
                    Err(_) => shared.replace_history_later(messages),
                }
            }
            ToWorker::Compacting {
                trigger,
                custom_instructions,
            } => {
                // A running turn holds the conversation; the hooks then read it as the last hook point wrote it.
                let history = shared.history.try_lock().ok();
                session_hooks::pre_compact(
                    &shared,
                    trigger,
                    custom_instructions,
                    history.as_deref().map(Vec::as_slice),
                    &stop,
                );
            }
            ToWorker::ModelChunk { request_id, chunk } => {
                shared.deliver_chunk(&request_id, chunk).await;
            }
            ToWorker::ApprovalDecision {
                request_id,
                decision,
                reason,
                hook,
            } => shared.deliver_decision(&request_id, (decision, reason, hook)),
            ToWorker::SubagentResult {
                request_id,
                status,
                output,
            } => shared
                .registry
                .subagents
                .deliver(&request_id, status, output),
            ToWorker::RunCommand {
                exec_id,
                command,
                cwd,
            } => {
                tokio::spawn(Box::pin(tools::exec::operator_command(
                    shared.outbox.clone(),
                    shared.workspace(),
                    exec_id,
                    command,
                    cwd,
                    stop.child_token(),
                )));
            }
            ToWorker::Interrupt { turn_id } => {
                if let Some(t) = turn.as_ref().filter(|t| t.turn_id == turn_id) {
                    t.cancel.cancel();
                }
            }
            ToWorker::Shutdown => {
                told_to_stop = true;
                break;
            }
            ToWorker::Configure(_) => {
                result = Err(crate::WorkerError::Protocol(
                    "configure received twice".into(),
                ));
                break;
            }
        }
    }

    // Ending: stop running work, let the turn report how it ended, run `SessionEnd` hooks when the supervisor
    // asked for the end, then flush what is queued.
    stop.cancel();
    if let Some(t) = turn {
        let _ = tokio::time::timeout(Duration::from_secs(5), t.task).await;
    }
    if told_to_stop {
        session_hooks::session_end(&shared).await;
    }
    heartbeat.abort();
    drop(shared);
    // MCP servers' tasks may still hold the outbox while their servers stop: write what is queued and go.
    finish.cancel();
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
        crate::footprint::give_back();
    }
}

async fn refuse_turn(outbox: &Outbox, turn_id: String) {
    crate::turn::fail_unstarted(
        outbox,
        turn_id,
        "turn_in_progress",
        "another turn is still running in this session; wait for it or interrupt it".into(),
    )
    .await;
}
