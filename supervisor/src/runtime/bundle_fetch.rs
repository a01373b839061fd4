//! A node of a cluster loading a session whose bundle it never installed: another node created the session. When the
//! session was made from a registry reference on a registry the operator allows (`serve --allow-registry`), the node
//! pulls it, verified blob by blob, and then runs it only if its digest is the one the session was created with.
//! A `local/` bundle installed through another node's API is installed from the shared store (`shared_bundles`).
//! Any other reference must be installed on every node (or its store path shared).

use super::error::{Result, RuntimeError};
use super::ServiceRuntime;
use crate::bundle::reference::is_registry_reference;
use crate::bundle::BundleError;
use crate::registry::{self, Access};

impl ServiceRuntime {
    /// Pulls session `id`'s bundle, which resolving here found `missing`, when the session came from an allowed
    /// registry. Otherwise the error says how to install it: a registry reference is pulled with `service-rs pull`
    /// (or by allowing its registry), anything else must be installed the same on every node.
    pub(super) async fn fetch_bundle(&self, id: &str, missing: BundleError) -> Result<()> {
        let Some(record) = self.inner.store.load(id).await? else {
            return Err(RuntimeError::SessionNotFound(id.to_string()));
        };
        let source = record.bundle_ref;
        if !is_registry_reference(&source) {
            // Installed through another node's API: the store keeps it for every node. This node's upkeep may have
            // installed it meanwhile, in which case there is nothing left to install and it resolves now.
            let reference = record.bundle.reference;
            if self.bundle_from_cluster(&reference).await? || self.holds_bundle(&reference).await {
                return Ok(());
            }
            return Err(missing.into());
        }
        let allowed = registry::registry_of(&source)
            .is_ok_and(|r| self.inner.options.pull_registries.contains(&r));
        if !allowed {
            return Err(BundleError::NotPulled(source).into());
        }
        let pulled = registry::pull(&self.inner.home, &source, &Access::default())
            .await
            .map_err(|e| RuntimeError::BundleUnavailable {
                reference: source.clone(),
                message: e.to_string(),
            })?;
        tracing::info!(session = id, reference = %source, installed = %pulled.reference(), "pulled the bundle of a session made on another node");
        Ok(())
    }

    /// Whether bundle `reference` resolves on this node now.
    async fn holds_bundle(&self, reference: &str) -> bool {
        let (home, reference) = (self.inner.home.clone(), reference.to_string());
        tokio::task::spawn_blocking(move || crate::bundle::resolve(&home, &reference).is_ok())
            .await
            .unwrap_or(false)
    }
}
