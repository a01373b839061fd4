//! bwrap alone, with the arguments a session's sandbox gets: the floor under every row that starts a sandbox.
//!
//! The arguments come from the supervisor's own `sandbox::bwrap::args` over the standard system tools profile and
//! its `/etc` snapshot, the bundle and a writable workspace bound by descriptor; only the program differs from a
//! session's, which runs its worker. As root, bwrap runs as the sandbox user (nobody) and makes its own user
//! namespace, where the supervisor joins one it made once.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use service_supervisor::sandbox::{bwrap, etc_snapshot, profile};

/// The uid and gid a root supervisor's sandboxes run as here.
const NOBODY: u32 = 65534;

/// What making the arguments can fail with.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// bwrap's arguments for a session's sandbox running another program, and the descriptors they name.
pub struct SessionSandbox {
    args: Vec<OsString>,
    fds: [i32; 2],
    root: bool,
    /// The bundle and the workspace, held open for the descriptors in `args`.
    _dirs: [File; 2],
}

impl SessionSandbox {
    /// A session's sandbox arguments, with `program` in place of the worker; `scratch` holds the bundle, the
    /// workspace and the `/etc` snapshot.
    pub fn new(scratch: &Path, program: &[&str]) -> Result<Self, Error> {
        let tools = profile::tools_profile(service_ipc::SystemToolsMode::Standard)?;
        let mounts = profile::host_mounts(&tools, &[], false)?;
        let mounts = etc_snapshot::consolidate(mounts, &tools.network_files, scratch);
        let (bundle, workspace) = (scratch.join("bundle"), scratch.join("workspace"));
        std::fs::create_dir_all(&bundle)?;
        std::fs::create_dir_all(&workspace)?;
        let root = nix::unistd::geteuid().is_root();
        if root {
            // bwrap binds the `/etc` snapshot by path, as the sandbox user.
            std::fs::set_permissions(scratch, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
            std::os::unix::fs::chown(&workspace, Some(NOBODY), Some(NOBODY))?;
        }
        let dirs = [File::open(&bundle)?, File::open(&workspace)?];
        let fds = [dirs[0].as_raw_fd(), dirs[1].as_raw_fd()];
        let paths = bwrap::HostPaths {
            exe: "/usr/bin/true".into(),
            ipc_fd: 0,
            label: "bench".into(),
            bundle_fd: fds[0],
            workspace_fd: fds[1],
            userns_fd: None,
            egress: None,
            operator_hooks_fd: None,
        };
        let perms = bwrap::Permissions {
            workspace_writable: true,
        };
        let mut args = bwrap::args(&mounts, &paths, perms, "C.UTF-8", "dumb");
        let at = args
            .iter()
            .rposition(|a| a == "--")
            .ok_or("bwrap's arguments name no program")?;
        args.truncate(at + 1);
        args.extend(program.iter().map(OsString::from));
        Ok(Self {
            args,
            fds,
            root,
            _dirs: dirs,
        })
    }

    /// A `bwrap` command making one such sandbox; its standard streams are the caller's to set.
    pub fn command(&self) -> Command {
        let mut cmd = Command::new("bwrap");
        cmd.args(&self.args);
        if self.root {
            cmd.uid(NOBODY).gid(NOBODY);
        }
        let fds = self.fds;
        // SAFETY: only fcntl, which is async-signal-safe, runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                for fd in fds {
                    if nix::libc::fcntl(fd, nix::libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        cmd
    }
}
