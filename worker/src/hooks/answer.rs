//! Reading a hook's answer: its exit code, stderr and stdout (plain text, or the JSON object of the peers'
//! contract), for the event it ran on; and the one verdict of all the hooks of a point.

use serde_json::Value;
use service_ipc::{HookEvent, HookRef, HookSpec};

use super::run::Ran;

/// What hooks decided about a point, strongest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Decision {
    /// A tool call is refused (`PreToolUse`, `PermissionRequest`).
    Deny,
    /// The point's work stops there: a prompt is dropped, a turn goes on instead of ending, a tool's result gets
    /// the hook's reason.
    Block,
    /// The call is put to the user even where the rules allow it.
    Ask,
    /// The call is allowed (a `PermissionRequest` answered).
    Allow,
    /// The hook added context for the model.
    Context,
    /// The hook failed, or said something for the user; nothing else changes.
    Warning,
}

impl Decision {
    /// As `hook_finished` spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Deny => "deny",
            Decision::Block => "block",
            Decision::Ask => "ask",
            Decision::Allow => "allow",
            Decision::Context => "context",
            Decision::Warning => "warning",
        }
    }
}

/// One hook's answer.
#[derive(Debug, Default)]
pub struct Answer {
    /// Its decision, if it made one.
    pub decision: Option<Decision>,
    /// Why, or what it said.
    pub reason: Option<String>,
    /// Text for the model's context.
    pub context: Option<String>,
    /// The tool input it asks the call to run with instead (`PreToolUse`).
    pub updated_input: Option<Value>,
}

/// The answers of a point's hooks together.
#[derive(Debug, Default)]
pub struct Verdict {
    /// The strongest decision (deny, block, ask, allow) any hook made; None when none did.
    pub decision: Option<Decision>,
    /// The reason of the hook that made it.
    pub reason: Option<String>,
    /// The hook that made it.
    pub by: Option<HookRef>,
    /// Context the hooks added, in their order.
    pub context: Vec<String>,
    /// The last tool input a hook asked for.
    pub updated_input: Option<Value>,
}

impl Verdict {
    /// The verdict of a point's answers: the strongest decision, and every hook's context.
    pub fn of(answers: Vec<(HookRef, Answer)>) -> Verdict {
        let mut verdict = Verdict::default();
        for (hook, answer) in answers {
            if let Some(c) = answer.context.filter(|c| !c.trim().is_empty()) {
                verdict.context.push(c);
            }
            if answer.updated_input.is_some() {
                verdict.updated_input = answer.updated_input;
            }
            let Some(decision) = answer.decision.filter(|d| *d <= Decision::Allow) else {
                continue;
            };
            if verdict.decision.is_none_or(|d| decision < d) {
                verdict.decision = Some(decision);
                verdict.reason = answer.reason;
                verdict.by = Some(hook);
            }
        }
        verdict
    }

    /// The context the hooks added, as one block for the model; None when they added none.
    pub fn context_text(&self, event: HookEvent) -> Option<String> {
        (!self.context.is_empty()).then(|| {
            format!(
                "<hook-context event=\"{}\">\n{}\n</hook-context>",
                event.as_str(),
                self.context.join("\n")
            )
        })
    }

    /// The reason given, or one naming the hook.
    pub fn reason_or(&self, what: &str) -> String {
        match (&self.reason, &self.by) {
            (Some(r), _) if !r.trim().is_empty() => r.trim().to_string(),
            (_, Some(h)) => format!("{what} by the {} hook `{}`", h.source, h.command),
            _ => what.to_string(),
        }
    }
}

/// Whether a failure of a hook on `event` blocks what it guards: a tool call cannot go on unchecked.
fn guards(event: HookEvent) -> bool {
    matches!(event, HookEvent::PreToolUse | HookEvent::PermissionRequest)
}

/// What a block on `event` is: a refused call before a tool runs, a blocked point elsewhere, and only a warning
/// where nothing can be blocked.
fn blocking(event: HookEvent) -> Decision {
    match event {
        HookEvent::PreToolUse | HookEvent::PermissionRequest => Decision::Deny,
        HookEvent::PostToolUse
        | HookEvent::PostToolUseFailure
        | HookEvent::UserPromptSubmit
        | HookEvent::Stop
        | HookEvent::SubagentStop => Decision::Block,
        _ => Decision::Warning,
    }
}

