//! Bundles across the nodes of a shared store. A `local/` bundle installed through a node's API (an import) is kept
//! in the store as its content tar, whose SHA-256 is its digest. A node that lacks it installs it from there on
//! first use (a new session, a session another node made, an inspect or an export), at every listing, and at each
//! sync; each copy is checked against its digest. A bundle removed through any node is given up by every node at
//! its next sync, unless a live session there runs it. Bundles built on a node with the CLI stay that node's own:
//! one that holds the same version as the cluster's with other contents is never replaced, and is reported.

use super::error::{Result, RuntimeError};
use super::store::SharedBundle;
use super::ServiceRuntime;
use crate::bundle::reference::BundleRef;
use crate::bundle::store::{self, LOCAL_NAMESPACE};
use crate::bundle::{Bundle, Origin};

impl ServiceRuntime {
    /// Shares installed `bundle` with the other nodes: a `local/` bundle over a shared store; nothing otherwise.
    pub async fn share_bundle(&self, bundle: &Bundle) -> Result<()> {
        if !self.inner.store.shared() || !is_local(bundle) {
            return Ok(());
        }
        let copy = bundle.clone();
        let content = blocking(move || {
            let content = store::content_of(&copy)?;
            store::mark_shared(&copy)?;
            Ok(content)
        })
        .await?;
        let shared = SharedBundle {
            id: bundle.manifest.id.clone(),
            version: bundle.manifest.version.clone(),
            digest: crate::bundle::archive::sha256_digest(&content),
        };
        if shared.digest != bundle.digest {
            return Err(RuntimeError::InvalidRequest(format!(
                "{} changed on disk while it was being shared; install it again",
                bundle.reference()
            )));
        }
        self.inner.store.share_bundle(&shared, &content).await?;
        tracing::info!(bundle = %bundle.reference(), digest = %shared.digest, "bundle shared with the cluster");
        Ok(())
    }

    /// Installs from the shared store the versions of the `local/` bundle `reference` names that this node lacks
    /// or holds with other contents; true when it installed one.
    pub async fn bundle_from_cluster(&self, reference: &str) -> Result<bool> {
        if !self.inner.store.shared() {
            return Ok(false);
        }
        let Ok(BundleRef::Installed {
            namespace, name, ..
        }) = BundleRef::parse(reference)
        else {
            return Ok(false);
        };
        if namespace != LOCAL_NAMESPACE {
            return Ok(false);
        }
        let mut installed = false;
        for shared in self.inner.store.shared_bundles(Some(&name)).await? {
            installed |= self.install_shared(&shared).await?;
        }
        Ok(installed)
    }

    /// Brings this node's bundles in line with the shared store's: installs what it lacks or holds with other
    /// contents, and removes the shared ones no longer there unless a live session runs one. What it could not do
    /// is logged and kept for `/readyz` ([`ServiceRuntime::bundle_drift`]).
    pub async fn sync_bundles(&self) {
        if !self.inner.store.shared() {
            return;
        }
        let mut drift = Vec::new();
        let shared = match self.inner.store.shared_bundles(None).await {
            Ok(list) => list,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster's bundles");
                return;
            }
        };
        for b in &shared {
            if let Err(e) = self.install_shared(b).await {
                drift.push(format!("local/{}:{}: {e}", b.id, b.version));
            }
        }
        let home = self.inner.home.clone();
        let here = blocking(move || Ok(store::list_installed(&home)?))
            .await
            .unwrap_or_default();
        for i in here.iter().filter(|i| i.namespace == LOCAL_NAMESPACE) {
            let version = i.version.to_string();
            let kept = shared.iter().any(|b| b.id == i.id && b.version == version);
            if kept || !store::is_shared(&self.inner.home, &i.id, &version) {
                continue;
            }
            match self.remove_installed(&i.reference(), false).await {
                Ok(_) => {
                    tracing::info!(bundle = %i.reference(), "bundle removed: the cluster no longer has it")
                }
                Err(e) => drift.push(format!(
                    "{}: removed from the cluster, kept here: {e}",
                    i.reference()
                )),
            }
        }
        for line in &drift {
            tracing::warn!(bundle = %line, "a bundle differs from the cluster's");
        }
        *self
            .inner
            .bundle_drift
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = drift;
    }

    /// The shared bundles the last sync could not bring in line on this node, each with why.
    pub fn bundle_drift(&self) -> Vec<String> {
        self.inner
            .bundle_drift
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Installs shared bundle `b` unless this node holds it with its digest; true when it installed it.
    async fn install_shared(&self, b: &SharedBundle) -> Result<bool> {
        let home = self.inner.home.clone();
        let reference = format!("{LOCAL_NAMESPACE}/{}:{}", b.id, b.version);
        let held = blocking(move || Ok(crate::bundle::resolve(&home, &reference).ok()))
            .await?
            .map(|held| held.digest);
        match held.as_deref() {
            Some(digest) if digest == b.digest => return Ok(false),
            // Built on this node with other contents under the same version: this node's own, never replaced.
            Some(_) if !store::is_shared(&self.inner.home, &b.id, &b.version) => {
                return Err(RuntimeError::InvalidRequest(format!(
                    "{LOCAL_NAMESPACE}/{}:{} was built on this node with other contents than the cluster's; remove \
                     it here (`service-rs bundles remove`) to take the cluster's, or import this one through the API",
                    b.id, b.version
                )))
            }
            _ => {}
        }
        let Some((digest, content)) = self
            .inner
            .store
            .shared_bundle_content(&b.id, &b.version)
            .await?
        else {
            return Ok(false);
        };
        let home = self.inner.home.clone();
        let installed =
            blocking(move || Ok(store::install_shared(&home, &content, &digest)?)).await?;
        tracing::info!(bundle = %installed.reference(), digest = %installed.digest, "bundle installed from the cluster");
        Ok(true)
    }
}

fn is_local(bundle: &Bundle) -> bool {
    matches!(&bundle.origin, Origin::Installed { namespace } if namespace == LOCAL_NAMESPACE)
}

/// Runs bundle-store work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|_| RuntimeError::InvalidRequest("a bundle store task failed".into()))?
}
