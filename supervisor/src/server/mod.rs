//! The HTTP server: an axum API over `ServiceRuntime`, with a server-sent event stream per session.
//!
//! - [`api`]: request and response bodies, and the error shape `{"error": {"code", "message"}}`.
//! - [`handlers`]: one function per endpoint.
//!
//! [`router`] builds the whole application without a socket, so tests can call it directly; [`serve`] binds and
//! runs it until a shutdown signal, then ends running turns with an `error` event, closes the event streams and
//! stops the workers.

pub mod api;
pub mod handlers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::runtime::ServiceRuntime;
use api::ApiError;

/// Largest request body accepted.
pub const MAX_BODY: usize = 1024 * 1024;
/// Default bind address.
pub const DEFAULT_BIND: &str = "127.0.0.1:8472";

/// The OpenAPI document, generated from the handler annotations.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "service-rs",
        description = "Local agent runtime: sessions, turns, events and approvals."
    ),
    paths(
        handlers::healthz,
        handlers::list_bundles,
        handlers::inspect_bundle,
        handlers::create_session,
        handlers::list_sessions,
        handlers::get_session,
        handlers::delete_session,
        handlers::run_sync,
        handlers::run_async,
        handlers::interrupt,
        handlers::run_command,
        handlers::resolve_approval,
        handlers::events,
    ),
    components(schemas(
        api::CreateSession,
        api::RunRequest,
        api::TurnResult,
        api::Accepted,
        api::CommandRequest,
        api::CommandResult,
        api::DecisionRequest,
        api::DecisionResult,
        api::Health,
        api::ErrorBody,
        api::ErrorEnvelope,
    ))
)]
pub struct ApiDoc;

/// Shared by every handler.
#[derive(Clone)]
pub struct AppState {
    /// The runtime.
    pub rt: ServiceRuntime,
    /// Bearer token every endpoint but /healthz requires, if set.
    pub token: Option<Arc<str>>,
    /// Cancelled at shutdown; ends the event streams.
    pub shutdown: CancellationToken,
}

/// The whole application.
pub fn router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/bundles", get(handlers::list_bundles))
        .route("/bundles/{reference}", get(handlers::inspect_bundle))
        .route(
            "/sessions",
            post(handlers::create_session).get(handlers::list_sessions),
        )
        .route(
            "/sessions/{id}",
            get(handlers::get_session).delete(handlers::delete_session),
        )
        .route("/sessions/{id}/run-sync", post(handlers::run_sync))
        .route("/sessions/{id}/run", post(handlers::run_async))
        .route("/sessions/{id}/interrupt", post(handlers::interrupt))
        .route("/sessions/{id}/commands", post(handlers::run_command))
        .route("/sessions/{id}/events", get(handlers::events))
        .route("/approvals/{request_id}", post(handlers::resolve_approval))
        .route("/openapi.json", get(handlers::openapi))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            require_token,
        ));
    Router::new()
        .route("/healthz", get(handlers::healthz))
        .merge(protected)
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint; see GET /openapi.json",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error; the server log has the details",
            )
            .into_response()
        }))
        .with_state(state)
}

async fn require_token(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let Some(expected) = st.token.as_deref() else {
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(token) if constant_time_eq(token.as_bytes(), expected.as_bytes()) => {
            next.run(req).await
        }
        _ => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send Authorization: Bearer <token> with the server's token",
        )
        .into_response(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// A non-loopback address without a token.
    #[error("refusing to listen on {0} without a token: set --token or SERVICE_TOKEN, or bind a loopback address such as 127.0.0.1")]
    InsecureBind(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
}

/// Binds `addr`, calls `ready` with the bound address, and serves until `stop` resolves; then ends running turns
/// with an `error` event ("the server stopped"), closes the event streams and stops the workers.
pub async fn serve(
    rt: ServiceRuntime,
    addr: SocketAddr,
    token: Option<String>,
    ready: impl FnOnce(SocketAddr),
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(ServeError::InsecureBind(addr));
    }
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let shutdown = CancellationToken::new();
    let state = AppState {
        rt: rt.clone(),
        token: token.map(Arc::from),
        shutdown: shutdown.clone(),
    };
    ready(bound);
    let app = router(state);
    let graceful = async move {
        stop.await;
        rt.shutdown("the server stopped").await;
        // Let the event streams deliver the final events before they are closed.
        tokio::time::sleep(Duration::from_millis(200)).await;
        shutdown.cancel();
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(graceful)
        .await
        .map_err(|source| ServeError::Bind {
            addr: bound,
            source,
        })
}
