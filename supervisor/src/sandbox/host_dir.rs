//! Host directories a sandbox binds, opened once without following a link and bound by descriptor.
//!
//! A path string checked when a session was created and bound when a worker starts is a race: code in another
//! sandbox that can write a parent directory may swap a component for a symbolic link in between, and bwrap would
//! follow it. So each start opens the directory one component at a time with `O_PATH | O_DIRECTORY | O_NOFOLLOW`
//! from `/`, and hands bwrap the descriptor (`--bind-fd`, `--ro-bind-fd`). A component that is a link or not a
//! directory fails the start. bwrap mounts the descriptor's directory and compares device and inode after the
//! mount, so what was opened is what is bound.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Component, Path, PathBuf};

use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::Mode;

/// Why a host directory cannot be bound.
#[derive(Debug, thiserror::Error)]
pub enum HostDirError {
    /// The path is relative or has `..` components: only absolute, resolved paths are bound.
    #[error("{0} is not an absolute path without `..`")]
    NotResolved(PathBuf),
    /// A component is a symbolic link, so what the path names may have changed since it was checked.
    #[error(
        "{link} is a symbolic link, so {path} is no longer the directory it was when it was checked; a sandbox \
         binds a directory only through real directories: point the session at the link's target, or replace the \
         link with the directory"
    )]
    Link {
        /// The whole path.
        path: PathBuf,
        /// The component that is a link.
        link: PathBuf,
    },
    /// A component is missing or not a directory.
    #[error("{path} cannot be opened as a directory: {source}")]
    Open {
        /// The whole path.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
}

/// What `dir` (resolved) is when it is too broad to be a session's workspace by accident: `/`, or the home
/// directory of the user running service-rs. Front ends refuse it unless the user named it on purpose.
pub fn too_broad(dir: &Path) -> Option<&'static str> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .and_then(|h| std::fs::canonicalize(h).ok());
    if dir == Path::new("/") {
        Some("the root directory /")
    } else if home.as_deref() == Some(dir) {
        Some("your home directory")
    } else {
        None
    }
}

/// Opens the directory at `path` (absolute, resolved) without following any link on the way: a descriptor of the
/// directory itself, for bwrap to bind.
pub fn open_no_links(path: &Path) -> Result<OwnedFd, HostDirError> {
    open_dir(path, OFlag::O_PATH)
}

/// Opens the directory at `path` (absolute, resolved) for reading its entries, without following any link on the
/// way (see [`open_no_links`]).
pub fn open_for_reading(path: &Path) -> Result<OwnedFd, HostDirError> {
    let dir = open_no_links(path)?;
    // `.` of a descriptor is the directory it names, whatever its path has become.
    openat(
        dir.as_fd(),
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|source| HostDirError::Open {
        path: path.to_path_buf(),
        source: source.into(),
    })
}

fn open_dir(path: &Path, access: OFlag) -> Result<OwnedFd, HostDirError> {
    let flags = access | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    if !path.is_absolute() {
        return Err(HostDirError::NotResolved(path.to_path_buf()));
    }
    let open_err = |source: nix::Error| HostDirError::Open {
        path: path.to_path_buf(),
        source: source.into(),
    };
    let mut dir = open("/", flags, Mode::empty()).map_err(open_err)?;
    let mut walked = PathBuf::from("/");
    for component in path.components() {
        let name = match component {
            Component::RootDir => continue,
            Component::Normal(name) => name,
            Component::CurDir | Component::ParentDir | Component::Prefix(_) => {
                return Err(HostDirError::NotResolved(path.to_path_buf()))
            }
        };
        walked.push(name);
        dir = match openat(dir.as_fd(), name, flags, Mode::empty()) {
            Ok(next) => next,
            // With O_NOFOLLOW a link fails as ELOOP, or as ENOTDIR together with O_DIRECTORY.
            Err(e @ (nix::Error::ELOOP | nix::Error::ENOTDIR)) => {
                let is_link = std::fs::symlink_metadata(&walked)
                    .map(|m| m.file_type().is_symlink())
                    .unwrap_or(false);
                return Err(if is_link {
                    HostDirError::Link {
                        path: path.to_path_buf(),
                        link: walked,
                    }
                } else {
                    open_err(e)
                });
            }
            Err(e) => return Err(open_err(e)),
        };
    }
    Ok(dir)
}

/// The text of the regular file `name` in the directory `dir` (at most `max` bytes), reached without following a
/// link anywhere on the way; None for a link, a fifo, a larger file or anything missing. Files in a workspace are
/// the sandbox's to make, so the supervisor reads them this way.
pub fn read_small_file(dir: &Path, name: &str, max: u64) -> Option<String> {
    let fd = open_for_reading(dir).ok()?;
    read_small_at(fd.as_fd(), &std::ffi::CString::new(name).ok()?, max)
}

/// As [`read_small_file`], in the directory `dir` is open on.
pub fn read_small_at(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    max: u64,
) -> Option<String> {
    use nix::sys::stat::{fstat, SFlag};
    use std::io::Read;
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
    let fd = openat(dir, name, flags, Mode::empty()).ok()?;
    let st = fstat(&fd).ok()?;
    if SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) != SFlag::S_IFREG
        || st.st_size.max(0) as u64 > max
    {
        return None;
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(max)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    #[test]
    fn a_real_directory_opens_and_names_itself() {
        let tmp = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir(real.join("a")).unwrap();
        let fd = open_no_links(&real.join("a")).unwrap();
        let named = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).unwrap();
        assert_eq!(named, real.join("a"));
    }

    #[test]
    fn a_link_anywhere_on_the_path_is_refused_and_named() {
        let tmp = tempfile::tempdir().unwrap();
        let real = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir_all(real.join("outside/deeper")).unwrap();
        std::fs::create_dir(real.join("proj")).unwrap();
        std::os::unix::fs::symlink(real.join("outside"), real.join("proj/sub")).unwrap();
        for target in [real.join("proj/sub"), real.join("proj/sub/deeper")] {
            match open_no_links(&target) {
                Err(HostDirError::Link { link, .. }) => assert_eq!(link, real.join("proj/sub")),
                other => panic!("{}: {other:?}", target.display()),
            }
        }
    }

    #[test]
    fn relative_paths_and_dot_dot_are_refused() {
        assert!(matches!(
            open_no_links(Path::new("tmp")),
            Err(HostDirError::NotResolved(_))
        ));
        assert!(matches!(
            open_no_links(Path::new("/tmp/../etc")),
            Err(HostDirError::NotResolved(_))
        ));
    }
}
