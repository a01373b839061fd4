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

pub use answer::{Answer, Decision, Verdict};

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
pub enum Matcher {
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
    /// Reads a declaration's matcher; the error says what a matcher may be. The supervisor checks declarations
    /// with it, so a bundle or project file with a bad one is refused before any session.
    pub fn parse(matcher: Option<&str>) -> Result<Matcher, String> {
        let Some(m) = matcher
            .map(str::trim)
            .filter(|m| !m.is_empty() && *m != "*")
        else {
            return Ok(Matcher::Any);
        };
        if let Some(prefix) = m.strip_prefix("Bash(").and_then(|r| r.strip_suffix(')')) {
            let prefix = prefix
                .strip_suffix(":*")
                .unwrap_or(prefix)
                .trim_end_matches(" *");
            return Ok(Matcher::Command(prefix.to_string()));
        }
        Regex::new(&format!("^(?:{m})$")).map(Matcher::Tools).map_err(|_| {
            format!("\"{m}\" is not a regular expression over tool names (e.g. Edit|Write) or Bash(PREFIX:*)")
        })
    }

    /// Whether it selects every call.
    pub fn is_any(&self) -> bool {
        matches!(self, Matcher::Any)
    }

    /// Whether it selects a call of `tool` with `input` (a Bash call's `command` is what a prefix matches).
    pub fn selects(&self, tool: &str, input: &Value) -> bool {
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
            .map(|h| {
                let matcher = Matcher::parse(h.matcher.as_deref()).unwrap_or(Matcher::Never);
                (h.clone(), matcher)
            })
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
        // A hook finds no transcript where it cannot be written safely, as it would on a read-only /tmp.
        let _ = write_private(path, text.as_bytes());
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
            (
                "SERVICE_OPERATOR_HOOKS_DIR",
                config.operator_hooks_dir.clone().unwrap_or_default(),
            ),
        ];
        let runs = selected.iter().map(|spec| {
            let at = Where {
                event: point.event,
                turn_id: point.turn_id,
                call_id: point.tool.map(|(_, _, id)| id),
                cwd: point.cwd,
                env: &env,
                confine: true,
            };
            let input = &input;
            async move {
                let emit = move |e: EventPayload| async move {
                    out.event(e).await;
                };
                run_one(spec, at, input, cancel, emit).await
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

/// Where one hook runs, and for what.
#[derive(Clone, Copy)]
pub struct Where<'a> {
    /// The event.
    pub event: HookEvent,
    /// The turn, when inside one.
    pub turn_id: Option<&'a str>,
    /// The tool call, for a tool's event.
    pub call_id: Option<&'a str>,
    /// Its working directory.
    pub cwd: &'a Path,
    /// Variables added to its environment.
    pub env: &'a [(&'static str, String)],
    /// Confined as commands are (in the sandbox); false for the operator's host hooks, which the supervisor runs.
    pub confine: bool,
}

/// Runs one hook with `input` on its stdin, journaled through `emit` as `hook_started` and `hook_finished`, and
/// reads its answer.
pub async fn run_one<F: std::future::Future<Output = ()>>(
    spec: &HookSpec,
    at: Where<'_>,
    input: &[u8],
    cancel: &CancellationToken,
    emit: impl Fn(EventPayload) -> F,
) -> (HookRef, Answer) {
    let hook_id = uuid::Uuid::new_v4().to_string();
    let hook = HookRef {
        source: spec.source,
        command: spec.command.clone(),
    };
    emit(EventPayload::HookStarted {
        turn_id: at.turn_id.map(str::to_string),
        hook_id: hook_id.clone(),
        event: at.event,
        hook: hook.clone(),
        call_id: at.call_id.map(str::to_string),
    })
    .await;
    let ran = run::run(
        run::Launch {
            command: &spec.command,
            cwd: at.cwd,
            env: at.env,
            input,
            timeout: Duration::from_millis(spec.timeout_ms),
            confine: at.confine,
        },
        cancel,
    )
    .await;
    let answer = answer::read(at.event, spec, &ran);
    emit(EventPayload::HookFinished {
        turn_id: at.turn_id.map(str::to_string),
        hook_id,
        event: at.event,
        hook: hook.clone(),
        matcher: spec.matcher.clone(),
        exit_code: ran.exit_code,
        timed_out: ran.timed_out,
        decision: answer.decision.map(|d| d.as_str().to_string()),
        reason: answer.reason.as_deref().map(|r| {
            let kept = crate::tools::clip(r, MAX_EVENT_REASON);
            if kept.len() < r.len() {
                format!("{kept}…")
            } else {
                kept.to_string()
            }
        }),
        duration_ms: ran.duration.as_millis() as u64,
    })
    .await;
    (hook, answer)
}

/// Writes `bytes` to `path` whole, read-only, in a directory only this user may change. Without a sandbox the
/// directory is in the host's shared `/tmp`, where another user could have made it, or a link in it: such a
/// directory is refused, and the file is created anew (`O_EXCL` never follows a link) and renamed into place.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
    let dir = path.parent().unwrap_or(Path::new("."));
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    let meta = std::fs::symlink_metadata(dir)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() || meta.mode() & 0o022 != 0 {
        return Err(std::io::Error::other(format!(
            "{} is not a directory of this user's alone",
            dir.display()
        )));
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&tmp)?;
    file.write_all(bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_transcript_is_not_written_through_a_directory_someone_else_planted_as_a_link() {
        let root = tempfile::TempDir::new().unwrap();
        let elsewhere = root.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        let planted = root.path().join(".service-hooks");
        std::os::unix::fs::symlink(&elsewhere, &planted).unwrap();
        assert!(write_private(&planted.join("s.jsonl"), b"secret\n").is_err());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
        let own = root.path().join("own");
        write_private(&own.join("s.jsonl"), b"one\n").unwrap();
        // A link planted where the file goes is replaced, not followed.
        std::os::unix::fs::symlink(elsewhere.join("victim"), own.join("s.tmp")).unwrap();
        write_private(&own.join("s.jsonl"), b"two\n").unwrap();
        assert_eq!(
            std::fs::read_to_string(own.join("s.jsonl")).unwrap(),
            "two\n"
        );
        assert!(!elsewhere.join("victim").exists());
    }
}
