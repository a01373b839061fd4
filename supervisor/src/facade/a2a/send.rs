//! `SendMessage` and `SendStreamingMessage`: a message without a task id starts a task (a turn) in its context's
//! session, a new one for a context this server never saw; a message naming a task answers that task's permission
//! question.

use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};
use service_ipc::{ApprovalDecision, Task as RunTask, TurnOverrides};

use super::tasks::{self, Tracker};
use super::wire::{Part, Role, SendConfiguration, SendParams, StreamResponse};
use super::{answer, context_name, task_name, A2aError, Call};
use crate::runtime::record::SessionRecord;
use crate::runtime::EventStream;

/// The longest context id a client may choose.
const MAX_CONTEXT_ID: usize = 256;

/// A task a message started or went on with, and its events from there.
pub(super) struct Begun {
    /// The task as the events so far left it.
    pub(super) tracker: Tracker,
    /// Its session's events after those.
    pub(super) events: EventStream,
    /// How to answer.
    config: SendConfiguration,
}

pub(super) async fn send(call: &Call, params: SendParams) -> Result<Value, A2aError> {
    let mut begun = begin(call, params).await?;
    if !begun.config.return_immediately {
        until_pause(&mut begun.tracker, &mut begun.events).await?;
    }
    let task = begun
        .tracker
        .task()
        .keep_history(begun.config.history_length);
    Ok(json!({ "task": task }))
}

pub(super) async fn stream(call: Call, params: SendParams) -> Response {
    match begin(&call, params).await {
        Ok(begun) => sse(call.id, begun.tracker, begun.events, true),
        Err(e) => answer(&call.id, Err(e)),
    }
}

/// Reads `events` into `tracker` until the task ends or comes to wait for the client (again: a task that waits as
/// the reading starts is being answered).
pub(super) async fn until_pause(
    tracker: &mut Tracker,
    events: &mut EventStream,
) -> Result<(), A2aError> {
    while !tracker.state().terminal() {
        let Some(msg) = events.next().await else {
            return Err(events_ended());
        };
        if pauses(&tracker.on(&msg)) {
            break;
        }
    }
    Ok(())
}

/// Whether `updates` bring the task to wait for the client.
fn pauses(updates: &[StreamResponse]) -> bool {
    updates
        .iter()
        .any(|u| matches!(u, StreamResponse::StatusUpdate(s) if s.status.state.interrupted()))
}

pub(super) fn events_ended() -> A2aError {
    A2aError {
        runtime_code: Some("worker_unavailable".into()),
        ..A2aError::new(
            -32603,
            "the session's events ended before the task did; GetTask shows where it stands",
        )
    }
}

