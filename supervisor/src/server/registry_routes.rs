//! `POST /bundles/pull` and `POST /bundles/push`, and the pull on first use of `POST /sessions`.
//!
//! Here the server connects to a registry on a client's behalf, so a client could otherwise make it reach any
//! address it can: its own loopback, a metadata service, the hosts of a private network. Only the registries the
//! operator named with `--allow-registry` are reached; with none, these routes answer 403. Credentials are the
//! request's `auth` when given, else the server's own (`SERVICE_REGISTRY_TOKEN`, its Docker config), which the
//! operator lends by allowing the registry.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;

use super::api::ApiResult;
use super::api::{ApiError, ApiJson, Body};
use super::state::{AppState, ClientPolicy};
use crate::bundle::{self, reference::is_registry_reference};
use crate::registry::{self, Access, Pushed, RegistryError};

/// Credentials for the registry, instead of the server's own.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RegistryLogin {
    /// User name.
    pub username: String,
    /// Password or access token.
    pub password: String,
}

/// `POST /bundles/pull`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PullRequest {
    /// `<registry>/<repository>:<tag>` or `<registry>/<repository>@sha256:<digest>`, on a registry the server allows.
    #[schema(
        example = "127.0.0.1:5000/team/hello:0.1.0",
        min_length = 1,
        max_length = 255
    )]
    pub reference: String,
    /// Credentials (default: the server's own for that registry, else anonymous).
    #[serde(default)]
    pub auth: Option<RegistryLogin>,
    /// Speak plain HTTP to a registry that is not on loopback.
    #[serde(default)]
    pub plain_http: bool,
}

/// `POST /bundles/push`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PushRequest {
    /// An installed bundle's reference.
    #[schema(example = "hello", min_length = 1)]
    pub bundle_ref: String,
    /// Where to: `<registry>/<repository>:<tag>`, on a registry the server allows.
    #[schema(
        example = "127.0.0.1:5000/team/hello:0.1.0",
        min_length = 1,
        max_length = 255
    )]
    pub target: String,
    /// Credentials (default: the server's own for that registry, else anonymous).
    #[serde(default)]
    pub auth: Option<RegistryLogin>,
    /// Speak plain HTTP to a registry that is not on loopback.
    #[serde(default)]
    pub plain_http: bool,
}

impl Body for PullRequest {}
impl Body for PushRequest {}

fn access(auth: Option<RegistryLogin>, plain_http: bool) -> Access {
    let (username, password) = auth.map(|a| (a.username, a.password)).unzip();
    Access {
        username,
        password,
        plain_http,
    }
}

/// A registry reference from a client: only on a registry the operator allowed.
fn allowed(policy: &ClientPolicy, reference: &str) -> Result<(), ApiError> {
    let registry = registry::registry_of(reference)?;
    if policy.allowed_registries.contains(&registry) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::FORBIDDEN,
        "registry_refused",
        format!(
            "this server does not reach registry {registry}; ask the operator to start it with --allow-registry \
             {registry}, or upload the bundle with POST /bundles/import"
        ),
    ))
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> Self {
        use StatusCode as S;
        let message = e.to_string();
        let (status, code) = match e {
            RegistryError::Bundle(inner) => return inner.into(),
            RegistryError::BadReference { .. } => (S::UNPROCESSABLE_ENTITY, "invalid_registry_ref"),
            RegistryError::ContentDigest { .. } => (S::UNPROCESSABLE_ENTITY, "content_digest"),
            RegistryError::Denied { .. } => (S::FORBIDDEN, "registry_denied"),
            RegistryError::NotFound { .. } => (S::NOT_FOUND, "registry_not_found"),
            RegistryError::NotABundle { .. } => (S::UNPROCESSABLE_ENTITY, "not_a_bundle"),
            RegistryError::Tampered { .. } => (S::BAD_GATEWAY, "registry_tampered"),
            RegistryError::Transport { .. } => (S::BAD_GATEWAY, "registry_unreachable"),
        };
        ApiError::new(status, code, message)
    }
}

