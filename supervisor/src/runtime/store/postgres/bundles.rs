//! The bundles every node of a cluster shares: the content tar of each bundle installed through a node's API, kept
//! in the `bundles` table so that a node lacking one installs it from there (see `runtime::shared_bundles`).

use super::super::SharedBundle;
use super::Inner;
use crate::runtime::error::Result;

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
