//! Confinement of session workers, as the bundle's manifest asks, by one of two backends ([`backend`]).
//!
//! - [`profile`]: the embedded `sandbox-profiles/` data and its resolution against the host.
//! - [`bwrap`]: the pure function from a resolved profile to the bwrap argument vector.
//! - [`etc_snapshot`]: the profile's `/etc` files as one snapshot directory, bound once.
//! - [`landlock`]: the same profile as Landlock rules and a seccomp filter, where bubblewrap cannot start
//!   (`landlock_launch` starts such a worker).
//! - [`host_dir`]: the bundle and workspace directories, opened without following links and bound by descriptor.
//! - [`identity`], [`userns`]: the host user a sandbox runs as (never root unless the operator says so), and the
//!   user namespace that maps it.
//! - [`limits`]: cgroups and rlimits for `sandbox.resources`.
//!
//! The launcher confines the worker process itself, so the Bash tool and operator commands run inside the same
//! sandbox without another one per command. `danger_full_access`, or `--dangerous-sandbox-mode`, runs the worker
//! on the host; a confined mode with no backend that can start is an error that says how to fix it, never a
//! silent fallback to the host. `auto` choosing Landlock is said by `doctor` and in `serve`'s start-up line.

pub mod backend;
pub mod bwrap;
pub mod etc_snapshot;
pub mod host_dir;
pub mod identity;
pub mod landlock;
mod landlock_launch;
pub mod limits;
pub mod occupancy;
pub mod profile;
pub mod userns;

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::bundle::SandboxSpec;
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::launcher::{HostLauncher, Launch, LaunchSpec, Launcher, View};
use crate::runtime::process_spawn::ProcessSpec;

/// Starts workers confined as their manifest says (or on the host when `dangerous` is set).
pub struct SandboxLauncher {
    dangerous: bool,
    user: identity::SandboxUser,
    /// The user namespace of each host user that sandboxes run as, made at the first such start.
    namespaces: Mutex<std::collections::HashMap<identity::HostId, std::os::fd::OwnedFd>>,
    /// The backend setting, resolved on this host at the first confined start.
    choice: backend::BackendChoice,
    resolved: Arc<std::sync::OnceLock<backend::Resolved>>,
    /// A thread resolving it ahead has been started (see [`Launcher::ahead`]).
    resolving: std::sync::atomic::AtomicBool,
    /// The host views whose shared files [`Launcher::warm`] has made ready (or is making) in this process.
    warmed: Arc<Mutex<HashSet<Warmed>>>,
    /// The file `auto`'s answer is kept in for the next processes (see `backend::resolve_remembered`).
    backend_cache: Option<PathBuf>,
}

/// What decides a sandbox's host mounts besides the host itself, so what one warm-up makes ready for a bundle.
type Warmed = (service_ipc::SystemToolsMode, Vec<String>, bool, PathBuf);

impl SandboxLauncher {
    /// A launcher that confines with the backend `choice` resolves to here and runs sandboxes as `user` says;
    /// `dangerous` runs every worker on the host.
    pub fn new(
        dangerous: bool,
        user: identity::SandboxUser,
        choice: backend::BackendChoice,
    ) -> Self {
        SandboxLauncher {
            dangerous,
            user,
            namespaces: Mutex::default(),
            choice,
            resolved: Arc::default(),
            resolving: std::sync::atomic::AtomicBool::new(false),
            warmed: Arc::default(),
            backend_cache: None,
        }
    }

    /// Keeps `auto`'s answer in `file` for the next processes, and reads it from there.
    pub fn remembering_in(mut self, file: PathBuf) -> Self {
        self.backend_cache = Some(file);
        self
    }

    /// The backend sandboxes get here (resolved once).
    pub fn resolved(&self) -> &backend::Resolved {
        self.resolved
            .get_or_init(|| resolve(self.choice, self.backend_cache.as_deref()))
    }

