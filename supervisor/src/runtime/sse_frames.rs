//! Server-sent event frames of journaled events, made once per batch for every subscriber.
//!
//! `axum`'s `Sse` builds one `Event` buffer per client per event, and hyper then writes each as a chunk of its
//! own: with 100 clients that was most of the supervisor's CPU per delivery (a quarter allocation, the rest chunk
//! encoding and wake-ups). Here a batch of events is framed once, into one buffer shared by every subscriber; a
//! subscriber sends the part it has not seen as one slice of it, so a burst costs each client one chunk and no
//! copy. The framing follows the HTML standard's `text/event-stream`: `id:` then one `data:` line per line of the
//! JSON (serde never writes a raw line break, but a frame must stay valid if it did), then an empty line. The
//! `eventsource-stream` parser reads these frames back in the tests.

use bytes::{BufMut, Bytes, BytesMut};

use super::journal::Published;

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
    buf.reserve(event.json.len() + 32);
    buf.put_slice(b"id: ");
    buf.put_slice(event.msg.id.as_bytes());
    buf.put_u8(b'\n');
    for line in event.json.split(['\n', '\r']) {
        buf.put_slice(b"data: ");
        buf.put_slice(line.as_bytes());
        buf.put_u8(b'\n');
    }
    buf.put_u8(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;
    use service_ipc::{EventMsg, EventPayload};

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
