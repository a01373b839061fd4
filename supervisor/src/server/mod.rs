//! The HTTP server: an axum API over `ServiceRuntime`, with a server-sent event stream per session.
//!
//! - [`api`]: request and response bodies, and the error shape `{"error": {"code", "message"}}`.
//! - [`handlers`]: one function per endpoint.
//!
//! [`router`] builds the whole application without a socket, so tests can call it directly; [`serve`] binds and
//! runs it until a shutdown signal, then ends running turns with an `error` event, closes the event streams and
//! stops the workers.

pub mod access;
pub mod admission;
pub mod api;
pub mod audit;
pub mod bundle_routes;
pub mod console;
pub mod contract;
pub mod forward;
pub mod guard;
pub mod handlers;
pub mod history_routes;
pub mod lanes;
pub mod listener;
pub mod live;
pub mod policy;
pub mod rate;
pub mod registry_routes;
pub mod sse;
pub mod state;
pub mod tenant_routes;
pub mod tenants;
pub mod tls;
pub mod token;
mod upkeep;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::runtime::ServiceRuntime;
use api::ApiError;
use contract::Contract;
pub use state::{AppState, ClientPolicy, MAX_BODY};

/// Idle time after which `serve` stops a session's worker.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(15 * 60);
/// Idle time after which `serve` stops a session's worker whose sandbox holds nothing else: as long as the worker
/// keeps spare shells after a command. Starting a sandbox again costs the next tool call a few milliseconds; a kept
/// one costs about 0.43 MiB and two processes.
pub const DEFAULT_EMPTY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default bind address.
pub const DEFAULT_BIND: &str = "127.0.0.1:8472";

/// The OpenAPI document, generated from the handler annotations.
#[derive(utoipa::OpenApi)]
#[openapi(
    modifiers(&Contract),
    info(
        title = "service-rs",
        description = "Local agent runtime: sessions, turns, events and approvals."
    ),
    paths(
        handlers::healthz,
        handlers::readyz,
        handlers::list_bundles,
        handlers::inspect_bundle,
        bundle_routes::remove_bundle,
        bundle_routes::export_bundle,
        bundle_routes::import_bundle,
        registry_routes::pull_bundle,
        registry_routes::push_bundle,
        handlers::create_session,
        handlers::list_sessions,
        handlers::get_session,
        handlers::update_session,
        handlers::session_journal,
        handlers::delete_session,
        handlers::run_sync,
        handlers::run_async,
        handlers::interrupt,
        handlers::compact,
        history_routes::rewind,
        history_routes::fork,
        history_routes::changes,
        handlers::run_command,
        handlers::resolve_approval,
        handlers::events,
        handlers::metrics,
        tenant_routes::create_token,
        tenant_routes::list_tokens,
        tenant_routes::revoke_token,
        tenant_routes::set_quota,
        tenant_routes::grant_bundle,
        tenant_routes::ungrant_bundle,
        tenant_routes::usage,
        tenant_routes::audit_log,
        crate::facade::openai::models,
        crate::facade::openai::chat::completions,
        crate::facade::openai::responses::create,
        crate::facade::a2a::card,
        crate::facade::a2a::rpc,
    ),
    components(schemas(
        api::CreateSession,
        api::UpdateSession,
        crate::runtime::Budget,
        registry_routes::PullRequest,
        registry_routes::PushRequest,
        registry_routes::RegistryLogin,
        api::RunRequest,
        api::TurnResult,
        api::Accepted,
        api::CompactRequest,
        api::CompactResult,
        history_routes::RewindRequest,
        history_routes::ForkRequest,
        history_routes::TurnChanges,
        crate::checkpoint::FileChange,
        crate::checkpoint::tree::Change,
        crate::runtime::checkpoints::Rewound,
        crate::runtime::checkpoints::Forked,
        api::CommandRequest,
        api::CommandResult,
        api::DecisionRequest,
        api::DecisionResult,
        api::Health,
        api::ErrorBody,
        api::ErrorEnvelope,
        tenant_routes::CreateToken,
        crate::tenancy::NewToken,
        crate::tenancy::TokenView,
        crate::tenancy::Role,
        crate::tenancy::audit::AuditEntry,
        crate::tenancy::Quota,
        crate::tenancy::Spent,
        crate::tenancy::usage::UsageReport,
        crate::tenancy::usage::UsageTotal,
        service_ipc::EventMsg,
        service_ipc::EventPayload,
    ))
)]
pub struct ApiDoc;

