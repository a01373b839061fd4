//! The worker's end of a program's tool channel: length-delimited frames (a 4-byte big-endian length, then the
//! body) both ways. A request's body is one JSON object; a reply's is the status (`ok`, `denied` or `error`), a
//! newline, and the tool's text. The reply is not JSON because the program reads one per call: slicing a frame
//! costs it a tenth of decoding a JSON string.
//!
//! The program is untrusted code: a request is only ever a tool name and arguments, which go through the JSON
//! tool call path with its permission rules and approvals, or a final answer. Nothing in a request can say that a
//! rule was met or a call approved. Malformed requests are answered with an error, and a request longer than
//! [`MAX_FRAME`] ends the channel.

use bytes::{BufMut, BytesMut};
use futures::{FutureExt, SinkExt, StreamExt};
use serde::Deserialize;
use service_ipc::{ToolCall, ToolCallStatus};
use tokio::net::UnixStream;
use tokio_util::codec::{FramedRead, FramedWrite, LengthDelimitedCodec};

use crate::turn::Turn;

/// The longest request: a Write of a large file fits, a flood does not.
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// How long the channel polls for the next request before it waits to be woken.
const POLL: std::time::Duration = std::time::Duration::from_micros(200);

/// What a program asked of its channel.
#[derive(Default)]
pub(super) struct Calls {
    /// Each call, as the observation lists it.
    pub made: Vec<String>,
    /// The text given to `final_answer`.
    pub final_answer: Option<String>,
}

#[derive(Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
enum Request {
    Call {
        tool: String,
        #[serde(default)]
        arguments: serde_json::Map<String, serde_json::Value>,
    },
    FinalAnswer {
        text: String,
    },
}

/// Serves `socket` until the program and everything it started have closed it, or the turn is interrupted; what
/// was asked goes into `calls`.
pub(super) async fn serve(turn: &Turn<'_>, socket: UnixStream, exec_id: &str, calls: &mut Calls) {
    let codec = |max: usize| {
        LengthDelimitedCodec::builder()
            .max_frame_length(max)
            .new_codec()
    };
    let (read, write) = socket.into_split();
    let mut requests = FramedRead::new(read, codec(MAX_FRAME));
    // Replies are the worker's own, as long as a tool's output: the 4-byte length is their only bound.
    let mut replies = FramedWrite::new(write, codec(u32::MAX as usize));
    // Call ids need only be unique in the session: the program's id and a count, without a random draw per call.
    let mut count = 0u64;
    loop {
        // A program's next call usually follows its last reply within microseconds: polling for it that long,
        // letting the worker's other tasks run in between, saves being woken for it. Each round also yields the
        // CPU: where the scheduler put the program on this worker's CPU, it gets to run at once instead of after
        // this poll's time slice.
        let polling = std::time::Instant::now() + POLL;
        let next = loop {
            if let Some(next) = requests.next().now_or_never() {
                break next;
            }
            if std::time::Instant::now() >= polling || turn.cancel.is_cancelled() {
                break tokio::select! {
                    _ = turn.cancel.cancelled() => return,
                    next = requests.next() => next,
                };
            }
            std::thread::yield_now();
            tokio::task::yield_now().await;
        };
        let request = match next {
            Some(Ok(request)) => request,
            // Closed, unreadable, or a frame past the limit: the program is done with the channel.
            Some(Err(_)) | None => return,
        };
        let (status, output) = match serde_json::from_slice::<Request>(&request) {
            Err(e) => (
                "error",
                format!("malformed request to the tool channel: {e}"),
            ),
            Ok(Request::FinalAnswer { text }) => {
                calls.final_answer = Some(text);
                ("ok", String::new())
            }
            Ok(Request::Call { tool, arguments }) => {
                count += 1;
                let call = ToolCall {
                    id: format!("call_{exec_id}_{count}"),
                    name: tool,
                    arguments: serde_json::Value::Object(arguments).to_string(),
                };
                let result = turn.run_tool(&call, Some(exec_id)).await;
                let status = match result.status {
                    ToolCallStatus::Ok => "ok",
                    ToolCallStatus::Denied => "denied",
                    ToolCallStatus::Error => "error",
                };
                calls.made.push(super::summary(
                    &call.name,
                    &call.arguments,
                    status,
                    &result.output,
                ));
                (status, result.output)
            }
        };
        let mut reply = BytesMut::with_capacity(status.len() + 1 + output.len());
        reply.put_slice(status.as_bytes());
        reply.put_u8(b'\n');
        reply.put_slice(output.as_bytes());
        if replies.send(reply.freeze()).await.is_err() {
            return;
        }
    }
}
