//! What the agent did, as a person reads it: the one renderer behind the TUI's transcript, `run`'s progress log,
//! the console's tool lines and ACP's titles. A call becomes a line (`$ cargo test`, `Edited src/a.rs (+1 -1)`,
//! `Read src/a.rs (40 lines)`, `git: log`) with paths relative to the session's directory; no line names the
//! sandbox's `/workspace`. Everything here is text from the sandbox or the model: front ends still escape it.

use std::collections::HashMap;
use std::path::{Component, Path};

use serde_json::Value;
use service_ipc::{EventPayload, PlanStatus, ToolCallStatus};

use super::tool_view::first_line;

/// Longest command or title shown on one line; a command can be a script.
const MAX_LINE: usize = 160;

/// Paths as a person reads them: relative to the session's directory (the sandbox's workspace, the turn's `cwd`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolText {
    /// The workspace as the sandbox names it.
    root: String,
}

impl Default for ToolText {
    fn default() -> Self {
        ToolText::new(crate::sandbox::bwrap::WORKSPACE_DIR)
    }
}

impl ToolText {
    /// Paths under `root` (the turn's `cwd` inside the sandbox) are shown relative to it.
    pub fn new(root: &str) -> ToolText {
        ToolText {
            root: root.trim_end_matches('/').to_string(),
        }
    }

    /// `path` (absolute, or relative to the root) as shown: relative inside the directory, `.` for it, and as it is
    /// elsewhere (the sandbox's `/tmp`).
    pub fn path(&self, path: &str) -> String {
        let p = Path::new(path);
        let absolute = if p.is_absolute() {
            p.to_path_buf()
        } else {
            Path::new(&self.root).join(p)
        };
        if absolute.components().any(|c| c == Component::ParentDir) {
            return path.to_string();
        }
        match absolute.strip_prefix(&self.root) {
            Ok(rest) if rest.as_os_str().is_empty() => ".".into(),
            Ok(rest) => rest.display().to_string(),
            Err(_) => path.to_string(),
        }
    }

    /// Free text (a summary, an error) with the workspace's sandbox paths made relative.
    pub fn text(&self, text: &str) -> String {
        self.replace_root(text, None)
    }

    /// Free text with the workspace's sandbox paths given as paths under `host`, for clients that know the files
    /// by their host paths (ACP).
    pub fn text_on_host(&self, text: &str, host: &Path) -> String {
        self.replace_root(text, Some(host))
    }

