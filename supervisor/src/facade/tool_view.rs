//! What a tool call is about, for protocols that show tool calls to a person: its kind, a one-line title and the
//! files it touches, from the tool's name and the model's arguments. Paths are the sandbox's; [`PathMap`] turns
//! them into the host paths a client knows.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The kinds editors and other clients group tool calls by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// Reads files or data.
    Read,
    /// Changes files.
    Edit,
    /// Runs a command.
    Execute,
    /// Looks for files or text.
    Search,
    /// Reaches the network.
    Fetch,
    /// Plans or reasons; touches nothing.
    Think,
    /// Anything else (an MCP server's tools).
    Other,
}

/// A file a call touches, as the sandbox names it, with a line when the call names one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Absolute path inside the sandbox.
    pub path: String,
    /// 1-based line.
    pub line: Option<u32>,
}

/// A tool call as a person reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolView {
    /// Its kind.
    pub kind: ToolKind,
    /// One line: `Read /workspace/src/main.rs`, the command, `Search TODO`.
    pub title: String,
    /// The files it reads or changes.
    pub locations: Vec<Location>,
}

/// Longest title kept; a command can be a script.
const MAX_TITLE: usize = 200;

/// The view of a call of `tool` with `args`, where relative paths are relative to `cwd` (the sandbox's).
pub fn view(tool: &str, args: &Value, cwd: &str) -> ToolView {
    let field = |name: &str| args.get(name).and_then(Value::as_str).unwrap_or("");
    let path = |name: &str| {
        let p = field(name);
        (!p.is_empty()).then(|| absolute(cwd, p))
    };
    let located = |p: Option<String>, line: Option<u32>| -> Vec<Location> {
        p.map(|path| Location { path, line }).into_iter().collect()
    };
    let (kind, title, locations) = match tool {
        "Read" => {
            let line = args
                .get("offset")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok());
            let p = path("file_path");
            (
                ToolKind::Read,
                format!("Read {}", p.clone().unwrap_or_default()),
                located(p, line),
            )
        }
        "Write" | "Edit" => {
            let p = path("file_path");
            (
                ToolKind::Edit,
                format!("{tool} {}", p.clone().unwrap_or_default()),
                located(p, None),
            )
        }
        "Bash" => (ToolKind::Execute, first_line(field("command")), Vec::new()),
        "Glob" => (
            ToolKind::Search,
            format!("Find {}", field("pattern")),
            located(path("path"), None),
        ),
        "Grep" => (
            ToolKind::Search,
            format!("Search {}", field("pattern")),
            located(path("path"), None),
        ),
        "Skill" => (
            ToolKind::Read,
            format!("Load skill {}", field("name")),
            Vec::new(),
        ),
        "UpdatePlan" => (ToolKind::Think, "Update the plan".to_string(), Vec::new()),
        "WebFetch" => (
            ToolKind::Fetch,
            format!("Fetch {}", field("url")),
            Vec::new(),
        ),
        other => match other.strip_prefix("mcp__").and_then(|r| r.split_once("__")) {
            Some((server, name)) => (ToolKind::Other, format!("{server}: {name}"), Vec::new()),
            None => (ToolKind::Other, other.to_string(), Vec::new()),
        },
    };
    ToolView {
        kind,
        title: clip(title.trim()),
        locations,
    }
}

fn absolute(cwd: &str, path: &str) -> String {
    if path.starts_with('/') {
        path.to_string()
    } else {
        Path::new(cwd).join(path).display().to_string()
    }
}

/// The first line of `text`, with `…` when more follow.
pub(crate) fn first_line(text: &str) -> String {
    let mut lines = text.trim().lines();
    let first = lines.next().unwrap_or("").to_string();
    if lines.next().is_some() {
        format!("{first} …")
    } else {
        first
    }
}

fn clip(text: &str) -> String {
    clip_at(text, MAX_TITLE)
}

/// `text` cut at `max` characters, with `…` when cut.
pub(crate) fn clip_at(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// Where the sandbox's workspace is on the host: `/workspace/src/a.rs` in the sandbox is `<host>/src/a.rs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathMap {
    /// The workspace as the sandbox sees it (the turn's `cwd`).
    pub sandbox: PathBuf,
    /// The same directory on the host.
    pub host: PathBuf,
}

impl PathMap {
    /// The host path of sandbox path `path`; paths outside the workspace (the sandbox's `/tmp`) stay as they are.
    pub fn to_host(&self, path: &str) -> PathBuf {
        let p = Path::new(path);
        // `..` could climb out of the workspace; such a path is shown as the sandbox named it.
        if p.components().any(|c| c == std::path::Component::ParentDir) {
            return p.to_path_buf();
        }
        match p.strip_prefix(&self.sandbox) {
            Ok(rest) => self.host.join(rest),
            Err(_) => p.to_path_buf(),
        }
    }
}

/// The old and new text of the hunks of a unified diff, for protocols that carry a change as two texts.
pub fn texts_of_diff(diff: &str) -> (String, String) {
    let (mut old, mut new) = (String::new(), String::new());
    for line in diff.lines() {
        if line.starts_with("---") || line.starts_with("+++") || line.starts_with('\\') {
            continue;
        }
        if line.starts_with("@@") {
            continue;
        }
        match line.split_at_checked(1) {
            Some(("+", rest)) => push_line(&mut new, rest),
            Some(("-", rest)) => push_line(&mut old, rest),
            Some((" ", rest)) => {
                push_line(&mut old, rest);
                push_line(&mut new, rest);
            }
            _ => {}
        }
    }
    (old, new)
}

fn push_line(text: &mut String, line: &str) {
    text.push_str(line);
    text.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn reads_edits_and_commands_get_their_kind_title_and_files() {
        let read = view(
            "Read",
            &json!({"file_path": "src/a.rs", "offset": 12}),
            "/workspace",
        );
        assert_eq!(read.kind, ToolKind::Read);
        assert_eq!(read.title, "Read /workspace/src/a.rs");
        assert_eq!(
            read.locations,
            vec![Location {
                path: "/workspace/src/a.rs".into(),
                line: Some(12)
            }]
        );
        assert_eq!(
            view("Edit", &json!({"file_path": "/workspace/b"}), "/workspace").kind,
            ToolKind::Edit
        );
        let bash = view("Bash", &json!({"command": "make\nmake test"}), "/workspace");
        assert_eq!(
            (bash.kind, bash.title.as_str()),
            (ToolKind::Execute, "make …")
        );
        assert_eq!(view("mcp__git__log", &json!({}), "/w").title, "git: log");
    }

    #[test]
    fn host_paths_are_given_only_for_paths_inside_the_workspace() {
        let map = PathMap {
            sandbox: "/workspace".into(),
            host: "/home/me/p".into(),
        };
        assert_eq!(
            map.to_host("/workspace/src/a.rs"),
            PathBuf::from("/home/me/p/src/a.rs")
        );
        assert_eq!(map.to_host("/tmp/x"), PathBuf::from("/tmp/x"));
        assert_eq!(
            map.to_host("/workspace/../etc/passwd"),
            PathBuf::from("/workspace/../etc/passwd")
        );
    }

    #[test]
    fn a_unified_diff_splits_into_old_and_new_text() {
        let diff = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n keep\n-old\n+new\n";
        assert_eq!(
            texts_of_diff(diff),
            ("keep\nold\n".to_string(), "keep\nnew\n".to_string())
        );
    }
}
