//! Sessions a protocol client knows by its own names: an A2A context id it chose, a task it follows. A name points
//! at one session in the store, so every node of a cluster finds it; the first session to take a name keeps it.

use super::error::Result;
use super::record::SessionRecord;
use super::ServiceRuntime;

impl ServiceRuntime {
    /// Gives session `id` the name `name` unless another session has it; returns the session that has it.
    pub async fn name_session(&self, name: &str, id: &str) -> Result<String> {
        self.inner.store.name_session(name, id).await
    }

    /// The session named `name`, if it exists.
    pub async fn named_session(&self, name: &str) -> Result<Option<String>> {
        self.inner.store.named_session(name).await
    }

    /// Records the id a protocol client knows session `id` by, when it is not the session id (an A2A context).
    pub async fn set_context_id(&self, id: &str, context_id: &str) -> Result<SessionRecord> {
        let session = self.session(id).await?;
        session.set_context_id(context_id)?;
        Ok(session.record())
    }
}