    fn replace_root(&self, text: &str, host: Option<&Path>) -> String {
        if self.root.is_empty() || self.root == "/" {
            return text.to_string();
        }
        let host = host.map(|h| h.display().to_string());
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(&self.root) {
            let after = &rest[at + self.root.len()..];
            out.push_str(&rest[..at]);
            // Only the root as a whole path component: `/workspacex` is another name.
            let whole = !after
                .chars()
                .next()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '-' || c == '.');
            match (&host, after.strip_prefix('/')) {
                _ if !whole => out.push_str(&self.root),
                (Some(host), _) => out.push_str(host),
                (None, Some(tail)) => {
                    rest = tail;
                    continue;
                }
                (None, None) => out.push('.'),
            }
            rest = after;
        }
        out.push_str(rest);
        out
    }

    /// What a call is about to do, one line: `$ cargo test`, `Edit src/a.rs`, `Read src/a.rs`, `git: log`.
    pub fn title(&self, tool: &str, args: &Value) -> String {
        let field = |name: &str| args.get(name).and_then(Value::as_str).unwrap_or("");
        let line = match tool {
            "Bash" => format!("$ {}", first_line(field("command"))),
            "Read" | "Write" | "Edit" => format!("{tool} {}", self.path(field("file_path"))),
            "Glob" => format!("Find {}{}", field("pattern"), self.within(field("path"))),
            "Grep" => format!("Search {}{}", field("pattern"), self.within(field("path"))),
            "Skill" => format!("Load skill {}", field("name")),
            "UpdatePlan" => "Update the plan".into(),
            "WebFetch" => format!("Fetch {}", field("url")),
            "Agent" => format!("Ask subagent {}", field("subagent")),
            other => match other.strip_prefix("mcp__").and_then(|r| r.split_once("__")) {
                Some((server, name)) => format!("{server}: {name}"),
                None => other.to_string(),
            },
        };
        clip(&line)
    }

    fn within(&self, dir: &str) -> String {
        if dir.is_empty() {
            String::new()
        } else {
            format!(" in {}", self.path(dir))
        }
    }

    /// How a finished call went, one line: `Edited src/a.rs (+1 -1)`, `Read src/a.rs (40 lines)`, `denied: Edit
    /// src/a.rs`, `Find *.rs: 3 files`.
    pub fn outcome(
        &self,
        tool: &str,
        args: &Value,
        status: ToolCallStatus,
        output: &str,
        diff: Option<&str>,
    ) -> String {
        let title = self.title(tool, args);
        match status {
            ToolCallStatus::Denied => return format!("denied: {title}"),
            // A command's own output says why; it is shown with it.
            ToolCallStatus::Error if tool == "Bash" => return format!("failed: {title}"),
            ToolCallStatus::Error => {
                let why = first_line(&self.text(output));
                return clip(&format!("failed: {title}: {why}"));
            }
            ToolCallStatus::Ok => {}
        }
        let path = || self.path(args.get("file_path").and_then(Value::as_str).unwrap_or(""));
        let count = |what: &str| {
            let n = output.lines().filter(|l| !l.trim().is_empty()).count();
            format!("{title}: {n} {what}{}", if n == 1 { "" } else { "s" })
        };
        match tool {
            "Edit" | "Write" => {
                let (added, removed) = diff.map(diff_stats).unwrap_or((0, 0));
                let verb = if tool == "Edit" { "Edited" } else { "Wrote" };
                format!("{verb} {} (+{added} -{removed})", path())
            }
            "Read" => {
                let n = output.lines().count();
                format!(
                    "Read {} ({n} line{})",
                    path(),
                    if n == 1 { "" } else { "s" }
                )
            }
            "Glob" => count("file"),
            "Grep" => count("match"),
            "WebFetch" => title.replacen("Fetch", "Fetched", 1),
            _ => title,
        }
    }

    /// A diff for a person: its `---`/`+++` headers name the file relative to the directory.
    pub fn diff(&self, diff: &str) -> String {
        let mut out = String::new();
        for line in diff.lines() {
            match line.split_at_checked(4) {
                Some((head @ ("--- " | "+++ "), path)) => {
                    out.push_str(head);
                    out.push_str(&self.path(path.trim()));
                }
                _ => out.push_str(line),
            }
            out.push('\n');
        }
        out
    }
}

/// What a hook run said, one line: `hook PreToolUse (bundle) python3 guard.py: deny: no rm -rf`; None for other
/// events. A hook that decided nothing reads `ok`.
pub fn hook_line(payload: &EventPayload) -> Option<String> {
    let EventPayload::HookFinished {
        event,
        hook,
        exit_code,
        timed_out,
        decision,
        reason,
        duration_ms,
        ..
    } = payload
    else {
        return None;
    };
    let outcome = match (decision.as_deref(), reason.as_deref()) {
        (Some(d), Some(r)) => format!("{d}: {}", first_line(r)),
        (Some(d), None) => d.to_string(),
        (None, _) if *timed_out => "timed out".to_string(),
        (None, _) => match exit_code {
            Some(0) => "ok".to_string(),
            Some(c) => format!("exit {c}"),
            None => "killed".to_string(),
        },
    };
    Some(clip(&format!(
        "hook {event} ({}) {}: {outcome} ({})",
        hook.source,
        first_line(&hook.command),
        duration(*duration_ms)
    )))
}

/// Lines added and removed by a unified diff.
pub fn diff_stats(diff: &str) -> (usize, usize) {
    let (mut added, mut removed) = (0, 0);
    for line in diff.lines() {
        if line.starts_with("+++") || line.starts_with("---") {
            continue;
        }
        if line.starts_with('+') {
            added += 1;
        } else if line.starts_with('-') {
            removed += 1;
        }
    }
    (added, removed)
}

/// The hunks of a unified diff without its file headers.
pub fn hunks(diff: &str) -> String {
    diff.lines()
        .skip_while(|l| !l.starts_with("@@"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// `$ cargo test` with how it ended: `exit 0, 1.2 s`.
pub fn command_end(
    command: &str,
    exit_code: Option<i32>,
    duration_ms: u64,
    timed_out: bool,
) -> String {
    let end = match (exit_code, timed_out) {
        (_, true) => "timed out".to_string(),
        (Some(code), _) => format!("exit {code}"),
        (None, _) => "killed".to_string(),
    };
    clip(&format!(
        "$ {} ({end}, {})",
        first_line(command),
        duration(duration_ms)
    ))
}

fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else {
        format!("{:.1} s", ms as f64 / 1000.0)
    }
}

/// One line of a turn's activity log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What kind of line it is, for colour.
    pub kind: StepKind,
    /// The line.
    pub line: String,
    /// For an edit: its hunks, relative headers dropped.
    pub hunks: Option<String>,
}

/// The kinds of [`Step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A command ran (its exit code said 0).
    Command,
    /// A command ended with another code, or was killed.
    CommandFailed,
    /// A file changed.
    Edit,
    /// A call that read, searched or fetched.
    Other,
    /// A call that failed or was denied.
    Failed,
    /// The plan changed.
    Plan,
}

