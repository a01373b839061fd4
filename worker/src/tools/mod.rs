//! The builtin tools. Names and argument shapes are exactly those models are trained on (DESIGN.md section 4b).
//! A tool never fails a turn: every problem becomes a result the model reads.
//!
//! - [`fs`]: Read, Write, Edit.
//! - [`search`]: Glob, Grep.
//! - [`exec`]: Bash, and the subprocess runner shared with operator commands.
//! - [`skill`], [`plan`]: Skill, UpdatePlan.
//! - [`web`]: the WebFetch tool.

pub mod exec;
pub mod fs;
pub mod plan;
pub mod search;
pub mod skill;
pub mod spare_shell;
pub mod web;

use std::path::{Component, Path, PathBuf};

use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use service_ipc::{BuiltinTool, ToolCallStatus, ToolSpec, WorkerConfig};
use tokio_util::sync::CancellationToken;

use crate::conn::Outbox;

/// What a tool needs to know about the call it serves; tools see nothing else of the session.
pub struct ToolCtx<'a> {
    /// The worker's configuration (skills, workspace).
    pub config: &'a WorkerConfig,
    /// Frames to the supervisor, for live events.
    pub outbox: &'a Outbox,
    /// Turn id.
    pub turn_id: &'a str,
    /// Call id.
    pub call_id: &'a str,
    /// Working directory relative paths resolve against.
    pub cwd: &'a Path,
    /// Fires when the turn is interrupted.
    pub cancel: &'a CancellationToken,
}

/// A tool's result: the status and the text the model sees.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResult {
    /// How the call ended.
    pub status: ToolCallStatus,
    /// Text for the model.
    pub output: String,
    /// For a Write or an Edit that changed a file: the change as a unified diff, for the operator.
    pub diff: Option<String>,
}

impl ToolResult {
    /// A successful result.
    pub fn ok(output: impl Into<String>) -> ToolResult {
        ToolResult {
            status: ToolCallStatus::Ok,
            output: output.into(),
            diff: None,
        }
    }

    /// A failed result.
    pub fn error(output: impl Into<String>) -> ToolResult {
        ToolResult {
            status: ToolCallStatus::Error,
            output: output.into(),
            diff: None,
        }
    }
}

/// The specs of the offered tools, in manifest order.
pub fn specs(tools: &[BuiltinTool]) -> Vec<ToolSpec> {
    tools.iter().map(|t| spec(*t)).collect()
}

