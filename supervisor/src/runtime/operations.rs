//! What an operator needs of a running runtime beyond sessions and turns: its metrics, idle workers reaped,
//! installed bundles removed while sessions may use them, and session directories left without a record removed.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;

use super::error::{Result, RuntimeError};
use super::session::Session;
use super::ServiceRuntime;

/// Workers stopped at once by one round of `reap_idle`.
const REAP_AT_ONCE: usize = 16;

/// When `reap_idle` stops an idle session's worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IdleTimeouts {
    /// Any worker, and a spare no session took, idle this long (`serve --idle-timeout`); None keeps them.
    pub any: Option<Duration>,
    /// A worker whose sandbox holds nothing else, idle this long (`serve --empty-idle-timeout`); None leaves it to
    /// `any`.
    pub empty: Option<Duration>,
}

impl IdleTimeouts {
    /// How often to look for idle workers: a tenth of the shorter timeout, from 100 ms to a minute; None when
    /// neither is set.
    pub fn tick(&self) -> Option<Duration> {
        let shorter = match (self.any, self.empty) {
            (Some(a), Some(e)) => a.min(e),
            (a, e) => a.or(e)?,
        };
        Some((shorter / 10).clamp(Duration::from_millis(100), Duration::from_secs(60)))
    }
}

/// Why `reap_idle` stopped a worker.
#[derive(Clone, Copy)]
enum Reason {
    /// Idle for `IdleTimeouts::any`.
    IdleTimeout,
    /// Idle for `IdleTimeouts::empty`, its sandbox holding nothing else.
    EmptySandbox,
    /// Its caller is done with it (`stop_worker`).
    Done,
}

impl Reason {
    fn as_str(self) -> &'static str {
        match self {
            Reason::IdleTimeout => "idle_timeout",
            Reason::EmptySandbox => "empty_sandbox",
            Reason::Done => "done",
        }
    }
}

/// True while a turn or an operator command runs in `session`.
fn busy(session: &Session) -> bool {
    session.active_turn().is_some() || session.commands_running()
}

impl ServiceRuntime {
    /// The runtime's metrics as they stand, for code that only counts.
    pub fn counters(&self) -> &Arc<crate::metrics::Metrics> {
        &self.inner.metrics
    }

    /// The runtime's metrics, with the gauges of current state brought up to date.
    pub fn metrics(&self) -> Arc<crate::metrics::Metrics> {
        let m = &self.inner.metrics;
        let sessions = self.sessions().clone();
        m.sessions_live.set(sessions.len() as i64);
        let bytes: u64 = sessions.values().map(|s| s.journal.bytes()).sum();
        m.journal_bytes
            .set(i64::try_from(bytes).unwrap_or(i64::MAX));
        m.spare_workers.set(self.spare_workers() as i64);
        m.clone()
    }

    /// [`ServiceRuntime::metrics`], with the store's connections, errors and size and the home's free space read
    /// now: for a scrape.
    pub async fn metrics_now(&self) -> Arc<crate::metrics::Metrics> {
        let m = self.metrics();
        let gauge = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        if let Some(stats) = self.inner.store.stats() {
            for (state, n) in [
                ("open", stats.open),
                ("idle", stats.idle),
                ("waiting", stats.waiting),
            ] {
                m.store_connections
                    .get_or_create(&crate::metrics::ConnectionState { state })
                    .set(gauge(n));
            }
            m.store_errors.set(gauge(stats.errors));
        }
        if let Some(bytes) = self.inner.store.size_bytes().await {
            m.store_bytes.set(gauge(bytes));
        }
        self.quota_headroom(&m).await;
        if let Ok(fs) = nix::sys::statvfs::statvfs(self.inner.home.root()) {
            m.home_free_bytes.set(gauge(
                fs.blocks_available().saturating_mul(fs.fragment_size()),
            ));
        }
        m
    }

    /// Sets each tenant's quota headroom: its limits less its sessions, running turns and today's tokens. A store
    /// that does not answer leaves the last figures.
    async fn quota_headroom(&self, m: &crate::metrics::Metrics) {
        let Ok(quotas) = self.tenancy().directory().quotas().await else {
            return;
        };
        if quotas.is_empty() {
            return;
        }
        let Ok(sessions) = self.list_sessions().await else {
            return;
        };
        let set = |tenant: &str, quota, left: i64| {
            m.quota_headroom
                .get_or_create(&crate::metrics::HeadroomLabels {
                    tenant: tenant.to_string(),
                    quota,
                })
                .set(left);
        };
        let signed = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        for (tenant, quota) in &quotas {
            let mine = || sessions.iter().filter(|r| r.tenant() == tenant.as_str());
            if let Some(limit) = quota.sessions {
                set(tenant, "sessions", signed(limit) - mine().count() as i64);
            }
            if let Some(limit) = quota.concurrent_turns {
                let running = mine()
                    .filter(|r| {
                        r.parent.is_none() && r.status == super::record::SessionStatus::Running
                    })
                    .count();
                set(tenant, "concurrent_turns", signed(limit) - running as i64);
            }
            if let Some(limit) = quota.tokens_per_day {
                if let Ok(spent) = self.tenancy().tokens_today(tenant).await {
                    set(tenant, "tokens_per_day", signed(limit) - signed(spent));
                }
            }
        }
    }

