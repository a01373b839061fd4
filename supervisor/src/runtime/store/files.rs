//! The embedded store: `$SERVICE_HOME/sessions/<id>/` with `session.json` (see [`super::super::record`]),
//! `events.jsonl` (one JSON line per event) and `history.jsonl` (one line per message). One process owns it, so
//! every claim is this process's, and every write is made before the call returns.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use futures::FutureExt;
use service_ipc::{ChatMessage, EventMsg, EventPayload};

use super::files_history::{append_lines, lines, tail_lines};
use super::files_recent::Recent;
use super::Published;
use super::{Claim, Publish, SessionLog, Store, TurnFlush};
use crate::home::ServiceHome;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::record::SessionRecord;

/// The session files under one `$SERVICE_HOME`.
pub struct FilesStore {
    home: ServiceHome,
    flush: TurnFlush,
    /// Held while a session is counted against its tenant's quota and inserted.
    admitting: tokio::sync::Mutex<()>,
}

impl FilesStore {
    /// The store under `home`, flushing each turn's end before it is reported.
    pub fn new(home: ServiceHome) -> Self {
        FilesStore {
            home,
            flush: TurnFlush::Turn,
            admitting: tokio::sync::Mutex::new(()),
        }
    }

    /// The same store, flushing turns' ends as `flush` says.
    pub fn with_turn_flush(mut self, flush: TurnFlush) -> Self {
        self.flush = flush;
        self
    }

    fn record_path(&self, id: &str) -> PathBuf {
        self.home.sessions().join(id).join("session.json")
    }
}

#[async_trait::async_trait]
impl Store for FilesStore {
    fn describe(&self) -> String {
        self.home.root().display().to_string()
    }

    fn shared(&self) -> bool {
        false
    }

    fn directory(&self) -> Arc<dyn crate::tenancy::Directory> {
        Arc::new(crate::tenancy::files::FilesDirectory::new(&self.home))
    }

    async fn insert(&self, record: &SessionRecord) -> Result<()> {
        record.save_new(&self.record_path(&record.id))
    }

    async fn insert_within(&self, record: &SessionRecord, limit: u64) -> Result<()> {
        // One process owns the store, so its lock makes counting and inserting one step.
        let _admitting = self.admitting.lock().await;
        let tenant = record.tenant();
        let have = self
            .list()
            .await?
            .iter()
            .filter(|r| r.tenant() == tenant)
            .count() as u64;
        if have >= limit {
            return Err(RuntimeError::QuotaSessions {
                tenant: tenant.to_string(),
                have,
            });
        }
        self.insert(record).await
    }

    async fn load(&self, id: &str) -> Result<Option<SessionRecord>> {
        let path = self.record_path(id);
        if !path.is_file() {
            return Ok(None);
        }
        SessionRecord::load(&path).map(Some)
    }

    async fn list(&self) -> Result<Vec<SessionRecord>> {
        let dir = self.home.sessions();
        let entries = match std::fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(RuntimeError::io("cannot read", &dir, e)),
        };
        let mut out: Vec<SessionRecord> = entries
            .flatten()
            .filter_map(|e| SessionRecord::load(&e.path().join("session.json")).ok())
            .collect();
        out.sort_by(|a, b| (&a.created_at, &a.id).cmp(&(&b.created_at, &b.id)));
        Ok(out)
    }

    async fn delete(&self, id: &str) -> Result<()> {
        super::files_names::forget(&self.home, id);
        let dir = self.home.sessions().join(id);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(RuntimeError::io("cannot delete", &dir, e))
            }
            _ => Ok(()),
        }
    }

    async fn open_log(&self, id: &str, publish: Publish) -> Result<Arc<dyn SessionLog>> {
        let dir = self.home.sessions().join(id);
        Ok(Arc::new(FilesLog::open(id, &dir, publish, self.flush)?))
    }

    async fn name_session(&self, name: &str, id: &str) -> Result<String> {
        super::files_names::claim(&self.home, name, id)
    }

    async fn named_session(&self, name: &str) -> Result<Option<String>> {
        Ok(super::files_names::find(&self.home, name))
    }

    async fn claim(&self, _id: &str) -> Result<Claim> {
        Ok(Claim::Mine {
            taken_from: None,
            renewed: true,
        })
    }

    async fn release(&self, _id: &str) {}

    async fn renew(&self, _live: &[String]) -> Result<()> {
        Ok(())
    }

    fn lease(&self) -> Option<std::time::Duration> {
        None
    }

    async fn ready(&self) -> Result<()> {
        Ok(())
    }
}

/// One session's files.
pub struct FilesLog {
    session_id: String,
    dir: PathBuf,
    journal: PathBuf,
    state: Mutex<JournalFile>,
    publish: Publish,
    flush: TurnFlush,
    /// The history's end, as last read or written; held while the history is written.
    recent: Mutex<Recent>,
}

