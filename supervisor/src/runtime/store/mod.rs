//! Where sessions live: one interface, two backends.
//!
//! - [`files`]: the embedded store under `$SERVICE_HOME/sessions/` (the default, for one machine).
//! - [`postgres`]: one PostgreSQL database shared by many `serve` nodes (`serve --store postgres://…`).
//!
//! A [`Store`] holds session records, and hands out a [`SessionLog`] per session: its record saves, its history and
//! its event journal. The journal's subscriptions and SSE framing ([`super::journal`]) sit on top of a log and do not
//! know which backend is under it. Who runs a session's worker is decided by [`Store::claim`]: always this process
//! with files, the holder of an ownership lease with PostgreSQL.
//!
//! A turn's writes, on both backends, in this order: the record says `running`; `turn_started`; the turn's
//! events; its messages and the record that ends it; its end event. The invariant a crash must not break is that
//! every `turn_started` ends exactly once and no end is journaled without a start. A process killed between two
//! of these writes leaves a state the next load (files) or claim (PostgreSQL) repairs from the record, the history
//! and the journal (`runtime::session::repair`); over PostgreSQL a commit is all or nothing, so a turn whose writes
//! had not been committed is simply not there, unless it was acknowledged: a turn started for a client that is not
//! waiting for its end (`/run`'s 202, ACP, A2A) is acknowledged only once its `turn_started` is stored, and a turn's
//! end is reported only once stored. `SERVICE_FAULT_POINT` (`runtime::faults`) kills the process between these
//! writes for the tests (`tests/tests/suite/crash_points.rs`); `tests/tests/suite/chaos.rs` kills whole servers and
//! workers under load and checks the invariant over every session.
//!
//! The store lives inside `runtime/`, not beside it, because what it persists is the runtime's own vocabulary:
//! [`SessionRecord`], the journal's [`Published`] events, approval [`Grant`]s and the runtime's errors. Beside
//! `runtime/` it would import those back from the module that uses it, or take them along and leave `runtime/`
//! without its types. Outside `runtime/`, only `serve`, `migrate` and the tenant commands (`tokens`, `usage`) open a
//! backend (to choose one); everything else reaches sessions through `ServiceRuntime`.

pub mod files;
mod files_flush;
mod files_history;
pub mod files_lock;
mod files_names;
mod files_recent;
pub mod postgres;

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::FutureExt;
use service_ipc::{ChatMessage, EventPayload};

use super::approvals::Grant;
use super::error::Result;
use super::record::SessionRecord;

/// An event as journaled: the message and its JSON line (without the newline). Shared by every subscriber, so
/// fanning an event out to many SSE clients serialises it once, not once per client.
#[derive(Debug)]
pub struct Published {
    /// The event.
    pub msg: service_ipc::EventMsg,
    /// Its JSON, exactly as journaled.
    pub json: Arc<str>,
    /// Its sequence number (`msg.id`, parsed once).
    pub seq: u64,
}

/// The history line after which the history starts again (see [`SessionLog::reset_history`]).
pub(crate) const HISTORY_RESET: &str = r#"{"history_reset":true}"#;

/// When the store flushes a turn's end (its messages and the record that ends it) to disk: `turn_flush` in
/// config.toml. Either way both are written before the turn's end is reported, so a supervisor that crashes or is
/// killed afterwards loses nothing; the flush is what a power cut or a kernel crash would need. The PostgreSQL store
/// reads it as its transactions' `synchronous_commit` (see `PgStore::with_turn_flush`).
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Deserialize,
    serde::Serialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum TurnFlush {
    /// Flushed before the turn's end is reported: a client that saw a turn end finds it after a power cut.
    #[default]
    Turn,
    /// Flushed by a background thread within about 20 ms, which flushes what turns wrote in that time together
    /// (`files_flush`): each turn is spared the disk's flush time and the next turn the flush's CPU. A power cut
    /// may lose the ends of the turns of its last moment, and a process that exits leaves its last turn's flush to
    /// the kernel's writeback.
    Background,
}

impl TurnFlush {
    /// The value as config.toml spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnFlush::Turn => "turn",
            TurnFlush::Background => "background",
        }
    }
}