/// Pulls a bundle from an allowed registry and installs it; every blob is verified.
#[utoipa::path(post, path = "/bundles/pull", request_body = PullRequest,
    responses((status = 201, description = "The installed bundle", body = bundle::BundleInfo),
        (status = 502, description = "The registry could not be reached, or sent content that does not match its digest",
            body = super::api::ErrorEnvelope)))]
pub async fn pull_bundle(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<crate::tenancy::Caller>,
    actor: super::audit::Actor,
    ApiJson(req): ApiJson<PullRequest>,
) -> ApiResult<impl IntoResponse> {
    allowed(&st.policy, &req.reference)?;
    let staged = registry::fetch(
        st.rt.home(),
        &req.reference,
        &access(req.auth, req.plain_http),
    )
    .await?;
    super::tenants::admit_install(&st, &caller, &staged.name()).await?;
    let installed = registry::install_pulled(st.rt.home(), &req.reference, staged)?;
    let info = installed.info();
    actor
        .record_bundle("bundle_pulled", &info, serde_json::json!({}))
        .await;
    Ok((
        StatusCode::CREATED,
        Json(installed.info().for_caller(caller.admin)),
    ))
}

/// Pushes an installed bundle to an allowed registry, uploading only the blobs it lacks.
#[utoipa::path(post, path = "/bundles/push", request_body = PushRequest,
    responses((status = 200, description = "What was pushed", body = Pushed),
        (status = 502, description = "The registry could not be reached", body = super::api::ErrorEnvelope)))]
pub async fn push_bundle(
    State(st): State<AppState>,
    actor: super::audit::Actor,
    ApiJson(req): ApiJson<PushRequest>,
) -> ApiResult<Json<Pushed>> {
    super::policy::bundle_ref(&st.policy, &req.bundle_ref)?;
    allowed(&st.policy, &req.target)?;
    let bundle = resolve_bundle(&st, req.bundle_ref.clone()).await?;
    let pushed = registry::push(&bundle, &req.target, &access(req.auth, req.plain_http)).await?;
    let detail = serde_json::json!({"target": req.target});
    actor
        .record_bundle("bundle_pushed", &bundle.info(), detail)
        .await;
    Ok(Json(pushed))
}

/// For `POST /sessions` (and the OpenAI routes' model): a registry reference on an allowed registry that was never
/// pulled is pulled with the server's credentials; a `local/` bundle another node of a shared store installed is
/// installed from the store. Anything else is left to the resolver (which answers `bundle_not_pulled` or
/// `bundle_not_found`).
pub async fn fetch_on_first_use(st: &AppState, reference: &str) -> Result<(), ApiError> {
    if resolve_blocking(st, reference.to_string()).await.is_ok() {
        return Ok(());
    }
    if !is_registry_reference(reference) {
        st.rt.bundle_from_cluster(reference).await?;
    } else if allowed(&st.policy, reference).is_ok() {
        let installed = registry::pull(st.rt.home(), reference, &Access::default()).await?;
        tracing::info!(reference, installed = %installed.reference(), "pulled on first use");
    }
    Ok(())
}

/// Resolves a bundle reference off the async threads (it reads the store), installing it first from a shared
/// store when another node installed it.
pub(super) async fn resolve_bundle(st: &AppState, reference: String) -> ApiResult<bundle::Bundle> {
    let first = resolve_blocking(st, reference.clone()).await;
    if first.is_err() && st.rt.bundle_from_cluster(&reference).await? {
        return resolve_blocking(st, reference).await;
    }
    first
}

async fn resolve_blocking(st: &AppState, reference: String) -> ApiResult<bundle::Bundle> {
    let home = st.rt.home().clone();
    Ok(
        tokio::task::spawn_blocking(move || bundle::resolve(&home, &reference))
            .await
            .map_err(|_| {
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "resolving the bundle failed",
                )
            })??,
    )
}
