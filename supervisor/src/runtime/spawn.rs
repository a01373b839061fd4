//! Starting a worker, a factory that knows nothing of sessions, in two steps: [`start`] makes a socket pair, launches
//! the worker through the launcher with one end as an inherited descriptor, hands a confined worker its cgroups
//! (see `sandbox::limits`), learns its pid from the kernel and reads its hello; [`configure`] waits until the worker
//! is inside its limits and gives it its assignment (the `configure` / `ready` half of the handshake). A sandboxed
//! worker may be started before its session exists and configured later (see `prestart`). Handing the configured
//! worker to a session is `worker::attach`'s.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use futures::{SinkExt, StreamExt};
use service_ipc::{SandboxMode, ToSupervisor, ToWorker, WorkerConfig, PROTOCOL_VERSION};
use tokio::sync::oneshot;
use tokio_util::codec::Framed;

use super::error::{Result, RuntimeError};
use super::launcher::LaunchSpec;
use super::process_spawn;
use super::worker_process::WorkerProcess;
use super::Inner;
use crate::bundle::Bundle;
use crate::egress::{self, Egress};
use crate::sandbox::limits::Limits;
use service_ipc::{ChatMessage, FrameCodec};

/// The framed socket to a worker.
pub(super) type Conn = Framed<tokio::net::UnixStream, FrameCodec<ToSupervisor, ToWorker>>;

/// How long an ended worker's cgroups may take to empty before they are left to the last drop of its limits.
pub(super) const CGROUP_RELEASE: std::time::Duration = std::time::Duration::from_secs(2);

/// A worker that has connected and said hello, and has no session yet.
pub(crate) struct Started {
    pub(super) child: WorkerProcess,
    pub(super) conn: Conn,
    /// Kept until the worker has exited (its cgroups are removed when dropped).
    pub(super) limits: Option<Arc<Limits>>,
    /// Resolves once the worker is inside its limits.
    pub(super) confining: Option<tokio::task::JoinHandle<std::io::Result<()>>>,
    /// Its egress socket's directory (made only for a proxy), removed when the worker ends.
    pub(super) run_dir: PathBuf,
    /// The bundle root in the worker's view.
    pub(super) bundle_dir: PathBuf,
    /// The operator's hook scripts in the worker's view.
    pub(super) operator_hooks: Option<PathBuf>,
    /// The workspace in the worker's view.
    pub(super) workspace: PathBuf,
    /// The mode that confines it.
    pub(super) confinement: SandboxMode,
    /// Its egress proxy, when the sandbox may reach hosts.
    pub(super) egress: Option<Egress>,
    /// The proxy's socket in the worker's view, and the forwarder's inherited listener (Landlock).
    pub(super) egress_view: (Option<PathBuf>, Option<i32>),
    /// What confines it.
    pub(super) backend: service_ipc::SandboxBackend,
    /// Its process id in the supervisor's view, from its connection's credentials (which the kernel checks).
    pub(super) pid: Option<u32>,
}

impl Started {
    /// False once the worker process has exited.
    pub(crate) fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Kills the worker and waits for it to exit, then removes its cgroups (which must be empty by then) and its
    /// socket directory.
    pub(crate) async fn discard(mut self) {
        self.child.kill().await;
        if let Some(limits) = self.limits.take() {
            limits.release(CGROUP_RELEASE).await;
        }
        let _ = std::fs::remove_dir_all(&self.run_dir);
    }
}

