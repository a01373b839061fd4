//! Going back in a session over HTTP: rewind, fork, and what a turn changed in the workspace (see
//! `runtime::checkpoints`).

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;

use super::api::ApiResult;
use super::api::{ApiJson, ApiPath, ApiQuery, Body};
use super::state::AppState;
use crate::checkpoint::FileChange;
use crate::runtime::checkpoints::{Forked, Rewound};

/// `POST /sessions/{id}/rewind`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RewindRequest {
    /// Go back to before this turn (from 1, as `sessions show` numbers them).
    #[serde(deserialize_with = "whole_number")]
    pub turn: u64,
    /// Restore the workspace's files (default true).
    #[serde(default = "yes")]
    pub files: bool,
    /// Cut the conversation (default true).
    #[serde(default = "yes")]
    pub conversation: bool,
    /// Restore the files even when they changed outside the session since its last turn.
    #[serde(default)]
    pub force: bool,
}

fn yes() -> bool {
    true
}

/// A turn number as JSON may write it: `3`, or `3.0` (JSON Schema's integers include it).
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    turn_number(f64::deserialize(d)?)
}

/// As [`whole_number`], or null.
fn some_whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    Option::<f64>::deserialize(d)?.map(turn_number).transpose()
}

fn turn_number<E: serde::de::Error>(n: f64) -> Result<u64, E> {
    if n.fract() == 0.0 && (0.0..=u64::MAX as f64).contains(&n) {
        Ok(n as u64)
    } else {
        Err(E::custom(format!("{n} is not a turn number (1, 2, …)")))
    }
}

impl Body for RewindRequest {}

/// `POST /sessions/{id}/fork` (the body may be empty).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    /// Fork as the session was before this turn (from 1); now when absent.
    #[serde(default, deserialize_with = "some_whole_number")]
    pub turn: Option<u64>,
}

/// `GET /sessions/{id}/changes?turn=N`.
#[derive(Debug, Deserialize, ToSchema, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ChangesQuery {
    /// The turn (from 1).
    pub turn: u64,
}

/// What a turn changed.
#[derive(Debug, serde::Serialize, ToSchema)]
pub struct TurnChanges {
    /// The turn.
    pub turn: u64,
    /// Whether the session's checkpoints of that turn are on this node (none for a bundle that cannot write).
    pub checkpointed: bool,
    /// The changed paths, in path order.
    pub changes: Vec<FileChange>,
}

/// Restores the session's files and/or conversation to before a turn. Refused while a turn runs, and for files
/// changed outside the session since its last turn unless `force`.
#[utoipa::path(post, path = "/sessions/{id}/rewind", params(("id" = String, Path)), request_body = RewindRequest,
    responses((status = 200, body = Rewound)))]
pub async fn rewind(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<RewindRequest>,
) -> ApiResult<Json<Rewound>> {
    let done = st
        .rt
        .rewind_session(&id, req.turn, req.files, req.conversation, req.force)
        .await?;
    Ok(Json(done))
}

/// Makes a new session of the same bundle with the conversation as it was before a turn (now, without one); a
/// session with its own workspace gets a copy of its files as they were then.
#[utoipa::path(post, path = "/sessions/{id}/fork", params(("id" = String, Path)),
    request_body(content = Option<ForkRequest>, description = "Optional"), responses((status = 201, body = Forked)))]
pub async fn fork(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    body: axum::body::Bytes,
) -> ApiResult<(StatusCode, Json<Forked>)> {
    let req: ForkRequest = super::handlers::optional_body(&body, "{\"turn\": N}")?;
    let forked = st.rt.fork_session(&id, req.turn).await?;
    Ok((StatusCode::CREATED, Json(forked)))
}

/// What a turn changed in the session's workspace, commands included, with unified diffs of text files.
#[utoipa::path(get, path = "/sessions/{id}/changes", params(("id" = String, Path), ChangesQuery),
    responses((status = 200, body = TurnChanges)))]
pub async fn changes(
    State(st): State<AppState>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<ChangesQuery>,
) -> ApiResult<Json<TurnChanges>> {
    let changes = st.rt.turn_changes(&id, q.turn).await?;
    Ok(Json(TurnChanges {
        turn: q.turn,
        checkpointed: changes.is_some(),
        changes: changes.unwrap_or_default(),
    }))
}
