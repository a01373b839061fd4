//! Session events as a `text/event-stream` body: server-sent event frames of journaled events, made once per batch
//! for every subscriber.
//!
//! `axum`'s `Sse` builds one `Event` buffer per client per event, and hyper then writes each as a chunk of its
//! own: with 100 clients that was most of the supervisor's CPU per delivery (a quarter allocation, the rest chunk
//! encoding and wake-ups). Here a batch of events is framed once, into one buffer shared by every subscriber; a
//! subscriber sends the part it has not seen as one slice of it, so a burst costs each client one chunk and no
//! copy. The framing follows the HTML standard's `text/event-stream`: `id:` then one `data:` line per line of the
//! JSON (serde never writes a raw line break, but a frame must stay valid if it did), then an empty line. The
//! `eventsource-stream` parser reads these frames back in the tests.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::Stream;

use crate::facade::tool_text::Activity;
use crate::runtime::journal::{Journal, Published, Run};

/// A `text/event-stream` body: chunks of SSE frames, and a keep-alive comment when the session has been quiet.
pub type SseStream = Pin<Box<dyn Stream<Item = Bytes> + Send>>;

/// The journal's events after `after` (None: from now on), then live ones, as SSE frames: each live batch framed
/// once, in one chunk shared with every subscriber, and a keep-alive comment after `keep_alive` without one.
///
/// With `view`, tool events carry the shared renderer's line as a top-level `view` field (see
/// [`Activity::view`]); those frames are made for this subscriber alone.
pub fn stream(
    journal: &Arc<Journal>,
    after: Option<u64>,
    keep_alive: Duration,
    view: bool,
) -> SseStream {
    let sub = journal.subscription(after);
    let viewer = view.then(Activity::default);
    Box::pin(futures::stream::unfold(
        (sub, viewer),
        move |(mut sub, mut viewer)| async move {
            // `next_run` is cancel-safe, so the timer may interrupt it.
            let chunk = tokio::select! {
                run = sub.next_run() => match (run?, viewer.as_mut()) {
                    (Run::Journaled(events), Some(viewer)) => viewed(events.iter().map(|e| &**e), viewer),
                    (Run::Live(batch, from), Some(viewer)) => viewed(batch.events()[from..].iter().map(|e| &**e), viewer),
                    (Run::Journaled(events), None) => Frames::new(events.iter().map(|e| &**e)).from_index(0),
                    (Run::Live(batch, from), None) => match batch.shared(|events| Frames::new(events.iter().map(|e| &**e))) {
                        Some(frames) => frames.from_index(from),
                        None => Frames::new(batch.events()[from..].iter().map(|e| &**e)).from_index(0),
                    },
                },
                () = tokio::time::sleep(keep_alive) => Bytes::from_static(KEEP_ALIVE),
            };
            Some((chunk, (sub, viewer)))
        },
    ))
}

/// Frames `events` for one subscriber, each tool event with the renderer's `view` added to its JSON object.
fn viewed<'a>(events: impl IntoIterator<Item = &'a Published>, viewer: &mut Activity) -> Bytes {
    let mut buf = BytesMut::new();
    for event in events {
        let view = viewer.view(&event.msg.payload);
        viewer.observe(&event.msg.payload);
        match (view, event.json.strip_suffix('}')) {
            (Some(view), Some(open)) => {
                let json = format!("{open},\"view\":{view}}}");
                push_json(&mut buf, &event.msg.id, &json);
            }
            _ => push(&mut buf, event),
        }
    }
    buf.freeze()
}

/// The comment sent to an idle stream, so proxies and clients know it is alive.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// Events framed back to back, and where each frame ends.
#[derive(Debug)]
pub struct Frames {
    bytes: Bytes,
    ends: Vec<usize>,
}

impl Frames {
    /// Frames `events`, in order.
    pub fn new<'a>(events: impl IntoIterator<Item = &'a Published>) -> Frames {
        let mut buf = BytesMut::new();
        let mut ends = Vec::new();
        for event in events {
            push(&mut buf, event);
            ends.push(buf.len());
        }
        Frames {
            bytes: buf.freeze(),
            ends,
        }
    }

    /// The frames of the events from index `from` on, sharing this buffer.
    pub fn from_index(&self, from: usize) -> Bytes {
        let start = match from {
            0 => 0,
            i => self.ends.get(i - 1).copied().unwrap_or(self.bytes.len()),
        };
        self.bytes.slice(start..)
    }
}

/// Appends the frame of one event.
fn push(buf: &mut BytesMut, event: &Published) {
    push_json(buf, &event.msg.id, &event.json);
}

