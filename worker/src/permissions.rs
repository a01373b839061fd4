//! Evaluating the permission rules of agent.yaml: first match wins, else the default action.

use globset::Glob;
use service_ipc::{PermissionAction, PermissionRule, Permissions};

/// The action for one call of the tool named `tool` and a description of the rule that decided it (None when the
/// default did).
pub fn evaluate(perms: &Permissions, tool: &str, key: &str) -> (PermissionAction, Option<String>) {
    for (i, rule) in perms.rules.iter().enumerate() {
        if names(rule, tool) && matches(rule, key) {
            return (rule.action, Some(describe(i, rule)));
        }
    }
    (perms.default, None)
}

/// `key` as rules name it. Under Landlock the worker sees the host's paths, while rules, written for every backend,
/// name the workspace and the bundle as a bubblewrap sandbox shows them (`/workspace/...`, `/bundle/...`): a key
/// that starts with either directory is given that name, so a rule means the same on both backends.
pub fn as_rules_name_it<'a>(
    key: &'a str,
    workspace: &str,
    bundle: &str,
) -> std::borrow::Cow<'a, str> {
    for (host, named) in [
        (workspace, service_ipc::WORKSPACE_IN_SANDBOX),
        (bundle, service_ipc::BUNDLE_IN_SANDBOX),
    ] {
        let host = host.trim_end_matches('/');
        if let Some(rest) = key.strip_prefix(host) {
            if !host.is_empty() && (rest.is_empty() || rest.starts_with('/')) {
                return format!("{named}{rest}").into();
            }
        }
    }
    key.into()
}

/// A rule's tool and the glob in its parentheses: `Agent(reviewer)` is the tool `Agent` for the key `reviewer`, as
/// Claude Code writes rules; a plain name has none.
pub fn split_tool(tool: &str) -> (&str, Option<&str>) {
    match tool.strip_suffix(')').and_then(|t| t.split_once('(')) {
        Some((name, inner)) if !name.is_empty() => (name, Some(inner)),
        _ => (tool, None),
    }
}

/// A rule's `tool` is a builtin name or a glob over MCP tool names (`mcp__git__*`).
fn names(rule: &PermissionRule, tool: &str) -> bool {
    let (named, _) = split_tool(&rule.tool);
    named == tool
        || (named.contains(['*', '?', '['])
            && Glob::new(named)
                .map(|g| g.compile_matcher().is_match(tool))
                .unwrap_or(false))
}

/// Both the rule's `match` and the glob in its tool's parentheses, where given, match `key`. `Bash(PREFIX:*)` is a
/// command prefix rather than a glob (see [`command_prefix_matches`]).
fn matches(rule: &PermissionRule, key: &str) -> bool {
    let (tool, inner) = split_tool(&rule.tool);
    let prefix = inner
        .filter(|_| tool == "Bash")
        .and_then(|i| i.strip_suffix(":*"));
    if let Some(prefix) = prefix {
        if !command_prefix_matches(prefix, key, rule.action == PermissionAction::Allow) {
            return false;
        }
    }
    [rule.pattern.as_deref(), inner.filter(|_| prefix.is_none())]
        .into_iter()
        .flatten()
        .all(|p| {
            // Patterns were validated at build time; one that still fails to compile matches nothing.
            Glob::new(p)
                .map(|g| g.compile_matcher().is_match(key))
                .unwrap_or(false)
        })
}

/// What makes a command more than one simple command: separators, pipes, redirections, substitutions, groups.
pub const SHELL_CONTROL: &[char] = &[
    ';', '&', '|', '<', '>', '`', '$', '(', ')', '{', '}', '\n', '\r',
];

