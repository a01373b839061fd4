//! Sessions whose workspace starts as a copy of a directory (a batch item's project): the session gets its own
//! workspace under the store, and the directory is copied into it as `isolation: copy` copies a parent's (links
//! as links, nothing followed, everything given to the sandbox user).

use std::path::Path;

use super::error::{Result, RuntimeError};
use super::record::{Budget, SessionRecord};
use super::subagents::copy;
use super::ServiceRuntime;

impl ServiceRuntime {
    /// A new session `id` (a UUID the caller chose, so that it can note it before the session exists) of
    /// `bundle_ref`, working in a copy of `from` (an empty workspace without one), held to `budget`. A session
    /// whose copy failed is not kept.
    pub async fn create_session_seeded(
        &self,
        id: String,
        bundle_ref: &str,
        from: Option<&Path>,
        budget: Option<Budget>,
    ) -> Result<SessionRecord> {
        if uuid::Uuid::parse_str(&id).is_err() {
            return Err(RuntimeError::InvalidRequest(format!(
                "session id {id} is not a UUID"
            )));
        }
        let bundle = crate::bundle::resolve(&self.inner.home, bundle_ref)?;
        let session = self
            .create_session_as(id, bundle, bundle_ref, None, None, None)
            .await?;
        let record = session.record();
        let seeded = async {
            if let Some(from) = from {
                let owner = match &self.inner.options.sandbox_user {
                    crate::sandbox::identity::SandboxUser::Other { id, .. } => Some(*id),
                    crate::sandbox::identity::SandboxUser::Own => None,
                };
                let (from, to) = (from.to_path_buf(), session.cwd());
                tokio::task::spawn_blocking(move || copy::copy_workspace(&from, &to, owner))
                    .await
                    .map_err(|_| {
                        RuntimeError::InvalidRequest(
                            "the workspace copy stopped unexpectedly".into(),
                        )
                    })?
                    .map_err(|e| {
                        RuntimeError::InvalidRequest(format!("cannot copy the workspace: {e}"))
                    })?;
            }
            session.set_budget(budget)
        }
        .await;
        if seeded.is_err() {
            if let Err(gone) = self.delete_session(&record.id).await {
                tracing::warn!(session = %record.id, "a session whose workspace could not be made stays: {gone}");
            }
        }
        seeded
    }
}
