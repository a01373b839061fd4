//! What an HTTP client may name, by the operator's [`ClientPolicy`]: installed bundles (directories only under
//! `--allow-path`), a session `cwd` only under `--workspace-root`, `danger_full_access` only with
//! `--dangerous-sandbox-mode`, and a per-turn model only if it is the bundle's own or allowed with `--allow-model`.
//! Refusals echo what the client sent and never say what exists on the server.

use std::path::{Path, PathBuf};

use axum::http::StatusCode;
use service_ipc::{ModelRef, SandboxMode};

use super::api::ApiError;
use super::state::ClientPolicy;
use crate::bundle::{Bundle, BundleRef};

fn forbidden(code: &str, message: String) -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, code, message)
}

/// `path` canonicalised and under one of `roots`, else None (whether it exists or not).
fn under(roots: &[PathBuf], path: &Path) -> Option<PathBuf> {
    if !path.is_absolute() {
        return None;
    }
    let real = std::fs::canonicalize(path).ok()?;
    roots.iter().any(|r| real.starts_with(r)).then_some(real)
}

/// A `bundle_ref` from a client: store references always; a directory only under an allowed path.
pub fn bundle_ref(policy: &ClientPolicy, reference: &str) -> Result<(), ApiError> {
    if let Ok(BundleRef::Path(dir)) = BundleRef::parse(reference) {
        if under(&policy.allow_paths, &dir).is_none() {
            return Err(forbidden(
                "bundle_path_refused",
                format!(
                    "bundle_ref \"{reference}\" names a directory; over HTTP name an installed bundle (GET /bundles \
                     lists them), or ask the operator to start the server with --allow-path for it"
                ),
            ));
        }
    }
    Ok(())
}

/// A session `cwd` from a client: only under a workspace root; returns the canonical directory.
pub fn cwd(policy: &ClientPolicy, cwd: &str) -> Result<PathBuf, ApiError> {
    under(&policy.workspace_roots, Path::new(cwd))
        .filter(|p| p.is_dir())
        .ok_or_else(|| cwd_refused(cwd))
}

/// The refusal of a `cwd` that is not under a workspace root.
pub fn cwd_refused(cwd: &str) -> ApiError {
    forbidden(
        "cwd_refused",
        format!(
            "cwd \"{cwd}\" is not under a workspace root of this server; leave cwd out (each session gets its own \
             workspace), or ask the operator to start the server with --workspace-root"
        ),
    )
}

/// A bundle a client asked to run: `danger_full_access` only when the server allows it.
pub fn sandbox(policy: &ClientPolicy, bundle: &Bundle) -> Result<(), ApiError> {
    if bundle.manifest.sandbox.mode == SandboxMode::DangerFullAccess && !policy.dangerous {
        return Err(forbidden(
            "dangerous_bundle_refused",
            format!(
                "bundle {} asks for sandbox mode danger_full_access, which this server does not run; the operator \
                 can allow it with --dangerous-sandbox-mode",
                bundle.manifest.id
            ),
        ));
    }
    Ok(())
}

/// A per-turn model from a client: the bundle's own, or one the operator allowed.
pub fn model(policy: &ClientPolicy, bundle: &Bundle, model: &ModelRef) -> Result<(), ApiError> {
    let own = bundle.agent.model.to_ref();
    let name = format!("{}/{}", model.provider, model.name);
    if (own.provider == model.provider && own.name == model.name)
        || policy.allowed_models.contains(&name)
    {
        return Ok(());
    }
    Err(forbidden(
        "model_refused",
        format!(
            "model {name} is not allowed on this server; use the bundle's own model, or ask the operator to start \
             the server with --allow-model {name}"
        ),
    ))
}
