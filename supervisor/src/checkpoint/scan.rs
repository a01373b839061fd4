//! Reading a workspace into a [`Tree`] through directory descriptors, never a path: code in the sandbox may swap a
//! directory for a link to a host directory while the scan runs, and a scan that followed it would copy host files
//! into the checkpoint (and a restore, into the workspace). Every open is `O_NOFOLLOW` relative to the directory
//! that was read, so a swapped component fails or is recorded as the link it now is.
//!
//! A file whose stat fields match the previous tree's is not read again: with ten thousand files the scan costs
//! one `fstatat` each, and only what changed is hashed. A path the project's ignore rules leave out ([`Ignores`])
//! is recorded by its own stat as [`Kind::Ignored`] and never read or entered: a Rust or Node project's `target/`
//! and `node_modules/` cost one `fstatat` each.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use nix::dir::Dir;
use nix::fcntl::{openat, readlinkat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};

use super::ignores::{self, Ignores};
use super::objects::Objects;
use super::tree::{Entry, Kind, RelPath, Stamp, Tree};

/// Files changed within this long of the scan are hashed again next time: a write in the same clock tick as the
/// scan's read would leave the same stat fields with other content.
const RACY_NS: i64 = 2_000_000_000;

/// What a scan found and stored.
pub struct Scanned {
    /// The workspace now.
    pub tree: Tree,
    /// Files not stored because their size was past what was left of the budget, with their sizes.
    pub skipped: Vec<(RelPath, u64)>,
    /// Bytes of content written to the pool.
    pub bytes_new: u64,
    /// Bytes of content the session did not hold before.
    pub bytes_linked: u64,
}

/// Scans the directory `root` (a descriptor opened for reading), trusting `prev`'s unchanged files, storing new
/// content in `objects`, at most `budget` bytes of it: a file is counted by its size (`st_size`, so a sparse file
/// by what it would take to read) before it is read, and one past what is left is recorded as
/// [`Kind::Skipped`], never read. The directory `.git` is left out: the repository's own state is the user's. Directories
/// are shared out to a thread per core (at most four): most of a scan is the kernel's `fstatat`, which runs on
/// every core at once. The calling thread reads the root first and is one of them; the others start only when the
/// root has subdirectories, as starting them costs more than scanning a workspace of a few files.
/// `rules` are those in force at the root (see [`Ignores::at_root`]); `host_root` is the workspace's host path,
/// which they match against.
pub fn scan(
    root: OwnedFd,
    prev: Option<&Tree>,
    objects: &Objects,
    budget: u64,
    host_root: &std::path::Path,
    rules: Ignores,
) -> std::io::Result<Scanned> {
    let budget = AtomicU64::new(budget);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(i64::MAX);
    let queue = Queue {
        state: Mutex::new(QueueState {
            dirs: vec![Pending::Root(root, rules)],
            busy: 0,
            failed: false,
        }),
        ready: Condvar::new(),
    };
    let walk = || Walk {
        host_root,
        prev,
        objects,
        now,
        queue: &queue,
        budget: &budget,
        out: Tree::default(),
        skipped: Vec::new(),
        bytes_new: 0,
        bytes_linked: 0,
    };
    let walks: Vec<std::io::Result<Walk<'_>>> = std::thread::scope(|scope| {
        let mut here = walk();
        let root = caught(|| here.read_next());
        let more = root.is_ok() && !queue.lock().dirs.is_empty();
        let helpers: Vec<_> = (1..if more { threads() } else { 1 })
            .map(|_| {
                scope.spawn(|| {
                    let mut walk = walk();
                    walk.work().map(|()| walk)
                })
            })
            .collect();
        let mine = root.and_then(|_| caught(|| here.work())).map(|()| here);
        std::iter::once(mine)
            .chain(
                helpers
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err(panicked()))),
            )
            .collect()
    });
    let mut out = Scanned {
        tree: Tree::default(),
        skipped: Vec::new(),
        bytes_new: 0,
        bytes_linked: 0,
    };
    for walk in walks {
        let mut walk = walk?;
        out.tree.0.append(&mut walk.out.0);
        out.skipped.append(&mut walk.skipped);
        out.bytes_new += walk.bytes_new;
        out.bytes_linked += walk.bytes_linked;
    }
    out.skipped.sort();
    Ok(out)
}

