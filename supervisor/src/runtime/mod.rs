//! `ServiceRuntime`: the one type the CLI, the TUI and the HTTP server sit on.
//!
//! It creates sessions from bundle references, starts one worker process per live session (lazily, when a turn's
//! model first calls a tool or an operator runs a command, and again after a worker died), runs turns, fans events
//! out to subscribers, routes approvals and runs operator commands. Sessions are persisted in a [`store`]: by default under
//! `$SERVICE_HOME/sessions/<id>/` (`session.json`, `events.jsonl`, `history.jsonl`, `workspace/`), or in PostgreSQL
//! shared by several nodes; they are loaded back lazily after a restart.
//!
//! - [`session`]: one session's state; [`record`]: its persisted record; [`journal`]: events and subscriptions.
//! - [`store`]: where records, histories and journals live (files, or PostgreSQL shared by many nodes).
//! - [`worker`]: a session's worker attached and the actor that applies its frames to the session; `spawn`: the
//!   factory that starts and configures a worker, knowing nothing of sessions; [`handle`]: the session's hold on its
//!   worker; [`launcher`]: how the process is started.
//! - `turns`: turns started, run and interrupted; `lead`: a turn the supervisor leads until it needs its
//!   sandbox; `model_call`: a model call for a running turn, or made ahead of a new session's first turn;
//!   `model_pace`: what a session's model took to answer, which decides when the next turn's worker starts.
//! - [`approvals`]: the in-memory approval store, and what `allow_always` grants.
//! - [`operations`]: metrics, idle workers reaped, bundles removed, directories left without a record removed;
//!   `teardown`: sessions stopped and deleted, and the runtime's end.
//! - `ownership`: which node of a shared store runs a session, and its leases kept alive; `bundle_fetch`: a
//!   session's bundle pulled by a node that lacks it; `shared_bundles`: bundles installed through any node, kept in
//!   a shared store for every node.
//! - `subagents`: an `Agent` call run as a child session, confined to its parent's sandbox.

pub mod approvals;
mod bundle_fetch;
pub mod checkpoints;
pub mod compaction;
mod decisions;
mod drain;
mod egress_sink;
pub mod error;
pub mod faults;
mod frame_guard;
pub mod handle;
mod host_hooks;
pub mod journal;
pub mod launcher;
mod lead;
mod model_call;
mod model_pace;
pub mod retention;
mod shared_bundles;
pub use model_call::BUDGET_EXCEEDED;
mod names;
pub mod operations;
mod ownership;
mod prestart;
pub mod process_spawn;
pub mod project_rules;
pub mod quota;
pub mod record;
mod seeded;
pub mod session;
mod spawn;
pub mod store;
pub(crate) mod subagents;
mod sweep;
mod teardown;
mod tidy;
pub use tidy::UNUSED_AFTER as UNUSED_SESSIONS_AFTER;
mod turns;
pub mod worker;
mod worker_process;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use service_ipc::{EventMsg, SandboxMode, ToWorker};
use tokio::sync::oneshot;

pub use error::{Result, RuntimeError};
pub use journal::{EventStream, Published, PublishedStream};
pub use operations::IdleTimeouts;
pub use record::{Budget, SessionRecord};
pub use session::TurnOutcome;

use approvals::ApprovalStore;
use handle::WorkerHandle;
use launcher::Launcher;
use session::Session;

use crate::bundle::{self, BundleError};
use crate::home::ServiceHome;
use crate::sandbox::SandboxLauncher;

/// A session journal's default quota, in MiB (`SERVICE_JOURNAL_QUOTA_MB` overrides it).
pub const DEFAULT_JOURNAL_QUOTA_MB: u64 = 256;

