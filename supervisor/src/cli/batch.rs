//! `service-rs batch BUNDLE --tasks tasks.jsonl --out results.jsonl`: a bundle run over a dataset, as evaluation
//! harnesses drive it. Each item gets a fresh session working in a copy of its workspace; after the agent's turn,
//! its git diff is taken (`model_patch`) and its verifier run, both inside the item's sandbox (the workspace is the
//! agent's: git's configuration in it could run anything on the host). Each item's result is appended to `--out`
//! as it ends, with its ATIF trajectory beside it; a restarted batch skips the items `--out` holds. An item that
//! failed for an infrastructure reason (no sandbox or worker, a provider failing after its own retries) is tried
//! again, twice at most.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use service_ipc::{ApprovalDecision, EventPayload, Task, TurnOverrides};
use service_supervisor::runtime::{approvals, ServiceRuntime};
use service_supervisor::ServiceHome;

use super::batch_files::{file_name, read_tasks, summary, Item, Made, Outcome, Results};
use super::run_args::Decide;

/// Tries an item gets when it fails for an infrastructure reason.
const ATTEMPTS: u32 = 3;
/// The end codes that say the infrastructure failed, not the agent: worth another try.
const INFRA: [&str; 7] = [
    "worker_unavailable",
    "worker_died",
    "worker_error",
    "sandbox_unavailable",
    "sandbox_failed",
    "provider_unavailable",
    "provider_error",
];
/// What `model_patch` runs in the item's sandbox: every change the agent made, new files included.
const PATCH_COMMAND: &str = "git add -A >/dev/null 2>&1 && git diff --cached --binary";
/// How much of the verifier's output a result keeps.
const VERIFIER_TAIL: usize = 2000;

/// Arguments of `batch`.
#[derive(Debug, clap::Args)]
pub struct BatchArgs {
    /// The bundle to run every item with (a reference or a directory).
    #[arg(add = super::complete::bundles())]
    bundle_ref: String,
    /// The dataset: one JSON object a line, `{"id", "prompt", "workspace"?, "verifier"?, "budget"?}`; a workspace
    /// is a directory (relative to this file) copied for the item, a verifier a command run in the item's sandbox
    /// after the agent, a budget `{max_tokens, max_cost_usd}` the item's session may spend.
    #[arg(long, value_name = "FILE")]
    tasks: PathBuf,
    /// Where each item's result is appended as a JSON line as it ends; the items it holds already are skipped.
    #[arg(long, value_name = "FILE")]
    out: PathBuf,
    /// Items run at once.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=256))]
    concurrency: u16,
    /// Where the items' ATIF trajectories are written (default: beside --out, in <out>.trajectories/).
    #[arg(long, value_name = "DIR")]
    trajectories: Option<PathBuf>,
    /// End an item's turn after this long (`90s`, `10m`): its outcome is `timed_out`; the verifier still runs.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    timeout: Option<Duration>,
    /// How the items' permission requests are decided: `deny` (the default; nothing waits) or `allow`.
    #[arg(long, value_enum, default_value = "deny", value_name = "DECISION")]
    approvals: Decide,
    /// Model override as provider/name, for every item.
    #[arg(long)]
    model: Option<String>,
    /// Keep each item's session (its journal and workspace) in the store; by default it is deleted once its result
    /// and trajectory are written, so that a large dataset does not fill the disk with copies of its workspaces.
    #[arg(long)]
    keep_sessions: bool,
    /// Run the workers on the host with no confinement.
    #[arg(long)]
    dangerous_sandbox_mode: bool,
}

