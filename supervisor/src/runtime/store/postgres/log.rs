//! One session's log in PostgreSQL: an ordered writer that group-commits, and the reader that follows other nodes'
//! writes when `listen` hears of them.
//!
//! The runtime writes synchronously (`save_record`, `append_events` return at once): the writes queue up for the
//! session's writer task, which commits everything queued as one transaction and then publishes the events. While
//! the database is away the writer keeps the queue and retries, so nothing is lost while the process lives; the
//! session's events reach subscribers when the database is back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use service_ipc::{ChatMessage, EventMsg, EventPayload};
use tokio::sync::mpsc;
use tokio_postgres::error::SqlState;

use super::Inner;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::record::SessionRecord;
use crate::runtime::store::Published;
use crate::runtime::store::{Publish, SessionLog};

/// The most writes one transaction takes.
const GROUP: usize = 512;

/// The notification channel of stored events; the payload is `<session id> <last seq> <node id>`.
pub(super) const CHANNEL: &str = "service_events";

enum Op {
    Record(String),
    History(Vec<String>),
    Events(Vec<EventPayload>),
    Then(Then),
}

type Then = Box<dyn FnOnce() + Send>;

/// A write the transaction carries.
enum Write {
    Record(String),
    History(Vec<String>),
    Events(Vec<EventPayload>),
}

/// What the writer, the follower and the log share.
pub(crate) struct Shared {
    id: String,
    store: Weak<Inner>,
    publish: Publish,
    /// The highest sequence number published on this node.
    pub(super) published: AtomicU64,
    /// The highest sequence number this node knows is stored: the next append starts after it.
    stored: AtomicU64,
    bytes: AtomicU64,
    /// Rows of the session's history, counted as they are queued.
    history_rows: AtomicU64,
    /// Held while publishing, so batches go out in sequence order.
    publishing: tokio::sync::Mutex<()>,
}

/// A session's log.
pub struct PgLog {
    shared: Arc<Shared>,
    queue: mpsc::UnboundedSender<Op>,
}

impl PgLog {
    /// Opens session `id`'s log and starts its writer.
    pub(crate) async fn open(store: &Arc<Inner>, id: &str, publish: Publish) -> Result<PgLog> {
        let client = store.client().await?;
        let row = client
            .query_opt(
                "SELECT last_seq, journal_bytes, \
                 (SELECT count(*) FROM history WHERE session_id = $1) FROM sessions WHERE id = $1",
                &[&id],
            )
            .await
            .map_err(|e| store.error(e))?
            .ok_or_else(|| RuntimeError::SessionNotFound(id.to_string()))?;
        let (last, bytes, rows): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
        let shared = Arc::new(Shared {
            id: id.to_string(),
            store: Arc::downgrade(store),
            publish,
            published: AtomicU64::new(last as u64),
            stored: AtomicU64::new(last as u64),
            bytes: AtomicU64::new(bytes as u64),
            history_rows: AtomicU64::new(rows as u64),
            publishing: tokio::sync::Mutex::new(()),
        });
        store
            .logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), Arc::downgrade(&shared));
        let (queue, ops) = mpsc::unbounded_channel();
        tokio::spawn(write_loop(shared.clone(), ops));
        Ok(PgLog { shared, queue })
    }

    fn push_history(&self, lines: Vec<String>) {
        self.shared
            .history_rows
            .fetch_add(lines.len() as u64, Ordering::AcqRel);
        self.push(Op::History(lines));
    }

    fn push(&self, op: Op) {
        // The writer only ends when this log is dropped.
        let _ = self.queue.send(op);
    }

    /// The history's last `limit` messages (all of them for None: `LIMIT NULL`), oldest first.
    async fn last_messages(&self, limit: Option<i64>) -> Result<Vec<ChatMessage>> {
        let store = self.shared.store()?;
        let client = store.client().await?;
        let statement = client
            .prepare_cached(
                "SELECT message FROM (SELECT n, message FROM history WHERE session_id = $1 AND n > \
                 COALESCE((SELECT max(n) FROM history WHERE session_id = $1 AND message = $3), 0) \
                 ORDER BY n DESC LIMIT $2) recent ORDER BY n",
            )
            .await
            .map_err(|e| store.error(e))?;
        let rows = client
            .query(
                &statement,
                &[&self.shared.id, &limit, &super::super::HISTORY_RESET],
            )
            .await
            .map_err(|e| store.error(e))?;
        Ok(rows
            .iter()
            .filter_map(|r| serde_json::from_str(r.get(0)).ok())
            .collect())
    }
}

