//! What the session commands (`run`, `sessions`, the TUI) talk to: the local runtime, or a running server over
//! HTTP (`--remote`). Both offer the same operations; the commands do not know which they have.

use anyhow::{anyhow, Context};
use futures::StreamExt;
use serde_json::json;
use service_ipc::{ApprovalDecision, EventMsg, Task, TurnOverrides};
use service_supervisor::bundle::BundleInfo;
use service_supervisor::runtime::{EventStream, SessionRecord};
use service_supervisor::ServiceRuntime;

use super::remote::Remote;

/// The runtime behind a session command.
#[derive(Clone)]
pub enum Backend {
    /// The runtime in this process.
    Local(ServiceRuntime),
    /// A server at a base URL.
    Remote(Remote),
}

impl Backend {
    /// Who a local sandbox over `dir` runs as, for a person (None for a server's, which this process cannot tell).
    pub fn sandbox_user_over(&self, dir: &std::path::Path) -> Option<String> {
        match self {
            Backend::Local(rt) => rt.sandbox_user_over(dir),
            Backend::Remote(_) => None,
        }
    }

    pub async fn create_session(
        &self,
        bundle_ref: &str,
        cwd: Option<&std::path::Path>,
    ) -> anyhow::Result<SessionRecord> {
        match self {
            Backend::Local(rt) => Ok(rt.create_session(bundle_ref, cwd).await?),
            Backend::Remote(r) => {
                let cwd = cwd.map(|c| c.display().to_string());
                let v = r
                    .call(
                        reqwest::Method::POST,
                        "/sessions",
                        Some(json!({"bundle_ref": bundle_ref, "cwd": cwd})),
                    )
                    .await?;
                Ok(serde_json::from_value(v)?)
            }
        }
    }

    /// The session whose id is, or is the only one to start with, `prefix`.
    pub async fn find_session(&self, prefix: &str) -> anyhow::Result<SessionRecord> {
        // A whole id is looked up alone: listing every session costs a read of each record.
        if uuid::Uuid::parse_str(prefix).is_ok() {
            if let Ok(record) = self.session(prefix).await {
                return Ok(record);
            }
        }
        let records = self.sessions().await?;
        service_supervisor::runtime::record::by_id_prefix(&records, prefix)
            .cloned()
            .map_err(anyhow::Error::msg)
    }

    /// The record of session `id`.
    pub async fn session(&self, id: &str) -> anyhow::Result<SessionRecord> {
        match self {
            Backend::Local(rt) => Ok(rt.get_session(id).await?),
            Backend::Remote(r) => Ok(serde_json::from_value(
                r.call(reqwest::Method::GET, &format!("/sessions/{id}"), None)
                    .await?,
            )?),
        }
    }

    /// Every journaled event of a session, oldest first.
    pub async fn journal(&self, id: &str) -> anyhow::Result<Vec<EventMsg>> {
        match self {
            Backend::Local(rt) => Ok(rt.session_events(id).await?),
            Backend::Remote(r) => Ok(serde_json::from_value(
                r.call(
                    reqwest::Method::GET,
                    &format!("/sessions/{id}/journal"),
                    None,
                )
                .await?,
            )?),
        }
    }

    /// Stops the session's worker and deletes the session.
    pub async fn delete(&self, id: &str) -> anyhow::Result<()> {
        match self {
            Backend::Local(rt) => Ok(rt.delete_session(id).await?),
            Backend::Remote(r) => r
                .call(reqwest::Method::DELETE, &format!("/sessions/{id}"), None)
                .await
                .map(drop),
        }
    }

    pub async fn sessions(&self) -> anyhow::Result<Vec<SessionRecord>> {
        match self {
            Backend::Local(rt) => Ok(rt.list_sessions().await?),
            Backend::Remote(r) => Ok(serde_json::from_value(
                r.call(reqwest::Method::GET, "/sessions", None).await?,
            )?),
        }
    }

