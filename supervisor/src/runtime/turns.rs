//! Turns: started (led by the supervisor, or, for bundles with MCP servers, given to the worker), run to their
//! end, interrupted.

use crate::project_instructions::ProjectInstructions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use service_ipc::{
    EventPayload, ModelRef, SandboxMode, Task, ToWorker, TurnContext, TurnOverrides,
};

use super::error::{Result, RuntimeError};
use super::lead::{self, FirstCall, Led};
use super::model_pace::WorkerAhead;
use super::session::{Session, TurnOutcome};
use super::{handle, model_call, FirstTurn, Inner, PendingTurn, ServiceRuntime};

impl ServiceRuntime {
    /// Starts a turn and returns once its start is stored; the outcome arrives on the returned receiver. A turn
    /// acknowledged this way (`/run`'s 202) is in the journal even if the process dies right after, so a client
    /// following it sees it end, with `supervisor_restarted` at worst.
    pub async fn start_turn(
        &self,
        id: &str,
        task: Task,
        overrides: TurnOverrides,
    ) -> Result<PendingTurn> {
        let session = self.session(id).await?;
        let pending = self.start_in(&session, task, overrides, None).await?;
        session.journal.stored().await;
        Ok(pending)
    }

    /// Creates a session of `bundle` (resolved from `bundle_ref`) in `cwd` and starts its first turn, of `task`.
    /// The turn's first model call is on the wire while the session is made, when the supervisor leads the turn
    /// (see `lead`). Subscribed before the turn starts, the returned events miss none of it. A session whose turn
    /// cannot start is deleted.
    pub async fn create_session_with_turn(
        &self,
        bundle: crate::bundle::Bundle,
        bundle_ref: &str,
        cwd: Option<&Path>,
        task: Task,
        mut overrides: TurnOverrides,
        budget: Option<super::Budget>,
    ) -> Result<FirstTurn> {
        let bundle = crate::providers::choice::settle(self.inner.home.root(), bundle).await;
        let model = overrides
            .model
            .take()
            .unwrap_or_else(|| bundle.agent.model.to_ref());
        crate::providers::check_model(&model).map_err(RuntimeError::InvalidRequest)?;
        let id = uuid::Uuid::new_v4().to_string();
        // Read once, here, for the call made ahead and for the session: a fresh workspace has none.
        let instructions = std::sync::Arc::new(match cwd.map(std::fs::canonicalize) {
            Some(Ok(dir)) => {
                ProjectInstructions::of_bundle(&bundle, &dir, &self.inner.options.workspace_roots)
            }
            _ => ProjectInstructions::default(),
        });
        // A turn directory fails the start with its own error: no call for nothing.
        let ahead = match overrides.cwd {
            None => self.call_ahead(&bundle, &id, cwd, &task, &model, &instructions),
            Some(_) => None,
        };
        overrides.model = Some(model);
        let session = self
            .create_session_as(id, bundle, bundle_ref, cwd, None, None)
            .await?;
        session.adopt_instructions(instructions);
        if budget.is_some() {
            if let Err(e) = session.set_budget(budget) {
                let _ = self.delete_session(&session.id).await;
                return Err(e);
            }
        }
        // Its files for the turn are made while the call is on the wire; a failure shows again at the turn's saves.
        if let Err(e) = session.journal.log().prepare_first_turn(&session.record()) {
            tracing::debug!(session = %session.id, "files for the first turn not made ahead: {e}");
        }
        let events = super::messages(session.journal.subscribe(None));
        match self.start_in(&session, task, overrides, ahead).await {
            Ok(turn) => Ok(FirstTurn {
                record: session.record(),
                events,
                turn,
            }),
            Err(e) => {
                if let Err(gone) = self.delete_session(&session.id).await {
                    tracing::warn!(session = %session.id, "a session whose first turn did not start stays: {gone}");
                }
                Err(e)
            }
        }
    }