/// Runs `batch`.
pub fn run(home: ServiceHome, args: BatchArgs) -> anyhow::Result<ExitCode> {
    let items = read_tasks(&args.tasks)?;
    let (results, done) = Results::open(&args.out)?;
    let trajectories = args
        .trajectories
        .clone()
        .unwrap_or_else(|| args.out.with_extension("trajectories"));
    std::fs::create_dir_all(&trajectories)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", trajectories.display()))?;
    let rt = super::runtime(home, args.dangerous_sandbox_mode, true, &[], None)?;
    let bundle = service_supervisor::bundle::resolve(rt.home(), &args.bundle_ref)?;
    super::warn_unconfined(&bundle.manifest, args.dangerous_sandbox_mode);
    let model =
        super::run_start::model_override(args.model.as_deref(), Some(bundle.agent.model.to_ref()))?;
    let total = items.len();
    let todo: Vec<Item> = items
        .into_iter()
        .filter(|i| !done.contains(&i.id))
        .collect();
    if todo.len() < total {
        eprintln!(
            "batch: {} of {total} items are in {} already; running the other {}",
            total - todo.len(),
            args.out.display(),
            todo.len()
        );
    }
    let (made, left) = Made::open(&args.out);
    let batch = Arc::new(Batch {
        made,
        rt: rt.clone(),
        args,
        model,
        trajectories,
        results,
        progress: std::sync::Mutex::new(Progress::new(total - todo.len(), total)),
    });
    let began = Instant::now();
    let tokio = super::tokio()?;
    let failed = tokio.block_on(async {
        let mut sigint = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map_err(|e| anyhow::anyhow!("cannot watch for Ctrl-C: {e}"))?;
        // The sessions of the items a killed batch was running: their items run again.
        for id in left {
            let _ = rt.delete_session(&id).await;
        }
        batch.made.clear();
        let n = usize::from(batch.args.concurrency);
        let all = futures::stream::iter(todo)
            .map(|item| {
                let batch = batch.clone();
                async move { batch.item(item).await }
            })
            .buffer_unordered(n)
            .filter_map(|r| std::future::ready(r.err()))
            .collect::<Vec<_>>();
        let failed = tokio::select! {
            failed = all => failed,
            _ = sigint.recv() => vec![anyhow::anyhow!("interrupted: the items that ended are in the results; run the same command again to go on")],
        };
        rt.shutdown("the batch ended").await;
        if failed.is_empty() && !batch.args.keep_sessions {
            batch.made.clear();
        }
        Ok::<_, anyhow::Error>(failed)
    })?;
    tokio.shutdown_background();
    batch.progress_done();
    let all = batch.results.all();
    eprintln!(
        "batch: {} · results in {}",
        // Outcome codes can come from a worker's frames: shown as text, never as escapes.
        super::term_text::safe(&summary(&all, total, began.elapsed())),
        batch.results.path.display()
    );
    if let Some(e) = failed.first() {
        anyhow::bail!("{e:#}");
    }
    Ok(ExitCode::SUCCESS)
}

struct Batch {
    /// The sessions made and not yet deleted, unless they are kept.
    made: Made,
    rt: ServiceRuntime,
    args: BatchArgs,
    model: Option<service_ipc::ModelRef>,
    trajectories: PathBuf,
    results: Results,
    progress: std::sync::Mutex<Progress>,
}

impl Batch {
    /// Runs `item` to its result line, trying again after an infrastructure failure. Err only when the result
    /// cannot be written.
    async fn item(&self, item: Item) -> anyhow::Result<()> {
        self.progress(|p| p.running += 1);
        let began = Instant::now();
        let mut attempts = 0;
        let mut outcome = loop {
            attempts += 1;
            let outcome = self.attempt(&item).await;
            let infra = INFRA.contains(&outcome.outcome.as_str());
            if !infra || attempts == ATTEMPTS {
                break outcome;
            }
            if let Some(id) = &outcome.session_id {
                let _ = self.rt.delete_session(id).await;
            }
        };
        outcome.attempts = attempts;
        outcome.duration_ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.results.append(&outcome)?;
        self.progress(|p| p.ended(&outcome));
        Ok(())
    }

