//! One read-only `/etc` for the sandbox instead of a bind per file.
//!
//! Every bind costs bwrap a mount plus a re-read of the mount table (measured: about 180 µs per `/etc` file on the
//! 2-core bench machine, 1.1 ms for the six of the standard profile). The profile's `etc_files` are therefore
//! copied once into `<cache>/etc-<key>/` and the sandbox gets that directory as its `/etc` in one bind. The key
//! hashes each source's path, inode, size and modification time (for a directory such as `/etc/alternatives`,
//! its own and its subdirectories'), so a change on the host (a new user, a new timezone, an
//! `update-alternatives`) makes a new snapshot at the next session start, never a stale one. Checking the key
//! costs a few `stat` calls.
//!
//! The snapshot holds empty mount points for the network files (`/etc/hosts`, `/etc/resolv.conf`, `/etc/ssl/certs`):
//! those stay binds of the live host files, laid over the snapshot only when the manifest allows the network, so
//! the resolver configuration is always current and certificate keys are never copied.
//!
//! Whatever cannot be snapshotted (an unreadable file, a full disk) leaves the mounts as they were: one bind per
//! file, as before. So does a start that finds its snapshot being built: it does not wait for it. A server makes
//! the snapshot when a session is created (`Launcher::warm`), so its first turn's worker finds it made. A build
//! that a killed supervisor left unfinished (`.etc-<uuid>`) is removed by a later build.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::profile::Mount;

/// Where the snapshot is mounted.
const ETC: &str = "/etc";

/// Replaces the read-only binds of files under `/etc` with one bind of a snapshot directory under `cache`.
/// `network_files` are left as binds (after the snapshot), with mount points prepared for them in it.
pub fn consolidate(mounts: Vec<Mount>, network_files: &[String], cache: &Path) -> Vec<Mount> {
    let is_net = |dest: &Path| network_files.iter().any(|n| Path::new(n) == dest);
    let snapshot: Vec<(PathBuf, PathBuf)> = mounts
        .iter()
        .filter_map(|m| match m {
            Mount::ReadOnly { src, dest } if dest.starts_with(ETC) && !is_net(dest) => {
                Some((src.clone(), dest.clone()))
            }
            _ => None,
        })
        .collect();
    if snapshot.len() < 2 {
        return mounts;
    }
    let Some(dir) = ensure(&snapshot, network_files, cache) else {
        return mounts;
    };
    let mut out = Vec::with_capacity(mounts.len());
    let mut placed = false;
    for m in mounts {
        match &m {
            Mount::ReadOnly { dest, .. } if dest.starts_with(ETC) && !is_net(dest) => {
                if !placed {
                    out.push(Mount::ReadOnly {
                        src: dir.clone(),
                        dest: ETC.into(),
                    });
                    placed = true;
                }
            }
            _ => out.push(m),
        }
    }
    out
}

/// The snapshot directory for these files, made if it does not exist yet.
fn ensure(files: &[(PathBuf, PathBuf)], network_files: &[String], cache: &Path) -> Option<PathBuf> {
    let mut hasher = DefaultHasher::new();
    for (src, dest) in files {
        dest.hash(&mut hasher);
        fingerprint(src, &mut hasher)?;
    }
    network_files.hash(&mut hasher);
    let dir = cache.join(format!("etc-{:016x}", hasher.finish()));
    if dir.is_dir() {
        return Some(dir);
    }
    // One build of a snapshot at a time in this process: the sessions that start together when a server has just
    // started (or `/etc` has just changed) would otherwise each copy `/etc/alternatives` (hundreds of links), and
    // all but one then delete their copy. Others bind each file meanwhile rather than wait: on ext4 without a
    // journal, just after many files were deleted, a build took 170-330 ms, and the scale bench's first sandbox
    // starts all waited for it.
    let _building = Building::claim(&dir)?;
    if dir.is_dir() {
        return Some(dir);
    }
    // Built under a unique name and renamed into place, so a concurrent supervisor never sees half a snapshot.
    // Old snapshots are kept: a live sandbox of another session may still have one as its /etc.
    let tmp = cache.join(format!(".etc-{}", uuid::Uuid::new_v4()));
    #[cfg(test)]
    tests::BUILDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(dir.clone());
    let result = build(&tmp, files, network_files).and_then(|()| std::fs::rename(&tmp, &dir));
    // A concurrent supervisor may have renamed the same snapshot into place first: then ours is surplus.
    let _ = std::fs::remove_dir_all(&tmp);
    remove_abandoned_builds(cache);
    match result {
        Ok(()) => Some(dir),
        Err(_) if dir.is_dir() => Some(dir),
        Err(e) => {
            tracing::debug!(
                "no /etc snapshot in {}: {e}; binding each file",
                cache.display()
            );
            None
        }
    }
}

