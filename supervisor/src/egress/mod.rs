//! The egress proxy: the one way out of a sandbox whose manifest lists hosts (or `"*"`).
//!
//! A sandbox has its own network namespace with loopback only, so nothing inside can reach the host's loopback,
//! its LAN or the internet directly. For a bundle whose `sandbox.permissions.network` is not empty (or whose
//! `agent.yaml` says `permissions.network: ask`), the supervisor binds one Unix socket per worker at
//! `run/<worker>/egress.sock`, bound read-only into the sandbox at [`SOCKET_IN_SANDBOX`]. The worker forwards a
//! loopback port to it and sets `HTTP_PROXY` and its kin for every command, so curl, pip, npm, git and cargo go
//! through it without configuration.
//!
//! The proxy speaks HTTP/1.1 (hyper): `CONNECT host:port` for TLS and anything else that can be tunnelled, and
//! absolute-form requests for plain HTTP. For each connection it:
//! 1. matches the host against the manifest's patterns (see [`policy`]); a host not listed is refused with a 403
//!    that names it and the manifest key, or, under `ask`, waits for an operator's decision;
//! 2. resolves the name itself (see [`resolve`]); when any address is loopback, private, link-local or metadata,
//!    the connection is refused unless the host is listed exactly (a wildcard, `*` or an approval is not enough),
//!    which defeats DNS rebinding; an unlisted host under `ask` is resolved before the operator is asked, the
//!    request shows the addresses, and an approval covers exactly those (so it may reach an internal address the
//!    operator saw);
//! 3. connects, and for a tunnel compares the TLS ClientHello's SNI, when there is one, with the CONNECT host
//!    (rustls parses the hello; nothing is decrypted), closing the tunnel when they differ;
//! 4. records `network_access` on the decision and `network_closed` with byte counts at the end.
//!
//! At most [`MAX_TUNNELS`] connections of one worker are open at once.

pub mod policy;
mod proxy;
pub mod resolve;
mod tunnel;

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use service_ipc::EventPayload;

pub use policy::HostPattern;
pub use resolve::Resolver;

/// Where the proxy's socket appears inside the sandbox.
pub const SOCKET_IN_SANDBOX: &str = "/run/service/egress.sock";

/// Connections one worker may hold open through the proxy at once.
pub const MAX_TUNNELS: usize = 64;

/// A bundle's network policy: the manifest's host patterns, and what happens to the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    /// `sandbox.permissions.network`, parsed.
    pub patterns: Vec<HostPattern>,
    /// `agent.yaml` `permissions.network: ask`: unlisted hosts go to an operator instead of being refused.
    pub ask: bool,
}

impl Policy {
    /// The policy of a manifest list and an `ask` flag; None when the sandbox has no way out at all.
    pub fn new(patterns: Vec<HostPattern>, ask: bool) -> Option<Policy> {
        (!patterns.is_empty() || ask).then_some(Policy { patterns, ask })
    }
}

/// An operator's answer to a network request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Let it through; the text says on what grounds (for the event's `rule`).
    Allow(&'static str),
    /// Refuse it, for this reason.
    Deny(String),
}

/// What the proxy reports to, and asks of, the session its worker serves.
pub trait Sink: Send + Sync {
    /// Appends an event to the session's journal.
    fn record(&self, payload: EventPayload);
    /// Whether the proxy may take a new connection from the sandbox; false once the session's journal is full,
    /// when nothing it did could be recorded. A connection turned away is counted. Default: always.
    fn admits(&self) -> bool {
        true
    }
    /// The proxy has stopped: journals what it held back. Default: nothing.
    fn close(&self) {}
    /// The running turn, if any.
    fn turn(&self) -> Option<String>;
    /// Asks the operator about `host:port`, which resolved to `addresses`, on behalf of `turn_id`.
    fn ask(
        &self,
        turn_id: String,
        host: String,
        port: u16,
        addresses: Vec<std::net::IpAddr>,
    ) -> BoxFuture<'static, Answer>;
}

/// State shared by the proxy's connections.
struct Shared {
    policy: Policy,
    resolver: Arc<Resolver>,
    /// Addresses no sandbox may reach, listed or not: the service's own (its session database).
    reserved: Arc<[std::net::SocketAddr]>,
    sink: OnceLock<Arc<dyn Sink>>,
    tunnels: Arc<tokio::sync::Semaphore>,
    /// Cancelled when the proxy is dropped: ends the connections, whose tasks outlive the accept loop.
    closed: tokio_util::sync::CancellationToken,
}

/// One worker's proxy: its socket and the task serving it. Dropping it stops the proxy, closes its connections
/// and removes the socket.
pub struct Egress {
    socket: PathBuf,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Egress {
    /// Binds the proxy socket at `socket` (replacing a stale one) and starts serving it; connections to `reserved`
    /// addresses are refused whatever the policy says.
    pub fn start(
        socket: &Path,
        policy: Policy,
        resolver: Arc<Resolver>,
        reserved: Arc<[std::net::SocketAddr]>,
    ) -> std::io::Result<Egress> {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::remove_file(socket);
        let listener = bind_anywhere(socket)?;
        std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
        let shared = Arc::new(Shared {
            policy,
            resolver,
            reserved,
            sink: OnceLock::new(),
            tunnels: Arc::new(tokio::sync::Semaphore::new(MAX_TUNNELS)),
            closed: tokio_util::sync::CancellationToken::new(),
        });
        let task = tokio::spawn(proxy::serve(listener, shared.clone()));
        Ok(Egress {
            socket: socket.to_path_buf(),
            shared,
            task,
        })
    }

    /// The socket's host path.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Ties the proxy to its session; until then every request is refused (no command runs before it anyway).
    pub fn attach(&self, sink: Arc<dyn Sink>) {
        let _ = self.shared.sink.set(sink);
    }
}

/// Binds a listening socket at `path` whatever the length of its directory's path: a socket address holds at most
/// 108 bytes (`SUN_LEN`), and a store under a long path would otherwise start no sandbox that reaches the network.
/// A long path is bound through its directory's descriptor (`/proc/self/fd/N/NAME`), which names the same place.
fn bind_anywhere(path: &Path) -> std::io::Result<tokio::net::UnixListener> {
    const SHORT_ENOUGH: usize = 100;
    if path.as_os_str().len() <= SHORT_ENOUGH {
        return tokio::net::UnixListener::bind(path);
    }
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return tokio::net::UnixListener::bind(path);
    };
    let dir = std::fs::File::open(dir)?;
    use std::os::fd::AsRawFd;
    let short = Path::new("/proc/self/fd")
        .join(dir.as_raw_fd().to_string())
        .join(name);
    tokio::net::UnixListener::bind(short)
}

impl Drop for Egress {
    fn drop(&mut self) {
        self.task.abort();
        self.shared.closed.cancel();
        let _ = std::fs::remove_file(&self.socket);
        // Here, not when the last connection task lets go of the sink: that happens later, on another thread, and
        // a process that is exiting may never see it.
        if let Some(sink) = self.shared.sink.get() {
            sink.close();
        }
    }
}
