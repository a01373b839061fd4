//! Starting a worker under the Landlock backend (see [`super::landlock`]): the worker runs at the host's paths,
//! as the sandbox user, with the rule set and filter the supervisor made applied before its `execve`.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use service_ipc::SandboxBackend;

use super::{host_dir, identity, landlock, profile, SandboxLauncher};
use crate::runtime::error::{Result, RuntimeError};
use crate::runtime::launcher::{minimal_env, Launch, LaunchSpec};
use crate::runtime::process_spawn::{Confinement, ProcessSpec};

/// The private temporary directory of a worker, inside its run directory (removed when the worker ends).
const TMP: &str = "tmp";

fn unavailable(e: impl std::fmt::Display) -> RuntimeError {
    RuntimeError::SandboxUnavailable(e.to_string())
}

/// Whether `id` may walk to `path` (search permission on every directory above it); the first directory that
/// stops it otherwise. Landlock grants rights on what a walk reaches, but the walk itself is the host's.
fn blocked_for(path: &Path, id: identity::HostId) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let mut dirs: Vec<&Path> = path.ancestors().skip(1).collect();
    dirs.reverse();
    dirs.into_iter().find_map(|dir| {
        let meta = std::fs::metadata(dir).ok()?;
        let bits = match (meta.uid() == id.uid, meta.gid() == id.gid) {
            (true, _) => meta.mode() >> 6,
            (false, true) => meta.mode() >> 3,
            (false, false) => meta.mode(),
        };
        (bits & 1 == 0).then(|| dir.to_path_buf())
    })
}

/// Lets the sandbox group `id` search the store root above `run_dir` (`<root>/run/<worker>`), which is 0700:
/// group search only, 0710, so its sandboxes reach their bundle, workspace and run directories by path. Landlock
/// refuses them everything else in the store, and nothing there is listed.
fn open_store_for(run_dir: &Path, id: identity::HostId) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let Some(root) = run_dir.parent().and_then(Path::parent) else {
        return Ok(());
    };
    let meta = std::fs::metadata(root).map_err(|e| RuntimeError::io("cannot read", root, e))?;
    if meta.gid() == id.gid && meta.mode() & 0o010 != 0 {
        return Ok(());
    }
    std::os::unix::fs::chown(root, None, Some(id.gid))
        .and_then(|()| {
            std::fs::set_permissions(
                root,
                std::fs::Permissions::from_mode(meta.mode() & 0o700 | 0o010),
            )
        })
        .map_err(|e| {
            RuntimeError::io(
                "cannot give the sandbox group search permission on",
                root,
                e,
            )
        })
}

