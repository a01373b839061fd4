//! Evaluating the permission rules of agent.yaml: first match wins, else the default action.

use globset::Glob;
use service_ipc::{BuiltinTool, PermissionAction, PermissionRule, Permissions};

/// The action for one call and a description of the rule that decided it (None when the default did).
pub fn evaluate(
    perms: &Permissions,
    tool: BuiltinTool,
    key: &str,
) -> (PermissionAction, Option<String>) {
    for (i, rule) in perms.rules.iter().enumerate() {
        if rule.tool == tool && matches(rule, key) {
            return (rule.action, Some(describe(i, rule)));
        }
    }
    (perms.default, None)
}

fn matches(rule: &PermissionRule, key: &str) -> bool {
    match &rule.pattern {
        None => true,
        // Patterns were validated at build time; one that still fails to compile matches nothing.
        Some(p) => Glob::new(p)
            .map(|g| g.compile_matcher().is_match(key))
            .unwrap_or(false),
    }
}

/// `rules[i]: Tool "pattern" -> action`, as shown to operators.
pub fn describe(index: usize, rule: &PermissionRule) -> String {
    match &rule.pattern {
        Some(p) => format!("rules[{index}]: {} \"{p}\" -> {}", rule.tool, rule.action),
        None => format!("rules[{index}]: {} -> {}", rule.tool, rule.action),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn rule(tool: BuiltinTool, pattern: Option<&str>, action: PermissionAction) -> PermissionRule {
        PermissionRule {
            tool,
            pattern: pattern.map(Into::into),
            action,
        }
    }

    #[test]
    fn first_matching_rule_wins_and_default_covers_the_rest() {
        let perms = Permissions {
            default: PermissionAction::Ask,
            rules: vec![
                rule(
                    BuiltinTool::Bash,
                    Some("git status*"),
                    PermissionAction::Allow,
                ),
                rule(BuiltinTool::Bash, None, PermissionAction::Deny),
                rule(BuiltinTool::Write, Some("/etc/**"), PermissionAction::Deny),
            ],
            ..Permissions::default()
        };
        assert_eq!(
            evaluate(&perms, BuiltinTool::Bash, "git status --short"),
            (
                PermissionAction::Allow,
                Some("rules[0]: Bash \"git status*\" -> allow".into())
            )
        );
        assert_eq!(
            evaluate(&perms, BuiltinTool::Bash, "rm -rf /").0,
            PermissionAction::Deny
        );
        assert_eq!(
            evaluate(&perms, BuiltinTool::Write, "/etc/passwd").0,
            PermissionAction::Deny
        );
        assert_eq!(
            evaluate(&perms, BuiltinTool::Write, "/tmp/x"),
            (PermissionAction::Ask, None)
        );
        assert_eq!(
            evaluate(&perms, BuiltinTool::Read, "/etc/passwd"),
            (PermissionAction::Ask, None)
        );
    }
}
