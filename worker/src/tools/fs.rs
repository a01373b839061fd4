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

/// Writes a whole file, creating parent directories.
pub fn write(args: WriteArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    let path = resolve(ctx.cwd, &args.file_path);
    if let Some(parent) = path.parent() {
        if let Err(e) = std::fs::create_dir_all(parent) {
            return ToolResult::error(format!("cannot create {}: {e}", parent.display()));
        }
    }
    match std::fs::write(&path, &args.content) {
        Ok(()) => ToolResult::ok(format!(
            "wrote {} bytes to {}",
            args.content.len(),
            path.display()
        )),
        Err(e) => ToolResult::error(format!("cannot write {}: {e}", path.display())),
    }
}

/// Replaces an exact, unique string (or every occurrence with `replace_all`).
pub fn edit(args: EditArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    let path = resolve(ctx.cwd, &args.file_path);
    if args.old_string.is_empty() {
        return ToolResult::error("old_string is empty; give the exact text to replace");
    }
    if args.old_string == args.new_string {
        return ToolResult::error("old_string and new_string are the same; nothing to change");
    }
    let text = match read_text(&path) {
        Ok(t) => t,
        Err(e) => return ToolResult::error(e),
    };
    let count = text.matches(&args.old_string).count();
    if count == 0 {
        return ToolResult::error(format!(
            "old_string was not found in {}; Read the file and copy the text exactly",
            path.display()
        ));
    }
    if count > 1 && !args.replace_all {
        return ToolResult::error(format!(
            "old_string occurs {count} times in {}; include more surrounding text to make it unique, or set replace_all",
            path.display()
        ));
    }
    let updated = if args.replace_all {
        text.replace(&args.old_string, &args.new_string)
    } else {
        text.replacen(&args.old_string, &args.new_string, 1)
    };
    match std::fs::write(&path, updated) {
        Ok(()) => ToolResult::ok(format!(
            "replaced {count} occurrence(s) in {}",
            path.display()
        )),
        Err(e) => ToolResult::error(format!("cannot write {}: {e}", path.display())),
    }
}