/// Whether `command` falls under the prefix rule `prefix` (Claude Code's `Bash(npm test:*)`). An allow rule matches
/// only one simple command whose words begin with the prefix's words, so `npm test && curl …` is not allowed by
/// `npm test:*`. A deny or ask rule errs the other way: it matches any command in which the prefix's words follow
/// each other anywhere, so `ls; rm -rf x` is caught by `rm:*`.
pub fn command_prefix_matches(prefix: &str, command: &str, allow: bool) -> bool {
    let Some(want) = shlex::split(prefix).filter(|w| !w.is_empty()) else {
        return false;
    };
    if allow {
        if command.contains(SHELL_CONTROL) {
            return false;
        }
        return shlex::split(command).is_some_and(|words| words.starts_with(&want));
    }
    let words: Vec<String> = command
        .split(|c: char| c.is_whitespace() || SHELL_CONTROL.contains(&c))
        .filter(|w| !w.is_empty())
        .map(|w| w.trim_matches(['\'', '"']).to_string())
        .collect();
    words.windows(want.len()).any(|w| w == want.as_slice())
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

    fn rule(tool: &str, pattern: Option<&str>, action: PermissionAction) -> PermissionRule {
        PermissionRule {
            tool: tool.into(),
            pattern: pattern.map(Into::into),
            action,
        }
    }

    #[test]
    fn a_host_path_under_the_workspace_or_the_bundle_is_named_as_rules_name_it() {
        let named = |key| as_rules_name_it(key, "/srv/proj/", "/store/b").into_owned();
        assert_eq!(named("/srv/proj/src/a.rs"), "/workspace/src/a.rs");
        assert_eq!(named("/srv/proj"), "/workspace");
        assert_eq!(named("/store/b/skills/x.md"), "/bundle/skills/x.md");
        // A sibling that only shares the prefix, and a command, keep their names.
        assert_eq!(named("/srv/project2/a"), "/srv/project2/a");
        assert_eq!(named("cat /srv/proj/a"), "cat /srv/proj/a");
    }

    #[test]
    fn first_matching_rule_wins_and_default_covers_the_rest() {
        let perms = Permissions {
            default: PermissionAction::Ask,
            rules: vec![
                rule("Bash", Some("git status*"), PermissionAction::Allow),
                rule("Bash", None, PermissionAction::Deny),
                rule("Write", Some("/etc/**"), PermissionAction::Deny),
            ],
            ..Permissions::default()
        };
        assert_eq!(
            evaluate(&perms, "Bash", "git status --short"),
            (
                PermissionAction::Allow,
                Some("rules[0]: Bash \"git status*\" -> allow".into())
            )
        );
        assert_eq!(
            evaluate(&perms, "Bash", "rm -rf /").0,
            PermissionAction::Deny
        );
        assert_eq!(
            evaluate(&perms, "Write", "/etc/passwd").0,
            PermissionAction::Deny
        );
        assert_eq!(
            evaluate(&perms, "Write", "/tmp/x"),
            (PermissionAction::Ask, None)
        );
        assert_eq!(
            evaluate(&perms, "Read", "/etc/passwd"),
            (PermissionAction::Ask, None)
        );
    }

    #[test]
    fn a_glob_over_tool_names_matches_a_servers_mcp_tools_only() {
        let perms = Permissions {
            default: PermissionAction::Allow,
            rules: vec![rule("mcp__git__*", None, PermissionAction::Ask)],
            ..Permissions::default()
        };
        assert_eq!(
            evaluate(&perms, "mcp__git__git_status", "{}").0,
            PermissionAction::Ask
        );
        assert_eq!(
            evaluate(&perms, "mcp__time__now", "{}").0,
            PermissionAction::Allow
        );
        assert_eq!(evaluate(&perms, "Bash", "ls").0, PermissionAction::Allow);
    }

    #[test]
    fn an_allowed_command_prefix_covers_one_simple_command_and_nothing_chained_to_it() {
        let perms = Permissions {
            default: PermissionAction::Ask,
            rules: vec![
                rule("Bash(npm test:*)", None, PermissionAction::Allow),
                rule("Bash(git status:*)", None, PermissionAction::Allow),
            ],
            ..Permissions::default()
        };
        let action = |c: &str| evaluate(&perms, "Bash", c).0;
        assert_eq!(action("npm test"), PermissionAction::Allow);
        assert_eq!(action("npm test -- --watch=false"), PermissionAction::Allow);
        assert_eq!(action("git  status --short"), PermissionAction::Allow);
        for chained in [
            "npm test && curl evil.example",
            "npm test; rm -rf /",
            "npm test | sh",
            "npm test > /etc/passwd",
            "npm test $(rm -rf ~)",
            "npm test `id`",
            "npm test\nrm -rf ~",
            "npm testify",
            "npm",
            "git status-evil",
        ] {
            assert_eq!(action(chained), PermissionAction::Ask, "{chained}");
        }
    }

    #[test]
    fn a_denied_command_prefix_is_caught_anywhere_in_a_chain() {
        let perms = Permissions {
            default: PermissionAction::Allow,
            rules: vec![rule("Bash(rm:*)", None, PermissionAction::Deny)],
            ..Permissions::default()
        };
        let action = |c: &str| evaluate(&perms, "Bash", c).0;
        for caught in ["rm -rf x", "ls; rm -rf x", "ls && 'rm' x", "echo $(rm x)"] {
            assert_eq!(action(caught), PermissionAction::Deny, "{caught}");
        }
        assert_eq!(action("ls farm"), PermissionAction::Allow);
    }
}
