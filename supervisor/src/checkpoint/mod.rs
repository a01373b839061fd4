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
//! - What the project's ignore rules leave out (`.gitignore`, `.serviceignore`, build directories outside a
//!   repository; [`ignores`]) is neither read nor stored: each such path is kept by its own stat, reported as
//!   "changed, not checkpointed" when that changes, and never touched by a restore.
//! - Past the session's bound, the oldest checkpoints go, and their content with them when nothing else holds it.
//!
//! Layout: `sessions/<id>/checkpoints/{index.jsonl, <n>.manifest, objects/<sha256>}` ([`index`]), the objects hard
//! links into `$SERVICE_HOME/checkpoints/objects/`. A checkpoint of a workspace unchanged since the previous one
//! has no manifest: its line in the index names the checkpoint whose manifest it shares (`same_as`).

mod diff;
pub mod ignores;
mod index;
mod rewind;
pub use diff::FileChange;
pub mod objects;
pub mod restore;
pub mod scan;
pub mod tree;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};

use serde::{Deserialize, Serialize};

use index::Index;
use objects::Objects;
use tree::{Change, Manifest, RelPath, Tree};

/// A manifest is whole again after this many changes-only ones, so reading one never walks a long chain.
const MAX_CHAIN: u32 = 64;

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
    /// The checkpoint to go back to passed over files that did not fit in the session's bound.
    #[error(
        "the checkpoint before that turn does not hold {}: they did not fit in checkpoint_max_mb when it was taken; \
         raise checkpoint_max_mb in config.toml for later turns, or rewind with --force (\"force\": true) to \
         restore everything else and leave those files as they are",
        list(.0)
    )]
    Incomplete(Vec<String>),
    /// A stored manifest does not parse.
    #[error("checkpoint {path} is damaged: {message}")]
    Damaged {
        /// The manifest.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Why a restore left a file passed over for the bound as it was.
fn past_bound(size: u64) -> String {
    format!(
        "not copied: its {size} bytes did not fit in checkpoint_max_mb when it was checkpointed"
    )
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
    /// The checkpoint whose manifest holds this one's tree, when the workspace had not changed since: it has no
    /// manifest of its own. Most turns start as the previous one ended, and a turn that writes nothing ends as it
    /// started; a file per such checkpoint cost a new inode each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    same_as: Option<u64>,
    /// Turns whose checkpoints were dropped when this one was taken.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    dropped: Vec<String>,
}

impl Point {
    /// The checkpoint whose manifest holds its tree.
    fn stored(&self) -> u64 {
        self.same_as.unwrap_or(self.id)
    }
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
    /// Files not kept because they would have taken the session past its bound, with their sizes.
    pub skipped: Vec<(RelPath, u64)>,
}

/// One session's checkpoints.
pub struct Checkpoints {
    dir: PathBuf,
    objects: Objects,
    max_bytes: u64,
    state: Mutex<State>,
    /// End checkpoints promised (a turn ended, its checkpoint is being taken): everything else waits for them.
    ending: (Mutex<usize>, Condvar),
    /// The turn whose start checkpoint was begun and whose end is not: set before the start's scan, so that a turn
    /// ending meanwhile promises its end checkpoint without waiting for the scan.
    open_turn: Mutex<Option<String>>,
    /// Patterns left out besides the project's own (config.toml's `checkpoint_ignore`).
    ignore: Vec<String>,
}

#[derive(Default)]
struct State {
    index: Option<Index>,
    /// The latest checkpoint's tree, which the next scan trusts.
    last: Option<(u64, Arc<Tree>)>,
}

/// Paths a scan of `root` leaves out, with `extra` patterns (config.toml's `checkpoint_ignore`); `session_dir` is the
/// session's own directory, whose workspace belongs to no repository above it.
fn rules_for(root: &Path, extra: &[String], session_dir: Option<&Path>) -> ignores::Ignores {
    let own = session_dir.is_some_and(|d| root.starts_with(d));
    ignores::Ignores::at_root(root, extra, !own)
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
            open_turn: Mutex::new(None),
            ignore: Vec::new(),
        }
    }

    /// These checkpoints also leave out what `patterns` (gitignore syntax) match.
    pub fn ignoring(mut self, patterns: Vec<String>) -> Checkpoints {
        self.ignore = patterns;
        self
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
        let open = self.open_turn.lock().unwrap_or_else(|p| p.into_inner());
        open.as_deref() == Some(turn_id)
    }

    /// Promises the end checkpoint of a turn: every other operation waits until [`Self::end`] has run.
    pub fn expect_end(&self) {
        *self.ending.0.lock().unwrap_or_else(|p| p.into_inner()) += 1;
    }

    /// Takes the promised end checkpoint of `turn_id` of the workspace `root`.
    pub fn end(&self, root: &Path, turn_id: &str) -> Result<Taken> {
        let taken = {
            *self.open_turn.lock().unwrap_or_else(|p| p.into_inner()) = None;
            let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
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
        *self.open_turn.lock().unwrap_or_else(|p| p.into_inner()) = Some(turn_id.to_string());
        // An end checkpoint is taken after its turn's events: what it dropped is told with the next start.
        let at_end = match self.load(&mut state) {
            Ok(()) => state
                .index
                .as_ref()
                .and_then(|i| i.points.last())
                .filter(|p| p.at == At::End)
                .map(|p| p.dropped.clone())
                .unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let mut taken = self.take_locked(&mut state, root, turn_id, At::Start);
        match &mut taken {
            Ok(taken) => {
                let mut all = at_end;
                all.append(&mut taken.dropped);
                taken.dropped = all;
            }
            Err(_) => *self.open_turn.lock().unwrap_or_else(|p| p.into_inner()) = None,
        }
        taken
    }

    fn take_locked(&self, state: &mut State, root: &Path, turn_id: &str, at: At) -> Result<Taken> {
        self.load(state)?;
        let prev = state.last.clone();
        let fd = crate::sandbox::host_dir::open_for_reading(root)?;
        let budget = self.budget(prev.as_ref().map(|(_, t)| &**t));
        let rules = rules_for(root, &self.ignore, self.dir.parent());
        let scanned = scan::scan(
            fd,
            prev.as_ref().map(|(_, t)| &**t),
            &self.objects,
            budget,
            root,
            rules,
        )
        .map_err(|e| CheckpointError::io("cannot checkpoint", root, e))?;
        let index = state.index.get_or_insert_with(Index::default);
        let id = index.next;
        let find = |id: u64| index.points.iter().find(|p| p.id == id);
        let base = prev
            .as_ref()
            .and_then(|(pid, t)| find(find(*pid)?.stored()).map(|p| (p, t)));
        let delta = base.map(|(p, t)| (p, Manifest::delta(&scanned.tree, t, p.id)));
        let (manifest, depth, same_as) = match delta {
            Some((p, d)) if d.set.is_empty() && d.del.is_empty() => (None, p.depth, Some(p.id)),
            Some((p, d)) if p.depth < MAX_CHAIN => (Some(d), p.depth + 1, None),
            _ => (Some(Manifest::whole(&scanned.tree)), 0, None),
        };
        if let Some(manifest) = manifest {
            self.write(&self.manifest_path(id), &manifest.to_bytes())?;
        }
        let files = scanned.tree.files() as u64;
        index.next += 1;
        index.points.push(Point {
            id,
            turn_id: turn_id.to_string(),
            at,
            files,
            depth,
            same_as,
            dropped: Vec::new(),
        });
        // Counted whole once (a fork's first checkpoint holds content it was given), then as content is linked.
        index.bytes = match index.points.len() {
            1 => self.objects.bytes(),
            _ => index.bytes + scanned.bytes_linked,
        };
        state.last = Some((id, Arc::new(scanned.tree)));
        let dropped = self.bound(state)?;
        if let Some(point) = state.index.as_mut().and_then(|i| i.points.last_mut()) {
            point.dropped = dropped.clone();
        }
        if let Some(index) = &state.index {
            match dropped.is_empty() {
                true => index::append(&self.dir, index)?,
                false => index::rewrite(&self.dir, index)?,
            }
        }
        Ok(Taken {
            files,
            bytes_new: scanned.bytes_new,
            dropped,
            skipped: scanned.skipped,
        })
    }

    /// Bytes a scan after `prev` may store: the bound less what `prev` holds, which the new checkpoint shares. So
    /// the latest turn's checkpoints, which [`Self::bound`] always keeps, hold at most the bound between them.
    fn budget(&self, prev: Option<&Tree>) -> u64 {
        self.max_bytes
            .saturating_sub(prev.map_or(0, Tree::content_bytes))
    }

    /// Drops the oldest turns' checkpoints while the session holds more than its bound. The latest turn's are
    /// kept whatever they hold, so that the turn that just ran can always be undone; [`Self::budget`] keeps them
    /// within the bound.
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
                    trees.push((p.id, self.tree_of(p.stored())?));
                }
            }
            for (id, tree) in &trees {
                let Some(p) = index.points.iter().find(|p| p.id == *id) else {
                    continue;
                };
                // A checkpoint that shares a dropped one's manifest, or whose chain runs through one, gets its own.
                let orphaned = match p.same_as {
                    Some(stored) => gone.contains(&stored),
                    None => p.depth > 0 && self.chain(*id)?.iter().any(|c| gone.contains(c)),
                };
                if orphaned {
                    self.write(&self.manifest_path(*id), &Manifest::whole(tree).to_bytes())?;
                    if let Some(p) = index.points.iter_mut().find(|p| p.id == *id) {
                        p.depth = 0;
                        p.same_as = None;
                    }
                }
            }
            // Later depths may now overcount, which only makes a whole manifest come sooner.
            index.points.retain(|p| !gone.contains(&p.id));
            for id in &gone {
                let _ = std::fs::remove_file(self.manifest_path(*id));
            }
            let held: std::collections::HashSet<&tree::Digest> =
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
        self.dir.join(format!("{id}.manifest"))
    }

    fn write(&self, path: &Path, bytes: &[u8]) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| CheckpointError::io("cannot create", &self.dir, e))?;
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|e| CheckpointError::io("cannot write", path, e))
    }

    fn load(&self, state: &mut State) -> Result<()> {
        if state.index.is_some() {
            return Ok(());
        }
        let index = index::load(&self.dir)?;
        if let Some(last) = index.points.last() {
            state.last = Some((last.id, Arc::new(self.tree_of(last.stored())?)));
        }
        state.index = Some(index);
        Ok(())
    }

    fn read_manifest(&self, id: u64) -> Result<Manifest> {
        let path = self.manifest_path(id);
        let bytes =
            std::fs::read(&path).map_err(|e| CheckpointError::io("cannot read", &path, e))?;
        Manifest::from_bytes(&bytes).map_err(|message| CheckpointError::Damaged { path, message })
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
            Some(p) => self.tree_of(p.stored()).map(Some),
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
        let budget = self.budget(prev.as_deref());
        let rules = rules_for(root, &self.ignore, self.dir.parent());
        scan::scan(fd, prev.as_deref(), &self.objects, budget, root, rules)
            .map(|s| s.tree)
            .map_err(|e| CheckpointError::io("cannot read", root, e))
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
mod tests;
