//! The audit log: one entry for each change to who may do what (tokens made and revoked, quotas set, bundles
//! granted and taken back), kept in the store beside the tokens and only ever appended to: `audit.jsonl` in a files
//! store, the `audit` table in PostgreSQL. `GET /audit` and `service-rs audit` read it.

use serde::{Deserialize, Serialize};

/// One change and who made it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// Its place in the log, from 1.
    #[serde(default)]
    pub seq: u64,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// The actor's tenant; absent for a local command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_tenant: Option<String>,
    /// The actor's token: its public id, `server` for the server's own, `cli` for a local command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor_token: Option<String>,
    /// Where it came from: the client's address, or `local <user>` for a local command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// What was done: `token_created`, `token_revoked`, `quota_set`, `bundle_granted`, `bundle_ungranted`.
    pub action: String,
    /// What it was done to: a token id or a tenant.
    pub object: String,
    /// What changed.
    #[schema(value_type = Object)]
    pub detail: serde_json::Value,
}

impl AuditEntry {
    /// An entry made now (its `seq` is the store's to give); no detail is an empty object.
    pub fn now(action: &str, object: &str, detail: serde_json::Value) -> AuditEntry {
        let detail = match detail {
            serde_json::Value::Null => serde_json::json!({}),
            detail => detail,
        };
        AuditEntry {
            seq: 0,
            at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            actor_tenant: None,
            actor_token: None,
            client: None,
            action: action.to_string(),
            object: object.to_string(),
            detail,
        }
    }

    /// The same change made by a local command (`service-rs tokens …` on the store), as the user running it.
    pub fn local(mut self) -> AuditEntry {
        let user = std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| format!("uid {}", nix::unistd::getuid()));
        self.actor_token = Some("cli".into());
        self.client = Some(format!("local {user}"));
        self
    }
}
