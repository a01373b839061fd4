//! What a turn changed: its start and end checkpoints compared, with unified diffs of text files.

use serde::Serialize;

use super::tree::{self, RelPath};
use super::{At, Checkpoints, Result};

/// One changed path of a turn, with its unified diff when both sides are text.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct FileChange {
    /// Path in the workspace.
    pub path: String,
    /// Added, modified or removed.
    pub change: tree::Change,
    /// `---`/`+++` unified diff; none for binary or large content, or a link.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// Set when the turn's end checkpoint did not keep the file, as its size (`st_size`) would have taken the
    /// session past `checkpoint_max_mb`: a rewind cannot bring this version back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_bytes: Option<u64>,
    /// Set for a path the project's ignore rules leave out (build output, dependencies): the turn changed it, the
    /// checkpoints hold no content of it, and a rewind leaves it as it is.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_checkpointed: bool,
}

/// Content larger than this is not diffed.
const MAX_DIFF_BYTES: u64 = 1024 * 1024;

impl Checkpoints {
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
                    skipped_bytes: after.0.get(&path).and_then(|e| match e.kind {
                        tree::Kind::Skipped { size } => Some(size),
                        _ => None,
                    }),
                    not_checkpointed: after.is_ignored(&path) || before.is_ignored(&path),
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
}
