//! Which paths a checkpoint leaves out: what the project's ignore rules say is not the agent's work (build output,
//! dependencies, caches). Patterns are git's, matched by the `ignore` crate's gitignore matcher:
//! - in a git repository: the user's global excludes (`core.excludesFile`), the repository's `.git/info/exclude`,
//!   every `.gitignore` from the repository's root down (those above the workspace too), each applying to its own
//!   directory and below, the deepest deciding;
//! - outside one: [`DEFAULTS`] (`target/`, `node_modules/`, …);
//! - everywhere: `.serviceignore` files (same syntax, same scope as a `.gitignore`) and `checkpoint_ignore` in
//!   config.toml.
//!
//! Files inside the workspace are read as the scan reads everything there: through descriptors, never following a
//! link. A pattern decides by path, as `git status --ignored` does: a file git tracks although a pattern matches it
//! (added with `git add -f`) is left out too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

/// What is left out of a workspace that is not a git repository.
pub const DEFAULTS: &[&str] = &[
    "target/",
    "node_modules/",
    ".venv/",
    "venv/",
    "__pycache__/",
    "dist/",
    "build/",
    ".tox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".gradle/",
];

/// Names of the files whose patterns apply to their directory and below.
pub const FILES: &[&str] = &[".gitignore", ".serviceignore"];

/// Largest ignore file read; a larger one is not a list of patterns.
pub const MAX_FILE: u64 = 1024 * 1024;

/// One directory's rules, and the rules of the directories above it.
#[derive(Debug)]
struct Layer {
    matcher: Gitignore,
    parent: Option<Arc<Layer>>,
}

/// The rules in force in one directory of a scan: cheap to clone, shared by the directories below.
#[derive(Debug, Clone, Default)]
pub struct Ignores(Option<Arc<Layer>>);

impl Ignores {
    /// The rules at the root of the workspace whose host path is `root`: the repository's and the user's when it
    /// is in a git repository (else [`DEFAULTS`]), and `extra` (config.toml's patterns). The workspace's own
    /// `.gitignore` and `.serviceignore` are added as the scan reads its root, with [`Self::with`].
    /// A workspace of the session's own (under the store) is not taken for part of a repository above it: only a
    /// `.git` in the workspace itself makes it one (`search_up` false).
    pub fn at_root(root: &Path, extra: &[String], search_up: bool) -> Ignores {
        let mut rules = Ignores::default();
        let mut base = GitignoreBuilder::new(root);
        for pattern in extra {
            let _ = base.add_line(None, pattern);
        }
        let repository = match search_up {
            true => repository_of(root),
            false => root.join(".git").exists().then(|| root.to_path_buf()),
        };
        match repository {
            Some(repo) => {
                if let Some(global) = global_excludes() {
                    rules = rules.with_user_file(&repo, global);
                }
                rules = rules.with_text(&repo, read_no_links(&repo.join(".git/info"), "exclude"));
                // The `.gitignore` files between the repository's root and the workspace apply to it as well.
                let mut dir = repo.clone();
                for part in root
                    .strip_prefix(&repo)
                    .into_iter()
                    .flat_map(Path::components)
                {
                    rules = rules.with_text(&dir, read_no_links(&dir, ".gitignore"));
                    dir.push(part);
                }
            }
            None => {
                for pattern in DEFAULTS {
                    let _ = base.add_line(None, pattern);
                }
            }
        }
        rules.push(base.build().ok())
    }

    /// These rules with a directory's ignore files added: `texts` are their contents, `dir` the directory's host
    /// path.
    pub fn with(&self, dir: &Path, texts: &[String]) -> Ignores {
        let mut builder = GitignoreBuilder::new(dir);
        for text in texts {
            for line in text.lines() {
                let _ = builder.add_line(None, line);
            }
        }
        self.push(builder.build().ok())
    }

    /// Whether `path` (a host path under the workspace) is left out.
    pub fn ignored(&self, path: &Path, is_dir: bool) -> bool {
        let mut layer = self.0.as_deref();
        while let Some(l) = layer {
            match l.matcher.matched(path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => layer = l.parent.as_deref(),
            }
        }
        false
    }

    /// Whether no rule is in force.
    pub fn is_empty(&self) -> bool {
        self.0.is_none()
    }

    fn with_text(&self, dir: &Path, text: Option<String>) -> Ignores {
        match text {
            Some(text) => self.with(dir, &[text]),
            None => self.clone(),
        }
    }

    /// The user's own file (their global excludes, which a dotfiles manager may well link): read as they name it.
    fn with_user_file(&self, dir: &Path, file: &Path) -> Ignores {
        let small = std::fs::metadata(file).is_ok_and(|m| m.is_file() && m.len() <= MAX_FILE);
        self.with_text(
            dir,
            small.then(|| std::fs::read_to_string(file).ok()).flatten(),
        )
    }

    fn push(&self, matcher: Option<Gitignore>) -> Ignores {
        match matcher.filter(|m| !m.is_empty()) {
            Some(matcher) => Ignores(Some(Arc::new(Layer {
                matcher,
                parent: self.0.clone(),
            }))),
            None => self.clone(),
        }
    }
}

/// The text of the small regular file `name` in the directory `dir`, reached without following a link anywhere on the
/// way: `.git/info/exclude` and a `.gitignore` may be in the workspace, where code in the sandbox could make them
/// links to host files or fifos.
fn read_no_links(dir: &Path, name: &str) -> Option<String> {
    crate::sandbox::host_dir::read_small_file(dir, name, MAX_FILE)
}

/// The user's global excludes file (git's `core.excludesFile`), looked up once: it is in git's config files, which
/// a checkpoint, taken twice a turn, need not read again.
fn global_excludes() -> Option<&'static Path> {
    static PATH: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    PATH.get_or_init(ignore::gitignore::gitconfig_excludes_path)
        .as_deref()
}

/// The root of the git repository `dir` is in (the directory holding `.git`), if any.
fn repository_of(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|a| a.join(".git").exists())
        .map(Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repositorys_patterns_apply_below_their_directory_and_the_deepest_decides() {
        let dir = tempfile::TempDir::new().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join(".git/info")).unwrap();
        std::fs::write(root.join(".git/info/exclude"), "*.local\n").unwrap();
        let rules = Ignores::at_root(root, &["*.tmp".into()], true)
            .with(root, &["target/\n*.log\n".into()]);
        let sub = rules.with(&root.join("logs"), &["!keep.log\n".into()]);
        assert!(rules.ignored(&root.join("target"), true));
        assert!(
            !rules.ignored(&root.join("target"), false),
            "target/ names a directory"
        );
        assert!(rules.ignored(&root.join("a.log"), false));
        assert!(rules.ignored(&root.join("x.local"), false));
        assert!(rules.ignored(&root.join("x.tmp"), false));
        assert!(!sub.ignored(&root.join("logs/keep.log"), false));
        assert!(sub.ignored(&root.join("logs/other.log"), false));
        assert!(
            !rules.ignored(&root.join("node_modules"), true),
            "no defaults in a repository"
        );
    }

    #[test]
    fn outside_a_repository_build_and_dependency_directories_are_left_out() {
        let dir = tempfile::TempDir::new().unwrap();
        let rules = Ignores::at_root(dir.path(), &[], true);
        assert!(rules.ignored(&dir.path().join("node_modules"), true));
        assert!(rules.ignored(&dir.path().join("pkg/target"), true));
        assert!(!rules.ignored(&dir.path().join("src"), true));
    }
}
