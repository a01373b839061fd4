//! The ceiling under first turns that run a tool: how many sandboxes a second bwrap alone makes on this machine,
//! with the arguments a session's sandbox gets, as many at once as the bench has clients.
//!
//! The arguments come from the supervisor's own `sandbox::bwrap::args` over the standard system tools profile and
//! its `/etc` snapshot, the bundle and a writable workspace bound by descriptor; only the program differs: a shell
//! that says it is up and then waits, where a session runs its worker. A sandbox counts once its program has
//! written that line, and every sandbox stays up until the last is made, as sessions' sandboxes do, so their
//! teardown is not timed. As root, bwrap runs as the sandbox user (nobody) and makes its own user namespace, where
//! `serve` joins one it made once.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use service_supervisor::sandbox::{bwrap, etc_snapshot, profile};

use super::BenchResult;

/// The uid and gid a root supervisor's sandboxes run as here.
const NOBODY: u32 = 65534;

/// Makes `n` sandboxes, `at_once` at a time, and returns how many a second were made; all are stopped before it
/// returns. `scratch` holds the bundle, the workspace and the `/etc` snapshot.
pub fn sandboxes_per_sec(n: usize, at_once: usize, scratch: &Path) -> BenchResult<f64> {
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
    let (bundle, workspace) = (
        std::fs::File::open(&bundle)?,
        std::fs::File::open(&workspace)?,
    );
    let fds = [bundle.as_raw_fd(), workspace.as_raw_fd()];
    let paths = bwrap::HostPaths {
        exe: "/usr/bin/true".into(),
        ipc_fd: 0,
        label: "ceiling".into(),
        bundle_fd: fds[0],
        workspace_fd: fds[1],
        userns_fd: None,
        egress: None,
    };
    let perms = bwrap::Permissions {
        workspace_writable: true,
    };
    let mut args = bwrap::args(&mounts, &paths, perms, "C.UTF-8", "dumb");
    let program = args
        .iter()
        .rposition(|a| a == "--")
        .ok_or("bwrap's arguments name no program")?;
    args.truncate(program + 1);
    args.extend(["/bin/sh", "-c", "echo up; exec cat"].map(Into::into));

    let next = AtomicUsize::new(0);
    let started = Instant::now();
    let made: Vec<BenchResult<Vec<Child>>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..at_once)
            .map(|_| {
                s.spawn(|| {
                    let mut up = Vec::new();
                    while next.fetch_add(1, Ordering::Relaxed) < n {
                        let mut cmd = Command::new("bwrap");
                        cmd.args(&args)
                            .stdin(Stdio::piped())
                            .stdout(Stdio::piped())
                            .stderr(Stdio::null());
                        if root {
                            cmd.uid(NOBODY).gid(NOBODY);
                        }
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
                        let mut child = cmd.spawn()?;
                        let mut line = String::new();
                        let stdout = child.stdout.take().ok_or("no stdout")?;
                        BufReader::new(stdout).read_line(&mut line)?;
                        if line != "up\n" {
                            return Err(format!("a bare sandbox did not start: {line:?}").into());
                        }
                        up.push(child);
                    }
                    Ok(up)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    let wall = started.elapsed();
    let mut first_error = None;
    for children in made {
        match children {
            Ok(children) => stop(children),
            Err(e) => first_error = first_error.or(Some(e)),
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(n as f64 / wall.as_secs_f64()),
    }
}

/// Closes each sandbox's input, which ends its program and so the sandbox, and reaps it.
fn stop(children: Vec<Child>) {
    for mut child in children {
        drop(child.stdin.take());
        let _ = child.wait();
    }
}