    /// The host mounts of a sandbox of `sandbox`, its `/etc` files as one snapshot in `cache_dir` when it can have
    /// one (made if missing; see [`etc_snapshot`]).
    fn mounts(sandbox: &SandboxSpec, cache_dir: &Path) -> Result<Vec<profile::Mount>> {
        let (tools, mounts) = host_mounts(sandbox, sandbox.permissions.network_enabled())?;
        Ok(etc_snapshot::consolidate(
            mounts,
            &tools.network_files,
            cache_dir,
        ))
    }

    /// The directories a worker of `spec` gets, opened as they are now through no link (a workspace, a parent
    /// of a session's `cwd`, may have been changed by a sandbox; the bundle too, for one rule for every
    /// directory), and the host user it runs as, who is handed the egress socket.
    fn open(&self, spec: &LaunchSpec<'_>, mode: &profile::ModeProfile) -> Result<Opened> {
        let bind_err = |e: host_dir::HostDirError| RuntimeError::WorkerUnavailable(e.to_string());
        let workspace = host_dir::open_no_links(spec.workspace).map_err(bind_err)?;
        let bundle = host_dir::open_no_links(spec.bundle_root).map_err(bind_err)?;
        let hooks = spec
            .operator_hooks
            .map(host_dir::open_no_links)
            .transpose()
            .map_err(bind_err)?;
        let runs_as = self
            .user
            .over(
                workspace.as_fd(),
                spec.workspace,
                mode.workspace_writable,
                spec.fresh_workspace,
            )
            .map_err(RuntimeError::WorkerUnavailable)?;
        if let (Some(id), Some(socket)) = (runs_as, spec.egress_socket) {
            identity::give_socket(socket, id)
                .map_err(|e| RuntimeError::io("cannot hand over", socket, e))?;
        }
        Ok(Opened {
            workspace,
            bundle,
            hooks,
            runs_as,
        })
    }

    /// A descriptor of the user namespace for sandboxes that run as `id`, made at the first call.
    fn namespace(&self, id: identity::HostId) -> Result<std::os::fd::OwnedFd> {
        let mut made = lock(&self.namespaces);
        let ns = match made.entry(id) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(userns::make(id).map_err(|e| {
                    RuntimeError::SandboxUnavailable(format!(
                        "cannot make the user namespace of sandboxes that run as uid {}: {e}",
                        id.uid
                    ))
                })?)
            }
        };
        ns.try_clone().map_err(|e| {
            RuntimeError::SandboxUnavailable(format!("cannot pass on a user namespace: {e}"))
        })
    }

    /// What confines a worker of `sandbox` and its mode's profile; None when it runs on the host.
    fn confining(
        &self,
        sandbox: &SandboxSpec,
    ) -> Result<Option<(Confiner<'_>, profile::ModeProfile)>> {
        let mode = profile::mode_profile(sandbox.mode).map_err(RuntimeError::SandboxUnavailable)?;
        if self.dangerous || !mode.confined {
            return Ok(None);
        }
        if !cfg!(target_os = "linux") {
            return Err(unavailable(sandbox.mode));
        }
        match self.resolved() {
            backend::Resolved::Bwrap(path) => Ok(Some((Confiner::Bwrap(path), mode))),
            backend::Resolved::Landlock { abi, .. } => Ok(Some((Confiner::Landlock(*abi), mode))),
            backend::Resolved::Unavailable(why) => Err(RuntimeError::SandboxUnavailable(format!(
                "this bundle's sandbox mode {} needs a sandbox, and none can start here: {why}; or pass \
                 --dangerous-sandbox-mode to run without confinement",
                sandbox.mode
            ))),
        }
    }
}

/// The system tools profile of `sandbox` and its host mounts, before any snapshot of `/etc`; the network files
/// among them when `network`.
fn host_mounts(
    sandbox: &SandboxSpec,
    network: bool,
) -> Result<(profile::ToolsProfile, Vec<profile::Mount>)> {
    let tools = profile::tools_profile(sandbox.system_tools_mode)
        .map_err(RuntimeError::SandboxUnavailable)?;
    let mounts = profile::host_mounts(&tools, &sandbox.executables, network)
        .map_err(RuntimeError::SandboxUnavailable)?;
    Ok((tools, mounts))
}

