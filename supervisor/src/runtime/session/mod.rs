//! One session in memory: its record, journal, history, worker slot, running turn and allow_always grants.

use crate::project_instructions::ProjectInstructions;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use service_ipc::{ChatMessage, EventPayload, ModelRef, TurnStatus, Usage};
use tokio::sync::oneshot;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::approvals::Grant;
use super::error::{Result, RuntimeError};
use super::handle::WorkerHandle;
use super::journal::Journal;
use super::record::{now, BundleRecord, SessionRecord, SessionStatus};
use super::store::Store;
use crate::bundle::{self, Bundle};
use crate::home::ServiceHome;

mod repair;
mod turn;

/// How a turn ended, as `run_turn` returns it.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// Turn id.
    pub turn_id: String,
    /// How it ended.
    pub status: TurnStatus,
    /// Final assistant text (empty unless completed).
    pub final_message: String,
    /// Token usage.
    pub usage: Usage,
    /// Code and message of the `error` event that ended it, if it failed.
    pub error: Option<(String, String)>,
}

/// How a turn ended, as the worker (or the supervisor, for a dead worker) reports it.
pub struct TurnEnd {
    /// Turn id.
    pub turn_id: String,
    /// How it ended.
    pub status: TurnStatus,
    /// Final assistant text.
    pub final_message: String,
    /// Messages it added to the conversation.
    pub messages: Vec<ChatMessage>,
    /// Token usage.
    pub usage: Usage,
    /// `(code, message)` when it did not complete.
    pub error: Option<(String, String)>,
}

struct ActiveTurn {
    turn_id: String,
    /// The model the supervisor chose for the turn; the worker's model requests are served with it.
    model: ModelRef,
    done: Option<oneshot::Sender<TurnOutcome>>,
    /// Set when the supervisor itself interrupts the turn: the code and message its `error` event carries.
    stop_reason: Option<(String, String)>,
    /// While the supervisor leads the turn (see `lead`): cancels the lead when the turn ends or is interrupted.
    lead: Option<DropGuard>,
    /// Whether its `turn_started` is journaled: until then a worker's death is not its end (the turn's start fails
    /// it instead, when the worker it is sent to is gone), so that no end is journaled without a start.
    journaled: bool,
    /// The turn's model calls as the supervisor made them: what its end reports, whatever the worker says.
    usage: service_ipc::Usage,
    /// Tokens the turn may spend (`TurnOverrides::max_tokens`).
    max_tokens: Option<u64>,
    /// US dollars the turn may spend (`TurnOverrides::max_cost_usd`).
    max_cost: Option<f64>,
    /// Its model's price, when the supervisor has one: what holds the turn and the session to dollars.
    price: Option<crate::tenancy::usage::Price>,
    /// The turn's prompt: where its own messages start in a model request.
    prompt: String,
    /// Whether an overflow was compacted away in this turn already (a second one fails the turn).
    overflow_compacted: bool,
    /// The history log's length as the turn started (see `SessionLog::history_mark`).
    history_mark: u64,
    /// When it started.
    started: std::time::Instant,
    /// Tool calls its model calls asked for, as the supervisor read them from the provider.
    tool_calls: u64,
    /// Cancelled when the turn ends, however it ends (the guard is dropped with the turn): its subagents stop.
    ended: CancellationToken,
    _ended: DropGuard,
    /// Tells other processes on the store that the session is live while the turn runs.
    _lease: Option<crate::runtime::store::files_lock::LiveLease>,
}

