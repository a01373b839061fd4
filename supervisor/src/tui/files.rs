//! The project's files for the `@` picker: walked once with `ignore` (so `.gitignore`, `.ignore` and hidden files
//! are honoured, and `target/` or `node_modules/` never fill the list), matched as the user types with
//! `nucleo-matcher`, the matcher of the helix editor.

use std::path::Path;

use nucleo_matcher::pattern::{CaseMatching, Normalization, Pattern};
use nucleo_matcher::{Config, Matcher};

/// Files indexed at most; a bigger tree is cut (the walk takes long and the list is no use).
const MAX_FILES: usize = 50_000;

/// The project's files, relative to its root.
#[derive(Debug, Clone, Default)]
pub struct FileIndex {
    files: Vec<String>,
}

impl FileIndex {
    /// Walks `root`, honouring ignore files whether or not it is a git repository.
    pub fn scan(root: &Path) -> FileIndex {
        let walker = ignore::WalkBuilder::new(root)
            .require_git(false)
            .follow_links(false)
            .build();
        let mut files = Vec::new();
        for entry in walker.flatten() {
            if files.len() >= MAX_FILES {
                break;
            }
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            if let Ok(rel) = entry.path().strip_prefix(root) {
                files.push(rel.display().to_string());
            }
        }
        files.sort();
        FileIndex { files }
    }

    /// Up to `n` files matching `query` best first (all, in order, for an empty query).
    pub fn find(&self, query: &str, n: usize) -> Vec<String> {
        if query.is_empty() {
            return self.files.iter().take(n).cloned().collect();
        }
        let mut matcher = Matcher::new(Config::DEFAULT.match_paths());
        let pattern = Pattern::parse(query, CaseMatching::Smart, Normalization::Smart);
        pattern
            .match_list(self.files.iter(), &mut matcher)
            .into_iter()
            .take(n)
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// How many files were indexed.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no file was indexed.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ignored_build_output_is_not_offered_and_matches_come_best_first() {
        let dir = tempfile::TempDir::new().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src")).unwrap();
        std::fs::create_dir_all(root.join("target/debug")).unwrap();
        std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
        std::fs::write(root.join("src/main.rs"), "").unwrap();
        std::fs::write(root.join("src/lib.rs"), "").unwrap();
        std::fs::write(root.join("target/debug/main.rs"), "").unwrap();
        let index = FileIndex::scan(root);
        assert_eq!(index.len(), 2, "{:?}", index.find("", 10));
        assert_eq!(index.find("main", 5), vec!["src/main.rs".to_string()]);
    }
}