    /// The first model call of a new session `id`'s turn of `task`, made now; None when the supervisor would not
    /// lead the turn (see `lead::first_query`) or the turn could not start, so that no call is made for nothing.
    fn call_ahead(
        &self,
        bundle: &crate::bundle::Bundle,
        id: &str,
        cwd: Option<&Path>,
        task: &Task,
        model: &ModelRef,
        instructions: &ProjectInstructions,
    ) -> Option<model_call::Ahead> {
        // A session directory that is not one fails the start with its own error; a project's hooks run in the
        // sandbox from the prompt on.
        if cwd.is_some_and(|c| !c.is_dir() || crate::hooks::project_has_file(c)) {
            return None;
        }
        let workspace = self.inner.home.sessions().join(id).join("workspace");
        self.inner
            .launcher
            .view(
                &bundle.manifest.sandbox,
                cwd.unwrap_or(&workspace),
                cwd.is_none(),
            )
            .ok()?;
        let query = lead::first_query(bundle, instructions, Vec::new(), &task.prompt)?;
        let turn_id = uuid::Uuid::new_v4().to_string();
        let request = lead::request(model.clone(), &turn_id, query);
        Some(model_call::ahead(&self.inner, bundle, id, request))
    }

    /// Starts a turn in `session`; `ahead` is its first model call when it was made already.
    async fn start_in(
        &self,
        session: &Arc<Session>,
        task: Task,
        overrides: TurnOverrides,
        ahead: Option<model_call::Ahead>,
    ) -> Result<PendingTurn> {
        let id = session.id.as_str();
        self.admit_turn()?;
        self.claim(session).await?;
        let model = overrides
            .model
            .unwrap_or_else(|| session.bundle.agent.model.to_ref());
        crate::providers::check_model(&model).map_err(RuntimeError::InvalidRequest)?;
        let base = session.cwd();
        let cwd = match overrides.cwd.as_deref() {
            None => base,
            Some(c) => {
                let p = base.join(c);
                if !p.is_dir() {
                    return Err(RuntimeError::CwdNotFound(format!(
                        "cwd {} is not a directory",
                        p.display()
                    )));
                }
                p
            }
        };
        let turn_id = match &ahead {
            Some(ahead) => ahead.turn_id().to_string(),
            None => uuid::Uuid::new_v4().to_string(),
        };
        if session.journal.bytes() >= self.inner.options.journal_quota {
            return Err(RuntimeError::JournalQuota {
                session_id: id.to_string(),
                quota: self.inner.options.journal_quota,
            });
        }
        if !session.bundle.root.is_dir() {
            return Err(RuntimeError::BundleRemoved(session.bundle.reference()));
        }
        if let Some(max) = overrides
            .max_cost_usd
            .filter(|m| !(m.is_finite() && *m > 0.0))
        {
            return Err(RuntimeError::InvalidRequest(format!(
                "max_cost_usd {max} is not a positive number of US dollars"
            )));
        }
        // Without a price for the model, only its tokens can be held to a budget.
        let priced = format!("{}/{}", model.provider, model.name);
        let price = self.inner.options.prices.get(&priced).copied();
        let outcome = session.begin_turn(&turn_id, model.clone(), &task.prompt)?;
        session.set_turn_budget(
            &turn_id,
            overrides.max_tokens,
            overrides.max_cost_usd,
            price,
        );
        if ahead.is_none() {
            // A turn made ahead is a new session's first: nothing to compact.
            super::compaction::before_turn(&self.inner, session, &turn_id, &model).await;
        }
        let first = match ahead {
            Some(ahead) => Some(FirstCall::Made(ahead)),
            None => self
                .lead_query(session, &task.prompt)
                .await
                .map(FirstCall::Ask),
        };
        let started = match first {
            Some(first) => self.start_led(session, &turn_id, task, &cwd, model, first),
            None => {
                self.start_on_worker(session, &turn_id, task, &cwd, model)
                    .await
            }
        };
        if let Err(e) = started {
            session.abandon_turn(&turn_id);
            return Err(e);
        }
        Ok(PendingTurn { turn_id, outcome })
    }