impl Drop for PgLog {
    fn drop(&mut self) {
        if let Some(store) = self.shared.store.upgrade() {
            let mut logs = store.logs.lock().unwrap_or_else(|p| p.into_inner());
            if logs
                .get(&self.shared.id)
                .is_some_and(|l| l.as_ptr() == Arc::as_ptr(&self.shared))
            {
                logs.remove(&self.shared.id);
            }
        }
    }
}

impl SessionLog for PgLog {
    fn save_record(&self, record: &SessionRecord, _flush: bool) -> Result<()> {
        self.push(Op::Record(
            serde_json::to_string(record).unwrap_or_default(),
        ));
        Ok(())
    }

    fn append_history(&self, messages: &[ChatMessage]) -> Result<()> {
        if !messages.is_empty() {
            let lines = messages
                .iter()
                .map(|m| serde_json::to_string(m).unwrap_or_default())
                .collect();
            self.push_history(lines);
        }
        Ok(())
    }

    fn reset_history(&self, messages: &[ChatMessage]) -> Result<()> {
        let mut lines = vec![super::super::HISTORY_RESET.to_string()];
        lines.extend(
            messages
                .iter()
                .map(|m| serde_json::to_string(m).unwrap_or_default()),
        );
        self.push_history(lines);
        Ok(())
    }

    fn history(&self) -> BoxFuture<'_, Result<Vec<ChatMessage>>> {
        self.last_messages(None).boxed()
    }

    /// Rows of the session's history.
    fn history_mark(&self) -> u64 {
        self.shared.history_rows.load(Ordering::Acquire)
    }

    fn history_lines(&self, mark: u64) -> BoxFuture<'_, Result<Vec<String>>> {
        async move {
            let store = self.shared.store()?;
            let rows = store
                .client()
                .await?
                .query(
                    "SELECT message FROM history WHERE session_id = $1 ORDER BY n LIMIT $2",
                    &[&self.shared.id, &i64::try_from(mark).unwrap_or(i64::MAX)],
                )
                .await
                .map_err(|e| store.error(e))?;
            Ok(rows.iter().map(|r| r.get::<_, String>(0)).collect())
        }
        .boxed()
    }

    fn append_history_lines(&self, lines: Vec<String>) -> Result<()> {
        if !lines.is_empty() {
            self.push_history(lines);
        }
        Ok(())
    }

    fn recent_history(&self, n: usize) -> BoxFuture<'_, Result<Vec<ChatMessage>>> {
        self.last_messages(Some(i64::try_from(n).unwrap_or(i64::MAX)))
            .boxed()
    }

    fn append_events(&self, payloads: Vec<EventPayload>) -> Result<()> {
        if !payloads.is_empty() {
            self.push(Op::Events(payloads));
        }
        Ok(())
    }

    fn read_events(&self, after: u64, upto: u64) -> BoxFuture<'_, Result<Vec<Arc<Published>>>> {
        self.shared.read(after, upto).boxed()
    }

    fn last_seq(&self) -> u64 {
        self.shared.published.load(Ordering::Acquire)
    }

    fn catch_up(&self) -> BoxFuture<'_, Result<()>> {
        self.shared.catch_up().boxed()
    }

    fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::Acquire)
    }

    fn after_stored(&self, then: Box<dyn FnOnce() + Send>) {
        self.push(Op::Then(then));
    }
}

impl Shared {
    fn store(&self) -> Result<Arc<Inner>> {
        self.store.upgrade().ok_or_else(|| RuntimeError::Database {
            host: "-".into(),
            message: "the store was closed".into(),
        })
    }

    /// The last sequence number the database holds for the session; None when the session is gone.
    async fn stored_last(
        &self,
        client: &deadpool_postgres::Object,
    ) -> std::result::Result<Option<u64>, tokio_postgres::Error> {
        let statement = client
            .prepare_cached("SELECT last_seq FROM sessions WHERE id = $1")
            .await?;
        let row = client.query_opt(&statement, &[&self.id]).await?;
        Ok(row.map(|r| r.get::<_, i64>(0) as u64))
    }

    /// Publishes what other nodes stored since this node last looked.
    pub(super) async fn catch_up(&self) -> Result<()> {
        let store = self.store()?;
        let client = store.client().await?;
        if let Some(last) = self
            .stored_last(&client)
            .await
            .map_err(|e| store.error(e))?
        {
            self.follow(last).await?;
        }
        Ok(())
    }