/// Called with each batch of events once it is stored, in sequence order, to broadcast it.
pub type Publish = Arc<dyn Fn(Vec<Arc<Published>>) + Send + Sync>;

/// Who may run a session's worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// This node: it holds the session now.
    Mine {
        /// The node whose lease expired, when this claim took the session over from it.
        taken_from: Option<String>,
        /// The lease was this node's already (live or lapsed): no other node has held the session since this
        /// node's previous claim, so nothing of it changed in the store but what this node wrote.
        renewed: bool,
    },
    /// The session's files are on another node (its home), which has not been seen for a lease: no node can run
    /// it with its files.
    Lost {
        /// The home node's id.
        node_id: String,
    },
    /// Another live node holds the session, or is its home; requests about it go there.
    Elsewhere {
        /// That node's id.
        node_id: String,
        /// Its advertised base URL.
        url: String,
    },
}

/// A shared store's connections and errors, for `/metrics`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Connections open.
    pub open: u64,
    /// Connections open and idle.
    pub idle: u64,
    /// Requests waiting for a connection.
    pub waiting: u64,
    /// Database errors since the start.
    pub errors: u64,
}

/// A bundle kept in a shared store for every node: `local/<id>:<version>`, whose content tar's SHA-256 is `digest`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedBundle {
    /// Bundle id.
    pub id: String,
    /// Version.
    pub version: String,
    /// The content's digest (`sha256:…`).
    pub digest: String,
}

/// The session records, and who runs each session.
#[async_trait::async_trait]
pub trait Store: Send + Sync {
    /// What the store is, for logs and errors: a directory, or a database host (never a password).
    fn describe(&self) -> String;

    /// True when other nodes share this store, so a record may change under this process.
    fn shared(&self) -> bool;

    /// This node's id among those sharing the store; None for a store of one process.
    fn node_id(&self) -> Option<String> {
        None
    }

    /// Writes a new session's record.
    async fn insert(&self, record: &SessionRecord) -> Result<()>;

    /// Writes a new session's record unless its tenant holds `limit` sessions already
    /// ([`RuntimeError::QuotaSessions`](crate::runtime::error::RuntimeError::QuotaSessions)). Counting and writing
    /// are one step: creations at once never pass the limit, on one node or many.
    async fn insert_within(&self, record: &SessionRecord, limit: u64) -> Result<()>;

    /// A session's record; None when there is no such session.
    async fn load(&self, id: &str) -> Result<Option<SessionRecord>>;

    /// Every session's record, oldest first; records that cannot be read are skipped.
    async fn list(&self) -> Result<Vec<SessionRecord>>;

    /// Deletes a session's record, journal and history.
    async fn delete(&self, id: &str) -> Result<()>;

    /// The log of session `id`, whose stored events go to `publish`.
    async fn open_log(&self, id: &str, publish: Publish) -> Result<Arc<dyn SessionLog>>;

    /// Takes (or keeps) the right to run session `id`'s worker on this node.
    async fn claim(&self, id: &str) -> Result<Claim>;

    /// Gives up session `id` (its worker stopped here), so another node may take it without waiting.
    async fn release(&self, id: &str);

    /// Extends this node's claims on the sessions in `live` (their workers run here), and lets go of the others; a
    /// shared store also records where this node serves and learns where the others do (see `reserved`).
    async fn renew(&self, live: &[String]) -> Result<()>;

    /// How long a claim lasts unless renewed; None when claims never expire (a store of one process).
    fn lease(&self) -> Option<std::time::Duration>;

    /// The address this node serves at, for other nodes to forward to, unless the operator gave one.
    fn bound_at(&self, _url: &str) {}

    /// Addresses of the store's own servers and of the other nodes sharing it, which no sandbox may reach even when a
    /// bundle lists them.
    fn reserved(&self) -> Vec<std::net::SocketAddr> {
        Vec::new()
    }

    /// The session that asked approval request `request_id`, when another node may hold it; None when unknown. A
    /// store of one process keeps no such index: its pending requests are all in memory.
    async fn approval_session(&self, _request_id: &str) -> Result<Option<String>> {
        Ok(None)
    }

