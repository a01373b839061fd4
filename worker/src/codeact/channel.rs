//! The worker's end of a program's tool channel: one JSON request per line, one JSON reply per line.
//!
//! The program is untrusted code: a request is only ever a tool name and arguments, which go through the JSON
//! tool call path with its permission rules and approvals, or a final answer. Nothing in a request can say that a
//! rule was met or a call approved. Malformed lines are answered with an error, and a line longer than
//! [`MAX_LINE`] ends the channel.

use futures::{FutureExt, StreamExt};
use serde::{Deserialize, Serialize};
use service_ipc::{ToolCall, ToolCallStatus};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use crate::react::Turn;

/// The longest request line: a Write of a large file fits, a flood does not.
const MAX_LINE: usize = 16 * 1024 * 1024;

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

#[derive(Serialize)]
struct Answer<'a> {
    status: &'a str,
    output: &'a str,
}

/// Serves `socket` until the program and everything it started have closed it, or the turn is interrupted; what
/// was asked goes into `calls`.
pub(super) async fn serve(turn: &Turn<'_>, socket: UnixStream, exec_id: &str, calls: &mut Calls) {
    let (read, mut write) = socket.into_split();
    let mut lines = tokio_util::codec::FramedRead::new(
        read,
        tokio_util::codec::LinesCodec::new_with_max_length(MAX_LINE),
    );
    loop {
        // A program's next call usually follows its last reply within microseconds: polling for it that long,
        // letting the worker's other tasks run in between, saves being woken for it. Each round also yields the
        // CPU: where the scheduler put the program on this worker's CPU, it gets to run at once instead of after
        // this poll's time slice.
        let polling = std::time::Instant::now() + POLL;
        let next = loop {
            if let Some(next) = lines.next().now_or_never() {
                break next;
            }
            if std::time::Instant::now() >= polling || turn.cancel.is_cancelled() {
                break tokio::select! {
                    _ = turn.cancel.cancelled() => return,
                    next = lines.next() => next,
                };
            }
            std::thread::yield_now();
            tokio::task::yield_now().await;
        };
        let line = match next {
            Some(Ok(line)) => line,
            // Closed, unreadable, or a line past the limit: the program is done with the channel.
            Some(Err(_)) | None => return,
        };
        let (status, output) = match serde_json::from_str::<Request>(&line) {
            Err(e) => (
                "error",
                format!("malformed request to the tool channel: {e}"),
            ),
            Ok(Request::FinalAnswer { text }) => {
                calls.final_answer = Some(text);
                ("ok", String::new())
            }
            Ok(Request::Call { tool, arguments }) => {
                let arguments = serde_json::Value::Object(arguments).to_string();
                let call = ToolCall {
                    id: format!("call_{}", uuid::Uuid::new_v4().simple()),
                    name: tool,
                    arguments,
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
        let mut reply = match serde_json::to_vec(&Answer {
            status,
            output: &output,
        }) {
            Ok(reply) => reply,
            Err(_) => return,
        };
        reply.push(b'\n');
        if write.write_all(&reply).await.is_err() {
            return;
        }
    }
}
