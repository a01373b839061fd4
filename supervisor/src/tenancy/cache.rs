//! [`Tenancy`]: the tenant directory with caches in front, and this process's side of the usage ledger.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use service_ipc::Usage;

use super::usage::LedgerKey;
use super::{
    today, token, Caller, Directory, Grants, Quota, Result, Spent, TokenRecord, UsageRow,
    FLUSH_AFTER, QUOTA_TTL, TOKEN_TTL, TOUCH_EVERY,
};

/// This process's side of the usage ledger. What it counted is always in exactly one of `sums` (not yet taken for
/// a write), `in_flight` (being written) or the store; `stored` caches the store's figures for the day, valid while
/// `generation` is unchanged (each finished write bumps it).
#[derive(Default)]
struct Ledger {
    sums: Mutex<HashMap<LedgerKey, Spent>>,
    in_flight: Mutex<HashMap<LedgerKey, Spent>>,
    writing: tokio::sync::Mutex<()>,
    generation: std::sync::atomic::AtomicU64,
    stored: Mutex<Option<Cached<StoredDay>>>,
}

/// The store's figures for one day: (day, the ledger's generation when read, tokens by tenant).
type StoredDay = (String, u64, HashMap<String, u64>);

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
    /// token at all; an error when the directory could not be read, so the token is neither good nor bad yet.
    pub async fn verify(&self, token: &str) -> super::Result<Option<Caller>> {
        let Some(id) = token::id_of(token) else {
            return Ok(None);
        };
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
                        return Err(e);
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
        };
        let Some(record) = record else {
            return Ok(None);
        };
        if !token::matches(token, &record.sha256) || record.expired(chrono::Utc::now()) {
            return Ok(None);
        }
        self.touch(&record.token.id);
        Ok(Some(Caller::of(
            &record.token.tenant,
            super::Role::of(record.token.role, record.token.admin),
        )))
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

    /// Makes `tenant` the owner of the bundle `name` unless another tenant owns it: the owner it has now.
    pub async fn claim_name(&self, name: &str, tenant: &str) -> Result<String> {
        self.dir.claim_name(name, tenant).await
    }

    /// The tenant that owns the bundle `name`, if one does.
    pub async fn name_owner(&self, name: &str) -> Result<Option<String>> {
        self.dir.name_owner(name).await
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
            .map(|c| c.value.2.get(tenant).copied().unwrap_or(0));
        let stored = match cached {
            Some(s) => s,
            None => {
                let mut by_tenant: HashMap<String, u64> = HashMap::new();
                for row in self.dir.usage_between(&day, Some(&day)).await? {
                    *by_tenant.entry(row.key.tenant).or_default() += row.spent.tokens();
                }
                let mine = by_tenant.get(tenant).copied().unwrap_or(0);
                *lock(&ledger.stored) = Some(Cached {
                    at: Instant::now(),
                    value: (day.clone(), generation, by_tenant),
                });
                mine
            }
        };
        let unwritten = [&ledger.sums, &ledger.in_flight]
            .iter()
            .map(|m| {
                lock(m)
                    .iter()
                    .filter(|(k, _)| k.tenant == tenant && k.day == day)
                    .map(|(_, s)| s.tokens())
                    .sum::<u64>()
            })
            .sum::<u64>();
        Ok(stored + unwritten)
    }

    /// Counts one model call of `model` in a session of `tenant` and `bundle`; it is written to the ledger shortly
    /// after.
    pub fn count(&self, tenant: &str, model: &str, bundle: &str, call: &Usage) {
        self.add(tenant, model, bundle, |s| s.count(call));
    }

    /// Counts an ended turn's tool calls and times (see [`Tenancy::count`]).
    pub fn count_turn(
        &self,
        tenant: &str,
        model: &str,
        bundle: &str,
        turn: &service_ipc::TurnActivity,
    ) {
        self.add(tenant, model, bundle, |s| s.count_turn(turn));
    }

    fn add(&self, tenant: &str, model: &str, bundle: &str, f: impl FnOnce(&mut Spent)) {
        let key = LedgerKey {
            tenant: tenant.to_string(),
            day: today(),
            model: model.to_string(),
            bundle: bundle.to_string(),
        };
        f(lock(&self.ledger.sums).entry(key).or_default());
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
    let taken: Vec<UsageRow> = {
        let mut sums = lock(&ledger.sums);
        let mut in_flight = lock(&ledger.in_flight);
        for (key, spent) in sums.drain() {
            in_flight.entry(key).or_default().add(&spent);
        }
        in_flight
            .iter()
            .map(|(key, spent)| UsageRow {
                key: key.clone(),
                spent: *spent,
            })
            .collect()
    };
    if taken.is_empty() {
        return;
    }
    match dir.add_usage(&taken).await {
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