/// Reads one hook run for `event`.
pub(super) fn read(event: HookEvent, spec: &HookSpec, ran: &Ran) -> Answer {
    let failed = |why: String| Answer {
        decision: Some(if guards(event) {
            Decision::Deny
        } else {
            Decision::Warning
        }),
        reason: Some(why),
        ..Answer::default()
    };
    if let Some(e) = &ran.spawn_error {
        return failed(e.clone());
    }
    if ran.timed_out {
        return failed(format!(
            "the hook `{}` did not finish within {} ms and was stopped",
            spec.command, spec.timeout_ms
        ));
    }
    let stderr = ran.stderr.trim();
    match ran.exit_code {
        Some(0) => {}
        Some(2) => return block(event, stderr, spec),
        Some(_) if spec.fail_closed => return block(event, stderr, spec),
        None if spec.fail_closed || guards(event) => {
            return failed(format!("the hook `{}` was killed", spec.command))
        }
        code => {
            let code = code.map_or("a signal".to_string(), |c| format!("exit code {c}"));
            return Answer {
                decision: Some(Decision::Warning),
                reason: Some(if stderr.is_empty() {
                    format!("the hook `{}` ended with {code}", spec.command)
                } else {
                    stderr.to_string()
                }),
                ..Answer::default()
            };
        }
    }
    let stdout = ran.stdout.trim();
    match serde_json::from_str::<Value>(stdout) {
        Ok(Value::Object(obj)) => read_json(event, &Value::Object(obj)),
        // Plain stdout is context where the peers make it so, and only shown elsewhere.
        _ if matches!(event, HookEvent::SessionStart | HookEvent::UserPromptSubmit)
            && !stdout.is_empty() =>
        {
            Answer {
                decision: Some(Decision::Context),
                context: Some(stdout.to_string()),
                ..Answer::default()
            }
        }
        _ => Answer::default(),
    }
}

fn block(event: HookEvent, stderr: &str, spec: &HookSpec) -> Answer {
    Answer {
        decision: Some(blocking(event)),
        reason: Some(if stderr.is_empty() {
            format!("blocked by the hook `{}`", spec.command)
        } else {
            stderr.to_string()
        }),
        ..Answer::default()
    }
}

/// The JSON answer of the peers' contract.
fn read_json(event: HookEvent, out: &Value) -> Answer {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    let specific = out.get("hookSpecificOutput").unwrap_or(&Value::Null);
    let mut answer = Answer {
        context: text(specific, "additionalContext"),
        ..Answer::default()
    };
    if answer.context.is_some() {
        answer.decision = Some(Decision::Context);
    }
    if let Some(message) = text(out, "systemMessage") {
        answer.decision.get_or_insert(Decision::Warning);
        answer.reason = Some(message);
    }
    // `continue: false` stops what the point would do, with `stopReason`.
    if out.get("continue").and_then(Value::as_bool) == Some(false) {
        answer.decision = Some(blocking(event));
        answer.reason = text(out, "stopReason").or(answer.reason);
        return answer;
    }
    match event {
        HookEvent::PreToolUse => {
            let decided = text(specific, "permissionDecision").or_else(|| {
                // The older top-level form: `decision: approve|block`.
                text(out, "decision").map(|d| match d.as_str() {
                    "approve" => "allow".to_string(),
                    "block" => "deny".to_string(),
                    other => other.to_string(),
                })
            });
            let reason = text(specific, "permissionDecisionReason").or_else(|| text(out, "reason"));
            match decided.as_deref() {
                Some("deny") => set(&mut answer, Decision::Deny, reason),
                Some("ask") => set(&mut answer, Decision::Ask, reason),
                Some("allow") => set(&mut answer, Decision::Allow, reason),
                _ => {}
            }
            answer.updated_input = specific
                .get("updatedInput")
                .filter(|v| v.is_object())
                .cloned();
        }
        HookEvent::PermissionRequest => {
            let decision = specific.get("decision").unwrap_or(&Value::Null);
            let message = text(decision, "message");
            match text(decision, "behavior").as_deref() {
                Some("allow") => set(&mut answer, Decision::Allow, message),
                Some("deny") => set(&mut answer, Decision::Deny, message),
                _ => {}
            }
        }
        _ => {
            if text(out, "decision").as_deref() == Some("block") {
                set(&mut answer, blocking(event), text(out, "reason"));
            }
        }
    }
    answer
}

