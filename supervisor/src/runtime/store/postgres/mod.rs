//! The shared store: one PostgreSQL database under many `serve` nodes (`serve --store postgres://…`).
//!
//! - Records, events and history are rows; the schema is embedded ([`schema`]) and applied by `migrate` or
//!   `serve --migrate`.
//! - Each session's writes go through one ordered writer that commits what has queued up as one transaction
//!   ([`log`]): event sequence numbers are given out inside it, so they are dense even with two writers.
//! - A committed batch of events is announced with `NOTIFY`; every node `LISTEN`s and reads the rows by sequence,
//!   so a client streams from any node with the same ids.
//! - Who runs a session's worker is an ownership lease (`owners`: node, advertised URL, expiry), renewed in the
//!   background while the worker lives; a node may take a session whose lease expired.
//!
//! The crate is `tokio-postgres` with `deadpool-postgres` for the pool: the runtime writes with a few fixed statements,
//! so `sqlx`'s query macros and its own runtime layer would add build time and binary size for nothing used, and
//! `tokio-postgres` gives `LISTEN` notifications straight from its connection.

mod cluster;
mod listen;
mod log;
mod schema;
pub use schema::{newest as newest_schema, oldest_release_served, sql_of};
mod tenants;
mod tls;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use deadpool_postgres::{ManagerConfig, Pool, RecyclingMethod, Runtime};

use super::{Claim, Publish, SessionLog, Store};
use crate::runtime::approvals::Grant;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::record::SessionRecord;

/// This node, as other nodes see it.
#[derive(Debug, Clone)]
pub struct Node {
    /// Unique among the nodes sharing a database.
    pub id: String,
    /// Base URL other nodes forward requests to; empty: the address the server binds.
    pub url: String,
}

/// What opening the store may do to the database's schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schema {
    /// Apply the migrations it lacks (`migrate`, `serve --migrate`).
    Migrate,
    /// Change nothing, and refuse a schema this release does not run on: an older one, or a newer one with a
    /// migration that no longer serves it (`serve`, and CLI commands such as `tokens --store`).
    Require,
    /// Change nothing and check nothing (`migrate --status`, which reports).
    Leave,
}

/// Where a database's schema is against this release's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaStatus {
    /// The versions applied, in order.
    pub applied: Vec<i32>,
    /// The newest version this release knows.
    pub known: i32,
    /// The versions this release would apply.
    pub pending: Vec<i32>,
    /// Whether this release runs on the schema as it is, or what to do.
    pub runs_here: std::result::Result<(), String>,
}

/// The store over one database.
pub struct PgStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pool: Pool,
    /// `host:port` for messages.
    host: String,
    node: Node,
    /// `node.url`, or the bound address when that was empty.
    url: Mutex<String>,
    lease: Duration,
    /// Where the database listens, as resolved at start.
    reserved: Vec<std::net::SocketAddr>,
    /// Where the other nodes serve, as of the last renewal.
    peers: Mutex<Vec<std::net::SocketAddr>>,
    /// Open logs by session, for the notifications of other nodes' writes.
    logs: Mutex<HashMap<String, Weak<log::Shared>>>,
    /// Commit sessions' writes without waiting for the WAL's flush (`turn_flush = background`, see
    /// [`PgStore::with_turn_flush`]).
    async_commit: std::sync::atomic::AtomicBool,
    /// Database errors met since the start (`service_store_errors`).
    errors: std::sync::atomic::AtomicU64,
}

impl Inner {
    /// A pooled connection, or the error that names the database.
    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object> {
        self.pool.get().await.map_err(|e| self.error(e))
    }

