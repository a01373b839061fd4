//! Read, Write and Edit.

use std::io::Read as _;

use serde::Deserialize;

use super::{resolve, ToolCtx, ToolResult};

/// Largest file Read loads.
const READ_MAX_BYTES: u64 = 10 * 1024 * 1024;
/// Lines returned when no limit is given.
const DEFAULT_LINES: usize = 2000;
/// Longest line returned; longer ones are cut.
const MAX_LINE_CHARS: usize = 2000;
/// Largest text returned to the model.
const READ_MAX_OUTPUT: usize = 256 * 1024;

#[derive(Deserialize)]
pub struct ReadArgs {
    file_path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

#[derive(Deserialize)]
pub struct WriteArgs {
    file_path: String,
    content: String,
}

#[derive(Deserialize)]
pub struct EditArgs {
    file_path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

/// Numbered lines of a text file, `cat -n` style.
pub fn read(args: ReadArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    let path = resolve(ctx.cwd, &args.file_path);
    let text = match read_text(&path) {
        Ok(t) => t,
        Err(e) => return ToolResult::error(e),
    };
    let first = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_LINES).max(1);
    let total = text.lines().count();
    let mut out = String::new();
    for (i, line) in text.lines().enumerate().skip(first - 1).take(limit) {
        let cut: String = line.chars().take(MAX_LINE_CHARS).collect();
        out.push_str(&format!("{:>6}\t{cut}\n", i + 1));
        if out.len() > READ_MAX_OUTPUT {
            out.push_str(&format!(
                "[output cut at {READ_MAX_OUTPUT} bytes; read further with offset]\n"
            ));
            return ToolResult::ok(out);
        }
    }
    let last = (first - 1 + limit).min(total);
    if total == 0 {
        return ToolResult::ok(format!("{} is empty", path.display()));
    }
    if first > total {
        return ToolResult::error(format!(
            "{} has {total} lines; offset {first} is past the end",
            path.display()
        ));
    }
    if last < total {
        out.push_str(&format!(
            "[lines {first}-{last} of {total}; read more with offset {}]\n",
            last + 1
        ));
    }
    ToolResult::ok(out)
}

fn read_text(path: &std::path::Path) -> Result<String, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let meta = file
        .metadata()
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if meta.is_dir() {
        return Err(format!(
            "{} is a directory; use Glob to list it",
            path.display()
        ));
    }
    if meta.len() > READ_MAX_BYTES {
        return Err(format!(
            "{} is {} bytes, more than Read loads ({READ_MAX_BYTES}); use Grep or Bash (head, sed) instead",
            path.display(),
            meta.len()
        ));
    }
    let mut bytes = Vec::new();
    file.take(READ_MAX_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.contains(&0) {
        return Err(format!(
            "{} looks binary; Read only shows text",
            path.display()
        ));
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// What a Write or an Edit would make of a file: its path, its text before (empty for a new file) and after.
pub struct Change {
    path: std::path::PathBuf,
    before: String,
    after: String,
    /// What the result says once written.
    done: String,
}

impl Change {
    /// The change as a unified diff, cut at [`MAX_DIFF`] bytes.
    pub fn diff(&self) -> String {
        let name = self.path.display().to_string();
        let mut text = similar::TextDiff::from_lines(&self.before, &self.after)
            .unified_diff()
            .context_radius(3)
            .header(&name, &name)
            .to_string();
        if text.len() > MAX_DIFF {
            let mut end = MAX_DIFF;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str("\n… (the rest of the diff is left out)\n");
        }
        text
    }

    /// Writes it, creating parent directories.
    fn apply(self) -> ToolResult {
        if let Some(parent) = self.path.parent() {
            if let Err(e) = std::fs::create_dir_all(parent) {
                return ToolResult::error(format!("cannot create {}: {e}", parent.display()));
            }
        }
        let diff = self.diff();
        match std::fs::write(&self.path, &self.after) {
            Ok(()) => ToolResult {
                diff: Some(diff),
                ..ToolResult::ok(self.done)
            },
            Err(e) => ToolResult::error(format!("cannot write {}: {e}", self.path.display())),
        }
    }
}

/// Largest diff kept for the operator.
const MAX_DIFF: usize = 64 * 1024;

/// The change a Write makes: the whole file.
pub fn write_change(args: WriteArgs, cwd: &std::path::Path) -> Result<Change, String> {
    let path = resolve(cwd, &args.file_path);
    // A file that cannot be read as text shows as new: the diff is for reading, the write replaces it anyway.
    let before = read_text(&path).unwrap_or_default();
    Ok(Change {
        done: format!("wrote {} bytes to {}", args.content.len(), path.display()),
        path,
        before,
        after: args.content,
    })
}

/// The change an Edit makes: an exact, unique string replaced (or every occurrence with `replace_all`).
pub fn edit_change(args: EditArgs, cwd: &std::path::Path) -> Result<Change, String> {
    let path = resolve(cwd, &args.file_path);
    if args.old_string.is_empty() {
        return Err("old_string is empty; give the exact text to replace".into());
    }
    if args.old_string == args.new_string {
        return Err("old_string and new_string are the same; nothing to change".into());
    }
    let text = read_text(&path)?;
    let count = text.matches(&args.old_string).count();
    if count == 0 {
        return Err(format!(
            "old_string was not found in {}; Read the file and copy the text exactly",
            path.display()
        ));
    }
    if count > 1 && !args.replace_all {
        return Err(format!(
            "old_string occurs {count} times in {}; include more surrounding text to make it unique, or set replace_all",
            path.display()
        ));
    }
    let after = if args.replace_all {
        text.replace(&args.old_string, &args.new_string)
    } else {
        text.replacen(&args.old_string, &args.new_string, 1)
    };
    Ok(Change {
        done: format!("replaced {count} occurrence(s) in {}", path.display()),
        path,
        before: text,
        after,
    })
}

/// Writes a whole file, creating parent directories.
pub fn write(args: WriteArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    write_change(args, ctx.cwd).map_or_else(ToolResult::error, Change::apply)
}

/// Replaces an exact, unique string (or every occurrence with `replace_all`).
pub fn edit(args: EditArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    edit_change(args, ctx.cwd).map_or_else(ToolResult::error, Change::apply)
}
