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

use super::audit::AuditEntry;
use super::usage::LedgerKey;
use super::{Directory, Grants, Quota, Result, Spent, TenancyError, TokenRecord, UsageRow};
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
    /// The tenant that installed each bundle name first (`serve --tenant-bundles`).
    #[serde(default)]
    owners: BTreeMap<String, String>,
    /// The usage ledger, a row per tenant, day, model and bundle.
    #[serde(default)]
    usage: Vec<UsageRow>,
    /// The ledger as kept before its rows had a model and a bundle (by tenant, then day): read into `usage` with
    /// both empty, and written there.
    #[serde(default, skip_serializing)]
    spent: BTreeMap<String, BTreeMap<String, Spent>>,
}

/// `tenants.json` of one store.
pub struct FilesDirectory {
    path: PathBuf,
    lock: PathBuf,
    /// The audit log, a JSON line per entry, only appended to.
    audit: PathBuf,
}

impl FilesDirectory {
    /// The directory of the store at `home`.
    pub fn new(home: &ServiceHome) -> FilesDirectory {
        FilesDirectory {
            path: home.root().join("tenants.json"),
            lock: home.root().join("tenants.lock"),
            audit: home.root().join("audit.jsonl"),
        }
    }

    fn error(&self, what: &str, e: impl std::fmt::Display) -> TenancyError {
        TenancyError::Store(format!("cannot {what} {}: {e}", self.path.display()))
    }

    fn read(&self) -> Result<Document> {
        let mut doc = self.read_as_stored()?;
        for (tenant, days) in std::mem::take(&mut doc.spent) {
            for (day, spent) in days {
                doc.usage.push(UsageRow {
                    key: LedgerKey {
                        tenant: tenant.clone(),
                        day,
                        model: String::new(),
                        bundle: String::new(),
                    },
                    spent,
                });
            }
        }
        Ok(doc)
    }

    fn read_as_stored(&self) -> Result<Document> {
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
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        self.change(|d| {
            let Some(t) = d
                .tokens
                .iter_mut()
                .find(|t| t.token.id == id && t.token.revoked_at.is_none())
            else {
                return false;
            };
            t.token.revoked_at = Some(now);
            t.sha256 = super::REVOKED_DIGEST.into();
            true
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

    async fn claim_name(&self, name: &str, tenant: &str) -> Result<String> {
        self.change(|d| {
            d.owners
                .entry(name.to_string())
                .or_insert_with(|| tenant.to_string())
                .clone()
        })
    }

    async fn name_owner(&self, name: &str) -> Result<Option<String>> {
        Ok(self.read()?.owners.get(name).cloned())
    }

    async fn add_usage(&self, rows: &[UsageRow]) -> Result<()> {
        self.change(|d| {
            let mut at: std::collections::HashMap<LedgerKey, usize> = d
                .usage
                .iter()
                .enumerate()
                .map(|(i, r)| (r.key.clone(), i))
                .collect();
            for row in rows {
                match at.get(&row.key) {
                    Some(&i) => d.usage[i].spent.add(&row.spent),
                    None => {
                        at.insert(row.key.clone(), d.usage.len());
                        d.usage.push(row.clone());
                    }
                }
            }
        })
    }

    async fn append_audit(&self, entry: &AuditEntry) -> Result<()> {
        let mut line = serde_json::to_vec(entry).map_err(|e| self.error("write", e))?;
        line.push(b'\n');
        // One write of the whole line in append mode: concurrent writers' lines never interleave.
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.audit)
            .and_then(|mut f| f.write_all(&line))
            .map_err(|e| {
                TenancyError::Store(format!("cannot append to {}: {e}", self.audit.display()))
            })
    }

    async fn audit_tail(&self, limit: usize) -> Result<Vec<AuditEntry>> {
        let text = match std::fs::read_to_string(&self.audit) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => {
                return Err(TenancyError::Store(format!(
                    "cannot read {}: {e}",
                    self.audit.display()
                )))
            }
        };
        let entries: Vec<AuditEntry> = text
            .lines()
            .enumerate()
            .filter_map(|(i, l)| {
                let mut e: AuditEntry = serde_json::from_str(l).ok()?;
                e.seq = i as u64 + 1;
                Some(e)
            })
            .collect();
        let skip = entries.len().saturating_sub(limit);
        Ok(entries.into_iter().skip(skip).collect())
    }

    async fn usage_between(&self, since: &str, until: Option<&str>) -> Result<Vec<UsageRow>> {
        let mut rows: Vec<UsageRow> = self
            .read()?
            .usage
            .into_iter()
            .filter(|r| {
                r.key.day.as_str() >= since && until.is_none_or(|u| r.key.day.as_str() <= u)
            })
            .collect();
        rows.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_ledger_kept_by_tenant_and_day_is_read_and_added_to_as_rows() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tenants.json"),
            r#"{"spent": {"acme": {"2026-11-01": {"input_tokens": 5, "output_tokens": 2, "model_calls": 1}}}}"#,
        )
        .unwrap();
        let files = FilesDirectory::new(&ServiceHome::new(dir.path()));
        let old = files.usage_between("2026-01-01", None).await.unwrap();
        assert_eq!(old.len(), 1);
        assert_eq!(
            (old[0].key.model.as_str(), old[0].spent.input_tokens),
            ("", 5)
        );
        let mut row = old[0].clone();
        row.key.model = "a/b".into();
        files.add_usage(&[row.clone(), row]).await.unwrap();
        let rows = files
            .usage_between("2026-11-01", Some("2026-11-01"))
            .await
            .unwrap();
        assert_eq!(rows.len(), 2, "{rows:?}");
        assert_eq!(rows[1].spent.input_tokens, 10);
        assert!(files
            .usage_between("2026-11-02", None)
            .await
            .unwrap()
            .is_empty());
    }
}
