//! Tenant administration over HTTP, for `service-rs tokens … --remote` with an admin token: tokens, quotas, and
//! the usage ledger (which a tenant's own token may read for its tenant).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;

use super::api::ApiResult;
use super::api::{ApiError, ApiJson, ApiPath, ApiQuery, Body};
use super::audit::Actor;
use super::state::AppState;
use super::tenants::admin_only;
use crate::tenancy::usage::{self, UsageReport};
use crate::tenancy::{self, Caller, NewToken, Quota, Role, TenancyError, TokenView};

/// `POST /tokens`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateToken {
    /// The tenant it speaks for (1-63 of a-z, 0-9, '.', '_', '-').
    #[schema(pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$")]
    pub tenant: String,
    /// An admin token is an operator's: it sees every tenant and manages tokens, quotas and grants (`role:
    /// "operator"` says the same; a `role` given decides, whatever this says).
    #[serde(default)]
    pub admin: bool,
    /// What it may do: `operator`, `tenant-admin` (its tenant's sessions and tokens), `user` (the default; its
    /// tenant's sessions) or `read-only` (GET only). A tenant-admin token makes tokens of its own tenant, and no
    /// operator's.
    #[serde(default)]
    pub role: Option<tenancy::Role>,
    /// How long it is valid: a number and a unit of s, m, h, d or w (`30d`, `12h`, `90m`); absent: until revoked.
    #[serde(default)]
    #[schema(pattern = r"^[0-9]{1,9}[smhdw]$")]
    pub expires: Option<String>,
    /// A note for listings.
    #[serde(default)]
    pub label: Option<String>,
}

impl Body for CreateToken {}
impl Body for Quota {}

/// `GET /usage` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UsageQuery {
    /// The first UTC day to include: `YYYY-MM-DD`, or `Nd` for N days ago (default: 30d).
    #[param(
        pattern = r"^([0-9]{4}-[0-9]{2}-[0-9]{2}|[0-9]{1,5}d)$",
        nullable = false
    )]
    pub since: Option<String>,
    /// The last UTC day to include, `YYYY-MM-DD` (default: today).
    #[param(pattern = r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", nullable = false)]
    pub until: Option<String>,
    /// What a row sums: `tenant` (the default), `day`, `model` or `bundle`, or several comma-separated; rows are
    /// always per tenant.
    #[param(
        pattern = r"^(tenant|day|model|bundle)(,(tenant|day|model|bundle))*$",
        nullable = false
    )]
    pub group_by: Option<String>,
    /// Only this tenant (admin tokens; a tenant's token reads its own).
    #[param(nullable = false)]
    pub tenant: Option<String>,
}

fn directory_error(e: TenancyError) -> ApiError {
    match e {
        TenancyError::BadTenant(_) => ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            e.to_string(),
        ),
        TenancyError::UnknownToken(_) => {
            ApiError::new(StatusCode::NOT_FOUND, "token_not_found", e.to_string())
        }
        _ => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            e.to_string(),
        )
        .retry_after(1),
    }
}

/// `expires` as the schema writes it: 1-9 digits and one unit of s, m, h, d or w.
fn validity(text: &str) -> Option<std::time::Duration> {
    let unit = match text.chars().last()? {
        's' => 1,
        'm' => 60,
        'h' => 3600,
        'd' => 86_400,
        'w' => 7 * 86_400,
        _ => return None,
    };
    let digits = &text[..text.len() - 1];
    let ok = (1..=9).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit());
    let n: u64 = digits.parse().ok().filter(|_| ok)?;
    Some(std::time::Duration::from_secs(n * unit))
}

/// Makes a token; the answer holds the token itself, which is never shown again.
#[utoipa::path(post, path = "/tokens", request_body = CreateToken,
    responses((status = 201, description = "The new token, shown once", body = NewToken)))]
pub async fn create_token(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    actor: Actor,
    ApiJson(req): ApiJson<CreateToken>,
) -> ApiResult<impl IntoResponse> {
    // `role` decides when given; `admin` is the older spelling of the operator's.
    let role = match (req.role, req.admin) {
        (Some(role), _) => role,
        (None, true) => Role::Operator,
        (None, false) => Role::User,
    };
    may_manage(&caller, &req.tenant, role, "making tokens")?;
    let valid_for = match req.expires.as_deref() {
        None => None,
        Some(text) => Some(validity(text).ok_or_else(|| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid_request",
                format!(
                    "expires: \"{text}\" is not a duration written as a number and one unit of s, m, h, d or w, \
                     such as 30d or 12h"
                ),
            )
        })?),
    };
    let made = tenancy::create_token(
        &**st.rt.tenancy().directory(),
        &req.tenant,
        role,
        valid_for,
        req.label,
    )
    .await
    .map_err(directory_error)?;
    actor.record(
        "token_created",
        &made.id,
        serde_json::json!({"tenant": made.tenant, "role": made.role, "expires_at": made.expires_at}),
    ).await;
    Ok((StatusCode::CREATED, Json(made)))
}

