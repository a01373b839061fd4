//! What the TUI talks to: the local runtime, or a running server over HTTP (`--remote`). Both offer the same
//! operations; the TUI does not know which it has.

use anyhow::{anyhow, Context};
use futures::StreamExt;
use serde_json::json;
use service_ipc::{ApprovalDecision, EventMsg, Task, TurnOverrides};
use service_supervisor::bundle::BundleInfo;
use service_supervisor::runtime::{EventStream, SessionRecord};
use service_supervisor::ServiceRuntime;

use super::remote::Remote;

/// The TUI's backend.
#[derive(Clone)]
pub enum Backend {
    /// The runtime in this process.
    Local(ServiceRuntime),
    /// A server at a base URL.
    Remote(Remote),
}

impl Backend {
    pub async fn create_session(&self, bundle_ref: &str) -> anyhow::Result<SessionRecord> {
        match self {
            Backend::Local(rt) => Ok(rt.create_session(bundle_ref, None)?),
            Backend::Remote(r) => {
                let v = r
                    .call(
                        reqwest::Method::POST,
                        "/sessions",
                        Some(json!({"bundle_ref": bundle_ref})),
                    )
                    .await?;
                Ok(serde_json::from_value(v)?)
            }
        }
    }

    pub async fn sessions(&self) -> anyhow::Result<Vec<SessionRecord>> {
        match self {
            Backend::Local(rt) => Ok(rt.list_sessions()?),
            Backend::Remote(r) => Ok(serde_json::from_value(
                r.call(reqwest::Method::GET, "/sessions", None).await?,
            )?),
        }
    }

    pub async fn bundle(&self, reference: &str) -> anyhow::Result<BundleInfo> {
        match self {
            Backend::Local(rt) => {
                Ok(service_supervisor::bundle::resolve(rt.home(), reference)?.info())
            }
            Backend::Remote(r) => {
                let path = format!("/bundles/{}", super::remote::encode(reference));
                Ok(serde_json::from_value(
                    r.call(reqwest::Method::GET, &path, None).await?,
                )?)
            }
        }
    }

    /// Every event of the session from the start, then live ones.
    pub async fn events(&self, id: &str) -> anyhow::Result<EventStream> {
        match self {
            Backend::Local(rt) => Ok(rt.subscribe_session_from(id, 0)?),
            Backend::Remote(r) => {
                let resp = r
                    .request(
                        reqwest::Method::GET,
                        &format!("/sessions/{id}/events?after=0"),
                    )
                    .send()
                    .await
                    .context("cannot open the event stream")?
                    .error_for_status()?;
                let frames = service_supervisor::event_source::events(resp.bytes_stream());
                Ok(Box::pin(frames.filter_map(|f| async move {
                    f.ok()
                        .and_then(|f| serde_json::from_str::<EventMsg>(&f.data).ok())
                })))
            }
        }
    }

    pub async fn start_turn(
        &self,
        id: &str,
        task: Task,
        overrides: TurnOverrides,
    ) -> anyhow::Result<()> {
        match self {
            Backend::Local(rt) => rt
                .start_turn(id, task, overrides)
                .await
                .map(drop)
                .map_err(Into::into),
            Backend::Remote(r) => {
                let body = json!({"input": task, "turn_context": overrides});
                r.call(
                    reqwest::Method::POST,
                    &format!("/sessions/{id}/run"),
                    Some(body),
                )
                .await
                .map(drop)
            }
        }
    }

    pub async fn command(&self, id: &str, command: &str) -> anyhow::Result<()> {
        match self {
            Backend::Local(rt) => rt
                .run_session_command(id, command)
                .await
                .map(drop)
                .map_err(Into::into),
            Backend::Remote(r) => {
                let body = json!({"command": command});
                r.call(
                    reqwest::Method::POST,
                    &format!("/sessions/{id}/commands"),
                    Some(body),
                )
                .await
                .map(drop)
            }
        }
    }

    pub async fn resolve(
        &self,
        request_id: &str,
        decision: ApprovalDecision,
    ) -> anyhow::Result<()> {
        match self {
            Backend::Local(rt) => rt
                .resolve_approval(request_id, decision)
                .await
                .map_err(Into::into),
            Backend::Remote(r) => {
                let body = json!({"decision": decision});
                r.call(
                    reqwest::Method::POST,
                    &format!("/approvals/{request_id}"),
                    Some(body),
                )
                .await
                .map(drop)
            }
        }
    }

    pub async fn interrupt(&self, id: &str) -> anyhow::Result<()> {
        match self {
            Backend::Local(rt) => rt.interrupt(id).await.map(drop).map_err(Into::into),
            Backend::Remote(r) => r
                .call(
                    reqwest::Method::POST,
                    &format!("/sessions/{id}/interrupt"),
                    None,
                )
                .await
                .map(drop)
                .map_err(|e| anyhow!("{e}")),
        }
    }
}
