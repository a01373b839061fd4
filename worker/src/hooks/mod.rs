//! Hooks: commands the session's bundle, its project or the operator declared, run at points of a turn, in the
//! sandbox. The contract is Claude Code's and codex's, so their scripts run unchanged: the event as JSON on stdin;
//! exit 0 goes on (stdout may be JSON), exit 2 blocks with stderr as the reason, any other exit is a warning.
//!
//! This module selects a point's hooks, runs them (at once, as codex does), journals each run as `hook_started` and
//! `hook_finished`, and reads their answers into one [`Verdict`]. What a verdict does is its caller's: `react`
//! blocks or rewrites a call, adds context, or keeps a turn going; a `PermissionRequest` answer goes to the
//! supervisor, which gives it in place of a person's.

mod answer;
mod run;

use std::path::Path;
use std::time::Duration;

use regex::Regex;
use serde_json::{json, Map, Value};
use service_ipc::{EventPayload, HookEvent, HookRef, HookSpec, WorkerConfig};
use tokio_util::sync::CancellationToken;

pub use answer::{Decision, Verdict};

use crate::conn::Outbox;

/// Longest reason a `hook_finished` event carries.
const MAX_EVENT_REASON: usize = 4096;

/// The session's hooks, with their matchers compiled.
#[derive(Debug, Default)]
pub struct Hooks {
    hooks: Vec<(HookSpec, Matcher)>,
    /// Where the conversation is written for hooks to read (`transcript_path`).
    transcript: Option<std::path::PathBuf>,
}

/// Which tool calls a hook runs for.
#[derive(Debug)]
enum Matcher {
    /// Every call (no matcher, `*` or an empty one).
    Any,
    /// Tool names the whole expression matches (`Edit|Write`, `mcp__git__.*`).
    Tools(Regex),
    /// Bash commands in which the prefix's words appear (`Bash(rm:*)`), as deny rules match them.
    Command(String),
    /// A matcher that does not compile matches nothing (the supervisor refuses such a file).
    Never,
}

impl Matcher {
    fn new(matcher: Option<&str>) -> Matcher {
        let Some(m) = matcher
            .map(str::trim)
            .filter(|m| !m.is_empty() && *m != "*")
        else {
            return Matcher::Any;
        };
        if let Some(prefix) = m.strip_prefix("Bash(").and_then(|r| r.strip_suffix(')')) {
            let prefix = prefix
                .strip_suffix(":*")
                .unwrap_or(prefix)
                .trim_end_matches(" *");
            return Matcher::Command(prefix.to_string());
        }
        Regex::new(&format!("^(?:{m})$")).map_or(Matcher::Never, Matcher::Tools)
    }

    fn selects(&self, tool: &str, input: &Value) -> bool {
        match self {
            Matcher::Any => true,
            Matcher::Tools(re) => re.is_match(tool),
            Matcher::Command(prefix) => {
                tool == "Bash"
                    && input
                        .get("command")
                        .and_then(Value::as_str)
                        .is_some_and(|c| {
                            crate::permissions::command_prefix_matches(prefix, c, false)
                        })
            }
            Matcher::Never => false,
        }
    }
}

/// Where a point of a turn is: what every hook's input carries besides the event's own fields.
pub struct Point<'a> {
    /// The event.
    pub event: HookEvent,
    /// The turn, when inside one.
    pub turn_id: Option<&'a str>,
    /// The working directory of the turn (the workspace as the sandbox names it).
    pub cwd: &'a Path,
    /// For tool events: the tool's name, its input and its call id.
    pub tool: Option<(&'a str, &'a Value, &'a str)>,
    /// The event's own fields (`prompt`, `source`, `tool_response`, `stop_hook_active`, …).
    pub fields: Map<String, Value>,
}

impl Hooks {
    /// The hooks of `config`, their matchers compiled.
    pub fn new(config: &WorkerConfig) -> Hooks {
        let hooks: Vec<_> = config
            .hooks
            .iter()
            .map(|h| (h.clone(), Matcher::new(h.matcher.as_deref())))
            .collect();
        let transcript = (!hooks.is_empty()).then(|| {
            std::env::temp_dir()
                .join(".service-hooks")
                .join(format!("{}.jsonl", config.session_id))
        });
        Hooks { hooks, transcript }
    }

    /// Whether any hook runs on `event`.
    pub fn on(&self, event: HookEvent) -> bool {
        self.hooks.iter().any(|(h, _)| h.event == event)
    }

