//! One function per endpoint. Each is a thin call into `ServiceRuntime`.

use std::convert::Infallible;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::StreamExt;

use super::api::*;
use super::state::AppState;
use super::tenants::{admin_only, admit_turn};
use crate::bundle;
use crate::tenancy::Caller;

/// Quiet time after which an event stream gets a keep-alive comment.
const SSE_KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Liveness; never needs a token.
#[utoipa::path(get, path = "/healthz", responses((status = 200, body = Health)))]
pub async fn healthz(State(st): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        token_required: st.token.is_some(),
        bundles_differ: Vec::new(),
    })
}

/// Readiness: whether this node can serve sessions now, that is, whether its store answers (the database, with
/// `--store postgres://…`). 503 with the cause when it does not; never needs a token. Over a shared store it also
/// lists the cluster's bundles this node could not bring in line (`bundles_differ`).
#[utoipa::path(get, path = "/readyz", responses((status = 200, body = Health), (status = 503, body = crate::server::api::ErrorEnvelope)))]
pub async fn readyz(State(st): State<AppState>) -> ApiResult<Json<Health>> {
    if st.rt.draining() {
        return Err(crate::runtime::RuntimeError::Draining.into());
    }
    st.rt.store().ready().await?;
    let bundles_differ = st.rt.bundle_drift();
    let Json(health) = healthz(State(st)).await;
    Ok(Json(Health {
        bundles_differ,
        ..health
    }))
}

/// Installed bundles.
#[utoipa::path(get, path = "/bundles", responses((status = 200, description = "Bundle metadata, as `inspect --json` prints it", body = [bundle::BundleInfo])))]
pub async fn list_bundles(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> ApiResult<Json<Vec<bundle::BundleInfo>>> {
    // Over a shared store, the list is the cluster's: what other nodes installed is installed here first.
    st.rt.sync_bundles().await;
    let home = st.rt.home().clone();
    let loaded = tokio::task::spawn_blocking(move || bundle::store::list(&home))
        .await
        .map_err(|_| {
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "listing bundles failed",
            )
        })??;
    // The store's default, marked on the caller's list only: a tenant never learns of a bundle it may not use.
    let default = crate::config_file::load(st.rt.home().root())
        .ok()
        .and_then(|c| c.default_bundle)
        .and_then(|d| bundle::resolve(st.rt.home(), &d).ok())
        .map(|b| b.reference());
    let mut out = Vec::new();
    for mut info in loaded.into_iter().filter_map(Result::ok).map(|b| b.info()) {
        if super::tenants::may_use_bundle(&st, &caller, &info.reference).await? {
            info.default = default.as_deref() == Some(info.reference.as_str());
            out.push(info.for_caller(caller.admin));
        }
    }
    Ok(Json(out))
}

/// Metadata of one bundle; the reference is URL-encoded (`local%2Fhello:0.1.0`).
#[utoipa::path(get, path = "/bundles/{reference}", params(("reference" = String, Path, description = "A bundle reference, URL-encoded", example = "hello")),
    responses((status = 200, body = bundle::BundleInfo)))]
pub async fn inspect_bundle(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(reference): ApiPath<String>,
) -> ApiResult<Json<bundle::BundleInfo>> {
    super::policy::bundle_ref(&st.policy, &reference)?;
    let bundle = super::registry_routes::resolve_bundle(&st, reference.clone()).await?;
    super::tenants::check_bundle(&st, &caller, &reference, &bundle.reference()).await?;
    Ok(Json(bundle.info().for_caller(caller.admin)))
}

/// Creates a session from a bundle reference.
#[utoipa::path(post, path = "/sessions", request_body = CreateSession,
    responses((status = 201, description = "The session record", body = crate::runtime::SessionRecord)))]
