//! `isolation: copy`: the parent's workspace copied into the child's, through directory descriptors.
//!
//! The parent's cwd is a path string that another sandbox may have swapped for a link since it was checked (a session
//! under `--workspace-root` working in a parent directory of this one's). So the copy opens the cwd one component at
//! a time without following a link ([`host_dir::open_for_reading`]), and below it opens every entry relative to its
//! directory with `O_NOFOLLOW`: a link is copied as the link it is, never followed, and an entry swapped while the
//! copy runs fails to open or is copied as what it now is. What the copy writes belongs to the child's sandbox user,
//! never to the owner of what it read, so a copy cannot hand a child another user's files with their owner's rights.
//! Fifos, sockets and devices are not copied.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;

use nix::dir::Dir;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{fchown, fchownat, symlinkat, Gid, Uid};

use crate::sandbox::host_dir;
use crate::sandbox::identity::HostId;

/// Directories nested deeper than this are not copied: no real project needs it, and a walk must end.
const MAX_DEPTH: usize = 256;

/// Why a workspace could not be copied.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The parent's cwd is not the directory that was checked (a link now stands on its path), or cannot be opened.
    #[error("{0}")]
    Source(#[from] host_dir::HostDirError),
    /// The child's workspace cannot be opened.
    #[error("the child's workspace {path} cannot be opened: {source}")]
    Dest {
        /// The child's workspace.
        path: String,
        /// What went wrong.
        source: host_dir::HostDirError,
    },
    /// Reading or writing one entry failed.
    #[error("cannot copy {path} of the workspace: {source}")]
    Entry {
        /// The entry, relative to the workspace.
        path: String,
        /// What the kernel said.
        source: nix::Error,
    },
}

/// Copies the directory `from` into the empty directory `to`, giving what it writes to `owner` when set (a root
/// supervisor's sandbox user). Links are copied as links; nothing is followed.
pub fn copy_workspace(from: &Path, to: &Path, owner: Option<HostId>) -> Result<(), CopyError> {
    let src = host_dir::open_for_reading(from)?;
    let dst = host_dir::open_for_reading(to).map_err(|source| CopyError::Dest {
        path: to.display().to_string(),
        source,
    })?;
    let owner = owner.map(|id| (Uid::from_raw(id.uid), Gid::from_raw(id.gid)));
    if let Some((uid, gid)) = owner {
        fchown(dst.as_fd(), Some(uid), Some(gid)).map_err(|source| CopyError::Entry {
            path: ".".into(),
            source,
        })?;
    }
    Copy { owner }.dir(src, dst.as_fd(), "", 0)
}

struct Copy {
    owner: Option<(Uid, Gid)>,
}

