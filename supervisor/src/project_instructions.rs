//! Project instructions: `AGENTS.md` (or `CLAUDE.md`) and `.service/instructions.md`, read from a session's
//! workspace up to its repository's root and added to the system prompt after the bundle's own.
//!
//! Which directories: the workspace and each parent up to the nearest one holding `.git` (a directory, or the file
//! of a worktree). Without a repository, the workspace alone. The walk never rises above a `ceiling` (a server's
//! `--workspace-root`): a repository above it is not the client's to read. Outermost first, so that the
//! instructions nearest the work come last. In each directory, `AGENTS.md`, else `CLAUDE.md` (usually the same text
//! for another tool), and `.service/instructions.md` besides.
//!
//! The files may have been written by a sandbox (a writable workspace), and the supervisor may be root, so each is
//! opened beneath the walk's top directory (`openat2` with `RESOLVE_BENEATH`): a link may point to another file of
//! the project but not out of it. Only regular files with one link are read (a hard link could name a file the
//! sandbox cannot read), without blocking (a fifo), and at most [`MAX_FILE`] bytes of each.

use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::fcntl::{OFlag, OpenHow, ResolveFlag};

/// Bytes read of one instruction file; the rest is left out, and the prompt says so.
pub const MAX_FILE: usize = 32 * 1024;
/// Bytes read of all of them together.
pub const MAX_TOTAL: usize = 64 * 1024;

/// The files read in each directory: the first present of each group.
const NAMES: &[&[&str]] = &[&["AGENTS.md", "CLAUDE.md"], &[".service/instructions.md"]];

/// One instruction file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstructionFile {
    /// Where it is on the host.
    pub path: PathBuf,
    /// Its path from the top of the walk (the repository root, or the workspace), as the prompt names it.
    pub shown: String,
    /// Its text, cut at [`MAX_FILE`] bytes or what was left of [`MAX_TOTAL`].
    pub text: String,
    /// Whether the text was cut.
    pub truncated: bool,
}

/// The project instructions of a workspace, in the order they are given to the model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProjectInstructions {
    /// The files read, outermost first.
    pub files: Vec<InstructionFile>,
}

impl ProjectInstructions {
    /// The instructions for a session working in `workspace` (a canonical host path), never read above a directory
    /// of `ceilings`. A file that cannot be read is left out, with a log line.
    pub fn read(workspace: &Path, ceilings: &[PathBuf]) -> ProjectInstructions {
        let dirs = walk(workspace, ceilings);
        let Some(top) = dirs.first() else {
            return ProjectInstructions::default();
        };
        let top_fd = match crate::sandbox::host_dir::open_no_links(top) {
            Ok(fd) => fd,
            Err(e) => {
                tracing::warn!(dir = %top.display(), "project instructions not read: {e}");
                return ProjectInstructions::default();
            }
        };
        let mut files = Vec::new();
        let mut budget = MAX_TOTAL;
        for dir in &dirs {
            let rel = dir.strip_prefix(top).unwrap_or(Path::new(""));
            for group in NAMES {
                for name in *group {
                    let rel_file = rel.join(name);
                    match read_beneath(&top_fd, &rel_file, MAX_FILE.min(budget)) {
                        Ok(Some((text, truncated))) => {
                            budget = budget.saturating_sub(text.len());
                            files.push(InstructionFile {
                                path: top.join(&rel_file),
                                shown: rel_file.display().to_string(),
                                text,
                                truncated,
                            });
                            break;
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::warn!(file = %top.join(&rel_file).display(), "project instructions not read: {e}");
                            break;
                        }
                    }
                }
            }
        }
        ProjectInstructions { files }
    }

    /// The instructions for a session of `bundle` in `workspace`: none when its `agent.yaml` turns them off
    /// (`project_instructions: false`).
    pub fn of_bundle(
        bundle: &crate::bundle::Bundle,
        workspace: &Path,
        ceilings: &[PathBuf],
    ) -> ProjectInstructions {
        if bundle.agent.project_instructions {
            Self::read(workspace, ceilings)
        } else {
            ProjectInstructions::default()
        }
    }

    /// The host paths of the files read, for `turn_started`, `inspect` and `doctor`.
    pub fn paths(&self) -> Vec<String> {
        self.files
            .iter()
            .map(|f| f.path.display().to_string())
            .collect()
    }

    /// `bundle_prompt` followed by these instructions.
    pub fn system_prompt(&self, bundle_prompt: &str) -> String {
        if self.files.is_empty() {
            return bundle_prompt.to_string();
        }
        let mut out = bundle_prompt.trim_end().to_string();
        out.push_str(
            "\n\n# Project instructions\n\nThe project you work in gives these instructions, from files in it. \
             Follow them where they do not conflict with the instructions above.\n",
        );
        for file in &self.files {
            out.push_str(&format!(
                "\n## {}\n\n{}\n",
                file.shown,
                file.text.trim_end()
            ));
            if file.truncated {
                out.push_str("\n[the rest of this file was left out: it is too long]\n");
            }
        }
        out
    }
}

