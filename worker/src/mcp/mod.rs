//! The session's MCP servers, as clients of rmcp. A stdio server is a child of the worker, so it lives in the
//! session's sandbox under the same confinement as a Bash command (its own pid namespace, the seccomp filter, the
//! egress proxy variables) and dies with the worker. A streamable-HTTP server is reached through the egress
//! forwarder ([`http`]). Tools are offered as `mcp__<server>__<tool>`.
//!
//! Everything a server says is untrusted: its tool list is capped (count, description and schema size), a call
//! is bounded by `tool_timeout_ms` and the turn's interrupt, and its output is cut like a command's.
//!
//! Servers start when the worker does, concurrently; the first model call waits for them (each bounded by its
//! `startup_timeout_ms`). A server that fails to start or dies emits `mcp_server_failed` with the tail of its
//! stderr, and its tools disappear; the session goes on. A `notifications/tools/list_changed` marks the server's
//! list stale, and the next model call lists it again.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ClientConfig};
use rmcp::service::{NotificationContext, Peer, RunningService};
use rmcp::transport::async_rw::AsyncRwTransport;
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use service_ipc::{EventPayload, McpServer, ToolSpec};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

use crate::conn::Outbox;
use crate::tools::ToolResult;

pub(crate) mod bounds;
mod http;

use bounds::{offered, render, Offered};

/// Prefix of every MCP tool name the model sees.
pub const PREFIX: &str = "mcp__";
/// Stderr kept per server for failure reports.
const STDERR_TAIL: usize = 4096;
/// Longest JSON-RPC message read from a server. rmcp drops a longer one (and the call then ends at its time-out);
/// 32 MiB lets large results through to be cut, and bounds what one message can make the worker hold.
const MAX_MESSAGE: usize = 32 * 1024 * 1024;

/// The model-facing name of `tool` of `server`.
pub fn tool_name(server: &str, tool: &str) -> String {
    let clean: String = tool
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{PREFIX}{server}__{clean}")
}

enum State {
    Starting,
    Running {
        peer: Peer<RoleClient>,
        tools: Vec<Offered>,
    },
    /// It failed, for this reason.
    Failed(String),
}

struct Server {
    name: String,
    tool_timeout: Duration,
    state: Mutex<State>,
    /// Set once `mcp_server_failed` was sent.
    reported: AtomicBool,
    /// Set by `notifications/tools/list_changed`.
    stale: Arc<AtomicBool>,
    stderr: Arc<Mutex<Vec<u8>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The MCP servers of one worker.
pub struct Servers {
    servers: Vec<Arc<Server>>,
    outbox: Outbox,
    starting: tokio::sync::watch::Receiver<usize>,
}

/// Hears the server's notifications.
#[derive(Clone)]
struct Handler {
    stale: Arc<AtomicBool>,
}

impl ClientHandler for Handler {
    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        self.stale.store(true, Ordering::SeqCst);
        std::future::ready(())
    }

    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        info.client_info.name = "service-rs".into();
        info.client_info.version = env!("CARGO_PKG_VERSION").into();
        info
    }
}

