//! The shared PostgreSQL store as the one-shot commands open it (`tokens`, `audit`, `sessions prune --store`,
//! `migrate`): as a node named after the command, which claims no session.

use std::path::Path;
use std::time::Duration;

use service_supervisor::runtime::store::postgres::{Node, PgStore, Schema};

/// Connects `command` to the database at `url` (TLS verified against `ca` when given), leaving or changing its
/// schema as `schema` says.
pub async fn open(
    command: &str,
    url: &str,
    ca: Option<&Path>,
    schema: Schema,
) -> anyhow::Result<PgStore> {
    let node = Node {
        id: format!("{command}-{}", std::process::id()),
        url: String::new(),
    };
    Ok(PgStore::connect_with(url, node, Duration::from_secs(10), ca, schema).await?)
}