/// A live session.
pub struct Session {
    /// Session id.
    pub id: String,
    /// `sessions/<id>/`.
    pub dir: PathBuf,
    /// The bundle it runs.
    pub bundle: Bundle,
    /// Its journal.
    pub journal: Arc<Journal>,
    record: Mutex<SessionRecord>,
    /// The project instructions of its workspace, read at the first turn on this node.
    instructions: std::sync::OnceLock<Arc<ProjectInstructions>>,
    /// Its hooks (the operator's, the bundle's, and the project's once trusted), read at the first worker start on
    /// this node.
    hooks: std::sync::OnceLock<crate::hooks::SessionHooks>,
    /// The worker, when one is running.
    pub(super) worker: tokio::sync::Mutex<Option<WorkerHandle>>,
    active: Mutex<Option<ActiveTurn>>,
    commands: Mutex<HashMap<String, oneshot::Sender<Option<i32>>>>,
    allow_always: Mutex<HashSet<Grant>>,
    /// When the session last emitted an event: its worker is idle since.
    last_active: Mutex<std::time::Instant>,
    /// A store write that failed during the running turn, which must end it.
    fault: Mutex<Option<(String, String)>>,
    metrics: Arc<crate::metrics::Metrics>,
    /// The workspace's checkpoints, for a session whose turns can write (see `runtime::checkpoints`).
    pub(crate) checkpoints: std::sync::OnceLock<Option<Arc<crate::checkpoint::Checkpoints>>>,
    /// What its model's last led first call took to answer (see `runtime::model_pace`).
    pub(crate) model_pace: super::model_pace::ModelPace,
    /// Its subagents that may run at once (see `runtime::subagents`).
    pub(crate) subagent_slots: Arc<tokio::sync::Semaphore>,
    /// The usage ledger its ended turns are counted in.
    pub(crate) ledger: std::sync::OnceLock<Arc<crate::tenancy::Tenancy>>,
    /// This process made it (rather than loading it): its front end may delete it unused (see `runtime::tidy`).
    pub(crate) made_here: std::sync::atomic::AtomicBool,
    /// Where its worker's cgroups count CPU time, and what of it a turn already counted.
    sandbox_cpu: Mutex<(
        Option<crate::sandbox::limits::CpuCounter>,
        std::time::Duration,
    )>,
    /// Its record, grants and journal were brought up to a shared store's under a claim of this runtime (see
    /// `ServiceRuntime::claim`).
    synced: std::sync::atomic::AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The `sessions` quota of `tenant`, which every session counts against: those a client creates or forks, and
/// subagents' (SECURITY.md). A quota that cannot be read refuses the session rather than letting it pass.
async fn sessions_limit(rt: &super::Inner, tenant: &str) -> Result<Option<u64>> {
    match rt.tenancy.quota(tenant).await {
        Ok(quota) => Ok(quota.and_then(|q| q.sessions)),
        Err(e) => Err(RuntimeError::Database {
            host: "the tenant directory".into(),
            message: e.to_string(),
        }),
    }
}

impl Session {
    /// Creates new session `id` (a UUID the runtime made) of `bundle`, with its directory; `cwd` defaults to the
    /// session's own `workspace/`.
    pub(crate) async fn create(
        rt: &super::Inner,
        id: String,
        bundle: Bundle,
        bundle_ref: &str,
        cwd: Option<&Path>,
        parent: Option<super::record::ParentLink>,
        tenant: Option<String>,
    ) -> Result<Arc<Session>> {
        let (store, metrics) = (&*rt.store, rt.metrics.clone());
        let dir = rt.home.sessions().join(&id);
        let workspace = dir.join("workspace");
        std::fs::create_dir_all(&workspace)
            .map_err(|e| RuntimeError::io("cannot create", &workspace, e))?;
        // The session's own workspace is on this node's disk: with other nodes sharing the store, its turns run
        // here, if it can write anything worth keeping.
        let home = store.node_id().filter(|_| {
            cwd.is_none() && bundle.manifest.sandbox.mode != service_ipc::SandboxMode::ReadOnly
        });
        let cwd = match cwd {
            Some(c) => {
                let real = std::fs::canonicalize(c)
                    .ok()
                    .filter(|p| p.is_dir())
                    .ok_or_else(|| {
                        RuntimeError::CwdNotFound(format!("cwd {} is not a directory", c.display()))
                    })?;
                // Resolved above; opened again through no link, as every worker start will (the path may have
                // changed under a sandbox's hands since it was resolved).
                crate::sandbox::host_dir::open_no_links(&real)
                    .map_err(|e| RuntimeError::CwdNotFound(format!("cwd: {e}")))?;
                real
            }
            None => workspace,
        };
        let created = now();
        let record = SessionRecord {
            id: id.clone(),
            bundle_ref: bundle_ref.to_string(),
            bundle: BundleRecord {
                reference: bundle.reference(),
                id: bundle.manifest.id.clone(),
                version: bundle.manifest.version.clone(),
                digest: bundle.digest.clone(),
            },
            created_at: created.clone(),
            updated_at: created,
            cwd: cwd.display().to_string(),
            status: SessionStatus::Idle,
            active_turn: None,
            turn_count: 0,
            last_turn: None,
            title: None,
            usage: Default::default(),
            activity: Default::default(),
            context_id: None,
            parent,
            tenant,
            fork_fresh: false,
            budget: None,
            home,
            cost_usd: 0.0,
        };
        // A session that cannot be written down (a full store, a tenant at its quota) leaves no directory behind.
        let inserted = match sessions_limit(rt, record.tenant()).await {
            Ok(Some(limit)) => store.insert_within(&record, limit).await,
            Ok(None) => store.insert(&record).await,
            Err(e) => Err(e),
        };
        if let Err(RuntimeError::QuotaSessions { tenant, .. }) = &inserted {
            rt.metrics.quota_refused(tenant, "quota_sessions");
        }
        let made = match inserted {
            Ok(()) => Self::assemble(store, dir.clone(), bundle, record, metrics).await,
            Err(e) => Err(e),
        };
        if let Ok(session) = &made {
            session
                .made_here
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        if made.is_err() {
            let _ = std::fs::remove_dir_all(&dir);
        }
        made
    }

    /// Loads a persisted session. In a store of its own, a turn that was running when the supervisor died is
    /// marked failed; in a shared one, the node that claims the session does that (see [`Session::repair_lost_turn`]).
    pub async fn load(
        home: &ServiceHome,
        store: &dyn Store,
        id: &str,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Arc<Session>> {
        if uuid::Uuid::parse_str(id).is_err() {
            return Err(RuntimeError::SessionNotFound(id.to_string()));
        }
        let record = store
            .load(id)
            .await?
            .ok_or_else(|| RuntimeError::SessionNotFound(id.to_string()))?;
        let bundle = bundle::resolve(home, &record.bundle.reference)?;
        let bundle = crate::providers::choice::settle(home.root(), bundle).await;
        if store.shared() && bundle.digest != record.bundle.digest {
            // Another node created the session from other contents under the same reference.
            return Err(RuntimeError::BundleMismatch {
                reference: record.bundle.reference.clone(),
                want: record.bundle.digest.clone(),
                have: bundle.digest,
            });
        }
        let dir = home.sessions().join(id);
        // A session whose files are on another node runs there: this node only forwards its requests and reads
        // its record and journal from the store, and makes no directory for it.
        let homed_elsewhere = record
            .home
            .as_deref()
            .is_some_and(|h| store.node_id().as_deref() != Some(h));
        if !homed_elsewhere {
            std::fs::create_dir_all(dir.join("workspace"))
                .map_err(|e| RuntimeError::io("cannot create", &dir, e))?;
        }
        let session = Self::assemble(store, dir, bundle, record, metrics).await?;
        // A turn another process on this store runs is not lost.
        if !store.shared() && !crate::runtime::store::files_lock::held_elsewhere(&session.dir) {
            session
                .repair_lost_turn(
                    "supervisor_restarted",
                    "the supervisor stopped while this turn ran; the turn was abandoned",
                )
                .await?;
        }
        Ok(session)
    }

    /// Replaces the record in memory with the store's (a shared store, where another node may have changed it).
    pub fn adopt_record(&self, record: SessionRecord) {
        *lock(&self.record) = record;
    }

    /// The default working directory of turns on this node. A session created on another node names that node's
    /// workspace; here, the session's own workspace stands in for it.
    pub fn cwd(&self) -> PathBuf {
        let cwd = PathBuf::from(lock(&self.record).cwd.clone());
        let theirs = Path::new("sessions").join(&self.id).join("workspace");
        if cwd.ends_with(&theirs) {
            self.dir.join("workspace")
        } else {
            cwd
        }
    }

    async fn assemble(
        store: &dyn Store,
        dir: PathBuf,
        bundle: Bundle,
        record: SessionRecord,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Result<Arc<Session>> {
        let journal = Arc::new(Journal::open(store, &record.id).await?);
        // A subagent's session never runs wider than its parent's: its bundle is cut down on every load.
        let bundle = match &record.parent {
            Some(link) => crate::runtime::subagents::ceiling::narrowed(bundle, link),
            None => bundle,
        };
        Ok(Arc::new(Session {
            id: record.id.clone(),
            dir,
            bundle,
            journal,
            record: Mutex::new(record),
            instructions: std::sync::OnceLock::new(),
            hooks: std::sync::OnceLock::new(),
            worker: tokio::sync::Mutex::new(None),
            active: Mutex::new(None),
            commands: Mutex::new(HashMap::new()),
            allow_always: Mutex::new(HashSet::new()),
            last_active: Mutex::new(std::time::Instant::now()),
            fault: Mutex::new(None),
            metrics,
            checkpoints: std::sync::OnceLock::new(),
            model_pace: Default::default(),
            subagent_slots: Arc::new(tokio::sync::Semaphore::new(
                crate::runtime::subagents::ceiling::MAX_RUNNING,
            )),
            ledger: std::sync::OnceLock::new(),
            made_here: std::sync::atomic::AtomicBool::new(false),
            sandbox_cpu: Mutex::default(),
            synced: std::sync::atomic::AtomicBool::new(false),
        }))
    }

    /// The project instructions of the session's workspace, never read above a directory of `ceilings` (see
    /// [`ProjectInstructions`]); read once, so that every turn on this node gives the model the same ones.
    pub fn instructions(&self, ceilings: &[PathBuf]) -> Arc<ProjectInstructions> {
        self.instructions
            .get_or_init(|| {
                Arc::new(ProjectInstructions::of_bundle(
                    &self.bundle,
                    &self.cwd(),
                    ceilings,
                ))
            })
            .clone()
    }

    /// The hooks its workers run, read once (see `crate::hooks::for_session`): a project file trusted or changed
    /// later counts from the session's next process.
    pub fn hooks(&self, home: &crate::home::ServiceHome) -> Arc<Vec<service_ipc::HookSpec>> {
        self.read_hooks(home).sandbox.clone()
    }

    /// The operator's hooks the supervisor runs on the host for this session, read with the others.
    pub fn host_hooks(&self, home: &crate::home::ServiceHome) -> &[service_ipc::HookSpec] {
        &self.read_hooks(home).host
    }

    fn read_hooks(&self, home: &crate::home::ServiceHome) -> &crate::hooks::SessionHooks {
        self.hooks
            .get_or_init(|| crate::hooks::for_session(home, &self.bundle, &self.cwd()))
    }

    /// The hooks its workers were given; none before the first was started.
    pub fn hooks_given(&self) -> &[service_ipc::HookSpec] {
        self.hooks.get().map_or(&[], |h| h.sandbox.as_slice())
    }

    /// Takes `instructions` as the session's, read already for its first call (see [`Self::instructions`]).
    pub(crate) fn adopt_instructions(&self, instructions: Arc<ProjectInstructions>) {
        let _ = self.instructions.set(instructions);
    }

    /// A copy of the record.
    pub fn record(&self) -> SessionRecord {
        lock(&self.record).clone()
    }

    /// The tenant the session belongs to.
    pub fn tenant(&self) -> String {
        lock(&self.record).tenant().to_string()
    }

    fn update(&self, change: impl FnOnce(&mut SessionRecord)) -> Result<()> {
        self.change_record(change, true)
    }

    /// Takes a fork's inheritance: the parent's `turns` count and title.
    pub(crate) fn inherit(&self, turns: u32, title: Option<String>) {
        let _ = self.update(|r| {
            r.turn_count = u64::from(turns);
            r.title = title;
            r.fork_fresh = true;
        });
    }

    /// Sets (or, with None, lifts) what the session may spend over all its turns; the running turn is held to it
    /// from its next model call.
    pub fn set_budget(&self, budget: Option<super::record::Budget>) -> Result<SessionRecord> {
        if let Some(b) = &budget {
            b.check()?;
        }
        let budget = budget.filter(|b| *b != Default::default());
        self.update(|r| r.budget = budget)?;
        Ok(self.record())
    }

    /// Records the id a protocol client knows the session by.
    pub(crate) fn set_context_id(&self, context_id: &str) -> Result<()> {
        self.update(|r| r.context_id = Some(context_id.to_string()))
    }

    /// As [`Session::update`], but not flushed to disk: for the record of a turn starting, which a process crash
    /// keeps (the page cache survives it) and a power cut may lose along with the turn's own unsaved messages.
    fn update_unflushed(&self, change: impl FnOnce(&mut SessionRecord)) -> Result<()> {
        self.change_record(change, false)
    }

    fn change_record(&self, change: impl FnOnce(&mut SessionRecord), flush: bool) -> Result<()> {
        let mut record = lock(&self.record);
        change(&mut record);
        record.updated_at = now();
        self.journal.log().save_record(&record, flush)
    }

    /// Journals and broadcasts an event.
    pub fn emit(&self, payload: EventPayload) {
        self.emit_all(vec![payload]);
    }

    /// Journals and broadcasts events that arrived together as one batch (see `Journal::emit_all`).
    pub fn emit_all(&self, payloads: Vec<EventPayload>) {
        self.journal_batch(payloads, || self.active_turn().is_some());
    }

    /// `emit_all`; a store write that fails while `turn_running` is kept as the fault that ends the turn.
    fn journal_batch(&self, payloads: Vec<EventPayload>, turn_running: impl FnOnce() -> bool) {
        *lock(&self.last_active) = std::time::Instant::now();
        if let Some(traces) = crate::telemetry::traces() {
            let reference = self.bundle.reference();
            let agent = crate::telemetry::spans::Agent {
                name: &self.bundle.manifest.id,
                id: &reference,
            };
            traces.observe(&self.id, &agent, &payloads);
        }
        if let Err(e) = self.journal.emit_all(payloads) {
            tracing::error!(session = %self.id, "event not journaled: {e}");
            if let (Some((code, cause)), true) = (e.storage_fault(), turn_running()) {
                lock(&self.fault).get_or_insert((code.into(), cause));
            }
        }
    }

    /// Measures the sandbox CPU time of its turns from `cgroups`, its new worker's (none: not measured).
    pub(crate) fn meter_sandbox(&self, cgroups: &[PathBuf]) {
        let counter = crate::sandbox::limits::CpuCounter::find(cgroups);
        *lock(&self.sandbox_cpu) = (counter, std::time::Duration::ZERO);
    }

    /// CPU milliseconds its worker's cgroups spent since the last call (since the worker started, the first time);
    /// None without a worker in a cgroup that counts CPU.
    fn sandbox_cpu_ms(&self) -> Option<u64> {
        let mut meter = lock(&self.sandbox_cpu);
        let total = meter.0.as_ref()?.read()?;
        let spent = total.saturating_sub(meter.1);
        meter.1 = total;
        Some(u64::try_from(spent.as_millis()).unwrap_or(u64::MAX))
    }

    /// The store write failure that must end the running turn, once.
    pub fn take_fault(&self) -> Option<(String, String)> {
        lock(&self.fault).take()
    }

    /// How long the session has emitted nothing.
    pub fn idle_for(&self) -> std::time::Duration {
        lock(&self.last_active).elapsed()
    }

    /// True when an operator command is running.
    pub fn commands_running(&self) -> bool {
        !lock(&self.commands).is_empty()
    }

    /// The persisted conversation.
    pub async fn history(&self) -> Result<Vec<ChatMessage>> {
        self.journal.log().history().await
    }

    /// The last `n` messages of the conversation, oldest first.
    pub async fn recent_history(&self, n: usize) -> Result<Vec<ChatMessage>> {
        self.journal.log().recent_history(n).await
    }

    /// True when this process runs the session: a live worker, or a turn started here.
    pub async fn runs_here(&self) -> bool {
        self.active_turn().is_some()
            || self
                .worker
                .lock()
                .await
                .as_ref()
                .is_some_and(|w| w.is_alive())
    }

    /// True when an operator command with this exec id is running.
    pub fn command_running(&self, exec_id: &str) -> bool {
        lock(&self.commands).contains_key(exec_id)
    }

    /// Registers an operator command; its exit code arrives on the receiver (dropped if the worker dies).
    pub fn register_command(&self, exec_id: &str) -> oneshot::Receiver<Option<i32>> {
        let (tx, rx) = oneshot::channel();
        lock(&self.commands).insert(exec_id.to_string(), tx);
        rx
    }

    /// Completes an operator command.
    pub fn finish_command(&self, exec_id: &str, exit_code: Option<i32>) {
        if let Some(tx) = lock(&self.commands).remove(exec_id) {
            let _ = tx.send(exit_code);
        }
    }

    /// Fails every running operator command (the worker died).
    pub fn drop_commands(&self) {
        lock(&self.commands).clear();
    }

    /// True when the operator allowed this for the rest of the session.
    pub fn allowed_always(&self, grant: &Grant) -> bool {
        lock(&self.allow_always).contains(grant)
    }

    /// Remembers an allow_always grant. True when it is new.
    pub fn grant_always(&self, grant: Grant) -> bool {
        lock(&self.allow_always).insert(grant)
    }

    /// Adds the grants the store holds for this session (given on another node that ran it).
    pub fn adopt_grants(&self, grants: Vec<Grant>) {
        lock(&self.allow_always).extend(grants);
    }

    /// True once a claim of this runtime brought the session up to the shared store's.
    pub(crate) fn synced_under_claim(&self) -> bool {
        self.synced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Notes that a claim brought the session up to the shared store's.
    pub(crate) fn mark_synced_under_claim(&self) {
        self.synced
            .store(true, std::sync::atomic::Ordering::Release);
    }
}