/// Appends a frame of `json` with the `id:` given.
fn push_json(buf: &mut BytesMut, id: &str, json: &str) {
    buf.reserve(json.len() + 32);
    buf.put_slice(b"id: ");
    buf.put_slice(id.as_bytes());
    buf.put_u8(b'\n');
    for line in json.split(['\n', '\r']) {
        buf.put_slice(b"data: ");
        buf.put_slice(line.as_bytes());
        buf.put_u8(b'\n');
    }
    buf.put_u8(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::journal::testing::{batch, delta, first, open, CAPACITY};
    use futures::StreamExt;
    use service_ipc::{EventMsg, EventPayload};

    /// The `id:` of the first `n` events of an SSE body, read by a standard parser.
    async fn sse_ids(stream: SseStream, n: usize) -> Vec<u64> {
        let chunks = stream.map(Ok::<_, std::convert::Infallible>);
        let events = eventsource_stream::Eventsource::eventsource(chunks);
        first(events.map(|e| e.unwrap().id.parse().unwrap()), n).await
    }

    #[tokio::test]
    async fn an_sse_subscriber_gets_the_journal_then_the_rest_of_a_live_batch_then_live_events() {
        let dir = tempfile::TempDir::new().unwrap();
        let journal = open(&dir).await;
        journal.emit_all(batch(5)).unwrap();
        let long = std::time::Duration::from_secs(60);
        let from_two = stream(&journal, Some(2), long, false);
        let live = stream(&journal, None, long, false);
        journal.emit_all(batch(3)).unwrap();
        journal.emit(delta("x")).unwrap();
        assert_eq!(sse_ids(from_two, 7).await, vec![3, 4, 5, 6, 7, 8, 9]);
        assert_eq!(sse_ids(live, 4).await, vec![6, 7, 8, 9]);
    }

    #[tokio::test]
    async fn an_sse_subscriber_lagging_past_the_channel_gets_every_event_once_in_order() {
        let dir = tempfile::TempDir::new().unwrap();
        let journal = open(&dir).await;
        let live = stream(&journal, None, std::time::Duration::from_secs(60), false);
        let batches = CAPACITY + 10;
        for _ in 0..batches {
            journal.emit_all(batch(3)).unwrap();
        }
        let total = (batches * 3) as u64;
        assert_eq!(
            sse_ids(live, total as usize).await,
            (1..=total).collect::<Vec<_>>()
        );
    }

    #[tokio::test]
    async fn a_quiet_sse_stream_gets_a_keep_alive_comment() {
        let dir = tempfile::TempDir::new().unwrap();
        let journal = open(&dir).await;
        let mut live = stream(&journal, None, std::time::Duration::from_millis(20), false);
        let first = tokio::time::timeout(std::time::Duration::from_secs(5), live.next()).await;
        assert_eq!(first.unwrap().unwrap(), b": keep-alive\n\n"[..]);
        journal.emit(delta("x")).unwrap();
        let mut next = live.next().await.unwrap();
        while next == KEEP_ALIVE {
            next = live.next().await.unwrap();
        }
        assert!(next.starts_with(b"id: 1\ndata: {"), "{next:?}");
    }

    fn published(seq: u64, json: &str) -> Published {
        Published {
            msg: EventMsg {
                id: seq.to_string(),
                session_id: "s".into(),
                created_at: "t".into(),
                payload: EventPayload::AgentMessageDelta {
                    turn_id: "t".into(),
                    delta: "d".into(),
                },
            },
            json: json.into(),
            seq,
        }
    }

    async fn parse(bytes: Bytes) -> Vec<(String, String)> {
        let chunks = futures::stream::iter([Ok::<_, std::convert::Infallible>(bytes)]);
        eventsource_stream::Eventsource::eventsource(chunks)
            .map(|e| {
                let e = e.unwrap();
                (e.id, e.data)
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_viewed_stream_adds_the_renderers_line_to_tool_events_only() {
        let event = |seq: u64, payload: EventPayload| {
            let msg = EventMsg {
                id: seq.to_string(),
                session_id: "s".into(),
                created_at: "t".into(),
                payload,
            };
            let json = serde_json::to_string(&msg).unwrap();
            Published {
                msg,
                json: json.into(),
                seq,
            }
        };
        let events = [
            event(
                1,
                EventPayload::ToolCallStarted {
                    turn_id: "t".into(),
                    call_id: "c".into(),
                    tool: "Edit".into(),
                    arguments: serde_json::json!({"file_path": "/workspace/src/a.rs"}),
                    parent_exec_id: None,
                },
            ),
            event(
                2,
                EventPayload::AgentMessageDelta {
                    turn_id: "t".into(),
                    delta: "d".into(),
                },
            ),
        ];
        let frames = parse(viewed(&events, &mut Activity::default())).await;
        let first: serde_json::Value = serde_json::from_str(&frames[0].1).unwrap();
        assert_eq!(first["view"]["title"], "Edit src/a.rs");
        assert_eq!(
            first["payload"]["payload"]["tool"], "Edit",
            "the event itself is kept"
        );
        assert_eq!(
            frames[1].1, &*events[1].json,
            "other events are as journaled"
        );
    }

    #[tokio::test]
    async fn a_standard_parser_reads_every_frame_back_from_any_index() {
        let events = [
            published(7, r#"{"a":1}"#),
            published(8, "two\nlines"),
            published(9, "cr\r\nlf"),
        ];
        let frames = Frames::new(&events);
        assert_eq!(
            parse(frames.from_index(0)).await,
            vec![
                ("7".to_string(), r#"{"a":1}"#.to_string()),
                ("8".to_string(), "two\nlines".to_string()),
                // Each `\r` or `\n` ends a `data:` line, as axum's `Event::data` splits them.
                ("9".to_string(), "cr\n\nlf".to_string()),
            ]
        );
        assert_eq!(
            parse(frames.from_index(2)).await,
            vec![("9".to_string(), "cr\n\nlf".to_string())]
        );
        assert!(frames.from_index(3).is_empty());
    }
}
