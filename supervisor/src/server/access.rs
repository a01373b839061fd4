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

/// Runs the request inside a span that carries its id, logs it, and stamps the id on the response.
pub async fn log(State(st): State<super::state::AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let id = request_id(&req);
    let method = req.method().clone();
    // The path only: a query may hold anything a client typed.
    let path = req.uri().path().to_string();
    let span = tracing::info_span!("request", request_id = %id);
    // A client's trace context: the turn this request starts continues its trace.
    let response = match crate::telemetry::context_of(req.headers()) {
        Some(parent) => crate::telemetry::with_parent(parent, next.run(req).instrument(span)).await,
        None => next.run(req).instrument(span).await,
    };
    let status = response.status();
    st.rt
        .counters()
        .http_responses
        .get_or_create(&crate::metrics::Status {
            code: status.as_u16(),
        })
        .inc();
    let latency_ms = started.elapsed().as_secs_f64() * 1000.0;
    let session = session_of(&path).unwrap_or("");
    if status.is_server_error() {
        tracing::warn!(request_id = %id, %method, %path, status = status.as_u16(), latency_ms, session, "request");
    } else {
        tracing::info!(request_id = %id, %method, %path, status = status.as_u16(), latency_ms, session, "request");
    }
    let mut response = if status.is_client_error() || status.is_server_error() {
        with_request_id(response, &id).await
    } else {
        response
    };
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(REQUEST_ID, value);
    }
    response
}

/// Adds `request_id` to a JSON error body `{"error": {...}}`.
async fn with_request_id(response: Response, id: &str) -> Response {
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_ERROR_BODY).await else {
        return Response::from_parts(parts, Body::empty());
    };
    let mut value: serde_json::Value = match serde_json::from_slice(&bytes) {
        Ok(v) => v,
        Err(_) => return Response::from_parts(parts, Body::from(bytes)),
    };
    if let Some(error) = value.get_mut("error").and_then(|e| e.as_object_mut()) {
        error.insert("request_id".into(), id.into());
    }
    let out = serde_json::to_vec(&value).unwrap_or_else(|_| bytes.to_vec());
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(out))
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