    /// One try of `item`.
    async fn attempt(&self, item: &Item) -> Outcome {
        let mut o = Outcome {
            id: item.id.clone(),
            ..Default::default()
        };
        // Noted before it exists: a batch killed at any point leaves no session the next one does not delete.
        let id = uuid::Uuid::new_v4().to_string();
        if !self.args.keep_sessions {
            self.made.add(&id);
        }
        let seeded = self.rt.create_session_seeded(
            id.clone(),
            &self.args.bundle_ref,
            item.workspace.as_deref(),
            item.budget,
        );
        if let Err(e) = seeded.await {
            (o.outcome, o.error) = code_of(e);
            return o;
        }
        o.session_id = Some(id.clone());
        if let Err((code, message)) = self.turn(&id, item, &mut o).await {
            (o.outcome, o.error) = (code, Some(message));
        }
        if !INFRA.contains(&o.outcome.as_str()) {
            // The agent's changes before the verifier's: a test run leaves files of its own.
            if item
                .workspace
                .as_deref()
                .is_some_and(|w| w.join(".git").exists())
            {
                o.model_patch = self
                    .sandboxed(&id, PATCH_COMMAND)
                    .await
                    .ok()
                    .map(|(_, out)| out);
            }
            if let Some(verifier) = &item.verifier {
                self.verify(&id, verifier, &mut o).await;
            }
        }
        if let Ok(record) = self.rt.get_session(&id).await {
            o.usage = record.usage;
            o.cost_usd = (record.cost_usd > 0.0).then_some(record.cost_usd);
        }
        let file = self.trajectories.join(file_name(&item.id));
        let backend = super::backend::Backend::Local(self.rt.clone());
        match super::export::write(&backend, &id, super::export::Format::Atif, Some(&file)).await {
            Ok(()) => o.trajectory = Some(file.display().to_string()),
            Err(e) => tracing::warn!(item = %item.id, "trajectory not written: {e:#}"),
        }
        if self.args.keep_sessions {
            let _ = self.rt.stop_worker(&id).await;
        } else if let Err(e) = self.rt.delete_session(&id).await {
            tracing::warn!(item = %item.id, "session not deleted: {e}");
        }
        o
    }

    /// The item's turn, to its end: `completed` in `o`, or the code and message it ended with.
    async fn turn(&self, id: &str, item: &Item, o: &mut Outcome) -> Result<(), (String, String)> {
        let runtime_err = |e| {
            let (code, message) = code_of(e);
            (code, message.unwrap_or_default())
        };
        let mut events = self.rt.subscribe_session(id).await.map_err(runtime_err)?;
        let overrides = TurnOverrides {
            model: self.model.clone(),
            ..Default::default()
        };
        let turn = self
            .rt
            .start_turn(id, Task::new(item.prompt.clone()), overrides)
            .await
            .map_err(runtime_err)?;
        let decision = match self.args.approvals {
            Decide::Allow => ApprovalDecision::AllowOnce,
            Decide::Deny => ApprovalDecision::Deny,
        };
        let deadline = tokio::time::sleep(self.args.timeout.unwrap_or(Duration::MAX / 4));
        tokio::pin!(deadline);
        let mut timed_out = false;
        loop {
            let msg = tokio::select! {
                msg = events.next() => msg,
                () = &mut deadline, if !timed_out => {
                    timed_out = true;
                    let _ = self.rt.interrupt(id).await;
                    continue;
                }
            };
            let Some(msg) = msg else {
                return Err((
                    "worker_unavailable".into(),
                    "the session's events ended before its turn did".into(),
                ));
            };
            if let Some(asked) = approvals::asked(&msg.payload) {
                let _ = self
                    .rt
                    .resolve_approval_with(&asked.request_id, decision, None)
                    .await;
            }
            if !(msg.payload.ends_turn() && msg.payload.turn_id() == Some(turn.turn_id.as_str())) {
                continue;
            }
            return match msg.payload {
                EventPayload::TurnCompleted { .. } => {
                    o.outcome = "completed".into();
                    Ok(())
                }
                EventPayload::Error { .. } if timed_out => Err((
                    "timed_out".into(),
                    format!(
                        "the turn took longer than --timeout {}",
                        humantime::format_duration(self.args.timeout.unwrap_or_default())
                    ),
                )),
                EventPayload::Error { code, message, .. } => Err((code, message)),
                _ => Err(("failed".into(), "the turn ended without saying how".into())),
            };
        }
    }