    /// Writes the conversation where hooks read it (`transcript_path`): one message per line, read-only. A hook
    /// that changes it changes nothing: the worker keeps its own copy.
    pub fn write_transcript(&self, messages: &[service_ipc::ChatMessage]) {
        let Some(path) = &self.transcript else { return };
        let mut text = String::new();
        for m in messages {
            if let Ok(line) = serde_json::to_string(m) {
                text.push_str(&line);
                text.push('\n');
            }
        }
        let write = || -> std::io::Result<()> {
            use std::os::unix::fs::PermissionsExt;
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let tmp = path.with_extension("tmp");
            let _ = std::fs::remove_file(&tmp);
            std::fs::write(&tmp, text)?;
            std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o444))?;
            std::fs::rename(&tmp, path)
        };
        // A hook finds no transcript then, as it would on a read-only /tmp; the turn is not the hook's.
        let _ = write();
    }

    /// Runs the hooks `point` selects, at once, each journaled, and reads their answers; a point no hook
    /// selects costs nothing.
    pub async fn run(
        &self,
        config: &WorkerConfig,
        out: &Outbox,
        point: Point<'_>,
        cancel: &CancellationToken,
    ) -> Verdict {
        let selected: Vec<&HookSpec> = self
            .hooks
            .iter()
            .filter(|(h, m)| {
                h.event == point.event
                    && match point.tool {
                        Some((tool, input, _)) => m.selects(tool, input),
                        None => true,
                    }
            })
            .map(|(h, _)| h)
            .collect();
        if selected.is_empty() {
            return Verdict::default();
        }
        let input = self.input(config, &point);
        let env = [
            ("SERVICE_BUNDLE_DIR", config.bundle_dir.clone()),
            ("CLAUDE_PLUGIN_ROOT", config.bundle_dir.clone()),
            ("CLAUDE_PROJECT_DIR", config.workspace.clone()),
            ("SERVICE_SESSION_ID", config.session_id.clone()),
        ];
        let runs = selected.iter().map(|spec| {
            let (input, env) = (&input, &env);
            let point = &point;
            async move {
                let hook_id = uuid::Uuid::new_v4().to_string();
                let hook = HookRef {
                    source: spec.source,
                    command: spec.command.clone(),
                };
                out.event(EventPayload::HookStarted {
                    turn_id: point.turn_id.map(str::to_string),
                    hook_id: hook_id.clone(),
                    event: point.event,
                    hook: hook.clone(),
                    call_id: point.tool.map(|(_, _, id)| id.to_string()),
                })
                .await;
                let ran = run::run(
                    run::Launch {
                        command: &spec.command,
                        cwd: point.cwd,
                        env,
                        input,
                        timeout: Duration::from_millis(spec.timeout_ms),
                    },
                    cancel,
                )
                .await;
                let answer = answer::read(point.event, spec, &ran);
                out.event(EventPayload::HookFinished {
                    turn_id: point.turn_id.map(str::to_string),
                    hook_id,
                    event: point.event,
                    hook: hook.clone(),
                    matcher: spec.matcher.clone(),
                    exit_code: ran.exit_code,
                    timed_out: ran.timed_out,
                    decision: answer.decision.map(|d| d.as_str().to_string()),
                    reason: answer.reason.as_deref().map(|r| clip(r, MAX_EVENT_REASON)),
                    duration_ms: ran.duration.as_millis() as u64,
                })
                .await;
                (hook, answer)
            }
        });
        let answers = futures::future::join_all(runs).await;
        Verdict::of(answers)
    }

    /// The JSON a hook reads on stdin: the fields every event has, the tool's, then the event's own.
    fn input(&self, config: &WorkerConfig, point: &Point<'_>) -> Vec<u8> {
        let mut input = json!({
            "session_id": config.session_id,
            "transcript_path": self.transcript.as_ref().map(|p| p.display().to_string()),
            "cwd": point.cwd.display().to_string(),
            "hook_event_name": point.event.as_str(),
            "permission_mode": "default",
        });
        if let Some(obj) = input.as_object_mut() {
            if let Some((tool, tool_input, call_id)) = point.tool {
                obj.insert("tool_name".into(), json!(tool));
                obj.insert("tool_input".into(), tool_input.clone());
                obj.insert("tool_use_id".into(), json!(call_id));
            }
            if let Some(turn_id) = point.turn_id {
                obj.insert("turn_id".into(), json!(turn_id));
            }
            for (k, v) in &point.fields {
                obj.insert(k.clone(), v.clone());
            }
        }
        serde_json::to_vec(&input).unwrap_or_default()
    }
}

/// `text` cut at `max` bytes, on a character boundary.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
