//! The tenant directory in PostgreSQL: `tokens`, `tenant_quotas` and `tenant_spent` (see `005_tenants.sql`).

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::tenancy::audit::AuditEntry;
use crate::tenancy::{
    Directory, Grants, Quota, Result, Spent, TenancyError, TokenRecord, TokenView, UsageRow,
};

/// The directory over one database.
pub struct PgDirectory {
    pub(super) inner: Arc<super::Inner>,
}

impl PgDirectory {
    async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.inner.client().await.map_err(store_error)
    }
}

fn store_error(e: impl std::fmt::Display) -> TenancyError {
    TenancyError::Store(format!("the tenant tables: {e}"))
}

/// Counts are kept as `bigint`; a count past `i64::MAX` is stored as that.
fn big(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn small(n: Option<i64>) -> Option<u64> {
    n.map(|n| u64::try_from(n).unwrap_or(0))
}

fn token_of(row: &tokio_postgres::Row) -> TokenRecord {
    TokenRecord {
        token: TokenView {
            id: row.get(0),
            tenant: row.get(1),
            admin: row.get(2),
            label: row.get(3),
            created_at: row.get(4),
            expires_at: row.get(5),
            last_used_at: row.get(6),
            // A role this release does not know reads as none: the token is then what `admin` says.
            role: row
                .get::<_, Option<String>>(8)
                .and_then(|r| crate::tenancy::Role::parse(&r)),
            revoked_at: row.get(9),
        },
        sha256: row.get(7),
    }
}

const TOKEN_COLUMNS: &str =
    "id, tenant, admin, label, created_at, expires_at, last_used_at, sha256, role, revoked_at";

#[async_trait::async_trait]
impl Directory for PgDirectory {
    async fn add_token(&self, t: &TokenRecord) -> Result<()> {
        self.client()
            .await?
            .execute(
                &format!(
                    "INSERT INTO tokens ({TOKEN_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
                ),
                &[
                    &t.token.id,
                    &t.token.tenant,
                    &t.token.admin,
                    &t.token.label,
                    &t.token.created_at,
                    &t.token.expires_at,
                    &t.token.last_used_at,
                    &t.sha256,
                    &t.token.role.map(|r| r.as_str()),
                    &t.token.revoked_at,
                ],
            )
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn tokens(&self) -> Result<Vec<TokenRecord>> {
        let rows = self
            .client()
            .await?
            .query(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens ORDER BY created_at, id"),
                &[],
            )
            .await
            .map_err(store_error)?;
        Ok(rows.iter().map(token_of).collect())
    }

    async fn token(&self, id: &str) -> Result<Option<TokenRecord>> {
        let row = self
            .client()
            .await?
            .query_opt(
                &format!("SELECT {TOKEN_COLUMNS} FROM tokens WHERE id = $1"),
                &[&id],
            )
            .await
            .map_err(store_error)?;
        Ok(row.as_ref().map(token_of))
    }

    async fn revoke(&self, id: &str) -> Result<bool> {
        let n = self
            .client()
            .await?
            .execute(
                // The digest goes with it: a node of a release that does not read `revoked_at` matches nothing.
                "UPDATE tokens SET revoked_at = $2, sha256 = $3 WHERE id = $1 AND revoked_at IS NULL",
                &[
                    &id,
                    &chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    &crate::tenancy::REVOKED_DIGEST,
                ],
            )
            .await
            .map_err(store_error)?;
        Ok(n > 0)
    }

    async fn touch(&self, id: &str, when: &str) -> Result<()> {
        self.client()
            .await?
            .execute(
                "UPDATE tokens SET last_used_at = $2 WHERE id = $1",
                &[&id, &when],
            )
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn set_quota(&self, tenant: &str, q: &Quota) -> Result<()> {
        let client = self.client().await?;
        if *q == Quota::default() {
            client
                .execute("DELETE FROM tenant_quotas WHERE tenant = $1", &[&tenant])
                .await
                .map_err(store_error)?;
            return Ok(());
        }
        let (s, c, t) = (
            q.sessions.map(big),
            q.concurrent_turns.map(big),
            q.tokens_per_day.map(big),
        );
        client
            .execute(
                "INSERT INTO tenant_quotas (tenant, sessions, concurrent_turns, tokens_per_day) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (tenant) DO UPDATE SET sessions = $2, \
                 concurrent_turns = $3, tokens_per_day = $4",
                &[&tenant, &s, &c, &t],
            )
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn quotas(&self) -> Result<BTreeMap<String, Quota>> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT tenant, sessions, concurrent_turns, tokens_per_day FROM tenant_quotas",
                &[],
            )
            .await
            .map_err(store_error)?;
        Ok(rows
            .iter()
            .map(|r| {
                (
                    r.get(0),
                    Quota {
                        sessions: small(r.get(1)),
                        concurrent_turns: small(r.get(2)),
                        tokens_per_day: small(r.get(3)),
                    },
                )
            })
            .collect())
    }

    async fn grant(&self, tenant: &str, name: &str) -> Result<bool> {
        let n = self
            .client()
            .await?
            .execute(
                "INSERT INTO tenant_grants (tenant, bundle) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&tenant, &name],
            )
            .await
            .map_err(store_error)?;
        Ok(n > 0)
    }

    async fn ungrant(&self, tenant: &str, name: &str) -> Result<bool> {
        let n = self
            .client()
            .await?
            .execute(
                "DELETE FROM tenant_grants WHERE tenant = $1 AND bundle = $2",
                &[&tenant, &name],
            )
            .await
            .map_err(store_error)?;
        Ok(n > 0)
    }

    async fn claim_name(&self, name: &str, tenant: &str) -> Result<String> {
        let client = self.client().await?;
        client
            .execute(
                "INSERT INTO bundle_owners (bundle, tenant) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&name, &tenant],
            )
            .await
            .map_err(store_error)?;
        // A statement of its own: one that lost the insert to another tenant's must see that tenant's row.
        let row = client
            .query_one(
                "SELECT tenant FROM bundle_owners WHERE bundle = $1",
                &[&name],
            )
            .await
            .map_err(store_error)?;
        Ok(row.get(0))
    }

    async fn name_owner(&self, name: &str) -> Result<Option<String>> {
        let row = self
            .client()
            .await?
            .query_opt(
                "SELECT tenant FROM bundle_owners WHERE bundle = $1",
                &[&name],
            )
            .await
            .map_err(store_error)?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn grants(&self) -> Result<Grants> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT tenant, bundle FROM tenant_grants ORDER BY tenant, bundle",
                &[],
            )
            .await
            .map_err(store_error)?;
        let mut out = Grants::new();
        for r in rows {
            out.entry(r.get(0)).or_default().push(r.get(1));
        }
        Ok(out)
    }

    async fn add_usage(&self, rows: &[UsageRow]) -> Result<()> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(store_error)?;
        for r in rows {
            let (k, s) = (&r.key, &r.spent);
            tx.execute(
                "INSERT INTO tenant_spent (tenant, day, model, bundle, input_tokens, output_tokens, cached_tokens, \
                 reasoning_tokens, model_calls, turns, tool_calls, wall_ms, sandbox_cpu_ms) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
                 ON CONFLICT (tenant, day, model, bundle) DO UPDATE SET \
                 input_tokens = tenant_spent.input_tokens + $5, \
                 output_tokens = tenant_spent.output_tokens + $6, \
                 cached_tokens = tenant_spent.cached_tokens + $7, \
                 reasoning_tokens = tenant_spent.reasoning_tokens + $8, \
                 model_calls = tenant_spent.model_calls + $9, \
                 turns = tenant_spent.turns + $10, \
                 tool_calls = tenant_spent.tool_calls + $11, \
                 wall_ms = tenant_spent.wall_ms + $12, \
                 sandbox_cpu_ms = tenant_spent.sandbox_cpu_ms + $13",
                &[
                    &k.tenant,
                    &k.day,
                    &k.model,
                    &k.bundle,
                    &big(s.input_tokens),
                    &big(s.output_tokens),
                    &big(s.cached_tokens),
                    &big(s.reasoning_tokens),
                    &big(s.model_calls),
                    &big(s.turns),
                    &big(s.tool_calls),
                    &big(s.wall_ms),
                    &big(s.sandbox_cpu_ms),
                ],
            )
            .await
            .map_err(store_error)?;
        }
        tx.commit().await.map_err(store_error)
    }

    async fn append_audit(&self, e: &AuditEntry) -> Result<()> {
        self.client()
            .await?
            .execute(
                "INSERT INTO audit (at, actor_tenant, actor_token, client, action, object, detail) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &e.at,
                    &e.actor_tenant,
                    &e.actor_token,
                    &e.client,
                    &e.action,
                    &e.object,
                    &e.detail.to_string(),
                ],
            )
            .await
            .map_err(store_error)?;
        Ok(())
    }

    async fn audit_tail(&self, limit: usize) -> Result<Vec<AuditEntry>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self
            .client()
            .await?
            .query(
                "SELECT seq, at, actor_tenant, actor_token, client, action, object, detail FROM \
                 (SELECT * FROM audit ORDER BY seq DESC LIMIT $1) last ORDER BY seq",
                &[&limit],
            )
            .await
            .map_err(store_error)?;
        Ok(rows
            .iter()
            .map(|r| AuditEntry {
                seq: u64::try_from(r.get::<_, i64>(0)).unwrap_or(0),
                at: r.get(1),
                actor_tenant: r.get(2),
                actor_token: r.get(3),
                client: r.get(4),
                action: r.get(5),
                object: r.get(6),
                detail: serde_json::from_str(r.get(7)).unwrap_or_default(),
            })
            .collect())
    }

    async fn usage_between(&self, since: &str, until: Option<&str>) -> Result<Vec<UsageRow>> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT tenant, day, model, bundle, input_tokens, output_tokens, cached_tokens, reasoning_tokens, \
                 model_calls, turns, tool_calls, wall_ms, sandbox_cpu_ms FROM tenant_spent \
                 WHERE day >= $1 AND ($2::text IS NULL OR day <= $2) ORDER BY tenant, day, model, bundle",
                &[&since, &until],
            )
            .await
            .map_err(store_error)?;
        let n = |r: &tokio_postgres::Row, i: usize| small(r.get(i)).unwrap_or(0);
        Ok(rows
            .iter()
            .map(|r| UsageRow {
                key: crate::tenancy::usage::LedgerKey {
                    tenant: r.get(0),
                    day: r.get(1),
                    model: r.get(2),
                    bundle: r.get(3),
                },
                spent: Spent {
                    input_tokens: n(r, 4),
                    output_tokens: n(r, 5),
                    cached_tokens: n(r, 6),
                    reasoning_tokens: n(r, 7),
                    model_calls: n(r, 8),
                    turns: n(r, 9),
                    tool_calls: n(r, 10),
                    wall_ms: n(r, 11),
                    sandbox_cpu_ms: n(r, 12),
                },
            })
            .collect())
    }
}