impl Servers {
    /// Starts every server of `configs` in the background; `workspace` is the default working directory.
    pub fn start(
        configs: &BTreeMap<String, McpServer>,
        outbox: Outbox,
        workspace: &Path,
    ) -> Arc<Servers> {
        let (count, starting) = tokio::sync::watch::channel(configs.len());
        let count = Arc::new(count);
        let mut servers = Vec::new();
        for (name, config) in configs {
            let tool_timeout = match config {
                McpServer::Stdio {
                    tool_timeout_ms, ..
                }
                | McpServer::Http {
                    tool_timeout_ms, ..
                } => Duration::from_millis(*tool_timeout_ms),
            };
            let server = Arc::new(Server {
                name: name.clone(),
                tool_timeout,
                state: Mutex::new(State::Starting),
                reported: AtomicBool::new(false),
                stale: Arc::new(AtomicBool::new(false)),
                stderr: Arc::new(Mutex::new(Vec::new())),
            });
            servers.push(server.clone());
            let (config, outbox, workspace, count) = (
                config.clone(),
                outbox.clone(),
                workspace.to_path_buf(),
                count.clone(),
            );
            tokio::spawn(async move {
                // Boxed: rmcp's futures are tens of KiB, and held inline they would make every caller's stack
                // frame that large (touched, and so resident, in every worker), servers or not.
                let running = Box::pin(run(&server, config, &outbox, &workspace)).await;
                count.send_modify(|n| *n = n.saturating_sub(1));
                if let Some((running, child)) = running {
                    // The server lives until its transport closes: it exited, crashed or broke the protocol.
                    let reason = running.waiting().await;
                    if let Some(mut child) = child {
                        let _ = child.kill().await;
                    }
                    let message = format!(
                        "the server stopped ({reason:?}); its tools are gone for this session"
                    );
                    fail(&server, &outbox, message).await;
                }
            });
        }
        Arc::new(Servers {
            servers,
            outbox,
            starting,
        })
    }

    /// Waits until every server has started or failed.
    pub async fn ready(&self) {
        let mut starting = self.starting.clone();
        let _ = starting.wait_for(|n| *n == 0).await;
    }

    /// The tools of the running servers, listing again those whose list changed.
    pub async fn specs(&self) -> Vec<ToolSpec> {
        self.ready().await;
        let mut specs = Vec::new();
        for server in &self.servers {
            if server.stale.swap(false, Ordering::SeqCst) {
                self.refresh(server).await;
            }
            if let State::Running { tools, .. } = &*lock(&server.state) {
                specs.extend(tools.iter().map(|t| t.spec.clone()));
            }
        }
        specs
    }

    async fn refresh(&self, server: &Server) {
        let peer = match &*lock(&server.state) {
            State::Running { peer, .. } => peer.clone(),
            _ => return,
        };
        let Ok(Ok(listed)) = tokio::time::timeout(server.tool_timeout, peer.list_all_tools()).await
        else {
            return;
        };
        let tools = offered(&server.name, listed);
        let specs = tools.iter().map(|t| t.spec.clone()).collect();
        if let State::Running { tools: current, .. } = &mut *lock(&server.state) {
            *current = tools;
        }
        self.outbox
            .event(EventPayload::McpToolsChanged {
                server: server.name.clone(),
                tools: specs,
            })
            .await;
    }

    /// Why the tools of the server `name` would belong to are missing: it failed, for this reason.
    pub fn failure_of(&self, name: &str) -> Option<String> {
        self.servers.iter().find_map(|server| {
            let ours = name
                .strip_prefix(PREFIX)
                .and_then(|rest| rest.strip_prefix(server.name.as_str()))
                .is_some_and(|rest| rest.starts_with("__"));
            match &*lock(&server.state) {
                State::Failed(why) if ours => Some(format!(
                    "the MCP server \"{}\" that would offer it failed: {why}",
                    server.name
                )),
                _ => None,
            }
        })
    }

