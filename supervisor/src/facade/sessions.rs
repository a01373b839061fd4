//! What a facade may do with sessions: the same operations over the runtime in this process or over a server
//! (`--remote`), so that a protocol module does not know which it has.

use std::collections::BTreeMap;
use std::path::Path;

use service_ipc::{ApprovalDecision, EventMsg, Task, TurnOverrides};

use crate::bundle::mcp::McpServerSpec;
use crate::bundle::BundleInfo;
use crate::runtime::{EventStream, RuntimeError, SessionRecord};
use crate::ServiceRuntime;

/// A failed operation, as the HTTP API would report it: a stable snake_case code and a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FacadeError {
    /// Stable snake_case code (`session_not_found`, `turn_in_progress`, …).
    pub code: String,
    /// What went wrong and what to do.
    pub message: String,
}

impl FacadeError {
    /// An error of `code` saying `message`.
    pub fn new(code: &str, message: impl Into<String>) -> FacadeError {
        FacadeError {
            code: code.to_string(),
            message: message.into(),
        }
    }
}

impl From<RuntimeError> for FacadeError {
    fn from(e: RuntimeError) -> FacadeError {
        let body = crate::server::api::ApiError::from(e).into_body();
        FacadeError {
            code: body.code,
            message: body.message,
        }
    }
}

/// Result of a facade operation.
pub type Result<T> = std::result::Result<T, FacadeError>;

/// The session operations a protocol facade needs.
#[async_trait::async_trait]
pub trait Sessions: Send + Sync + 'static {
    /// Creates a session of `bundle_ref` working in `cwd`, with `extra_mcp` servers joining the bundle's own.
    async fn create(
        &self,
        bundle_ref: &str,
        cwd: &Path,
        extra_mcp: BTreeMap<String, McpServerSpec>,
    ) -> Result<SessionRecord>;
    /// The record of session `id`.
    async fn record(&self, id: &str) -> Result<SessionRecord>;
    /// Every session, newest activity first.
    async fn list(&self) -> Result<Vec<SessionRecord>>;
    /// What a bundle is (its skills, its model).
    async fn bundle(&self, reference: &str) -> Result<BundleInfo>;
    /// Every journaled event of a session, oldest first.
    async fn journal(&self, id: &str) -> Result<Vec<EventMsg>>;
    /// The session's events from now on; subscribe before starting a turn to miss none of it.
    async fn live_events(&self, id: &str) -> Result<EventStream>;
    /// Starts a turn of `task`; returns its id. Its end arrives as an event.
    async fn start_turn(&self, id: &str, task: Task) -> Result<String>;
    /// Answers a pending permission request.
    async fn resolve(&self, request_id: &str, decision: ApprovalDecision) -> Result<()>;
    /// Interrupts the session's running turn.
    async fn interrupt(&self, id: &str) -> Result<()>;
    /// Deletes those of `made` (sessions this facade made) that never ran a turn: the client has gone.
    async fn discard_unused(&self, made: &[String]);
    /// Stops every worker this facade started (the client has gone).
    async fn shutdown(&self, reason: &str);
}

#[async_trait::async_trait]
impl Sessions for ServiceRuntime {
    async fn create(
        &self,
        bundle_ref: &str,
        cwd: &Path,
        extra_mcp: BTreeMap<String, McpServerSpec>,
    ) -> Result<SessionRecord> {
        let mut bundle =
            crate::bundle::resolve(self.home(), bundle_ref).map_err(RuntimeError::from)?;
        join_servers(&mut bundle, extra_mcp)?;
        Ok(self
            .create_session_from(bundle, bundle_ref, Some(cwd))
            .await?)
    }

    async fn record(&self, id: &str) -> Result<SessionRecord> {
        Ok(self.get_session(id).await?)
    }

    async fn list(&self) -> Result<Vec<SessionRecord>> {
        Ok(self.list_sessions().await?)
    }

    async fn bundle(&self, reference: &str) -> Result<BundleInfo> {
        Ok(crate::bundle::resolve(self.home(), reference)
            .map_err(RuntimeError::from)?
            .info())
    }

    async fn journal(&self, id: &str) -> Result<Vec<EventMsg>> {
        Ok(self.session_events(id).await?)
    }

    async fn live_events(&self, id: &str) -> Result<EventStream> {
        Ok(self.subscribe_session(id).await?)
    }

    async fn start_turn(&self, id: &str, task: Task) -> Result<String> {
        Ok(
            ServiceRuntime::start_turn(self, id, task, TurnOverrides::default())
                .await?
                .turn_id,
        )
    }

    async fn resolve(&self, request_id: &str, decision: ApprovalDecision) -> Result<()> {
        Ok(self.resolve_approval(request_id, decision).await?)
    }

    async fn interrupt(&self, id: &str) -> Result<()> {
        ServiceRuntime::interrupt(self, id).await.map(drop)?;
        Ok(())
    }

    async fn discard_unused(&self, made: &[String]) {
        for id in made {
            if let Err(e) = self.delete_if_unused(id).await {
                tracing::debug!(session = %id, "not deleted at exit: {e}");
            }
        }
    }

    async fn shutdown(&self, reason: &str) {
        ServiceRuntime::shutdown(self, reason).await;
    }
}

/// Adds a client's MCP servers to a bundle loaded for one session: they run in its sandbox under its rules, as if
/// its agent.yaml named them. A name the bundle already uses is refused, so a client cannot replace a server.
pub fn join_servers(
    bundle: &mut crate::bundle::Bundle,
    extra: BTreeMap<String, McpServerSpec>,
) -> Result<()> {
    for (name, spec) in extra {
        if let Err((key, message)) = spec.validate(&name) {
            return Err(FacadeError::new(
                "invalid_request",
                format!("{key}: {message}"),
            ));
        }
        // A client names values, not the host's variables: what reaches a sandbox from the host is the operator's.
        if !spec.env_from_host.is_empty() {
            return Err(FacadeError::new(
                "invalid_request",
                format!("MCP server \"{name}\": a client's server cannot take host variables; pass values in env"),
            ));
        }
        if bundle.agent.mcp_servers.contains_key(&name) {
            return Err(FacadeError::new(
                "invalid_request",
                format!("bundle {} already has an MCP server named \"{name}\"; give the client's server another name", bundle.manifest.id),
            ));
        }
        bundle.agent.mcp_servers.insert(name, spec);
    }
    Ok(())
}