/// Starts a worker for `bundle` with `host_workspace` as its workspace, up to its hello. `name` names its egress
/// socket's directory (`run/<name>`, when it has a proxy) and its cgroups.
pub(crate) async fn start(
    rt: &Inner,
    name: &str,
    bundle: &Bundle,
    host_workspace: &Path,
) -> Result<Started> {
    let unavailable = |m: String| RuntimeError::WorkerUnavailable(m);
    // Made only for an egress proxy's socket: a worker's own socket is a pair with no path, and on ext4 a
    // directory per session start was a third of the inodes a cold turn made (see `egress_for`).
    let run_dir = rt.home.run_dir().join(name);
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| unavailable(format!("cannot make the worker's socket pair: {e}")))?;
    // With SO_PASSCRED the kernel attaches the sender's pid to what the worker writes: that is how the supervisor
    // learns the worker's pid (for its cgroups) without trusting anything the worker says.
    nix::sys::socket::setsockopt(&ours, nix::sys::socket::sockopt::PassCred, &true)
        .map_err(|e| unavailable(format!("cannot set up the worker's socket: {e}")))?;
    let egress = egress_for(rt, bundle, &run_dir)?;
    let launch = rt.launcher.prepare(&LaunchSpec {
        session_id: name,
        exe: &rt.options.worker_exe,
        ipc_fd: theirs.as_raw_fd(),
        bundle_root: &bundle.root,
        workspace: host_workspace,
        fresh_workspace: host_workspace.starts_with(rt.home.root()),
        sandbox: &bundle.manifest.sandbox,
        cache_dir: &rt.home.sandbox_cache(),
        egress_socket: egress.as_ref().map(|e| e.socket()),
        operator_hooks: Some(rt.home.operator_hooks_dir())
            .filter(|d| d.is_dir())
            .as_deref(),
        run_dir: &run_dir,
    })?;
    // A worker on the host has the host's network; a proxy would only be a detour it need not take.
    let egress = egress.filter(|_| launch.confinement != SandboxMode::DangerFullAccess);
    let limits = launch.limits;
    let warm_for = rt.options.handshake_timeout;
    // Its own process group (see `process_spawn`): a terminal's Ctrl-C signals the foreground group, and it is
    // the supervisor's to turn into an interrupt, not the worker's to die of. Nothing from a sandbox may reach this
    // process's stdout, which may carry a protocol (`acp`, `mcp serve`): what the worker writes there goes to
    // stderr, with the logs.
    let null = |write: bool| {
        let file = std::fs::OpenOptions::new()
            .read(!write)
            .write(write)
            .open("/dev/null");
        file.map(OwnedFd::from)
    };
    // On this runtime thread, though the clone waits for the child's execve (4.5 ms on average with 300 sandboxes
    // starting at once): bwrap dies with the thread that started it (`process_spawn::spawn`), and a blocking-pool
    // thread would exit after 10 s idle, taking every sandbox it had started.
    let mut inherited: Vec<_> = launch.inherit.iter().map(|fd| fd.as_fd()).collect();
    inherited.push(theirs.as_fd());
    let spawned = null(false).and_then(|stdin| {
        let stderr = std::io::stderr().as_fd().try_clone_to_owned();
        let stdout = stderr.or_else(|_| null(true))?;
        let stdio = process_spawn::Stdio {
            stdin: stdin.as_fd(),
            stdout: stdout.as_fd(),
        };
        process_spawn::spawn(&launch.command, stdio, &inherited)
    });
    drop(inherited);
    drop(launch.inherit);
    let mut child = spawned.map(WorkerProcess::new).map_err(|e| {
        unavailable(format!(
            "cannot start {}: {e}",
            rt.options.worker_exe.display()
        ))
    })?;
    drop(theirs);

    // The cgroups are made on a blocking thread while bwrap starts, and handed to the worker, which moves itself
    // in before its hello; once it has said hello, the supervisor checks the move (and makes what it did not). It
    // gets its configuration (and so starts no MCP server, turn or command) only after that (see `attach`).
    let handoff = limits
        .as_ref()
        .map(|_| ours.try_clone())
        .transpose()
        .map_err(|e| unavailable(format!("cannot set up the worker's socket: {e}")))?;
    let (worker_pid, confining) = match (&limits, handoff) {
        (Some(limits), Some(handoff)) => {
            let (pid_tx, pid_rx) = oneshot::channel::<u32>();
            let (limits, name) = (limits.clone(), name.to_string());
            let confining = tokio::task::spawn_blocking(move || {
                limits.prepare();
                let handles = limits.handles();
                // Sent even when empty: the worker waits for it. A worker that is gone already needs nothing.
                if let Err(e) = hand_over(&handoff, &handles) {
                    tracing::debug!(worker = %name, "cannot hand the worker its cgroups: {e}");
                }
                // Only a move by pid needs the lock warm: where the worker cannot move itself (v2). After the
                // mkdirs, as a migration holds the cgroup mutex while it waits, and would hold them up.
                let _warm = (handles.len() < limits.dirs().len())
                    .then(|| crate::sandbox::limits::warm_up(warm_for));
                drop((handles, handoff));
                let pid = pid_rx.blocking_recv().map_err(|_| {
                    std::io::Error::other("the worker never connected, so it was not confined")
                })?;
                let entered = limits.enter(pid);
                tracing::debug!(worker = %name, "worker limits: {}", limits.describe());
                entered
            });
            (Some(pid_tx), Some(confining))
        }
        _ => (None, None),
    };

    let timeout = rt.options.handshake_timeout;
    let stream = ours
        .set_nonblocking(true)
        .and_then(|()| tokio::net::UnixStream::from_std(ours))
        .map_err(|e| unavailable(format!("cannot set up the worker's socket: {e}")))?;
    let first = tokio::select! {
        p = tokio::time::timeout(timeout, sender_pid(&stream)) => p,
        status = child.wait() => {
            return Err(unavailable(format!("the worker exited before saying hello ({})", describe_exit(status.ok()))));
        }
    };
    let pid = match first {
        Ok(Ok(pid)) => pid,
        Ok(Err(e)) => {
            return Err(unavailable(format!(
                "reading the worker's hello failed: {e}"
            )))
        }
        Err(_) => {
            return Err(unavailable(format!(
                "the worker did not say hello within {timeout:?}"
            )))
        }
    };
    let _ = nix::sys::socket::setsockopt(&stream, nix::sys::socket::sockopt::PassCred, &false);
    if let Some(pid_tx) = worker_pid {
        let pid = pid.ok_or_else(|| {
            unavailable("cannot tell the worker's process id from its connection, so its limits cannot be applied".into())
        })?;
        // The receiver lives until the blocking thread has the pid; a send can only fail if that thread panicked,
        // which `confining` reports.
        let _ = pid_tx.send(pid);
    }
    let mut conn: Conn = Framed::new(stream, FrameCodec::new());
    tokio::time::timeout(timeout, hello(&mut conn))
        .await
        .map_err(|_| unavailable(format!("the worker did not say hello within {timeout:?}")))??;
    Ok(Started {
        child,
        conn,
        limits,
        confining,
        run_dir,
        bundle_dir: launch.bundle_dir,
        operator_hooks: launch.operator_hooks,
        workspace: launch.workspace,
        confinement: launch.confinement,
        egress,
        egress_view: (launch.egress_socket, launch.egress_listener_fd),
        backend: launch.backend,
        pid,
    })
}