    /// Stored events with `after < seq <= upto`.
    async fn read(&self, after: u64, upto: u64) -> Result<Vec<Arc<Published>>> {
        if upto <= after {
            return Ok(Vec::new());
        }
        let store = self.store()?;
        let rows = store
            .client()
            .await?
            .query(
                "SELECT seq, body FROM events WHERE session_id = $1 AND seq > $2 AND seq <= $3 ORDER BY seq",
                &[&self.id, &(after as i64), &(upto as i64)],
            )
            .await
            .map_err(|e| store.error(e))?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let body: String = r.get(1);
                let msg: EventMsg = serde_json::from_str(&body).ok()?;
                Some(Arc::new(Published {
                    msg,
                    json: body.into(),
                    seq: r.get::<_, i64>(0) as u64,
                }))
            })
            .collect())
    }

    /// Publishes what the store holds up to `upto` that this node has not published: other nodes' events.
    pub(super) async fn follow(&self, upto: u64) -> Result<()> {
        let _order = self.publishing.lock().await;
        let from = self.published.load(Ordering::Acquire);
        if upto <= from {
            return Ok(());
        }
        let events = self.read(from, upto).await?;
        if let Some(last) = events.last().map(|e| e.seq) {
            self.published.store(last, Ordering::Release);
            (self.publish)(events);
        }
        Ok(())
    }

    /// Publishes a batch this node stored, after any other node's events before it.
    async fn publish_own(&self, events: Vec<Arc<Published>>) {
        let (Some(first), Some(last)) =
            (events.first().map(|e| e.seq), events.last().map(|e| e.seq))
        else {
            return;
        };
        let _order = self.publishing.lock().await;
        let from = self.published.load(Ordering::Acquire);
        if first > from + 1 {
            if let Ok(gap) = self.read(from, first - 1).await {
                if !gap.is_empty() {
                    (self.publish)(gap);
                }
            }
        }
        if last > self.published.load(Ordering::Acquire) {
            self.published.store(last, Ordering::Release);
            (self.publish)(events);
        }
    }
}

/// Why a commit did not happen.
enum Failed {
    /// The session is gone: its writes are dropped.
    Gone,
    /// The database is away or busy: try again.
    Transient(String),
    /// The database refused the writes themselves.
    Refused(String),
    /// Another writer appended first: try again at once.
    Conflict,
}

fn failed(e: tokio_postgres::Error) -> Failed {
    match e.code().map(|c| c.code()) {
        // Connection trouble (08), the server shutting down or starting (57), out of resources (53), a
        // serialisation conflict (40): worth another try.
        Some(c) if !["08", "57", "53", "40"].iter().any(|p| c.starts_with(p)) => {
            Failed::Refused(e.to_string())
        }
        _ => Failed::Transient(e.to_string()),
    }
}

