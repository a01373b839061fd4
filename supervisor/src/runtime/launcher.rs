//! How a worker process is started. The runtime asks a [`Launcher`] for the command and for the paths as the
//! worker will see them; the host launcher runs the worker directly, the sandbox launcher wraps it in bwrap.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use service_ipc::{SandboxBackend, SandboxMode};

use super::error::Result;
use super::process_spawn::ProcessSpec;
use crate::bundle::SandboxSpec;
use crate::sandbox::limits::Limits;

/// What the runtime knows about the worker to start.
pub struct LaunchSpec<'a> {
    /// The session the worker serves.
    pub session_id: &'a str,
    /// The `service-rs` binary carrying the worker entry.
    pub exe: &'a Path,
    /// The worker's end of its socket pair, inherited at this descriptor number.
    pub ipc_fd: std::os::fd::RawFd,
    /// Bundle root (host path).
    pub bundle_root: &'a Path,
    /// Session working directory (host path).
    pub workspace: &'a Path,
    /// The workspace is one the store made for the session, not a host directory the session was pointed at.
    pub fresh_workspace: bool,
    /// The manifest's sandbox settings.
    pub sandbox: &'a SandboxSpec,
    /// A directory the launcher may keep prepared files in across sessions (`$SERVICE_HOME/run/sandbox`).
    pub cache_dir: &'a Path,
    /// The egress proxy's socket, to bind into the sandbox, when the sandbox may reach hosts.
    pub egress_socket: Option<&'a Path>,
    /// The operator's hook scripts (host path), to bind read-only, when the store has them.
    pub operator_hooks: Option<&'a Path>,
    /// The worker's own run directory (host path), removed when it ends; the launcher may make it.
    pub run_dir: &'a Path,
}

/// A prepared worker command and the paths as the worker sees them.
pub struct Launch {
    /// The process to spawn.
    pub command: ProcessSpec,
    /// Bundle root inside the worker's view.
    pub bundle_dir: PathBuf,
    /// Workspace inside the worker's view.
    pub workspace: PathBuf,
    /// The operator's hook scripts inside the worker's view.
    pub operator_hooks: Option<PathBuf>,
    /// The mode that actually confines the worker.
    pub confinement: SandboxMode,
    /// Limits to apply to the worker once it has connected; kept until it has exited (its cgroups are removed
    /// when dropped).
    pub limits: Option<Arc<Limits>>,
    /// Descriptors the command names in its arguments, which it must inherit (and no other process); closed once
    /// it has started.
    pub inherit: Vec<std::os::fd::OwnedFd>,
    /// The egress proxy's socket as the worker sees it, when the sandbox may reach hosts.
    pub egress_socket: Option<PathBuf>,
    /// The inherited loopback listener the worker forwards to the proxy (the Landlock backend makes it).
    pub egress_listener_fd: Option<std::os::fd::RawFd>,
    /// What confines the worker (meaningful only when `confinement` is a confined mode).
    pub backend: SandboxBackend,
}

/// How a worker of a bundle would see its session: known before one starts, for a turn that needs none yet.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// Workspace inside the worker's view.
    pub workspace: PathBuf,
    /// The mode that would confine the worker.
    pub confinement: SandboxMode,
}

/// Starts workers.
pub trait Launcher: Send + Sync {
    /// The workspace and confinement a worker of `sandbox` over `workspace` would get, or why none can start (a
    /// sandbox user who may not enter or write it, known before any model call). `fresh`: the store made the
    /// workspace for the session (see [`LaunchSpec::fresh_workspace`]).
    fn view(&self, sandbox: &SandboxSpec, workspace: &Path, fresh: bool) -> Result<View>;

    /// Prepares the command for one worker.
    fn prepare(&self, spec: &LaunchSpec<'_>) -> Result<Launch>;

    /// Starts finding out, in the background, what a worker of `sandbox` will be confined by, for a session that
    /// is about to run; returns at once. Nothing to find out by default.
    fn ahead(&self, _sandbox: &SandboxSpec) {}

    /// Starts making, in the background, what workers of `sandbox` share and find in `cache_dir`, so that no
    /// worker start waits for it; returns at once. Nothing to make by default.
    fn warm(&self, _sandbox: &SandboxSpec, _cache_dir: &Path) {}
}

/// Runs the worker directly on the host, with no confinement.
pub struct HostLauncher;

/// The only environment a worker gets: enough to run shells and tools, and never a provider key.
pub fn minimal_env(command: &mut ProcessSpec, home: &Path) {
    command.env.clear();
    command.env(
        "PATH",
        "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
    );
    command.env("HOME", home);
    command.env(
        "LANG",
        std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".into()),
    );
    command.env(
        "TERM",
        std::env::var("TERM").unwrap_or_else(|_| "dumb".into()),
    );
}

impl Launcher for HostLauncher {
    fn view(&self, _: &SandboxSpec, workspace: &Path, _fresh: bool) -> Result<View> {
        Ok(View {
            workspace: workspace.to_path_buf(),
            confinement: SandboxMode::DangerFullAccess,
        })
    }

    fn prepare(&self, spec: &LaunchSpec<'_>) -> Result<Launch> {
        let mut command = ProcessSpec::new(spec.exe);
        command
            .arg("worker")
            .arg("--ipc-fd")
            .arg(spec.ipc_fd.to_string())
            .arg("--label")
            .arg(spec.session_id);
        command.cwd = spec.workspace.to_path_buf();
        command.die_with_parent = true;
        minimal_env(&mut command, spec.workspace);
        let view = self.view(spec.sandbox, spec.workspace, spec.fresh_workspace)?;
        Ok(Launch {
            command,
            bundle_dir: spec.bundle_root.to_path_buf(),
            operator_hooks: spec.operator_hooks.map(Path::to_path_buf),
            workspace: view.workspace,
            confinement: view.confinement,
            limits: None,
            inherit: Vec::new(),
            egress_socket: None,
            egress_listener_fd: None,
            backend: SandboxBackend::Bwrap,
        })
    }
}
