//! The embedded schema, applied at start.
//!
//! Every node runs this when it starts, and nodes start together. The first statement takes a transaction-scoped
//! advisory lock, so one node applies what is missing while the others wait and then find it applied.

/// Versions in order, with their SQL.
const MIGRATIONS: &[(i32, &str)] = &[
    (1, include_str!("001_sessions.sql")),
    (2, include_str!("002_approvals.sql")),
    (3, include_str!("003_nodes.sql")),
    (4, include_str!("004_names.sql")),
    (5, include_str!("005_tenants.sql")),
    (6, include_str!("006_usage.sql")),
    (7, include_str!("007_bundle_owners.sql")),
];

/// An arbitrary key for the advisory lock ("svc-rs" in ASCII).
const LOCK_KEY: i64 = 0x7376_632d_7273;

/// Applies the migrations the database lacks, in one transaction.
pub async fn migrate(client: &mut deadpool_postgres::Object) -> Result<(), String> {
    let tx = client.transaction().await.map_err(|e| e.to_string())?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await
        .map_err(|e| e.to_string())?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS service_schema (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(|e| e.to_string())?;
    let applied: Vec<i32> = tx
        .query("SELECT version FROM service_schema", &[])
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .map(|r| r.get(0))
        .collect();
    let newest = MIGRATIONS.last().map_or(0, |m| m.0);
    if let Some(v) = applied.iter().find(|v| **v > newest) {
        return Err(format!(
            "the database's schema is at version {v}, newer than this service-rs knows ({newest}); upgrade this node"
        ));
    }
    for (version, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(|e| format!("schema version {version}: {e}"))?;
        tx.execute(
            "INSERT INTO service_schema (version) VALUES ($1)",
            &[version],
        )
        .await
        .map_err(|e| e.to_string())?;
    }
    tx.commit().await.map_err(|e| e.to_string())
}
