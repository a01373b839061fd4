//! Retention: sessions whose last change is older than the operator's limit (`serve --retention`, and per tenant
//! `--retention-for`) are deleted with their journals, histories and directories. Over a shared store one node at a
//! time runs the job, under a lease in the database; a session homed on, or held by, another live node is left to
//! that node, which deletes it itself. Every node of a shared store also gives up what it holds of sessions deleted elsewhere
//! (through another node, by retention, or by `sessions prune --store`): the sessions it holds in memory within
//! seconds ([`ServiceRuntime::drop_deleted_elsewhere`]), other directories once
//! [`super::operations::UNRECORDED_MIN_AGE`] old.

use std::collections::BTreeMap;
use std::time::Duration;

use super::record::SessionRecord;
use super::ServiceRuntime;

/// How long sessions are kept.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Retention {
    /// For every tenant without a limit of its own; None keeps them.
    pub default: Option<Duration>,
    /// Per tenant (`default` is the tenant of the server's own token).
    pub tenants: BTreeMap<String, Duration>,
}

impl Retention {
    /// Whether any session can expire.
    pub fn is_on(&self) -> bool {
        self.default.is_some() || !self.tenants.is_empty()
    }

    /// The limit for sessions of `tenant`.
    pub fn of(&self, tenant: Option<&str>) -> Option<Duration> {
        self.tenants
            .get(tenant.unwrap_or(crate::tenancy::DEFAULT_TENANT))
            .copied()
            .or(self.default)
    }

    /// How often the job runs: a tenth of the shortest limit, between 1 s and a minute.
    pub fn tick(&self) -> Duration {
        self.default
            .into_iter()
            .chain(self.tenants.values().copied())
            .min()
            .map_or(Duration::from_secs(60), |d| d / 10)
            .clamp(Duration::from_secs(1), Duration::from_secs(60))
    }
}

/// What one pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pass {
    /// Sessions deleted as expired.
    pub expired: usize,
    /// Directories with no record given up (a shared store's).
    pub swept: usize,
}

/// The name of the retention job's lease.
const JOB: &str = "retention";

impl ServiceRuntime {
    /// One retention pass: deletes the expired sessions this node may delete, then, over a shared store, the
    /// directories of sessions with no record that are old enough not to be a create under way.
    pub async fn retain(&self, policy: &Retention, lease: Duration) -> Pass {
        let mut pass = Pass::default();
        if policy.is_on() {
            pass.expired = self.delete_expired(policy, lease).await;
        }
        if self.inner.store.shared() {
            if let Ok(dirs) = self.unrecorded_session_dirs(Duration::ZERO).await {
                for dir in dirs {
                    if self.remove_unrecorded(&dir).await.is_ok() {
                        pass.swept += 1;
                    }
                }
            }
        }
        pass
    }

    /// Deletes the expired sessions this node may delete: those homed here or whose lease it holds, and, while it
    /// holds the job, the others (those another live node holds refuse, and wait for it). Returns how many.
    async fn delete_expired(&self, policy: &Retention, lease: Duration) -> usize {
        let records = match self.inner.store.list().await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "retention: cannot list the sessions");
                return 0;
            }
        };
        let job = self.inner.store.hold_job(JOB, lease).await.unwrap_or(false);
        let me = self.inner.store.node_id();
        let now = chrono::Utc::now();
        let mut deleted = 0;
        for r in records.iter().filter(|r| expired(r, policy, now)) {
            // Its home, or the node holding its lease, deletes it; the node holding the job takes the rest.
            let held = self.sessions().get(&r.id).cloned();
            let held_here = match held {
                Some(s) => s.runs_here().await,
                None => false,
            };
            let mine = held_here || (r.home.is_some() && r.home == me);
            if !(job || mine) {
                continue;
            }
            match self.delete_session(&r.id).await {
                Ok(()) => {
                    deleted += 1;
                    tracing::info!(session = %r.id, last_change = %r.updated_at, "session deleted: past its retention");
                }
                Err(e) => {
                    tracing::debug!(session = %r.id, error = %e, "retention: not deleted this time")
                }
            }
        }
        deleted
    }

    /// Gives up the sessions this node holds in memory whose record another node deleted: their workers, and their
    /// directories here. They were loaded from a record, so none is a create under way. Returns how many.
    pub async fn drop_deleted_elsewhere(&self) -> usize {
        let held: Vec<String> = self.sessions().keys().cloned().collect();
        if held.is_empty() || !self.inner.store.shared() {
            return 0;
        }
        let Ok(recorded) = self.inner.store.recorded(&held).await else {
            return 0;
        };
        let mut dropped = 0;
        for id in held.iter().filter(|id| !recorded.contains(*id)) {
            // A session made here since the query has its record by now.
            if !matches!(self.inner.store.load(id).await, Ok(None)) {
                continue;
            }
            let Some(session) = self.sessions().get(id).cloned() else {
                continue;
            };
            self.stop_session(&session, "the session was deleted").await;
            self.sessions().remove(id);
            let _ = std::fs::remove_dir_all(&session.dir);
            dropped += 1;
            tracing::info!(session = %id, "session dropped: another node deleted it");
        }
        dropped
    }
}

/// Whether `r` is past its tenant's retention at `now` (a running session never is).
fn expired(r: &SessionRecord, policy: &Retention, now: chrono::DateTime<chrono::Utc>) -> bool {
    let Some(limit) = policy.of(r.tenant.as_deref()) else {
        return false;
    };
    let Ok(changed) = chrono::DateTime::parse_from_rfc3339(&r.updated_at) else {
        return false;
    };
    r.active_turn.is_none()
        && chrono::Duration::from_std(limit).is_ok_and(|limit| now - changed.to_utc() > limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_limit_wins_over_the_default_and_the_tick_follows_the_shortest() {
        let policy = Retention {
            default: Some(Duration::from_secs(30 * 86_400)),
            tenants: [("acme".to_string(), Duration::from_secs(20))].into(),
        };
        assert_eq!(policy.of(Some("acme")), Some(Duration::from_secs(20)));
        assert_eq!(policy.of(None), Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(policy.tick(), Duration::from_secs(2));
        assert!(!Retention::default().is_on());
    }
}
