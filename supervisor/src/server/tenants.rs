//! Who a request speaks for, and what it may reach: the HTTP side of [`crate::tenancy`].
//!
//! - [`authenticate`] turns the bearer token into a [`Caller`]: the server's own token (and `--no-auth`) is the
//!   admin of the tenant `default`; a tenant token (`svc_…`) is whatever the store says of it; the cluster token
//!   speaks for the caller the forwarding node names in [`CALLER`], which no client can set.
//! - [`scope`] answers 404 for a session or an approval of another tenant, exactly as for one that does not exist,
//!   so that ids do not leak.
//! - [`admit_session`] and [`admit_turn`] apply the tenant's quota (429 with `quota_sessions`,
//!   `quota_concurrent_turns` or `quota_tokens`).

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::api::ApiError;
use super::state::AppState;
use crate::runtime::RuntimeError;
use crate::tenancy::{token, Caller, Role};

/// Set on a forwarded request, with the forwarding node's id: the owner answers it itself, never sends it on.
pub const FORWARDED_BY: HeaderName = HeaderName::from_static("x-service-forwarded-by");

/// On a request one node forwards to another: the caller the first node authenticated, `tenant:<name>` or
/// `admin:<name>`. Trusted only beside the cluster token.
pub const CALLER: HeaderName = HeaderName::from_static("x-service-caller");

/// On a forwarded request: the public id of the token the client sent the first node (`server` for the server's
/// own), for the owner's access and audit logs. Trusted only beside the cluster token.
pub const ACTOR_TOKEN: HeaderName = HeaderName::from_static("x-service-actor-token");

/// On a forwarded request: the client's address as the first node resolved it. Trusted only beside the cluster
/// token.
pub const ACTOR_CLIENT: HeaderName = HeaderName::from_static("x-service-actor-client");

/// Whether the request comes from another node of the cluster (it sends the cluster token).
pub fn from_peer(st: &AppState, headers: &HeaderMap) -> bool {
    let given = bearer(headers).unwrap_or_default();
    st.cluster
        .as_deref()
        .is_some_and(|c| token::same_secret(given.as_bytes(), c.token.as_bytes()))
}

/// The header value that names `caller` to another node.
pub fn caller_header(caller: &Caller) -> HeaderValue {
    HeaderValue::from_str(&format!("{}:{}", caller.role.as_str(), caller.tenant))
        .unwrap_or_else(|_| HeaderValue::from_static("read-only:"))
}

/// The caller a peer forwarded for: `ROLE:TENANT`. A value this release does not read is refused, never widened.
fn caller_from_header(headers: &HeaderMap) -> Option<Caller> {
    let value = headers.get(&CALLER)?.to_str().ok()?;
    let (kind, tenant) = value.split_once(':')?;
    crate::tenancy::check_tenant(tenant).ok()?;
    // `admin` and `tenant` are what releases before roles send.
    let role = match kind {
        "admin" => Role::Operator,
        "tenant" => Role::User,
        other => Role::parse(other)?,
    };
    Some(Caller::of(tenant, role))
}

/// The bearer token of a request, if it sends one.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

/// Who `caller` is for the access log: its tenant, and the public id of the token the request sent (`server` for
/// the server's own token, `cluster` for another node's forwarding).
pub fn identity(st: &AppState, caller: &Caller, headers: &HeaderMap) -> super::access::Identity {
    let given = bearer(headers).unwrap_or_default();
    let forwarded_for = || {
        headers
            .get(&ACTOR_TOKEN)
            .and_then(|v| v.to_str().ok())
            .filter(|id| id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric()))
            .map_or("cluster", |id| id)
            .to_string()
    };
    let token_id = match token::id_of(given) {
        Some(id) => id.to_string(),
        None if from_peer(st, headers) => forwarded_for(),
        None => "server".to_string(),
    };
    super::access::Identity {
        tenant: caller.tenant.clone(),
        token_id,
    }
}