pub async fn create_session(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiJson(req): ApiJson<CreateSession>,
) -> ApiResult<impl IntoResponse> {
    super::policy::bundle_ref(&st.policy, &req.bundle_ref)?;
    super::registry_routes::fetch_on_first_use(&st, &req.bundle_ref).await?;
    let cwd = match req.cwd.as_deref() {
        Some(c) => Some(super::policy::cwd(&st.policy, c)?),
        None => None,
    };
    let rt = st.rt.clone();
    let policy = st.policy.clone();
    let home = rt.home().clone();
    let reference = req.bundle_ref.clone();
    // Resolving reads and hashes the bundle: off the async threads.
    let bundle = tokio::task::spawn_blocking(move || -> ApiResult<_> {
        let bundle = bundle::resolve(&home, &reference)?;
        super::policy::sandbox(&policy, &bundle)?;
        Ok(bundle)
    })
    .await
    .map_err(|_| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "creating the session failed",
        )
    })??;
    super::tenants::check_bundle(&st, &caller, &req.bundle_ref, &bundle.reference()).await?;
    let record = rt
        .create_session_for(bundle, &req.bundle_ref, cwd.as_deref(), caller.owns())
        .await?;
    // The runtime resolved the directory again: a parent swapped for a link since the check above (by a sandbox
    // that writes it) would have led it elsewhere. The session is kept only if it is still under a root.
    if let (Some(asked), Some(_)) = (req.cwd.as_deref(), &cwd) {
        if super::policy::cwd(&st.policy, &record.cwd).is_err() {
            let _ = rt.delete_session(&record.id).await;
            return Err(super::policy::cwd_refused(asked));
        }
    }
    Ok((StatusCode::CREATED, Json(record)))
}

/// Every session of the caller's tenant; an admin's token lists every tenant's, or `?tenant=`'s.
#[utoipa::path(get, path = "/sessions",
    params(("tenant" = Option<String>, Query, description = "Only this tenant's sessions (admin tokens)")),
    responses((status = 200, body = [crate::runtime::SessionRecord])))]
pub async fn list_sessions(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(q): ApiQuery<SessionsQuery>,
) -> ApiResult<Json<Vec<crate::runtime::SessionRecord>>> {
    let only = match (q.tenant, caller.admin) {
        (Some(t), true) => Some(t),
        (Some(t), false) if t == caller.tenant => Some(t),
        (Some(_), false) => {
            admin_only(&caller, "listing another tenant's sessions")?;
            None
        }
        (None, true) => None,
        (None, false) => Some(caller.tenant.clone()),
    };
    let mut all = st.rt.list_sessions().await?;
    if let Some(tenant) = only {
        all.retain(|r| r.tenant() == tenant);
    }
    Ok(Json(all))
}

/// One session's record.
#[utoipa::path(get, path = "/sessions/{id}", params(("id" = String, Path)), responses((status = 200, body = crate::runtime::SessionRecord)))]
pub async fn get_session(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<crate::runtime::SessionRecord>> {
    Ok(Json(st.rt.get_session(&id).await?))
}

/// Changes a session's settings: its budget over all its turns (`budget`, null for none). Answers its record.
#[utoipa::path(patch, path = "/sessions/{id}", params(("id" = String, Path)), request_body = UpdateSession,
    responses((status = 200, body = crate::runtime::SessionRecord)))]
pub async fn update_session(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<UpdateSession>,
) -> ApiResult<Json<crate::runtime::SessionRecord>> {
    Ok(Json(st.rt.set_budget(&id, req.budget).await?))
}

/// Every journaled event of a session, oldest first (the transcript; `/events` streams the same events live).
#[utoipa::path(get, path = "/sessions/{id}/journal", params(("id" = String, Path)), responses((status = 200, body = [service_ipc::EventMsg])))]
pub async fn session_journal(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<Vec<service_ipc::EventMsg>>> {
    Ok(Json(st.rt.session_events(&id).await?))
}

/// Stops the session's worker, forgets its allow_always grants and deletes its files.
#[utoipa::path(delete, path = "/sessions/{id}", params(("id" = String, Path)), responses((status = 204, description = "Deleted")))]
pub async fn delete_session(
    State(st): State<AppState>,
    actor: super::audit::Actor,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    st.rt.delete_session(&id).await?;
    actor
        .record("session_deleted", &id, serde_json::Value::Null)
        .await;
    Ok(StatusCode::NO_CONTENT)
}

/// Runs one turn and answers when it has ended.
#[utoipa::path(post, path = "/sessions/{id}/run-sync", params(("id" = String, Path)), request_body = RunRequest,
    responses((status = 200, body = TurnResult)))]
pub async fn run_sync(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<RunRequest>,
) -> ApiResult<Json<TurnResult>> {
    let overrides = checked_overrides(&st, &caller, &id, req.turn_context).await?;
    let outcome = st.rt.run_turn(&id, req.input, overrides).await?;
    Ok(Json(outcome.into()))
}

/// Starts one turn and answers at once; follow it on the event stream.
#[utoipa::path(post, path = "/sessions/{id}/run", params(("id" = String, Path)), request_body = RunRequest,
    responses((status = 202, body = Accepted)))]