impl SandboxLauncher {
    /// The Landlock worker of `spec` in a sandbox of `mode` on a kernel of Landlock ABI `abi`.
    pub(super) fn prepare_landlock(
        &self,
        spec: &LaunchSpec<'_>,
        mode: profile::ModeProfile,
        abi: i32,
    ) -> Result<Launch> {
        // The network files too, network or not: bwrap leaves them out, and a program (Node reading
        // `/etc/ssl/openssl.cnf`) that takes a missing file in its stride fails on one it may not read.
        let (_, mounts) = super::host_mounts(spec.sandbox, true)?;
        let exe = std::fs::canonicalize(spec.exe).unwrap_or_else(|_| spec.exe.to_path_buf());
        let super::Opened {
            workspace: workspace_fd,
            bundle: bundle_fd,
            hooks: hooks_fd,
            runs_as,
        } = self.open(spec, &mode)?;
        if abi < landlock::SCOPED_ABI && runs_as.is_none() {
            return Err(unavailable(format!(
                "the Landlock backend needs ABI {} (Linux 6.12) to keep a sandbox that runs as the supervisor's own \
                 user from signalling it, and this kernel has {abi}: run the supervisor as root (its sandboxes then \
                 run as another user), or use bubblewrap",
                landlock::SCOPED_ABI
            )));
        }
        let tmp = spec.run_dir.join(TMP);
        std::fs::create_dir_all(&tmp).map_err(|e| RuntimeError::io("cannot create", &tmp, e))?;
        if let Some(id) = runs_as {
            std::os::unix::fs::lchown(&tmp, Some(id.uid), Some(id.gid))
                .map_err(|e| RuntimeError::io("cannot hand over", &tmp, e))?;
            open_store_for(spec.run_dir, id)?;
            for path in [spec.workspace, spec.bundle_root, exe.as_path(), &tmp] {
                if let Some(dir) = blocked_for(path, id) {
                    return Err(unavailable(format!(
                        "the sandbox user (uid {}) cannot enter {}, above {}, and Landlock sandboxes see the host's \
                         paths: give that directory search permission for others (chmod o+x), or keep \
                         SERVICE_HOME and projects outside it (the container image uses /var/lib/service-rs)",
                        id.uid,
                        dir.display(),
                        path.display()
                    )));
                }
            }
        }
        let tmp_fd = host_dir::open_no_links(&tmp)
            .map_err(|e| RuntimeError::WorkerUnavailable(e.to_string()))?;
        // The proxy's socket is reached through its directory's descriptor, as the supervisor binds it: its host
        // path may be longer than a socket address holds, and lie below directories the sandbox user cannot enter.
        let socket_dir = spec
            .egress_socket
            .and_then(|socket| Some((socket.parent()?, socket.file_name()?)))
            .map(|(dir, name)| {
                host_dir::open_no_links(dir)
                    .map(|fd| {
                        let seen = Path::new("/proc/self/fd")
                            .join(fd.as_raw_fd().to_string())
                            .join(name);
                        (fd, seen)
                    })
                    .map_err(|e| RuntimeError::WorkerUnavailable(e.to_string()))
            })
            .transpose()?;
        let (listener, egress_port) = match spec.egress_socket {
            Some(_) => {
                let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(|e| {
                    unavailable(format!("cannot open the egress forwarder's port: {e}"))
                })?;
                let port = listener
                    .local_addr()
                    .map_err(|e| unavailable(format!("the egress forwarder's port: {e}")))?
                    .port();
                (Some(OwnedFd::from(listener)), Some(port))
            }
            None => (None, None),
        };
        let policy = landlock::Policy {
            mounts: &mounts,
            exe: &exe,
            bundle: bundle_fd.as_fd(),
            operator_hooks: hooks_fd.as_ref().map(|fd| fd.as_fd()),
            workspace: workspace_fd.as_fd(),
            workspace_writable: mode.workspace_writable,
            tmp: tmp_fd.as_fd(),
            egress_port,
        };
        let confinement = Confinement {
            ruleset: landlock::ruleset(&policy, abi).map_err(unavailable)?,
            filter: landlock::filter(egress_port.is_some())
                .map_err(unavailable)?
                .into_iter()
                .map(|i| nix::libc::sock_filter {
                    code: i.code,
                    jt: i.jt,
                    jf: i.jf,
                    k: i.k,
                })
                .collect(),
        };
        let mut command = ProcessSpec::new(&exe);
        command
            .arg("worker")
            .arg("--ipc-fd")
            .arg(spec.ipc_fd.to_string())
            .arg("--label")
            .arg(spec.session_id)
            .arg("--enter-cgroups");
        command.cwd = spec.workspace.to_path_buf();
        command.die_with_parent = true;
        minimal_env(&mut command, spec.workspace);
        command.env("TMPDIR", &tmp);
        command.confinement = Some(Arc::new(confinement));
        let limits = super::limits_of(spec);
        command.rlimits = limits.spawn_rlimits();
        command.user = runs_as.map(|id| (id.uid, id.gid));
        Ok(Launch {
            command,
            bundle_dir: spec.bundle_root.to_path_buf(),
            operator_hooks: spec.operator_hooks.map(Path::to_path_buf),
            workspace: spec.workspace.to_path_buf(),
            confinement: spec.sandbox.mode,
            limits: Some(limits),
            egress_listener_fd: listener.as_ref().map(|fd| fd.as_raw_fd()),
            egress_socket: socket_dir.as_ref().map(|(_, seen)| seen.clone()),
            backend: SandboxBackend::Landlock,
            inherit: listener
                .into_iter()
                .chain(socket_dir.map(|(fd, _)| fd))
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_directory_without_search_permission_for_the_sandbox_user_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let closed = tmp.path().join("closed");
        let inner = closed.join("inner");
        std::fs::create_dir_all(&inner).unwrap();
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o711)).unwrap();
        let nobody = identity::HostId {
            uid: 65534,
            gid: 65534,
        };
        assert_eq!(blocked_for(&inner, nobody), Some(closed.clone()));
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o711)).unwrap();
        assert_eq!(blocked_for(&inner, nobody), None);
    }
}