/// The egress proxy of a worker for `bundle`, bound in `run_dir` (made here); None when its sandbox may reach no
/// host, and then `run_dir` is not made.
fn egress_for(rt: &Inner, bundle: &Bundle, run_dir: &Path) -> Result<Option<Egress>> {
    // The manifest was validated when the bundle was built; a failure here means the store was edited since.
    let patterns = bundle
        .manifest
        .sandbox
        .permissions
        .hosts()
        .map_err(|(i, e)| {
            RuntimeError::WorkerUnavailable(format!("sandbox.permissions.network[{i}]: {e}"))
        })?;
    let ask = bundle.agent.permissions.network == service_ipc::PermissionAction::Ask;
    let Some(policy) = egress::Policy::new(patterns, ask) else {
        return Ok(None);
    };
    std::fs::create_dir_all(run_dir).map_err(|e| RuntimeError::io("cannot create", run_dir, e))?;
    let socket = run_dir.join("egress.sock");
    Egress::start(
        &socket,
        policy,
        rt.options.resolver.clone(),
        super::ServiceRuntime::reserved_addresses(rt).into(),
    )
    .map(Some)
    .map_err(|e| RuntimeError::io("cannot start the egress proxy at", &socket, e))
}

/// What a started worker is given to run: a session's id, bundle and history, as plain data.
pub(crate) struct Assignment<'a> {
    /// The session id.
    pub id: &'a str,
    /// Its bundle.
    pub bundle: &'a Bundle,
    /// Its conversation so far.
    pub history: Vec<ChatMessage>,
    /// The project instructions that follow its bundle's system prompt.
    pub instructions: Arc<crate::project_instructions::ProjectInstructions>,
    /// Whether its subagents may start (it is not as deep as `max_subagent_depth` allows).
    pub may_delegate: bool,
    /// The hooks it runs.
    pub hooks: Arc<Vec<service_ipc::HookSpec>>,
    /// It is a fork no turn has ended in yet.
    pub fork_fresh: bool,
}