    /// The first model call's query of a turn of `prompt` the supervisor leads (see `lead`): every turn of a bundle
    /// with no MCP servers.
    async fn lead_query(
        &self,
        session: &Arc<Session>,
        prompt: &str,
    ) -> Option<(Vec<service_ipc::ChatMessage>, Vec<service_ipc::ToolSpec>)> {
        if !session.bundle.agent.supervisor_may_lead()
            || !session.hooks(&self.inner.home).is_empty()
        {
            return None;
        }
        // The model sees the memory window only: a long history is not read whole.
        let window = session.bundle.agent.memory.window_messages();
        let history = session.recent_history(window).await.ok()?;
        let instructions = session.instructions(&self.inner.options.workspace_roots);
        lead::first_query(&session.bundle, &instructions, history, prompt)
    }

    /// Starts a turn the supervisor leads until its model calls a tool.
    fn start_led(
        &self,
        session: &Arc<Session>,
        turn_id: &str,
        task: Task,
        cwd: &Path,
        model: ModelRef,
        first: FirstCall,
    ) -> Result<()> {
        let cwd_of_session = session.cwd();
        let view = self.inner.launcher.view(
            &session.bundle.manifest.sandbox,
            &cwd_of_session,
            cwd_of_session.starts_with(self.inner.home.root()),
        )?;
        let paths = (session.cwd(), view.workspace);
        let instructions = session.instructions(&self.inner.options.workspace_roots);
        let context = turn_context(&paths, view.confinement, cwd, model.clone(), &instructions)?;
        let cancel = session.lead(turn_id).ok_or_else(|| {
            RuntimeError::WorkerUnavailable("the turn ended as it started".into())
        })?;
        emit_started(session, turn_id, &task, &context);
        let checkpoint = super::checkpoints::start(&self.inner, session, turn_id);
        let (rt, for_worker) = (self.clone(), session.clone());
        let start_worker: lead::StartWorker =
            Box::new(move || async move { rt.worker(&for_worker).await }.boxed());
        let first_done = CancellationToken::new();
        let running =
            (session.worker.try_lock()).is_ok_and(|w| w.as_ref().is_some_and(|w| w.is_alive()));
        let ahead = self
            .inner
            .options
            .worker_ahead_after
            .filter(|_| !running && !session.bundle.manifest.tools.is_empty())
            .map(|after| session.model_pace.worker_ahead(after));
        if let Some(wait) = ahead.filter(|a| *a != WorkerAhead::Never) {
            let (rt, for_ahead, turn) = (self.clone(), session.clone(), turn_id.to_string());
            let done = first_done.clone();
            tokio::spawn(async move {
                if let WorkerAhead::After(after) = wait {
                    tokio::select! {
                        _ = done.cancelled() => return,
                        _ = tokio::time::sleep(after) => {}
                    }
                }
                rt.worker_ahead(&for_ahead, &turn).await
            });
        }
        let led = Led {
            rt: self.inner.clone(),
            session: session.clone(),
            turn_id: turn_id.to_string(),
            task,
            context,
            model,
            cancel,
            checkpoint,
            first_done,
            began: std::time::Instant::now(),
        };
        tokio::spawn(led.run(first, start_worker));
        Ok(())
    }

    /// Starts a turn on the session's worker, started for it when it does not run.
    async fn start_on_worker(
        &self,
        session: &Arc<Session>,
        turn_id: &str,
        task: Task,
        cwd: &Path,
        model: ModelRef,
    ) -> Result<()> {
        let worker = self.worker(session).await?;
        let instructions = session.instructions(&self.inner.options.workspace_roots);
        let context = turn_context(&worker.paths, worker.confinement, cwd, model, &instructions)?;
        emit_started(session, turn_id, &task, &context);
        let checkpoint = super::checkpoints::start(&self.inner, session, turn_id);
        if let Err((code, message)) = super::checkpoints::settled(checkpoint).await {
            session.fail_turn(turn_id, &code, &message);
            return Ok(());
        }
        let run = ToWorker::RunTurn {
            turn_id: turn_id.to_string(),
            task,
            context,
            first_reply: None,
        };
        if let Err(e) = worker.send(run).await {
            session.fail_active_turn("worker_unavailable", &e.to_string());
            return Err(e);
        }
        // A worker that died before the start was journaled left the turn to its start (see `handed_turn`): it
        // was gone by then, and the turn it was sent may never be read.
        if !worker.is_alive() {
            session.fail_turn(
                turn_id,
                "worker_died",
                "the session worker ended as the turn started; the next turn starts a new worker",
            );
        }
        Ok(())
    }

