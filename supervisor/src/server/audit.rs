//! The audit trail: for each change to who may do what (tokens made and revoked, quotas set, bundles granted and
//! taken back) and to what runs (bundles installed, pulled, pushed and removed; sessions deleted), an entry appended to the store's audit log (see `tenancy::audit`) and an `audit` log line, naming
//! the actor (its tenant and token id), the client's address (as the access log resolves it, trusted proxies
//! included), the action and what it changed. Token secrets never appear; a token is named by its public id.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use super::access::Identity;
use super::listener::ClientAddr;
use super::state::AppState;
use crate::tenancy::audit::AuditEntry;
use crate::tenancy::Caller;

/// Who asked for a change: the caller `tenants::run_as` put on the request, named as the access log names it, and
/// the client `access::log` resolved. Worked out only by the handlers that change something.
#[derive(Clone)]
pub struct Actor {
    identity: Option<Identity>,
    client: Option<String>,
    directory: std::sync::Arc<dyn crate::tenancy::Directory>,
}

impl FromRequestParts<AppState> for Actor {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Self::Rejection> {
        let identity = parts
            .extensions
            .get::<Caller>()
            .map(|caller| super::tenants::identity(st, caller, &parts.headers));
        // A request another node forwarded names the client that node served.
        let client = match super::tenants::from_peer(st, &parts.headers) {
            true => parts
                .headers
                .get(&super::tenants::ACTOR_CLIENT)
                .and_then(|v| v.to_str().ok()?.parse::<std::net::IpAddr>().ok())
                .map(|ip| ip.to_string()),
            false => parts
                .extensions
                .get::<ClientAddr>()
                .map(|c| c.0.ip().to_string()),
        };
        Ok(Actor {
            identity,
            client,
            directory: st.rt.tenancy().directory().clone(),
        })
    }
}

impl Actor {
    /// Records a change to the installed bundles (see [`Actor::record`]), naming the bundle by reference and
    /// digest.
    pub async fn record_bundle(
        &self,
        action: &str,
        bundle: &crate::bundle::BundleInfo,
        mut detail: serde_json::Value,
    ) {
        detail["digest"] = serde_json::Value::String(bundle.digest.clone());
        self.record(action, &bundle.reference, detail).await;
    }

    /// Records that this actor did `action` to `object` (a tenant, a token id, a grant), with `detail`: in the
    /// store's audit log and as a log line. The change is made by then; an entry that cannot be stored is logged
    /// as an error with everything it held.
    pub async fn record(&self, action: &str, object: &str, detail: serde_json::Value) {
        let mut entry = AuditEntry::now(action, object, detail);
        entry.actor_tenant = self.identity.as_ref().map(|i| i.tenant.clone());
        entry.actor_token = self.identity.as_ref().map(|i| i.token_id.clone());
        entry.client = self.client.clone();
        tracing::info!(
            action,
            object,
            detail = %entry.detail,
            actor_tenant = entry.actor_tenant.as_deref(),
            actor_token = entry.actor_token.as_deref(),
            client = entry.client.as_deref(),
            "audit"
        );
        if let Err(e) = self.directory.append_audit(&entry).await {
            tracing::error!(action, object, error = %e, "the audit entry above was not stored");
        }
    }
}
