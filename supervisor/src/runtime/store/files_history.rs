//! The files store's history (`history.jsonl`, one JSON line per message), and how a turn's end is saved.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use service_ipc::ChatMessage;

use super::files_recent::Recent;
use super::TurnFlush;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::record::SessionRecord;

/// Appends a turn's `messages` to the history in `dir` and saves its end `record` there: the history's result, then
/// the record's. Both are written before it returns; `flush` says whether they are also on disk. `recent` follows
/// the history's new end.
pub(super) fn save_turn_end(
    dir: &Path,
    messages: &[ChatMessage],
    record: &SessionRecord,
    flush: TurnFlush,
    recent: &mut Recent,
) -> (Result<()>, Result<()>) {
    let (path, record_path) = (dir.join("history.jsonl"), dir.join("session.json"));
    if messages.is_empty() {
        let saved = match flush {
            TurnFlush::Turn => record.save(&record_path),
            TurnFlush::Background => record
                .save_flushed_later(&record_path)
                .map(|file| super::files_flush::flush_soon(vec![file])),
        };
        return (Ok(()), saved);
    }
    // Written here, so the errors a write meets (a full disk among them) fail the turn whatever the flush.
    let buf = lines(messages);
    let appended = append_unflushed(&path, &buf);
    let at = appended.as_ref().ok().map(|(_, at)| *at);
    let (history, saved) = match (appended, flush) {
        (Err(e), _) => (Err(e), record.save(&record_path)),
        (Ok((file, _)), TurnFlush::Turn) => {
            // The two flushes at once: on ext4 they then share one journal commit. Measured with both files on
            // this machine's disk: one commit's time instead of two (5.9 against 9.9 ms while CI wrote to the same
            // disk). The history's goes to tokio's blocking pool, whose threads are kept: a thread started per turn
            // cost more than the flush it saved.
            let (done, synced) = std::sync::mpsc::sync_channel(1);
            let flushing = path.clone();
            let sync = move || {
                let flushed = file.sync_data();
                let _ = done
                    .send(flushed.map_err(|e| RuntimeError::io("cannot append to", &flushing, e)));
            };
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn_blocking(sync)),
                Err(_) => drop(std::thread::spawn(sync)),
            }
            let saved = record.save(&record_path);
            let history = synced.recv().unwrap_or_else(|_| {
                let stopped = std::io::Error::other("its writer stopped before it was done");
                Err(RuntimeError::io("cannot append to", &path, stopped))
            });
            (history, saved)
        }
        (Ok((file, _)), TurnFlush::Background) => {
            let saved = record.save_flushed_later(&record_path);
            let mut files = vec![file];
            let saved = saved.map(|record| files.push(record));
            super::files_flush::flush_soon(files);
            (Ok(()), saved)
        }
    };
    match at {
        Some(at) => recent.appended(at, buf.len() as u64, messages, false),
        None => recent.forget(),
    }
    (history, saved)
}

/// `messages` as history lines, one JSON object each.
pub(super) fn lines(messages: &[ChatMessage]) -> Vec<u8> {
    let mut buf = Vec::new();
    for m in messages {
        buf.extend(serde_json::to_vec(m).unwrap_or_default());
        buf.push(b'\n');
    }
    buf
}

/// Appends `buf` to the file at `path` and flushes it; the file's length before.
pub(super) fn append_lines(path: &Path, buf: &[u8]) -> Result<u64> {
    let (file, at) = append_unflushed(path, buf)?;
    file.sync_data()
        .map_err(|e| RuntimeError::io("cannot append to", path, e))?;
    Ok(at)
}

/// Appends `buf` to the file at `path`, unflushed; the open file, to flush, and its length before.
fn append_unflushed(path: &Path, buf: &[u8]) -> Result<(File, u64)> {
    let mut file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| RuntimeError::io("cannot open", path, e))?;
    let at = file
        .metadata()
        .map_err(|e| RuntimeError::io("cannot read", path, e))?
        .len();
    file.write_all(buf)
        .map_err(|e| RuntimeError::io("cannot append to", path, e))?;
    Ok((file, at))
}