    /// Removes an installed bundle. A live session of it (a worker running or a turn) makes this refuse, naming
    /// the sessions, unless `force`, which stops them first; their records stay, and cannot run again until the
    /// bundle is installed again. Returns what was removed.
    pub async fn remove_bundle(
        &self,
        reference: &str,
        force: bool,
    ) -> Result<crate::bundle::BundleInfo> {
        self.remove_bundle_with(reference, force, true).await
    }

    /// [`ServiceRuntime::remove_bundle`] on this node only: the shared store keeps its copy (a sync gives up
    /// what the cluster no longer has).
    pub(super) async fn remove_installed(
        &self,
        reference: &str,
        force: bool,
    ) -> Result<crate::bundle::BundleInfo> {
        self.remove_bundle_with(reference, force, false).await
    }

    async fn remove_bundle_with(
        &self,
        reference: &str,
        force: bool,
        unshare: bool,
    ) -> Result<crate::bundle::BundleInfo> {
        let bundle = crate::bundle::resolve(&self.inner.home, reference)?;
        let users: Vec<Arc<Session>> = self
            .sessions()
            .values()
            .filter(|s| s.bundle.root == bundle.root)
            .cloned()
            .collect();
        let mut live = Vec::new();
        for session in users {
            let working = session
                .worker
                .lock()
                .await
                .as_ref()
                .is_some_and(|w| w.is_alive());
            if working || session.active_turn().is_some() {
                live.push(session);
            }
        }
        // Sessions another process on a files store runs: this one cannot stop them.
        if !self.inner.store.shared() {
            let here: Vec<&str> = live.iter().map(|s| s.id.as_str()).collect();
            let elsewhere: Vec<String> = self
                .inner
                .store
                .list()
                .await?
                .into_iter()
                .filter(|r| {
                    r.bundle.reference == bundle.reference() && !here.contains(&r.id.as_str())
                })
                .filter(|r| {
                    super::store::files_lock::held_elsewhere(
                        &self.inner.home.sessions().join(&r.id),
                    )
                })
                .map(|r| r.id)
                .collect();
            if !elsewhere.is_empty() {
                return Err(RuntimeError::BundleLiveElsewhere {
                    reference: bundle.reference(),
                    sessions: elsewhere,
                });
            }
        }
        if !live.is_empty() && !force {
            return Err(RuntimeError::BundleInUse {
                reference: bundle.reference(),
                sessions: live.iter().map(|s| s.id.clone()).collect(),
            });
        }
        // The cluster's copy goes first: a node that still has it would give this one its bundle back.
        if unshare
            && matches!(&bundle.origin, crate::bundle::Origin::Installed { namespace } if namespace == crate::bundle::store::LOCAL_NAMESPACE)
        {
            self.inner
                .store
                .unshare_bundle(&bundle.manifest.id, &bundle.manifest.version)
                .await?;
        }
        for session in &live {
            self.stop_session(session, "its bundle was removed").await;
        }
        crate::bundle::store::remove(&self.inner.home, &bundle)?;
        tracing::info!(bundle = %bundle.reference(), stopped = live.len(), "bundle removed");
        Ok(bundle.info())
    }

    /// Stops the workers of sessions that have been idle (no turn, no command, no event) for `timeouts.any`, or
    /// for `timeouts.empty` when their sandbox holds nothing besides the worker (see `sandbox::occupancy`), and the
    /// spare workers that waited `timeouts.any`; returns how many stopped. A reaped session keeps everything but its
    /// worker: its next turn or command starts one again, and the history is on disk.
    pub async fn reap_idle(&self, timeouts: IdleTimeouts) -> usize {
        let mut due: Vec<(Arc<Session>, Duration, Reason)> = Vec::new();
        let mut to_look_into = Vec::new();
        let sessions: Vec<Arc<Session>> = self.sessions().values().cloned().collect();
        for session in &sessions {
            if busy(session) {
                continue;
            }
            let idle = session.idle_for();
            let past = |limit: Option<Duration>| limit.filter(|l| idle >= *l);
            if let Some(limit) = past(timeouts.any) {
                due.push((session.clone(), limit, Reason::IdleTimeout));
            } else if past(timeouts.empty).is_some() {
                // Without waiting: a turn or command that is starting holds the lock.
                let worker = session.worker.try_lock().ok().and_then(|w| w.clone());
                if let Some(worker) = worker {
                    to_look_into.push((session.clone(), worker));
                }
            }
        }
        if let (false, Some(limit)) = (to_look_into.is_empty(), timeouts.empty) {
            let empty = tokio::task::spawn_blocking(move || {
                to_look_into
                    .into_iter()
                    .filter(|(_, worker)| worker.holds_nothing_else())
                    .map(|(session, _)| session)
                    .collect::<Vec<_>>()
            })
            .await
            .unwrap_or_default();
            due.extend(empty.into_iter().map(|s| (s, limit, Reason::EmptySandbox)));
        }
        // Side by side: a worker takes a few milliseconds to stop, and a thousand became idle together.
        let reaped = futures::stream::iter(due)
            .map(|(session, limit, why)| self.reap(session, limit, why))
            .buffer_unordered(REAP_AT_ONCE)
            .filter(|stopped| std::future::ready(*stopped))
            .count()
            .await;
        let spares = match timeouts.any {
            Some(limit) => self.inner.prestarted.expire(limit).await,
            None => 0,
        };
        reaped + spares
    }

