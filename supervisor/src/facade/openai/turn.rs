//! What the `/v1` routes share about a turn: starting it in a new or continued session, answering its permission
//! requests by the server's setting, and waiting for its end.

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use futures::StreamExt;
use service_ipc::{ApprovalDecision, ChatMessage, EventPayload, Task, TurnOverrides};

use super::{bundle_of, OpenAiError};
use crate::facade::turn_end::{self, TurnEnd};
use crate::runtime::{approvals, EventStream, RuntimeError};
use crate::server::state::AppState;
use crate::tenancy::Caller;

/// The header that names (and continues) a session.
pub const SESSION_HEADER: &str = "x-service-session";

/// A turn a request started.
pub(super) struct Started {
    /// Its session.
    pub(super) session: String,
    /// The session's events, subscribed before the turn started.
    pub(super) events: EventStream,
    /// The turn's id.
    pub(super) turn_id: String,
}

impl Started {
    /// Response headers naming the session.
    pub(super) fn headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&self.session) {
            headers.insert(SESSION_HEADER, v);
        }
        headers
    }
}

/// Starts a turn of `prompt`: in session `continued` when the request names one (its own history stands), else in a
/// new session of the bundle `model` names, given `history` first.
pub(super) async fn start(
    st: &AppState,
    caller: &Caller,
    model: &str,
    continued: Option<String>,
    conversation: impl FnOnce() -> Result<(Vec<ChatMessage>, String), OpenAiError>,
) -> Result<Started, OpenAiError> {
    // The conversation is read once the model (or the session) is known to be there: a request for a model that is
    // not is told so first, whatever else it holds.
    let (session, prompt) = match continued {
        Some(id) => {
            let record = st.rt.get_session(&id).await?;
            // Another tenant's session is not there, as far as this caller can tell.
            if !caller.sees(record.tenant()) {
                return Err(RuntimeError::SessionNotFound(id).into());
            }
            crate::server::tenants::admit_turn(st, caller).await?;
            (id, conversation()?.1)
        }
        None => {
            crate::server::tenants::admit_turn(st, caller).await?;
            let bundle = bundle_of(st, caller, model).await?;
            let (history, prompt) = conversation()?;
            let record = st
                .rt
                .create_session_for(bundle, model, None, caller.owns())
                .await?;
            if !history.is_empty() {
                st.rt.seed_history(&record.id, history).await?;
            }
            (record.id, prompt)
        }
    };
    // The runtime's own errors, not the facade's: one that names the session's owner node is forwarded there.
    let events = st.rt.subscribe_session(&session).await?;
    let turn_id = st
        .rt
        .start_turn(&session, Task::new(prompt), TurnOverrides::default())
        .await?
        .turn_id;
    Ok(Started {
        session,
        events,
        turn_id,
    })
}

/// The error of events that ended before their turn did.
pub(super) fn events_ended() -> OpenAiError {
    OpenAiError::new(
        StatusCode::BAD_GATEWAY,
        "worker_unavailable",
        "the session's events ended before the turn did",
    )
}

/// Answers the permission requests of `/v1` turns, by the server's `--openai-approvals`.
#[derive(Clone)]
pub(super) struct Approver {
    pub(super) st: AppState,
}

impl Approver {
    /// Answers the permission request `payload` asks, if any; a refused one is noted in `denied`.
    pub(super) async fn answer(&self, payload: &EventPayload, denied: &mut Vec<String>) {
        let Some(asked) = approvals::asked(payload) else {
            return;
        };
        let decision = match self.st.policy.openai_approvals {
            super::OpenAiApprovals::Allow => ApprovalDecision::AllowOnce,
            super::OpenAiApprovals::Deny => {
                denied.push(format!("{} {}", asked.tool, asked.summary));
                ApprovalDecision::Deny
            }
            // Someone else answers it, through the approvals endpoint.
            super::OpenAiApprovals::Wait => return,
        };
        if let Err(e) = self
            .st
            .rt
            .resolve_approval(&asked.request_id, decision)
            .await
        {
            tracing::debug!("permission answer not delivered: {e}");
        }
    }

    /// Reads `started`'s events to its end, answering its permission requests (the refused ones go to `denied`) and
    /// showing each of its events to `seen`.
    pub(super) async fn until_end(
        &self,
        started: &mut Started,
        denied: &mut Vec<String>,
        mut seen: impl FnMut(&EventPayload),
    ) -> Result<TurnEnd, OpenAiError> {
        loop {
            let Some(msg) = started.events.next().await else {
                return Err(events_ended());
            };
            if msg.payload.turn_id().is_some_and(|t| t != started.turn_id) {
                continue;
            }
            seen(&msg.payload);
            self.answer(&msg.payload, denied).await;
            if let Some(end) = turn_end::of(&msg.payload, &started.turn_id) {
                return Ok(end);
            }
        }
    }
}

/// What the answer adds when permission requests were refused: which, and why.
pub(super) fn denied_note(denied: &[String]) -> String {
    if denied.is_empty() {
        return String::new();
    }
    format!(
        "\n\n[service-rs: permission denied for {}; this server answers permission requests with \
         --openai-approvals deny]",
        denied.join("; ")
    )
}
