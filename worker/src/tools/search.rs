//! Glob and Grep. Both walk the tree below a directory, skip hidden entries, and cap what they return.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobMatcher};
use serde::Deserialize;

use super::{resolve, ToolCtx, ToolResult};

/// Paths Glob returns at most.
const MAX_PATHS: usize = 1000;
/// Matching lines Grep returns at most.
const MAX_MATCHES: usize = 500;
/// Files larger than this are not searched.
const GREP_MAX_FILE: u64 = 2 * 1024 * 1024;
/// Entries visited at most, so a huge tree cannot stall a turn.
const MAX_VISITS: usize = 200_000;

#[derive(Deserialize)]
pub struct GlobArgs {
    pattern: String,
    path: Option<String>,
}

#[derive(Deserialize)]
pub struct GrepArgs {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
}

fn matcher(pattern: &str) -> Result<GlobMatcher, ToolResult> {
    Glob::new(pattern)
        .map(|g| g.compile_matcher())
        .map_err(|e| ToolResult::error(format!("invalid glob \"{pattern}\": {e}")))
}

/// Files under `base` (or `base` itself when it is a file), sorted, hidden entries skipped.
fn files(base: &Path) -> impl Iterator<Item = PathBuf> {
    walkdir::WalkDir::new(base)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || !e.file_name().to_string_lossy().starts_with('.'))
        .take(MAX_VISITS)
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .map(walkdir::DirEntry::into_path)
}

/// Files whose path relative to the search directory matches the pattern.
pub fn glob(args: GlobArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    let base = resolve(ctx.cwd, args.path.as_deref().unwrap_or("."));
    let m = match matcher(&args.pattern) {
        Ok(m) => m,
        Err(e) => return e,
    };
    if !base.is_dir() {
        return ToolResult::error(format!("{} is not a directory", base.display()));
    }
    let mut found = Vec::new();
    for path in files(&base) {
        let rel = path.strip_prefix(&base).unwrap_or(&path);
        if m.is_match(rel) {
            found.push(rel.display().to_string());
            if found.len() == MAX_PATHS {
                found.push(format!(
                    "[stopped at {MAX_PATHS} paths; narrow the pattern]"
                ));
                break;
            }
        }
    }
    if found.is_empty() {
        return ToolResult::ok(format!(
            "no files under {} match {}",
            base.display(),
            args.pattern
        ));
    }
    ToolResult::ok(found.join("\n"))
}

/// Lines matching a regular expression, as `path:line:text`.
pub fn grep(args: GrepArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    let base = resolve(ctx.cwd, args.path.as_deref().unwrap_or("."));
    let re = match regex::Regex::new(&args.pattern) {
        Ok(r) => r,
        Err(e) => return ToolResult::error(format!("invalid regular expression: {e}")),
    };
    let filter = match args.glob.as_deref().map(matcher).transpose() {
        Ok(f) => f,
        Err(e) => return e,
    };
    if !base.exists() {
        return ToolResult::error(format!("{} does not exist", base.display()));
    }
    let mut out = Vec::new();
    'files: for path in files(&base) {
        let rel = path.strip_prefix(&base).unwrap_or(&path);
        if filter
            .as_ref()
            .is_some_and(|f| !f.is_match(rel) && !f.is_match(&path))
        {
            continue;
        }
        if std::fs::metadata(&path)
            .map(|m| m.len() > GREP_MAX_FILE)
            .unwrap_or(true)
        {
            continue;
        }
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        if bytes.contains(&0) {
            continue;
        }
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if re.is_match(line) {
                let shown: String = line.chars().take(500).collect();
                out.push(format!("{}:{}:{shown}", path.display(), i + 1));
                if out.len() == MAX_MATCHES {
                    out.push(format!(
                        "[stopped at {MAX_MATCHES} matches; narrow the pattern or path]"
                    ));
                    break 'files;
                }
            }
        }
    }
    if out.is_empty() {
        return ToolResult::ok(format!(
            "no matches for {} under {}",
            args.pattern,
            base.display()
        ));
    }
    ToolResult::ok(out.join("\n"))
}