fn spec(tool: BuiltinTool) -> ToolSpec {
    let (description, parameters) = match tool {
        BuiltinTool::Read => (
            "Read a text file. Returns numbered lines; use offset (1-based line) and limit for large files.",
            json!({"type": "object", "properties": {
                "file_path": {"type": "string", "description": "Path of the file"},
                "offset": {"type": "integer", "description": "First line to read, 1-based"},
                "limit": {"type": "integer", "description": "Number of lines to read"}},
                "required": ["file_path"]}),
        ),
        BuiltinTool::Write => (
            "Write a file, replacing its content. Creates parent directories.",
            json!({"type": "object", "properties": {
                "file_path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["file_path", "content"]}),
        ),
        BuiltinTool::Edit => (
            "Replace an exact string in a file. old_string must occur exactly once unless replace_all is true.",
            json!({"type": "object", "properties": {
                "file_path": {"type": "string"}, "old_string": {"type": "string"},
                "new_string": {"type": "string"}, "replace_all": {"type": "boolean"}},
                "required": ["file_path", "old_string", "new_string"]}),
        ),
        BuiltinTool::Bash => (
            "Run a shell command in the session sandbox. Returns its output and exit code.",
            json!({"type": "object", "properties": {
                "command": {"type": "string"},
                "timeout_ms": {"type": "integer", "description": "Time limit, default 120000, at most 600000"}},
                "required": ["command"]}),
        ),
        BuiltinTool::Glob => (
            "Find files whose path matches a glob pattern such as **/*.rs.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string"}, "path": {"type": "string", "description": "Directory to search"}},
                "required": ["pattern"]}),
        ),
        BuiltinTool::Grep => (
            "Search file contents with a regular expression. Returns path:line:text for each match.",
            json!({"type": "object", "properties": {
                "pattern": {"type": "string"}, "path": {"type": "string"},
                "glob": {"type": "string", "description": "Only files matching this glob"}},
                "required": ["pattern"]}),
        ),
        BuiltinTool::Skill => (
            "Load the instructions of a skill by name.",
            json!({"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}),
        ),
        BuiltinTool::UpdatePlan => (
            "Publish the current plan: every step with its status.",
            json!({"type": "object", "properties": {
                "plan": {"type": "array", "items": {"type": "object", "properties": {
                    "step": {"type": "string"},
                    "status": {"type": "string", "enum": ["pending", "in_progress", "completed"]}},
                    "required": ["step", "status"]}},
                "explanation": {"type": "string"}},
                "required": ["plan"]}),
        ),
        BuiltinTool::WebFetch => (
            "Fetch a web page (http or https) and return it as markdown; text and JSON come back as they are. \
             Goes through the sandbox's network rules, which may refuse the host or ask the user.",
            json!({"type": "object", "properties": {
                "url": {"type": "string", "description": "The URL to fetch"},
                "prompt": {"type": "string", "description": "What you want from the page"}},
                "required": ["url"]}),
        ),
    };
    ToolSpec {
        name: tool.as_str().to_string(),
        description: description.to_string(),
        parameters,
    }
}

/// The argument permission rules match against: the command, the absolute path, or the pattern.
pub fn key_argument(tool: BuiltinTool, args: &Value, cwd: &Path) -> String {
    let field = |name: &str| {
        args.get(name)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    match tool {
        BuiltinTool::Bash => field("command"),
        BuiltinTool::Read | BuiltinTool::Write | BuiltinTool::Edit => {
            resolve(cwd, &field("file_path")).display().to_string()
        }
        BuiltinTool::Glob | BuiltinTool::Grep => field("pattern"),
        BuiltinTool::Skill => field("name"),
        BuiltinTool::UpdatePlan => String::new(),
        BuiltinTool::WebFetch => field("url"),
    }
}

/// One line saying what the call is about to do, for `tool_call_delta`.
pub fn describe(tool: BuiltinTool, _args: &Value, key: &str) -> String {
    match tool {
        BuiltinTool::Bash => format!("running: {key}"),
        BuiltinTool::Read => format!("reading {key}"),
        BuiltinTool::Write => format!("writing {key}"),
        BuiltinTool::Edit => format!("editing {key}"),
        BuiltinTool::Glob => format!("finding files matching {key}"),
        BuiltinTool::Grep => format!("searching for {key}"),
        BuiltinTool::Skill => format!("loading skill {key}"),
        BuiltinTool::UpdatePlan => "updating the plan".to_string(),
        BuiltinTool::WebFetch => format!("fetching {key}"),
    }
}

/// For a Write or an Edit: the diff of what it would change, for its approval question; None for other tools and
/// for calls that would fail.
pub fn preview_diff(tool: BuiltinTool, args: &Value, cwd: &Path) -> Option<String> {
    let change = match tool {
        BuiltinTool::Write => fs::write_change(serde_json::from_value(args.clone()).ok()?, cwd),
        BuiltinTool::Edit => fs::edit_change(serde_json::from_value(args.clone()).ok()?, cwd),
        _ => return None,
    };
    change.ok().map(|c| c.diff())
}

/// Runs one tool call.
pub async fn run(tool: BuiltinTool, args: Value, ctx: &ToolCtx<'_>) -> ToolResult {
    match tool {
        BuiltinTool::Read => with_args(tool, args, |a| fs::read(a, ctx)),
        BuiltinTool::Write => with_args(tool, args, |a| fs::write(a, ctx)),
        BuiltinTool::Edit => with_args(tool, args, |a| fs::edit(a, ctx)),
        BuiltinTool::Glob => with_args(tool, args, |a| search::glob(a, ctx)),
        BuiltinTool::Grep => with_args(tool, args, |a| search::grep(a, ctx)),
        BuiltinTool::Skill => with_args(tool, args, |a| skill::load(a, ctx)),
        BuiltinTool::Bash => match parse_args(tool, args) {
            Ok(a) => exec::bash(a, ctx).await,
            Err(e) => e,
        },
        BuiltinTool::UpdatePlan => match parse_args(tool, args) {
            Ok(a) => plan::update(a, ctx).await,
            Err(e) => e,
        },
        BuiltinTool::WebFetch => match parse_args(tool, args) {
            Ok(a) => web::fetch(a, ctx).await,
            Err(e) => e,
        },
    }
}

fn with_args<A: DeserializeOwned>(
    tool: BuiltinTool,
    args: Value,
    f: impl FnOnce(A) -> ToolResult,
) -> ToolResult {
    match parse_args(tool, args) {
        Ok(a) => f(a),
        Err(e) => e,
    }
}

fn parse_args<A: DeserializeOwned>(tool: BuiltinTool, args: Value) -> Result<A, ToolResult> {
    serde_json::from_value(args)
        .map_err(|e| ToolResult::error(format!("invalid arguments for {tool}: {e}")))
}

/// `path` made absolute against `cwd`, with `.` and `..` folded lexically (no file system access).
pub fn resolve(cwd: &Path, path: &str) -> PathBuf {
    let joined = cwd.join(path);
    let mut out = PathBuf::new();
    for part in joined.components() {
        match part {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// The longest prefix of `s` of at most `max` bytes that ends on a character boundary.
pub(crate) fn clip(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}
