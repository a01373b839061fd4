//! `BENCH_HOST_MOUNTS=N`: the bench runs in a mount namespace of its own holding N more mounts, as a host with
//! containers, snaps or many volumes does. bwrap copies the whole mount table into each sandbox's namespace and
//! reads all of it again for each bind mount it makes, so every row that starts a sandbox shows what the host's
//! mount count costs. Root only; the mounts end with the bench's processes.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::libc;

use super::BenchResult;

/// The added mounts, unmounted when dropped.
pub struct HostMounts {
    dirs: Vec<PathBuf>,
    _root: tempfile::TempDir,
}

/// Moves this process into a mount namespace of its own with `n` more tmpfs mounts; None when `n` is 0. Call it
/// before any thread starts: a process with more than one thread cannot leave its mount namespace.
pub fn add(n: usize) -> BenchResult<Option<HostMounts>> {
    if n == 0 {
        return Ok(None);
    }
    // SAFETY: unshare and mount on arguments that live across the calls.
    unsafe {
        if libc::unshare(libc::CLONE_NEWNS) != 0 {
            return Err(format!(
                "BENCH_HOST_MOUNTS needs root, to make a mount namespace: {}",
                std::io::Error::last_os_error()
            )
            .into());
        }
        // Nothing mounted here reaches the host's namespace.
        let root = c"/";
        let private = libc::MS_REC | libc::MS_PRIVATE;
        if libc::mount(
            std::ptr::null(),
            root.as_ptr(),
            std::ptr::null(),
            private,
            std::ptr::null(),
        ) != 0
        {
            return Err(std::io::Error::last_os_error().into());
        }
    }
    let root = tempfile::TempDir::new()?;
    let mut dirs = Vec::with_capacity(n);
    for i in 0..n {
        let dir = root.path().join(i.to_string());
        std::fs::create_dir(&dir)?;
        mount_tmpfs(&dir)?;
        dirs.push(dir);
    }
    Ok(Some(HostMounts { dirs, _root: root }))
}

fn mount_tmpfs(dir: &Path) -> BenchResult<()> {
    let target = CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: mount on C strings that live across the call.
    let r = unsafe {
        libc::mount(
            c"none".as_ptr(),
            target.as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            c"size=64k".as_ptr().cast(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(())
}

impl HostMounts {
    /// How many mounts were added.
    pub fn count(&self) -> usize {
        self.dirs.len()
    }
}

impl Drop for HostMounts {
    fn drop(&mut self) {
        for dir in &self.dirs {
            if let Ok(target) = CString::new(dir.as_os_str().as_bytes()) {
                // SAFETY: umount2 on a C string that lives across the call.
                unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
            }
        }
    }
}