    /// Runs a turn to its end.
    pub async fn run_turn(
        &self,
        id: &str,
        task: Task,
        overrides: TurnOverrides,
    ) -> Result<TurnOutcome> {
        let pending = self.start_turn(id, task, overrides).await?;
        pending
            .outcome
            .await
            .map_err(|_| RuntimeError::WorkerDied("the turn ended without an outcome".into()))
    }

    /// Interrupts the running turn: tools are killed and it ends with an `interrupted` error.
    pub async fn interrupt(&self, id: &str) -> Result<String> {
        let session = self.session(id).await?;
        self.claim(&session).await?;
        let turn_id = session
            .active_turn()
            .ok_or_else(|| RuntimeError::NoTurnRunning(id.to_string()))?;
        stop(&self.inner, &session, &turn_id).await?;
        Ok(turn_id)
    }

    /// Sets (or lifts) what session `id` may spend over all its turns (see `Budget`); its updated record.
    pub async fn set_budget(
        &self,
        id: &str,
        budget: Option<super::Budget>,
    ) -> Result<super::SessionRecord> {
        let session = self.session(id).await?;
        self.claim(&session).await?;
        session.set_budget(budget)
    }
}

/// Stops `turn_id` of `session` as an interrupt does: its pending approvals dropped, its lead or its worker told.
pub(super) async fn stop(inner: &Inner, session: &Session, turn_id: &str) -> Result<()> {
    inner.approvals.drop_turn(turn_id);
    // A turn the supervisor leads ends itself, at once.
    if session.interrupt_lead(turn_id) {
        return Ok(());
    }
    let worker = session.worker.lock().await.clone();
    match worker {
        Some(w) if w.is_alive() => {
            w.send(ToWorker::Interrupt {
                turn_id: turn_id.to_string(),
            })
            .await?
        }
        _ => {
            session.fail_active_turn("interrupted", "the turn was interrupted by the operator");
        }
    }
    Ok(())
}

/// The context of a turn in `cwd` for a worker seeing the workspace as `paths` (host, its own) under `confinement`;
/// a confined turn must run inside the workspace.
fn turn_context(
    paths: &(PathBuf, PathBuf),
    confinement: SandboxMode,
    cwd: &Path,
    model: ModelRef,
    instructions: &ProjectInstructions,
) -> Result<TurnContext> {
    if confinement != SandboxMode::DangerFullAccess && !cwd.starts_with(&paths.0) {
        return Err(RuntimeError::CwdOutsideWorkspace(format!(
            "cwd {} is outside the session workspace {}; a sandboxed turn can only run inside it",
            cwd.display(),
            paths.0.display()
        )));
    }
    Ok(TurnContext {
        cwd: handle::worker_path(paths, cwd).display().to_string(),
        model,
        sandbox_mode: confinement,
        instructions: instructions.paths(),
        approval_policy: None,
        metadata: None,
    })
}

/// The supervisor's own event: a worker cannot start or describe a turn.
fn emit_started(session: &Session, turn_id: &str, task: &Task, context: &TurnContext) {
    // Running in the record, not yet started in the journal: a restart finds a turn that never started.
    crate::runtime::faults::point("before_turn_started");
    session.emit_started(
        turn_id,
        EventPayload::TurnStarted {
            turn_id: turn_id.to_string(),
            context: Box::new(context.clone()),
            submission_id: task.submission_id.to_string(),
            prompt: task.prompt.clone(),
            history_mark: session.turn_history_mark(turn_id),
        },
    );
}