/// Runs the request as `caller` (handed to the handler), and names who it was on the response for the access log.
/// A read-only caller's request that is not a GET or a HEAD is refused here, whichever front end it came through.
pub async fn run_as(st: &AppState, caller: Caller, mut req: Request, next: Next) -> Response {
    let identity = identity(st, &caller, req.headers());
    let reads = matches!(
        *req.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    if let Some(refused) = over_rate(st, &caller, req.headers()) {
        let mut response = refused.into_response();
        response.extensions_mut().insert(identity);
        return response;
    }
    if caller.role == Role::Metrics {
        let scrape = req.method() == axum::http::Method::GET && req.uri().path() == "/metrics";
        let mut response = match scrape {
            // The scraper reads every tenant's figures, as the operator does, and nothing else.
            true => {
                req.extensions_mut().insert(Caller::operator());
                next.run(req).await
            }
            false => ApiError::new(
                StatusCode::FORBIDDEN,
                "metrics_token",
                format!(
                    "a metrics token may only read GET /metrics; {} {} needs another token",
                    req.method(),
                    req.uri().path()
                ),
            )
            .into_response(),
        };
        response.extensions_mut().insert(identity);
        return response;
    }
    if caller.role == Role::ReadOnly && !reads {
        let mut response = ApiError::new(
            StatusCode::FORBIDDEN,
            "read_only_token",
            format!(
                "a read-only token of tenant \"{}\" may only read (GET); {} needs a user token",
                caller.tenant,
                req.method()
            ),
        )
        .into_response();
        response.extensions_mut().insert(identity);
        return response;
    }
    req.extensions_mut().insert(caller);
    let mut response = next.run(req).await;
    response.extensions_mut().insert(identity);
    response
}

/// 429 `rate_limited` when `caller`'s tenant is over its request rate on this node (see `rate`). Operators are not
/// limited, and a request another node forwarded was counted where it came in.
fn over_rate(st: &AppState, caller: &Caller, headers: &HeaderMap) -> Option<ApiError> {
    let rates = &st.policy.request_rates;
    if !rates.is_on() || caller.role == Role::Operator || from_peer(st, headers) {
        return None;
    }
    let over = st.rates.take(rates, &caller.tenant).err()?;
    st.rt
        .metrics()
        .quota_refused(&caller.tenant, "rate_limited");
    let seconds = over.retry_after.as_secs_f64().ceil().max(1.0) as u32;
    Some(
        ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            format!(
                "tenant \"{}\" is over its rate of {} requests on this node; retry after {seconds} s, or ask the \
                 operator to raise it (serve --tenant-request-rate-for {}=RATE)",
                caller.tenant, over.rate, caller.tenant
            ),
        )
        .retry_after(seconds),
    )
}

/// What a request's token comes to.
pub enum Authenticated {
    /// The caller it speaks for.
    Caller(Caller),
    /// No token, or one the server does not know.
    Refused,
    /// A tenant token that could not be checked, because the store holding the tokens is unavailable: the request
    /// is answered 503, never 401, since a client that reads 401 drops or rotates a good credential.
    Unchecked(String),
}

/// The caller a request's token speaks for (see [`Authenticated`]).
pub async fn authenticate(st: &AppState, headers: &HeaderMap) -> Authenticated {
    let Some(expected) = st.token.as_deref() else {
        return Authenticated::Caller(Caller::operator());
    };
    let Some(given) = bearer(headers) else {
        return Authenticated::Refused;
    };
    if expected.matches(given.as_bytes()) {
        return Authenticated::Caller(Caller::operator());
    }
    if let Some(cluster) = st.cluster.as_deref() {
        if token::same_secret(given.as_bytes(), cluster.token.as_bytes()) {
            // A peer's request on behalf of a client it authenticated; a request of its own speaks as the operator.
            return Authenticated::Caller(
                caller_from_header(headers).unwrap_or_else(Caller::operator),
            );
        }
    }
    if token::id_of(given).is_some() {
        return match st.rt.tenancy().verify(given).await {
            Ok(Some(caller)) => Authenticated::Caller(caller),
            Ok(None) => Authenticated::Refused,
            // The cause names the store's host: it is in the log (see `Tenancy::verify`), not in an answer to a
            // client that has not proven who it is.
            Err(_) => Authenticated::Unchecked(
                "the token could not be checked: the server's store is unavailable; retry shortly"
                    .into(),
            ),
        };
    }
    if let Some(peer) = headers.get(&FORWARDED_BY).and_then(|v| v.to_str().ok()) {
        tracing::warn!(
            peer,
            "a request forwarded by another node was refused: its cluster token is not this node's"
        );
    }
    Authenticated::Refused
}

/// Requires a token the server knows (unless it runs with `--no-auth`) and hands its [`Caller`] to the handler.
pub async fn require_caller(State(st): State<AppState>, req: Request, next: Next) -> Response {
    if metrics_scrape(&st, &req) {
        // The scraper's token reads the metrics, as the operator, and nothing else.
        let mut req = req;
        req.extensions_mut().insert(Caller::operator());
        let mut response = next.run(req).await;
        response.extensions_mut().insert(super::access::Identity {
            tenant: Caller::operator().tenant,
            token_id: "metrics".into(),
        });
        return response;
    }
    match authenticate(&st, req.headers()).await {
        Authenticated::Caller(caller) => run_as(&st, caller, req, next).await,
        Authenticated::Unchecked(why) => ApiError::store_unavailable(why).into_response(),
        Authenticated::Refused => ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send Authorization: Bearer <token>: the server's token (printed at start-up and stored in \
             $SERVICE_HOME/serve.token) or a tenant token from `service-rs tokens create`",
        )
        .into_response(),
    }
}