pub async fn run_async(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<RunRequest>,
) -> ApiResult<impl IntoResponse> {
    let overrides = checked_overrides(&st, &caller, &id, req.turn_context).await?;
    let pending = st.rt.start_turn(&id, req.input, overrides).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Accepted {
            session_id: id,
            turn_id: pending.turn_id,
        }),
    ))
}

/// A client's per-turn overrides, if the operator's policy allows them and the caller's quota allows a turn. A
/// `cwd` override stays relative to the session's directory (the runtime keeps it inside the sandboxed workspace).
async fn checked_overrides(
    st: &AppState,
    caller: &Caller,
    id: &str,
    overrides: Option<service_ipc::TurnOverrides>,
) -> ApiResult<service_ipc::TurnOverrides> {
    admit_turn(st, caller).await?;
    let overrides = overrides.unwrap_or_default();
    if let Some(model) = &overrides.model {
        let bundle = st.rt.session_bundle(id).await?;
        super::policy::model(&st.policy, &bundle, model)?;
    }
    Ok(overrides)
}

/// Replaces the session's older turns with a summary its model writes, between turns; the body may be empty.
#[utoipa::path(post, path = "/sessions/{id}/compact", params(("id" = String, Path)),
    request_body(content = Option<CompactRequest>, description = "Optional"), responses((status = 200, body = CompactResult)))]
pub async fn compact(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    body: axum::body::Bytes,
) -> ApiResult<Json<CompactResult>> {
    let req: CompactRequest = optional_body(&body, "{\"focus\": \"...\"}")?;
    let done = st.rt.compact_session(&id, req.focus.as_deref()).await?;
    Ok(Json(match done {
        Some(c) => CompactResult {
            compacted: true,
            before_tokens: Some(c.before_tokens),
            after_tokens: Some(c.after_tokens),
            summarised_turns: c.summarised_turns,
        },
        None => CompactResult {
            compacted: false,
            before_tokens: None,
            after_tokens: None,
            summarised_turns: 0,
        },
    }))
}

/// A body that may be absent or `null` (the defaults), else `shape`.
pub(super) fn optional_body<T: Default + serde::de::DeserializeOwned>(
    body: &[u8],
    shape: &str,
) -> ApiResult<T> {
    // No body at all means the defaults; a body of whitespace is not JSON, and says so.
    if body.is_empty() {
        return Ok(T::default());
    }
    let invalid = |why: String| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            format!("the body is {shape}, null or empty: {why}"),
        )
    };
    let value: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed_json",
            format!("the body is not valid JSON: {e}"),
        )
    })?;
    // serde would take an array for a struct, field by field; the contract does not allow one.
    if let Some(path) = super::api::stray_array(&value, "", &[]) {
        return Err(invalid(format!("{path} must not be an array")));
    }
    serde_json::from_value::<Option<T>>(value)
        .map(Option::unwrap_or_default)
        .map_err(|e| invalid(e.to_string()))
}

/// Interrupts the running turn.
#[utoipa::path(post, path = "/sessions/{id}/interrupt", params(("id" = String, Path)), responses((status = 202, body = Accepted)))]
pub async fn interrupt(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    let turn_id = st.rt.interrupt(&id).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(Accepted {
            session_id: id,
            turn_id,
        }),
    ))
}

/// Runs an operator command in the session sandbox (`exec_command_*` events only; not a turn).
#[utoipa::path(post, path = "/sessions/{id}/commands", params(("id" = String, Path)), request_body = CommandRequest,
    responses((status = 200, body = CommandResult)))]
pub async fn run_command(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<CommandRequest>,
) -> ApiResult<Json<CommandResult>> {
    let o = st.rt.run_session_command(&id, &req.command).await?;
    Ok(Json(CommandResult {
        exec_id: o.exec_id,
        exit_code: o.exit_code,
    }))
}

/// Resolves a pending approval request.
#[utoipa::path(post, path = "/approvals/{request_id}", params(("request_id" = String, Path)), request_body = DecisionRequest,
    responses((status = 200, body = DecisionResult)))]
pub async fn resolve_approval(
    State(st): State<AppState>,
    ApiPath(request_id): ApiPath<String>,
    ApiJson(req): ApiJson<DecisionRequest>,
) -> ApiResult<Json<DecisionResult>> {
    st.rt
        .resolve_approval_with(&request_id, req.decision, req.reason)
        .await?;
    Ok(Json(DecisionResult {
        request_id,
        decision: req.decision,
    }))
}