    /// Keeps an `allow_always` grant of session `id` for the node that runs it next. A store of one process keeps
    /// none: grants live in its memory and end with it, as the specification asks of one runtime.
    async fn grant(&self, _id: &str, _grant: &Grant) -> Result<()> {
        Ok(())
    }

    /// The grants kept for session `id`.
    async fn grants(&self, _id: &str) -> Result<Vec<Grant>> {
        Ok(Vec::new())
    }

    /// Gives session `id` the name `name` (a client's context id, a turn a client follows) unless another session
    /// has it; returns the session the name belongs to now, so that the first of two racing claims wins.
    async fn name_session(&self, name: &str, id: &str) -> Result<String>;

    /// The session named `name`, if any.
    async fn named_session(&self, name: &str) -> Result<Option<String>>;

    /// Whether the store answers now (`/readyz`).
    async fn ready(&self) -> Result<()>;

    /// Which of `ids` have a record: a shared store's check that a session another node may have deleted is still
    /// there. A store of one process answers from its records too.
    async fn recorded(&self, ids: &[String]) -> Result<std::collections::HashSet<String>> {
        let mut out = std::collections::HashSet::new();
        for id in ids {
            if self.load(id).await?.is_some() {
                out.insert(id.clone());
            }
        }
        Ok(out)
    }

    /// Takes or renews this node's hold on the cluster's periodic job `job` for `lease`; false while another
    /// live node holds it. A store of one process is its own cluster: always true.
    async fn hold_job(&self, _job: &str, _lease: std::time::Duration) -> Result<bool> {
        Ok(true)
    }

    /// The database's connections and errors so far; None for a store of one process.
    fn stats(&self) -> Option<StoreStats> {
        None
    }

    /// Bytes the store's database takes on disk; None for a store of one process, or when it cannot say.
    async fn size_bytes(&self) -> Option<u64> {
        None
    }

    /// Keeps installed bundle `local/<id>:<version>`'s content tar (whose SHA-256 is `digest`) where every node
    /// sharing the store finds it. A store of one process keeps none: its bundles are its own.
    async fn share_bundle(&self, _bundle: &SharedBundle, _content: &[u8]) -> Result<()> {
        Ok(())
    }

    /// The bundles kept for every node (those of id `id` only, when given), without their contents.
    async fn shared_bundles(&self, _id: Option<&str>) -> Result<Vec<SharedBundle>> {
        Ok(Vec::new())
    }

    /// The content tar of shared bundle `local/<id>:<version>`, with its digest.
    async fn shared_bundle_content(
        &self,
        _id: &str,
        _version: &str,
    ) -> Result<Option<(String, Vec<u8>)>> {
        Ok(None)
    }

    /// Stops sharing bundle `local/<id>:<version>` (it was removed through a node).
    async fn unshare_bundle(&self, _id: &str, _version: &str) -> Result<()> {
        Ok(())
    }

    /// Where this store keeps tenants' tokens, quotas and spending.
    fn directory(&self) -> Arc<dyn crate::tenancy::Directory>;
}

/// One session's writes and reads. Writes are ordered: a reader on any node that sees a write sees every write made
/// before it through the same log.
pub trait SessionLog: Send + Sync {
    /// Saves the record; `flush` makes it durable before returning where the backend writes synchronously.
    fn save_record(&self, record: &SessionRecord, flush: bool) -> Result<()>;

    /// Readies a new session for the turn about to start (`record` is its record), ahead of the turn's own
    /// saves, where the backend gains by it.
    fn prepare_first_turn(&self, _record: &SessionRecord) -> Result<()> {
        Ok(())
    }

    /// Appends a turn's messages to the history, durably.
    fn append_history(&self, messages: &[ChatMessage]) -> Result<()>;

    /// Makes `messages` the whole history from now on (a compaction), durably. The log stays append-only: a
    /// [`HISTORY_RESET`] line, then the messages; readers start after the last such line.
    fn reset_history(&self, messages: &[ChatMessage]) -> Result<()>;

