//! The input of a turn (`Task`) and the values a turn ran with (`TurnContext`).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::names::SandboxMode;

/// The input of one turn: the prompt and the id that makes a retried submission count once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct Task {
    /// The user prompt.
    pub prompt: String,
    /// Identifies the submission; must be a UUID (a non-UUID string fails to deserialise). A fresh one when
    /// absent, since a client rarely has one of its own.
    #[serde(default = "Uuid::new_v4")]
    pub submission_id: Uuid,
    /// Sent as false in a new turn.
    #[serde(default)]
    pub completed: bool,
}

impl Task {
    /// A new, not yet completed task with a fresh submission id.
    pub fn new(prompt: impl Into<String>) -> Self {
        Task {
            prompt: prompt.into(),
            submission_id: Uuid::new_v4(),
            completed: false,
        }
    }
}

/// A model: provider name, model name and provider-specific configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ModelRef {
    /// Provider name, e.g. `anthropic`, `openai`, `scripted`.
    pub provider: String,
    /// Model name as the provider spells it.
    pub name: String,
    /// Provider-specific settings (for example `base_url`, or the script file of `scripted`): an object.
    #[serde(default)]
    #[cfg_attr(feature = "schema", schema(value_type = Option<Object>))]
    pub config: Option<serde_json::Value>,
}

/// Per-turn overrides of the session's defaults; unset fields keep the default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct TurnOverrides {
    /// Working directory for this turn.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Model for this turn.
    #[serde(default)]
    pub model: Option<ModelRef>,
    /// Input plus output tokens, as the provider reports them, the turn may spend: no model call is made once its
    /// calls have reached it, and the turn ends with `budget_exceeded`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "whole_number"
    )]
    pub max_tokens: Option<u64>,
    /// US dollars the turn may spend at the supervisor's prices: no model call is made once its calls have spent
    /// them, or when the next call's prompt alone would pass them; the turn ends with `budget_exceeded`. A model
    /// the supervisor has no price for is held to its tokens only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost_usd: Option<f64>,
}

/// A count as JSON may write it: `3`, or `3.0` (JSON Schema's integers include it); null for none.
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    use serde::de::Error;
    match Option::<serde_json::Number>::deserialize(d)? {
        None => Ok(None),
        Some(n) => match (n.as_u64(), n.as_f64()) {
            (Some(v), _) => Ok(Some(v)),
            (None, Some(f)) if f.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&f) => {
                Ok(Some(f as u64))
            }
            _ => Err(D::Error::custom(format!(
                "{n} is not a whole number of tokens"
            ))),
        },
    }
}

/// The values that were resolved for a turn and actually ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct TurnContext {
    /// Effective working directory of the turn, as the worker sees it.
    pub cwd: String,
    /// The model that served the turn.
    pub model: ModelRef,
    /// The sandbox mode that confined the turn.
    pub sandbox_mode: SandboxMode,
    /// The project instruction files (`AGENTS.md` and the like) whose text follows the bundle's system prompt, as
    /// host paths; omitted when none was read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<String>,
    /// Reserved; null until approval policies exist beyond per-rule actions.
    #[serde(default)]
    pub approval_policy: Option<serde_json::Value>,
    /// Free-form metadata; omitted when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<serde_json::Map<String, serde_json::Value>>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    #[test]
    fn task_requires_uuid_submission_id() {
        let err = serde_json::from_value::<Task>(json!({"prompt": "hi", "submission_id": "abc"}));
        assert!(err.is_err());
        let ok: Task = serde_json::from_value(json!({
            "prompt": "hi",
            "submission_id": "6f1c1c2e-8f1a-4c59-9d0e-4f4a4f7f0a11",
        }))
        .unwrap();
        assert_eq!(ok.prompt, "hi");
        assert!(!ok.completed);
    }

    #[test]
    fn turn_context_wire_form_has_null_approval_policy_and_no_metadata() {
        let ctx = TurnContext {
            cwd: "/workspace".into(),
            model: ModelRef {
                provider: "scripted".into(),
                name: "demo".into(),
                config: None,
            },
            sandbox_mode: SandboxMode::ReadOnly,
            instructions: Vec::new(),
            approval_policy: None,
            metadata: None,
        };
        assert_eq!(
            serde_json::to_value(&ctx).unwrap(),
            json!({
                "cwd": "/workspace",
                "model": {"provider": "scripted", "name": "demo", "config": null},
                "sandbox_mode": "read_only",
                "approval_policy": null,
            })
        );
    }
}

#[cfg(test)]
mod budget_tests {
    use super::TurnOverrides;

    #[test]
    fn a_token_budget_may_be_written_as_a_whole_float_but_not_a_fraction_or_a_negative() {
        let whole: TurnOverrides = serde_json::from_str(r#"{"max_tokens": 28083.0}"#).unwrap();
        assert_eq!(whole.max_tokens, Some(28083));
        let int: TurnOverrides = serde_json::from_str(r#"{"max_tokens": 7}"#).unwrap();
        assert_eq!(int.max_tokens, Some(7));
        assert!(serde_json::from_str::<TurnOverrides>(r#"{"max_tokens": 1.5}"#).is_err());
        assert!(serde_json::from_str::<TurnOverrides>(r#"{"max_tokens": -1}"#).is_err());
        let none: TurnOverrides = serde_json::from_str(r#"{"max_tokens": null}"#).unwrap();
        assert_eq!(none.max_tokens, None);
    }
}