    /// Runs the verifier in the item's sandbox: its reward is 1 for exit status 0, else 0, unless its last stdout
    /// line is a number.
    async fn verify(&self, id: &str, verifier: &str, o: &mut Outcome) {
        match self.sandboxed(id, verifier).await {
            Ok((exit_code, stdout)) => {
                let last = stdout
                    .lines()
                    .rev()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("");
                o.reward = Some(match last.trim().parse::<f64>() {
                    Ok(r) if r.is_finite() => r,
                    _ if exit_code == Some(0) => 1.0,
                    _ => 0.0,
                });
                let cut = stdout.len().saturating_sub(VERIFIER_TAIL);
                let cut = (cut..=stdout.len())
                    .find(|i| stdout.is_char_boundary(*i))
                    .unwrap_or(stdout.len());
                o.verifier =
                    Some(serde_json::json!({"exit_code": exit_code, "output": &stdout[cut..]}));
            }
            Err(e) => {
                o.reward = Some(0.0);
                o.verifier = Some(serde_json::json!({"error": e}));
            }
        }
    }

    /// Runs `command` in session `id`'s sandbox: its exit code and standard output (as journaled, up to the live
    /// output cap).
    async fn sandboxed(&self, id: &str, command: &str) -> Result<(Option<i32>, String), String> {
        let done = self
            .rt
            .run_session_command(id, command)
            .await
            .map_err(|e| e.to_string())?;
        let events = self
            .rt
            .session_events(id)
            .await
            .map_err(|e| e.to_string())?;
        let mut out = String::new();
        for e in events {
            if let EventPayload::ExecCommandOutputDelta {
                exec_id,
                stream,
                chunk,
                ..
            } = e.payload
            {
                if exec_id == done.exec_id && stream == service_ipc::ExecStream::Stdout {
                    out.push_str(&chunk);
                }
            }
        }
        Ok((done.exit_code, out))
    }

    fn progress(&self, change: impl FnOnce(&mut Progress)) {
        let mut p = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut p);
        p.draw();
    }

    fn progress_done(&self) {
        let p = self.progress.lock().unwrap_or_else(|p| p.into_inner());
        if p.terminal {
            eprintln!();
        }
    }
}

/// The code and message an error of the runtime has in every front end (`ApiError`'s).
fn code_of(e: service_supervisor::runtime::RuntimeError) -> (String, Option<String>) {
    let body = service_supervisor::server::api::ApiError::from(e).into_body();
    (body.code, Some(body.message))
}

/// The batch's progress on stderr: one line redrawn on a terminal, a line per item elsewhere.
struct Progress {
    terminal: bool,
    done: usize,
    total: usize,
    running: usize,
    solved: usize,
    not_completed: usize,
    cost: f64,
    began: Instant,
}

impl Progress {
    fn new(done: usize, total: usize) -> Progress {
        Progress {
            terminal: std::io::stderr().is_terminal(),
            done,
            total,
            running: 0,
            solved: 0,
            not_completed: 0,
            cost: 0.0,
            began: Instant::now(),
        }
    }

    fn ended(&mut self, o: &Outcome) {
        self.running = self.running.saturating_sub(1);
        self.done += 1;
        self.solved += usize::from(o.reward.is_some_and(|r| r >= 1.0));
        self.not_completed += usize::from(o.outcome != "completed");
        self.cost += o.cost_usd.unwrap_or(0.0);
        if !self.terminal {
            let reward = o
                .reward
                .map(|r| format!(", reward {r}"))
                .unwrap_or_default();
            eprintln!(
                "batch: [{}/{}] {}: {}{reward} ({:.1} s)",
                self.done,
                self.total,
                super::term_text::safe(&o.id),
                super::term_text::safe(&o.outcome),
                o.duration_ms as f64 / 1000.0
            );
        }
    }

    fn draw(&self) {
        if !self.terminal {
            return;
        }
        let width = 30;
        let filled = (self.done * width).checked_div(self.total).unwrap_or(width);
        eprint!(
            "\r\x1b[K[{}{}] {}/{} · {} running · {} solved · {} did not complete · ${:.4} · {:.0} s",
            "#".repeat(filled),
            "·".repeat(width - filled),
            self.done,
            self.total,
            self.running,
            self.solved,
            self.not_completed,
            self.cost,
            self.began.elapsed().as_secs_f64()
        );
    }
}