/// Waits until a started worker is inside its limits, connects its egress proxy to `sink`, and gives it
/// `assignment`; a worker that cannot be configured is discarded.
pub(crate) async fn configure(
    rt: &Inner,
    mut started: Started,
    assignment: Assignment<'_>,
    sink: Arc<dyn egress::Sink>,
) -> Result<Started> {
    let timeout = rt.options.handshake_timeout;
    // The configuration starts the worker's MCP servers: it waits until the worker is inside its cgroups, or a
    // server forked before the move would stay outside them.
    if let Some(confining) = started.confining.take() {
        let entered = match tokio::time::timeout(timeout, confining).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Ok(Err(e))) => Err(format!(
                "cannot apply the sandbox limits to the worker: {e}"
            )),
            Ok(Err(e)) => Err(format!("applying the worker's limits failed: {e}")),
            Err(_) => Err(format!(
                "applying the worker's limits took more than {timeout:?}"
            )),
        };
        if let Err(e) = entered {
            started.discard().await;
            return Err(RuntimeError::WorkerUnavailable(e));
        }
    }
    // Before the configuration: with it the worker starts its MCP servers, and an HTTP one connects through the
    // proxy at once.
    if let Some(egress) = &started.egress {
        egress.attach(sink);
    }
    let config = config_for(rt, assignment, &started);
    let configured = tokio::time::timeout(timeout, handshake(&mut started.conn, config))
        .await
        .unwrap_or_else(|_| {
            Err(RuntimeError::WorkerUnavailable(format!(
                "the worker did not finish the handshake within {timeout:?}"
            )))
        });
    match configured {
        Ok(()) => Ok(started),
        Err(e) => {
            started.discard().await;
            Err(e)
        }
    }
}

/// What the worker is told of its assignment, with paths as it sees them.
fn config_for(rt: &Inner, assignment: Assignment<'_>, started: &Started) -> WorkerConfig {
    let Assignment {
        id,
        bundle,
        history,
        instructions,
        may_delegate,
        hooks,
        fork_fresh,
    } = assignment;
    let skills = bundle
        .skills
        .iter()
        .map(|s| service_ipc::SkillInfo {
            name: s.name.clone(),
            description: s.description.clone(),
            path: started.bundle_dir.join(&s.path).display().to_string(),
        })
        .collect();
    let agent = &bundle.agent;
    WorkerConfig {
        protocol_version: PROTOCOL_VERSION,
        session_id: id.to_string(),
        bundle_dir: started.bundle_dir.display().to_string(),
        workspace: started.workspace.display().to_string(),
        sandbox_mode: started.confinement,
        system_prompt: instructions.system_prompt(&agent.system_prompt),
        tools: bundle.manifest.tools.clone(),
        skills,
        max_steps: agent.max_steps,
        memory_window: agent.memory.window_messages(),
        permissions: agent.permissions.clone(),
        history,
        heartbeat_ms: rt.options.heartbeat.as_millis() as u64,
        no_proxy: no_proxy(&bundle.manifest.sandbox.permissions.network),
        egress_proxy: started
            .egress
            .as_ref()
            .and(started.egress_view.0.as_ref())
            .map(|p| p.display().to_string()),
        egress_listener_fd: started.egress.as_ref().and(started.egress_view.1),
        sandbox_backend: started.backend,
        mcp_servers: mcp_servers(rt, id, bundle, started),
        spare_shell_idle_ms: rt.options.spare_shell_idle.as_millis() as u64,
        a2a_agents: agent
            .a2a_agents
            .iter()
            .map(|a| a.to_worker(|name| host_variable(rt, id, name)))
            .collect(),
        subagents: if may_delegate {
            subagents_of(rt, bundle)
        } else {
            Vec::new()
        },
        executor: agent.executor,
        codeact_timeout_ms: agent.codeact.timeout_ms,
        hooks: hooks.to_vec(),
        fork: fork_fresh,
        operator_hooks_dir: started
            .operator_hooks
            .as_ref()
            .map(|d| d.display().to_string()),
    }
}

