//! Making a workspace a stored tree again, through directory descriptors: each directory is opened from its parent
//! with `O_NOFOLLOW`, a file is written as a new file beside its name and renamed over it, and a link is made the
//! same way. A name that code in the sandbox turned into a link to a host file or directory is replaced, never
//! written through; a component that is a link where the tree has a directory is removed first.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};

use nix::fcntl::AtFlags;
use nix::fcntl::{openat, renameat, OFlag};
use nix::sys::stat::{fchmod, mkdirat, Mode};
use nix::unistd::{fchown, fchownat, symlinkat, unlinkat, Gid, Uid, UnlinkatFlags};

use super::objects::Objects;
use super::tree::{Entry, Kind, RelPath, Tree};

/// Paths a restore could not make as stored, with why.
pub type Skipped = Vec<(RelPath, String)>;

/// Makes the directory `root` (opened for reading) hold `target`, given that it holds `current` (scanned just
/// before). Paths that are `Other`, or that the ignore rules left out (`Ignored`), on either side are left alone;
/// a file the target holds is written back even where the workspace now has an ignored path, so that rules a turn
/// wrote cannot keep its changes from being undone.
pub fn restore(
    root: OwnedFd,
    current: &Tree,
    target: &Tree,
    objects: &Objects,
) -> std::io::Result<Skipped> {
    let mut dirs = Dirs {
        open: HashMap::from([(Vec::new(), root)]),
    };
    // Only root can give files back to their owner (the sandbox's user, or the user whose project it is).
    let chown = Uid::effective().is_root();
    let owner = |e: &Entry| {
        (
            Some(Uid::from_raw(e.owner.0)),
            Some(Gid::from_raw(e.owner.1)),
        )
    };
    let mut skipped = Skipped::new();
    let kind_changes = |p: &RelPath, e: &Entry| match (target.0.get(p), &e.kind) {
        (_, Kind::Other | Kind::Skipped { .. } | Kind::Ignored { .. }) => false,
        (Some(t), _) if matches!(t.kind, Kind::Ignored { .. }) => false,
        (None, _) => true,
        (Some(t), _) => std::mem::discriminant(&t.kind) != std::mem::discriminant(&e.kind),
    };
    // Deepest first, so a directory is empty by the time it goes.
    for (path, entry) in current.0.iter().rev() {
        if !kind_changes(path, entry) {
            continue;
        }
        let flag = match entry.kind {
            Kind::Dir => UnlinkatFlags::RemoveDir,
            _ => UnlinkatFlags::NoRemoveDir,
        };
        dirs.forget(path);
        if let Err(e) = dirs.at(path, |dir, name| unlinkat(dir, name, flag)) {
            skipped.push((path.clone(), format!("not removed: {e}")));
        }
    }
    let mut modes = Vec::new();
    for (path, entry) in &target.0 {
        let now = current.0.get(path).filter(|e| !kind_changes(path, e));
        let done = match (&entry.kind, now) {
            (Kind::Other | Kind::Skipped { .. } | Kind::Ignored { .. }, _) => continue,
            (_, Some(e)) if e.same(entry) => continue,
            (Kind::Dir, Some(_)) => {
                modes.push((path, entry.mode));
                continue;
            }
            (Kind::Dir, None) => {
                modes.push((path, entry.mode));
                dirs.at(path, |dir, name| {
                    mkdirat(dir, name, Mode::from_bits_truncate(0o700))?;
                    let (uid, gid) = owner(entry);
                    match chown {
                        true => fchownat(dir, name, uid, gid, AtFlags::AT_SYMLINK_NOFOLLOW),
                        false => Ok(()),
                    }
                })
            }
            (Kind::File { hash, .. }, _) => {
                let content = objects.open(hash);
                let give = chown.then(|| owner(entry));
                dirs.at(path, |dir, name| {
                    replace_file(dir, name, content, hash, entry.mode, give)
                })
            }
            (Kind::Link { target }, _) => dirs.at(path, |dir, name| {
                let tmp = temp_name(name);
                symlinkat(target.as_path(), dir, tmp.as_c_str())?;
                if chown {
                    let (uid, gid) = owner(entry);
                    fchownat(dir, tmp.as_c_str(), uid, gid, AtFlags::AT_SYMLINK_NOFOLLOW)?;
                }
                renameat(dir, tmp.as_c_str(), dir, name)
            }),
        };
        if let Err(e) = done {
            skipped.push((path.clone(), format!("not restored: {e}")));
        }
    }
    // Last, so a read-only directory is filled before it becomes so.
    for (path, mode) in modes.into_iter().rev() {
        let set = dirs
            .dir(path)
            .and_then(|fd| fchmod(fd, Mode::from_bits_truncate(mode)));
        if let Err(e) = set {
            skipped.push((path.clone(), format!("mode not set: {e}")));
        }
    }
    Ok(skipped)
}