impl Copy {
    fn dir(
        &self,
        src: OwnedFd,
        dst: BorrowedFd<'_>,
        at: &str,
        depth: usize,
    ) -> Result<(), CopyError> {
        let failed = |source| CopyError::Entry {
            path: if at.is_empty() {
                ".".into()
            } else {
                at.to_string()
            },
            source,
        };
        if depth > MAX_DEPTH {
            return Err(failed(nix::Error::ELOOP));
        }
        let src_fd = src.try_clone().map_err(|e| failed(errno(e)))?;
        let mut entries = Dir::from_fd(src).map_err(failed)?;
        let names: Vec<CString> = entries
            .iter()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_owned())
            .filter(|n| n.as_bytes() != b"." && n.as_bytes() != b"..")
            .collect();
        for name in names {
            self.entry(src_fd.as_fd(), dst, &name, at, depth)?;
        }
        Ok(())
    }

    fn entry(
        &self,
        src: BorrowedFd<'_>,
        dst: BorrowedFd<'_>,
        name: &CStr,
        at: &str,
        depth: usize,
    ) -> Result<(), CopyError> {
        let path = join(at, &String::from_utf8_lossy(name.to_bytes()));
        let failed = |source| CopyError::Entry {
            path: path.clone(),
            source,
        };
        let st = fstatat(src, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(failed)?;
        let mode = Mode::from_bits_truncate(st.st_mode & 0o7777);
        match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
            SFlag::S_IFDIR => {
                let flags =
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                let sub_src = openat(src, name, flags, Mode::empty()).map_err(failed)?;
                mkdirat(dst, name, Mode::from_bits_truncate(0o700)).map_err(failed)?;
                let sub_dst = openat(dst, name, flags, Mode::empty()).map_err(failed)?;
                self.give(sub_dst.as_fd()).map_err(failed)?;
                self.dir(sub_src, sub_dst.as_fd(), &path, depth + 1)?;
                // Last, so a read-only directory is filled before it becomes so.
                fchmod(sub_dst.as_fd(), mode).map_err(failed)
            }
            SFlag::S_IFREG => {
                let read = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                let input = openat(src, name, read, Mode::empty()).map_err(failed)?;
                // What was opened must be what was looked at, not something swapped in meanwhile.
                let opened = fstat(input.as_fd()).map_err(failed)?;
                if opened.st_ino != st.st_ino || opened.st_dev != st.st_dev {
                    return Err(failed(nix::Error::ESTALE));
                }
                let write = OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC;
                let out =
                    openat(dst, name, write, Mode::from_bits_truncate(0o600)).map_err(failed)?;
                let (mut input, mut out) = (File::from(input), File::from(out));
                std::io::copy(&mut input, &mut out).map_err(|e| failed(errno(e)))?;
                self.give(out.as_fd()).map_err(failed)?;
                fchmod(out.as_fd(), mode).map_err(failed)
            }
            SFlag::S_IFLNK => {
                let target = readlinkat(src, name).map_err(failed)?;
                symlinkat(target.as_os_str(), dst, name).map_err(failed)?;
                match self.owner {
                    Some((uid, gid)) => fchownat(
                        dst,
                        name,
                        Some(uid),
                        Some(gid),
                        AtFlags::AT_SYMLINK_NOFOLLOW,
                    )
                    .map_err(failed),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    fn give(&self, fd: BorrowedFd<'_>) -> nix::Result<()> {
        match self.owner {
            Some((uid, gid)) => fchown(fd, Some(uid), Some(gid)),
            None => Ok(()),
        }
    }
}

fn join(at: &str, name: &str) -> String {
    match at.is_empty() {
        true => name.to_string(),
        false => format!("{at}/{name}"),
    }
}

fn errno(e: std::io::Error) -> nix::Error {
    nix::Error::from_raw(e.raw_os_error().unwrap_or(nix::Error::EIO as i32))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn real(tmp: &tempfile::TempDir) -> std::path::PathBuf {
        std::fs::canonicalize(tmp.path()).unwrap()
    }

    #[test]
    fn files_directories_modes_and_links_are_copied_as_they_are() {
        let tmp = tempfile::tempdir().unwrap();
        let root = real(&tmp);
        let (from, to) = (root.join("from"), root.join("to"));
        std::fs::create_dir_all(from.join("src/deep")).unwrap();
        std::fs::create_dir(&to).unwrap();
        std::fs::write(from.join("src/deep/a.txt"), "alpha").unwrap();
        std::fs::write(from.join("run.sh"), "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(from.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .unwrap();
        std::os::unix::fs::symlink("/etc/passwd", from.join("outside")).unwrap();
        copy_workspace(&from, &to, None).unwrap();
        assert_eq!(
            std::fs::read_to_string(to.join("src/deep/a.txt")).unwrap(),
            "alpha"
        );
        assert_eq!(
            std::fs::metadata(to.join("run.sh")).unwrap().mode() & 0o777,
            0o755
        );
        // The link is a link, not the file it names.
        let link = std::fs::symlink_metadata(to.join("outside")).unwrap();
        assert!(link.file_type().is_symlink());
        assert_eq!(
            std::fs::read_link(to.join("outside")).unwrap(),
            Path::new("/etc/passwd")
        );
    }

    #[test]
    fn a_cwd_swapped_for_a_link_is_refused_and_named() {
        let tmp = tempfile::tempdir().unwrap();
        let root = real(&tmp);
        std::fs::create_dir(root.join("secret")).unwrap();
        std::fs::write(root.join("secret/key"), "s3cret").unwrap();
        std::os::unix::fs::symlink(root.join("secret"), root.join("cwd")).unwrap();
        std::fs::create_dir(root.join("to")).unwrap();
        let err = copy_workspace(&root.join("cwd"), &root.join("to"), None).unwrap_err();
        assert!(err.to_string().contains("is a symbolic link"), "{err}");
        assert!(std::fs::read_dir(root.join("to")).unwrap().next().is_none());
    }

    #[test]
    fn a_subdirectory_swapped_for_a_link_is_copied_as_the_link() {
        let tmp = tempfile::tempdir().unwrap();
        let root = real(&tmp);
        std::fs::create_dir_all(root.join("secret")).unwrap();
        std::fs::write(root.join("secret/key"), "s3cret").unwrap();
        std::fs::create_dir_all(root.join("from")).unwrap();
        std::os::unix::fs::symlink(root.join("secret"), root.join("from/sub")).unwrap();
        std::fs::create_dir(root.join("to")).unwrap();
        copy_workspace(&root.join("from"), &root.join("to"), None).unwrap();
        assert!(std::fs::symlink_metadata(root.join("to/sub"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert!(!root.join("to/key").exists());
    }
}