/// Whether `req` is `GET /metrics` with the metrics token (`--metrics-token`), which opens that and nothing else.
fn metrics_scrape(st: &AppState, req: &Request) -> bool {
    let Some(expected) = st.policy.metrics_token.as_deref() else {
        return false;
    };
    req.method() == axum::http::Method::GET
        && req.uri().path() == "/metrics"
        && bearer(req.headers()).is_some_and(|given| expected.matches(given.as_bytes()))
}

/// What a path names: `/sessions/{id}…` or `/approvals/{id}`.
enum Target<'a> {
    Session(&'a str),
    Approval(&'a str),
}

fn first_segment(rest: &str) -> Option<&str> {
    rest.split('/').next().filter(|s| !s.is_empty())
}

fn target(path: &str) -> Option<Target<'_>> {
    if let Some(rest) = path.strip_prefix("/sessions/") {
        return first_segment(rest).map(Target::Session);
    }
    path.strip_prefix("/approvals/")
        .and_then(first_segment)
        .map(Target::Approval)
}

/// Answers 404 for a session or approval request of another tenant, as for one that does not exist.
pub async fn scope(State(st): State<AppState>, req: Request, next: Next) -> Response {
    // Set by `require_caller`, which every scoped route sits behind; its absence refuses, never allows.
    let Some(caller) = req.extensions().get::<Caller>().cloned() else {
        return ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the request was not authenticated",
        )
        .into_response();
    };
    if caller.admin {
        return next.run(req).await;
    }
    let path = req.uri().path().to_string();
    let hidden = match target(&path) {
        Some(Target::Session(id)) => match st.rt.session_tenant(id).await {
            Ok(tenant) if caller.sees(&tenant) => None,
            Ok(_) | Err(RuntimeError::SessionNotFound(_)) => Some(ApiError::from(
                RuntimeError::SessionNotFound(id.to_string()),
            )),
            Err(e) => Some(ApiError::from(e)),
        },
        Some(Target::Approval(id)) => match st.rt.approval_tenant(id).await {
            Some(tenant) if caller.sees(&tenant) => None,
            _ => Some(ApiError::from(RuntimeError::ApprovalNotFound(
                id.to_string(),
            ))),
        },
        None => None,
    };
    match hidden {
        Some(error) => error.into_response(),
        None => next.run(req).await,
    }
}

/// Whether `caller` may use the installed bundle whose exact reference is `reference`: always, unless the server
/// runs with `--tenant-bundles`; then an admin, or a tenant it was granted to. Bundle directories (`--allow-path`)
/// are the operator's policy, not a tenant's.
pub async fn may_use_bundle(
    st: &AppState,
    caller: &Caller,
    reference: &str,
) -> Result<bool, ApiError> {
    if !st.policy.tenant_bundles || caller.admin {
        return Ok(true);
    }
    if matches!(
        crate::bundle::reference::BundleRef::parse(reference),
        Ok(crate::bundle::reference::BundleRef::Path(_))
    ) {
        return Ok(true);
    }
    let name = crate::tenancy::bundle_name(reference);
    st.rt
        .tenancy()
        .granted(&caller.tenant, &name)
        .await
        .map_err(store_error)
}

/// `404 bundle_not_found` for `given` (as the client wrote it) unless `caller` may use the installed bundle
/// `reference`: a bundle not granted is not there, as far as the tenant can tell.
pub async fn check_bundle(
    st: &AppState,
    caller: &Caller,
    given: &str,
    reference: &str,
) -> Result<(), ApiError> {
    if may_use_bundle(st, caller, reference).await? {
        return Ok(());
    }
    Err(ApiError::from(RuntimeError::from(
        crate::bundle::BundleError::NotFound(given.to_string()),
    )))
}

/// Lets `caller` install the bundle name `name` (`local/<id>`), under `--tenant-bundles`: a name has one owner, the
/// first tenant to install it, and a name already in the store without one is the operator's. Another tenant's
/// import or pull of it is refused (`409 bundle_name_taken`), so no tenant can shadow, export or run a version of
/// a bundle it was not given. The owner is granted its name. An admin installs any name.
pub async fn admit_install(st: &AppState, caller: &Caller, name: &str) -> Result<(), ApiError> {
    if !st.policy.tenant_bundles || caller.admin {
        return Ok(());
    }
    let tenancy = st.rt.tenancy();
    let owner = match tenancy.name_owner(name).await.map_err(store_error)? {
        Some(owner) => owner,
        None => {
            let home = st.rt.home().clone();
            let id = name.rsplit('/').next().unwrap_or(name).to_string();
            let operators = tokio::task::spawn_blocking(move || {
                crate::bundle::store::has_any_version(&home, &id)
            })
            .await
            .unwrap_or(true);
            if operators {
                return Err(name_taken(name));
            }
            tenancy
                .claim_name(name, &caller.tenant)
                .await
                .map_err(store_error)?
        }
    };
    if owner != caller.tenant {
        return Err(name_taken(name));
    }
    tenancy
        .grant_now(&caller.tenant, name)
        .await
        .map_err(store_error)
}

