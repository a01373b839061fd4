//! `model` of agent.yaml: which provider and model a bundle's agent (or a subagent) uses.

use serde::{Deserialize, Serialize};
use service_ipc::ModelRef;

/// Model providers this build knows; `auto` has the supervisor choose one from what the machine has
/// (`providers::choice`).
pub const KNOWN_PROVIDERS: &[&str] = &["anthropic", "openai", "scripted", "auto"];

/// `model` of agent.yaml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AgentModel {
    /// Provider name.
    pub provider: String,
    /// Model name.
    pub name: String,
    /// Provider settings.
    #[serde(default)]
    pub config: Option<serde_json::Value>,
}

impl AgentModel {
    /// The wire form used in turn contexts and model requests.
    pub fn to_ref(&self) -> ModelRef {
        ModelRef {
            provider: self.provider.clone(),
            name: self.name.clone(),
            config: self.config.clone(),
        }
    }
}
