//! The checks every request passes before a handler sees it: the `Host` the client asked for (DNS rebinding), the
//! `Origin` of a browser page (cross-site requests) and the body's content type. The bearer token is checked by
//! `server::tenants`.

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

pub use super::admission::{AllowedHosts, StreamCounts, StreamSlot};
use super::api::ApiError;
use super::state::AppState;

fn refuse(status: StatusCode, code: &str, message: String) -> Response {
    ApiError::new(status, code, message).into_response()
}

/// Refuses requests for another host, from a foreign page, or with a non-JSON body.
pub async fn check_request(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let headers = req.headers();
    // HTTP/2 names the host in the request's authority (`:authority`) and may send no Host header; when both are
    // there, both must name this server.
    let authority = req.uri().authority().map(|a| a.as_str());
    let host = headers.get(header::HOST).map(|v| v.to_str().unwrap_or("?"));
    let refused = [host, authority]
        .into_iter()
        .flatten()
        .find(|h| !st.hosts.allows(h));
    if let Some(host) = refused.or_else(|| host.or(authority).is_none().then_some("")) {
        return refuse(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            format!("this server does not answer for host \"{host}\"; the operator can allow a name with --allowed-host"),
        );
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        let authority = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .unwrap_or("");
        if authority.is_empty() || authority.contains('/') || !st.hosts.allows(authority) {
            return refuse(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                format!("requests from pages of {origin} are refused"),
            );
        }
    }
    let has_body = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim() != "0")
        || headers.contains_key(header::TRANSFER_ENCODING);
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    // The one upload that is not JSON; either type needs a preflight from a browser, as JSON does.
    let tar_upload = req.uri().path() == "/bundles/import"
        && headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| {
                ["application/x-tar", "application/octet-stream"]
                    .iter()
                    .any(|t| v.trim().eq_ignore_ascii_case(t))
            });
    if has_body && !json && !tar_upload {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send request bodies as JSON with content-type: application/json".into(),
        );
    }
    next.run(req).await
}
