//! `service-rs sessions prune`: the sessions that have not changed for a while deleted, through the local runtime
//! or a server, or (`--store`) straight from a cluster's database.

use std::process::ExitCode;
use std::time::Duration;

use service_supervisor::runtime::record::SessionRecord;

use super::backend::Backend;

/// `sessions prune --store URL`: deletes the records (and with them the journals and histories) of the cluster's
/// sessions whose last change is older than `older_than` and that run no turn. A node holding one gives it up, its
/// worker and directory, at its next upkeep (within seconds); the others remove their directories in time.
pub fn prune_store(
    url: &str,
    ca: Option<&std::path::Path>,
    older_than: Duration,
    dry_run: bool,
) -> anyhow::Result<ExitCode> {
    use service_supervisor::runtime::store::{postgres, Store};
    super::tokio()?.block_on(async move {
        let store = super::store_open::open("prune", url, ca, postgres::Schema::Require).await?;
        let stale = older(store.list().await?, older_than)?;
        for record in &stale {
            let what = format!("{} (last change {})", record.id, record.updated_at);
            if dry_run {
                println!("would delete {what}");
            } else {
                store.delete(&record.id).await?;
                println!("deleted {what}");
            }
        }
        if stale.is_empty() {
            println!("no session is older than that");
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// The records of `records` that are not running and whose last change is older than `older_than`.
fn older(records: Vec<SessionRecord>, older_than: Duration) -> anyhow::Result<Vec<SessionRecord>> {
    let cutoff = chrono::Utc::now()
        - chrono::Duration::from_std(older_than)
            .map_err(|_| anyhow::anyhow!("--older-than is too large"))?;
    Ok(records
        .into_iter()
        .filter(|r| r.active_turn.is_none())
        .filter(|r| {
            chrono::DateTime::parse_from_rfc3339(&r.updated_at)
                .map(|t| t < cutoff)
                .unwrap_or(false)
        })
        .collect())
}

pub(super) async fn prune(
    backend: &Backend,
    older_than: Duration,
    dry_run: bool,
) -> anyhow::Result<ExitCode> {
    let stale = older(backend.sessions().await?, older_than)?;
    for record in &stale {
        if dry_run {
            println!(
                "would delete {} (last change {})",
                record.id, record.updated_at
            );
        } else {
            backend.delete(&record.id).await?;
            println!("deleted {} (last change {})", record.id, record.updated_at);
        }
    }
    // A server's leftovers are for its own operator: they are files on its machine.
    let mut leftovers = 0;
    if let Backend::Local(rt) = backend {
        for dir in rt.unrecorded_session_dirs(older_than).await? {
            let changed = chrono::DateTime::<chrono::Utc>::from(dir.modified)
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let what = format!(
                "{} (a session directory with no record, last change {changed})",
                dir.path.display()
            );
            if dry_run {
                println!("would delete {what}");
            } else {
                rt.remove_unrecorded(&dir).await?;
                println!("deleted {what}");
            }
            leftovers += 1;
        }
    }
    if stale.is_empty() && leftovers == 0 {
        println!("no session is older than that");
    }
    Ok(ExitCode::SUCCESS)
}
