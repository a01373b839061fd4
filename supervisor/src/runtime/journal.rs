//! The per-session event journal and its broadcast fan-out, over the session's [`SessionLog`] in whichever store.
//!
//! Each event gets the next sequence number, is stored, and only then is broadcast, in one order: the log publishes
//! batches in sequence order (see the backends in [`super::store`]). Events that arrive
//! together are committed as one batch: one write to the journal and one broadcast message, so a burst of deltas
//! costs one wake-up per subscriber, not one per event, and a subscriber can share one encoding of the burst with the
//! others ([`Batch::shared`]: the server's SSE frames). A subscriber that
//! falls behind the broadcast channel catches up from the journal, so no subscriber misses an event; a subscriber
//! that starts after a given sequence number gets the journal's later events first, then live ones, without a gap
//! or a duplicate.

use std::any::Any;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock};

use futures::Stream;
use service_ipc::{EventMsg, EventPayload};
use tokio::sync::broadcast;

use super::error::Result;
pub use super::store::Published;
use super::store::{Publish, SessionLog, Store};

/// Batches buffered per subscriber before it counts as lagging (and catches up from the journal).
const BROADCAST_CAPACITY: usize = 4096;

/// Events committed together, in sequence order, and one encoding of them shared by the subscribers that want it.
pub struct Batch {
    events: Vec<Arc<Published>>,
    shared: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl Batch {
    /// The events, in sequence order.
    pub fn events(&self) -> &[Arc<Published>] {
        &self.events
    }

    /// The batch in another form, made by the first subscriber that asks (`make`) and shared with every other; None
    /// when the batch already holds a form of another type (one kind of encoding per journal).
    pub fn shared<T: Any + Send + Sync>(
        &self,
        make: impl FnOnce(&[Arc<Published>]) -> T,
    ) -> Option<&T> {
        self.shared
            .get_or_init(|| Box::new(make(&self.events)))
            .downcast_ref()
    }
}

/// Events a subscriber has not seen yet, as one piece.
pub enum Run {
    /// Read back from the journal, in order.
    Journaled(VecDeque<Arc<Published>>),
    /// A live batch from this index on.
    Live(Arc<Batch>, usize),
}

impl Run {
    /// Takes the first event of the run. Walking a live batch by index shares it rather than copying it.
    fn next_event(&mut self) -> Option<Arc<Published>> {
        match self {
            Run::Journaled(events) => events.pop_front(),
            Run::Live(batch, index) => {
                let event = batch.events.get(*index)?.clone();
                *index += 1;
                Some(event)
            }
        }
    }
}

/// Journaled events framed per read, at most this many to a chunk (a reconnecting client may be far behind).
const JOURNALED_PER_RUN: usize = 512;

/// A stream of session events.
pub type EventStream = Pin<Box<dyn Stream<Item = EventMsg> + Send>>;

/// A stream of published events, each with its JSON serialised once for every subscriber.
pub type PublishedStream = Pin<Box<dyn Stream<Item = Arc<Published>> + Send>>;

/// A journal's broadcast channel, made for its first subscriber and dropped with its last. Tokio allocates a
/// channel's every slot up front (about 160 KiB for 4096 batches), which a session nobody watches should not hold:
/// 300 idle sessions held 39 MiB of them.
#[derive(Default)]
struct Fanout(Mutex<Option<broadcast::Sender<Arc<Batch>>>>);

impl Fanout {
    fn channel(&self) -> std::sync::MutexGuard<'_, Option<broadcast::Sender<Arc<Batch>>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes `events` to the subscribers, if there are any.
    fn send(&self, events: Vec<Arc<Published>>) {
        if let Some(tx) = self.channel().as_ref() {
            let _ = tx.send(Arc::new(Batch {
                events,
                shared: OnceLock::new(),
            }));
        }
    }

    fn subscribe(&self) -> broadcast::Receiver<Arc<Batch>> {
        self.channel()
            .get_or_insert_with(|| broadcast::channel(BROADCAST_CAPACITY).0)
            .subscribe()
    }

    /// Drops the channel when the receiver about to be dropped is its last.
    fn leaving(&self) {
        let mut channel = self.channel();
        if channel.as_ref().is_some_and(|tx| tx.receiver_count() <= 1) {
            *channel = None;
        }
    }
}

/// One session's journal: its [`SessionLog`] and the broadcast channel its stored events are published on.
pub struct Journal {
    log: Arc<dyn SessionLog>,
    fanout: Arc<Fanout>,
}

impl Journal {
    /// Opens session `id`'s journal in `store`.
    pub async fn open(store: &dyn Store, id: &str) -> Result<Journal> {
        let fanout = Arc::new(Fanout::default());
        let publishing = fanout.clone();
        let publish: Publish = Arc::new(move |events| publishing.send(events));
        let log = store.open_log(id, publish).await?;
        Ok(Journal { log, fanout })
    }