/// Settings of a runtime.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// The binary that carries the worker entry: `service-worker`, or `service-rs` itself (see [`worker_beside`]).
    pub worker_exe: PathBuf,
    /// The host user sandboxes run as (see [`crate::sandbox::identity`]): for a process running as root, by
    /// default the workspace's owner, or `nobody`.
    pub sandbox_user: crate::sandbox::identity::SandboxUser,
    /// What confines sandboxes (see [`crate::sandbox::backend`]); by default `SERVICE_SANDBOX_BACKEND`, else `auto`.
    pub sandbox_backend: crate::sandbox::backend::BackendChoice,
    /// How often workers send a heartbeat.
    pub heartbeat: Duration,
    /// Silence after which a worker counts as hung and is killed.
    pub hang_timeout: Duration,
    /// Time a new worker has to connect and finish the handshake.
    pub handshake_timeout: Duration,
    /// Run every worker on the host, whatever its manifest asks (`--dangerous-sandbox-mode`).
    pub dangerous_sandbox_mode: bool,
    /// Keep a sandboxed worker started ahead for each bundle in use, for its next session (see `prestart`), and
    /// make the files sandboxes share when a session is created rather than at its worker's start.
    pub prestart_sandboxes: bool,
    /// How long a led turn's first model call runs before the session's worker starts beside it, when the bundle
    /// offers tools (see `lead`); once the session's model has answered, whether its last first call took this
    /// long decides at once (`model_pace`). None starts it only once the model calls a tool.
    pub worker_ahead_after: Option<Duration>,
    /// Bytes a session's journal may hold; past it the running turn fails with `journal_quota` and no new turn
    /// starts.
    pub journal_quota: u64,
    /// Where provider keys may be sent besides the official endpoints (`$SERVICE_HOME/config.toml`).
    pub keys: crate::providers::keys::KeyPolicy,
    /// Fixed names for the egress proxy (`--resolve HOST:PORT:ADDR`), before the host's resolver.
    pub resolver: Arc<crate::egress::Resolver>,
    /// Time without a command after which a worker stops its spare shells.
    pub spare_shell_idle: Duration,
    /// Registries (`host[:port]`) this node pulls a session's bundle from when another node created the session and
    /// this one lacks it (`serve --allow-registry`).
    pub pull_registries: Vec<String>,
    /// The directories clients may name a session's `cwd` under (`serve --workspace-root`): project instructions
    /// are never read above them, nor above the store's sessions.
    pub workspace_roots: Vec<PathBuf>,
    /// Bytes of workspace checkpoints a session keeps (`checkpoint_max_mb` in config.toml); 0 takes none.
    pub checkpoint_max_bytes: u64,
    /// Patterns (gitignore syntax) checkpoints leave out besides the project's own (`checkpoint_ignore`).
    pub checkpoint_ignore: Vec<String>,
    /// How deep subagents may nest (`max_subagent_depth` in config.toml): 1 lets a session start subagents that
    /// cannot start their own; 0 turns subagents off.
    pub max_subagent_depth: u32,
    /// Stop a turn whose tenant passes its daily tokens (`serve`). Every runtime counts what turns spend in the
    /// store's usage ledger.
    pub tenant_ledger: bool,
    /// When the files store flushes a turn's end to disk (`turn_flush` in config.toml; `serve` hands it to the
    /// PostgreSQL store too).
    pub turn_flush: store::TurnFlush,
    /// Model prices by `provider/name` (`[prices]` in config.toml): usage reports with them have a cost.
    pub prices: std::collections::BTreeMap<String, crate::tenancy::usage::Price>,
}

impl RuntimeOptions {
    /// Defaults for `worker_exe`; `SERVICE_WORKER_HANG_TIMEOUT_MS` overrides the hang time-out (tests use it).
    pub fn new(worker_exe: PathBuf) -> Self {
        let hang_ms = std::env::var("SERVICE_WORKER_HANG_TIMEOUT_MS")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(30_000);
        RuntimeOptions {
            worker_exe,
            heartbeat: Duration::from_millis((hang_ms / 5).clamp(50, 1000)),
            hang_timeout: Duration::from_millis(hang_ms),
            handshake_timeout: Duration::from_secs(10),
            dangerous_sandbox_mode: false,
            sandbox_user: crate::sandbox::identity::SandboxUser::default_for_this_process(),
            sandbox_backend: std::env::var(crate::sandbox::backend::BACKEND_ENV)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or_default(),
            prestart_sandboxes: false,
            worker_ahead_after: Some(lead::AHEAD_AFTER),
            journal_quota: std::env::var("SERVICE_JOURNAL_QUOTA_MB")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(DEFAULT_JOURNAL_QUOTA_MB)
                .saturating_mul(1024 * 1024),
            keys: Default::default(),
            resolver: Default::default(),
            spare_shell_idle: Duration::from_millis(
                service_ipc::config::default_spare_shell_idle_ms(),
            ),
            pull_registries: Vec::new(),
            workspace_roots: Vec::new(),
            checkpoint_max_bytes: DEFAULT_CHECKPOINT_MAX_MB * 1024 * 1024,
            checkpoint_ignore: Vec::new(),
            max_subagent_depth: subagents::DEFAULT_MAX_DEPTH,
            tenant_ledger: false,
            turn_flush: Default::default(),
            prices: Default::default(),
        }
    }
}

