//! Workspace checkpoints: a session's workspace as it was before each turn that can write, and as the turn left it,
//! so that a rewind can restore the files, a fork can copy them, and `sessions diff` can show what a turn changed,
//! commands included.
//!
//! - Contents are kept once by SHA-256 ([`objects`]); a checkpoint is a manifest of paths, most of them the changes
//!   from the previous checkpoint ([`tree::Manifest`]), so a turn that changes one file of ten thousand costs a few
//!   hundred bytes of manifest and that file's content.
//! - A scan stats every path and reads only files whose stat fields changed ([`scan`]), through descriptors, as
//!   the restore writes ([`restore`]): neither follows a link code in the sandbox made.
//! - `.git` is left out: rewinding never rewrites the repository's commits, index or stashes.
//! - Past the session's bound, the oldest checkpoints go, and their content with them when nothing else holds it.
//!
//! Layout: `sessions/<id>/checkpoints/{index.json, <n>.json, objects/<sha256>}`, the objects hard links into
//! `$SERVICE_HOME/checkpoints/objects/`.

pub mod objects;
pub mod restore;
pub mod scan;
pub mod tree;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use serde::{Deserialize, Serialize};

use objects::Objects;
use tree::{Change, Manifest, RelPath, Tree};

/// A manifest is whole again after this many changes-only ones, so reading one never walks a long chain.
const MAX_CHAIN: u32 = 16;