/// How old an unfinished build must be to count as abandoned. A build takes well under a second (330 ms at worst,
/// measured); one this old was cut off by a supervisor that was killed or lost power.
const ABANDONED: std::time::Duration = std::time::Duration::from_secs(600);

/// Removes the unfinished builds (`.etc-<uuid>`) that killed supervisors left in `cache`. Run after each build,
/// which is when `/etc` changed or the home is new, so a stable home pays nothing for it.
fn remove_abandoned_builds(cache: &Path) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.filter_map(|e| e.ok()) {
        let abandoned = entry.file_name().to_string_lossy().starts_with(".etc-")
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > ABANDONED));
        if abandoned {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// A snapshot directory this process is building; released when dropped.
struct Building(PathBuf);

/// The snapshot directories being built in this process.
static BUILDING: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

impl Building {
    /// Claims the build of `dir`; None when it is under way already.
    fn claim(dir: &Path) -> Option<Building> {
        let mut building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
        if building.iter().any(|d| d == dir) {
            return None;
        }
        building.push(dir.to_path_buf());
        Some(Building(dir.to_path_buf()))
    }
}

impl Drop for Building {
    fn drop(&mut self) {
        let mut building = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
        building.retain(|d| d != &self.0);
    }
}

/// Feeds what identifies the current content of `path` to the hasher. A directory counts by its own times and
/// those of its subdirectories: adding, removing or replacing an entry (how `update-alternatives` and package
/// managers change `/etc`) changes them, and checking them costs one `stat` per directory, not one per entry
/// (`/etc/alternatives` has hundreds). A file edited in place inside a listed directory is not noticed; no
/// profile lists a directory whose files are edited in place.
fn fingerprint(path: &Path, hasher: &mut DefaultHasher) -> Option<()> {
    let meta = std::fs::symlink_metadata(path).ok()?;
    path.hash(hasher);
    (
        meta.ino(),
        meta.size(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.mode(),
    )
        .hash(hasher);
    if meta.is_dir() {
        for dir in subdirs(path, &meta)? {
            fingerprint(&dir, hasher)?;
        }
    }
    Some(())
}

/// The subdirectories of `dir`, sorted. They are listed again only when `dir` changed: an entry added, removed or
/// renamed changes a directory's modification time. Listing `/etc/alternatives` (hundreds of entries, an ext4
/// hashed directory) at every session start was 1% of the CPU of the scale bench's cold turns.
fn subdirs(dir: &Path, meta: &std::fs::Metadata) -> Option<Vec<PathBuf>> {
    type Listed = std::collections::HashMap<PathBuf, ((u64, i64, i64), Vec<PathBuf>)>;
    static LISTED: std::sync::Mutex<Option<Listed>> = std::sync::Mutex::new(None);
    let version = (meta.ino(), meta.mtime(), meta.mtime_nsec());
    let mut listed = LISTED.lock().unwrap_or_else(|e| e.into_inner());
    let listed = listed.get_or_insert_with(Default::default);
    if let Some((seen, subdirs)) = listed.get(dir) {
        if *seen == version {
            return Some(subdirs.clone());
        }
    }
    let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    subdirs.sort();
    listed.insert(dir.to_path_buf(), (version, subdirs.clone()));
    Some(subdirs)
}

fn build(
    root: &Path,
    files: &[(PathBuf, PathBuf)],
    network_files: &[String],
) -> std::io::Result<()> {
    std::fs::create_dir_all(root)?;
    for (src, dest) in files {
        let Ok(rel) = dest.strip_prefix(ETC) else {
            continue;
        };
        copy(src, &root.join(rel))?;
    }
    for net in network_files {
        let Ok(rel) = Path::new(net).strip_prefix(ETC) else {
            continue;
        };
        let point = root.join(rel);
        if let Some(parent) = point.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // The mount point's kind must match what will be bound over it.
        if std::fs::metadata(net).is_ok_and(|m| m.is_dir()) {
            std::fs::create_dir_all(&point)?;
        } else {
            std::fs::write(&point, b"")?;
        }
    }
    Ok(())
}

/// Copies a file, a symlink (as a symlink) or a directory tree of those.
fn copy(src: &Path, dest: &Path) -> std::io::Result<()> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let meta = std::fs::symlink_metadata(src)?;
    if meta.file_type().is_symlink() {
        std::os::unix::fs::symlink(std::fs::read_link(src)?, dest)
    } else if meta.is_dir() {
        std::fs::create_dir_all(dest)?;
        for entry in std::fs::read_dir(src)? {
            let entry = entry?;
            copy(&entry.path(), &dest.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        std::fs::copy(src, dest).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ro(src: &Path, dest: &str) -> Mount {
        Mount::ReadOnly {
            src: src.into(),
            dest: dest.into(),
        }
    }

    #[test]
    fn etc_files_become_one_bind_and_network_files_stay_binds_after_it() {
        let host = tempfile::TempDir::new().unwrap();
        let cache = tempfile::TempDir::new().unwrap();
        let (passwd, group, hosts) = (
            host.path().join("passwd"),
            host.path().join("group"),
            host.path().join("hosts"),
        );
        std::fs::write(&passwd, "root:x:0:0::/root:/bin/sh\n").unwrap();
        std::fs::write(&group, "root:x:0:\n").unwrap();
        std::fs::write(&hosts, "127.0.0.1 localhost\n").unwrap();
        let usr = ro(Path::new("/usr"), "/usr");
        let mounts = vec![
            usr.clone(),
            ro(&passwd, "/etc/passwd"),
            ro(&group, "/etc/group"),
            ro(&hosts, "/etc/hosts"),
        ];
        let net = vec!["/etc/hosts".to_string()];
        let out = consolidate(mounts, &net, cache.path());
        let Mount::ReadOnly { src: snap, dest } = &out[1] else {
            panic!("expected the snapshot bind, got {out:?}");
        };
        assert_eq!(dest, Path::new("/etc"));
        assert_eq!(out, vec![usr, ro(snap, "/etc"), ro(&hosts, "/etc/hosts")]);
        assert_eq!(
            std::fs::read_to_string(snap.join("passwd")).unwrap(),
            "root:x:0:0::/root:/bin/sh\n"
        );
        // A mount point for the network file, empty: its content comes from the live bind.
        assert_eq!(std::fs::read_to_string(snap.join("hosts")).unwrap(), "");
    }

    #[test]
    fn a_changed_host_file_gets_a_new_snapshot_and_an_unchanged_one_reuses_it() {
        let host = tempfile::TempDir::new().unwrap();
        let cache = tempfile::TempDir::new().unwrap();
        let (passwd, alternatives) = (host.path().join("passwd"), host.path().join("alternatives"));
        std::fs::write(&passwd, "a\n").unwrap();
        std::fs::create_dir(&alternatives).unwrap();
        std::os::unix::fs::symlink("/usr/bin/vim.basic", alternatives.join("vi")).unwrap();
        let mounts = || {
            vec![
                ro(&passwd, "/etc/passwd"),
                ro(&alternatives, "/etc/alternatives"),
            ]
        };
        let snap = |m: Vec<Mount>| match consolidate(m, &[], cache.path()).remove(0) {
            Mount::ReadOnly { src, .. } => src,
            other => panic!("unexpected {other:?}"),
        };
        let first = snap(mounts());
        assert_eq!(snap(mounts()), first);
        assert_eq!(
            std::fs::read_link(first.join("alternatives/vi")).unwrap(),
            Path::new("/usr/bin/vim.basic")
        );
        std::fs::write(&passwd, "a\nb\n").unwrap();
        let second = snap(mounts());
        assert_ne!(second, first);
        assert_eq!(
            std::fs::read_to_string(second.join("passwd")).unwrap(),
            "a\nb\n"
        );
        std::os::unix::fs::symlink("/usr/bin/nano", alternatives.join("editor")).unwrap();
        let third = snap(mounts());
        assert_ne!(third, second);
        assert!(third.join("alternatives/editor").is_symlink());
    }

    /// Every snapshot directory a build was started for.
    pub(super) static BUILDS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

    #[test]
    fn sessions_starting_together_build_one_snapshot() {
        let host = tempfile::TempDir::new().unwrap();
        let cache = tempfile::TempDir::new().unwrap();
        let alternatives = host.path().join("alternatives");
        std::fs::create_dir(&alternatives).unwrap();
        for i in 0..200 {
            std::os::unix::fs::symlink("/usr/bin/true", alternatives.join(format!("t{i}")))
                .unwrap();
        }
        std::fs::write(host.path().join("passwd"), "root:x:0:0::/root:/bin/sh\n").unwrap();
        let mounts = vec![
            ro(&host.path().join("passwd"), "/etc/passwd"),
            ro(&alternatives, "/etc/alternatives"),
        ];
        let barrier = std::sync::Barrier::new(8);
        let snapshots: Vec<Vec<Mount>> = std::thread::scope(|s| {
            let workers: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        consolidate(mounts.clone(), &[], cache.path())
                    })
                })
                .collect();
            workers.into_iter().map(|w| w.join().unwrap()).collect()
        });
        // The one that built it has the snapshot; the others have it too, or bound each file while it was built.
        let snapshot = consolidate(mounts.clone(), &[], cache.path());
        assert_ne!(snapshot, mounts);
        assert!(snapshots.iter().all(|m| m == &snapshot || m == &mounts));
        assert!(snapshots.contains(&snapshot));
        let builds = BUILDS.lock().unwrap();
        assert_eq!(
            builds
                .iter()
                .filter(|d| d.starts_with(cache.path()))
                .count(),
            1
        );
    }

    #[test]
    fn a_start_that_finds_its_snapshot_being_built_binds_each_file_instead_of_waiting() {
        let host = tempfile::TempDir::new().unwrap();
        let (passwd, group) = (host.path().join("passwd"), host.path().join("group"));
        std::fs::write(&passwd, "root:x:0:0::/root:/bin/sh\n").unwrap();
        std::fs::write(&group, "root:x:0:\n").unwrap();
        let mounts = vec![ro(&passwd, "/etc/passwd"), ro(&group, "/etc/group")];
        // The snapshot's name, learnt from a build elsewhere: it depends on the files, not on the cache.
        let elsewhere = tempfile::TempDir::new().unwrap();
        let Mount::ReadOnly { src: built, .. } =
            &consolidate(mounts.clone(), &[], elsewhere.path())[0]
        else {
            panic!("no snapshot made");
        };
        let cache = tempfile::TempDir::new().unwrap();
        let name = built.file_name().unwrap();
        let under_way = Building::claim(&cache.path().join(name)).unwrap();
        assert_eq!(consolidate(mounts.clone(), &[], cache.path()), mounts);
        drop(under_way);
        assert_eq!(
            consolidate(mounts.clone(), &[], cache.path()),
            vec![ro(&cache.path().join(name), "/etc")]
        );
    }

    #[test]
    fn a_build_removes_the_builds_that_killed_supervisors_left_and_not_one_under_way() {
        let host = tempfile::TempDir::new().unwrap();
        let (passwd, group) = (host.path().join("passwd"), host.path().join("group"));
        std::fs::write(&passwd, "root:x:0:0::/root:/bin/sh\n").unwrap();
        std::fs::write(&group, "root:x:0:\n").unwrap();
        let cache = tempfile::TempDir::new().unwrap();
        let (abandoned, under_way) = (cache.path().join(".etc-old"), cache.path().join(".etc-new"));
        for dir in [&abandoned, &under_way] {
            std::fs::create_dir_all(dir.join("alternatives")).unwrap();
            std::fs::write(dir.join("passwd"), "half").unwrap();
        }
        let long_ago = std::time::SystemTime::now() - ABANDONED * 2;
        std::fs::File::open(&abandoned)
            .unwrap()
            .set_modified(long_ago)
            .unwrap();
        let mounts = vec![ro(&passwd, "/etc/passwd"), ro(&group, "/etc/group")];
        let out = consolidate(mounts, &[], cache.path());
        assert!(
            matches!(&out[..], [Mount::ReadOnly { dest, .. }] if dest == Path::new(ETC)),
            "no snapshot was made: {out:?}"
        );
        assert!(!abandoned.exists(), "the abandoned build was kept");
        assert!(
            under_way.join("passwd").is_file(),
            "a recent build was removed"
        );
    }

    #[test]
    fn an_unreadable_source_leaves_one_bind_per_file() {
        let cache = tempfile::TempDir::new().unwrap();
        let mounts = vec![
            ro(Path::new("/nonexistent/passwd"), "/etc/passwd"),
            ro(Path::new("/nonexistent/group"), "/etc/group"),
        ];
        assert_eq!(consolidate(mounts.clone(), &[], cache.path()), mounts);
    }
}