    /// The log under the journal: the session's record, history and events in its store.
    pub fn log(&self) -> &Arc<dyn SessionLog> {
        &self.log
    }

    /// Stamps, stores and broadcasts one event.
    pub fn emit(&self, payload: EventPayload) -> Result<()> {
        self.emit_all(vec![payload])
    }

    /// Stamps, stores (one write) and broadcasts (one message) a batch of events. A store failure is returned after
    /// the events were still broadcast, so live subscribers are not starved by a full disk.
    pub fn emit_all(&self, payloads: Vec<EventPayload>) -> Result<()> {
        self.log.append_events(payloads)
    }

    /// Bytes the journal holds.
    pub fn bytes(&self) -> u64 {
        self.log.bytes()
    }

    /// Sequence number of the last event published here.
    pub fn last_seq(&self) -> u64 {
        self.log.last_seq()
    }

    /// Brings this node's view up to the events other nodes stored.
    pub async fn catch_up(&self) -> Result<()> {
        self.log.catch_up().await
    }

    /// Resolves once everything emitted so far is stored.
    pub async fn stored(&self) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.log.after_stored(Box::new(move || {
            let _ = tx.send(());
        }));
        let _ = rx.await;
    }

    /// Journaled events with `after < seq <= upto`.
    pub async fn read_range(&self, after: u64, upto: u64) -> Result<Vec<Arc<Published>>> {
        self.log.read_events(after, upto).await
    }

    /// Every event after `after` (all journaled ones when Some, none of the past when None), then live events.
    pub fn subscribe(self: &Arc<Self>, after: Option<u64>) -> PublishedStream {
        let state = (self.subscription(after), None::<Run>);
        Box::pin(futures::stream::unfold(
            state,
            |(mut sub, mut run)| async move {
                loop {
                    if let Some(next) = run.as_mut().and_then(Run::next_event) {
                        return Some((next, (sub, run)));
                    }
                    run = Some(sub.next_run().await?);
                }
            },
        ))
    }

    /// Every event after `after` (all journaled ones when Some, none of the past when None), then live events, a
    /// run at a time: for a subscriber that handles a burst at once.
    pub fn subscription(self: &Arc<Self>, after: Option<u64>) -> Subscription {
        // Subscribed first: an event published in between is then both live and under the boundary, and is
        // yielded once.
        let rx = self.fanout.subscribe();
        let boundary = self.log.last_seq();
        let start = after.unwrap_or(boundary);
        Subscription {
            journal: self.clone(),
            rx,
            last: start,
            catch_up_to: boundary,
            backlog: VecDeque::new(),
            held: None,
        }
    }
}

/// A subscriber's place in a journal.
pub struct Subscription {
    journal: Arc<Journal>,
    rx: broadcast::Receiver<Arc<Batch>>,
    /// Highest sequence number yielded (or known to be unrecoverable).
    last: u64,
    /// Journaled events up to here must be yielded before any live one.
    catch_up_to: u64,
    /// Events read from the journal, in order.
    backlog: VecDeque<Arc<Published>>,
    /// The live batch just received; after a gap, it waits until the journal has filled the gap.
    held: Option<Arc<Batch>>,
}