/// The limits of the worker of `spec`, as its manifest's `sandbox.resources` says.
fn limits_of(spec: &LaunchSpec<'_>) -> Arc<limits::Limits> {
    Arc::new(limits::Limits::new(
        spec.session_id,
        limits::Budget {
            cpu: spec.sandbox.resources.cpu,
            memory_mb: spec.sandbox.resources.memory_mb,
        },
    ))
}

/// What [`SandboxLauncher::open`] opened for one worker.
struct Opened {
    workspace: std::os::fd::OwnedFd,
    bundle: std::os::fd::OwnedFd,
    hooks: Option<std::os::fd::OwnedFd>,
    /// The host user it runs as, when not the supervisor's.
    runs_as: Option<identity::HostId>,
}

/// The mechanism that confines one worker.
enum Confiner<'a> {
    /// bubblewrap, at this path.
    Bwrap(&'a PathBuf),
    /// Landlock, at this ABI.
    Landlock(i32),
}

fn resolve(choice: backend::BackendChoice, cache: Option<&Path>) -> backend::Resolved {
    match cache {
        Some(file) => backend::resolve_remembered(choice, file),
        None => backend::resolve(choice),
    }
}

/// What confines workers, for logs: the backend and why, or why nothing does.
pub fn backend(dangerous: bool, choice: backend::BackendChoice) -> String {
    match dangerous {
        true => "none (--dangerous-sandbox-mode)".into(),
        false => backend::resolve(choice).describe(),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// bwrap in PATH, if installed.
pub fn find_bwrap() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("bwrap"))
        .find(|p| p.is_file())
}

fn unavailable(mode: service_ipc::SandboxMode) -> RuntimeError {
    RuntimeError::SandboxUnavailable(format!(
        "this bundle's sandbox mode {mode} needs bubblewrap or Landlock, which exist only on Linux: pass \
         --dangerous-sandbox-mode to run without confinement"
    ))
}

impl Launcher for SandboxLauncher {
    fn view(&self, sandbox: &SandboxSpec, workspace: &Path, fresh: bool) -> Result<View> {
        Ok(match self.confining(sandbox)? {
            None => HostLauncher.view(sandbox, workspace, fresh)?,
            Some((Confiner::Landlock(_), _)) => View {
                workspace: workspace.to_path_buf(),
                confinement: sandbox.mode,
            },
            Some((Confiner::Bwrap(_), mode)) => {
                // A fresh workspace is given to the sandbox user at the start; any other must suit it already.
                if !fresh {
                    let dir = host_dir::open_no_links(workspace)
                        .map_err(|e| RuntimeError::WorkerUnavailable(e.to_string()))?;
                    self.user
                        .over(dir.as_fd(), workspace, mode.workspace_writable, false)
                        .map_err(RuntimeError::WorkerUnavailable)?;
                }
                View {
                    workspace: PathBuf::from(bwrap::WORKSPACE_DIR),
                    confinement: sandbox.mode,
                }
            }
        })
    }

    fn ahead(&self, sandbox: &SandboxSpec) {
        let confined = profile::mode_profile(sandbox.mode).is_ok_and(|m| m.confined);
        if self.dangerous
            || !confined
            || self.resolved.get().is_some()
            || self
                .resolving
                .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        // `auto` starts bwrap once to find out whether it works here: on a thread of its own, so that it overlaps
        // the session's set-up and first model call instead of adding to its first tool turn.
        let (resolved, choice) = (self.resolved.clone(), self.choice);
        let cache = self.backend_cache.clone();
        let _ = std::thread::Builder::new()
            .name("sandbox-backend".into())
            .spawn(move || {
                resolved.get_or_init(|| resolve(choice, cache.as_deref()));
            });
    }