/// A name beside `name` for writing before the rename.
fn temp_name(name: &std::ffi::CStr) -> CString {
    let mut bytes = b".service-restore-".to_vec();
    bytes.extend_from_slice(uuid::Uuid::new_v4().simple().to_string().as_bytes());
    bytes.push(b'-');
    // Kept short: the name limit counts the whole.
    bytes.extend(name.to_bytes().iter().take(100));
    CString::new(bytes).unwrap_or_default()
}

/// Writes the stored content of `hash` as a new file beside `name`, checks it is what was stored, and renames it
/// over `name`: a link or hard link at `name` is replaced, never written through.
fn replace_file(
    dir: std::os::fd::BorrowedFd<'_>,
    name: &std::ffi::CStr,
    content: std::io::Result<File>,
    hash: &super::tree::Digest,
    mode: u32,
    owner: Option<(Option<Uid>, Option<Gid>)>,
) -> nix::Result<()> {
    let mut content = content.map_err(errno)?;
    let tmp = temp_name(name);
    let flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let fd = openat(dir, tmp.as_c_str(), flags, Mode::from_bits_truncate(0o600))?;
    let mut out = File::from(fd);
    let written = copy_checked(&mut content, &mut out, hash)
        .and_then(|_| match owner {
            Some((uid, gid)) => fchown(out.as_fd(), uid, gid),
            None => Ok(()),
        })
        .and_then(|_| fchmod(out.as_fd(), Mode::from_bits_truncate(mode)))
        .and_then(|_| renameat(dir, tmp.as_c_str(), dir, name));
    if written.is_err() {
        let _ = unlinkat(dir, tmp.as_c_str(), UnlinkatFlags::NoRemoveDir);
    }
    written
}

/// Copies `from` to `to`, failing (EIO) when what was read does not hash to `hash`: a damaged stored copy is never
/// restored.
fn copy_checked(from: &mut File, to: &mut File, hash: &super::tree::Digest) -> nix::Result<()> {
    use sha2::Digest;
    use std::io::{Read, Write};
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(errno(e)),
        };
        hasher.update(&buf[..n]);
        to.write_all(&buf[..n]).map_err(errno)?;
    }
    match <[u8; 32]>::from(hasher.finalize()) == hash.0 {
        true => Ok(()),
        false => Err(nix::Error::EIO),
    }
}

fn errno(e: std::io::Error) -> nix::Error {
    nix::Error::from_raw(e.raw_os_error().unwrap_or(nix::Error::EIO as i32))
}

/// Directory descriptors by relative path, each opened from its parent without following a link.
struct Dirs {
    open: HashMap<Vec<u8>, OwnedFd>,
}

impl Dirs {
    fn dir(&mut self, path: &RelPath) -> nix::Result<std::os::fd::BorrowedFd<'_>> {
        if !self.open.contains_key(&path.0) {
            let (parent, name) = path.split();
            let name = CString::new(name).map_err(|_| nix::Error::EINVAL)?;
            let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
            let fd = openat(self.dir(&parent)?, name.as_c_str(), flags, Mode::empty())?;
            self.open.insert(path.0.clone(), fd);
        }
        self.open
            .get(&path.0)
            .map(|fd| fd.as_fd())
            .ok_or(nix::Error::ENOENT)
    }

    /// Runs `f` on the parent directory of `path` and its last name.
    fn at<T>(
        &mut self,
        path: &RelPath,
        f: impl FnOnce(std::os::fd::BorrowedFd<'_>, &std::ffi::CStr) -> nix::Result<T>,
    ) -> nix::Result<T> {
        let (parent, name) = path.split();
        let name = CString::new(name).map_err(|_| nix::Error::EINVAL)?;
        f(self.dir(&parent)?, name.as_c_str())
    }

    /// Drops the descriptor of `path` (about to be removed) and of everything under it.
    fn forget(&mut self, path: &RelPath) {
        let prefix = path.join(b"");
        self.open
            .retain(|k, _| k != &path.0 && !k.starts_with(&prefix.0));
    }
}