struct JournalFile {
    file: File,
    last_seq: u64,
    /// Bytes in the journal file.
    bytes: u64,
}

impl FilesLog {
    /// Opens (or creates) the journal in `dir`. A torn last line, left by a crash mid-write, is cut off.
    pub fn open(
        session_id: &str,
        dir: &Path,
        publish: Publish,
        flush: TurnFlush,
    ) -> Result<FilesLog> {
        let journal = dir.join("events.jsonl");
        let last_seq = repair(&journal)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&journal)
            .map_err(|e| RuntimeError::io("cannot open", &journal, e))?;
        let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        Ok(FilesLog {
            session_id: session_id.to_string(),
            dir: dir.to_path_buf(),
            journal,
            state: Mutex::new(JournalFile {
                file,
                last_seq,
                bytes,
            }),
            publish,
            flush,
            recent: Mutex::new(Recent::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, JournalFile> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, Recent> {
        self.recent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends `messages` to the history, after a reset line when `reset`, and flushes them.
    fn append_messages(&self, messages: &[ChatMessage], reset: bool) -> Result<()> {
        let mut buf = Vec::new();
        if reset {
            buf.extend_from_slice(super::HISTORY_RESET.as_bytes());
            buf.push(b'\n');
        }
        buf.extend_from_slice(&lines(messages));
        let mut recent = self.recent();
        match append_lines(&self.dir.join("history.jsonl"), &buf) {
            Ok(at) => {
                recent.appended(at, buf.len() as u64, messages, reset);
                Ok(())
            }
            Err(e) => {
                recent.forget();
                Err(e)
            }
        }
    }
}

impl SessionLog for FilesLog {
    fn save_record(&self, record: &SessionRecord, flush: bool) -> Result<()> {
        let path = self.dir.join("session.json");
        if flush {
            record.save(&path)
        } else {
            record.save_unflushed(&path)
        }
    }

    /// Makes the record's spare copy and an empty history, and flushes them on a blocking thread: the first turn
    /// then writes only into files that are on disk. The first `fsync` of a new file on ext4 without a journal also
    /// writes out its directory (`ext4_sync_parent`); it happens here, while a one-shot's first model call is on
    /// the wire, rather than as the turn ends.
    fn prepare_first_turn(&self, record: &SessionRecord) -> Result<()> {
        let spare = record.save_spare(&self.dir.join("session.json"))?;
        let path = self.dir.join("history.jsonl");
        let history = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| RuntimeError::io("cannot create", &path, e))?;
        crate::runtime::record::flush_later(vec![spare, history]);
        Ok(())
    }

    fn append_history(&self, messages: &[ChatMessage]) -> Result<()> {
        if messages.is_empty() {
            return Ok(());
        }
        self.append_messages(messages, false)
    }

    fn reset_history(&self, messages: &[ChatMessage]) -> Result<()> {
        self.append_messages(messages, true)
    }

    fn save_turn_end(
        &self,
        messages: &[ChatMessage],
        record: &SessionRecord,
    ) -> (Result<()>, Result<()>) {
        let mut recent = self.recent();
        super::files_history::save_turn_end(&self.dir, messages, record, self.flush, &mut recent)
    }

    fn history(&self) -> BoxFuture<'_, Result<Vec<ChatMessage>>> {
        let path = self.dir.join("history.jsonl");
        async move {
            let text = match std::fs::read_to_string(&path) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(RuntimeError::io("cannot read", &path, e)),
            };
            Ok(super::history_of(text.lines().map(str::as_bytes)))
        }
        .boxed()
    }

    /// Bytes in `history.jsonl`.
    fn history_mark(&self) -> u64 {
        std::fs::metadata(self.dir.join("history.jsonl"))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    fn history_lines(&self, mark: u64) -> BoxFuture<'_, Result<Vec<String>>> {
        let path = self.dir.join("history.jsonl");
        async move {
            let mut bytes = match std::fs::read(&path) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(RuntimeError::io("cannot read", &path, e)),
            };
            bytes.truncate(usize::try_from(mark).unwrap_or(usize::MAX));
            Ok(bytes
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect())
        }
        .boxed()
    }