    /// True when `name` is a tool of a running server.
    pub fn offers(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    fn find(&self, name: &str) -> Option<(Arc<Server>, Peer<RoleClient>, String)> {
        self.servers
            .iter()
            .find_map(|server| match &*lock(&server.state) {
                State::Running { peer, tools } => tools
                    .iter()
                    .find(|t| t.spec.name == name)
                    .map(|t| (server.clone(), peer.clone(), t.original.clone())),
                _ => None,
            })
    }

    /// Calls the tool the model knows as `name`; never fails the turn.
    pub async fn call(&self, name: &str, args: Value, cancel: &CancellationToken) -> ToolResult {
        let Some((server, peer, original)) = self.find(name) else {
            return ToolResult::error(format!(
                "tool \"{name}\" is no longer available: its MCP server stopped"
            ));
        };
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            other => {
                return ToolResult::error(format!(
                    "arguments of {name} must be a JSON object, not {other}"
                ))
            }
        };
        let mut params = CallToolRequestParams::new(original);
        params.arguments = arguments;
        let call = tokio::time::timeout(server.tool_timeout, peer.call_tool(params));
        let outcome = tokio::select! {
            _ = cancel.cancelled() => return ToolResult::error("not finished: the turn was interrupted"),
            outcome = call => outcome,
        };
        match outcome {
            Err(_) => ToolResult::error(format!(
                "the MCP server \"{}\" did not answer {name} within {} ms (tool_timeout_ms)",
                server.name,
                server.tool_timeout.as_millis()
            )),
            Ok(Err(e)) => {
                // A failed request means a broken connection: the server is gone, and says so before the turn
                // goes on without its tools.
                fail(&server, &self.outbox, format!("the server failed a call of {name} ({e}); its tools are gone for this session")).await;
                let tail = tail(&server);
                ToolResult::error(format!(
                    "the MCP server \"{}\" failed the call: {e}{}",
                    server.name,
                    if tail.is_empty() {
                        String::new()
                    } else {
                        format!("; its stderr ends with:\n{tail}")
                    }
                ))
            }
            Ok(Ok(result)) => {
                let result = serde_json::to_value(&result).unwrap_or(Value::Null);
                let text = render(&result);
                if result["isError"] == true {
                    ToolResult::error(text)
                } else {
                    ToolResult::ok(text)
                }
            }
        }
    }
}

