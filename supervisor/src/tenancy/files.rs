//! The tenant directory of a files store: one JSON document, `$SERVICE_HOME/tenants.json` (mode 0600).
//!
//! Every change is a read, a change and an atomic replace under an exclusive `flock` of `tenants.lock`, so a local
//! `tokens create` beside a running `serve` loses nothing. Readers take no lock: the file is always whole.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use super::{Directory, Grants, Quota, Result, Spent, SpentDay, TenancyError, TokenRecord};
use crate::home::ServiceHome;

/// The document.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Document {
    #[serde(default)]
    tokens: Vec<TokenRecord>,
    #[serde(default)]
    quotas: BTreeMap<String, Quota>,
    /// Bundles (`namespace/id`) granted, by tenant.
    #[serde(default)]
    grants: BTreeMap<String, std::collections::BTreeSet<String>>,
    /// By tenant, then by day.
    #[serde(default)]
    spent: BTreeMap<String, BTreeMap<String, Spent>>,
}

/// `tenants.json` of one store.
pub struct FilesDirectory {
    path: PathBuf,
    lock: PathBuf,
}

impl FilesDirectory {
    /// The directory of the store at `home`.
    pub fn new(home: &ServiceHome) -> FilesDirectory {
        FilesDirectory {
            path: home.root().join("tenants.json"),
            lock: home.root().join("tenants.lock"),
        }
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> TenancyError {
        TenancyError::Store(format!("cannot {what} {}: {e}", self.path.display()))
    }

    fn read(&self) -> Result<Document> {
        match std::fs::read(&self.path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                self.error(
                    "read",
                    format!("{e}; fix or remove the file (it holds tokens and quotas)"),
                )
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Document::default()),
            Err(e) => Err(self.error("read", e)),
        }
    }

    /// Applies `change` under the lock and replaces the file; returns what `change` returned.
    fn change<T>(&self, change: impl FnOnce(&mut Document) -> T) -> Result<T> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&self.lock)
            .map_err(|e| self.error("lock", e))?;
        let _held =
            Flock::lock(file, FlockArg::LockExclusive).map_err(|(_, e)| self.error("lock", e))?;
        let mut doc = self.read()?;
        let out = change(&mut doc);
        let bytes = serde_json::to_vec_pretty(&doc).map_err(|e| self.error("write", e))?;
        let tmp = self.path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&tmp);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| self.error("write", e))?;
        f.write_all(&bytes).map_err(|e| self.error("write", e))?;
        f.sync_all().map_err(|e| self.error("write", e))?;
        std::fs::rename(&tmp, &self.path).map_err(|e| self.error("write", e))?;
        Ok(out)
    }
}

#[async_trait::async_trait]
impl Directory for FilesDirectory {
    async fn add_token(&self, record: &TokenRecord) -> Result<()> {
        self.change(|d| d.tokens.push(record.clone()))
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>> {
        Ok(self.read()?.tokens)
    }

    async fn token(&self, id: &str) -> Result<Option<TokenRecord>> {
        Ok(self.read()?.tokens.into_iter().find(|t| t.token.id == id))
    }

    async fn revoke(&self, id: &str) -> Result<bool> {
        self.change(|d| {
            let before = d.tokens.len();
            d.tokens.retain(|t| t.token.id != id);
            d.tokens.len() != before
        })
    }

    async fn touch(&self, id: &str, when: &str) -> Result<()> {
        self.change(|d| {
            if let Some(t) = d.tokens.iter_mut().find(|t| t.token.id == id) {
                t.token.last_used_at = Some(when.to_string());
            }
        })
    }

    async fn set_quota(&self, tenant: &str, quota: &Quota) -> Result<()> {
        self.change(|d| {
            if *quota == Quota::default() {
                d.quotas.remove(tenant);
            } else {
                d.quotas.insert(tenant.to_string(), *quota);
            }
        })
    }

    async fn quotas(&self) -> Result<BTreeMap<String, Quota>> {
        Ok(self.read()?.quotas)
    }

    async fn grant(&self, tenant: &str, name: &str) -> Result<bool> {
        self.change(|d| {
            d.grants
                .entry(tenant.to_string())
                .or_default()
                .insert(name.to_string())
        })
    }

    async fn ungrant(&self, tenant: &str, name: &str) -> Result<bool> {
        self.change(|d| {
            let removed = d.grants.get_mut(tenant).is_some_and(|g| g.remove(name));
            d.grants.retain(|_, g| !g.is_empty());
            removed
        })
    }

    async fn grants(&self) -> Result<Grants> {
        Ok(self
            .read()?
            .grants
            .into_iter()
            .map(|(t, g)| (t, g.into_iter().collect()))
            .collect())
    }

    async fn add_spent(&self, rows: &[SpentDay]) -> Result<()> {
        self.change(|d| {
            for row in rows {
                d.spent
                    .entry(row.tenant.clone())
                    .or_default()
                    .entry(row.day.clone())
                    .or_default()
                    .add(&row.spent);
            }
        })
    }

    async fn spent_since(&self, since: &str) -> Result<Vec<SpentDay>> {
        Ok(self
            .read()?
            .spent
            .into_iter()
            .flat_map(|(tenant, days)| {
                days.into_iter()
                    .filter(|(day, _)| day.as_str() >= since)
                    .map(move |(day, spent)| SpentDay {
                        tenant: tenant.clone(),
                        day,
                        spent,
                    })
            })
            .collect())
    }
}