/// The whole application.
pub fn router(state: AppState) -> Router {
    let protected = Router::new()
        .route("/bundles", get(handlers::list_bundles))
        .route(
            "/bundles/{reference}",
            get(handlers::inspect_bundle).delete(bundle_routes::remove_bundle),
        )
        .route(
            "/bundles/{reference}/export",
            get(bundle_routes::export_bundle),
        )
        .route(
            "/bundles/import",
            post(bundle_routes::import_bundle).layer(DefaultBodyLimit::max(
                crate::bundle::oci_archive::MAX_ARCHIVE_BYTES as usize,
            )),
        )
        .route("/bundles/pull", post(registry_routes::pull_bundle))
        .route("/bundles/push", post(registry_routes::push_bundle))
        .route(
            "/sessions",
            post(handlers::create_session).get(handlers::list_sessions),
        )
        .merge(owned_routes(&state))
        .merge(
            Router::new()
                .route("/sessions/{id}/events", get(handlers::events))
                .route("/sessions/{id}/journal", get(handlers::session_journal))
                .route_layer(axum::middleware::from_fn_with_state(
                    state.clone(),
                    tenants::scope,
                )),
        )
        .route("/openapi.json", get(handlers::openapi))
        .route("/metrics", get(handlers::metrics))
        .route("/audit", get(tenant_routes::audit_log))
        .route(
            "/tokens",
            post(tenant_routes::create_token).get(tenant_routes::list_tokens),
        )
        .route(
            "/tokens/{id}",
            axum::routing::delete(tenant_routes::revoke_token),
        )
        .route(
            "/tenants/{tenant}/quota",
            axum::routing::put(tenant_routes::set_quota),
        )
        .route(
            "/tenants/{tenant}/bundles/{reference}",
            axum::routing::put(tenant_routes::grant_bundle).delete(tenant_routes::ungrant_bundle),
        )
        .route("/usage", get(tenant_routes::usage))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            tenants::require_caller,
        ));
    Router::new()
        .route("/healthz", get(handlers::healthz))
        .route("/readyz", get(handlers::readyz))
        .merge(console::routes())
        .merge(crate::facade::openai::routes(&state))
        .merge(crate::facade::a2a::routes(&state))
        .merge(protected)
        .route_layer(axum::middleware::from_fn(access::keep_route))
        .fallback(|| async {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such endpoint; see GET /openapi.json",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this path does not take that method; see GET /openapi.json",
            )
        })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::check_request,
        ))
        .layer(tower_http::catch_panic::CatchPanicLayer::custom(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "internal error; the server log has the details under this request_id",
            )
            .into_response()
        }))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            access::log,
        ))
        .with_state(state)
}

/// The requests only the node running a session can answer (turns, commands, interrupts, approvals, deletion): sent
/// on to it from any other node.
fn owned_routes(state: &AppState) -> Router<AppState> {
    Router::new()
        // A GET is answered here; only the DELETE can name another owner.
        .route(
            "/sessions/{id}",
            get(handlers::get_session)
                .patch(handlers::update_session)
                .delete(handlers::delete_session),
        )
        .route("/sessions/{id}/run-sync", post(handlers::run_sync))
        .route("/sessions/{id}/run", post(handlers::run_async))
        .route("/sessions/{id}/interrupt", post(handlers::interrupt))
        .route("/sessions/{id}/compact", post(handlers::compact))
        .route("/sessions/{id}/rewind", post(history_routes::rewind))
        .route("/sessions/{id}/fork", post(history_routes::fork))
        .route("/sessions/{id}/changes", get(history_routes::changes))
        .route("/sessions/{id}/commands", post(handlers::run_command))
        .route("/approvals/{request_id}", post(handlers::resolve_approval))
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::forward,
        ))
        // Before forwarding: a request for another tenant's session goes nowhere.
        .route_layer(axum::middleware::from_fn_with_state(
            state.clone(),
            tenants::scope,
        ))
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// `--no-auth` on a non-loopback address.
    #[error("refusing --no-auth on {0}: without a token anyone who can reach it runs commands; bind a loopback address such as 127.0.0.1 or drop --no-auth")]
    InsecureBind(SocketAddr),
    /// The address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The token file could not be written.
    #[error("cannot store the server token in {path}: {source}")]
    Token {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TLS certificate or key cannot be served.
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
    /// The threads that serve connections could not be started.
    #[error("cannot start the threads that serve connections ({0}); --http-threads 0 serves them on the shared ones")]
    Threads(std::io::Error),
}