/// Follows a turn's events and says, a line each, what the agent did: commands with their exit code and time,
/// edits with `+N -M` and their hunks, other calls with their result, plan updates. Used by `run`'s progress log.
#[derive(Debug, Default)]
pub struct Activity {
    text: ToolText,
    calls: HashMap<String, (String, Value)>,
    execs: HashMap<String, (String, String)>,
}

impl Activity {
    /// The step one event adds, if any (most add none).
    pub fn event(&mut self, payload: &EventPayload) -> Option<Step> {
        let step = self.step(payload);
        self.observe(payload);
        step
    }

    /// Takes in what `payload` says of the turn's calls and commands, rendering nothing.
    pub fn observe(&mut self, payload: &EventPayload) {
        match payload {
            EventPayload::TurnStarted { context, .. } => {
                // Calls do not outlive their turn; a worker that never finished some cannot grow these.
                self.calls.clear();
                self.execs.clear();
                self.text = ToolText::new(&context.cwd);
            }
            EventPayload::ToolCallStarted {
                call_id,
                tool,
                arguments,
                ..
            } => {
                self.calls
                    .insert(call_id.clone(), (tool.clone(), arguments.clone()));
            }
            EventPayload::ExecCommandBegin {
                exec_id,
                call_id: Some(call_id),
                command,
                ..
            } => {
                self.execs
                    .insert(exec_id.clone(), (call_id.clone(), command.clone()));
            }
            EventPayload::ToolCallFinished { call_id, .. } => {
                self.calls.remove(call_id);
                self.execs.retain(|_, (c, _)| c != call_id);
            }
            _ => {}
        }
    }

    /// The step `payload` adds to the log, from what was observed before it.
    fn step(&self, payload: &EventPayload) -> Option<Step> {
        let step = |kind, line: String| Step {
            kind,
            line,
            hunks: None,
        };
        match payload {
            EventPayload::ExecCommandEnd { exit_code, .. } => {
                let kind = if *exit_code == Some(0) {
                    StepKind::Command
                } else {
                    StepKind::CommandFailed
                };
                Some(step(kind, self.line(payload)?))
            }
            EventPayload::ToolCallFinished {
                call_id,
                tool,
                status,
                diff,
                ..
            } => {
                let ran = self.execs.values().any(|(c, _)| c == call_id);
                // A command that ran already has its line; one that never started (denied, refused) gets one.
                if tool == "Bash" && ran && *status != ToolCallStatus::Denied {
                    return None;
                }
                if tool == "UpdatePlan" && *status == ToolCallStatus::Ok {
                    return None;
                }
                let kind = match (status, tool.as_str()) {
                    (ToolCallStatus::Ok, "Edit" | "Write") => StepKind::Edit,
                    (ToolCallStatus::Ok, _) => StepKind::Other,
                    _ => StepKind::Failed,
                };
                let hunks = diff
                    .as_deref()
                    .filter(|_| kind == StepKind::Edit)
                    .map(hunks);
                Some(Step {
                    kind,
                    line: self.line(payload)?,
                    hunks,
                })
            }
            // A hook that had nothing to say is not worth a line of the log.
            EventPayload::HookFinished { decision, .. } => {
                let kind = match decision.as_deref()? {
                    "deny" | "block" | "warning" => StepKind::Failed,
                    _ => StepKind::Other,
                };
                Some(step(kind, self.line(payload)?))
            }
            EventPayload::PlanUpdate { plan, .. } => {
                let items: Vec<String> = plan
                    .iter()
                    .map(|i| {
                        let mark = match i.status {
                            PlanStatus::Completed => "✓",
                            PlanStatus::InProgress => "→",
                            PlanStatus::Pending => "·",
                        };
                        format!("{mark} {}", i.step)
                    })
                    .collect();
                Some(step(StepKind::Plan, format!("Plan: {}", items.join("  "))))
            }
            _ => None,
        }
    }