/// One server-sent event of `GET /sessions/{id}/events`, as an SSE parser reads it.
#[derive(utoipa::ToSchema)]
#[allow(dead_code)] // Describes the stream in the OpenAPI document; the frames are written by `server::sse`.
pub struct EventFrame {
    /// The event's sequence number, for `Last-Event-ID`.
    id: String,
    /// The SSE event type: always the default, `message`.
    event: Option<String>,
    /// One `EventMsg` (see its schema) as JSON.
    #[schema(content_media_type = "application/json")]
    data: String,
}

/// The largest sequence number a store keeps (PostgreSQL's `bigint`), and so the largest `after` the schema allows.
const MAX_SEQ: u64 = i64::MAX as u64;

/// The session's events as server-sent events: each `EventMsg` as JSON in one `data:` frame, its sequence number as
/// the SSE `id:`. With `Last-Event-ID` (or `?after=N`) the journal's later events come first, then live ones. The
/// frames are made once per burst of events for every subscriber (see `server::sse`).
#[utoipa::path(get, path = "/sessions/{id}/events",
    params(("id" = String, Path), ("after" = Option<u64>, Query, minimum = 0,
            description = "Replay the journaled events after this sequence number first (0: the whole session)"),
           ("view" = Option<bool>, Query,
            description = "Add to each tool event a `view` object: the line a person reads, as the console shows it"),
           ("Last-Event-ID" = Option<u64>, Header, minimum = 0, nullable = false,
            description = "As `after`, an event sequence number; set by EventSource clients on reconnect")),
    responses((status = 200, description = "A text/event-stream: each `data:` line is one EventMsg as JSON, its `id:` the \
        event's sequence number; comments keep the stream alive", content_type = "text/event-stream", body = EventFrame)))]
pub async fn events(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<EventsQuery>,
    client: Option<axum::Extension<super::listener::ClientAddr>>,
    caller: Option<axum::Extension<Caller>>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    use super::admission::StreamKey;
    let full = |held: usize, whose: String| {
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_streams",
            format!("{whose} already holds {held} event streams; close one first"),
        )
    };
    let slot = match client {
        Some(axum::Extension(addr)) => Some(
            st.streams
                .take(
                    StreamKey::Client(addr.0.ip()),
                    st.policy.max_streams_per_client,
                )
                .ok_or_else(|| full(st.policy.max_streams_per_client, "this client".into()))?,
        ),
        None => None,
    };
    // A tenant's cap, over all of its clients: one tenant's streams leave room for the others'.
    let tenant_slot = match (caller, st.policy.max_streams_per_tenant) {
        (Some(axum::Extension(caller)), Some(max)) => Some(
            st.streams
                .take(StreamKey::Tenant(caller.tenant.clone()), max)
                .ok_or_else(|| full(max, format!("tenant \"{}\"", caller.tenant)))?,
        ),
        _ => None,
    };
    let slot = (slot, tenant_slot);
    let last_event_id = match headers.get("last-event-id") {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .filter(|n| *n <= MAX_SEQ)
                .ok_or_else(|| {
                    ApiError::new(
                        StatusCode::BAD_REQUEST,
                        "bad_request",
                        "Last-Event-ID must be an event sequence number",
                    )
                })?,
        ),
    };
    if q.after.is_some_and(|n| n > MAX_SEQ) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("after must be an event sequence number, at most {MAX_SEQ}"),
        ));
    }
    let subscriber = crate::metrics::GaugeGuard::new(&st.rt.counters().sse_subscribers);
    let journal = st.rt.journal(&id).await?;
    let frames = super::sse::stream(&journal, last_event_id.or(q.after), SSE_KEEP_ALIVE, q.view)
        .map(move |frame| {
            // The slot and the subscriber count live as long as the stream.
            let _held = (&slot, &subscriber);
            Ok::<_, Infallible>(frame)
        })
        .take_until(st.shutdown.clone().cancelled_owned());
    Ok((
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(frames),
    )
        .into_response())
}

/// The runtime's metrics in the OpenMetrics text format, which Prometheus scrapes (its counters typed as such, which
/// the older `text/plain; version=0.0.4` parser would read as untyped).
#[utoipa::path(get, path = "/metrics",
    responses((status = 200, description = "OpenMetrics text exposition format", content_type = "application/openmetrics-text", body = String)))]
pub async fn metrics(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> ApiResult<impl IntoResponse> {
    // Every tenant's figures: for the operator.
    admin_only(&caller, "GET /metrics")?;
    Ok((
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        st.rt.metrics_now().await.encode(),
    ))
}

/// The OpenAPI description of this API, generated from the handlers.
pub async fn openapi() -> impl IntoResponse {
    Json(super::contract::document())
}
