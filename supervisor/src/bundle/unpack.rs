//! Unpacking a tar as if it were hostile: a bundle layer (build, pull, a layout directory) and an imported archive
//! both come here.
//!
//! Only regular files and directories are written; links, device nodes, fifos and sockets are refused, and so is a
//! path that is absolute or climbs with `..`. Modes and owners come from the supervisor, never from the archive:
//! directories are 0755, files 0644, or 0755 when the archive marked them executable for anyone. No setuid, setgid,
//! sticky or world-writable bit survives, whatever the umask. Files are created without following a link, so a
//! later entry cannot write through an earlier one. The total size is bounded.

use std::io::Read;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// Mode of every unpacked directory.
pub const DIR_MODE: u32 = 0o755;
/// Mode of an unpacked file that no one may execute.
pub const FILE_MODE: u32 = 0o644;
/// Mode of an unpacked file that the archive marked executable.
pub const EXEC_MODE: u32 = 0o755;

/// Why an archive was not unpacked. Names only paths inside the archive, never where it was being unpacked.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// The bytes are not a tar archive, or an entry is damaged.
    #[error("damaged tar archive: {0}")]
    Damaged(std::io::Error),
    /// An entry is a link, a device node, a fifo or another special file.
    #[error("{0}: only files and directories may be in a bundle archive (links and special files are refused)")]
    Kind(PathBuf),
    /// An entry's path is absolute or climbs out of the archive.
    #[error("{0}: the path leaves the archive")]
    Outside(PathBuf),
    /// The entries add up to more than the limit.
    #[error("larger than the {0} byte limit of a bundle archive")]
    TooLarge(u64),
    /// Writing an entry failed (a full disk, a file where a directory must be).
    #[error("{path}: cannot unpack: {source}")]
    Write {
        /// The entry's path inside the archive.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
}

/// The mode an unpacked file gets, from the mode its archive header claims.
pub fn file_mode(claimed: u32) -> u32 {
    if claimed & 0o111 != 0 {
        EXEC_MODE
    } else {
        FILE_MODE
    }
}

/// `rel` without `.` components, or None when it is absolute, empty or climbs with `..`.
fn inside(rel: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in rel.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

fn make_dir(path: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(DIR_MODE))
}

/// Unpacks the tar read from `reader` into `dest` (made if missing), at most `max_bytes` of file content in all.
pub fn unpack(reader: impl Read, dest: &Path, max_bytes: u64) -> Result<(), UnpackError> {
    let write_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| UnpackError::Write { path, source }
    };
    make_dir(dest).map_err(write_err(Path::new(".")))?;
    let mut archive = tar::Archive::new(reader);
    let mut total: u64 = 0;
    for entry in archive.entries().map_err(UnpackError::Damaged)? {
        let mut entry = entry.map_err(UnpackError::Damaged)?;
        let rel: PathBuf = entry.path().map_err(UnpackError::Damaged)?.into_owned();
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            return Err(UnpackError::Kind(rel));
        }
        let clean = inside(&rel).ok_or_else(|| UnpackError::Outside(rel.clone()))?;
        let target = dest.join(&clean);
        if kind.is_dir() {
            make_dir(&target).map_err(write_err(&rel))?;
            continue;
        }
        total = total.saturating_add(entry.size());
        if total > max_bytes {
            return Err(UnpackError::TooLarge(max_bytes));
        }
        if clean.as_os_str().is_empty() {
            return Err(UnpackError::Outside(rel));
        }
        if let Some(parent) = target.parent() {
            make_dir(parent).map_err(write_err(&rel))?;
        }
        let mode = file_mode(entry.header().mode().unwrap_or(FILE_MODE));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(mode)
            .custom_flags(nix::libc::O_NOFOLLOW)
            .open(&target)
            .and_then(|mut file| {
                std::io::copy(&mut entry, &mut file)?;
                // The file may have existed (a repeated entry) with other bits, and the umask may have cleared some.
                file.set_permissions(std::fs::Permissions::from_mode(mode))
            });
        written.map_err(write_err(&rel))?;
    }
    Ok(())
}