    /// Stops session `id`'s worker now, unless a turn or command runs in it: for a caller done with the session
    /// (a batch item), which frees its sandbox at once instead of after the idle time-out. True when one stopped.
    pub async fn stop_worker(&self, id: &str) -> Result<bool> {
        let session = self.session(id).await?;
        Ok(self.reap(session, Duration::ZERO, Reason::Done).await)
    }

    /// Stops `session`'s worker if the session is still idle for `limit` or longer, with nothing running.
    async fn reap(&self, session: Arc<Session>, limit: Duration, why: Reason) -> bool {
        // A turn or command starting now holds the lock; one that started before it is seen as busy below.
        let Ok(mut slot) = session.worker.try_lock() else {
            return false;
        };
        if busy(&session) || session.idle_for() < limit {
            return false;
        }
        let Some(worker) = slot.take() else {
            return false;
        };
        drop(slot);
        tracing::info!(
            session = %session.id,
            idle_s = session.idle_for().as_secs(),
            why = why.as_str(),
            "idle worker reaped"
        );
        self.inner.metrics.workers_reaped.inc();
        worker.shutdown(Duration::from_secs(2)).await;
        self.inner.store.release(&session.id).await;
        true
    }

    /// The directories under `sessions/` that hold no session record and have not changed for `older_than` (or
    /// for [`UNRECORDED_MIN_AGE`], whichever is longer). A `run` or a create killed between making its directory
    /// and writing its record leaves one, as does a deletion cut short; nothing else reads them. A directory whose
    /// record cannot be read is not among them: that is a damaged session, not a leftover.
    pub async fn unrecorded_session_dirs(
        &self,
        older_than: Duration,
    ) -> Result<Vec<UnrecordedDir>> {
        if !self.inner.store.shared() {
            // The records of this home's sessions are in a cluster's database, not here: every directory would
            // look like a leftover.
            if let Ok(cluster) = std::fs::read_to_string(self.inner.home.cluster_file()) {
                return Err(RuntimeError::ClusterHome {
                    store: cluster.trim().to_string(),
                });
            }
        }
        let root = self.inner.home.sessions();
        let entries = match std::fs::read_dir(&root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RuntimeError::io("cannot read", &root, e)),
        };
        let cutoff = SystemTime::now()
            .checked_sub(older_than.max(UNRECORDED_MIN_AGE))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let mut old = Vec::new();
        for entry in entries.flatten() {
            let Some(id) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            // Only names the runtime gives; `DirEntry::metadata` does not follow a link.
            let Ok(meta) = entry.metadata() else { continue };
            if uuid::Uuid::parse_str(&id).is_err() || !meta.is_dir() {
                continue;
            }
            if let Some(modified) = meta.modified().ok().filter(|m| *m <= cutoff) {
                old.push((id, entry.path(), modified));
            }
        }
        if old.is_empty() {
            return Ok(Vec::new());
        }
        // One listing for the common case; a lookup each for the rest tells a missing record from a damaged one.
        let recorded: HashSet<String> = self
            .inner
            .store
            .list()
            .await?
            .into_iter()
            .map(|r| r.id)
            .collect();
        let mut out = Vec::new();
        for (id, path, modified) in old {
            if recorded.contains(&id) || self.sessions().contains_key(&id) {
                continue;
            }
            if let Ok(None) = self.inner.store.load(&id).await {
                out.push(UnrecordedDir { id, path, modified });
            }
        }
        out.sort_by_key(|d| d.modified);
        Ok(out)
    }

    /// Deletes a directory that [`Self::unrecorded_session_dirs`] found, unless a record for it appeared since.
    pub async fn remove_unrecorded(&self, dir: &UnrecordedDir) -> Result<()> {
        if !matches!(self.inner.store.load(&dir.id).await, Ok(None))
            || self.sessions().contains_key(&dir.id)
        {
            return Ok(());
        }
        match std::fs::remove_dir_all(&dir.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(RuntimeError::io("cannot delete", &dir.path, e))
            }
            _ => Ok(()),
        }
    }
}

/// Age under which a directory without a record is never taken for a leftover: a create writes its record
/// milliseconds after making its directory, so a younger one may be a create under way in another process.
pub const UNRECORDED_MIN_AGE: Duration = Duration::from_secs(600);

/// A session directory with no record (see [`ServiceRuntime::unrecorded_session_dirs`]).
#[derive(Debug, Clone)]
pub struct UnrecordedDir {
    /// Its name, a session id that has no record.
    pub id: String,
    /// The directory.
    pub path: PathBuf,
    /// When its contents last changed.
    pub modified: SystemTime,
}