/// The subagents the `Agent` tool lists: those agent.yaml names, or for `"*"` every bundle in the store.
fn subagents_of(rt: &Inner, bundle: &Bundle) -> Vec<service_ipc::SubagentInfo> {
    use crate::bundle::subagents::SubagentEntry;
    let mut out = Vec::new();
    for entry in &bundle.agent.subagents {
        match entry {
            SubagentEntry::Named(s) => out.push(service_ipc::SubagentInfo {
                name: s.name.clone(),
                description: s.description.clone(),
            }),
            SubagentEntry::Any(_) => {
                let installed = crate::bundle::store::list(&rt.home).unwrap_or_default();
                for b in installed.into_iter().flatten() {
                    if out
                        .iter()
                        .any(|s: &service_ipc::SubagentInfo| s.name == b.manifest.id)
                    {
                        continue;
                    }
                    out.push(service_ipc::SubagentInfo {
                        name: b.manifest.id.clone(),
                        description: b
                            .manifest
                            .description
                            .clone()
                            .unwrap_or_else(|| b.manifest.display_name().to_string()),
                    });
                }
            }
        }
    }
    out
}

/// The loopback names the sandbox's commands reach directly: `localhost` and `127.0.0.1`, less each one a network
/// rule names (`127.0.0.1:5000`), whose connections must reach the host's service through the proxy rather than
/// the sandbox's own loopback. `NO_PROXY` takes no ports, so such a name goes through the proxy on every port.
fn no_proxy(rules: &[String]) -> String {
    let named = |name: &str| {
        rules.iter().any(|rule| {
            let host = match rule.rsplit_once(':') {
                Some((host, port)) if port == "*" || port.parse::<u16>().is_ok() => host,
                _ => rule.as_str(),
            };
            host.eq_ignore_ascii_case(name)
        })
    };
    ["localhost", "127.0.0.1"]
        .into_iter()
        .filter(|n| !named(n))
        .collect::<Vec<_>>()
        .join(",")
}

/// The worker's form of the bundle's MCP servers, with `env_from_host` read from the supervisor's environment (see
/// [`host_variable`]).
fn mcp_servers(
    rt: &Inner,
    id: &str,
    bundle: &Bundle,
    started: &Started,
) -> std::collections::BTreeMap<String, service_ipc::McpServer> {
    let landlock = started.backend == service_ipc::SandboxBackend::Landlock
        && started.confinement != SandboxMode::DangerFullAccess;
    bundle
        .agent
        .mcp_servers
        .iter()
        .map(|(name, spec)| {
            let mut server = spec.to_worker(|var| host_variable(rt, id, var));
            if landlock {
                seen_at_host_paths(&mut server, &started.workspace, &started.bundle_dir);
            }
            (name.clone(), server)
        })
        .collect()
}

/// A stdio server's command, arguments, environment and directory with the sandbox's names of the workspace and the
/// bundle replaced by the host paths a Landlock sandbox sees (see `sandbox::landlock::host_named`).
fn seen_at_host_paths(server: &mut service_ipc::McpServer, workspace: &Path, bundle: &Path) {
    use crate::sandbox::landlock::host_named;
    if let service_ipc::McpServer::Stdio {
        command,
        args,
        env,
        cwd,
        ..
    } = server
    {
        for value in std::iter::once(command)
            .chain(args.iter_mut())
            .chain(env.values_mut())
            .chain(cwd.iter_mut())
        {
            *value = host_named(value, workspace, bundle);
        }
    }
}

/// Host variable `name` for a bundle (`env_from_host`, an A2A agent's `token_env`): only when the operator listed it,
/// and never one that holds a provider key or the server's own secrets.
fn host_variable(rt: &Inner, id: &str, name: &str) -> Option<String> {
    if !rt.options.keys.passes(name) {
        tracing::warn!(session = %id, "the bundle asks for host variable {name}, which the operator has not listed (SERVICE_PASS_ENV, --pass-env) or which holds a secret of the server; not passed");
        return None;
    }
    std::env::var(name).ok()
}