/// Every token, without the tokens themselves.
#[utoipa::path(get, path = "/tokens", responses((status = 200, body = [TokenView])))]
pub async fn list_tokens(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
) -> ApiResult<Json<Vec<TokenView>>> {
    if caller.role != Role::TenantAdmin {
        admin_only(&caller, "listing tokens")?;
    }
    let all = st
        .rt
        .tenancy()
        .directory()
        .tokens()
        .await
        .map_err(directory_error)?;
    Ok(Json(
        all.into_iter()
            .map(|t| t.token)
            .filter(|t| caller.admin || t.tenant == caller.tenant)
            .collect(),
    ))
}

/// Whether `caller` may make or revoke a token of `tenant` with `role`: an operator any, a tenant admin those of its
/// own tenant but an operator's.
fn may_manage(caller: &Caller, tenant: &str, role: Role, what: &str) -> Result<(), ApiError> {
    match caller.role {
        Role::Operator => Ok(()),
        Role::TenantAdmin
            if tenant == caller.tenant && !matches!(role, Role::Operator | Role::Metrics) =>
        {
            Ok(())
        }
        Role::TenantAdmin => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "tenant_admin_scope",
            format!(
                "{what}: a tenant-admin token of \"{}\" manages its own tenant's tokens, and never an operator's \
                 or a metrics token (which reads every tenant's figures); ask an operator",
                caller.tenant
            ),
        )),
        _ => admin_only(caller, what),
    }
}

/// Revokes a token; every node refuses it within a second.
#[utoipa::path(delete, path = "/tokens/{id}", params(("id" = String, Path, description = "The token's public id")),
    responses((status = 204, description = "Revoked")))]
pub async fn revoke_token(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    actor: Actor,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    if caller.role == Role::TenantAdmin {
        // Another tenant's token is as unknown to it as one that does not exist.
        let token = st
            .rt
            .tenancy()
            .directory()
            .token(&id)
            .await
            .map_err(directory_error)?
            .ok_or_else(|| directory_error(TenancyError::UnknownToken(id.clone())))?;
        let role = Role::of(token.token.role, token.token.admin);
        if token.token.tenant != caller.tenant {
            return Err(directory_error(TenancyError::UnknownToken(id)));
        }
        may_manage(&caller, &token.token.tenant, role, "revoking tokens")?;
    } else {
        admin_only(&caller, "revoking tokens")?;
    }
    let gone = st
        .rt
        .tenancy()
        .directory()
        .revoke(&id)
        .await
        .map_err(directory_error)?;
    if !gone {
        return Err(directory_error(TenancyError::UnknownToken(id)));
    }
    actor
        .record("token_revoked", &id, serde_json::Value::Null)
        .await;
    Ok(StatusCode::NO_CONTENT)
}

/// Sets a tenant's quota; a limit left out is unlimited, and an empty object clears them all.
#[utoipa::path(put, path = "/tenants/{tenant}/quota",
    params(("tenant" = String, Path, pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$")), request_body = Quota,
    responses((status = 200, body = Quota)))]
pub async fn set_quota(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    actor: Actor,
    ApiPath(tenant): ApiPath<String>,
    ApiJson(quota): ApiJson<Quota>,
) -> ApiResult<Json<Quota>> {
    admin_only(&caller, "setting quotas")?;
    tenancy::check_tenant(&tenant).map_err(directory_error)?;
    st.rt
        .tenancy()
        .directory()
        .set_quota(&tenant, &quota)
        .await
        .map_err(directory_error)?;
    actor
        .record(
            "quota_set",
            &tenant,
            serde_json::to_value(quota).unwrap_or_default(),
        )
        .await;
    Ok(Json(quota))
}

/// Grants a tenant an installed bundle (under `serve --tenant-bundles`); the reference is URL-encoded and any
/// version in it is left out: the grant covers every version.
#[utoipa::path(put, path = "/tenants/{tenant}/bundles/{reference}",
    params(("tenant" = String, Path, pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$"),
        ("reference" = String, Path, description = "A bundle reference, URL-encoded", example = "hello")),
    responses((status = 200, description = "The grant: {tenant, bundle}", body = Object)))]
