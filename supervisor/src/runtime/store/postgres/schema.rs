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

/// What PostgreSQL said: its own message, detail and hint for a database error (tokio-postgres' `Display` says
/// only "db error"), else the client's error.
pub fn said(e: &tokio_postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        return e.to_string();
    };
    let mut out = format!("{}: {}", db.severity(), db.message());
    if let Some(detail) = db.detail() {
        out.push_str(&format!(" ({detail})"));
    }
    if let Some(hint) = db.hint() {
        out.push_str(&format!("; hint: {hint}"));
    }
    out
}

/// The versions this release knows, in order.
pub fn known() -> impl Iterator<Item = i32> {
    MIGRATIONS.iter().map(|m| m.0)
}

/// The versions the database has applied (none when it has no schema), and the newest this release knows; reads
/// only.
pub async fn versions(client: &deadpool_postgres::Object) -> Result<(Vec<i32>, i32), String> {
    let made = client
        .query_one("SELECT to_regclass('service_schema') IS NOT NULL", &[])
        .await
        .map_err(|e| said(&e))?;
    let applied = match made.get::<_, bool>(0) {
        true => applied(client).await?,
        false => Vec::new(),
    };
    Ok((applied, newest()))
}

/// The newest version this release knows.
fn newest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.0)
}

/// The versions recorded in `service_schema`, in order.
async fn applied(client: &impl deadpool_postgres::GenericClient) -> Result<Vec<i32>, String> {
    Ok(client
        .query("SELECT version FROM service_schema ORDER BY version", &[])
        .await
        .map_err(|e| said(&e))?
        .iter()
        .map(|r| r.get(0))
        .collect())
}

/// What to say of a database whose schema is at version `v`, newer than this release's `ours`.
fn newer(v: i32, ours: i32) -> String {
    format!(
        "the database's schema is at version {v}, newer than this service-rs knows ({ours}); upgrade this node"
    )
}

/// Checks, without writing anything, that the database holds the schema of this release: for commands that open
/// the store but must never change it (only `serve` and `migrate` do).
pub async fn check(client: &deadpool_postgres::Object) -> Result<(), String> {
    let (applied, ours) = versions(client).await?;
    let Some(&newest) = applied.iter().max() else {
        return Err("the database has no service-rs schema: run `service-rs migrate --store URL`, or start a \
                    `service-rs serve --store` node on it, which creates it"
            .into());
    };
    match newest {
        v if v < ours => Err(format!(
            "the database's schema is at version {v}, older than this service-rs's ({ours}): run `service-rs \
             migrate --store URL` of this release first"
        )),
        v if v > ours => Err(newer(v, ours)),
        _ => Ok(()),
    }
}

/// Applies the migrations the database lacks, in one transaction.
pub async fn migrate(client: &mut deadpool_postgres::Object) -> Result<(), String> {
    let tx = client.transaction().await.map_err(|e| said(&e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await
        .map_err(|e| said(&e))?;
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS service_schema (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         )",
    )
    .await
    .map_err(|e| said(&e))?;
    let applied = applied(&tx).await?;
    if let Some(v) = applied.iter().find(|v| **v > newest()) {
        return Err(newer(*v, newest()));
    }
    for (version, sql) in MIGRATIONS {
        if applied.contains(version) {
            continue;
        }
        tx.batch_execute(sql)
            .await
            .map_err(|e| format!("schema version {version}: {}", said(&e)))?;
        tx.execute(
            "INSERT INTO service_schema (version) VALUES ($1)",
            &[version],
        )
        .await
        .map_err(|e| said(&e))?;
    }
    tx.commit().await.map_err(|e| said(&e))
}