    /// The line a call that starts, a call that ends (its outcome), a command that ends (with its exit code and
    /// time) or a hook run reads as, from what was observed before it.
    fn line(&self, payload: &EventPayload) -> Option<String> {
        match payload {
            EventPayload::ToolCallStarted {
                tool, arguments, ..
            } => Some(self.text.title(tool, arguments)),
            EventPayload::ToolCallFinished {
                call_id,
                tool,
                status,
                output,
                diff,
                ..
            } => {
                let args = self.calls.get(call_id).map_or(&Value::Null, |(_, a)| a);
                Some(
                    self.text
                        .outcome(tool, args, *status, output, diff.as_deref()),
                )
            }
            EventPayload::ExecCommandEnd {
                exec_id,
                exit_code,
                duration_ms,
                timed_out,
                ..
            } => {
                let (_, command) = self.execs.get(exec_id)?;
                Some(command_end(command, *exit_code, *duration_ms, *timed_out))
            }
            EventPayload::HookFinished { .. } => hook_line(payload),
            _ => None,
        }
    }

    /// How the renderer reads `payload`, before [`Activity::observe`] takes it in: `{"title": ...}` for the events
    /// [`Activity::line`] reads. The console shows these lines rather than rendering calls itself.
    pub fn view(&self, payload: &EventPayload) -> Option<Value> {
        Some(serde_json::json!({ "title": self.line(payload)? }))
    }

    /// The paths of the turn being followed.
    pub fn paths(&self) -> &ToolText {
        &self.text
    }
}

fn clip(text: &str) -> String {
    super::tool_view::clip_at(text, MAX_LINE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn calls_read_as_a_person_would_say_them_with_relative_paths() {
        let t = ToolText::new("/workspace");
        assert_eq!(
            t.title("Bash", &json!({"command": "cargo test\necho done"})),
            "$ cargo test …"
        );
        assert_eq!(
            t.title("Edit", &json!({"file_path": "/workspace/src/a.rs"})),
            "Edit src/a.rs"
        );
        assert_eq!(t.title("Read", &json!({"file_path": "b.rs"})), "Read b.rs");
        assert_eq!(
            t.title("Read", &json!({"file_path": "/tmp/x"})),
            "Read /tmp/x"
        );
        assert_eq!(
            t.title("Glob", &json!({"pattern": "**/*.rs", "path": "/workspace"})),
            "Find **/*.rs in ."
        );
        assert_eq!(t.title("mcp__git__log", &json!({})), "git: log");
        let diff = "--- /workspace/calc.py\n+++ /workspace/calc.py\n@@ -1 +1 @@\n-a - b\n+a + b\n";
        assert_eq!(
            t.outcome(
                "Edit",
                &json!({"file_path": "calc.py"}),
                ToolCallStatus::Ok,
                "ok",
                Some(diff)
            ),
            "Edited calc.py (+1 -1)"
        );
        assert_eq!(t.diff(diff).lines().next(), Some("--- calc.py"));
        assert_eq!(hunks(diff), "@@ -1 +1 @@\n-a - b\n+a + b\n");
        assert_eq!(
            t.outcome(
                "Read",
                &json!({"file_path": "a"}),
                ToolCallStatus::Ok,
                "1\tx\n2\ty\n",
                None
            ),
            "Read a (2 lines)"
        );
        assert_eq!(
            t.outcome(
                "Edit",
                &json!({"file_path": "a"}),
                ToolCallStatus::Error,
                "/workspace/a: not found",
                None
            ),
            "failed: Edit a: a: not found"
        );
        assert_eq!(
            command_end("make", Some(2), 1500, false),
            "$ make (exit 2, 1.5 s)"
        );
    }

    #[test]
    fn a_path_that_climbs_out_is_shown_as_given() {
        let t = ToolText::new("/workspace");
        assert_eq!(
            t.path("/workspace/../etc/passwd"),
            "/workspace/../etc/passwd"
        );
        assert_eq!(t.path("/workspace"), ".");
        assert_eq!(t.path("/workspacex/a"), "/workspacex/a");
        assert_eq!(
            t.text("cannot open /workspace/a.rs in /workspace; /workspacex stays"),
            "cannot open a.rs in .; /workspacex stays"
        );
        assert_eq!(
            t.text_on_host("/workspace/a.rs and /workspace", Path::new("/home/me/p")),
            "/home/me/p/a.rs and /home/me/p"
        );
    }
}