fn name_taken(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "bundle_name_taken",
        format!(
            "the bundle name \"{name}\" belongs to another owner on this server; give your bundle another id in \
             service.bundle.json5, build it and import it again"
        ),
    )
}

/// Refuses a caller that is not an admin (token management, metrics, removing shared bundles).
pub fn admin_only(caller: &Caller, what: &str) -> Result<(), ApiError> {
    if caller.admin {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "admin_only",
        format!(
            "{what} needs an admin token; tenant \"{}\"'s token is not one",
            caller.tenant
        ),
    ))
}

fn quota_error(st: &AppState, tenant: &str, code: &str, message: String) -> ApiError {
    st.rt.counters().quota_refused(tenant, code);
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, code, message)
}

fn store_error(e: crate::tenancy::TenancyError) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        e.to_string(),
    )
    .retry_after(1)
}

/// Seconds until the next UTC midnight, when the day's tokens start again.
fn until_midnight() -> u32 {
    let now = chrono::Utc::now();
    let tomorrow = (now.date_naive() + chrono::Days::new(1))
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc());
    tomorrow.map_or(3600, |t| {
        u32::try_from((t - now).num_seconds().max(1)).unwrap_or(3600)
    })
}

/// Refuses a new turn past the caller's `concurrent_turns` or `tokens_per_day` quota, with `Retry-After`.
pub async fn admit_turn(st: &AppState, caller: &Caller) -> Result<(), ApiError> {
    let tenancy = st.rt.tenancy();
    let Some(quota) = tenancy.quota(&caller.tenant).await.map_err(store_error)? else {
        return Ok(());
    };
    if let Some(limit) = quota.tokens_per_day {
        let spent = tenancy
            .tokens_today(&caller.tenant)
            .await
            .map_err(store_error)?;
        if spent >= limit {
            return Err(quota_error(
                st,
                &caller.tenant,
                "quota_tokens",
                format!(
                    "tenant \"{}\" has spent {spent} of its {limit} tokens for today (UTC); they start again at \
                     midnight UTC",
                    caller.tenant
                ),
            )
            .retry_after(until_midnight()));
        }
    }
    if let Some(limit) = quota.concurrent_turns {
        let running = st
            .rt
            .list_sessions()
            .await?
            .iter()
            .filter(|r| {
                r.tenant() == caller.tenant
                    && r.parent.is_none()
                    && r.status == crate::runtime::record::SessionStatus::Running
            })
            .count() as u64;
        if running >= limit {
            return Err(quota_error(
                st,
                &caller.tenant,
                "quota_concurrent_turns",
                format!(
                    "tenant \"{}\" runs {running} turns at once, its limit; retry when one has ended",
                    caller.tenant
                ),
            )
            .retry_after(1));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_header_names_a_tenant_and_its_role() {
        let mut headers = HeaderMap::new();
        for role in [
            Role::Operator,
            Role::TenantAdmin,
            Role::User,
            Role::ReadOnly,
            Role::Metrics,
        ] {
            let acme = Caller::of("acme", role);
            headers.insert(CALLER, caller_header(&acme));
            assert_eq!(caller_from_header(&headers), Some(acme));
        }
        // What a node of the release before roles sends.
        headers.insert(CALLER, HeaderValue::from_static("tenant:acme"));
        assert_eq!(
            caller_from_header(&headers),
            Some(Caller::of("acme", Role::User))
        );
        for bad in ["root:acme", "tenant:", "tenant:Acme", "acme"] {
            headers.insert(CALLER, HeaderValue::from_static(bad));
            assert_eq!(caller_from_header(&headers), None, "{bad}");
        }
    }

    #[test]
    fn paths_name_the_session_or_approval_they_are_about() {
        assert!(matches!(
            target("/sessions/abc/run"),
            Some(Target::Session("abc"))
        ));
        assert!(matches!(
            target("/approvals/r1"),
            Some(Target::Approval("r1"))
        ));
        assert!(target("/sessions").is_none());
        assert!(target("/sessions/").is_none());
        assert!(target("/bundles/x").is_none());
    }
}
