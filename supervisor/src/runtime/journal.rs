//! The per-session event journal (`events.jsonl`) and its broadcast fan-out.
//!
//! Each event gets the next sequence number, is appended to the journal as one JSON line, and only then is
//! broadcast, all under one lock so journal order, sequence order and broadcast order agree. A subscriber that
//! falls behind the broadcast channel catches up from the journal, so no subscriber misses an event; a subscriber
//! that starts after a given sequence number gets the journal's later events first, then live ones, without a gap
//! or a duplicate.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use futures::Stream;
use service_ipc::{EventMsg, EventPayload};
use tokio::sync::broadcast;

use super::error::{Result, RuntimeError};

/// Events buffered per subscriber before it counts as lagging (and catches up from the journal).
const BROADCAST_CAPACITY: usize = 4096;

/// A stream of session events.
pub type EventStream = Pin<Box<dyn Stream<Item = EventMsg> + Send>>;

/// A stream of published events, each with its JSON serialised once for every subscriber.
pub type PublishedStream = Pin<Box<dyn Stream<Item = Arc<Published>> + Send>>;

/// An event as journaled: the message and its JSON line (without the newline). Shared by every subscriber, so
/// fanning an event out to many SSE clients serialises it once, not once per client.
#[derive(Debug)]
pub struct Published {
    /// The event.
    pub msg: EventMsg,
    /// Its JSON, exactly as journaled.
    pub json: Arc<str>,
}

impl Published {
    fn seq(&self) -> Option<u64> {
        self.msg.seq()
    }
}

/// One session's journal and broadcast channel.
pub struct Journal {
    session_id: String,
    path: PathBuf,
    state: Mutex<State>,
    tx: broadcast::Sender<Arc<Published>>,
}

struct State {
    file: File,
    last_seq: u64,
}

impl Journal {
    /// Opens (or creates) the journal at `path`. A torn last line, left by a crash mid-write, is cut off.
    pub fn open(session_id: &str, path: &Path) -> Result<Journal> {
        let last_seq = repair(path)?;
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| RuntimeError::io("cannot open", path, e))?;
        let (tx, _) = broadcast::channel(BROADCAST_CAPACITY);
        Ok(Journal {
            session_id: session_id.to_string(),
            path: path.to_path_buf(),
            state: Mutex::new(State { file, last_seq }),
            tx,
        })
    }

    /// Stamps, journals and broadcasts one event. A journal write failure is returned after the event was still
    /// broadcast, so live subscribers are not starved by a full disk.
    pub fn emit(&self, payload: EventPayload) -> Result<EventMsg> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.last_seq += 1;
        let msg = EventMsg {
            id: state.last_seq.to_string(),
            session_id: self.session_id.clone(),
            created_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            payload,
        };
        let json = serde_json::to_string(&msg).unwrap_or_default();
        let mut line = Vec::with_capacity(json.len() + 1);
        line.extend_from_slice(json.as_bytes());
        line.push(b'\n');
        let written = state.file.write_all(&line);
        let _ = self.tx.send(Arc::new(Published {
            msg: msg.clone(),
            json: json.into(),
        }));
        drop(state);
        written.map_err(|e| RuntimeError::io("cannot append to", &self.path, e))?;
        Ok(msg)
    }

    /// Sequence number of the last event written.
    pub fn last_seq(&self) -> u64 {
        self.state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .last_seq
    }

    /// Journaled events with `after < seq <= upto`.
    pub fn read_range(&self, after: u64, upto: u64) -> Result<Vec<Arc<Published>>> {
        if upto <= after {
            return Ok(Vec::new());
        }
        let file =
            File::open(&self.path).map_err(|e| RuntimeError::io("cannot read", &self.path, e))?;
        let mut out = Vec::new();
        for line in BufReader::new(file).lines() {
            let line = line.map_err(|e| RuntimeError::io("cannot read", &self.path, e))?;
            let Ok(msg) = serde_json::from_str::<EventMsg>(&line) else {
                continue;
            };
            match msg.seq() {
                Some(s) if s > upto => break,
                Some(s) if s > after => out.push(Arc::new(Published {
                    msg,
                    json: line.into(),
                })),
                _ => {}
            }
        }
        Ok(out)
    }

    /// Every event after `after` (all journaled ones when Some, none of the past when None), then live events.
    pub fn subscribe(self: &Arc<Self>, after: Option<u64>) -> PublishedStream {
        let (rx, boundary) = {
            let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            (self.tx.subscribe(), state.last_seq)
        };
        let start = after.unwrap_or(boundary);
        let sub = Subscription {
            journal: self.clone(),
            rx,
            last: start,
            catch_up_to: boundary,
            backlog: Vec::new().into_iter(),
            held: None,
        };
        Box::pin(futures::stream::unfold(sub, |mut sub| async move {
            let next = sub.next().await?;
            Some((next, sub))
        }))
    }
}

struct Subscription {
    journal: Arc<Journal>,
    rx: broadcast::Receiver<Arc<Published>>,
    /// Highest sequence number yielded (or known to be unrecoverable).
    last: u64,
    /// Journaled events up to here must be yielded before any live one.
    catch_up_to: u64,
    /// Events read from the journal, in order.
    backlog: std::vec::IntoIter<Arc<Published>>,
    /// A live event that arrived ahead of a gap, yielded once the gap is filled.
    held: Option<Arc<Published>>,
}

impl Subscription {
    /// Yields `msg` if it is newer than anything yielded so far.
    fn advance(&mut self, msg: Arc<Published>) -> Option<Arc<Published>> {
        let seq = msg.seq()?;
        if seq <= self.last {
            return None;
        }
        self.last = seq;
        Some(msg)
    }

    async fn next(&mut self) -> Option<Arc<Published>> {
        loop {
            if let Some(msg) = self.backlog.next() {
                if let Some(msg) = self.advance(msg) {
                    return Some(msg);
                }
                continue;
            }
            if self.catch_up_to > self.last {
                let until = self.catch_up_to;
                self.backlog = self.journal.read_range(self.last, until).ok()?.into_iter();
                // Whatever the journal cannot supply is lost for good; never ask for it again.
                self.catch_up_to = self.last;
                if self.backlog.len() == 0 {
                    self.last = until;
                }
                continue;
            }
            if let Some(msg) = self.held.take() {
                if let Some(msg) = self.advance(msg) {
                    return Some(msg);
                }
                continue;
            }
            match self.rx.recv().await {
                Ok(msg) => match msg.seq() {
                    Some(s) if s > self.last + 1 => {
                        self.catch_up_to = s - 1;
                        self.held = Some(msg);
                    }
                    _ => self.held = Some(msg),
                },
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.catch_up_to = self.journal.last_seq()
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
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