    fn append_history_lines(&self, lines: Vec<String>) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        let mut buf = lines.join("\n").into_bytes();
        buf.push(b'\n');
        // Lines not parsed here: the next read goes to the file.
        let mut recent = self.recent();
        recent.forget();
        append_lines(&self.dir.join("history.jsonl"), &buf).map(drop)
    }

    /// From what is kept of the history's end while the file has not changed (see `files_recent`), else from the
    /// file's tail.
    fn recent_history(&self, n: usize) -> BoxFuture<'_, Result<Vec<ChatMessage>>> {
        let path = self.dir.join("history.jsonl");
        async move {
            let mut recent = self.recent();
            let len = match std::fs::metadata(&path) {
                Ok(m) => m.len(),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(RuntimeError::io("cannot read", &path, e)),
            };
            if let Some(kept) = recent.get(len, n) {
                return Ok(kept);
            }
            let (tail, len) = match tail_lines(&path, n) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
                Err(e) => return Err(RuntimeError::io("cannot read", &path, e)),
            };
            // Only the last lines are parsed (one more for a torn end, which does not parse).
            let mut messages: Vec<ChatMessage> = tail
                .rsplit(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .take(n.saturating_add(1))
                .take_while(|l| *l != super::HISTORY_RESET.as_bytes())
                .filter_map(|l| serde_json::from_slice(l).ok())
                .collect();
            messages.truncate(n);
            messages.reverse();
            recent.read(len, &messages, n);
            Ok(messages)
        }
        .boxed()
    }

    /// One write to the journal and one publication, under one lock so journal order, sequence order and
    /// publication order agree.
    fn append_events(&self, payloads: Vec<EventPayload>) -> Result<()> {
        if payloads.is_empty() {
            return Ok(());
        }
        let mut state = self.state();
        let events = super::stamp(&self.session_id, state.last_seq + 1, payloads);
        state.last_seq += events.len() as u64;
        let mut lines = Vec::new();
        for e in &events {
            lines.extend_from_slice(e.json.as_bytes());
            lines.push(b'\n');
        }
        let written = state.file.write_all(&lines);
        match &written {
            Ok(()) => state.bytes += lines.len() as u64,
            // A write cut short (a full disk) would leave a torn line: cut it off, so the journal stays whole
            // lines and the next write starts a line of its own.
            Err(_) => {
                let _ = state.file.set_len(state.bytes);
            }
        }
        (self.publish)(events);
        drop(state);
        written.map_err(|e| RuntimeError::io("cannot append to", &self.journal, e))
    }

    fn read_events(&self, after: u64, upto: u64) -> BoxFuture<'_, Result<Vec<Arc<Published>>>> {
        let path = self.journal.clone();
        async move {
            if upto <= after {
                return Ok(Vec::new());
            }
            // A long journal is a long read: off the async threads.
            let reading = path.clone();
            tokio::task::spawn_blocking(move || read_journal(&reading, after, upto))
                .await
                .map_err(|e| RuntimeError::io("cannot read", &path, std::io::Error::other(e)))?
        }
        .boxed()
    }

    fn last_seq(&self) -> u64 {
        self.state().last_seq
    }

    fn catch_up(&self) -> BoxFuture<'_, Result<()>> {
        futures::future::ready(Ok(())).boxed()
    }

    fn bytes(&self) -> u64 {
        self.state().bytes
    }

    fn after_stored(&self, then: Box<dyn FnOnce() + Send>) {
        then()
    }
}

/// Journaled events with `after < seq <= upto`.
fn read_journal(path: &Path, after: u64, upto: u64) -> Result<Vec<Arc<Published>>> {
    let file = File::open(path).map_err(|e| RuntimeError::io("cannot read", path, e))?;
    let mut out = Vec::new();
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| RuntimeError::io("cannot read", path, e))?;
        let Ok(msg) = serde_json::from_str::<EventMsg>(&line) else {
            continue;
        };
        match msg.seq() {
            Some(s) if s > upto => break,
            Some(s) if s > after => out.push(Arc::new(Published {
                msg,
                json: line.into(),
                seq: s,
            })),
            _ => {}
        }
    }
    Ok(out)
}

/// Finds the last sequence number in the journal and cuts a torn final line.
fn repair(path: &Path) -> Result<u64> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(RuntimeError::io("cannot read", path, e)),
    };
    let mut good_len = 0;
    let mut last_seq = 0;
    let mut pos = 0;
    while let Some(nl) = bytes[pos..].iter().position(|b| *b == b'\n') {
        let line = &bytes[pos..pos + nl];
        match serde_json::from_slice::<EventMsg>(line)
            .ok()
            .and_then(|m| m.seq())
        {
            Some(seq) => last_seq = seq,
            None => break,
        }
        pos += nl + 1;
        good_len = pos;
    }
    if good_len < bytes.len() {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| RuntimeError::io("cannot repair", path, e))?;
        file.set_len(good_len as u64)
            .map_err(|e| RuntimeError::io("cannot repair", path, e))?;
    }
    Ok(last_seq)
}

#[cfg(test)]
mod tests {
    use super::{FilesStore, Store};
    use crate::home::ServiceHome;
    use crate::runtime::record::SessionRecord;