    /// A database error as the runtime reports it.
    pub(crate) fn error(&self, e: impl std::fmt::Display) -> RuntimeError {
        self.errors
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        RuntimeError::Database {
            host: self.host.clone(),
            message: e.to_string(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The socket addresses a node's base URL names; none when it names nothing usable (that node forwards nowhere
/// either).
async fn addresses_of(url: &str) -> Vec<std::net::SocketAddr> {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return Vec::new();
    };
    let (Some(host), Some(port)) = (parsed.host_str(), parsed.port_or_known_default()) else {
        return Vec::new();
    };
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let found = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map(|addrs| addrs.collect());
    match found {
        Ok(addrs) => addrs,
        Err(e) => {
            tracing::debug!("the address of node {url} is not known: {e}");
            Vec::new()
        }
    }
}

/// `host:port` of the first host a configuration names.
fn host_of(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(h)) => h.clone(),
        Some(tokio_postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

impl PgStore {
    /// The same store, committing sessions' writes as `flush` says: with `TurnFlush::Background`, a session's
    /// transactions (its events, history and record) run with `synchronous_commit = off`, so the database reports
    /// them committed before its WAL is flushed, and a crash of the database server may lose the last moment's
    /// turns. Leases and claims always wait for the flush: losing one could let two nodes run a session.
    pub fn with_turn_flush(self, flush: crate::runtime::store::TurnFlush) -> Self {
        let background = flush == crate::runtime::store::TurnFlush::Background;
        self.inner
            .async_commit
            .store(background, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Says where this node serves, and learns where the others do (those seen within ten leases): their
    /// addresses join what no sandbox started from now on may reach.
    async fn meet_peers(&self, client: &deadpool_postgres::Object) -> Result<()> {
        let inner = &self.inner;
        let url = lock(&inner.url).clone();
        if !url.is_empty() {
            client
                .execute(
                    "INSERT INTO nodes (node_id, url, seen_at) VALUES ($1, $2, now()) \
                     ON CONFLICT (node_id) DO UPDATE SET url = $2, seen_at = now()",
                    &[&inner.node.id, &url],
                )
                .await
                .map_err(|e| inner.error(e))?;
        }
        let recent = inner.lease.as_secs_f64() * 10.0;
        let rows = client
            .query(
                "SELECT url FROM nodes WHERE node_id <> $1 AND seen_at > now() - make_interval(secs => $2)",
                &[&inner.node.id, &recent],
            )
            .await
            .map_err(|e| inner.error(e))?;
        let mut peers = Vec::new();
        for row in rows {
            let url: String = row.get(0);
            peers.extend(addresses_of(&url).await);
        }
        *lock(&inner.peers) = peers;
        Ok(())
    }

    /// Connects to the database at `url`, applies the schema, and starts listening for other nodes' events. A
    /// database that cannot be reached is an error naming its host.
    pub async fn connect(url: &str, node: Node, lease: Duration) -> Result<PgStore> {
        Self::connect_with(url, node, lease, None, Schema::Migrate).await
    }

    /// [`PgStore::connect`], with TLS verified against the CA in PEM file `ca` as well as the web's roots (see
    /// [`tls`]: `sslmode=require` in `url` asks for TLS without a CA of its own).
    pub async fn connect_with(
        url: &str,
        node: Node,
        lease: Duration,
        ca: Option<&std::path::Path>,
        schema: Schema,
    ) -> Result<PgStore> {
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| {
            RuntimeError::InvalidRequest(format!(
                "--store takes a PostgreSQL URL such as postgres://user@host:5432/db: {e}"
            ))
        })?;
        config.connect_timeout(Duration::from_secs(5));
        if config.get_application_name().is_none() {
            config.application_name(format!("service-rs {}", node.id));
        }
        let host = host_of(&config);
        let tls = tls::connector(&mut config, ca).map_err(RuntimeError::InvalidRequest)?;
        let mut reserved = Vec::new();
        for (i, h) in config.get_hosts().iter().enumerate() {
            if let tokio_postgres::config::Host::Tcp(name) = h {
                let port = config
                    .get_ports()
                    .get(i)
                    .or(config.get_ports().first())
                    .copied()
                    .unwrap_or(5432);
                if let Ok(addrs) = tokio::net::lookup_host((name.as_str(), port)).await {
                    reserved.extend(addrs);
                }
            }
        }
        let manager = deadpool_postgres::Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let timeouts = deadpool_postgres::Timeouts {
            wait: Some(Duration::from_secs(5)),
            create: Some(Duration::from_secs(5)),
            recycle: Some(Duration::from_secs(5)),
        };
        let pool = Pool::builder(manager)
            .max_size(16)
            .timeouts(timeouts)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| RuntimeError::InvalidRequest(format!("database pool: {e}")))?;
        let inner = Arc::new(Inner {
            pool,
            host: host.clone(),
            url: Mutex::new(node.url.clone()),
            node,
            lease,
            reserved,
            peers: Mutex::new(Vec::new()),
            logs: Mutex::new(HashMap::new()),
            async_commit: Default::default(),
            errors: Default::default(),
        });
        let mut client = inner.pool.get().await.map_err(|e| match tls::refused(&e) {
            Some(why) => RuntimeError::InvalidRequest(format!(
                "the session database at {host} failed the TLS check: {why}; give the CA that signed its \
                 certificate with --store-ca (or SERVICE_STORE_CA)"
            )),
            None => RuntimeError::Database {
                host: host.clone(),
                message: format!("cannot connect: {e}"),
            },
        })?;
        let checked = match schema {
            Schema::Migrate => schema::migrate(&mut client).await,
            Schema::Require => schema::check(&client).await,
            Schema::Leave => Ok(()),
        };
        checked.map_err(|message| RuntimeError::Schema {
            host: host.clone(),
            message,
        })?;
        drop(client);
        tokio::spawn(listen::listen(Arc::downgrade(&inner), config, tls));
        Ok(PgStore { inner })
    }
}

impl PgStore {
    /// The database's schema against this release's, read without writing anything.
    pub async fn schema_status(&self) -> Result<SchemaStatus> {
        let client = self.inner.client().await?;
        let (applied, known) =
            schema::versions(&client)
                .await
                .map_err(|message| RuntimeError::Schema {
                    host: self.inner.host.clone(),
                    message,
                })?;
        let pending = schema::known()
            .filter(|v| !applied.iter().any(|a| a.version == *v))
            .collect();
        Ok(SchemaStatus {
            runs_here: schema::compatible(&applied, known),
            applied: applied.iter().map(|a| a.version).collect(),
            known,
            pending,
        })
    }
}

#[async_trait::async_trait]
impl Store for PgStore {
    fn describe(&self) -> String {
        format!("postgres {} (node {})", self.inner.host, self.inner.node.id)
    }

    fn shared(&self) -> bool {
        true
    }

    fn node_id(&self) -> Option<String> {
        Some(self.inner.node.id.clone())
    }

    fn directory(&self) -> Arc<dyn crate::tenancy::Directory> {
        Arc::new(tenants::PgDirectory {
            inner: self.inner.clone(),
        })
    }

    async fn insert(&self, record: &SessionRecord) -> Result<()> {
        let json = serde_json::to_string(record).unwrap_or_default();
        let client = self.inner.client().await?;
        client
            .execute(
                "INSERT INTO sessions (id, record, created_at) VALUES ($1, $2, $3)",
                &[&record.id, &json, &record.created_at],
            )
            .await
            .map_err(|e| self.inner.error(e))?;
        Ok(())
    }

    async fn insert_within(&self, record: &SessionRecord, limit: u64) -> Result<()> {
        let json = serde_json::to_string(record).unwrap_or_default();
        let tenant = record.tenant();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut client = self.inner.client().await?;
        let tx = client
            .transaction()
            .await
            .map_err(|e| self.inner.error(e))?;
        // Creations for one tenant queue on its lock; each statement after it reads what the previous holder
        // committed (read committed takes a snapshot per statement), so the count is never stale.
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('service-sessions:' || $1, 0))",
            &[&tenant],
        )
        .await
        .map_err(|e| self.inner.error(e))?;
        let row = tx
            .query_one(
                "WITH have AS (
                     SELECT count(*) AS n FROM sessions
                     WHERE COALESCE(record::jsonb ->> 'tenant', $4) = $5
                 ), added AS (
                     INSERT INTO sessions (id, record, created_at)
                     SELECT $1, $2, $3 FROM have WHERE n < $6
                     RETURNING id
                 )
                 SELECT (SELECT n FROM have), EXISTS (SELECT 1 FROM added)",
                &[
                    &record.id,
                    &json,
                    &record.created_at,
                    &crate::tenancy::DEFAULT_TENANT,
                    &tenant,
                    &limit,
                ],
            )
            .await
            .map_err(|e| self.inner.error(e))?;
        let (have, added): (i64, bool) = (row.get(0), row.get(1));
        tx.commit().await.map_err(|e| self.inner.error(e))?;
        if !added {
            return Err(RuntimeError::QuotaSessions {
                tenant: tenant.to_string(),
                have: have.max(0) as u64,
            });
        }
        Ok(())
    }

    async fn load(&self, id: &str) -> Result<Option<SessionRecord>> {
        let client = self.inner.client().await?;
        let statement = client
            .prepare_cached("SELECT record FROM sessions WHERE id = $1")
            .await
            .map_err(|e| self.inner.error(e))?;
        let row = client
            .query_opt(&statement, &[&id])
            .await
            .map_err(|e| self.inner.error(e))?;
        row.map(|r| parse_record(id, r.get(0))).transpose()
    }

    async fn list(&self) -> Result<Vec<SessionRecord>> {
        let client = self.inner.client().await?;
        let rows = client
            .query(
                "SELECT id, record FROM sessions ORDER BY created_at, id",
                &[],
            )
            .await
            .map_err(|e| self.inner.error(e))?;
        Ok(rows
            .iter()
            .filter_map(|r| parse_record(r.get(0), r.get(1)).ok())
            .collect())
    }

    async fn delete(&self, id: &str) -> Result<()> {
        let client = self.inner.client().await?;
        client
            .execute("DELETE FROM sessions WHERE id = $1", &[&id])
            .await
            .map_err(|e| self.inner.error(e))?;
        Ok(())
    }

    async fn open_log(&self, id: &str, publish: Publish) -> Result<Arc<dyn SessionLog>> {
        Ok(Arc::new(log::PgLog::open(&self.inner, id, publish).await?))
    }

    fn bound_at(&self, url: &str) {
        let mut mine = self.inner.url.lock().unwrap_or_else(|p| p.into_inner());
        if mine.is_empty() {
            *mine = url.to_string();
        }
    }

    async fn claim(&self, id: &str) -> Result<Claim> {
        let inner = &self.inner;
        let url = inner.url.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let client = inner.client().await?;
        let lease = inner.lease.as_secs_f64();
        // One statement, so one round trip and one commit: a session whose files are on another node (its record's
        // `home`) is never taken here; otherwise the holder's row is locked, then renewed or taken when it is this
        // node's or lapsed, or made when there is none. Two nodes claiming a session nobody holds both find no row;
        // the loser's insert does nothing, and it looks again.
        let claim = client
            .prepare_cached(
                "WITH away AS (SELECT h.home, n.url, \
                 COALESCE(n.seen_at > now() - make_interval(secs => $4), false) AS live \
                 FROM (SELECT record::json->>'home' AS home FROM sessions WHERE id = $1) h \
                 LEFT JOIN nodes n ON n.node_id = h.home WHERE h.home IS NOT NULL AND h.home <> $2), \
                 held AS (SELECT node_id, url, expires_at > now() AS live FROM owners \
                 WHERE session_id = $1 FOR UPDATE), \
                 renewed AS (UPDATE owners SET node_id = $2, url = $3, \
                 expires_at = now() + make_interval(secs => $4) WHERE session_id = $1 \
                 AND NOT EXISTS (SELECT 1 FROM away) \
                 AND EXISTS (SELECT 1 FROM held WHERE NOT live OR node_id = $2) RETURNING 1), \
                 made AS (INSERT INTO owners (session_id, node_id, url, expires_at) \
                 SELECT $1, $2, $3, now() + make_interval(secs => $4) \
                 WHERE NOT EXISTS (SELECT 1 FROM away) \
                 AND NOT EXISTS (SELECT 1 FROM held) AND EXISTS (SELECT 1 FROM sessions WHERE id = $1) \
                 ON CONFLICT (session_id) DO NOTHING RETURNING 1) \
                 SELECT h.node_id, h.url, h.live, EXISTS (SELECT 1 FROM made), a.home, a.url, a.live \
                 FROM (SELECT 1) one LEFT JOIN held h ON true LEFT JOIN away a ON true",
            )
            .await
            .map_err(|e| inner.error(e))?;
        for _ in 0..3 {
            let row = client
                .query_one(&claim, &[&id, &inner.node.id, &url, &lease])
                .await
                .map_err(|e| inner.error(e))?;
            let home: (Option<String>, Option<String>, Option<bool>) =
                (row.get(4), row.get(5), row.get(6));
            match home {
                (Some(node_id), Some(url), Some(true)) => {
                    return Ok(Claim::Elsewhere { node_id, url })
                }
                (Some(node_id), _, _) => return Ok(Claim::Lost { node_id }),
                _ => {}
            }
            let holder: (Option<String>, Option<String>, Option<bool>, bool) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            match holder {
                (Some(node_id), Some(url), Some(live), _) => {
                    if live && node_id != inner.node.id {
                        return Ok(Claim::Elsewhere { node_id, url });
                    }
                    let renewed = node_id == inner.node.id;
                    return Ok(Claim::Mine {
                        taken_from: (!renewed).then_some(node_id),
                        renewed,
                    });
                }
                (_, _, _, true) => {
                    return Ok(Claim::Mine {
                        taken_from: None,
                        renewed: false,
                    })
                }
                _ => {
                    if self.load(id).await?.is_none() {
                        return Err(RuntimeError::SessionNotFound(id.to_string()));
                    }
                }
            }
        }
        Err(inner.error(format!(
            "session {id} changed hands three times while claimed"
        )))
    }

    async fn release(&self, id: &str) {
        let Ok(client) = self.inner.client().await else {
            return;
        };
        let _ = client
            .execute(
                "DELETE FROM owners WHERE session_id = $1 AND node_id = $2",
                &[&id, &self.inner.node.id],
            )
            .await;
    }

    async fn renew(&self, live: &[String]) -> Result<()> {
        let inner = &self.inner;
        let client = inner.client().await?;
        let lease = inner.lease.as_secs_f64();
        client
            .execute(
                "UPDATE owners SET expires_at = now() + make_interval(secs => $3) \
                 WHERE node_id = $1 AND session_id = ANY($2)",
                &[&inner.node.id, &live, &lease],
            )
            .await
            .map_err(|e| inner.error(e))?;
        // A session claimed here whose worker never started or has stopped is let go; one claimed within the last
        // tenth of a lease is not, as its turn may be starting now.
        client
            .execute(
                "DELETE FROM owners WHERE node_id = $1 AND NOT (session_id = ANY($2)) \
                 AND expires_at < now() + make_interval(secs => $3::float8 * 0.9)",
                &[&inner.node.id, &live, &lease],
            )
            .await
            .map_err(|e| inner.error(e))?;
        self.meet_peers(&client).await
    }

    fn reserved(&self) -> Vec<std::net::SocketAddr> {
        let mut all = self.inner.reserved.clone();
        all.extend(lock(&self.inner.peers).iter().copied());
        all
    }

    fn lease(&self) -> Option<Duration> {
        Some(self.inner.lease)
    }

    async fn approval_session(&self, request_id: &str) -> Result<Option<String>> {
        let client = self.inner.client().await?;
        let row = client
            .query_opt(
                "SELECT session_id FROM approvals WHERE request_id = $1",
                &[&request_id],
            )
            .await
            .map_err(|e| self.inner.error(e))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn name_session(&self, name: &str, id: &str) -> Result<String> {
        let client = self.inner.client().await?;
        // The insert does nothing when the name is taken; the select then reads the winner's row, unless the winner
        // committed after this statement's snapshot, when a second look finds it.
        let row = client
            .query_opt(
                "WITH ins AS (INSERT INTO names (name, session_id) VALUES ($1, $2) ON CONFLICT DO NOTHING \
                 RETURNING session_id) SELECT session_id FROM ins UNION ALL \
                 SELECT session_id FROM names WHERE name = $1 LIMIT 1",
                &[&name, &id],
            )
            .await
            .map_err(|e| self.inner.error(e))?;
        match row {
            Some(r) => Ok(r.get(0)),
            None => self.named_session(name).await?.ok_or_else(|| {
                self.inner.error(format!(
                    "the name \"{name}\" was taken and released at once"
                ))
            }),
        }
    }

    async fn recorded(&self, ids: &[String]) -> Result<std::collections::HashSet<String>> {
        cluster::recorded(&self.inner, ids).await
    }

    async fn hold_job(&self, job: &str, lease: Duration) -> Result<bool> {
        cluster::hold_job(&self.inner, job, lease).await
    }

    fn stats(&self) -> Option<super::StoreStats> {
        Some(cluster::stats(&self.inner))
    }

    async fn size_bytes(&self) -> Option<u64> {
        cluster::size_bytes(&self.inner).await
    }

    async fn share_bundle(&self, bundle: &super::SharedBundle, content: &[u8]) -> Result<()> {
        cluster::share(&self.inner, bundle, content).await
    }

    async fn shared_bundles(&self, id: Option<&str>) -> Result<Vec<super::SharedBundle>> {
        cluster::list(&self.inner, id).await
    }

    async fn shared_bundle_content(
        &self,
        id: &str,
        version: &str,
    ) -> Result<Option<(String, Vec<u8>)>> {
        cluster::content(&self.inner, id, version).await
    }

    async fn unshare_bundle(&self, id: &str, version: &str) -> Result<()> {
        cluster::unshare(&self.inner, id, version).await
    }

    async fn named_session(&self, name: &str) -> Result<Option<String>> {
        let client = self.inner.client().await?;
        let row = client
            .query_opt("SELECT session_id FROM names WHERE name = $1", &[&name])
            .await
            .map_err(|e| self.inner.error(e))?;
        Ok(row.map(|r| r.get(0)))
    }

    async fn grant(&self, id: &str, grant: &Grant) -> Result<()> {
        let json = serde_json::to_string(grant).unwrap_or_default();
        let client = self.inner.client().await?;
        client
            .execute(
                "INSERT INTO grants (session_id, grant_json) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                &[&id, &json],
            )
            .await
            .map_err(|e| self.inner.error(e))?;
        Ok(())
    }

    async fn grants(&self, id: &str) -> Result<Vec<Grant>> {
        let client = self.inner.client().await?;
        let statement = client
            .prepare_cached("SELECT grant_json FROM grants WHERE session_id = $1")
            .await
            .map_err(|e| self.inner.error(e))?;
        let rows = client
            .query(&statement, &[&id])
            .await
            .map_err(|e| self.inner.error(e))?;
        // A row this version cannot read grants nothing: the operator is asked again.
        Ok(rows
            .iter()
            .filter_map(|r| serde_json::from_str(r.get(0)).ok())
            .collect())
    }

    async fn ready(&self) -> Result<()> {
        let client = self.inner.client().await?;
        client
            .execute("SELECT 1", &[])
            .await
            .map_err(|e| self.inner.error(e))?;
        Ok(())
    }
}

fn parse_record(id: &str, json: &str) -> Result<SessionRecord> {
    serde_json::from_str(json).map_err(|e| RuntimeError::Corrupt {
        path: format!("sessions/{id}").into(),
        message: format!("damaged session record in the database: {e}"),
    })
}