    pub async fn bundle(&self, reference: &str) -> anyhow::Result<BundleInfo> {
        match self {
            // With its model as a session of it would have it (`auto` chosen from what the machine has).
            Backend::Local(rt) => {
                let bundle = service_supervisor::bundle::resolve(rt.home(), reference)?;
                Ok(
                    service_supervisor::providers::choice::settle(rt.home().root(), bundle)
                        .await
                        .info(),
                )
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
        self.events_after(id, Some(0)).await
    }

    /// The session's events after sequence number `after` (None: live ones from now on).
    pub async fn events_after(&self, id: &str, after: Option<u64>) -> anyhow::Result<EventStream> {
        match self {
            Backend::Local(rt) => Ok(match after {
                Some(after) => rt.subscribe_session_from(id, after).await?,
                None => rt.subscribe_session(id).await?,
            }),
            Backend::Remote(r) => {
                let query = after.map(|a| format!("?after={a}")).unwrap_or_default();
                let resp = r
                    .request(
                        reqwest::Method::GET,
                        &format!("/sessions/{id}/events{query}"),
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

    /// Starts a turn and returns its id; its end arrives as an event.
    pub async fn start_turn(
        &self,
        id: &str,
        task: Task,
        overrides: TurnOverrides,
    ) -> anyhow::Result<String> {
        match self {
            Backend::Local(rt) => Ok(rt.start_turn(id, task, overrides).await?.turn_id),
            Backend::Remote(r) => {
                let body = json!({"input": task, "turn_context": overrides});
                let started = r
                    .call(
                        reqwest::Method::POST,
                        &format!("/sessions/{id}/run"),
                        Some(body),
                    )
                    .await?;
                started["turn_id"]
                    .as_str()
                    .map(str::to_string)
                    .ok_or_else(|| anyhow!("the server started a turn without saying its id"))
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
        self.resolve_with(request_id, decision, None).await
    }

    /// Answers a permission request; a denial may say why, for the model to read.
    pub async fn resolve_with(
        &self,
        request_id: &str,
        decision: ApprovalDecision,
        reason: Option<String>,
    ) -> anyhow::Result<()> {
        match self {
            Backend::Local(rt) => rt
                .resolve_approval_with(request_id, decision, reason)
                .await
                .map_err(Into::into),
            Backend::Remote(r) => {
                let body = json!({"decision": decision, "reason": reason});
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

    /// Compacts session `id`; the answer of `POST /sessions/{id}/compact`.
    pub async fn compact(
        &self,
        id: &str,
        focus: Option<&str>,
    ) -> anyhow::Result<serde_json::Value> {
        match self {
            Backend::Local(rt) => {
                let done = rt.compact_session(id, focus).await?;
                Ok(match done {
                    Some(c) => {
                        serde_json::json!({"compacted": true, "before_tokens": c.before_tokens,
                        "after_tokens": c.after_tokens, "summarised_turns": c.summarised_turns})
                    }
                    None => serde_json::json!({"compacted": false, "summarised_turns": 0}),
                })
            }
            Backend::Remote(r) => r
                .call(
                    reqwest::Method::POST,
                    &format!("/sessions/{id}/compact"),
                    Some(serde_json::json!({"focus": focus})),
                )
                .await
                .map_err(|e| anyhow!("{e}")),
        }
    }

    /// Rewinds session `id`; the answer of `POST /sessions/{id}/rewind`.
    pub async fn rewind(
        &self,
        id: &str,
        turn: u64,
        files: bool,
        conversation: bool,
        force: bool,
    ) -> anyhow::Result<serde_json::Value> {
        match self {
            Backend::Local(rt) => {
                let done = rt.rewind_session(id, turn, files, conversation, force).await?;
                Ok(serde_json::to_value(done)?)
            }
            Backend::Remote(r) => r
                .call(
                    reqwest::Method::POST,
                    &format!("/sessions/{id}/rewind"),
                    Some(json!({"turn": turn, "files": files, "conversation": conversation, "force": force})),
                )
                .await
                .map_err(|e| anyhow!("{e}")),
        }
    }

    /// Forks session `id`; the answer of `POST /sessions/{id}/fork`.
    pub async fn fork(&self, id: &str, turn: Option<u64>) -> anyhow::Result<serde_json::Value> {
        match self {
            Backend::Local(rt) => Ok(serde_json::to_value(rt.fork_session(id, turn).await?)?),
            Backend::Remote(r) => r
                .call(
                    reqwest::Method::POST,
                    &format!("/sessions/{id}/fork"),
                    Some(json!({"turn": turn})),
                )
                .await
                .map_err(|e| anyhow!("{e}")),
        }
    }

    /// What turn `turn` of session `id` changed in its workspace; the answer of `GET /sessions/{id}/changes`.
    pub async fn changes(&self, id: &str, turn: u64) -> anyhow::Result<serde_json::Value> {
        match self {
            Backend::Local(rt) => {
                let changes = rt.turn_changes(id, turn).await?;
                Ok(json!({"turn": turn, "checkpointed": changes.is_some(),
                    "changes": changes.unwrap_or_default()}))
            }
            Backend::Remote(r) => r
                .call(
                    reqwest::Method::GET,
                    &format!("/sessions/{id}/changes?turn={turn}"),
                    None,
                )
                .await
                .map_err(|e| anyhow!("{e}")),
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

    /// Sets (or lifts) what session `id` may spend over all its turns; its updated record.
    pub async fn set_budget(
        &self,
        id: &str,
        budget: Option<service_supervisor::runtime::Budget>,
    ) -> anyhow::Result<SessionRecord> {
        match self {
            Backend::Local(rt) => Ok(rt.set_budget(id, budget).await?),
            Backend::Remote(r) => {
                let v = r
                    .call(
                        reqwest::Method::PATCH,
                        &format!("/sessions/{id}"),
                        Some(json!({ "budget": budget })),
                    )
                    .await?;
                Ok(serde_json::from_value(v)?)
            }
        }
    }
}