/// Why a checkpoint operation failed.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// Reading or writing failed.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// Where.
        path: PathBuf,
        /// What the kernel said.
        source: std::io::Error,
    },
    /// The workspace cannot be opened without following a link.
    #[error("the workspace cannot be checkpointed: {0}")]
    Workspace(#[from] crate::sandbox::host_dir::HostDirError),
    /// No checkpoint of that moment is on this machine.
    #[error("{0}")]
    Missing(String),
    /// Files changed outside the session since its last turn ended.
    #[error(
        "the workspace changed outside the session since its last turn ended, and a rewind would undo that: {}; \
         rewind with --force (\"force\": true) to restore anyway",
        list(.0)
    )]
    ChangedOutside(Vec<String>),
    /// A stored manifest does not parse.
    #[error("checkpoint {path} is damaged: {message}")]
    Damaged {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

fn list(paths: &[String]) -> String {
    const SHOWN: usize = 20;
    let mut text = paths
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if paths.len() > SHOWN {
        text.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    text
}

impl CheckpointError {
    fn io(action: &'static str, path: &Path, source: std::io::Error) -> Self {
        CheckpointError::Io {
            action,
            path: path.to_path_buf(),
            source,
        }
    }
}

type Result<T> = std::result::Result<T, CheckpointError>;

/// When in a turn a checkpoint was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum At {
    /// Before the turn ran anything.
    Start,
    /// As the turn left the workspace.
    End,
    /// Right after a rewind restored it.
    Restored,
}

/// One checkpoint in a session's index.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Point {
    /// Its number, which names its manifest.
    pub id: u64,
    /// The turn it belongs to (the rewind's turn for `Restored`).
    pub turn_id: String,
    /// When in the turn.
    pub at: At,
    /// Files it holds.
    pub files: u64,
    /// Changes-only manifests since the last whole one.
    #[serde(default)]
    depth: u32,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Index {
    next: u64,
    points: Vec<Point>,
    /// Bytes of content the session holds.
    #[serde(default)]
    bytes: u64,
}

/// What taking a checkpoint did.
#[derive(Debug, Clone, PartialEq)]
pub struct Taken {
    /// Files in the workspace.
    pub files: u64,
    /// Bytes of content written that no checkpoint held.
    pub bytes_new: u64,
    /// Turns whose checkpoints were dropped to stay within the bound, oldest first.
    pub dropped: Vec<String>,
}

/// One changed path of a turn, with its unified diff when both sides are text.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct FileChange {
    /// Path in the workspace.
    pub path: String,
    /// Added, modified or removed.
    pub change: Change,
    /// `---`/`+++` unified diff; none for binary or large content, or a link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// Content larger than this is not diffed.
const MAX_DIFF_BYTES: u64 = 1024 * 1024;

/// One session's checkpoints.
pub struct Checkpoints {
    dir: PathBuf,
    objects: Objects,
    max_bytes: u64,
    state: Mutex<State>,
    /// End checkpoints promised (a turn ended, its checkpoint is being taken): everything else waits for them.
    ending: (Mutex<usize>, Condvar),
}

#[derive(Default)]
struct State {
    index: Option<Index>,
    /// The latest checkpoint's tree, which the next scan trusts.
    last: Option<(u64, Arc<Tree>)>,
    /// The turn whose start checkpoint was taken and whose end is not.
    open_turn: Option<String>,
}

impl Checkpoints {
    /// The checkpoints of the session whose directory is `session_dir`, content pooled under `pool`, at most
    /// `max_bytes` of content.
    pub fn new(session_dir: &Path, pool: &Path, max_bytes: u64) -> Checkpoints {
        let dir = session_dir.join("checkpoints");
        Checkpoints {
            objects: Objects::new(pool.join("objects"), dir.join("objects")),
            dir,
            max_bytes,
            state: Mutex::new(State::default()),
            ending: (Mutex::new(0), Condvar::new()),
        }
    }

    /// Waits until every promised end checkpoint is taken.
    pub fn settle(&self) {
        let (count, settled) = &self.ending;
        let mut n = count.lock().unwrap_or_else(|p| p.into_inner());
        while *n > 0 {
            n = settled.wait(n).unwrap_or_else(|p| p.into_inner());
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.settle();
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `turn_id`'s start was checkpointed and its end is not yet.
    pub fn is_open(&self, turn_id: &str) -> bool {
        let state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.open_turn.as_deref() == Some(turn_id)
    }

    /// Promises the end checkpoint of a turn: every other operation waits until [`Self::end`] has run.
    pub fn expect_end(&self) {
        *self.ending.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    }

    /// Takes the promised end checkpoint of `turn_id` of the workspace `root`.
    pub fn end(&self, root: &Path, turn_id: &str) -> Result<Taken> {
        let taken = {
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
            state.open_turn = None;
            self.take_locked(&mut state, root, turn_id, At::End)
        };
        let (count, settled) = &self.ending;
        let mut n = count.lock().unwrap_or_else(|p| p.into_inner());
        *n = n.saturating_sub(1);
        settled.notify_all();
        taken
    }

    /// Checkpoints the workspace `root` before `turn_id` runs anything.
    pub fn start(&self, root: &Path, turn_id: &str) -> Result<Taken> {
        let mut state = self.state();
        let taken = self.take_locked(&mut state, root, turn_id, At::Start)?;
        state.open_turn = Some(turn_id.to_string());
        Ok(taken)
    }

    fn take_locked(&self, state: &mut State, root: &Path, turn_id: &str, at: At) -> Result<Taken> {
        self.load(state)?;
        let prev = state.last.clone();
        let fd = crate::sandbox::host_dir::open_for_reading(root)?;
        let scanned = scan::scan(fd, prev.as_ref().map(|(_, t)| &**t), &self.objects)
            .map_err(|e| CheckpointError::io("cannot checkpoint", root, e))?;
        let index = state.index.get_or_insert_with(Index::default);
        let id = index.next;
        let base = prev
            .as_ref()
            .and_then(|(pid, t)| index.points.iter().find(|p| p.id == *pid).map(|p| (p, t)));
        let (manifest, depth) = match base {
            Some((p, t)) if p.depth < MAX_CHAIN => {
                (Manifest::delta(&scanned.tree, t, p.id), p.depth + 1)
            }
            _ => (Manifest::whole(&scanned.tree), 0),
        };
        self.write_json(&self.manifest_path(id), &manifest)?;
        let files = scanned.tree.files() as u64;
        index.next += 1;
        index.points.push(Point {
            id,
            turn_id: turn_id.to_string(),
            at,
            files,
            depth,
        });
        // Counted whole once (a fork's first checkpoint holds content it was given), then as content is linked.
        index.bytes = match index.points.len() {
            1 => self.objects.bytes(),
            _ => index.bytes + scanned.bytes_linked,
        };
        state.last = Some((id, Arc::new(scanned.tree)));
        let dropped = self.bound(state)?;
        self.save_index(state)?;
        Ok(Taken {
            files,
            bytes_new: scanned.bytes_new,
            dropped,
        })
    }

    /// Drops the oldest turns' checkpoints while the session holds more than its bound. The latest turn's are
    /// kept whatever they hold, so that the turn that just ran can always be undone.
    fn bound(&self, state: &mut State) -> Result<Vec<String>> {
        let mut dropped = Vec::new();
        loop {
            let index = state.index.get_or_insert_with(Index::default);
            let (Some(first), Some(last)) = (index.points.first(), index.points.last()) else {
                break;
            };
            if index.bytes <= self.max_bytes || first.turn_id == last.turn_id {
                break;
            }
            let oldest = first.turn_id.clone();
            let gone: Vec<u64> = index
                .points
                .iter()
                .take(index.points.len() - 1)
                .filter(|p| p.turn_id == oldest)
                .map(|p| p.id)
                .collect();
            // A later manifest built on a dropped one is made whole first.
            let mut trees = Vec::new();
            for p in &index.points {
                if !gone.contains(&p.id) {
                    trees.push((p.id, self.tree_of(p.id)?));
                }
            }
            for (id, tree) in &trees {
                let p = index.points.iter().find(|p| p.id == *id);
                if p.is_some_and(|p| p.depth > 0) {
                    let chain = self.chain(*id)?;
                    if chain.iter().any(|c| gone.contains(c)) {
                        self.write_json(&self.manifest_path(*id), &Manifest::whole(tree))?;
                        if let Some(p) = index.points.iter_mut().find(|p| p.id == *id) {
                            p.depth = 0;
                        }
                    }
                }
            }
            // Later depths may now overcount, which only makes a whole manifest come sooner.
            index.points.retain(|p| !gone.contains(&p.id));
            for id in &gone {
                let _ = std::fs::remove_file(self.manifest_path(*id));
            }
            let held: std::collections::HashSet<&str> =
                trees.iter().flat_map(|(_, t)| t.hashes()).collect();
            self.objects
                .release(|h| held.contains(h))
                .map_err(|e| CheckpointError::io("cannot drop checkpoints in", &self.dir, e))?;
            index.bytes = self.objects.bytes();
            dropped.push(oldest);
        }
        Ok(dropped)
    }

    fn manifest_path(&self, id: u64) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn write_json<T: Serialize>(&self, path: &Path, value: &T) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| CheckpointError::io("cannot create", &self.dir, e))?;
        let bytes = serde_json::to_vec(value).unwrap_or_default();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| CheckpointError::io("cannot write", path, e))
    }

    fn save_index(&self, state: &State) -> Result<()> {
        match &state.index {
            Some(index) => self.write_json(&self.dir.join("index.json"), index),
            None => Ok(()),
        }
    }

    fn load(&self, state: &mut State) -> Result<()> {
        if state.index.is_some() {
            return Ok(());
        }
        let path = self.dir.join("index.json");
        let index: Index = match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| CheckpointError::Damaged {
                path: path.clone(),
                message: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Index::default(),
            Err(e) => return Err(CheckpointError::io("cannot read", &path, e)),
        };
        if let Some(last) = index.points.last() {
            state.last = Some((last.id, Arc::new(self.tree_of(last.id)?)));
        }
        state.index = Some(index);
        Ok(())
    }

    fn read_manifest(&self, id: u64) -> Result<Manifest> {
        let path = self.manifest_path(id);
        let bytes =
            std::fs::read(&path).map_err(|e| CheckpointError::io("cannot read", &path, e))?;
        serde_json::from_slice(&bytes).map_err(|e| CheckpointError::Damaged {
            path,
            message: e.to_string(),
        })
    }

    /// The ids of the manifests that make checkpoint `id`, whole one first.
    fn chain(&self, id: u64) -> Result<Vec<u64>> {
        let mut chain = vec![id];
        let mut at = id;
        while let Some(base) = self.read_manifest(at)?.base {
            if chain.len() > MAX_CHAIN as usize * 4 {
                return Err(CheckpointError::Damaged {
                    path: self.manifest_path(id),
                    message: "its chain of changes does not end".into(),
                });
            }
            chain.push(base);
            at = base;
        }
        chain.reverse();
        Ok(chain)
    }

    fn tree_of(&self, id: u64) -> Result<Tree> {
        let mut tree = Tree::default();
        for link in self.chain(id)? {
            tree = self.read_manifest(link)?.apply(tree);
        }
        Ok(tree)
    }

    /// Whether this machine holds no checkpoint of the session.
    pub fn is_empty(&self) -> Result<bool> {
        let mut state = self.state();
        self.load(&mut state)?;
        Ok(state.index.as_ref().is_none_or(|i| i.points.is_empty()))
    }

    /// The checkpoints this machine holds, oldest first.
    pub fn points(&self) -> Result<Vec<Point>> {
        let mut state = self.state();
        self.load(&mut state)?;
        Ok(state
            .index
            .as_ref()
            .map(|i| i.points.clone())
            .unwrap_or_default())
    }

    /// The tree of `turn_id`'s checkpoint at `at`.
    fn tree_at(&self, state: &mut State, turn_id: &str, at: At) -> Result<Option<Tree>> {
        self.load(state)?;
        let Some(index) = state.index.as_ref() else {
            return Ok(None);
        };
        match index
            .points
            .iter()
            .rev()
            .find(|p| p.turn_id == turn_id && p.at == at)
        {
            Some(p) => self.tree_of(p.id).map(Some),
            None => Ok(None),
        }
    }

    /// Files and links that differ between the workspace `root` now and the latest checkpoint, without storing
    /// anything; empty when there is no checkpoint.
    pub fn changed_since_last(&self, root: &Path) -> Result<Vec<(RelPath, Change)>> {
        let mut state = self.state();
        self.load(&mut state)?;
        let Some((_, last)) = state.last.clone() else {
            return Ok(Vec::new());
        };
        let now = self.scan_now(&mut state, root)?;
        Ok(now.changes_since(&last))
    }

    fn scan_now(&self, state: &mut State, root: &Path) -> Result<Tree> {
        let prev = state.last.as_ref().map(|(_, t)| t.clone());
        let fd = crate::sandbox::host_dir::open_for_reading(root)?;
        scan::scan(fd, prev.as_deref(), &self.objects)
            .map(|s| s.tree)
            .map_err(|e| CheckpointError::io("cannot read", root, e))
    }

    /// Restores the workspace `root` to how it was before `turn_id`, as `rewind_id`'s work; refused when files
    /// changed outside the session since the latest checkpoint, unless `force`. Returns the paths it changed and
    /// the ones it could not restore.
    pub fn rewind(
        &self,
        root: &Path,
        turn_id: &str,
        rewind_id: &str,
        force: bool,
    ) -> Result<(Vec<(RelPath, Change)>, restore::Skipped)> {
        let mut state = self.state();
        let target = self
            .tree_at(&mut state, turn_id, At::Start)?
            .ok_or_else(|| {
                CheckpointError::Missing(
                    "no checkpoint of the workspace before that turn is on this machine".into(),
                )
            })?;
        let last = state.last.as_ref().map(|(_, t)| t.clone());
        let now = self.scan_now(&mut state, root)?;
        if !force {
            if let Some(last) = last {
                let outside = now.changes_since(&last);
                if !outside.is_empty() {
                    return Err(CheckpointError::ChangedOutside(
                        outside.iter().map(|(p, _)| p.display()).collect(),
                    ));
                }
            }
        }
        let changed = target.changes_since(&now);
        let fd = crate::sandbox::host_dir::open_for_reading(root)?;
        let skipped = restore::restore(fd, &now, &target, &self.objects)
            .map_err(|e| CheckpointError::io("cannot restore", root, e))?;
        self.take_locked(&mut state, root, rewind_id, At::Restored)?;
        Ok((changed, skipped))
    }

    /// Makes the empty directory `dest` hold the workspace as it was before `turn_id` (None: `root` now), with
    /// content linked into `into` (the new session's checkpoints).
    pub fn copy_to(
        &self,
        root: &Path,
        turn_id: Option<&str>,
        dest: &Path,
        into: &Checkpoints,
    ) -> Result<restore::Skipped> {
        let mut state = self.state();
        let tree = match turn_id {
            Some(t) => self.tree_at(&mut state, t, At::Start)?.ok_or_else(|| {
                CheckpointError::Missing(
                    "no checkpoint of the workspace before that turn is on this machine".into(),
                )
            })?,
            None => {
                let prev = state.last.as_ref().map(|(_, t)| t.clone());
                let fd = crate::sandbox::host_dir::open_for_reading(root)?;
                scan::scan(fd, prev.as_deref(), &into.objects)
                    .map_err(|e| CheckpointError::io("cannot read", root, e))?
                    .tree
            }
        };
        for hash in tree.hashes() {
            into.objects
                .adopt(&self.objects, hash)
                .map_err(|e| CheckpointError::io("cannot copy a checkpoint into", &into.dir, e))?;
        }
        let fd = crate::sandbox::host_dir::open_for_reading(dest)?;
        restore::restore(fd, &Tree::default(), &tree, &into.objects)
            .map_err(|e| CheckpointError::io("cannot copy the workspace into", dest, e))
    }

    /// What `turn_id` changed in the workspace, from its start checkpoint to its end one; None when either is not
    /// on this machine.
    pub fn turn_changes(&self, turn_id: &str) -> Result<Option<Vec<FileChange>>> {
        let mut state = self.state();
        let (Some(before), Some(after)) = (
            self.tree_at(&mut state, turn_id, At::Start)?,
            self.tree_at(&mut state, turn_id, At::End)?,
        ) else {
            return Ok(None);
        };
        Ok(Some(
            after
                .changes_since(&before)
                .into_iter()
                .map(|(path, change)| FileChange {
                    diff: self.diff(&path, before.0.get(&path), after.0.get(&path)),
                    path: path.display(),
                    change,
                })
                .collect(),
        ))
    }

    fn text(&self, entry: Option<&tree::Entry>) -> Option<String> {
        match entry.map(|e| &e.kind) {
            None => Some(String::new()),
            Some(tree::Kind::File { hash, size }) if *size <= MAX_DIFF_BYTES => {
                let bytes = std::fs::read(self.objects.path(hash)).ok()?;
                String::from_utf8(bytes).ok()
            }
            _ => None,
        }
    }

    fn diff(
        &self,
        path: &RelPath,
        before: Option<&tree::Entry>,
        after: Option<&tree::Entry>,
    ) -> Option<String> {
        let (old, new) = (self.text(before)?, self.text(after)?);
        let name = path.display();
        let side = |entry: Option<&tree::Entry>, prefix: &str| match entry {
            Some(_) => format!("{prefix}/{name}"),
            None => "/dev/null".to_string(),
        };
        let diff = similar::TextDiff::from_lines(&old, &new)
            .unified_diff()
            .header(&side(before, "a"), &side(after, "b"))
            .to_string();
        Some(diff)
    }

    /// Drops every checkpoint of the session, and the content no other session holds.
    pub fn forget(&self) {
        let mut state = self.state();
        let _ = self.objects.release(|_| false);
        let _ = std::fs::remove_dir_all(&self.dir);
        *state = State::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    struct Fixture {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        ws: PathBuf,
        cp: Checkpoints,
    }

    fn fixture(max_bytes: u64) -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(tmp.path()).unwrap();
        let ws = root.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let cp = Checkpoints::new(&root.join("session"), &root.join("pool"), max_bytes);
        Fixture {
            _tmp: tmp,
            root,
            ws,
            cp,
        }
    }

    /// The workspace as (path, what) pairs: file contents, link targets, directories.
    fn listing(dir: &Path) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = walkdir::WalkDir::new(dir)
            .min_depth(1)
            .into_iter()
            .flatten()
            .map(|e| {
                let rel = e.path().strip_prefix(dir).unwrap().display().to_string();
                let what = if e.path_is_symlink() {
                    format!("-> {}", std::fs::read_link(e.path()).unwrap().display())
                } else if e.file_type().is_dir() {
                    "dir".into()
                } else {
                    std::fs::read_to_string(e.path()).unwrap()
                };
                (rel, what)
            })
            .collect();
        out.sort();
        out
    }

    fn turn(f: &Fixture, id: &str, work: impl FnOnce(&Path)) {
        f.cp.start(&f.ws, id).unwrap();
        work(&f.ws);
        f.cp.expect_end();
        f.cp.end(&f.ws, id).unwrap();
    }

    #[test]
    fn a_rewind_to_a_turn_restores_exactly_the_tree_before_it() {
        let f = fixture(u64::MAX);
        std::fs::write(f.ws.join("keep.txt"), "same").unwrap();
        turn(&f, "t1", |ws| {
            std::fs::write(ws.join("a.txt"), "one\n").unwrap();
            std::fs::create_dir(ws.join("d")).unwrap();
            std::fs::write(ws.join("d/gone.txt"), "soon gone").unwrap();
        });
        let before_two = listing(&f.ws);
        turn(&f, "t2", |ws| {
            std::fs::write(ws.join("a.txt"), "two\n").unwrap();
            std::fs::remove_file(ws.join("d/gone.txt")).unwrap();
            std::fs::write(ws.join("new.txt"), "new").unwrap();
            symlink("a.txt", ws.join("link")).unwrap();
        });
        turn(&f, "t3", |ws| {
            std::fs::remove_dir_all(ws.join("d")).unwrap();
            std::fs::write(ws.join("d"), "a file where the directory was").unwrap();
        });
        let (changed, skipped) = f.cp.rewind(&f.ws, "t2", "r1", false).unwrap();
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(listing(&f.ws), before_two);
        assert!(!changed.is_empty());
        let diff = f.cp.turn_changes("t2").unwrap().unwrap();
        let paths: Vec<&str> = diff.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["a.txt", "d/gone.txt", "link", "new.txt"]);
        assert!(diff[0].diff.as_deref().unwrap().contains("-one\n+two"));
    }

    #[test]
    fn a_rewind_refuses_files_changed_outside_the_session_unless_forced() {
        let f = fixture(u64::MAX);
        turn(&f, "t1", |ws| {
            std::fs::write(ws.join("a.txt"), "agent").unwrap()
        });
        std::fs::write(f.ws.join("mine.txt"), "the user's").unwrap();
        match f.cp.rewind(&f.ws, "t1", "r1", false) {
            Err(CheckpointError::ChangedOutside(paths)) => assert_eq!(paths, ["mine.txt"]),
            other => panic!("{other:?}"),
        }
        assert!(
            f.ws.join("a.txt").exists(),
            "a refused rewind changes nothing"
        );
        f.cp.rewind(&f.ws, "t1", "r1", true).unwrap();
        assert!(listing(&f.ws).is_empty());
    }

    #[test]
    fn links_swapped_in_by_the_sandbox_are_replaced_never_followed() {
        let f = fixture(u64::MAX);
        let host = f.root.join("host");
        std::fs::create_dir_all(host.join("dir")).unwrap();
        std::fs::write(host.join("secret"), "host secret").unwrap();
        std::fs::write(host.join("dir/f.txt"), "host file").unwrap();
        std::fs::create_dir(f.ws.join("sub")).unwrap();
        std::fs::write(f.ws.join("sub/f.txt"), "workspace file").unwrap();
        std::fs::write(f.ws.join("victim.txt"), "workspace victim").unwrap();
        symlink(host.join("secret"), f.ws.join("peek")).unwrap();
        turn(&f, "t1", |ws| {
            // The sandbox swaps a file and a directory for links to host files.
            std::fs::remove_file(ws.join("victim.txt")).unwrap();
            symlink(host.join("secret"), ws.join("victim.txt")).unwrap();
            std::fs::remove_dir_all(ws.join("sub")).unwrap();
            symlink(host.join("dir"), ws.join("sub")).unwrap();
        });
        f.cp.rewind(&f.ws, "t1", "r1", false).unwrap();
        assert_eq!(
            std::fs::read_to_string(host.join("secret")).unwrap(),
            "host secret"
        );
        assert_eq!(
            std::fs::read_to_string(host.join("dir/f.txt")).unwrap(),
            "host file"
        );
        assert!(!f.ws.join("victim.txt").is_symlink());
        assert_eq!(
            std::fs::read_to_string(f.ws.join("victim.txt")).unwrap(),
            "workspace victim"
        );
        assert!(f.ws.join("sub").is_dir() && !f.ws.join("sub").is_symlink());
        assert_eq!(
            std::fs::read_to_string(f.ws.join("sub/f.txt")).unwrap(),
            "workspace file"
        );
        assert_eq!(
            std::fs::read_link(f.ws.join("peek")).unwrap(),
            host.join("secret")
        );
        // A link is kept as its target: the host file's content was never read into a checkpoint.
        let stored: Vec<String> = walkdir::WalkDir::new(f.root.join("pool"))
            .into_iter()
            .flatten()
            .filter(|e| e.file_type().is_file())
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect();
        assert!(!stored.iter().any(|c| c.contains("host")), "{stored:?}");
    }

    #[test]
    fn a_hard_link_is_kept_as_content_and_a_restore_does_not_write_through_it() {
        let f = fixture(u64::MAX);
        let host = f.root.join("host.txt");
        std::fs::write(&host, "host").unwrap();
        std::fs::write(f.ws.join("x.txt"), "workspace").unwrap();
        turn(&f, "t1", |ws| {
            std::fs::remove_file(ws.join("x.txt")).unwrap();
            std::fs::hard_link(&host, ws.join("x.txt")).unwrap();
        });
        f.cp.rewind(&f.ws, "t1", "r1", false).unwrap();
        assert_eq!(std::fs::read_to_string(&host).unwrap(), "host");
        assert_eq!(
            std::fs::read_to_string(f.ws.join("x.txt")).unwrap(),
            "workspace"
        );
    }

    #[test]
    fn past_the_bound_the_oldest_turns_go_with_content_nothing_else_holds() {
        let f = fixture(3000);
        // Each turn rewrites one file: its history grows by a thousand bytes a turn.
        for n in 1..=5u8 {
            turn(&f, &format!("t{n}"), |ws| {
                std::fs::write(ws.join("big"), vec![n; 1000]).unwrap();
            });
        }
        let turns: Vec<String> =
            f.cp.points()
                .unwrap()
                .iter()
                .map(|p| p.turn_id.clone())
                .collect();
        assert_eq!(turns, ["t4", "t4", "t5", "t5"]);
        assert_eq!(f.cp.objects.bytes(), 3000);
        assert_eq!(
            std::fs::read_dir(f.root.join("pool/objects"))
                .unwrap()
                .flatten()
                .filter(|e| e.path().is_dir() && e.file_name() != "tmp")
                .map(|d| std::fs::read_dir(d.path()).unwrap().count())
                .sum::<usize>(),
            3,
            "the pool dropped what no session holds"
        );
        assert!(matches!(
            f.cp.rewind(&f.ws, "t1", "r", false),
            Err(CheckpointError::Missing(_))
        ));
        // What is left still restores exactly.
        f.cp.rewind(&f.ws, "t5", "r", false).unwrap();
        assert_eq!(std::fs::read(f.ws.join("big")).unwrap(), vec![4; 1000]);
    }

    #[test]
    fn content_shared_by_two_sessions_is_stored_once_and_outlives_one_of_them() {
        let f = fixture(u64::MAX);
        let other = Checkpoints::new(&f.root.join("other"), &f.root.join("pool"), u64::MAX);
        std::fs::write(f.ws.join("same.txt"), "shared content").unwrap();
        f.cp.start(&f.ws, "a").unwrap();
        let again = other.start(&f.ws, "b").unwrap();
        assert_eq!(again.bytes_new, 0, "the pool had it");
        f.cp.forget();
        std::fs::write(f.ws.join("same.txt"), "changed").unwrap();
        other.rewind(&f.ws, "b", "r", true).unwrap();
        assert_eq!(
            std::fs::read_to_string(f.ws.join("same.txt")).unwrap(),
            "shared content"
        );
    }
}
