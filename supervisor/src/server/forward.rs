//! Requests that belong to another node: with a shared store, a session's worker runs on the node that holds its
//! lease, and a turn, command, interrupt, approval or deletion that reaches any other node is sent on to that one over HTTP,
//! authenticated with the cluster token. The client sees the owner's answer, streamed through.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderName, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api::{ApiError, OwnedBy};
use super::state::AppState;
pub use super::state::Cluster;
use super::tenants::FORWARDED_BY;

/// Headers a forwarded request keeps.
const KEPT: [HeaderName; 6] = [
    header::CONTENT_TYPE,
    header::ACCEPT,
    HeaderName::from_static("last-event-id"),
    // The session an OpenAI-compatible request continues.
    HeaderName::from_static("x-service-session"),
    // The client's trace goes on on the owner.
    HeaderName::from_static("traceparent"),
    HeaderName::from_static("tracestate"),
];

/// Headers of the owner's answer the client gets.
const ANSWERED: [HeaderName; 5] = [
    header::CONTENT_TYPE,
    header::RETRY_AFTER,
    header::CACHE_CONTROL,
    HeaderName::from_static("x-service-session"),
    HeaderName::from_static("x-service-ignored"),
];

/// Runs the request here; when the answer says another node owns the session, sends the request there instead.
pub async fn forward(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(cluster) = st.cluster.clone() else {
        return next.run(req).await;
    };
    let (parts, body) = req.into_parts();
    // Small JSON bodies: kept, so the same request can go on.
    let bytes = match axum::body::to_bytes(body, super::state::MAX_BODY).await {
        Ok(b) => b,
        Err(e) if is_too_large(&e) => return ApiError::payload_too_large().into_response(),
        Err(_) => {
            return ApiError::new(
                StatusCode::BAD_REQUEST,
                "bad_request",
                "the request body was cut off before its end",
            )
            .into_response()
        }
    };
    let here = Request::from_parts(parts.clone(), Body::from(bytes.clone()));
    let response = next.run(here).await;
    let Some(OwnedBy(owner)) = response.extensions().get::<OwnedBy>().cloned() else {
        return response;
    };
    if parts.headers.contains_key(&FORWARDED_BY) {
        // The owner moved between the two nodes' looks at the lease: the client retries (Retry-After is set).
        return response;
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let url = format!("{}{path}", owner.trim_end_matches('/'));
    let caller = parts
        .extensions
        .get::<crate::tenancy::Caller>()
        .cloned()
        .unwrap_or_else(crate::tenancy::Caller::operator);
    let mut onward = st
        .forwarder
        .request(parts.method.clone(), &url)
        .bearer_auth(&cluster.token)
        .header(FORWARDED_BY, &cluster.node_id)
        // The owner acts for the client this node authenticated, with its tenant's scope and quotas.
        .header(
            super::tenants::CALLER,
            super::tenants::caller_header(&caller),
        )
        .header(
            super::tenants::ACTOR_TOKEN,
            super::tenants::identity(&st, &caller, &parts.headers).token_id,
        )
        .body(bytes);
    if let Some(client) = parts.extensions.get::<super::listener::ClientAddr>() {
        onward = onward.header(super::tenants::ACTOR_CLIENT, client.0.ip().to_string());
    }
    for name in KEPT {
        if let Some(v) = parts.headers.get(&name) {
            onward = onward.header(name, v);
        }
    }
    match onward.send().await {
        Ok(answer) if answer.status() == StatusCode::UNAUTHORIZED => {
            // The client's own token was good here; the owner refused this node's. Said as such, not as a 401 the
            // client would take for its own.
            tracing::warn!(owner = %owner, "the session's node refused this node's cluster token: give every node the same --cluster-token");
            forward_failed(&st, "refused");
            ApiError::new(
                StatusCode::BAD_GATEWAY,
                "cluster_auth_failed",
                format!(
                    "the node running this session ({owner}) refused this node's cluster token; the operator must \
                     give every node the same --cluster-token"
                ),
            )
            .into_response()
        }
        Ok(answer) => {
            let mut out = Response::builder().status(answer.status());
            for name in ANSWERED {
                if let Some(v) = answer.headers().get(&name) {
                    out = out.header(name, v);
                }
            }
            out.body(Body::from_stream(answer.bytes_stream()))
                .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
        }
        Err(e) => {
            tracing::warn!(owner = %owner, "forwarding to the session's node failed: {e}");
            forward_failed(&st, "unreachable");
            let mut error = ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "owner_unreachable",
                format!(
                    "the node running this session ({owner}) did not answer; retry: once its lease expires another \
                     node takes the session over"
                ),
            )
            .into_response();
            error
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            error
        }
    }
}

/// Counts a forwarded request that failed for `reason`.
fn forward_failed(st: &AppState, reason: &'static str) {
    st.rt
        .counters()
        .forward_failures
        .get_or_create(&crate::metrics::ForwardLabels { reason })
        .inc();
}

/// Whether reading a body failed on its size limit, rather than on a client that went away.
fn is_too_large(e: &axum::Error) -> bool {
    crate::error_chain::causes(e).any(|s| s.is::<http_body_util::LengthLimitError>())
}