/// Whether the tree at `root` is what [`unpack`] writes: directories and regular files only, with its modes, owned
/// by this process's user. A tree that is not (a cache an older version filled, or one edited by hand) must be
/// unpacked again before anything runs from it.
pub fn is_clean(root: &Path) -> bool {
    let me = nix::unistd::geteuid().as_raw();
    walkdir::WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .all(|entry| {
            let Ok(entry) = entry else { return false };
            let Ok(meta) = entry.metadata() else {
                return false;
            };
            use std::os::unix::fs::MetadataExt;
            let mode = meta.mode() & 0o7777;
            meta.uid() == me
                && if meta.is_dir() {
                    mode == DIR_MODE
                } else {
                    meta.is_file() && (mode == FILE_MODE || mode == EXEC_MODE)
                }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn header(path: &str, kind: tar::EntryType, mode: u32, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_path(path).unwrap();
        h.set_entry_type(kind);
        h.set_mode(mode);
        h.set_size(size);
        h.set_uid(0);
        h.set_gid(0);
        h.set_cksum();
        h
    }

    fn tar_of(entries: &[(&str, tar::EntryType, u32, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (path, kind, mode, data) in entries {
            let h = header(path, *kind, *mode, data.len() as u64);
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn mode_of(p: &Path) -> u32 {
        std::fs::symlink_metadata(p)
            .map(|m| m.mode() & 0o7777)
            .unwrap_or(0)
    }

    #[test]
    fn setuid_sticky_and_world_writable_bits_never_survive() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = tar_of(&[
            ("open", tar::EntryType::Directory, 0o1777, b""),
            ("open/suid", tar::EntryType::Regular, 0o4755, b"#!/bin/sh\n"),
            ("open/shared", tar::EntryType::Regular, 0o666, b"x"),
            ("sgid-dir", tar::EntryType::Directory, 0o2775, b""),
        ]);
        let dest = dir.path().join("out");
        unpack(bytes.as_slice(), &dest, 1024).unwrap();
        assert_eq!(mode_of(&dest.join("open")), 0o755);
        assert_eq!(mode_of(&dest.join("open/suid")), 0o755);
        assert_eq!(mode_of(&dest.join("open/shared")), 0o644);
        assert_eq!(mode_of(&dest.join("sgid-dir")), 0o755);
        assert!(is_clean(&dest));
    }

    #[test]
    fn links_devices_and_fifos_are_refused_by_name() {
        for kind in [
            tar::EntryType::Link,
            tar::EntryType::Symlink,
            tar::EntryType::Char,
            tar::EntryType::Block,
            tar::EntryType::Fifo,
        ] {
            let dir = tempfile::tempdir().unwrap();
            let bytes = tar_of(&[("dev", kind, 0o644, b"")]);
            let err = unpack(bytes.as_slice(), dir.path(), 1024)
                .err()
                .unwrap_or_else(|| panic!("{kind:?} was unpacked"));
            assert!(matches!(err, UnpackError::Kind(_)), "{kind:?}: {err}");
            assert!(!err.to_string().contains(&*dir.path().to_string_lossy()));
        }
    }

    #[test]
    fn a_tree_with_a_mode_unpack_never_writes_is_not_clean() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = tar_of(&[("f", tar::EntryType::Regular, 0o644, b"x")]);
        unpack(bytes.as_slice(), dir.path(), 1024).unwrap();
        assert!(is_clean(dir.path()));
        std::fs::set_permissions(
            dir.path().join("f"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        assert!(!is_clean(dir.path()));
    }

    #[test]
    fn the_size_limit_counts_every_file() {
        let dir = tempfile::tempdir().unwrap();
        let bytes = tar_of(&[
            ("a", tar::EntryType::Regular, 0o644, b"12345"),
            ("b", tar::EntryType::Regular, 0o644, b"12345"),
        ]);
        let err = unpack(bytes.as_slice(), dir.path(), 8).err();
        assert!(matches!(err, Some(UnpackError::TooLarge(8))), "{err:?}");
    }
}
