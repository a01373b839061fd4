//! Reading a workspace into a [`Tree`] through directory descriptors, never a path: code in the sandbox may swap a
//! directory for a link to a host directory while the scan runs, and a scan that followed it would copy host files
//! into the checkpoint (and a restore, into the workspace). Every open is `O_NOFOLLOW` relative to the directory
//! that was read, so a swapped component fails or is recorded as the link it now is.
//!
//! A file whose stat fields match the previous tree's is not read again: with ten thousand files the scan costs
//! one `fstatat` each, and only what changed is hashed.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use nix::dir::Dir;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};

use super::objects::Objects;
use super::tree::{Entry, Kind, RelPath, Stamp, Tree};

/// Files changed within this long of the scan are hashed again next time: a write in the same clock tick as the
/// scan's read would leave the same stat fields with other content.
const RACY_NS: i64 = 2_000_000_000;

/// What a scan found and stored.
pub struct Scanned {
    /// The workspace now.
    pub tree: Tree,
    /// Bytes of content written to the pool.
    pub bytes_new: u64,
    /// Bytes of content the session did not hold before.
    pub bytes_linked: u64,
}

/// Scans the directory `root` (a descriptor opened for reading), trusting `prev`'s unchanged files, storing new
/// content in `objects`. The directory `.git` is left out: the repository's own state is the user's.
pub fn scan(root: OwnedFd, prev: Option<&Tree>, objects: &Objects) -> std::io::Result<Scanned> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(i64::MAX);
    let mut walk = Walk {
        prev,
        objects,
        now,
        out: Tree::default(),
        bytes_new: 0,
        bytes_linked: 0,
    };
    walk.dir(root, &RelPath(Vec::new()))?;
    Ok(Scanned {
        tree: walk.out,
        bytes_new: walk.bytes_new,
        bytes_linked: walk.bytes_linked,
    })
}

struct Walk<'a> {
    prev: Option<&'a Tree>,
    objects: &'a Objects,
    now: i64,
    out: Tree,
    bytes_new: u64,
    bytes_linked: u64,
}

fn stamp(st: &FileStat) -> Stamp {
    Stamp {
        mtime: st.st_mtime * 1_000_000_000 + st.st_mtime_nsec,
        ctime: st.st_ctime * 1_000_000_000 + st.st_ctime_nsec,
        ino: st.st_ino,
        dev: st.st_dev,
    }
}

fn kind_of(st: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits())
}

impl Walk<'_> {
    fn dir(&mut self, fd: OwnedFd, at: &RelPath) -> std::io::Result<()> {
        let mut dir = Dir::from_fd(fd)?;
        let names: Vec<Vec<u8>> = dir
            .iter()
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_bytes().to_vec())
            .filter(|n| n != b"." && n != b"..")
            .collect();
        for name in names {
            if name == b".git" {
                continue;
            }
            let path = at.join(&name);
            let Ok(cname) = std::ffi::CString::new(name) else {
                continue;
            };
            self.entry(dir.as_fd(), &cname, path)?;
        }
        Ok(())
    }

    fn entry(&mut self, dir: BorrowedFd<'_>, name: &CStr, path: RelPath) -> std::io::Result<()> {
        let st = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Gone since the directory was read.
            Err(nix::Error::ENOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let kind = kind_of(&st);
        if kind == SFlag::S_IFDIR {
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            match openat(dir, name, flags, Mode::empty()) {
                Ok(fd) => {
                    self.put(path.clone(), Kind::Dir, &st, None);
                    self.dir(fd, &path)
                }
                // Swapped for a link since the stat, or unreadable: not kept, and never entered.
                Err(_) => {
                    self.put(path, Kind::Other, &st, None);
                    Ok(())
                }
            }
        } else if kind == SFlag::S_IFLNK {
            match readlinkat(dir, name) {
                Ok(target) => {
                    let target = RelPath(
                        std::os::unix::ffi::OsStrExt::as_bytes(target.as_os_str()).to_vec(),
                    );
                    self.put(path, Kind::Link { target }, &st, None);
                }
                Err(_) => self.put(path, Kind::Other, &st, None),
            }
            Ok(())
        } else if kind == SFlag::S_IFREG {
            self.file(dir, name, path, &st)
        } else {
            self.put(path, Kind::Other, &st, None);
            Ok(())
        }
    }

    fn file(
        &mut self,
        dir: BorrowedFd<'_>,
        name: &CStr,
        path: RelPath,
        st: &FileStat,
    ) -> std::io::Result<()> {
        let known = stamp(st);
        if let Some(prev) = self.prev.and_then(|t| t.0.get(&path)) {
            if let (Kind::File { size, .. }, Some(s)) = (&prev.kind, prev.stamp) {
                // The previous tree's content is held while any checkpoint refers to it (see `bound`).
                if s == known && *size == st.st_size as u64 {
                    self.put(path, prev.kind.clone(), st, Some(known));
                    return Ok(());
                }
            }
        }
        // O_NONBLOCK: a file swapped for a fifo since the stat must not hang the scan.
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | OFlag::O_NONBLOCK;
        let fd = match openat(dir, name, flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(nix::Error::ENOENT) => return Ok(()),
            Err(_) => {
                self.put(path, Kind::Other, st, None);
                return Ok(());
            }
        };
        // What was opened is what is kept: its own stat, not the name's.
        let st = fstat(&fd)?;
        if kind_of(&st) != SFlag::S_IFREG {
            self.put(path, Kind::Other, &st, None);
            return Ok(());
        }
        let stored = self.objects.store(File::from(fd))?;
        self.bytes_new += stored.written;
        if stored.linked {
            self.bytes_linked += stored.size;
        }
        let s = stamp(&st);
        let settled = s.mtime < self.now - RACY_NS && s.ctime < self.now - RACY_NS;
        let kind = Kind::File {
            hash: stored.hash,
            size: stored.size,
        };
        self.put(path, kind, &st, settled.then_some(s));
        Ok(())
    }

    fn put(&mut self, path: RelPath, kind: Kind, st: &FileStat, stamp: Option<Stamp>) {
        let entry = Entry {
            kind,
            mode: st.st_mode & 0o7777,
            owner: (st.st_uid, st.st_gid),
            stamp,
        };
        self.out.0.insert(path, entry);
    }
}