/// MiB of checkpoints a session keeps unless config.toml says otherwise.
pub const DEFAULT_CHECKPOINT_MAX_MB: u64 = 512;

/// The worker executable to run beside the supervisor binary `supervisor_exe`: the small `service-worker` installed
/// next to it, else `supervisor_exe` itself, whose `worker` command is the same entry in a larger binary.
pub fn worker_beside(supervisor_exe: &std::path::Path) -> PathBuf {
    let lean = supervisor_exe.with_file_name("service-worker");
    if lean.is_file() {
        lean
    } else {
        supervisor_exe.to_path_buf()
    }
}

/// A turn that was started; its outcome arrives when it ends.
pub struct PendingTurn {
    /// Turn id.
    pub turn_id: String,
    /// Resolves when the turn ends (an error if the runtime dropped it).
    pub outcome: oneshot::Receiver<TurnOutcome>,
}

/// A new session with its first turn started (see [`ServiceRuntime::create_session_with_turn`]).
pub struct FirstTurn {
    /// The session's record as created.
    pub record: SessionRecord,
    /// The session's events from its creation on: the turn's, from its start.
    pub events: EventStream,
    /// The turn.
    pub turn: PendingTurn,
}

/// How an operator command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcome {
    /// Exec id of its events.
    pub exec_id: String,
    /// Exit code; None when killed by a signal.
    pub exit_code: Option<i32>,
}

pub(crate) struct Inner {
    home: ServiceHome,
    options: RuntimeOptions,
    launcher: Box<dyn Launcher>,
    store: Arc<dyn store::Store>,
    sessions: Mutex<HashMap<String, Arc<Session>>>,
    /// Serialises loading persisted sessions.
    load_lock: tokio::sync::Mutex<()>,
    approvals: ApprovalStore,
    prestarted: prestart::Prestarted,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    /// This process's own listeners (the HTTP server), which no sandbox may reach through its egress proxy.
    own_addrs: Mutex<Vec<std::net::SocketAddr>>,
    /// Running turns of a shared store that a list has already tried to claim (`session id/turn id`): each costs
    /// the database one claim, once, not at every list.
    lost_checked: Mutex<std::collections::HashSet<String>>,
    /// Tenants' tokens, quotas and spending, over the store's directory.
    tenancy: Arc<crate::tenancy::Tenancy>,
    /// Where the server's stop is.
    drain: drain::Drain,
    /// The shared bundles the last sync could not bring in line, each with why (see `shared_bundles`).
    bundle_drift: Mutex<Vec<String>>,
}

fn messages(published: PublishedStream) -> EventStream {
    use futures::StreamExt;
    Box::pin(published.map(|p| p.msg.clone()))
}

/// The runtime. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct ServiceRuntime {
    inner: Arc<Inner>,
}

impl ServiceRuntime {
    /// A runtime over the store at `home`, confining workers as their manifests say.
    pub fn new(home: ServiceHome, options: RuntimeOptions) -> Self {
        let launcher = SandboxLauncher::new(
            options.dangerous_sandbox_mode,
            options.sandbox_user.clone(),
            options.sandbox_backend,
        )
        .remembering_in(home.backend_file());
        Self::with_launcher(home, options, Box::new(launcher))
    }