/// Starts one server and lists its tools; None (after a `mcp_server_failed`) when it could not. A stdio server's
/// child is the worker's to kill; dropping it kills it (`kill_on_drop`), and its reaper takes the namespace down.
async fn run(
    server: &Server,
    config: McpServer,
    outbox: &Outbox,
    workspace: &Path,
) -> Option<(
    RunningService<RoleClient, Handler>,
    Option<tokio::process::Child>,
)> {
    let started = Instant::now();
    let handler = Handler {
        stale: server.stale.clone(),
    };
    let (running, startup) = match config {
        McpServer::Stdio {
            command,
            args,
            env,
            cwd,
            startup_timeout_ms,
            ..
        } => {
            let startup = Duration::from_millis(startup_timeout_ms);
            let mut cmd = tokio::process::Command::new(&command);
            cmd.args(&args)
                .current_dir(
                    cwd.map(|c| crate::tools::resolve(workspace, &c))
                        .unwrap_or_else(|| workspace.to_path_buf()),
                )
                .env_clear()
                .envs(base_env())
                .envs(&env);
            if let Err(e) = crate::tools::exec::confine_process(&mut cmd) {
                fail(server, outbox, format!("cannot confine \"{command}\": {e}")).await;
                return None;
            }
            cmd.stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            let mut child = match crate::leftovers::spawn(&mut cmd) {
                Ok(child) => child,
                Err(e) => {
                    fail(server, outbox, format!("cannot start \"{command}\": {e}")).await;
                    return None;
                }
            };
            if let Some(stderr) = child.stderr.take() {
                tokio::spawn(keep_tail(stderr, server.stderr.clone()));
            }
            let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
                fail(
                    server,
                    outbox,
                    "its stdin and stdout could not be opened".into(),
                )
                .await;
                return None;
            };
            let transport = AsyncRwTransport::<RoleClient, _, _>::new(stdout, stdin)
                .with_max_line_length(MAX_MESSAGE);
            (
                tokio::time::timeout(startup, handler.serve(transport))
                    .await
                    .map(|r| r.map(|s| (s, Some(child))).map_err(|e| plain(&e))),
                startup,
            )
        }
        McpServer::Http {
            url,
            headers,
            startup_timeout_ms,
            ..
        } => {
            let startup = Duration::from_millis(startup_timeout_ms);
            if crate::egress::proxy_url().is_none()
                && crate::confine::strictness() != crate::confine::Strictness::BestEffort
            {
                let host = http::authority(&url);
                fail(
                    server,
                    outbox,
                    format!(
                        "{url}: this sandbox has no network; add \"{host}\" to sandbox.permissions.network in \
                         service.bundle.json5"
                    ),
                )
                .await;
                return None;
            }
            let transport = match http::transport(&url, &headers) {
                Ok(t) => t,
                Err(e) => {
                    fail(server, outbox, format!("{url}: {e}")).await;
                    return None;
                }
            };
            (
                tokio::time::timeout(startup, handler.serve(transport))
                    .await
                    .map(|r| {
                        r.map(|s| (s, None))
                            .map_err(|e| format!("{url}: {}", plain(&e)))
                    }),
                startup,
            )
        }
    };
    let running = match running {
        Err(_) => {
            fail(
                server,
                outbox,
                format!(
                    "it did not finish the MCP handshake within {} ms (startup_timeout_ms)",
                    startup.as_millis()
                ),
            )
            .await;
            return None;
        }
        Ok(Err(e)) => {
            fail(server, outbox, format!("the MCP handshake failed: {e}")).await;
            return None;
        }
        Ok(Ok(running)) => running,
    };
    let (running, child) = running;
    let listed = match tokio::time::timeout(startup, running.peer().list_all_tools()).await {
        Ok(Ok(listed)) => listed,
        Ok(Err(e)) => {
            fail(server, outbox, format!("tools/list failed: {e}")).await;
            return None;
        }
        Err(_) => {
            fail(
                server,
                outbox,
                format!(
                    "tools/list took longer than {} ms (startup_timeout_ms)",
                    startup.as_millis()
                ),
            )
            .await;
            return None;
        }
    };
    let tools = offered(&server.name, listed);
    let specs = tools.iter().map(|t| t.spec.clone()).collect();
    *lock(&server.state) = State::Running {
        peer: running.peer().clone(),
        tools,
    };
    outbox
        .event(EventPayload::McpServerStarted {
            server: server.name.clone(),
            tools: specs,
            startup_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
        .await;
    Some((running, child))
}

/// An rmcp error without the transport's Rust type name that rmcp puts in the middle of it.
fn plain(e: &dyn std::fmt::Display) -> String {
    let text = e.to_string();
    let inner = text
        .split_once("] error: ")
        .map(|(_, rest)| rest)
        .unwrap_or(&text);
    inner
        .trim_end_matches(", when send initialize request")
        .trim()
        .to_string()
}

/// The variables every server gets besides its own: the worker's (which bwrap cleared to PATH, HOME, LANG and
/// TERM) that a program needs, and the egress proxy's.
fn base_env() -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = ["PATH", "HOME", "LANG", "TERM"]
        .iter()
        .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
        .collect();
    env.extend(
        crate::egress::env()
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone())),
    );
    env
}

async fn keep_tail(mut stderr: tokio::process::ChildStderr, tail: Arc<Mutex<Vec<u8>>>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = stderr.read(&mut buf).await {
        if n == 0 {
            return;
        }
        let mut t = lock(&tail);
        t.extend_from_slice(&buf[..n]);
        if t.len() > STDERR_TAIL {
            let excess = t.len() - STDERR_TAIL;
            t.drain(..excess);
        }
    }
}

fn tail(server: &Server) -> String {
    String::from_utf8_lossy(&lock(&server.stderr))
        .trim()
        .to_string()
}

/// Marks the server failed and, the first time, says so with the tail of its stderr.
async fn fail(server: &Server, outbox: &Outbox, message: String) {
    *lock(&server.state) = State::Failed(message.clone());
    if server.reported.swap(true, Ordering::SeqCst) {
        return;
    }
    // Give a crashing server's last words a moment to arrive.
    tokio::time::sleep(Duration::from_millis(50)).await;
    outbox
        .event(EventPayload::McpServerFailed {
            server: server.name.clone(),
            message,
            stderr_tail: tail(server),
        })
        .await;
}
