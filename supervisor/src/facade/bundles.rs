//! The bundles a facade serves: the one a client names, resolved off the async threads and held to the server's
//! sandbox policy, with "not installed" told apart so each protocol can say it in its own terms.

use axum::http::StatusCode;

use crate::bundle::{self, Bundle};
use crate::server::api::ApiError;
use crate::server::state::AppState;

/// Why a bundle a client named is not served.
pub enum Unserved {
    /// No bundle answers to the reference.
    NotFound,
    /// The policy refuses it, or it could not be read.
    Refused(ApiError),
}

/// Bundle `reference`, when the server's sandbox policy lets clients run it.
pub async fn resolve_allowed(st: &AppState, reference: &str) -> Result<Bundle, Unserved> {
    let home = st.rt.home().clone();
    let policy = st.policy.clone();
    let reference = reference.to_string();
    let resolved = tokio::task::spawn_blocking(move || {
        bundle::resolve(&home, &reference).map(|b| {
            let allowed = crate::server::policy::sandbox(&policy, &b);
            (b, allowed)
        })
    })
    .await
    .map_err(|_| {
        Unserved::Refused(ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "resolving the bundle failed",
        ))
    })?;
    match resolved {
        Ok((b, Ok(()))) => Ok(b),
        Ok((_, Err(e))) => Err(Unserved::Refused(e)),
        Err(bundle::BundleError::NotFound(_)) => Err(Unserved::NotFound),
        Err(e) => Err(Unserved::Refused(e.into())),
    }
}