    /// Appends a turn's messages and saves the record that ends it, both durable when it returns (written, for the
    /// files store under [`TurnFlush::Background`]): the history's result, then the record's. A backend whose
    /// writes each wait for their own flush may do the two at once.
    fn save_turn_end(
        &self,
        messages: &[ChatMessage],
        record: &SessionRecord,
    ) -> (Result<()>, Result<()>) {
        (
            self.append_history(messages),
            self.save_record(record, true),
        )
    }

    /// The history, oldest first.
    fn history(&self) -> BoxFuture<'_, Result<Vec<ChatMessage>>>;

    /// The history log's length now (in the backend's own unit): the mark [`SessionLog::history_at`] takes.
    fn history_mark(&self) -> u64;

    /// The history log's lines (messages and reset lines) while its length was `mark`.
    fn history_lines(&self, mark: u64) -> BoxFuture<'_, Result<Vec<String>>>;

    /// Appends lines [`SessionLog::history_lines`] read (of another session: a fork), durably.
    fn append_history_lines(&self, lines: Vec<String>) -> Result<()>;

    /// The history as it was when the log's length was `mark`, oldest first (a rewind or a fork to before a turn).
    fn history_at(&self, mark: u64) -> BoxFuture<'_, Result<Vec<ChatMessage>>> {
        async move {
            let lines = self.history_lines(mark).await?;
            Ok(history_of(lines.iter().map(|l| l.as_bytes())))
        }
        .boxed()
    }

    /// The last `n` messages of the history, oldest first: all that a turn's model call reads of it (its memory
    /// window), without reading a long history whole.
    fn recent_history(&self, n: usize) -> BoxFuture<'_, Result<Vec<ChatMessage>>> {
        async move {
            let mut all = self.history().await?;
            all.drain(..all.len().saturating_sub(n));
            Ok(all)
        }
        .boxed()
    }

    /// Stamps events with the next sequence numbers and stores them as one batch, then hands them to the publisher.
    /// An error is returned after the events were still published, so live subscribers are not starved.
    fn append_events(&self, payloads: Vec<EventPayload>) -> Result<()>;

    /// Stored events with `after < seq <= upto`, in order.
    fn read_events(&self, after: u64, upto: u64) -> BoxFuture<'_, Result<Vec<Arc<Published>>>>;

    /// The highest sequence number published on this node.
    fn last_seq(&self) -> u64;

    /// Brings the published events up to what the store holds (events other nodes appended); a no-op when this
    /// process is the only writer.
    fn catch_up(&self) -> BoxFuture<'_, Result<()>>;

    /// Bytes the journal holds (the quota counts them).
    fn bytes(&self) -> u64;

    /// Runs `then` once every write made so far is stored.
    fn after_stored(&self, then: Box<dyn FnOnce() + Send>);
}

/// A journal line for `msg`, shared by every backend so the same event has the same bytes everywhere.
pub(crate) fn published(msg: service_ipc::EventMsg, seq: u64) -> Arc<Published> {
    let json = serde_json::to_string(&msg).unwrap_or_default();
    Arc::new(Published {
        msg,
        json: json.into(),
        seq,
    })
}

/// Stamps `payloads` as events `first..` of session `session_id`, created now.
pub(crate) fn stamp(
    session_id: &str,
    first: u64,
    payloads: Vec<EventPayload>,
) -> Vec<Arc<Published>> {
    let created_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    payloads
        .into_iter()
        .zip(first..)
        .map(|(payload, seq)| {
            let msg = service_ipc::EventMsg {
                id: seq.to_string(),
                session_id: session_id.to_string(),
                created_at: created_at.clone(),
                payload,
            };
            published(msg, seq)
        })
        .collect()
}

/// The history that `lines` of a history log make: the messages after the last reset line. A torn line (a crash
/// mid-append) does not parse and is skipped.
pub(crate) fn history_of<'a>(lines: impl Iterator<Item = &'a [u8]>) -> Vec<ChatMessage> {
    let mut history = Vec::new();
    for line in lines {
        if line == HISTORY_RESET.as_bytes() {
            history.clear();
        } else if let Ok(m) = serde_json::from_slice(line) {
            history.push(m);
        }
    }
    history
}
