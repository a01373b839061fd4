//! The embedded schema, applied by `service-rs migrate` (or `serve --migrate`).
//!
//! Migrations are expand/contract: one that only adds (a table, a nullable or defaulted column, an index) keeps
//! serving the release before it, and one that drops or changes what an earlier release reads or writes (a
//! contract) comes a release after that release stopped using it. Each records in `service_schema` the oldest
//! release it still serves (`serves_from`, named by that release's newest schema version), so a node of an older
//! release can tell whether a newer database still serves it: it runs on a database whose every newer migration
//! serves it. `compat/<version>.sql` keeps each release's statements; the e2e suite `schema_compat` runs those of
//! every release the newest schema serves against it.
//!
//! Nodes start together. The first statement of a migration takes a transaction-scoped advisory lock, so one
//! applies what is missing while the others wait and then find it applied.

/// One migration: its version, its SQL, and the oldest release (by newest schema version) that still runs on a
/// database it has been applied to.
struct Migration {
    version: i32,
    sql: &'static str,
    serves_from: i32,
}

/// Versions in order. 006 changed the usage ledger's key, which release 5 wrote by: it serves from 6.
const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        sql: include_str!("001_sessions.sql"),
        serves_from: 1,
    },
    Migration {
        version: 2,
        sql: include_str!("002_approvals.sql"),
        serves_from: 1,
    },
    Migration {
        version: 3,
        sql: include_str!("003_nodes.sql"),
        serves_from: 2,
    },
    Migration {
        version: 4,
        sql: include_str!("004_names.sql"),
        serves_from: 3,
    },
    Migration {
        version: 5,
        sql: include_str!("005_tenants.sql"),
        serves_from: 4,
    },
    Migration {
        version: 6,
        sql: include_str!("006_usage.sql"),
        serves_from: 6,
    },
    Migration {
        version: 7,
        sql: include_str!("007_bundle_owners.sql"),
        serves_from: 6,
    },
    Migration {
        version: 8,
        sql: include_str!("008_cluster.sql"),
        serves_from: 7,
    },
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
    MIGRATIONS.iter().map(|m| m.version)
}

/// The oldest release (by its newest schema version) that runs on a database with every migration of this one.
pub fn oldest_release_served() -> i32 {
    MIGRATIONS.iter().map(|m| m.serves_from).max().unwrap_or(0)
}

/// The SQL of migration `version`.
pub fn sql_of(version: i32) -> Option<&'static str> {
    MIGRATIONS
        .iter()
        .find(|m| m.version == version)
        .map(|m| m.sql)
}

/// One applied version and the oldest release it serves (unknown for rows written before that was recorded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// The migration's version.
    pub version: i32,
    /// The oldest release it serves.
    pub serves_from: Option<i32>,
}

/// The versions the database has applied (none when it has no schema), and the newest this release knows; reads
/// only.
pub async fn versions(client: &deadpool_postgres::Object) -> Result<(Vec<Applied>, i32), String> {
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
pub fn newest() -> i32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// The versions recorded in `service_schema`, in order. A database whose table predates `serves_from` reads as
/// having none recorded.
async fn applied(client: &impl deadpool_postgres::GenericClient) -> Result<Vec<Applied>, String> {
    let recorded = client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM information_schema.columns \
             WHERE table_name = 'service_schema' AND column_name = 'serves_from' \
             AND table_schema = current_schema())",
            &[],
        )
        .await
        .map_err(|e| said(&e))?
        .get::<_, bool>(0);
    let sql = if recorded {
        "SELECT version, serves_from FROM service_schema ORDER BY version"
    } else {
        "SELECT version, NULL::integer FROM service_schema ORDER BY version"
    };
    Ok(client
        .query(sql, &[])
        .await
        .map_err(|e| said(&e))?
        .iter()
        .map(|r| Applied {
            version: r.get(0),
            serves_from: r.get(1),
        })
        .collect())
}

/// Whether a release whose newest schema version is `ours` runs on a database with `applied`: every version it
/// lacks must be newer than it knows and serve it. Err says what to do.
pub fn compatible(applied: &[Applied], ours: i32) -> Result<(), String> {
    if applied.is_empty() {
        return Err("the database has no service-rs schema: run `service-rs migrate --store URL`, or start one \
                    `serve` node with --migrate, which creates it"
            .into());
    }
    let newer: Vec<&Applied> = applied.iter().filter(|a| a.version > ours).collect();
    if let Some(refusing) = newer
        .iter()
        .find(|a| a.serves_from.is_none_or(|f| f > ours))
    {
        return Err(format!(
            "the database's schema is at version {}, and its migration {} no longer serves this service-rs \
             (whose schema is {ours}){}; upgrade this node to the release that applied it",
            newest_of(applied),
            refusing.version,
            refusing
                .serves_from
                .map(|f| format!(": it serves releases from schema {f} on"))
                .unwrap_or_default()
        ));
    }
    let missing: Vec<String> = known()
        .filter(|v| !applied.iter().any(|a| a.version == *v))
        .map(|v| v.to_string())
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the database's schema is at version {}, older than this service-rs's ({ours}), which needs {}: run \
             `service-rs migrate --store URL` of this release (or start one `serve` node with --migrate); the \
             nodes already running keep working on it",
            newest_of(applied),
            missing.join(", ")
        ));
    }
    Ok(())
}