/// Sends the cgroup handoff over the worker's socket: one byte carrying `handles` (see
/// `service_ipc::ENTER_CGROUPS_FLAG`).
fn hand_over(
    socket: &std::os::unix::net::UnixStream,
    handles: &[std::fs::File],
) -> std::io::Result<()> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let fds: Vec<std::os::fd::RawFd> = handles
        .iter()
        .take(service_ipc::MAX_CGROUP_HANDLES)
        .map(AsRawFd::as_raw_fd)
        .collect();
    let rights = [ControlMessage::ScmRights(&fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    let iov = [std::io::IoSlice::new(&[0])];
    loop {
        match sendmsg::<()>(
            socket.as_raw_fd(),
            &iov,
            cmsgs,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            sent => return sent.map(drop).map_err(std::io::Error::from),
        }
    }
}

/// Waits for the worker's first bytes and returns the pid the kernel stamped on them (in our pid namespace), without
/// consuming them. None when the kernel sent no credentials.
async fn sender_pid(stream: &tokio::net::UnixStream) -> std::io::Result<Option<u32>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, UnixCredentials};
    loop {
        stream.readable().await?;
        let peeked = stream.try_io(tokio::io::Interest::READABLE, || {
            let mut byte = [0u8; 1];
            let mut iov = [std::io::IoSliceMut::new(&mut byte)];
            let mut space = nix::cmsg_space!(UnixCredentials);
            let msg = recvmsg::<()>(
                stream.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                MsgFlags::MSG_PEEK,
            )
            .map_err(std::io::Error::from)?;
            if msg.bytes == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "the worker closed its socket",
                ));
            }
            let pid = msg
                .cmsgs()
                .map_err(std::io::Error::from)?
                .find_map(|c| match c {
                    ControlMessageOwned::ScmCredentials(creds) => u32::try_from(creds.pid()).ok(),
                    _ => None,
                });
            Ok(pid)
        });
        match peeked {
            Ok(pid) => return Ok(pid),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(e) => return Err(e),
        }
    }
}

/// The worker's first frame: its hello, in our protocol version.
async fn hello(conn: &mut Conn) -> Result<()> {
    let protocol = |m: String| RuntimeError::WorkerUnavailable(m);
    match conn.next().await {
        Some(Ok(ToSupervisor::Hello { protocol_version, .. })) if protocol_version == PROTOCOL_VERSION => Ok(()),
        Some(Ok(ToSupervisor::Hello { protocol_version, .. })) => Err(protocol(format!(
            "the worker speaks protocol {protocol_version}, the supervisor {PROTOCOL_VERSION}; reinstall service-rs"
        ))),
        Some(Ok(other)) => Err(protocol(format!("expected hello from the worker, got {other:?}"))),
        Some(Err(e)) => Err(protocol(format!("bad handshake frame: {e}"))),
        None => Err(protocol("the worker closed the socket during the handshake".into())),
    }
}

/// Sends the configuration and waits for `ready`.
async fn handshake(conn: &mut Conn, config: WorkerConfig) -> Result<()> {
    let protocol = |m: String| RuntimeError::WorkerUnavailable(m);
    conn.send(ToWorker::Configure(config))
        .await
        .map_err(|e| protocol(format!("cannot configure the worker: {e}")))?;
    match conn.next().await {
        Some(Ok(ToSupervisor::Ready)) => Ok(()),
        Some(Ok(other)) => Err(protocol(format!(
            "expected ready from the worker, got {other:?}"
        ))),
        Some(Err(e)) => Err(protocol(format!("bad handshake frame: {e}"))),
        None => Err(protocol(
            "the worker closed the socket during the handshake".into(),
        )),
    }
}

/// "exited with code N" or "killed by signal N (NAME)".
pub(super) fn describe_exit(status: Option<std::process::ExitStatus>) -> String {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(code), _) => format!("it exited with code {code}"),
            (None, Some(sig)) => {
                let name = nix::sys::signal::Signal::try_from(sig)
                    .map(|s| s.as_str())
                    .unwrap_or("unknown");
                format!("it was killed by signal {sig} ({name})")
            }
            _ => "it exited".to_string(),
        },
        None => "its exit status is unknown".to_string(),
    }
}