    fn warm(&self, sandbox: &SandboxSpec, cache_dir: &Path) {
        if !matches!(self.confining(sandbox), Ok(Some((Confiner::Bwrap(_), _)))) {
            return;
        }
        let key = (
            sandbox.system_tools_mode,
            sandbox.executables.clone(),
            sandbox.permissions.network_enabled(),
            cache_dir.to_path_buf(),
        );
        if !lock(&self.warmed).insert(key.clone()) {
            return;
        }
        let (sandbox, cache_dir, warmed) = (
            sandbox.clone(),
            cache_dir.to_path_buf(),
            self.warmed.clone(),
        );
        let made = std::thread::Builder::new()
            .name("sandbox-warm".into())
            .spawn(move || {
                if let Err(e) = Self::mounts(&sandbox, &cache_dir) {
                    tracing::debug!("sandbox files not made ahead: {e}");
                    // The first start reports it; a later warm-up may try again.
                    lock(&warmed).remove(&key);
                }
            });
        if let Err(e) = made {
            tracing::debug!("no thread to make sandbox files ahead: {e}");
        }
    }

    fn prepare(&self, spec: &LaunchSpec<'_>) -> Result<Launch> {
        let sandbox = spec.sandbox;
        let (bwrap, mode) = match self.confining(sandbox)? {
            None => return HostLauncher.prepare(spec),
            Some((Confiner::Landlock(abi), mode)) => {
                return self.prepare_landlock(spec, mode, abi);
            }
            Some((Confiner::Bwrap(bwrap), mode)) => (bwrap, mode),
        };
        let mounts = Self::mounts(sandbox, spec.cache_dir)?;
        let exe = std::fs::canonicalize(spec.exe).unwrap_or_else(|_| spec.exe.to_path_buf());
        let Opened {
            workspace: workspace_fd,
            bundle: bundle_fd,
            hooks: hooks_fd,
            runs_as,
        } = self.open(spec, &mode)?;
        let userns = runs_as.map(|id| self.namespace(id)).transpose()?;
        let paths = bwrap::HostPaths {
            exe,
            ipc_fd: spec.ipc_fd,
            label: spec.session_id.to_string(),
            bundle_fd: bundle_fd.as_raw_fd(),
            workspace_fd: workspace_fd.as_raw_fd(),
            userns_fd: userns.as_ref().map(|ns| ns.as_raw_fd()),
            egress: spec.egress_socket.map(|p| p.to_path_buf()),
            operator_hooks_fd: hooks_fd.as_ref().map(|fd| fd.as_raw_fd()),
        };
        let perms = bwrap::Permissions {
            workspace_writable: mode.workspace_writable,
        };
        let lang = std::env::var("LANG").unwrap_or_else(|_| "C.UTF-8".into());
        let term = std::env::var("TERM").unwrap_or_else(|_| "dumb".into());
        let mut command = ProcessSpec::new(bwrap);
        command.args = bwrap::args(&mounts, &paths, perms, &lang, &term);
        // bwrap's own environment is visible in the sandbox as /proc/1/environ: give it nothing worth reading.
        command.env("PATH", bwrap::SANDBOX_PATH);
        let limits = limits_of(spec);
        if let Some(id) = runs_as {
            // Without supplementary groups, and with the rlimits set before bwrap runs (see `spawn_rlimits`).
            command.user = Some((id.uid, id.gid));
            command.rlimits = limits.spawn_rlimits();
        }
        let view = self.view(sandbox, spec.workspace, true)?;
        Ok(Launch {
            command,
            bundle_dir: PathBuf::from(bwrap::BUNDLE_DIR),
            operator_hooks: spec
                .operator_hooks
                .map(|_| PathBuf::from(bwrap::OPERATOR_HOOKS_DIR)),
            workspace: view.workspace,
            confinement: view.confinement,
            limits: Some(limits),
            inherit: [workspace_fd, bundle_fd]
                .into_iter()
                .chain(hooks_fd)
                .chain(userns)
                .collect(),
            egress_socket: spec
                .egress_socket
                .map(|_| PathBuf::from(crate::egress::SOCKET_IN_SANDBOX)),
            egress_listener_fd: None,
            backend: service_ipc::SandboxBackend::Bwrap,
        })
    }
}