fn panicked() -> std::io::Error {
    std::io::Error::other("a scan thread panicked")
}

/// `read` on the calling thread, with a panic turned into an error as a helper thread's is.
fn caught<T>(read: impl FnOnce() -> std::io::Result<T>) -> std::io::Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(read)).unwrap_or_else(|_| Err(panicked()))
}

/// Threads a scan uses: one per core, at most four. Read once, as the standard library reads the cgroup's CPU
/// quota files each time it is asked.
fn threads() -> usize {
    static THREADS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *THREADS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get().min(4)))
}

/// Directories waiting to be read, shared by the scan's threads.
struct Queue {
    state: Mutex<QueueState>,
    ready: Condvar,
}

/// A directory to read: the root, opened already, or one found in a directory still open; with the ignore rules in
/// force where it is.
enum Pending {
    Root(OwnedFd, Ignores),
    Child {
        /// The directory it is in, held open while children are pending (one descriptor for all of them).
        parent: Arc<OwnedFd>,
        name: CString,
        path: RelPath,
        st: FileStat,
        rules: Ignores,
    },
}

struct QueueState {
    dirs: Vec<Pending>,
    /// Threads reading a directory, which may add more.
    busy: usize,
    /// A thread failed: the others stop.
    failed: bool,
}

impl Queue {
    fn lock(&self) -> std::sync::MutexGuard<'_, QueueState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next directory to read; None when there is none and no thread can add one, or a thread failed.
    fn next(&self) -> Option<Pending> {
        let mut state = self.lock();
        loop {
            if state.failed {
                return None;
            }
            if let Some(dir) = state.dirs.pop() {
                state.busy += 1;
                return Some(dir);
            }
            if state.busy == 0 {
                return None;
            }
            state = self.ready.wait(state).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn push(&self, dir: Pending) {
        self.lock().dirs.push(dir);
        self.ready.notify_one();
    }

    /// A directory is read (`ok` false: reading it failed).
    fn done(&self, ok: bool) {
        let mut state = self.lock();
        state.busy -= 1;
        state.failed |= !ok;
        drop(state);
        self.ready.notify_all();
    }
}

struct Walk<'a> {
    host_root: &'a std::path::Path,
    prev: Option<&'a Tree>,
    objects: &'a Objects,
    now: i64,
    queue: &'a Queue,
    /// Bytes of content the scan may still store, shared by its threads.
    budget: &'a AtomicU64,
    out: Tree,
    skipped: Vec<(RelPath, u64)>,
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
    /// Reads directories from the queue until there are none left.
    fn work(&mut self) -> std::io::Result<()> {
        while self.read_next()? {}
        Ok(())
    }

    /// Reads the next directory from the queue; false when there was none left.
    fn read_next(&mut self) -> std::io::Result<bool> {
        /// Tells the queue a directory is done however its reading ends, a panic included, so that no other
        /// thread waits for it forever.
        struct Reading<'q>(&'q Queue, bool);
        impl Drop for Reading<'_> {
            fn drop(&mut self) {
                self.0.done(self.1);
            }
        }
        let Some(pending) = self.queue.next() else {
            return Ok(false);
        };
        let mut reading = Reading(self.queue, false);
        self.open(pending)?;
        reading.1 = true;
        Ok(true)
    }

    /// Opens a pending directory from its parent, without following a link, and reads it.
    fn open(&mut self, pending: Pending) -> std::io::Result<()> {
        let (fd, path, rules) = match pending {
            Pending::Root(fd, rules) => (fd, RelPath(Vec::new()), rules),
            Pending::Child {
                parent,
                name,
                path,
                st,
                rules,
            } => {
                let flags =
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                match openat(parent.as_fd(), name.as_c_str(), flags, Mode::empty()) {
                    Ok(fd) => {
                        self.put(path.clone(), Kind::Dir, &st, None);
                        (fd, path, rules)
                    }
                    // Swapped for a link since the stat, or unreadable: not kept, and never entered.
                    Err(_) => {
                        self.put(path, Kind::Other, &st, None);
                        return Ok(());
                    }
                }
            }
        };
        self.dir(Arc::new(fd), &path, &rules)
    }

    fn dir(&mut self, fd: Arc<OwnedFd>, at: &RelPath, rules: &Ignores) -> std::io::Result<()> {
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        let mut listing = Dir::openat(fd.as_fd(), ".", flags, Mode::empty())?;
        let names: Vec<CString> = listing
            .iter()
            .filter_map(|e| e.ok())
            .filter(|e| ![&b"."[..], b"..", b".git"].contains(&e.file_name().to_bytes()))
            .map(|e| e.file_name().to_owned())
            .collect();
        drop(listing);
        // This directory's own ignore files add to the rules of what it holds.
        let texts: Vec<String> = names
            .iter()
            .filter(|n| ignores::FILES.iter().any(|f| f.as_bytes() == n.to_bytes()))
            .filter_map(|n| {
                crate::sandbox::host_dir::read_small_at(fd.as_fd(), n, ignores::MAX_FILE)
            })
            .collect();
        let here = match texts.is_empty() {
            true => rules.clone(),
            false => rules.with(&self.host_root.join(at.as_path()), &texts),
        };
        for name in names {
            let path = at.join(name.to_bytes());
            self.entry(&fd, name, path, &here)?;
        }
        Ok(())
    }

    fn entry(
        &mut self,
        parent: &Arc<OwnedFd>,
        name: CString,
        path: RelPath,
        rules: &Ignores,
    ) -> std::io::Result<()> {
        let dir = parent.as_fd();
        let name = name.as_c_str();
        let st = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Gone since the directory was read.
            Err(nix::Error::ENOENT) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let kind = kind_of(&st);
        let is_dir = kind == SFlag::S_IFDIR;
        if !rules.is_empty()
            && self.may_ignore(&path, name)
            && rules.ignored(&self.host_root.join(path.as_path()), is_dir)
        {
            // Not the agent's work: its own stat says whether it changed, nothing under it is read.
            let s = stamp(&st);
            let ignored = Kind::Ignored {
                mtime: s.mtime,
                ctime: s.ctime,
            };
            self.put(path, ignored, &st, Some(s));
            return Ok(());
        }
        if is_dir {
            self.queue.push(Pending::Child {
                parent: parent.clone(),
                name: name.to_owned(),
                path,
                st,
                rules: rules.clone(),
            });
            Ok(())
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
            if let (Kind::Skipped { size }, Some(s)) = (&prev.kind, prev.stamp) {
                if s == known && *size == st.st_size as u64 {
                    self.skip(path, *size, st, Some(known));
                    return Ok(());
                }
            }
        }
        let size = st.st_size.max(0) as u64;
        let reserved = self
            .budget
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(size)
            });
        if reserved.is_err() {
            self.skip(path, size, st, Some(known));
            return Ok(());
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
        let stored = match self.objects.store(File::from(fd), size) {
            Ok(stored) => stored,
            // It grew past what was counted while it was read: passed over, as a file too large from the start.
            Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                self.skip(path, st.st_size.max(0) as u64, &st, None);
                return Ok(());
            }
            Err(e) => return Err(e),
        };
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

    /// Whether the ignore rules may leave `path` out. Not the ignore files themselves, and not a path the previous
    /// checkpoint held: code in the sandbox can write rules (`*` in a `.gitignore`), and rules written after a
    /// file was checkpointed must not hide what later turns do to it.
    fn may_ignore(&self, path: &RelPath, name: &CStr) -> bool {
        if ignores::FILES
            .iter()
            .any(|f| f.as_bytes() == name.to_bytes())
        {
            return false;
        }
        !self
            .prev
            .and_then(|t| t.0.get(path))
            .is_some_and(|e| !matches!(e.kind, Kind::Ignored { .. }))
    }

    /// Records a file passed over for the bound.
    fn skip(&mut self, path: RelPath, size: u64, st: &FileStat, stamp: Option<Stamp>) {
        self.skipped.push((path.clone(), size));
        self.put(path, Kind::Skipped { size }, st, stamp);
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