/// The writer: commits what queued up, one transaction at a time, and publishes each batch after its commit.
async fn write_loop(shared: Arc<Shared>, mut queue: mpsc::UnboundedReceiver<Op>) {
    while let Some(op) = queue.recv().await {
        let (mut ops, mut thens) = (Vec::new(), Vec::new());
        let mut next = Some(op);
        while let Some(op) = next.take() {
            match op {
                Op::Record(r) => ops.push(Write::Record(r)),
                Op::History(h) => ops.push(Write::History(h)),
                Op::Events(e) => ops.push(Write::Events(e)),
                Op::Then(t) => thens.push(t),
            }
            if ops.len() + thens.len() < GROUP {
                next = queue.try_recv().ok();
            }
        }
        let mut delay = Duration::from_millis(50);
        let batches = loop {
            let Ok(store) = shared.store() else {
                return;
            };
            match commit(&store, &shared, &ops).await {
                Ok(batches) => break batches,
                Err(Failed::Gone) => break Vec::new(),
                Err(Failed::Conflict) => continue,
                Err(Failed::Refused(e)) => {
                    tracing::error!(session = %shared.id, "the database refused the session's writes: {e}");
                    break Vec::new();
                }
                Err(Failed::Transient(e)) => {
                    tracing::warn!(session = %shared.id, retry_ms = delay.as_millis() as u64,
                        "session writes wait for the database: {e}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
            }
        };
        for events in batches {
            shared.publish_own(events).await;
        }
        for then in thens {
            then();
        }
    }
}

/// A session's writes as one statement, so one round trip and its own transaction: the sequence numbers are claimed
/// by the `UPDATE … WHERE last_seq = <expected>`, and the events, history lines and approval requests are inserted
/// only when it matched (`claimed`). When another node appended meanwhile, nothing is written (or the events'
/// primary key refuses the taken numbers and the statement fails whole), and the writer tries again from the stored
/// last number. The `NOTIFY` goes out at its commit; `synchronous_commit` is set for that transaction alone. A
/// permission request's id is the worker's choice: when another session's request took it, the first keeps it
/// (`ON CONFLICT DO NOTHING`), and an answer to it goes to that session only.
const WRITE: &str =
    "WITH claimed AS (UPDATE sessions SET last_seq = $2, record = coalesce($3, record), \
     journal_bytes = journal_bytes + $4 WHERE id = $1 AND last_seq = $5 RETURNING id), \
     stored AS (INSERT INTO events (session_id, seq, body) \
     SELECT c.id, s, b FROM claimed c, unnest($6::bigint[], $7::text[]) AS t (s, b)), \
     remembered AS (INSERT INTO history (session_id, message) \
     SELECT c.id, m FROM claimed c, unnest($8::text[]) WITH ORDINALITY AS t (m, i) ORDER BY i), \
     indexed AS (INSERT INTO approvals (request_id, session_id) \
     SELECT r, c.id FROM claimed c, unnest($9::text[]) AS t (r) ON CONFLICT DO NOTHING) \
     SELECT count(*), \
     (CASE WHEN count(*) > 0 AND $10 <> '' THEN pg_notify($11, $10) END) IS NULL, \
     CASE WHEN $12 THEN set_config('synchronous_commit', 'off', true) END FROM claimed";

/// One commit for `ops`: the last record, the history, and the events with the sequence numbers after the last one
/// this node knows of (see [`WRITE`]).
async fn commit(
    store: &Inner,
    shared: &Shared,
    ops: &[Write],
) -> std::result::Result<Vec<Vec<Arc<Published>>>, Failed> {
    let record = ops.iter().rev().find_map(|op| match op {
        Write::Record(json) => Some(json.as_str()),
        _ => None,
    });
    let history: Vec<&str> = ops
        .iter()
        .filter_map(|op| match op {
            Write::History(lines) => Some(lines.iter().map(String::as_str)),
            _ => None,
        })
        .flatten()
        .collect();
    let count: usize = ops
        .iter()
        .map(|op| match op {
            Write::Events(p) => p.len(),
            _ => 0,
        })
        .sum();
    if record.is_none() && history.is_empty() && count == 0 {
        return Ok(Vec::new());
    }
    let expected = shared.stored.load(Ordering::Acquire);
    let mut batches = Vec::new();
    let (mut seqs, mut bodies) = (Vec::with_capacity(count), Vec::with_capacity(count));
    let mut asked: Vec<&str> = Vec::new();
    let mut bytes = 0i64;
    let mut next = expected + 1;
    for op in ops {
        if let Write::Events(payloads) = op {
            asked.extend(payloads.iter().filter_map(asked_id));
            let events = crate::runtime::store::stamp(&shared.id, next, payloads.clone());
            next += events.len() as u64;
            for e in &events {
                seqs.push(e.seq as i64);
                bodies.push(e.json.to_string());
                bytes += e.json.len() as i64 + 1;
            }
            batches.push(events);
        }
    }
    let last = next - 1;
    // Other nodes hear of new events; a commit of only a record or history lines announces nothing.
    let notice = match count {
        0 => String::new(),
        _ => format!("{} {last} {}", shared.id, store.node.id),
    };

    let client = store
        .pool
        .get()
        .await
        .map_err(|e| Failed::Transient(e.to_string()))?;
    let write = client.prepare_cached(WRITE).await.map_err(failed)?;
    let (last_i, expected_i) = (last as i64, expected as i64);
    let relaxed = store.async_commit.load(Ordering::Relaxed);
    let outcome = client
        .query_one(
            &write,
            &[
                &shared.id,
                &last_i,
                &record,
                &bytes,
                &expected_i,
                &seqs,
                &bodies,
                &history,
                &asked,
                &notice,
                &CHANNEL,
                &relaxed,
            ],
        )
        .await
        .and_then(|row| row.try_get::<_, i64>(0));
    let conflict = match outcome {
        Ok(1) => false,
        Ok(_) => true,
        Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) => true,
        Err(e) if e.code() == Some(&SqlState::FOREIGN_KEY_VIOLATION) => return Err(Failed::Gone),
        Err(e) => return Err(failed(e)),
    };
    if conflict {
        return Err(reclaim(&client, shared).await);
    }
    shared.stored.fetch_max(last, Ordering::AcqRel);
    shared.bytes.fetch_add(bytes as u64, Ordering::AcqRel);
    Ok(batches)
}

/// The request id an event asks the operator to answer.
fn asked_id(payload: &EventPayload) -> Option<&str> {
    match payload {
        EventPayload::PermissionRequested { request_id, .. }
        | EventPayload::NetworkPermissionRequested { request_id, .. } => Some(request_id),
        _ => None,
    }
}

/// After another writer appended to the session: the stored last sequence number, for the next try.
async fn reclaim(client: &deadpool_postgres::Object, shared: &Shared) -> Failed {
    match shared.stored_last(client).await {
        Ok(Some(last)) => {
            shared.stored.store(last, Ordering::Release);
            Failed::Conflict
        }
        Ok(None) => Failed::Gone,
        Err(e) => failed(e),
    }
}