    /// A runtime with a specific launcher.
    pub fn with_launcher(
        home: ServiceHome,
        options: RuntimeOptions,
        launcher: Box<dyn Launcher>,
    ) -> Self {
        let store = Arc::new(
            store::files::FilesStore::new(home.clone()).with_turn_flush(options.turn_flush),
        );
        Self::with_parts(home, options, launcher, store)
    }

    /// A runtime whose sessions live in `store` (see [`store`]), confining workers as their manifests say.
    pub fn with_store(
        home: ServiceHome,
        options: RuntimeOptions,
        store: Arc<dyn store::Store>,
    ) -> Self {
        let launcher = SandboxLauncher::new(
            options.dangerous_sandbox_mode,
            options.sandbox_user.clone(),
            options.sandbox_backend,
        )
        .remembering_in(home.backend_file());
        Self::with_parts(home, options, Box::new(launcher), store)
    }

    fn with_parts(
        home: ServiceHome,
        mut options: RuntimeOptions,
        launcher: Box<dyn Launcher>,
        store: Arc<dyn store::Store>,
    ) -> Self {
        // A fresh workspace's instructions are its own: never those of a repository the store happens to be in.
        options.workspace_roots.push(home.sessions());
        sweep::leftovers(&home);
        let tenancy = crate::tenancy::Tenancy::new(store.directory());
        ServiceRuntime {
            inner: Arc::new(Inner {
                tenancy,
                home,
                options,
                launcher,
                store,
                sessions: Mutex::new(HashMap::new()),
                load_lock: tokio::sync::Mutex::new(()),
                approvals: ApprovalStore::default(),
                prestarted: prestart::Prestarted::default(),
                metrics: Arc::default(),
                own_addrs: Mutex::default(),
                lost_checked: Mutex::default(),
                drain: drain::Drain::default(),
                bundle_drift: Mutex::default(),
            }),
        }
    }

    /// Adds a listener of this process (the server's bound address) to what no sandbox may reach, whatever its
    /// bundle lists; workers started from now on get it.
    pub fn reserve_address(&self, addr: std::net::SocketAddr) {
        self.inner
            .own_addrs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(addr);
    }

    /// The addresses no sandbox may reach: the store's (its database) and this process's own listeners.
    pub(crate) fn reserved_addresses(inner: &Inner) -> Vec<std::net::SocketAddr> {
        let mut all = inner.store.reserved();
        all.extend(
            inner
                .own_addrs
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .copied(),
        );
        all
    }

    /// The store this runtime uses.
    pub fn home(&self) -> &ServiceHome {
        &self.inner.home
    }

    /// Where sessions live.
    pub fn store(&self) -> &Arc<dyn store::Store> {
        &self.inner.store
    }

    /// Tenants' tokens, quotas and spending.
    pub fn tenancy(&self) -> &Arc<crate::tenancy::Tenancy> {
        &self.inner.tenancy
    }