impl Subscription {
    /// The next events newer than anything yielded so far, in order; None when the session's journal is closed.
    /// Cancel-safe: its only wait is the broadcast receive.
    pub async fn next_run(&mut self) -> Option<Run> {
        loop {
            if !self.backlog.is_empty() {
                let mut run = VecDeque::new();
                while run.len() < JOURNALED_PER_RUN {
                    let Some(msg) = self.backlog.pop_front() else {
                        break;
                    };
                    if msg.seq > self.last {
                        self.last = msg.seq;
                        run.push_back(msg);
                    }
                }
                if !run.is_empty() {
                    return Some(Run::Journaled(run));
                }
                continue;
            }
            if self.catch_up_to > self.last {
                let until = self.catch_up_to;
                self.backlog = self.journal.read_range(self.last, until).await.ok()?.into();
                // Whatever the journal cannot supply is lost for good; never ask for it again.
                self.catch_up_to = self.last;
                if self.backlog.is_empty() {
                    self.last = until;
                }
                continue;
            }
            if let Some(batch) = self.held.take() {
                // Sequence numbers rise through a batch: skip what was yielded, the rest is new.
                let from = batch.events.partition_point(|e| e.seq <= self.last);
                if let Some(newest) = batch.events.last().filter(|_| from < batch.events.len()) {
                    self.last = newest.seq;
                    return Some(Run::Live(batch, from));
                }
                continue;
            }
            match self.rx.recv().await {
                Ok(batch) => {
                    if let Some(first) = batch.events.first() {
                        if first.seq > self.last + 1 {
                            self.catch_up_to = first.seq - 1;
                        }
                    }
                    self.held = Some(batch);
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    self.catch_up_to = self.journal.last_seq()
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.journal.fanout.leaving();
    }
}

/// Journals and events for the tests of the journal and of its subscribers.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;
    use futures::StreamExt;

    /// Batches a subscriber may fall behind by before it catches up from the journal.
    pub(crate) const CAPACITY: usize = BROADCAST_CAPACITY;

    /// Session `s`'s journal in a files store under `dir`.
    pub(crate) async fn open(dir: &tempfile::TempDir) -> Arc<Journal> {
        std::fs::create_dir_all(dir.path().join("sessions/s")).unwrap();
        let store =
            crate::runtime::store::files::FilesStore::new(crate::ServiceHome::new(dir.path()));
        Arc::new(Journal::open(&store, "s").await.unwrap())
    }

    /// A text delta event.
    pub(crate) fn delta(text: &str) -> EventPayload {
        EventPayload::AgentMessageDelta {
            turn_id: "t".into(),
            delta: text.into(),
        }
    }

    /// `n` deltas.
    pub(crate) fn batch(n: usize) -> Vec<EventPayload> {
        (0..n).map(|i| delta(&i.to_string())).collect()
    }

    /// Up to `n` items of `stream`, stopping early after 5 s without one.
    pub(crate) async fn first<T>(stream: impl Stream<Item = T>, n: usize) -> Vec<T> {
        let mut stream = std::pin::pin!(stream);
        let mut out = Vec::new();
        while out.len() < n {
            match tokio::time::timeout(std::time::Duration::from_secs(5), stream.next()).await {
                Ok(Some(item)) => out.push(item),
                _ => break,
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{batch, delta, first, open};
    use super::*;
    use futures::StreamExt;

    async fn seqs(stream: &mut PublishedStream, n: usize) -> Vec<u64> {
        first(stream.map(|p| p.seq), n).await
    }

    #[tokio::test]
    async fn a_subscriber_that_lags_past_the_channel_gets_every_batched_event_once_in_order() {
        let dir = tempfile::TempDir::new().unwrap();
        let journal = open(&dir).await;
        let mut live = journal.subscribe(None);
        let batches = BROADCAST_CAPACITY + 10;
        for _ in 0..batches {
            journal.emit_all(batch(3)).unwrap();
        }
        let total = (batches * 3) as u64;
        assert_eq!(
            seqs(&mut live, total as usize).await,
            (1..=total).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn a_subscriber_starting_inside_a_batch_gets_the_rest_of_it_then_live_events() {
        let dir = tempfile::TempDir::new().unwrap();
        let journal = open(&dir).await;
        journal.emit_all(batch(5)).unwrap();
        let mut from_two = journal.subscribe(Some(2));
        journal.emit_all(batch(2)).unwrap();
        assert_eq!(seqs(&mut from_two, 5).await, vec![3, 4, 5, 6, 7]);
    }

    #[tokio::test]
    async fn a_journal_holds_its_channel_only_while_watched_and_a_later_subscriber_misses_nothing()
    {
        let dir = tempfile::TempDir::new().unwrap();
        let journal = open(&dir).await;
        let watching = |j: &Journal| j.fanout.channel().is_some();
        journal.emit_all(batch(2)).unwrap();
        assert!(!watching(&journal), "no subscriber yet, no channel");
        let (mut first, mut second) = (journal.subscribe(None), journal.subscribe(Some(1)));
        journal.emit_all(batch(1)).unwrap();
        assert_eq!(seqs(&mut first, 1).await, vec![3]);
        drop(first);
        assert!(watching(&journal), "one subscriber is left");
        assert_eq!(seqs(&mut second, 2).await, vec![2, 3]);
        drop(second);
        assert!(
            !watching(&journal),
            "the last subscriber took the channel with it"
        );
        journal.emit_all(batch(1)).unwrap();
        let mut later = journal.subscribe(Some(0));
        journal.emit_all(batch(1)).unwrap();
        assert_eq!(seqs(&mut later, 5).await, vec![1, 2, 3, 4, 5]);
    }

    #[tokio::test]
    async fn a_batch_is_journaled_as_one_line_per_event_and_reopening_continues_the_sequence() {
        let dir = tempfile::TempDir::new().unwrap();
        open(&dir).await.emit_all(batch(4)).unwrap();
        let path = dir.path().join("sessions/s/events.jsonl");
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 4);
        let reopened = open(&dir).await;
        assert_eq!(reopened.last_seq(), 4);
        reopened.emit(delta("x")).unwrap();
        let last = std::fs::read_to_string(&path).unwrap();
        assert!(last.lines().last().unwrap().contains("\"id\":\"5\""));
    }
}
