//! What the nodes of a cluster share besides sessions: the content tar of each bundle installed through a node's
//! API, kept in the `bundles` table so that a node lacking one installs it from there (see
//! `runtime::shared_bundles`); the periodic jobs one node at a time runs (`jobs`); and the figures `/metrics`
//! reads of the database.

use std::time::Duration;

use super::super::{SharedBundle, StoreStats};
use super::Inner;
use crate::runtime::error::Result;

/// Which of `ids` have a session record.
pub(super) async fn recorded(
    inner: &Inner,
    ids: &[String],
) -> Result<std::collections::HashSet<String>> {
    let rows = inner
        .client()
        .await?
        .query("SELECT id FROM sessions WHERE id = ANY($1)", &[&ids])
        .await
        .map_err(|e| inner.error(e))?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Takes or renews this node's hold on job `job` for `lease`: true when it holds it now.
pub(super) async fn hold_job(inner: &Inner, job: &str, lease: Duration) -> Result<bool> {
    let row = inner
        .client()
        .await?
        .query_opt(
            "INSERT INTO jobs (name, node_id, expires_at) VALUES ($1, $2, now() + make_interval(secs => $3)) \
             ON CONFLICT (name) DO UPDATE SET node_id = $2, expires_at = now() + make_interval(secs => $3) \
             WHERE jobs.node_id = $2 OR jobs.expires_at < now() RETURNING node_id",
            &[&job, &inner.node.id, &lease.as_secs_f64()],
        )
        .await
        .map_err(|e| inner.error(e))?;
    Ok(row.is_some())
}

/// The pool's connections and the errors met so far.
pub(super) fn stats(inner: &Inner) -> StoreStats {
    let status = inner.pool.status();
    StoreStats {
        open: status.size as u64,
        idle: status.available as u64,
        waiting: status.waiting as u64,
        errors: inner.errors.load(std::sync::atomic::Ordering::Relaxed),
    }
}

/// Bytes the database takes on disk.
pub(super) async fn size_bytes(inner: &Inner) -> Option<u64> {
    let client = inner.client().await.ok()?;
    let row = client
        .query_one("SELECT pg_database_size(current_database())", &[])
        .await
        .ok()?;
    u64::try_from(row.get::<_, i64>(0)).ok()
}

/// Keeps `bundle`'s `content`, replacing what the same id and version held.
pub(super) async fn share(inner: &Inner, bundle: &SharedBundle, content: &[u8]) -> Result<()> {
    inner
        .client()
        .await?
        .execute(
            "INSERT INTO bundles (id, version, digest, content) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id, version) DO UPDATE SET digest = $3, content = $4, shared_at = now()",
            &[&bundle.id, &bundle.version, &bundle.digest, &content],
        )
        .await
        .map_err(|e| inner.error(e))?;
    Ok(())
}

/// The shared bundles (of `id` only, when given), without their contents.
pub(super) async fn list(inner: &Inner, id: Option<&str>) -> Result<Vec<SharedBundle>> {
    let rows = inner
        .client()
        .await?
        .query(
            "SELECT id, version, digest FROM bundles WHERE $1::text IS NULL OR id = $1 ORDER BY id, version",
            &[&id],
        )
        .await
        .map_err(|e| inner.error(e))?;
    Ok(rows
        .iter()
        .map(|r| SharedBundle {
            id: r.get(0),
            version: r.get(1),
            digest: r.get(2),
        })
        .collect())
}

/// The digest and content of one shared bundle.
pub(super) async fn content(
    inner: &Inner,
    id: &str,
    version: &str,
) -> Result<Option<(String, Vec<u8>)>> {
    let row = inner
        .client()
        .await?
        .query_opt(
            "SELECT digest, content FROM bundles WHERE id = $1 AND version = $2",
            &[&id, &version],
        )
        .await
        .map_err(|e| inner.error(e))?;
    Ok(row.map(|r| (r.get(0), r.get(1))))
}

/// Stops sharing one bundle.
pub(super) async fn unshare(inner: &Inner, id: &str, version: &str) -> Result<()> {
    inner
        .client()
        .await?
        .execute(
            "DELETE FROM bundles WHERE id = $1 AND version = $2",
            &[&id, &version],
        )
        .await
        .map_err(|e| inner.error(e))?;
    Ok(())
}
