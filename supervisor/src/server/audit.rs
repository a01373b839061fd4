//! The audit trail: one `audit` log line for each change to who may do what (tokens made and revoked, quotas set,
//! bundles granted and taken back), naming the actor (its tenant and token id), the client's address (as the
//! access log resolves it, trusted proxies included), the action and what it changed. Token secrets never appear;
//! a token is named by its public id.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::access::Identity;
use super::listener::ClientAddr;
use super::state::AppState;
use crate::tenancy::Caller;

/// Who asked for a change: the caller `tenants::run_as` put on the request, named as the access log names it, and
/// the client `access::log` resolved. Worked out only by the handlers that change something.
#[derive(Debug, Clone)]
pub struct Actor {
    identity: Option<Identity>,
    client: Option<String>,
}

impl FromRequestParts<AppState> for Actor {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Self::Rejection> {
        let identity = parts
            .extensions
            .get::<Caller>()
            .map(|caller| super::tenants::identity(st, caller, &parts.headers));
        Ok(Actor {
            identity,
            client: parts
                .extensions
                .get::<ClientAddr>()
                .map(|c| c.0.ip().to_string()),
        })
    }
}

impl Actor {
    /// Logs that this actor did `action` to `object` (a tenant, a token id, a grant), with `detail`.
    pub fn record(&self, action: &str, object: &str, detail: serde_json::Value) {
        tracing::info!(
            action,
            object,
            detail = %detail,
            actor_tenant = self.identity.as_ref().map(|i| i.tenant.as_str()),
            actor_token = self.identity.as_ref().map(|i| i.token_id.as_str()),
            client = self.client.as_deref(),
            "audit"
        );
    }
}
