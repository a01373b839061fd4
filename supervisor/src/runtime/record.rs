//! `session.json`: the persisted session record, always replaced atomically (temp file, fsync, rename).
//!
//! A new session's first record is flushed to disk in the background instead: that fsync (0.85 ms on this
//! machine's disk, most of `create_session`) sat on every session create and one-shot `run`. As before, the
//! directory is not flushed: the new name is durable with the file system's next journal commit. The price: until
//! the flush lands, a power cut can lose (or leave unreadable) a session that has had no turn yet. A process crash
//! loses nothing (the page cache survives it), and every later save is synchronous.

use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};
use service_ipc::TurnStatus;

use super::error::{Result, RuntimeError};

/// Whether a turn is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionStatus {
    /// Ready for a turn.
    Idle,
    /// A turn is running.
    Running,
}

/// The bundle a session runs, pinned to the exact version it was created with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BundleRecord {
    /// Reference naming exactly this bundle (`local/id:version`, or the layout/project directory).
    pub reference: String,
    /// Bundle id.
    pub id: String,
    /// Version.
    pub version: String,
    /// Content digest.
    pub digest: String,
}

/// How the last turn ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastTurn {
    /// Turn id.
    pub turn_id: String,
    /// How it ended.
    pub status: TurnStatus,
    /// When it ended.
    pub finished_at: String,
}

/// The persisted session record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// Session id (a UUID).
    pub id: String,
    /// The reference the session was created from, as given.
    pub bundle_ref: String,
    /// The bundle it resolved to.
    pub bundle: BundleRecord,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
    /// Default working directory of turns (host path).
    pub cwd: String,
    /// Whether a turn is running.
    pub status: SessionStatus,
    /// The running turn, if any.
    pub active_turn: Option<String>,
    /// Turns started so far.
    pub turn_count: u64,
    /// How the last finished turn ended.
    pub last_turn: Option<LastTurn>,
}

/// Now as RFC 3339 with milliseconds.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

impl SessionRecord {
    /// Reads a record.
    pub fn load(path: &Path) -> Result<SessionRecord> {
        let bytes = std::fs::read(path).map_err(|e| RuntimeError::io("cannot read", path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| RuntimeError::Corrupt {
            path: path.to_path_buf(),
            message: format!("damaged session record: {e}"),
        })
    }

    /// Writes the record atomically: readers see the old or the new record, never a torn one.
    pub fn save(&self, path: &Path) -> Result<()> {
        self.write_atomically(path, true).map(drop)
    }

    /// Writes a new session's first record atomically, and flushes it to disk on a blocking thread (inline when
    /// there is no Tokio runtime).
    pub fn save_new(&self, path: &Path) -> Result<()> {
        let file = self.write_atomically(path, false)?;
        let flush = move || {
            let _ = file.sync_all();
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(flush)),
            Err(_) => flush(),
        }
        Ok(())
    }

    fn write_atomically(&self, path: &Path, sync: bool) -> Result<std::fs::File> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let json = serde_json::to_vec_pretty(self).unwrap_or_default();
        let mut tmp = tempfile::NamedTempFile::new_in(dir)
            .map_err(|e| RuntimeError::io("cannot write in", dir, e))?;
        tmp.write_all(&json)
            .and_then(|()| {
                if sync {
                    tmp.as_file().sync_all()
                } else {
                    Ok(())
                }
            })
            .map_err(|e| RuntimeError::io("cannot write", tmp.path().to_path_buf(), e))?;
        tmp.persist(path)
            .map_err(|e| RuntimeError::io("cannot replace", path, e.error))
    }
}