/// How requests are authenticated.
#[derive(Debug, Clone)]
pub enum Auth {
    /// This token (`--token` or `SERVICE_TOKEN`).
    Token(String),
    /// The token in `file` (`SERVICE_TOKEN_FILE`), now `token`; read again when the file changes.
    TokenFile {
        /// Its content at start.
        token: String,
        /// The file.
        file: std::path::PathBuf,
    },
    /// The token in `$SERVICE_HOME/serve.token`, generated and stored there when there is none, or always with
    /// `rotate` (`serve --rotate-token`).
    Generated {
        /// Replace the stored token with a new one.
        rotate: bool,
    },
    /// No token (`--no-auth`; loopback binds only).
    None,
}

/// Everything `serve` is told.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// Address to bind.
    pub addr: SocketAddr,
    /// Authentication.
    pub auth: Auth,
    /// Extra names for the `Host` check (`--allowed-host`).
    pub allowed_hosts: Vec<String>,
    /// What clients may ask for.
    pub policy: ClientPolicy,
    /// Connection bounds.
    pub limits: listener::ConnLimits,
    /// When idle workers and spares are stopped (`--idle-timeout`, `--empty-idle-timeout`).
    pub idle: crate::runtime::IdleTimeouts,
    /// How long a session may wait for its first turn before it is deleted (`--unused-session-timeout`); None
    /// keeps them.
    pub unused_sessions: Option<Duration>,
    /// How long sessions are kept (`--retention`, `--retention-for`).
    pub retention: crate::runtime::retention::Retention,
    /// This node's id and the cluster token, when nodes share a store.
    pub cluster: Option<state::Cluster>,
    /// The base URL clients reach this server at, when it is not `http://` and the bound address.
    pub advertise_url: Option<String>,
    /// How the server stops on its signal (see `runtime::drain`).
    pub drain: Drain,
    /// TLS on the listener (`--tls-cert`, `--tls-key`); None serves plain HTTP.
    pub tls: Option<tls::TlsFiles>,
}

/// How the server is asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Drain first (SIGTERM, as orchestrators stop a node): see [`Drain`].
    Drain,
    /// End running turns now (Ctrl-C at a terminal).
    Now,
}

/// How long each step of a stop lasts.
#[derive(Debug, Clone, Copy)]
pub struct Drain {
    /// After the signal, new turns are still taken this long, while `readyz` answers 503 and load balancers
    /// notice (`--pre-stop-delay`).
    pub pre_stop_delay: Duration,
    /// Then running turns get this long to end before they are ended as stopped (`--drain-timeout`).
    pub timeout: Duration,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            pre_stop_delay: Duration::from_secs(5),
            timeout: Duration::from_secs(30),
        }
    }
}

impl ServeOptions {
    /// Defaults for `addr`: a generated token, loopback names only, 1024 connections, 10 s for headers, 128 event
    /// streams per client address.
    pub fn new(addr: SocketAddr) -> ServeOptions {
        ServeOptions {
            addr,
            auth: Auth::Generated { rotate: false },
            allowed_hosts: Vec::new(),
            policy: ClientPolicy {
                max_streams_per_client: 128,
                max_streams_per_tenant: None,
                ..ClientPolicy::default()
            },
            limits: listener::ConnLimits {
                max_connections: 1024,
                header_read_timeout: Duration::from_secs(10),
                threads: lanes::default_count(),
            },
            unused_sessions: Some(crate::runtime::UNUSED_SESSIONS_AFTER),
            idle: crate::runtime::IdleTimeouts {
                any: Some(DEFAULT_IDLE_TIMEOUT),
                empty: Some(DEFAULT_EMPTY_IDLE_TIMEOUT),
            },
            retention: Default::default(),
            cluster: None,
            advertise_url: None,
            drain: Drain::default(),
            tls: None,
        }
    }
}