pub async fn grant_bundle(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    actor: Actor,
    ApiPath((tenant, reference)): ApiPath<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    admin_only(&caller, "granting bundles")?;
    tenancy::check_tenant(&tenant).map_err(directory_error)?;
    crate::bundle::BundleRef::parse(&reference).map_err(crate::runtime::RuntimeError::from)?;
    let name = tenancy::bundle_name(&reference);
    st.rt
        .tenancy()
        .grant_now(&tenant, &name)
        .await
        .map_err(directory_error)?;
    actor
        .record(
            "bundle_granted",
            &tenant,
            serde_json::json!({"bundle": name}),
        )
        .await;
    Ok(Json(serde_json::json!({"tenant": tenant, "bundle": name})))
}

/// Takes a grant back.
#[utoipa::path(delete, path = "/tenants/{tenant}/bundles/{reference}",
    params(("tenant" = String, Path, pattern = r"^[a-z0-9][a-z0-9._-]{0,62}$"),
        ("reference" = String, Path, description = "A bundle reference, URL-encoded", example = "hello")),
    responses((status = 204, description = "Taken back")))]
pub async fn ungrant_bundle(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    actor: Actor,
    ApiPath((tenant, reference)): ApiPath<(String, String)>,
) -> ApiResult<StatusCode> {
    admin_only(&caller, "taking grants back")?;
    tenancy::check_tenant(&tenant).map_err(directory_error)?;
    crate::bundle::BundleRef::parse(&reference).map_err(crate::runtime::RuntimeError::from)?;
    let name = tenancy::bundle_name(&reference);
    let had = st
        .rt
        .tenancy()
        .ungrant_now(&tenant, &name)
        .await
        .map_err(directory_error)?;
    if !had {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "grant_not_found",
            format!("tenant \"{tenant}\" has no grant of {name}"),
        ));
    }
    actor
        .record(
            "bundle_ungranted",
            &tenant,
            serde_json::json!({"bundle": name}),
        )
        .await;
    Ok(StatusCode::NO_CONTENT)
}

/// What tenants spent: the caller's tenant, or with an admin token every tenant or `?tenant=`; one row per group.
#[utoipa::path(get, path = "/usage", params(UsageQuery), responses((status = 200, body = UsageReport)))]
pub async fn usage(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> ApiResult<Json<UsageReport>> {
    let only = match q.tenant {
        Some(t) if t != caller.tenant => {
            admin_only(&caller, "reading another tenant's usage")?;
            Some(t)
        }
        Some(t) => Some(t),
        None if caller.admin => None,
        None => Some(caller.tenant.clone()),
    };
    let window = usage::Window::parse(
        q.since.as_deref(),
        q.until.as_deref(),
        q.group_by.as_deref(),
    )
    .map_err(|m| ApiError::new(StatusCode::BAD_REQUEST, "bad_request", m))?;
    // What this node counted and has not written yet is part of the answer.
    st.rt.tenancy().flush().await;
    let report = usage::read_report(
        &**st.rt.tenancy().directory(),
        &window,
        only.as_deref(),
        st.rt.prices(),
    )
    .await
    .map_err(directory_error)?;
    Ok(Json(report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validity_is_a_number_and_one_unit() {
        assert_eq!(
            validity("30d"),
            Some(std::time::Duration::from_secs(30 * 86_400))
        );
        assert_eq!(validity("1s"), Some(std::time::Duration::from_secs(1)));
        for bad in ["", "d", "30", "30days", "1x", "-1d", "1234567890s", " 1d"] {
            assert_eq!(validity(bad), None, "{bad}");
        }
    }
}

/// `GET /audit` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct AuditQuery {
    /// How many of the last entries (default 100, at most 1,000).
    #[param(nullable = false, minimum = 1, maximum = 1000)]
    pub limit: Option<usize>,
}

/// The last entries of the audit log, oldest first: who changed tokens, quotas and grants, from where (operator
/// tokens).
#[utoipa::path(get, path = "/audit", params(AuditQuery),
    responses((status = 200, body = [tenancy::audit::AuditEntry])))]
pub async fn audit_log(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<Caller>,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> ApiResult<Json<Vec<tenancy::audit::AuditEntry>>> {
    admin_only(&caller, "reading the audit log")?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            format!("limit: {limit} is not from 1 to 1000"),
        ));
    }
    let entries = st
        .rt
        .tenancy()
        .directory()
        .audit_tail(limit)
        .await
        .map_err(directory_error)?;
    Ok(Json(entries))
}
