//! Following tasks: `GetTask`, `ListTasks`, `CancelTask` and `SubscribeToTask`. Each reads the task from its
//! session's journal, so any node of a cluster answers, and a client that lost its stream misses nothing.

use std::time::Duration;

use axum::response::Response;
use serde_json::Value;

use super::send::{known_context, sse, until_pause};
use super::tasks;
use super::wire::{ListAnswer, ListParams, Task, TaskParams, TaskState};
use super::{answer, A2aError, Call};
use crate::runtime::record::SessionRecord;

/// How long `CancelTask` waits for the interrupted turn to end.
const CANCEL_WAIT: Duration = Duration::from_secs(30);

/// Tasks a `ListTasks` page holds unless the client asks for another number (at most [`MAX_PAGE`]).
const DEFAULT_PAGE: i64 = 50;
const MAX_PAGE: i64 = 100;

fn value(task: Task) -> Value {
    serde_json::to_value(task).unwrap_or_default()
}

pub(super) async fn get(call: &Call, params: TaskParams) -> Result<Value, A2aError> {
    let (_, tracker, _) = call.task(&params.id).await?;
    Ok(value(tracker.task().keep_history(params.history_length)))
}

pub(super) async fn cancel(call: &Call, params: TaskParams) -> Result<Value, A2aError> {
    let (record, mut tracker, last) = call.task(&params.id).await?;
    if tracker.state().terminal() {
        return Err(A2aError::not_cancelable(format!(
            "task {} has already ended ({})",
            params.id,
            tracker.state().label()
        )));
    }
    let rt = &call.st.rt;
    let mut events = rt.subscribe_session_from(&record.id, last).await?;
    rt.interrupt(&record.id).await?;
    // An interrupted turn ends within moments: its commands are killed, its model call dropped.
    let ended = tokio::time::timeout(CANCEL_WAIT, async {
        // A question asked as the interrupt arrived pauses the reading; the end follows.
        while !tracker.state().terminal() {
            until_pause(&mut tracker, &mut events).await?;
        }
        Ok::<_, A2aError>(())
    })
    .await;
    match ended {
        Ok(r) => r?,
        Err(_) => tracing::warn!(task = %params.id, "an interrupted task has not ended yet"),
    }
    Ok(value(tracker.task().keep_history(params.history_length)))
}

pub(super) async fn subscribe(call: Call, params: TaskParams) -> Response {
    let found = call.task(&params.id).await;
    let (record, tracker, last) = match found {
        Ok(t) => t,
        Err(e) => return answer(&call.id, Err(e)),
    };
    if tracker.state().terminal() {
        return answer(
            &call.id,
            Err(A2aError::unsupported(format!(
                "task {} has ended ({}); GetTask returns it",
                params.id,
                tracker.state().label()
            ))),
        );
    }
    match call.st.rt.subscribe_session_from(&record.id, last).await {
        // A subscriber follows the task to its end, through questions the operator may answer.
        Ok(events) => sse(call.id, tracker, events, false),
        Err(e) => answer(&call.id, Err(e.into())),
    }
}

pub(super) async fn list(call: &Call, params: ListParams) -> Result<Value, A2aError> {
    let page_size = match params.page_size {
        None | Some(0) => DEFAULT_PAGE,
        Some(n) if n < 0 => {
            return Err(A2aError::invalid_params("pageSize is a positive number"));
        }
        Some(n) => n.min(MAX_PAGE),
    };
    let offset: usize = match params.page_token.as_deref() {
        None | Some("") => 0,
        Some(t) => t.parse().map_err(|_| {
            A2aError::invalid_params(format!(
                "pageToken \"{t}\" is not one this server gave; leave it out for the first page"
            ))
        })?,
    };
    let sessions = sessions(call, params.context_id.as_deref()).await?;
    let wanted = params.status.filter(|s| *s != TaskState::Unspecified);
    let mut matching = Vec::new();
    for record in sessions {
        let context = record.context_id.clone().unwrap_or(record.id.clone());
        let events = call.st.rt.session_events(&record.id).await?;
        let mut found = tasks::all(&events, &context);
        found.reverse();
        matching.extend(
            found
                .into_iter()
                .filter(|t| wanted.is_none_or(|w| t.state() == w)),
        );
    }
    let total = matching.len();
    let end = offset.saturating_add(usize::try_from(page_size).unwrap_or(50));
    let tasks: Vec<Task> = matching
        .into_iter()
        .skip(offset)
        .take(end.saturating_sub(offset))
        .map(|t| {
            let mut task = t.task().keep_history(params.history_length);
            if params.include_artifacts != Some(true) {
                task.artifacts.clear();
            }
            task
        })
        .collect();
    let next_page_token = if end < total {
        end.to_string()
    } else {
        String::new()
    };
    Ok(serde_json::to_value(ListAnswer {
        tasks,
        next_page_token,
        page_size,
        total_size: i64::try_from(total).unwrap_or(i64::MAX),
    })
    .unwrap_or_default())
}

/// The sessions whose tasks a listing shows, most recently active first: the context's, or all of this agent's.
async fn sessions(call: &Call, context: Option<&str>) -> Result<Vec<SessionRecord>, A2aError> {
    if let Some(context) = context.filter(|c| !c.is_empty()) {
        return Ok(known_context(call, context).await?.into_iter().collect());
    }
    let mut all: Vec<SessionRecord> = call
        .st
        .rt
        .list_sessions()
        .await?
        .into_iter()
        .filter(|r| r.bundle.id == call.bundle_id && call.caller.sees(r.tenant()))
        .collect();
    all.sort_by(|a, b| b.updated_at.cmp(&a.updated_at));
    Ok(all)
}