/// Binds the address, calls `ready` with the bound address and the token (when a new one was generated), and serves until
/// `stop` resolves (draining first when it says so); then ends running turns with an `error` event ("the server stopped"), closes the event streams
/// and stops the workers.
pub async fn serve(
    rt: ServiceRuntime,
    options: ServeOptions,
    ready: impl FnOnce(SocketAddr, Option<&str>),
    stop: impl std::future::Future<Output = Stop> + Send + 'static,
) -> Result<(), ServeError> {
    let addr = options.addr;
    if !addr.ip().is_loopback() && matches!(options.auth, Auth::None) {
        return Err(ServeError::InsecureBind(addr));
    }
    let tls = match options.tls {
        Some(files) => Some(Arc::new(tls::LiveTls::load(files)?)),
        None => None,
    };
    let scheme = if tls.is_some() { "https" } else { "http" };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServeError::Bind { addr, source })?;
    let bound = listener.local_addr().unwrap_or(addr);
    let lanes = match options.limits.threads {
        0 => None,
        n => Some(lanes::Lanes::start(n).map_err(ServeError::Threads)?),
    };
    let (token, generated) = token::resolve(options.auth, rt.home())?;
    let shutdown = CancellationToken::new();
    let live_secrets = [token.clone(), options.policy.metrics_token.clone()];
    tokio::spawn(live::watch(
        live_secrets.into_iter().flatten().collect(),
        tls.clone(),
        live::RELOAD_EVERY,
        shutdown.clone(),
    ));
    let state = AppState::new(state::Shared {
        rt: rt.clone(),
        token: token.clone(),
        shutdown: shutdown.clone(),
        hosts: Arc::new(admission::AllowedHosts::new(bound, &options.allowed_hosts)),
        policy: Arc::new(options.policy),
        streams: Arc::new(admission::StreamCounts::default()),
        rates: Arc::default(),
        cluster: options.cluster.map(Arc::new),
        forwarder: reqwest::Client::new(),
        public_url: Arc::from(
            options
                .advertise_url
                .as_deref()
                .map(|u| u.trim_end_matches('/').to_string())
                .unwrap_or_else(|| format!("{scheme}://{bound}")),
        ),
        advertised: options.advertise_url.is_some(),
    });
    rt.store().bound_at(&format!("{scheme}://{bound}"));
    rt.reserve_address(bound);
    rt.keep_claims();
    tracing::info!(
        bind = %bound,
        store = %rt.store().describe(),
        sandbox = %crate::sandbox::backend(rt.dangerous_sandbox_mode(), rt.sandbox_backend()),
        auth = if token.is_some() { "bearer token" } else { "none" },
        tls = tls.is_some(),
        version = env!("CARGO_PKG_VERSION"),
        "service-rs serving"
    );
    ready(bound, generated.as_deref());
    let unused_tick = options
        .unused_sessions
        .map(|after| (after / 10).clamp(Duration::from_millis(100), Duration::from_secs(60)));
    let tick = match (options.idle.tick(), unused_tick) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(tick) = tick {
        tokio::spawn(upkeep::reap_idle(
            rt.clone(),
            options.idle,
            options.unused_sessions,
            tick,
            shutdown.clone(),
        ));
    }
    if rt.store().shared() {
        tokio::spawn(upkeep::cluster_upkeep(
            rt.clone(),
            upkeep::UPKEEP,
            shutdown.clone(),
        ));
    }
    if options.retention.is_on() || rt.store().shared() {
        tokio::spawn(upkeep::retain(
            rt.clone(),
            options.retention.clone(),
            shutdown.clone(),
        ));
    }
    let app = router(state);
    let drain = options.drain;
    let graceful = async move {
        if stop.await == Stop::Drain {
            upkeep::drain_turns(&rt, drain).await;
        }
        rt.shutdown("the server stopped").await;
        rt.tenancy().flush().await;
        // Let the event streams deliver the final events before they are closed.
        tokio::time::sleep(Duration::from_millis(200)).await;
        shutdown.cancel();
    };
    listener::serve(listener, tls, app, options.limits, lanes, graceful).await;
    Ok(())
}