/// An end of the file at `path` that starts at a line and holds at least its last `n` complete lines (and a torn
/// line after them, if any), read backwards in blocks; and the file's length.
pub(super) fn tail_lines(path: &Path, n: usize) -> std::io::Result<(Vec<u8>, u64)> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = File::open(path)?;
    let len = file.metadata()?.len();
    let mut start = len;
    let mut tail = Vec::new();
    // A memory window of messages is usually a few KiB: start small, double.
    let mut block: u64 = 16 * 1024;
    // More than `n` line ends: the line before the last `n` has ended, so they are all whole.
    while start > 0 && tail.iter().filter(|b| **b == b'\n').count() <= n {
        let from = start.saturating_sub(block);
        block = block.saturating_mul(2);
        let mut read = vec![0; (start - from) as usize];
        file.seek(SeekFrom::Start(from))?;
        file.read_exact(&mut read)?;
        read.extend_from_slice(&tail);
        tail = read;
        start = from;
    }
    if start > 0 {
        // The first line began before what was read.
        let first_end = tail.iter().position(|b| *b == b'\n').map_or(0, |i| i + 1);
        tail.drain(..first_end);
    }
    Ok((tail, len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_ipc::ChatRole;

    fn record(dir: &Path) -> SessionRecord {
        let record: SessionRecord = serde_json::from_value(serde_json::json!({
            "id": "s1", "bundle_ref": "b",
            "bundle": {"reference": "local/b:1.0.0", "id": "b", "version": "1.0.0", "digest": "sha256:0"},
            "created_at": "2026-01-01T00:00:00.000Z", "updated_at": "2026-01-01T00:00:00.000Z",
            "cwd": "/tmp", "status": "idle", "active_turn": null, "turn_count": 0, "last_turn": null
        }))
        .unwrap();
        record.save(&dir.join("session.json")).unwrap();
        record
    }

    /// A turn's end saved in `dir`, with nothing kept of the history before.
    fn end(
        dir: &Path,
        messages: &[ChatMessage],
        record: &SessionRecord,
        flush: TurnFlush,
    ) -> (Result<()>, Result<()>) {
        save_turn_end(dir, messages, record, flush, &mut Recent::default())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_turn_end_is_written_before_it_returns_whether_flushed_then_or_after() {
        let messages = [
            ChatMessage::text(ChatRole::User, "hi"),
            ChatMessage::text(ChatRole::Assistant, "hello"),
        ];
        for flush in [TurnFlush::Turn, TurnFlush::Background] {
            let dir = tempfile::TempDir::new().unwrap();
            let mut record = record(dir.path());
            for turn in 1..=2 {
                record.turn_count = turn;
                let (history, saved) = end(dir.path(), &messages, &record, flush);
                history.unwrap();
                saved.unwrap();
                // Read at once: a write left to the flushing thread would not be there yet.
                let text = std::fs::read(dir.path().join("history.jsonl")).unwrap();
                assert_eq!(text, lines(&messages).repeat(turn as usize), "{flush:?}");
                let path = dir.path().join("session.json");
                assert_eq!(SessionRecord::load(&path).unwrap().turn_count, turn);
            }
            // A turn without messages saves its record alone.
            record.turn_count = 3;
            let (history, saved) = end(dir.path(), &[], &record, flush);
            history.unwrap();
            saved.unwrap();
            let path = dir.path().join("session.json");
            assert_eq!(SessionRecord::load(&path).unwrap().turn_count, 3);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 1)]
    async fn a_history_that_cannot_be_written_fails_the_turn_end_when_flushed_after_too() {
        for flush in [TurnFlush::Turn, TurnFlush::Background] {
            let dir = tempfile::TempDir::new().unwrap();
            let mut record = record(dir.path());
            // A directory where the history should be: the append cannot open it.
            std::fs::create_dir(dir.path().join("history.jsonl")).unwrap();
            record.turn_count = 1;
            let messages = [ChatMessage::text(ChatRole::User, "hi")];
            let (history, saved) = end(dir.path(), &messages, &record, flush);
            let e = history.unwrap_err().to_string();
            assert!(e.contains("history.jsonl"), "{flush:?}: {e}");
            saved.unwrap();
        }
    }

    fn text_lines(bytes: &[u8]) -> Vec<String> {
        String::from_utf8_lossy(bytes)
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn a_tail_read_holds_the_last_whole_lines_across_blocks_and_a_torn_end() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("history.jsonl");
        // About 200 KiB: the last lines come from more than one block.
        let all: Vec<String> = (0..6000)
            .map(|i| format!("{{\"line\": {i:>20}}}"))
            .collect();
        std::fs::write(&path, all.join("\n") + "\n").unwrap();
        // Whole lines only, the file's last ones, at least as many as asked.
        let suffix = |n: usize| {
            let tail = text_lines(&tail_lines(&path, n).unwrap().0);
            assert!(
                tail.len() >= n.min(all.len()),
                "{} lines for {n}",
                tail.len()
            );
            assert_eq!(tail, all[all.len() - tail.len()..]);
            tail.len()
        };
        assert!(suffix(40) < all.len(), "a short tail read the whole file");
        suffix(5000);
        assert_eq!(suffix(10_000), all.len());

        // A crash mid-append leaves a torn last line: the whole lines before it are all there.
        std::fs::write(&path, all.join("\n") + "\n{\"line\": 60").unwrap();
        let tail = text_lines(&tail_lines(&path, 3).unwrap().0);
        let (torn, whole) = tail.split_last().unwrap();
        assert_eq!(torn, "{\"line\": 60");
        assert!(whole.len() >= 3);
        assert_eq!(whole, &all[all.len() - whole.len()..]);
    }
}