fn set(answer: &mut Answer, decision: Decision, reason: Option<String>) {
    answer.decision = Some(decision);
    if reason.is_some() {
        answer.reason = reason;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_ipc::HookSource;

    fn spec(fail_closed: bool) -> HookSpec {
        HookSpec {
            event: HookEvent::PreToolUse,
            matcher: None,
            command: "hook".into(),
            timeout_ms: 1000,
            fail_closed,
            source: HookSource::Bundle,
        }
    }

    fn ran(code: Option<i32>, stdout: &str, stderr: &str) -> Ran {
        Ran {
            exit_code: code,
            stdout: stdout.into(),
            stderr: stderr.into(),
            ..Ran::default()
        }
    }

    #[test]
    fn exit_two_blocks_with_stderr_and_other_codes_warn_unless_fail_closed() {
        let a = read(
            HookEvent::PreToolUse,
            &spec(false),
            &ran(Some(2), "", "no rm\n"),
        );
        assert_eq!(
            (a.decision, a.reason.as_deref()),
            (Some(Decision::Deny), Some("no rm"))
        );
        let a = read(
            HookEvent::PreToolUse,
            &spec(false),
            &ran(Some(1), "", "oops"),
        );
        assert_eq!(a.decision, Some(Decision::Warning));
        let a = read(
            HookEvent::PreToolUse,
            &spec(true),
            &ran(Some(1), "", "oops"),
        );
        assert_eq!(a.decision, Some(Decision::Deny));
        let a = read(
            HookEvent::Stop,
            &spec(false),
            &ran(Some(2), "", "keep going"),
        );
        assert_eq!(a.decision, Some(Decision::Block));
    }

    #[test]
    fn a_hook_that_timed_out_refuses_the_call_it_guards_and_only_warns_elsewhere() {
        let timed_out = Ran {
            timed_out: true,
            ..Ran::default()
        };
        assert_eq!(
            read(HookEvent::PreToolUse, &spec(false), &timed_out).decision,
            Some(Decision::Deny)
        );
        assert_eq!(
            read(HookEvent::PostToolUse, &spec(false), &timed_out).decision,
            Some(Decision::Warning)
        );
    }

    #[test]
    fn the_peers_json_answers_are_read_per_event() {
        let pre = r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny",
            "permissionDecisionReason":"not here","updatedInput":{"command":"ls"}}}"#;
        let a = read(HookEvent::PreToolUse, &spec(false), &ran(Some(0), pre, ""));
        assert_eq!(a.decision, Some(Decision::Deny));
        assert_eq!(a.reason.as_deref(), Some("not here"));
        assert_eq!(a.updated_input, Some(serde_json::json!({"command": "ls"})));
        let perm = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest",
            "decision":{"behavior":"allow"}}}"#;
        let a = read(
            HookEvent::PermissionRequest,
            &spec(false),
            &ran(Some(0), perm, ""),
        );
        assert_eq!(a.decision, Some(Decision::Allow));
        let stop = r#"{"decision":"block","reason":"run the tests first"}"#;
        let a = read(HookEvent::Stop, &spec(false), &ran(Some(0), stop, ""));
        assert_eq!(
            (a.decision, a.reason.as_deref()),
            (Some(Decision::Block), Some("run the tests first"))
        );
        let start = read(
            HookEvent::SessionStart,
            &spec(false),
            &ran(Some(0), "branch: main\n", ""),
        );
        assert_eq!(start.context.as_deref(), Some("branch: main"));
        let post = r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"formatted"}}"#;
        let a = read(
            HookEvent::PostToolUse,
            &spec(false),
            &ran(Some(0), post, ""),
        );
        assert_eq!(a.context.as_deref(), Some("formatted"));
    }

    #[test]
    fn a_deny_of_one_hook_outweighs_an_allow_of_another() {
        let hook = |c: &str| HookRef {
            source: HookSource::Bundle,
            command: c.into(),
        };
        let answer = |d| Answer {
            decision: Some(d),
            ..Answer::default()
        };
        let v = Verdict::of(vec![
            (hook("a"), answer(Decision::Allow)),
            (hook("b"), answer(Decision::Deny)),
            (hook("c"), answer(Decision::Warning)),
        ]);
        assert_eq!(v.decision, Some(Decision::Deny));
        assert_eq!(v.by.map(|h| h.command), Some("b".to_string()));
    }
}