    /// Model prices by `provider/name`, for usage reports.
    pub fn prices(&self) -> &std::collections::BTreeMap<String, crate::tenancy::usage::Price> {
        &self.inner.options.prices
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.inner
            .sessions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Creates a session from a bundle reference; `cwd` defaults to the session's own workspace.
    pub async fn create_session(
        &self,
        bundle_ref: &str,
        cwd: Option<&Path>,
    ) -> Result<SessionRecord> {
        let bundle = bundle::resolve(&self.inner.home, bundle_ref)?;
        self.create_session_from(bundle, bundle_ref, cwd).await
    }

    /// Creates a session of a bundle already resolved from `bundle_ref` (so a caller can check it first).
    pub async fn create_session_from(
        &self,
        bundle: bundle::Bundle,
        bundle_ref: &str,
        cwd: Option<&Path>,
    ) -> Result<SessionRecord> {
        self.create_session_for(bundle, bundle_ref, cwd, None).await
    }

    /// [`ServiceRuntime::create_session_from`] for `tenant` (None: the default tenant).
    pub async fn create_session_for(
        &self,
        bundle: bundle::Bundle,
        bundle_ref: &str,
        cwd: Option<&Path>,
        tenant: Option<String>,
    ) -> Result<SessionRecord> {
        self.create_session_as(
            uuid::Uuid::new_v4().to_string(),
            bundle,
            bundle_ref,
            cwd,
            None,
            tenant,
        )
        .await
        .map(|session| session.record())
    }

    /// Creates session `id` of `bundle` for `tenant` and keeps it live; `parent` ties a subagent's session to its
    /// parent.
    async fn create_session_as(
        &self,
        id: String,
        bundle: bundle::Bundle,
        bundle_ref: &str,
        cwd: Option<&Path>,
        parent: Option<record::ParentLink>,
        tenant: Option<String>,
    ) -> Result<Arc<Session>> {
        self.inner.launcher.ahead(&bundle.manifest.sandbox);
        // A long-running runtime makes what its sandboxes share while the session waits for its first turn, so that
        // no turn's worker start waits for it.
        if self.inner.options.prestart_sandboxes {
            let cache = self.inner.home.sandbox_cache();
            self.inner.launcher.warm(&bundle.manifest.sandbox, &cache);
        }
        let bundle = crate::providers::choice::settle(self.inner.home.root(), bundle).await;
        let session =
            Session::create(&self.inner, id, bundle, bundle_ref, cwd, parent, tenant).await?;
        self.keep_live(&session);
        Ok(session)
    }

    /// Keeps `session` among the live ones, its turns counted in the store's usage ledger.
    fn keep_live(&self, session: &Arc<Session>) {
        let _ = session.ledger.set(self.inner.tenancy.clone());
        self.sessions().insert(session.id.clone(), session.clone());
    }

    async fn session(&self, id: &str) -> Result<Arc<Session>> {
        if let Some(s) = self.sessions().get(id) {
            return Ok(s.clone());
        }
        // One loader at a time: loading repairs a turn left running by a crash, which must happen once.
        let _loading = self.inner.load_lock.lock().await;
        if let Some(s) = self.sessions().get(id) {
            return Ok(s.clone());
        }
        let load = || {
            Session::load(
                &self.inner.home,
                &*self.inner.store,
                id,
                self.inner.metrics.clone(),
            )
        };
        let loaded = match load().await {
            Err(RuntimeError::Bundle(
                missing @ (BundleError::NotFound(_) | BundleError::NotPulled(_)),
            )) if self.inner.store.shared() => {
                self.fetch_bundle(id, missing).await?;
                load().await?
            }
            loaded => loaded?,
        };
        self.keep_live(&loaded);
        Ok(loaded)
    }

    /// The record of one session.
    pub async fn get_session(&self, id: &str) -> Result<SessionRecord> {
        let session = self.session(id).await?;
        if self.inner.store.shared() && !session.runs_here().await {
            // Another node may be running it: its record is the store's.
            return self
                .inner
                .store
                .load(id)
                .await?
                .ok_or_else(|| RuntimeError::SessionNotFound(id.to_string()));
        }
        Ok(session.record())
    }

    /// The tenant session `id` belongs to.
    pub async fn session_tenant(&self, id: &str) -> Result<String> {
        Ok(self.session(id).await?.tenant())
    }

    /// The tenant of the session that asked approval request `request_id`, while it is pending here or, in a
    /// shared store, anywhere; None for a request no such session is known for.
    pub async fn approval_tenant(&self, request_id: &str) -> Option<String> {
        let session = match self.inner.approvals.session_of(request_id) {
            Some(s) => s,
            None if self.inner.store.shared() => {
                self.inner.store.approval_session(request_id).await.ok()??
            }
            None => return None,
        };
        self.session_tenant(&session).await.ok()
    }

    /// The bundle a session runs, as resolved when the session was created or loaded.
    pub async fn session_bundle(&self, id: &str) -> Result<crate::bundle::Bundle> {
        Ok(self.session(id).await?.bundle.clone())
    }

    /// How many sandboxed workers are started ahead and waiting for a session (`RuntimeOptions::prestart_sandboxes`).
    pub fn spare_workers(&self) -> usize {
        self.inner.prestarted.ready()
    }

    /// Every persisted session, oldest first. Records that cannot be read are skipped.
    pub async fn list_sessions(&self) -> Result<Vec<SessionRecord>> {
        let stored = self.inner.store.list().await?;
        let live = self.sessions().clone();
        let mut out = Vec::with_capacity(stored.len());
        for record in stored {
            match live.get(&record.id) {
                // This process's record is the freshest, unless another node runs the session.
                Some(s) if !self.inner.store.shared() || s.runs_here().await => {
                    out.push(s.record())
                }
                _ => out.push(self.unless_lost(record).await),
            }
        }
        Ok(out)
    }

    /// `record` as listed: a session it says is running that no process runs (the one that ran it was killed) is
    /// loaded, and over a shared store claimed (once per turn), which repairs it (see `session::repair`), so no
    /// list shows a turn nobody runs. Only the sessions that say `running` are looked at; one another process or a
    /// live node holds is listed as the store has it.
    async fn unless_lost(&self, record: SessionRecord) -> SessionRecord {
        if record.status != record::SessionStatus::Running {
            return record;
        }
        let shared = self.inner.store.shared();
        if !shared
            && store::files_lock::held_elsewhere(&self.inner.home.sessions().join(&record.id))
        {
            return record;
        }
        if shared {
            let turn = format!(
                "{}/{}",
                record.id,
                record.active_turn.as_deref().unwrap_or("")
            );
            let mut checked = self
                .inner
                .lost_checked
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if checked.len() >= 10_000 {
                checked.clear();
            }
            if !checked.insert(turn) {
                return record;
            }
        }
        let Ok(session) = self.session(&record.id).await else {
            return record;
        };
        if shared && self.claim(&session).await.is_err() {
            return record;
        }
        session.record()
    }

    /// A session whose journal has caught up with what other nodes stored, for a reader.
    async fn followed(&self, id: &str) -> Result<Arc<Session>> {
        let session = self.session(id).await?;
        session.journal.catch_up().await?;
        Ok(session)
    }

    /// Live events of a session from now on.
    pub async fn subscribe_session(&self, id: &str) -> Result<EventStream> {
        Ok(messages(self.followed(id).await?.journal.subscribe(None)))
    }

    /// Every journaled event of a session, oldest first: its transcript so far.
    pub async fn session_events(&self, id: &str) -> Result<Vec<EventMsg>> {
        let session = self.followed(id).await?;
        let journal = &session.journal;
        Ok(journal
            .read_range(0, journal.last_seq())
            .await?
            .into_iter()
            .map(|p| p.msg.clone())
            .collect())
    }

    /// Every event after sequence number `after` from the journal, then live events, with no gap or duplicate.
    pub async fn subscribe_session_from(&self, id: &str, after: u64) -> Result<EventStream> {
        Ok(messages(
            self.followed(id).await?.journal.subscribe(Some(after)),
        ))
    }

    /// Session `id`'s journal, caught up with what other nodes stored: for a subscriber that frames events itself
    /// (the server's SSE).
    pub async fn journal(&self, id: &str) -> Result<Arc<journal::Journal>> {
        Ok(self.followed(id).await?.journal.clone())
    }

    /// Who a sandbox over the host directory `dir` runs as, for a person (see `SandboxUser::who_over`).
    pub fn sandbox_user_over(&self, dir: &std::path::Path) -> Option<String> {
        self.inner.options.sandbox_user.who_over(dir)
    }

    /// Whether every worker runs on the host (`--dangerous-sandbox-mode`).
    pub fn dangerous_sandbox_mode(&self) -> bool {
        self.inner.options.dangerous_sandbox_mode
    }

    /// The `sandbox_backend` setting of this runtime.
    pub fn sandbox_backend(&self) -> crate::sandbox::backend::BackendChoice {
        self.inner.options.sandbox_backend
    }

    /// Starts the session's worker now instead of at the first turn (a no-op when it runs).
    pub async fn start_worker(&self, id: &str) -> Result<()> {
        let session = self.session(id).await?;
        self.claim(&session).await?;
        self.worker(&session).await.map(drop)
    }

    async fn worker(&self, session: &Arc<Session>) -> Result<WorkerHandle> {
        let mut slot = session.worker.lock().await;
        if let Some(w) = slot.as_ref().filter(|w| w.is_alive()) {
            return Ok(w.clone());
        }
        self.start_worker_in(session, &mut slot).await
    }

    /// Starts the session's worker ahead of turn `turn_id`'s need for it, while the turn's first model call runs
    /// (see `lead`): not when one runs, nor once that turn has ended (the session may be gone with it).
    async fn worker_ahead(&self, session: &Arc<Session>, turn_id: &str) {
        let mut slot = session.worker.lock().await;
        if slot.as_ref().is_some_and(|w| w.is_alive())
            || session.active_turn().as_deref() != Some(turn_id)
        {
            return;
        }
        if let Err(e) = self.start_worker_in(session, &mut slot).await {
            // The turn's own start says it, if the turn comes to need the worker.
            tracing::debug!(session = %session.id, "the worker started ahead failed: {e}");
        }
    }

    /// Starts the session's worker into its `slot`, held locked.
    async fn start_worker_in(
        &self,
        session: &Arc<Session>,
        slot: &mut Option<WorkerHandle>,
    ) -> Result<WorkerHandle> {
        if !session.bundle.root.is_dir() {
            return Err(RuntimeError::BundleRemoved(session.bundle.reference()));
        }
        let prestarted = self
            .inner
            .options
            .prestart_sandboxes
            .then(|| self.inner.prestarted.claim(session))
            .flatten();
        let began = std::time::SystemTime::now();
        let handle = match prestarted {
            Some(started) => {
                match worker::attach(self.inner.clone(), session.clone(), started).await {
                    Ok(handle) => Ok(handle),
                    Err(e) => {
                        tracing::debug!(session = %session.id, "the spare worker failed ({e}); starting one");
                        worker::spawn(self.inner.clone(), session.clone()).await
                    }
                }
            }
            None => worker::spawn(self.inner.clone(), session.clone()).await,
        };
        if let Some(traces) = crate::telemetry::traces() {
            let error = handle.as_ref().err().map(ToString::to_string);
            traces.sandbox_started(&session.id, began, error);
        }
        let handle = handle?;
        session.meter_sandbox(&handle.remains.0);
        *slot = Some(handle.clone());
        if self.inner.options.prestart_sandboxes
            && handle.confinement != SandboxMode::DangerFullAccess
        {
            prestart::Prestarted::refill(&self.inner, &session.bundle);
        }
        Ok(handle)
    }

    /// Gives a new session a conversation before its first turn (a client's earlier messages): it follows the
    /// bundle's system prompt as ordinary history. Refused once the session has run a turn or has a worker, which
    /// would not see it.
    pub async fn seed_history(
        &self,
        id: &str,
        messages: Vec<service_ipc::ChatMessage>,
    ) -> Result<()> {
        let session = self.session(id).await?;
        let started = session.worker.lock().await.is_some();
        if started || session.record().turn_count > 0 {
            return Err(RuntimeError::InvalidRequest(format!(
                "session {id} has already run; earlier messages can only start a new session"
            )));
        }
        session.journal.log().append_history(&messages)
    }

    /// Runs an operator command in the session sandbox: `exec_command_*` events only, not stored as a turn.
    pub async fn run_session_command(&self, id: &str, command: &str) -> Result<CommandOutcome> {
        let session = self.session(id).await?;
        self.claim(&session).await?;
        let worker = self.worker(&session).await?;
        let exec_id = uuid::Uuid::new_v4().to_string();
        let done = session.register_command(&exec_id);
        worker
            .send(ToWorker::RunCommand {
                exec_id: exec_id.clone(),
                command: command.to_string(),
                cwd: None,
            })
            .await?;
        let exit_code = done.await.map_err(|_| {
            RuntimeError::WorkerDied("the worker exited while the command ran".into())
        })?;
        Ok(CommandOutcome { exec_id, exit_code })
    }
}
