//! The outermost layer: a request id for every request, one access log line per request, and the request id in
//! every error body, so a client that got a 500 can name the log lines that explain it.

use std::time::Instant;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use tracing::Instrument;

/// The header that carries the request id, both ways.
pub const REQUEST_ID: &str = "x-request-id";

/// Error bodies are small; a larger one is passed on untouched.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// The client's `x-request-id` when it is a short token, else a fresh one.
fn request_id(req: &Request) -> String {
    req.headers()
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            !v.is_empty()
                && v.len() <= 64
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
        .map(str::to_string)
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}

/// The session a path is about (`/sessions/{id}...`), for the log line.
fn session_of(path: &str) -> Option<&str> {
    let rest = path.strip_prefix("/sessions/")?;
    let id = rest.split('/').next()?;
    (!id.is_empty()).then_some(id)
}

/// Who a request spoke as, for its log line: put on the response by the layer that authenticated it.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The caller's tenant.
    pub tenant: String,
    /// The public id of the tenant token it sent (`svc_<id>`'s id), or `server` for the server's own token.
    pub token_id: String,
}

/// Puts the template of the route that took a request on its response, where [`log`] finds it for the request's
/// duration: the router knows it only while the request is inside.
pub async fn keep_route(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .cloned();
    let mut response = next.run(req).await;
    if let Some(route) = route {
        response.extensions_mut().insert(route);
    }
    response
}

/// Runs the request inside a span that carries its id, logs it, and stamps the id on the response.
pub async fn log(
    State(st): State<super::state::AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let id = request_id(&req);
    let method = req.method().clone();
    // The path only: a query may hold anything a client typed.
    let path = req.uri().path().to_string();
    // Behind a trusted proxy, the client is who its `Forwarded` or `X-Forwarded-For` names: for the caps and for
    // this line.
    let peer = req
        .extensions()
        .get::<super::listener::ClientAddr>()
        .map(|c| c.0);
    let client = peer.map(|peer| {
        let trusted = &st.policy.trusted_proxies;
        let hops = match trusted.is_empty() {
            true => Vec::new(),
            false => super::admission::forwarded_hops(req.headers()),
        };
        let ip = super::admission::client_address(peer.ip(), &hops, trusted);
        std::net::SocketAddr::new(ip, if ip == peer.ip() { peer.port() } else { 0 })
    });
    if let Some(client) = client {
        req.extensions_mut()
            .insert(super::listener::ClientAddr(client));
    }
    let client = client.map(|c| c.ip().to_string());
    let span = tracing::info_span!("request", request_id = %id);
    // A client's trace context: the turn this request starts continues its trace.
    let parent = crate::telemetry::context_of(req.headers());
    let trace_id = parent.as_ref().map(crate::telemetry::trace_id);
    let response = match parent {
        Some(parent) => crate::telemetry::with_parent(parent, next.run(req).instrument(span)).await,
        None => next.run(req).instrument(span).await,
    };
    let status = response.status();
    let counters = st.rt.counters();
    counters
        .http_responses
        .get_or_create(&crate::metrics::Status {
            code: status.as_u16(),
        })
        .inc();
    let route = response
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |r| r.as_str());
    counters.http_request(method.as_str(), route, started.elapsed().as_secs_f64());
    // Microseconds are the finest a log reader needs.
    let latency_ms = (started.elapsed().as_secs_f64() * 1_000_000.0).round() / 1000.0;
    let session = session_of(&path).unwrap_or("");
    let identity = response.extensions().get::<Identity>().cloned();
    let (tenant, token_id) = match &identity {
        Some(i) => (Some(i.tenant.as_str()), Some(i.token_id.as_str())),
        None => (None, None),
    };
    let (mut response, error_code) = if status.is_client_error() || status.is_server_error() {
        with_request_id(response, &id).await
    } else {
        (response, None)
    };
    let error_code = error_code.as_deref();
    let (client, trace_id) = (client.as_deref(), trace_id.as_deref());
    if status.is_server_error() {
        tracing::warn!(request_id = %id, %method, %path, status = status.as_u16(), latency_ms, session, tenant,
            token_id, client, error_code, trace_id, "request");
    } else {
        tracing::info!(request_id = %id, %method, %path, status = status.as_u16(), latency_ms, session, tenant,
            token_id, client, error_code, trace_id, "request");
    }
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// Adds `request_id` to a JSON error body `{"error": {...}}`; also gives the body's error code, for the log.
async fn with_request_id(response: Response, id: &str) -> (Response, Option<String>) {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return (response, None);
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BODY).await else {
        return (Response::from_parts(parts, Body::empty()), None);
    };
    let mut value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return (Response::from_parts(parts, Body::from(bytes)), None),
    };
    let mut code = None;
    if let Some(error) = value.get_mut("error").and_then(|e| e.as_object_mut()) {
        // OpenAI's shape has the code too; JSON-RPC's is a number.
        code = error.get("code").map(|c| match c {
            serde_json::Value::String(s) => crate::telemetry::capped(s, 64),
            other => other.to_string(),
        });
        error.insert("request_id".into(), id.into());
    }
    let out = serde_json::to_vec(&value).unwrap_or_else(|_| bytes.to_vec());
    parts.headers.remove(header::CONTENT_LENGTH);
    (Response::from_parts(parts, Body::from(out)), code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_of_a_path_is_its_second_segment() {
        assert_eq!(session_of("/sessions/abc/run"), Some("abc"));
        assert_eq!(session_of("/sessions/abc"), Some("abc"));
        assert_eq!(session_of("/sessions"), None);
        assert_eq!(session_of("/bundles/x"), None);
    }
}
