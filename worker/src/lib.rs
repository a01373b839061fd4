//! The session worker: runs turns for one session inside the sandbox.
//!
//! The supervisor starts it as `service-worker worker --ipc-fd N` (or `service-rs worker …` when the small binary is
//! not installed beside `service-rs`) with one end of a socket pair as descriptor N; it says
//! `hello` with the protocol version, receives its configuration, and then serves turns and operator commands until told to shut
//! down or the socket closes. It holds no API key and never talks to a model provider: model calls go to the
//! supervisor as `ModelRequest` frames.
//!
//! Layout:
//! - [`conn`]: connecting, the handshake, and the outbox every task writes frames through.
//! - [`session`]: the dispatch loop that routes supervisor frames to turns, commands, model streams and approvals.
//! - [`state`]: what the turns share: configuration, outbox, conversation, tool registry, routes.
//! - [`executor`]: runs one turn with the bundle's executor, [`react`] or [`codeact`], over the shared [`turn`].
//! - [`react`]: the react executor.
//! - [`codeact`]: the codeact executor, whose model acts through Python programs that call the tools.
//! - [`registry`]: the one tool registry the react loop calls, over the builtin tools and the MCP servers.
//! - [`mcp`]: the session's MCP servers, confined in the sandbox like commands.
//! - [`subagents`]: the `Agent` tool, whose calls the supervisor runs as child sessions.
//! - [`memory`]: the sliding-window memory.
//! - [`permissions`]: evaluating agent.yaml permission rules.
//! - [`tools`]: the builtin tools and the subprocess runner shared with operator commands.
//! - [`egress`]: the loopback port that leads to the supervisor's egress proxy.
//! - [`confine`]: what every tool process runs under (its own pid namespace, a seccomp filter).
//! - [`hardening`]: what the worker and supervisor processes do first (not dumpable, no core dumps, no `LD_*`).
//! - [`footprint`]: what an idle worker gives back (free heap pages, unused stack).
//! - [`orphans`]: reaping the processes a worker that is pid 1 of its sandbox inherits.

pub mod a2a;
pub mod codeact;
pub mod confine;
pub mod conn;
pub mod egress;
pub mod entry;
pub mod error;
pub mod executor;
pub mod footprint;
pub mod hardening;
pub mod hooks;
pub mod leftovers;
pub mod mcp;
pub mod memory;
pub mod orphans;
pub mod permissions;
pub mod react;
pub mod registry;
pub mod session;
mod session_hooks;
pub mod state;
pub mod subagents;
pub mod tools;
pub mod turn;
mod turn_hooks;

pub use error::{Result, WorkerError};

/// Runs a worker over the inherited socket `ipc_fd` until shutdown; the entry of `service-worker` and
/// `service-rs worker`. With `enter_cgroups` it first moves into the cgroups the supervisor hands over
/// ([`conn::enter_cgroups`]). The caller has made the process non-dumpable first ([`hardening::pre_main`]).
pub fn main(ipc_fd: std::os::fd::RawFd, enter_cgroups: bool) -> Result<()> {
    let socket = conn::adopt(ipc_fd)?;
    // Before the runtime: the move takes only the calling thread, so it must be the only one.
    if enter_cgroups && !conn::enter_cgroups(&socket)? {
        return Ok(());
    }
    // One thread is enough: every wait is I/O, and it keeps an idle worker small.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(WorkerError::Runtime)?;
    runtime.block_on(async {
        orphans::start();
        session::serve(socket).await
    })
}
