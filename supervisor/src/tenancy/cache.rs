//! [`Tenancy`]: the tenant directory with caches in front, and this process's side of the usage ledger.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use service_ipc::Usage;

use super::{
    today, token, Caller, Directory, Grants, Quota, Result, Spent, SpentDay, TokenRecord,
    FLUSH_AFTER, QUOTA_TTL, TOKEN_TTL, TOUCH_EVERY,
};

/// This process's side of the usage ledger. What it counted is always in exactly one of `sums` (not yet taken for
/// a write), `in_flight` (being written) or the store; `stored` caches the store's figures for the day, valid while
/// `generation` is unchanged (each finished write bumps it).
#[derive(Default)]
struct Ledger {
    sums: Mutex<HashMap<(String, String), Spent>>,
    in_flight: Mutex<HashMap<(String, String), Spent>>,
    writing: tokio::sync::Mutex<()>,
    generation: std::sync::atomic::AtomicU64,
    stored: Mutex<Option<Cached<StoredDay>>>,
}

/// The store's figures for one day: (day, the ledger's generation when read, spending by tenant).
type StoredDay = (String, u64, HashMap<String, Spent>);

struct Cached<T> {
    at: Instant,
    value: T,
}

/// The directory with caches in front: what the server and the runtime use.
pub struct Tenancy {
    dir: Arc<dyn Directory>,
    tokens: Mutex<HashMap<String, Cached<Option<TokenRecord>>>>,
    touched: Mutex<HashMap<String, Instant>>,
    quotas: Mutex<Option<Cached<BTreeMap<String, Quota>>>>,
    grants: Mutex<Option<Cached<Grants>>>,
    /// Counted spending and the store's figures.
    ledger: Arc<Ledger>,
    flush_scheduled: Arc<std::sync::atomic::AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tenancy {
    /// Caches in front of `dir`.
    pub fn new(dir: Arc<dyn Directory>) -> Arc<Tenancy> {
        Arc::new(Tenancy {
            dir,
            tokens: Mutex::default(),
            touched: Mutex::default(),
            quotas: Mutex::default(),
            grants: Mutex::default(),
            ledger: Arc::default(),
            flush_scheduled: Arc::default(),
        })
    }

    /// The directory itself.
    pub fn directory(&self) -> &Arc<dyn Directory> {
        &self.dir
    }

    /// The caller a tenant token speaks for; None for a token that is unknown, revoked, expired or not a tenant
    /// token at all.
    pub async fn verify(&self, token: &str) -> Option<Caller> {
        let id = token::id_of(token)?;
        let cached = lock(&self.tokens)
            .get(id)
            .filter(|c| c.at.elapsed() < TOKEN_TTL)
            .map(|c| c.value.clone());
        let record = match cached {
            Some(r) => r,
            None => {
                let read = match self.dir.token(id).await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::warn!(token_id = id, "a token could not be checked: {e}");
                        return None;
                    }
                };
                lock(&self.tokens).insert(
                    id.to_string(),
                    Cached {
                        at: Instant::now(),
                        value: read.clone(),
                    },
                );
                read
            }
        }?;
        if !token::matches(token, &record.sha256) || record.expired(chrono::Utc::now()) {
            return None;
        }
        self.touch(&record.token.id);
        Some(Caller {
            tenant: record.token.tenant,
            admin: record.token.admin,
        })
    }

    /// Writes `last_used_at` in the background, at most once a minute per token.
    fn touch(&self, id: &str) {
        {
            let mut touched = lock(&self.touched);
            if touched.get(id).is_some_and(|t| t.elapsed() < TOUCH_EVERY) {
                return;
            }
            touched.insert(id.to_string(), Instant::now());
        }
        let (dir, id) = (self.dir.clone(), id.to_string());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(e) = dir.touch(&id, &crate::runtime::record::now()).await {
                    tracing::debug!(token_id = %id, "last use not recorded: {e}");
                }
            });
        }
    }

    /// A tenant's quota, read at most [`QUOTA_TTL`] ago; None: unlimited.
    pub async fn quota(&self, tenant: &str) -> Result<Option<Quota>> {
        {
            let cached = lock(&self.quotas);
            if let Some(c) = cached.as_ref().filter(|c| c.at.elapsed() < QUOTA_TTL) {
                return Ok(c.value.get(tenant).copied());
            }
        }
        let all = self.dir.quotas().await?;
        let found = all.get(tenant).copied();
        *lock(&self.quotas) = Some(Cached {
            at: Instant::now(),
            value: all,
        });
        Ok(found)
    }

    /// Whether `tenant` was granted the bundle `name` (`namespace/id`), as the store said at most [`QUOTA_TTL`] ago.
    pub async fn granted(&self, tenant: &str, name: &str) -> Result<bool> {
        let has = |all: &Grants| all.get(tenant).is_some_and(|g| g.iter().any(|b| b == name));
        {
            let cached = lock(&self.grants);
            if let Some(c) = cached.as_ref().filter(|c| c.at.elapsed() < QUOTA_TTL) {
                return Ok(has(&c.value));
            }
        }
        let all = self.dir.grants().await?;
        let found = has(&all);
        *lock(&self.grants) = Some(Cached {
            at: Instant::now(),
            value: all,
        });
        Ok(found)
    }

    /// Grants `tenant` the bundle `name` now (what it pulls or imports is its own).
    pub async fn grant_now(&self, tenant: &str, name: &str) -> Result<()> {
        self.dir.grant(tenant, name).await?;
        *lock(&self.grants) = None;
        Ok(())
    }

    /// Takes a grant back now; false when there was none.
    pub async fn ungrant_now(&self, tenant: &str, name: &str) -> Result<bool> {
        let had = self.dir.ungrant(tenant, name).await?;
        *lock(&self.grants) = None;
        Ok(had)
    }

    /// Tokens `tenant` spent today: what the store has (read at most [`QUOTA_TTL`] ago, and since this process's
    /// last write) and what this process counted and has not written yet.
    pub async fn tokens_today(&self, tenant: &str) -> Result<u64> {
        use std::sync::atomic::Ordering;
        let ledger = &self.ledger;
        let day = today();
        let generation = ledger.generation.load(Ordering::Acquire);
        let cached = lock(&ledger.stored)
            .as_ref()
            .filter(|c| c.at.elapsed() < QUOTA_TTL && c.value.0 == day && c.value.1 == generation)
            .map(|c| c.value.2.get(tenant).map_or(0, Spent::tokens));
        let stored = match cached {
            Some(s) => s,
            None => {
                let by_tenant: HashMap<String, Spent> = self
                    .dir
                    .spent_since(&day)
                    .await?
                    .into_iter()
                    .filter(|r| r.day == day)
                    .map(|r| (r.tenant, r.spent))
                    .collect();
                let mine = by_tenant.get(tenant).map_or(0, Spent::tokens);
                *lock(&ledger.stored) = Some(Cached {
                    at: Instant::now(),
                    value: (day.clone(), generation, by_tenant),
                });
                mine
            }
        };
        let key = (tenant.to_string(), day);
        let unwritten = [&ledger.sums, &ledger.in_flight]
            .iter()
            .map(|m| lock(m).get(&key).map_or(0, Spent::tokens))
            .sum::<u64>();
        Ok(stored + unwritten)
    }

    /// Counts one model call of a session of `tenant`; it is written to the ledger shortly after.
    pub fn count(&self, tenant: &str, call: &Usage) {
        lock(&self.ledger.sums)
            .entry((tenant.to_string(), today()))
            .or_default()
            .count(call);
        if self
            .flush_scheduled
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            return;
        }
        let (dir, ledger, scheduled) = (
            self.dir.clone(),
            self.ledger.clone(),
            self.flush_scheduled.clone(),
        );
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                tokio::time::sleep(FLUSH_AFTER).await;
                scheduled.store(false, std::sync::atomic::Ordering::Release);
                write_pending(&*dir, &ledger).await;
            });
        } else {
            self.flush_scheduled
                .store(false, std::sync::atomic::Ordering::Release);
        }
    }

    /// Writes whatever is counted and not yet written (at shutdown).
    pub async fn flush(&self) {
        write_pending(&*self.dir, &self.ledger).await;
    }
}

/// Writes the pending sums; on failure they go back to be written with the next ones. One write at a time, so a
/// reader that flushes first finds every earlier count stored.
async fn write_pending(dir: &dyn Directory, ledger: &Ledger) {
    let _writing = ledger.writing.lock().await;
    let taken: Vec<SpentDay> = {
        let mut sums = lock(&ledger.sums);
        let mut in_flight = lock(&ledger.in_flight);
        in_flight.extend(sums.drain());
        in_flight
            .iter()
            .map(|((tenant, day), spent)| SpentDay {
                tenant: tenant.clone(),
                day: day.clone(),
                spent: *spent,
            })
            .collect()
    };
    if taken.is_empty() {
        return;
    }
    match dir.add_spent(&taken).await {
        Ok(()) => {
            // Stored now: every cached figure is stale, and the sums are counted there, not here. In this order a
            // reader between the two counts them twice, never not at all.
            ledger
                .generation
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            lock(&ledger.in_flight).clear();
        }
        Err(e) => {
            // Kept in flight: the next write takes them again.
            tracing::warn!("tenant usage not written yet, kept for the next write: {e}");
        }
    }
}