    /// An idle session's record, `s1`.
    fn record() -> SessionRecord {
        serde_json::from_value(serde_json::json!({
            "id": "s1", "bundle_ref": "b",
            "bundle": {"reference": "local/b:1.0.0", "id": "b", "version": "1.0.0", "digest": "sha256:0"},
            "created_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:00.000Z",
            "cwd": "/tmp", "status": "idle", "active_turn": null, "turn_count": 0, "last_turn": null
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn a_session_prepared_for_its_first_turn_has_every_file_and_its_saves_make_none() {
        use std::os::unix::fs::MetadataExt;
        let home = tempfile::TempDir::new().unwrap();
        let store = FilesStore::new(ServiceHome::new(home.path()));
        let mut record = record();
        let dir = home.path().join("sessions/s1");
        std::fs::create_dir_all(&dir).unwrap();
        store.insert(&record).await.unwrap();
        let log = store
            .open_log("s1", std::sync::Arc::new(|_| {}))
            .await
            .unwrap();
        log.prepare_first_turn(&record).unwrap();
        let inodes = || {
            let mut found: Vec<(String, u64)> = std::fs::read_dir(&dir)
                .unwrap()
                .map(|e| e.unwrap())
                .map(|e| {
                    (
                        e.file_name().into_string().unwrap(),
                        e.metadata().unwrap().ino(),
                    )
                })
                .collect();
            found.sort();
            found
        };
        let made = inodes();
        let names: Vec<&str> = made.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                ".session.json.spare",
                "events.jsonl",
                "history.jsonl",
                "session.json"
            ]
        );
        assert_eq!(
            std::fs::read(dir.join(".session.json.spare")).unwrap(),
            std::fs::read(dir.join("session.json")).unwrap()
        );
        assert_eq!(std::fs::read(dir.join("history.jsonl")).unwrap(), b"");
        // The first turn's saves swap the record with its spare, as every later one does.
        let path = dir.join("session.json");
        record.turn_count = 1;
        record.save_unflushed(&path).unwrap();
        record.save(&path).unwrap();
        assert_eq!(SessionRecord::load(&path).unwrap().turn_count, 1);
        let mut before: Vec<u64> = made.iter().map(|(_, i)| *i).collect();
        let mut after: Vec<u64> = inodes().iter().map(|(_, i)| *i).collect();
        before.sort();
        after.sort();
        assert_eq!(before, after, "a save made a file");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn the_memory_window_follows_every_write_and_a_write_from_elsewhere() {
        use service_ipc::{ChatMessage, ChatRole};
        let said = |texts: &[&str]| -> Vec<ChatMessage> {
            texts
                .iter()
                .map(|t| ChatMessage::text(ChatRole::User, *t))
                .collect()
        };
        let home = tempfile::TempDir::new().unwrap();
        let dir = home.path().join("s1");
        std::fs::create_dir_all(&dir).unwrap();
        let record = record();
        for flush in [super::TurnFlush::Turn, super::TurnFlush::Background] {
            let _ = std::fs::remove_file(dir.join("history.jsonl"));
            let log =
                super::FilesLog::open("s1", &dir, std::sync::Arc::new(|_| {}), flush).unwrap();
            let log: &dyn super::SessionLog = &log;
            let window = |n| async move {
                let got = log.recent_history(n).await.unwrap();
                got.into_iter().map(|m| m.content).collect::<Vec<_>>()
            };
            assert!(window(2).await.is_empty());
            log.append_history(&said(&["a", "b", "c"])).unwrap();
            assert_eq!(window(2).await, ["b", "c"]);
            let (history, saved) = log.save_turn_end(&said(&["d", "e"]), &record);
            history.unwrap();
            saved.unwrap();
            assert_eq!(window(2).await, ["d", "e"]);
            // Another process appends: the window reads it from the file.
            let mut file = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join("history.jsonl"))
                .unwrap();
            std::io::Write::write_all(&mut file, &super::lines(&said(&["f"]))).unwrap();
            assert_eq!(window(2).await, ["e", "f"]);
            log.reset_history(&said(&["summary"])).unwrap();
            assert_eq!(window(2).await, ["summary"]);
            log.append_history(&said(&["g"])).unwrap();
            assert_eq!(window(3).await, ["summary", "g"]);
            log.append_history_lines(vec![r#"{"role":"user","content":"h"}"#.into()])
                .unwrap();
            assert_eq!(window(2).await, ["g", "h"]);
            // What a fresh reader of the file sees, the window saw.
            let fresh =
                super::FilesLog::open("s1", &dir, std::sync::Arc::new(|_| {}), flush).unwrap();
            let all = super::SessionLog::recent_history(&fresh, 2).await.unwrap();
            let all: Vec<String> = all.into_iter().map(|m| m.content).collect();
            assert_eq!(all, ["g", "h"], "{flush:?}");
        }
    }
}
