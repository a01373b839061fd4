//! A cold turn's opening model request. When a turn has to start its worker first (a one-shot `run`, the first
//! turn of a session, a turn after the worker was reaped), the supervisor builds the query the worker will send for
//! the turn's first model call, with the worker's own functions, and puts it on the wire while bwrap and the worker
//! start: the model's latency overlaps the sandbox's.
//!
//! The worker still runs the turn. Its first model request is served from the opening only when it is the very
//! same query (messages and tools compared in full); any other request gets a call of its own, and the opening is
//! dropped, which abandons it. The supervisor chose the model and wrote the query from its own state, so serving it
//! gives a worker nothing it could not have asked for. Bundles with MCP servers get no opening: their tools are
//! known only once the servers run in the sandbox.

use futures::stream::BoxStream;
use futures::StreamExt;
use service_ipc::{ChatMessage, ChatRole, ModelChunk, ModelQuery, ToolSpec};
use tokio::sync::mpsc;

use crate::bundle::Bundle;

/// Chunks of the opening reply held until the worker asks; past this the provider's stream waits.
const BUFFER: usize = 1024;

/// An opening request on the wire, and the query it answers.
pub(crate) struct Opening {
    messages: Vec<ChatMessage>,
    tools: Vec<ToolSpec>,
    chunks: mpsc::Receiver<ModelChunk>,
    call: tokio::task::AbortHandle,
}

impl Drop for Opening {
    fn drop(&mut self) {
        self.call.abort();
    }
}

impl Opening {
    /// Starts reading `reply`, the answer to the query of `messages` and `tools`, into a buffer.
    pub(crate) fn new(
        messages: Vec<ChatMessage>,
        tools: Vec<ToolSpec>,
        mut reply: BoxStream<'static, ModelChunk>,
    ) -> Opening {
        let (tx, chunks) = mpsc::channel(BUFFER);
        let call = tokio::spawn(async move {
            while let Some(chunk) = reply.next().await {
                if tx.send(chunk).await.is_err() {
                    return;
                }
            }
        })
        .abort_handle();
        Opening {
            messages,
            tools,
            chunks,
            call,
        }
    }

    /// True when `query` is the one this opening asked.
    pub(crate) fn answers(&self, query: &ModelQuery) -> bool {
        query.messages == self.messages && query.tools == self.tools
    }

    /// The reply, from its first chunk; dropping the stream abandons the call.
    pub(crate) fn into_stream(self) -> BoxStream<'static, ModelChunk> {
        futures::stream::unfold(self, |mut opening| async move {
            let chunk = opening.chunks.recv().await?;
            Some((chunk, opening))
        })
        .boxed()
    }
}

/// The messages and tools of the first model call of a turn of `prompt` over `history`, as a worker of `bundle`
/// asks them; None when its bundle has MCP servers, whose tools only the worker knows.
pub(crate) fn first_query(
    bundle: &Bundle,
    mut history: Vec<ChatMessage>,
    prompt: &str,
) -> Option<(Vec<ChatMessage>, Vec<ToolSpec>)> {
    if !bundle.agent.mcp_servers.is_empty() {
        return None;
    }
    history.push(ChatMessage::text(ChatRole::User, prompt));
    let agent = &bundle.agent;
    let tools = &bundle.manifest.tools;
    let skills = bundle
        .skills
        .iter()
        .map(|s| (s.name.as_str(), s.description.as_str()));
    let system = service_worker::react::system_prompt(&agent.system_prompt, tools, skills);
    let messages = service_worker::memory::prompt(&system, &history, agent.memory.window);
    Some((messages, service_worker::tools::specs(tools)))
}
