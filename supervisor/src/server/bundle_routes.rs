//! The bundle routes that change the store or move a bundle: remove, export as an OCI layout tar, import one.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::Json;
use serde::Deserialize;

use super::api::ApiResult;
use super::api::{ApiError, ApiPath, ApiQuery};
use super::audit::Actor;
use super::state::AppState;
use crate::bundle::{self, Origin};

/// `DELETE /bundles/{reference}` query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct RemoveQuery {
    /// Stop the live sessions of the bundle instead of refusing.
    #[serde(default)]
    pub force: bool,
}

fn blocking_failed(what: &str) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "internal",
        format!("{what} failed"),
    )
}

/// Removes an installed bundle; 409 while a live session uses it, unless `force`.
#[utoipa::path(delete, path = "/bundles/{reference}",
    params(("reference" = String, Path, description = "An installed bundle's reference, URL-encoded", example = "hello"), RemoveQuery),
    responses((status = 200, description = "What was removed", body = bundle::BundleInfo)))]
pub async fn remove_bundle(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<crate::tenancy::Caller>,
    actor: Actor,
    ApiPath(reference): ApiPath<String>,
    ApiQuery(q): ApiQuery<RemoveQuery>,
) -> ApiResult<Json<bundle::BundleInfo>> {
    // Installed bundles are shared by every tenant.
    super::tenants::admin_only(&caller, "removing a bundle")?;
    super::policy::bundle_ref(&st.policy, &reference)?;
    let removed = st.rt.remove_bundle(&reference, q.force).await?;
    actor
        .record_bundle(
            "bundle_removed",
            &removed,
            serde_json::json!({"force": q.force}),
        )
        .await;
    Ok(Json(removed))
}

/// An installed bundle as an OCI image layout tar (`skopeo` reads it as `oci-archive:`).
#[utoipa::path(get, path = "/bundles/{reference}/export",
    params(("reference" = String, Path, description = "An installed bundle's reference, URL-encoded", example = "hello")),
    responses((status = 200, description = "The OCI layout as a tar", content_type = "application/x-tar", body = Vec<u8>)))]
pub async fn export_bundle(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<crate::tenancy::Caller>,
    ApiPath(reference): ApiPath<String>,
) -> ApiResult<impl IntoResponse> {
    super::policy::bundle_ref(&st.policy, &reference)?;
    if st.policy.tenant_bundles && !caller.admin {
        let bundle = super::registry_routes::resolve_bundle(&st, reference.clone()).await?;
        super::tenants::check_bundle(&st, &caller, &reference, &bundle.reference()).await?;
    }
    let home = st.rt.home().clone();
    let (name, bytes) = tokio::task::spawn_blocking(move || {
        let bundle = bundle::resolve(&home, &reference)?;
        let (_, bytes) = bundle::oci_archive::export_bytes(&bundle)?;
        Ok::<_, bundle::BundleError>((
            format!("{}-{}.tar", bundle.manifest.id, bundle.manifest.version),
            bytes,
        ))
    })
    .await
    .map_err(|_| blocking_failed("exporting the bundle"))??;
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-tar".to_string()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        bytes,
    ))
}

/// Installs the bundle in an uploaded OCI layout tar (`content-type: application/x-tar`); every blob is verified.
#[utoipa::path(post, path = "/bundles/import",
    request_body(description = "An OCI layout tar, as `export` writes", content(
        (Vec<u8> = "application/x-tar"),
        (Vec<u8> = "application/octet-stream"))),
    responses((status = 201, description = "The installed bundle", body = bundle::BundleInfo),
        (status = 409, description = "`bundle_name_taken`: under --tenant-bundles, another owner holds the bundle's name", body = super::api::ErrorEnvelope),
        (status = 422, description = "The body is not a bundle's OCI layout tar, or a file in it is wrong", body = super::api::ErrorEnvelope)))]
pub async fn import_bundle(
    State(st): State<AppState>,
    axum::Extension(caller): axum::Extension<crate::tenancy::Caller>,
    actor: Actor,
    body: Bytes,
) -> ApiResult<impl IntoResponse> {
    let home = st.rt.home().clone();
    let staged = tokio::task::spawn_blocking(move || {
        bundle::oci_archive::stage_from(
            &home,
            std::io::Cursor::new(body),
            std::path::Path::new("the uploaded archive"),
        )
    })
    .await
    .map_err(|_| blocking_failed("importing the bundle"))??;
    super::tenants::admit_install(&st, &caller, &staged.name()).await?;
    let home = st.rt.home().clone();
    let installed = tokio::task::spawn_blocking(move || staged.install(&home))
        .await
        .map_err(|_| blocking_failed("importing the bundle"))??;
    debug_assert!(matches!(installed.origin, Origin::Installed { .. }));
    // Over a shared store every node runs it: the store keeps its content for them.
    st.rt.share_bundle(&installed).await?;
    let info = installed.info();
    actor
        .record_bundle("bundle_imported", &info, serde_json::json!({}))
        .await;
    Ok((
        StatusCode::CREATED,
        Json(installed.info().for_caller(caller.admin)),
    ))
}
