//! Hook declarations as Claude Code and codex write them: `event → [{matcher, hooks: [{type, command, timeout}]}]`.
//! A bundle declares them under `hooks` in agent.yaml or in `hooks/hooks.json` (`{"hooks": {...}}`, a plugin's
//! layout); a project in `.service/hooks.json`. Only `command` hooks run here; `timeout` is in seconds, as the
//! peers write it; `fail_closed: true` makes any non-zero exit a block.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use service_ipc::{HookEvent, HookSource, HookSpec};

/// A hook's time-out when it gives none, in seconds (Claude Code's default).
pub const DEFAULT_TIMEOUT_SECS: f64 = 60.0;
/// The longest time-out a hook may ask for, in seconds.
pub const MAX_TIMEOUT_SECS: f64 = 600.0;
/// Where a bundle may keep its hooks besides agent.yaml.
pub const BUNDLE_HOOKS_FILE: &str = "hooks/hooks.json";

/// Hooks by event.
pub type HookMap = BTreeMap<HookEvent, Vec<HookGroup>>;

/// The hooks of one matcher.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookGroup {
    /// Tool names it runs for, as a regular expression (`Edit|Write`), or `Bash(PREFIX:*)`; every call when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// Its commands.
    pub hooks: Vec<HookHandler>,
}

/// One hook command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HookHandler {
    /// `command`, the only kind that runs here.
    #[serde(rename = "type", default = "command_kind")]
    pub kind: String,
    /// The command line, run by the shell in the session's workspace.
    pub command: String,
    /// Seconds it may run; 60 when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<f64>,
    /// Any non-zero exit blocks, not only 2.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fail_closed: bool,
    /// Where it runs: the session's sandbox, or (only the operator's `PermissionRequest` hooks) the host.
    #[serde(default, skip_serializing_if = "RunsIn::is_sandbox")]
    pub run: RunsIn,
}

/// Where a hook runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunsIn {
    /// In the session's sandbox, started by the worker.
    #[default]
    Sandbox,
    /// On the host, started by the supervisor: the operator's `PermissionRequest` hooks that must reach what the
    /// sandbox cannot (an approval service), and only those.
    Host,
}

impl RunsIn {
    fn is_sandbox(&self) -> bool {
        *self == RunsIn::Sandbox
    }
}

fn command_kind() -> String {
    "command".into()
}

/// A hooks file: `{"hooks": {...}}`, with an optional description.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HooksFile {
    /// What the hooks are for.
    #[serde(default)]
    pub description: Option<String>,
    /// The hooks.
    #[serde(default)]
    pub hooks: HookMap,
}

/// What is wrong with a declaration: the key (`PreToolUse[0].hooks[1].timeout`) and why.
pub type Invalid = (String, String);

/// Checks every declaration of `hooks`; `host` says whether they may run on the host (the operator's may).
pub fn validate(hooks: &HookMap, host: bool) -> Result<(), Invalid> {
    for (event, groups) in hooks {
        for (i, group) in groups.iter().enumerate() {
            let at = format!("{event}[{i}]");
            // The worker's own reading of a matcher, so that what is accepted here is what runs there.
            let matcher = service_worker::hooks::Matcher::parse(group.matcher.as_deref())
                .map_err(|why| (format!("{at}.matcher"), why))?;
            let tool_event = matches!(
                event,
                HookEvent::PreToolUse
                    | HookEvent::PermissionRequest
                    | HookEvent::PostToolUse
                    | HookEvent::PostToolUseFailure
            );
            if !matcher.is_any() && !tool_event {
                return Err((
                    format!("{at}.matcher"),
                    format!("{event} runs for no tool call, so it takes no matcher"),
                ));
            }
            if group.hooks.is_empty() {
                return Err((format!("{at}.hooks"), "lists no hook".into()));
            }
            for (j, h) in group.hooks.iter().enumerate() {
                let at = format!("{at}.hooks[{j}]");
                if h.kind != "command" {
                    return Err((
                        format!("{at}.type"),
                        format!(
                            "\"{}\" hooks do not run in service-rs; only \"command\" hooks do",
                            h.kind
                        ),
                    ));
                }
                if h.run == RunsIn::Host && !host {
                    return Err((
                        format!("{at}.run"),
                        "only the operator's hooks (config.toml) may run on the host".into(),
                    ));
                }
                if h.run == RunsIn::Host && *event != HookEvent::PermissionRequest {
                    return Err((
                        format!("{at}.run"),
                        format!("{event} hooks run in the sandbox; only PermissionRequest hooks may run on the host"),
                    ));
                }
                if h.command.trim().is_empty() {
                    return Err((format!("{at}.command"), "must not be empty".into()));
                }
                if let Some(t) = h.timeout {
                    if !(t > 0.0 && t <= MAX_TIMEOUT_SECS) {
                        return Err((
                            format!("{at}.timeout"),
                            format!("must be more than 0 and at most {MAX_TIMEOUT_SECS} seconds"),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The hooks of `map` that run in the sandbox, as the worker runs them, marked as from `source`, in declaration
/// order.
pub fn specs(map: &HookMap, source: HookSource) -> Vec<HookSpec> {
    specs_in(map, source, RunsIn::Sandbox)
}

/// The hooks of `map` that run in `place`.
pub fn specs_in(map: &HookMap, source: HookSource, place: RunsIn) -> Vec<HookSpec> {
    let mut out = Vec::new();
    for (event, groups) in map {
        for group in groups {
            for h in group.hooks.iter().filter(|h| h.run == place) {
                out.push(HookSpec {
                    event: *event,
                    matcher: group.matcher.clone(),
                    command: h.command.clone(),
                    timeout_ms: (h.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS) * 1000.0) as u64,
                    fail_closed: h.fail_closed,
                    source,
                });
            }
        }
    }
    out
}

/// Adds the groups of `more` after those of `into`.
pub fn merge(into: &mut HookMap, more: HookMap) {
    for (event, groups) in more {
        into.entry(event).or_default().extend(groups);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claude_code_hooks_file_reads_and_unknown_kinds_or_events_are_refused() {
        let file: HooksFile = serde_json::from_str(
            r#"{"hooks": {"PreToolUse": [{"matcher": "Edit|Write", "hooks": [{"type": "command",
                "command": "python3 check.py", "timeout": 5}]}]}}"#,
        )
        .unwrap();
        validate(&file.hooks, false).unwrap();
        let specs = specs(&file.hooks, HookSource::Project);
        assert_eq!(specs[0].timeout_ms, 5000);
        assert_eq!(specs[0].matcher.as_deref(), Some("Edit|Write"));
        let prompt: HooksFile = serde_json::from_str(
            r#"{"hooks": {"Stop": [{"hooks": [{"type": "prompt", "command": "x"}]}]}}"#,
        )
        .unwrap();
        let (key, why) = validate(&prompt.hooks, false).unwrap_err();
        assert_eq!(key, "Stop[0].hooks[0].type");
        assert!(why.contains("only \"command\""), "{why}");
        let unknown = serde_json::from_str::<HooksFile>(r#"{"hooks": {"OnBoot": []}}"#);
        assert!(unknown.unwrap_err().to_string().contains("PreToolUse"));
    }
}
