//! `subagents` of agent.yaml: other bundles the model may hand a task to with the `Agent` tool. Each call runs as a
//! child session (see `runtime::subagents`), confined by the child bundle's manifest cut down to the parent's.
//!
//! ```yaml
//! subagents:
//!   - { name: reviewer, bundle: reviewer@latest, description: Reviews a diff, max_steps: 8 }
//!   - { name: scratch, bundle: ./helper, description: Tries things on a copy, isolation: copy }
//! ```
//! or `subagents: ["*"]` for any bundle in the store, by its name.

use serde::{Deserialize, Serialize};

/// One entry of `subagents`: a named subagent, or `"*"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum SubagentEntry {
    /// `"*"`: any installed bundle, by name.
    Any(String),
    /// A named subagent.
    Named(SubagentSpec),
}

/// A named subagent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentSpec {
    /// The name the `Agent` call gives.
    pub name: String,
    /// The bundle it runs: a store or registry reference, or a directory.
    pub bundle: String,
    /// What it is for, as the model reads it.
    pub description: String,
    /// Model calls its turn may make; the child bundle's own `max_steps` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// The model it runs with; the child bundle's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<super::model::AgentModel>,
    /// `shared` (default): it works in the parent's workspace; `copy`: in a copy of it.
    #[serde(default)]
    pub isolation: Isolation,
}

/// Where a subagent works.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// In the parent's workspace (read-only when the parent's is).
    #[default]
    Shared,
    /// In a copy of the parent's workspace, made for the call.
    Copy,
}

/// Checks `subagents`; the error is (key, message).
pub fn validate(entries: &[SubagentEntry]) -> Result<(), (String, String)> {
    for (i, entry) in entries.iter().enumerate() {
        let key = |k: &str| format!("subagents[{i}]{k}");
        match entry {
            SubagentEntry::Any(s) if s == "*" => {
                if entries.len() > 1 {
                    return Err((
                        key(""),
                        "\"*\" already allows every installed bundle; list it alone".into(),
                    ));
                }
            }
            SubagentEntry::Any(s) => {
                return Err((
                    key(""),
                    format!(
                    "\"{s}\" is not a subagent; give {{name, bundle, description}}, or \"*\" alone"
                ),
                ))
            }
            SubagentEntry::Named(spec) => {
                if !is_name(&spec.name) {
                    return Err((
                        key(".name"),
                        format!(
                            "\"{}\" is not a name; use 1 to 48 letters, digits, _ or -",
                            spec.name
                        ),
                    ));
                }
                if entries[..i]
                    .iter()
                    .any(|e| matches!(e, SubagentEntry::Named(s) if s.name == spec.name))
                {
                    return Err((key(".name"), format!("\"{}\" is named twice", spec.name)));
                }
                if spec.bundle.trim().is_empty() || spec.bundle.chars().any(char::is_control) {
                    return Err((
                        key(".bundle"),
                        "give a bundle reference: name, name@version, namespace/name:version or a directory"
                            .into(),
                    ));
                }
                if spec.description.trim().is_empty() {
                    return Err((
                        key(".description"),
                        "say what it is for: the model chooses by it".into(),
                    ));
                }
                if let Some(n) = spec.max_steps {
                    if !(1..=1000).contains(&n) {
                        return Err((key(".max_steps"), format!("{n} is out of range 1..=1000")));
                    }
                }
                if let Some(m) = &spec.model {
                    if !super::model::KNOWN_PROVIDERS.contains(&m.provider.as_str()) {
                        return Err((
                            key(".model.provider"),
                            format!(
                                "unknown value \"{}\"; expected one of {}",
                                m.provider,
                                super::model::KNOWN_PROVIDERS.join(", ")
                            ),
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether `name` is a subagent name: 1 to 48 letters, digits, `_` or `-`.
pub fn is_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(name: &str) -> SubagentEntry {
        SubagentEntry::Named(SubagentSpec {
            name: name.into(),
            bundle: "helper".into(),
            description: "helps".into(),
            max_steps: None,
            model: None,
            isolation: Isolation::Shared,
        })
    }

    #[test]
    fn names_must_be_valid_and_distinct_and_star_stands_alone() {
        assert!(validate(&[named("a"), named("b-2")]).is_ok());
        assert_eq!(
            validate(&[named("a b")]).unwrap_err().0,
            "subagents[0].name"
        );
        assert_eq!(
            validate(&[named("a"), named("a")]).unwrap_err().0,
            "subagents[1].name"
        );
        assert!(validate(&[SubagentEntry::Any("*".into())]).is_ok());
        assert_eq!(
            validate(&[SubagentEntry::Any("*".into()), named("a")])
                .unwrap_err()
                .0,
            "subagents[0]"
        );
        assert_eq!(
            validate(&[SubagentEntry::Any("x".into())]).unwrap_err().0,
            "subagents[0]"
        );
    }
}