/// The directories whose instructions apply to `workspace`, outermost first.
fn walk(workspace: &Path, ceilings: &[PathBuf]) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for dir in workspace.ancestors() {
        dirs.push(dir.to_path_buf());
        if dir.join(".git").symlink_metadata().is_ok() {
            dirs.reverse();
            return dirs;
        }
        if ceilings.iter().any(|c| c == dir) {
            break;
        }
    }
    // No repository within reach: the workspace alone.
    vec![workspace.to_path_buf()]
}

/// The text of `rel` beneath `top`, at most `limit` bytes of it and whether it was cut; None when it is absent.
fn read_beneath(top: &OwnedFd, rel: &Path, limit: usize) -> Result<Option<(String, bool)>, String> {
    let how = OpenHow::new()
        .flags(OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = match nix::fcntl::openat2(top, rel, how) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR) => return Ok(None),
        Err(nix::errno::Errno::EXDEV) => return Err("it links out of the project".into()),
        Err(e) => return Err(e.to_string()),
    };
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if std::os::unix::fs::MetadataExt::nlink(&meta) > 1 {
        return Err("it has more than one hard link".into());
    }
    let mut bytes = Vec::new();
    file.take(limit as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    let truncated = bytes.len() > limit;
    bytes.truncate(limit);
    let mut text = String::from_utf8_lossy(&bytes).into_owned();
    if truncated {
        // Cut at a line, not inside a word or a character.
        if let Some(end) = text.rfind('\n') {
            text.truncate(end);
        }
    }
    Ok(Some((text, truncated)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn reads_from_the_repository_root_down_to_the_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().canonicalize().unwrap().join("repo");
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        write(&tmp.path().join("AGENTS.md"), "above the repository");
        write(&repo.join("AGENTS.md"), "root rules");
        write(&repo.join("CLAUDE.md"), "the same for another tool");
        write(&repo.join("sub/CLAUDE.md"), "sub rules");
        write(&repo.join("sub/.service/instructions.md"), "service rules");
        let read = ProjectInstructions::read(&repo.join("sub"), &[]);
        let shown: Vec<&str> = read.files.iter().map(|f| f.shown.as_str()).collect();
        assert_eq!(
            shown,
            ["AGENTS.md", "sub/CLAUDE.md", "sub/.service/instructions.md"]
        );
        let prompt = read.system_prompt("bundle rules");
        assert!(prompt.starts_with("bundle rules\n\n# Project instructions"));
        assert!(prompt.find("root rules").unwrap() < prompt.find("service rules").unwrap());
        assert!(!prompt.contains("above the repository"));
    }

    #[test]
    fn without_a_repository_only_the_workspace_is_read() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        write(&root.join("AGENTS.md"), "parent");
        write(&root.join("w/AGENTS.md"), "workspace");
        let read = ProjectInstructions::read(&root.join("w"), &[]);
        assert_eq!(read.files.len(), 1);
        assert_eq!(read.files[0].text, "workspace");
    }

    #[test]
    fn a_ceiling_keeps_a_repository_above_it_out() {
        let tmp = tempfile::tempdir().unwrap();
        let repo = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(repo.join(".git")).unwrap();
        write(&repo.join("AGENTS.md"), "the host's repository");
        write(&repo.join("roots/c/AGENTS.md"), "client");
        let read = ProjectInstructions::read(&repo.join("roots/c"), &[repo.join("roots")]);
        assert_eq!(
            read.paths(),
            [repo.join("roots/c/AGENTS.md").display().to_string()]
        );
    }

    #[test]
    fn links_out_of_the_project_hard_links_and_fifos_are_not_read() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        write(&root.join("secret"), "secret");
        write(&root.join("a/notes.md"), "inside");
        std::os::unix::fs::symlink(root.join("secret"), root.join("a/AGENTS.md")).unwrap();
        assert!(ProjectInstructions::read(&root.join("a"), &[])
            .files
            .is_empty());
        std::fs::remove_file(root.join("a/AGENTS.md")).unwrap();
        std::os::unix::fs::symlink("notes.md", root.join("a/AGENTS.md")).unwrap();
        assert_eq!(
            ProjectInstructions::read(&root.join("a"), &[]).files[0].text,
            "inside"
        );
        std::fs::remove_file(root.join("a/AGENTS.md")).unwrap();
        std::fs::hard_link(root.join("secret"), root.join("a/AGENTS.md")).unwrap();
        assert!(ProjectInstructions::read(&root.join("a"), &[])
            .files
            .is_empty());
        std::fs::remove_file(root.join("a/AGENTS.md")).unwrap();
        nix::unistd::mkfifo(&root.join("a/AGENTS.md"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(ProjectInstructions::read(&root.join("a"), &[])
            .files
            .is_empty());
    }

    #[test]
    fn a_long_file_is_cut_at_a_line_and_said_so() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        write(&root.join("AGENTS.md"), &"a line of text\n".repeat(5000));
        let read = ProjectInstructions::read(&root, &[]);
        assert!(read.files[0].truncated);
        assert!(read.files[0].text.len() <= MAX_FILE);
        assert!(read.files[0].text.ends_with("a line of text"));
        assert!(read.system_prompt("").contains("was left out"));
    }
}