/// The task as server-sent events, each a JSON-RPC response to request `id`: the task first, then its updates, until
/// it ends (or, with `pause`, until it waits for the client).
pub(super) fn sse(
    id: Value,
    mut tracker: Tracker,
    mut events: EventStream,
    pause: bool,
) -> Response {
    let frame = move |result: Value| {
        Event::default().data(json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string())
    };
    let stream = crate::facade::sse::async_stream(move |tx| async move {
        let first = serde_json::to_value(StreamResponse::Task(tracker.task())).unwrap_or_default();
        if tx.send(frame(first)).await.is_err() {
            return;
        }
        while !tracker.state().terminal() {
            let Some(msg) = events.next().await else {
                let error =
                    json!({"jsonrpc": "2.0", "id": Value::Null, "error": events_ended().object()});
                let _ = tx.send(Event::default().data(error.to_string())).await;
                return;
            };
            let updates = tracker.on(&msg);
            let paused = pause && pauses(&updates);
            for update in updates {
                let update = serde_json::to_value(update).unwrap_or_default();
                // A client that left stops the stream, never the task.
                if tx.send(frame(update)).await.is_err() {
                    return;
                }
            }
            if paused {
                return;
            }
        }
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// Starts the task a message asks for, or answers the question of the task it names.
async fn begin(call: &Call, params: SendParams) -> Result<Begun, A2aError> {
    let config = params.configuration.unwrap_or_default();
    if config.task_push_notification_config.is_some() {
        return Err(A2aError::new(
            -32003,
            "push notifications are not sent by this server; follow the task with SendStreamingMessage or \
             SubscribeToTask",
        ));
    }
    let takes_text = config.accepted_output_modes.is_empty()
        || config
            .accepted_output_modes
            .iter()
            .any(|m| matches!(m.as_str(), "text/plain" | "text/*" | "*/*" | "text"));
    if !takes_text {
        return Err(A2aError::content_type(format!(
            "this agent answers in text/plain; acceptedOutputModes {:?} leaves it out",
            config.accepted_output_modes
        )));
    }
    let message = params.message;
    if message.role == Role::Agent {
        return Err(A2aError::invalid_params(
            "a client's message has role ROLE_USER",
        ));
    }
    let (text, data) = contents(&message.parts)?;
    match message.task_id.filter(|t| !t.is_empty()) {
        Some(task_id) => answer_question(call, &task_id, data, config).await,
        None => {
            start(
                call,
                message.context_id.filter(|c| !c.is_empty()),
                text,
                config,
            )
            .await
        }
    }
}

/// A message's text (its text parts, one per line) and its data parts; files are refused.
fn contents(parts: &[Part]) -> Result<(String, Vec<Value>), A2aError> {
    let mut text = Vec::new();
    let mut data = Vec::new();
    for part in parts {
        if let Some(t) = &part.text {
            text.push(t.as_str());
        } else if let Some(d) = &part.data {
            data.push(d.clone());
        } else {
            return Err(A2aError::content_type(
                "this agent takes text parts (and data parts answering its questions), not files; put the file's \
                 text in a text part",
            ));
        }
    }
    Ok((text.join("\n"), data))
}

/// A new task of `text` in the session of `context_id`, made for it when the server never saw that context.
async fn start(
    call: &Call,
    context_id: Option<String>,
    text: String,
    config: SendConfiguration,
) -> Result<Begun, A2aError> {
    if text.trim().is_empty() {
        return Err(A2aError::invalid_params(
            "the message has no text; send the task as a text part",
        ));
    }
    crate::server::tenants::admit_turn(&call.st, &call.caller).await?;
    let record = session_for(call, context_id.as_deref()).await?;
    let context = record.context_id.clone().unwrap_or(record.id.clone());
    let rt = &call.st.rt;
    let events = rt.subscribe_session(&record.id).await?;
    let turn_id = rt
        .start_turn(&record.id, RunTask::new(text), TurnOverrides::default())
        .await?
        .turn_id;
    rt.name_session(&task_name(&turn_id), &record.id).await?;
    Ok(Begun {
        tracker: Tracker::new(&turn_id, &context),
        events,
        config,
    })
}

/// The session of `context_id`: the one a client's context id names, a session known by its id, or a new one.
async fn session_for(call: &Call, context_id: Option<&str>) -> Result<SessionRecord, A2aError> {
    let rt = &call.st.rt;
    let Some(context) = context_id else {
        return call.new_session().await;
    };
    if context.len() > MAX_CONTEXT_ID || context.chars().any(char::is_control) {
        return Err(A2aError::invalid_params(format!(
            "a contextId is at most {MAX_CONTEXT_ID} characters, without control characters"
        )));
    }
    if let Some(record) = known_context(call, context).await? {
        return Ok(record);
    }
    let record = call.new_session().await?;
    let name = context_name(&call.caller.tenant, context);
    let holder = rt.name_session(&name, &record.id).await?;
    if holder != record.id {
        // Another request made the context's session first: that one is the conversation.
        if let Err(e) = rt.delete_session(&record.id).await {
            tracing::warn!(session = %record.id, "a session made for a context another request took stays: {e}");
        }
        return call.mine(&holder).await;
    }
    Ok(rt.set_context_id(&record.id, context).await?)
}

/// The session a context id names, when this agent has one.
pub(super) async fn known_context(
    call: &Call,
    context: &str,
) -> Result<Option<SessionRecord>, A2aError> {
    let rt = &call.st.rt;
    let id = match rt
        .named_session(&context_name(&call.caller.tenant, context))
        .await?
    {
        Some(id) => id,
        // A session made elsewhere (the CLI, the HTTP API) is its own context.
        None if uuid::Uuid::parse_str(context).is_ok() => context.to_string(),
        None => return Ok(None),
    };
    match call.mine(&id).await {
        Ok(record) => Ok(Some(record)),
        Err(e) if e.code == -32001 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Answers the permission question task `task_id` waits on with the decision in `data`.
async fn answer_question(
    call: &Call,
    task_id: &str,
    data: Vec<Value>,
    config: SendConfiguration,
) -> Result<Begun, A2aError> {
    let (record, tracker, last) = call.task(task_id).await?;
    let Some(pending) = tracker.pending().cloned() else {
        let state = tracker.state();
        return Err(A2aError::unsupported(if state.terminal() {
            format!(
                "task {task_id} has ended ({}); to go on with the conversation, send a message with its \
                 contextId and no taskId",
                state.label()
            )
        } else {
            format!(
                "task {task_id} is working and asks nothing; follow it with SubscribeToTask, or stop it with \
                 CancelTask"
            )
        }));
    };
    let decision = decision(&data, &pending.request_id)?;
    let rt = &call.st.rt;
    let events = rt.subscribe_session_from(&record.id, last).await?;
    rt.resolve_approval(&pending.request_id, decision).await?;
    Ok(Begun {
        tracker,
        events,
        config,
    })
}

/// The decision a data part `{"decision": …}` gives for request `request_id`.
fn decision(data: &[Value], request_id: &str) -> Result<ApprovalDecision, A2aError> {
    let missing = || {
        A2aError::invalid_params(format!(
            "the task waits for a permission decision (request {request_id}); send a data part {{\"decision\": \
             \"allow_once\"}}, \"allow_always\" or \"deny\""
        ))
    };
    let given = data
        .iter()
        .find(|d| d.get("decision").is_some())
        .ok_or_else(missing)?;
    if let Some(other) = given
        .get("request_id")
        .and_then(Value::as_str)
        .filter(|r| *r != request_id)
    {
        return Err(A2aError::invalid_params(format!(
            "request {other} is not the one the task waits on ({request_id})"
        )));
    }
    serde_json::from_value(given["decision"].clone()).map_err(|_| missing())
}

impl Call {
    /// The installed bundle new sessions of this agent are made from, resolved whole, under the sandbox policy.
    async fn bundle(&self) -> Result<crate::bundle::Bundle, A2aError> {
        Ok(super::installed(&self.st, &self.reference).await?)
    }

    /// A new session of this agent for the caller's tenant, within its quota.
    async fn new_session(&self) -> Result<SessionRecord, A2aError> {
        Ok(self
            .st
            .rt
            .create_session_for(
                self.bundle().await?,
                &self.reference,
                None,
                self.caller.owns(),
            )
            .await?)
    }

    /// Session `id`'s record, when it is a session of this agent's bundle and the caller's tenant; else "no task",
    /// since ids of other agents' and other tenants' sessions are not this client's to probe.
    pub(super) async fn mine(&self, id: &str) -> Result<SessionRecord, A2aError> {
        match self.st.rt.get_session(id).await {
            Ok(r) if r.bundle.id == self.bundle_id && self.caller.sees(r.tenant()) => Ok(r),
            Ok(_) | Err(crate::runtime::RuntimeError::SessionNotFound(_)) => {
                Err(A2aError::task_not_found(id))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Task `task_id`: its session's record, the task as the journal has it, and the last event read.
    pub(super) async fn task(
        &self,
        task_id: &str,
    ) -> Result<(SessionRecord, Tracker, u64), A2aError> {
        let not_found = || A2aError::task_not_found(task_id);
        let session = self
            .st
            .rt
            .named_session(&task_name(task_id))
            .await?
            .ok_or_else(not_found)?;
        let record = self.mine(&session).await.map_err(|_| not_found())?;
        let context = record.context_id.clone().unwrap_or(record.id.clone());
        let events = self.st.rt.session_events(&record.id).await?;
        let (tracker, last) = tasks::one(&events, task_id, &context).ok_or_else(not_found)?;
        Ok((record, tracker, last))
    }
}
