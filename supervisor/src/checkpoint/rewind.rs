//! Going back: a rewind restores a workspace to a checkpoint, a fork copies one into a new session's directory.

use std::path::Path;

use super::tree::{Change, RelPath, Tree};
use super::{past_bound, restore, rules_for, scan, At, CheckpointError, Checkpoints, Result};

impl Checkpoints {
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
                // A build between turns changes ignored paths; a rewind leaves them alone anyway.
                let outside: Vec<_> = now
                    .changes_since(&last)
                    .into_iter()
                    .filter(|(p, _)| !now.is_ignored(p) && !last.is_ignored(p))
                    .collect();
                if !outside.is_empty() {
                    return Err(CheckpointError::ChangedOutside(
                        outside.iter().map(|(p, _)| p.display()).collect(),
                    ));
                }
            }
        }
        let passed_over: Vec<String> = target
            .skipped()
            .map(|(path, size)| format!("{} ({size} bytes)", path.display()))
            .collect();
        if !passed_over.is_empty() && !force {
            return Err(CheckpointError::Incomplete(passed_over));
        }
        // Ignored paths are left as they are: said, not counted as restored.
        let (unkept, changed): (Vec<_>, Vec<_>) = target
            .changes_since(&now)
            .into_iter()
            .partition(|(p, _)| (now.is_ignored(p) || target.is_ignored(p)) && !target.is_file(p));
        let fd = crate::sandbox::host_dir::open_for_reading(root)?;
        let mut skipped = restore::restore(fd, &now, &target, &self.objects)
            .map_err(|e| CheckpointError::io("cannot restore", root, e))?;
        skipped.extend(unkept.into_iter().map(|(p, _)| {
            (
                p,
                "changed, not checkpointed: the project's ignore rules leave it out, and a rewind leaves it as it is"
                    .to_string(),
            )
        }));
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
                let rules = rules_for(root, &self.ignore, self.dir.parent());
                scan::scan(
                    fd,
                    prev.as_deref(),
                    &into.objects,
                    into.max_bytes,
                    root,
                    rules,
                )
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
        let mut skipped = restore::restore(fd, &Tree::default(), &tree, &into.objects)
            .map_err(|e| CheckpointError::io("cannot copy the workspace into", dest, e))?;
        skipped.extend(
            tree.skipped()
                .map(|(path, size)| (path.clone(), past_bound(size))),
        );
        Ok(skipped)
    }
}