fn newest_of(applied: &[Applied]) -> i32 {
    applied.iter().map(|a| a.version).max().unwrap_or(0)
}

/// Checks, without writing anything, that this release runs on the database's schema: its own, or a newer one
/// whose newer migrations all serve it. For `serve` without `--migrate` and for commands that open the store but
/// never change it.
pub async fn check(client: &deadpool_postgres::Object) -> Result<(), String> {
    let (applied, ours) = versions(client).await?;
    compatible(&applied, ours)
}

/// Applies the migrations the database lacks, in one transaction, and records which releases each serves. A
/// database newer than this release is left as it is when it still serves this release, and refused otherwise.
pub async fn migrate(client: &mut deadpool_postgres::Object) -> Result<(), String> {
    let tx = client.transaction().await.map_err(|e| said(&e))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&LOCK_KEY])
        .await
        .map_err(|e| said(&e))?;
    // `serves_from` is added beside `version`, which is all an older release reads of this table.
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS service_schema (
             version    integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );
         ALTER TABLE service_schema ADD COLUMN IF NOT EXISTS serves_from integer",
    )
    .await
    .map_err(|e| said(&e))?;
    let applied = applied(&tx).await?;
    if applied.iter().any(|a| a.version > newest()) {
        compatible(&applied, newest())?;
    }
    for m in MIGRATIONS {
        if applied.iter().any(|a| a.version == m.version) {
            continue;
        }
        tx.batch_execute(m.sql)
            .await
            .map_err(|e| format!("schema version {}: {}", m.version, said(&e)))?;
        tx.execute(
            "INSERT INTO service_schema (version) VALUES ($1)",
            &[&m.version],
        )
        .await
        .map_err(|e| said(&e))?;
    }
    for m in MIGRATIONS {
        tx.execute(
            "UPDATE service_schema SET serves_from = $2 WHERE version = $1 AND serves_from IS NULL",
            &[&m.version, &m.serves_from],
        )
        .await
        .map_err(|e| said(&e))?;
    }
    tx.commit().await.map_err(|e| said(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(list: &[(i32, Option<i32>)]) -> Vec<Applied> {
        list.iter()
            .map(|&(version, serves_from)| Applied {
                version,
                serves_from,
            })
            .collect()
    }

    #[test]
    fn a_release_runs_on_a_newer_schema_only_while_every_newer_migration_serves_it() {
        let ours: Vec<(i32, Option<i32>)> = MIGRATIONS
            .iter()
            .map(|m| (m.version, Some(m.serves_from)))
            .collect();
        let n = newest();
        assert!(compatible(&at(&ours), n).is_ok());
        let expand = [ours.clone(), vec![(n + 1, Some(n))]].concat();
        assert!(compatible(&at(&expand), n).is_ok());
        let contract = [expand.clone(), vec![(n + 2, Some(n + 1))]].concat();
        let refused = compatible(&at(&contract), n).unwrap_err();
        assert!(
            refused.contains(&format!("migration {} no longer serves", n + 2)),
            "{refused}"
        );
        // A row an older release wrote records nothing: it cannot be taken to serve anyone.
        let unknown = [ours.clone(), vec![(n + 1, None)]].concat();
        assert!(compatible(&at(&unknown), n).is_err());
        let older = &ours[..ours.len() - 1];
        let refused = compatible(&at(older), n).unwrap_err();
        assert!(refused.contains(&format!("which needs {n}")), "{refused}");
        assert!(compatible(&[], n)
            .unwrap_err()
            .contains("no service-rs schema"));
    }

    #[test]
    fn no_migration_serves_a_release_newer_than_itself_and_the_window_never_narrows_backwards() {
        let mut floor = 0;
        for m in MIGRATIONS {
            assert!(m.serves_from <= m.version, "migration {}", m.version);
            assert!(
                m.serves_from >= floor,
                "migration {} serves older releases than the one before",
                m.version
            );
            floor = m.serves_from;
        }
    }
}
