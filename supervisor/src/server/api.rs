//! Request and response bodies of the HTTP API, and the error shape `{"error": {"code", "message"}}`.

use axum::extract::rejection::JsonRejection;
use axum::extract::FromRequest;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use service_ipc::{ApprovalDecision, Task, TurnOverrides, TurnStatus, Usage};
use utoipa::ToSchema;

use crate::bundle::BundleError;
use crate::runtime::{RuntimeError, TurnOutcome};

/// What a handler answers: its value, or an error with the `{"error": …}` body.
pub(super) type ApiResult<T> = Result<T, ApiError>;

/// `POST /sessions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// A bundle reference: `<name>`, `<name>@latest`, `<namespace>/<name>:<version>` or a directory on the server.
    #[schema(example = "hello", min_length = 1)]
    pub bundle_ref: String,
    /// Working directory of the session on the server (default: a fresh workspace under the session).
    #[serde(default)]
    pub cwd: Option<String>,
}

/// `PATCH /sessions/{id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateSession {
    /// What the session may spend over all its turns: `{max_tokens, max_cost_usd}` (either may be left out), or
    /// null for no limit. Required: an empty body changes nothing by accident.
    #[serde(deserialize_with = "nullable")]
    #[schema(required = true, nullable)]
    pub budget: Option<crate::runtime::Budget>,
}

/// An Option that must be present in the body, null allowed.
fn nullable<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    Option::deserialize(d)
}

/// `POST /sessions/{id}/run-sync` and `POST /sessions/{id}/run`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The Task: `prompt`, and optionally `submission_id` (a UUID; a fresh one when absent) and `completed`.
    pub input: Task,
    /// Per-turn overrides: `cwd` (inside the workspace when sandboxed) and `model` (`{provider, name, config}`).
    #[serde(default)]
    pub turn_context: Option<TurnOverrides>,
}

/// The outcome of a turn.
#[derive(Debug, Serialize, ToSchema)]
pub struct TurnResult {
    /// Turn id.
    pub turn_id: String,
    /// `completed`, `failed` or `interrupted`.
    pub status: TurnStatus,
    /// Final assistant message (empty unless completed).
    pub final_message: String,
    /// Token usage: `input_tokens`, `output_tokens`.
    pub usage: Usage,
    /// The error that ended the turn, if it did not complete.
    pub error: Option<ErrorBody>,
}

impl From<TurnOutcome> for TurnResult {
    fn from(o: TurnOutcome) -> Self {
        TurnResult {
            turn_id: o.turn_id,
            status: o.status,
            final_message: o.final_message,
            usage: o.usage,
            error: o.error.map(|(code, message)| ErrorBody {
                code,
                message,
                request_id: None,
            }),
        }
    }
}

/// `202 Accepted` of an asynchronous run.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
    /// Session id.
    pub session_id: String,
    /// The started turn; follow it on `GET /sessions/{id}/events`.
    pub turn_id: String,
}

/// `POST /sessions/{id}/compact` (the body may be empty).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactRequest {
    /// What the summary should keep above all.
    #[serde(default)]
    pub focus: Option<String>,
}

/// What `POST /sessions/{id}/compact` did.
#[derive(Debug, Serialize, ToSchema)]
pub struct CompactResult {
    /// False when there was nothing older than the turns kept (`memory.keep_recent_turns`).
    pub compacted: bool,
    /// Context tokens before, estimated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_tokens: Option<u64>,
    /// Context tokens after, estimated.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub after_tokens: Option<u64>,
    /// Turns the summary replaced.
    pub summarised_turns: u32,
}

/// `POST /sessions/{id}/commands`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CommandRequest {
    /// Shell command line, run in the session sandbox.
    pub command: String,
}

/// How an operator command ended.
#[derive(Debug, Serialize, ToSchema)]
pub struct CommandResult {
    /// Exec id of its `exec_command_*` events.
    pub exec_id: String,
    /// Exit code; null when killed by a signal.
    pub exit_code: Option<i32>,
}

/// `POST /approvals/{request_id}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DecisionRequest {
    /// `allow_once`, `allow_always` or `deny`.
    pub decision: ApprovalDecision,
    /// With `deny`: why, in words the model reads in the call's result ("use pytest instead"); at most 2000
    /// characters are passed on.
    #[serde(default)]
    #[schema(max_length = 8000)]
    pub reason: Option<String>,
}

/// The answer to a decision.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionResult {
    /// The request.
    pub request_id: String,
    /// The decision applied.
    pub decision: ApprovalDecision,
}

/// `GET /sessions` query.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SessionsQuery {
    /// Only this tenant's sessions.
    pub tenant: Option<String>,
}

/// `GET /sessions/{id}/events` query.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EventsQuery {
    /// Replay journaled events after this sequence number first (0 replays the whole session).
    pub after: Option<u64>,
    /// Add to each tool event a `view` object with the line a person reads (`{"title": "$ cargo test"}`), as the
    /// console shows it.
    #[serde(default)]
    pub view: bool,
}

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
    /// Server version.
    pub version: String,
    /// Whether the other endpoints need a bearer token, so that a client asks for one before it calls them.
    pub token_required: bool,
    /// `/readyz` over a shared store: the cluster's bundles this node could not bring in line at its last sync,
    /// each with why (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bundles_differ: Vec<String>,
}

/// The error body.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Stable snake_case code.
    pub code: String,
    /// What went wrong and what to do.
    pub message: String,
    /// The request's id (also in the `x-request-id` header), under which the server logged it; set on error
    /// responses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

/// `{"error": {...}}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorEnvelope {
    /// The error.
    pub error: ErrorBody,
}

/// An error response.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    body: ErrorBody,
    /// Seconds after which the client may retry (`Retry-After`).
    retry_after: Option<u32>,
    /// The base URL of the node that owns the session, for the forwarding layer (see `server::forward`).
    owner: Option<String>,
}

/// Marks a response whose request belongs to the node at this base URL.
#[derive(Debug, Clone)]
pub struct OwnedBy(pub String);

impl ApiError {
    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The node that owns the session the request is about, when another one does.
    pub fn owner(&self) -> Option<&str> {
        self.owner.as_deref()
    }

    /// The code and message, for front ends that report errors in another protocol.
    pub fn into_body(self) -> ErrorBody {
        self.body
    }

    /// A body over [`super::state::MAX_BODY`], wherever it is read.
    pub fn payload_too_large() -> Self {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!(
                "the body is larger than the {} byte limit",
                super::state::MAX_BODY
            ),
        )
    }

    /// The same error, telling the client to retry after `seconds` (`Retry-After`).
    pub fn retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// An error with a status, code and message.
    /// 503 `store_unavailable` with a `Retry-After`: the store could not be read, so nothing about the request is
    /// known yet, not even whether its token is good.
    pub fn store_unavailable(message: impl Into<String>) -> Self {
        let mut error = ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            message,
        );
        error.retry_after = Some(2);
        error
    }

    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                code: code.into(),
                message: message.into(),
                request_id: None,
            },
            retry_after: None,
            owner: None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response =
            (self.status, axum::Json(ErrorEnvelope { error: self.body })).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        if let Some(url) = self.owner {
            response.extensions_mut().insert(OwnedBy(url));
        }
        response
    }
}

impl From<RuntimeError> for ApiError {
    fn from(e: RuntimeError) -> Self {
        use StatusCode as S;
        let message = e.to_string();
        if let Some((code, cause)) = e.storage_fault() {
            tracing::error!(code, "store write failed: {message}");
            return ApiError::new(S::INSUFFICIENT_STORAGE, code, cause);
        }
        let (status, code) = match &e {
            RuntimeError::Bundle(BundleError::NotFound(_)) => (S::NOT_FOUND, "bundle_not_found"),
            RuntimeError::Bundle(BundleError::NotPulled(_)) => (S::NOT_FOUND, "bundle_not_pulled"),
            RuntimeError::Bundle(BundleError::BadReference { .. }) => {
                (S::UNPROCESSABLE_ENTITY, "invalid_bundle_ref")
            }
            RuntimeError::Bundle(BundleError::Io { .. }) => (S::INTERNAL_SERVER_ERROR, "internal"),
            RuntimeError::Bundle(_) => (S::UNPROCESSABLE_ENTITY, "invalid_bundle"),
            RuntimeError::SessionNotFound(_) => (S::NOT_FOUND, "session_not_found"),
            RuntimeError::TurnInProgress { .. } => (S::CONFLICT, "turn_in_progress"),
            RuntimeError::NoTurnRunning(_) => (S::CONFLICT, "no_turn_running"),
            RuntimeError::QuotaSessions { .. } => (S::TOO_MANY_REQUESTS, "quota_sessions"),
            RuntimeError::JournalQuota { .. } => (S::CONFLICT, "journal_quota"),
            RuntimeError::InvalidRequest(_) => (S::UNPROCESSABLE_ENTITY, "invalid_request"),
            RuntimeError::CwdNotFound(_) => (S::NOT_FOUND, "cwd_not_found"),
            RuntimeError::BundleInUse { .. } | RuntimeError::BundleLiveElsewhere { .. } => {
                (S::CONFLICT, "bundle_in_use")
            }
            RuntimeError::BundleRemoved(_) => (S::CONFLICT, "bundle_removed"),
            RuntimeError::CwdOutsideWorkspace(_) => (S::FORBIDDEN, "cwd_outside_workspace"),
            RuntimeError::ApprovalNotFound(_) => (S::NOT_FOUND, "approval_not_found"),
            RuntimeError::ApprovalNotPending(_) => (S::CONFLICT, "approval_not_pending"),
            RuntimeError::ApprovalSessionGone(_) => (S::NOT_FOUND, "session_not_found"),
            RuntimeError::SandboxUnavailable(_) => (S::SERVICE_UNAVAILABLE, "sandbox_unavailable"),
            RuntimeError::WorkerUnavailable(_) => (S::SERVICE_UNAVAILABLE, "worker_unavailable"),
            RuntimeError::WorkerDied(_) => (S::SERVICE_UNAVAILABLE, "worker_died"),
            RuntimeError::CompactionFailed(_) => (S::BAD_GATEWAY, "compaction_failed"),
            RuntimeError::TurnOutOfRange { .. } => (S::NOT_FOUND, "turn_out_of_range"),
            RuntimeError::CheckpointMissing(_) => (S::CONFLICT, "checkpoint_missing"),
            RuntimeError::CheckpointIncomplete(_) => (S::CONFLICT, "checkpoint_incomplete"),
            RuntimeError::WorkspaceChanged(_) => (S::CONFLICT, "workspace_changed"),
            RuntimeError::BundleMismatch { .. } => (S::CONFLICT, "bundle_mismatch"),
            RuntimeError::BundleUnavailable { .. } => (S::BAD_GATEWAY, "bundle_unavailable"),
            RuntimeError::WorkspaceLost { .. } => (S::CONFLICT, "workspace_lost"),
            RuntimeError::ClusterHome { .. } => (S::CONFLICT, "cluster_home"),
            RuntimeError::Schema { .. } => (S::SERVICE_UNAVAILABLE, "store_schema"),
            RuntimeError::OwnedElsewhere { url, .. } => {
                let mut error = ApiError::new(S::SERVICE_UNAVAILABLE, "owned_elsewhere", message);
                error.owner = Some(url.clone());
                error.retry_after = Some(1);
                return error;
            }
            RuntimeError::Database { .. } => {
                tracing::warn!("{message}");
                return ApiError::store_unavailable(message);
            }
            RuntimeError::Draining => {
                let mut error = ApiError::new(S::SERVICE_UNAVAILABLE, "draining", message);
                error.retry_after = Some(1);
                return error;
            }
            RuntimeError::Io { .. } | RuntimeError::Corrupt { .. } => {
                (S::INTERNAL_SERVER_ERROR, "internal")
            }
        };
        if status == S::INTERNAL_SERVER_ERROR {
            // The detail names server paths: log it, send the generic shape.
            tracing::error!("internal error: {message}");
            return ApiError::new(
                status,
                code,
                "internal error; the server log has the details under this request_id",
            );
        }
        ApiError::new(status, code, message)
    }
}

impl From<BundleError> for ApiError {
    fn from(e: BundleError) -> Self {
        RuntimeError::Bundle(e).into()
    }
}

/// A request body type, and where in it JSON of any shape is allowed.
pub trait Body: serde::de::DeserializeOwned {
    /// Dotted paths under which any JSON goes (a model's settings). Elsewhere an array is refused: serde would
    /// take one for a struct, field by field, which the documented contract does not allow.
    const FREE_FORM: &'static [&'static str] = &[];
}

impl Body for CreateSession {}
impl Body for UpdateSession {}
impl Body for CommandRequest {}
impl Body for DecisionRequest {}
impl Body for RunRequest {
    const FREE_FORM: &'static [&'static str] = &["turn_context.model.config"];
}

/// The path of the first array in `value` outside `free` (paths relative to the body).
pub(super) fn stray_array(value: &serde_json::Value, path: &str, free: &[&str]) -> Option<String> {
    if free.contains(&path) {
        return None;
    }
    match value {
        serde_json::Value::Array(_) => Some(if path.is_empty() {
            "the body".into()
        } else {
            path.into()
        }),
        serde_json::Value::Object(map) => map.iter().find_map(|(k, v)| {
            let child = if path.is_empty() {
                k.clone()
            } else {
                format!("{path}.{k}")
            };
            stray_array(v, &child, free)
        }),
        _ => None,
    }
}

/// A JSON body whose rejections use the API's error shape: 400 malformed, 413 too large, 422 invalid.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: Body> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let invalid = |message: String| {
            ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "invalid_request", message)
        };
        match axum::Json::<serde_json::Value>::from_request(req, state).await {
            Ok(axum::Json(value)) => {
                if let Some(path) = stray_array(&value, "", T::FREE_FORM) {
                    return Err(invalid(format!(
                        "{path} must be an object or a value, not an array"
                    )));
                }
                serde_path_to_error::deserialize(value)
                    .map(ApiJson)
                    .map_err(|e| {
                        let path = e.path().to_string();
                        invalid(format!(
                            "{}: {}",
                            if path == "." { "the body" } else { &path },
                            e.inner()
                        ))
                    })
            }
            Err(rejection) => Err(match rejection {
                JsonRejection::JsonSyntaxError(e) => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "malformed_json",
                    format!("the body is not valid JSON: {}", e.body_text()),
                ),
                JsonRejection::JsonDataError(e) => invalid(e.body_text()),
                JsonRejection::MissingJsonContentType(_) => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "malformed_json",
                    "send the body as JSON with content-type: application/json",
                ),
                JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                    ApiError::payload_too_large()
                }
                other => ApiError::new(StatusCode::BAD_REQUEST, "bad_request", other.body_text()),
            }),
        }
    }
}

/// A query string whose rejection uses the API's error shape (400 `bad_request`, naming what was wrong), not
/// axum's plain-text one.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(ApiError))]
pub struct ApiQuery<T>(pub T);

/// Path parameters whose rejection (a segment that is not UTF-8 once decoded) uses the API's error shape.
#[derive(axum::extract::FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(ApiError))]
pub struct ApiPath<T>(pub T);

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(e: axum::extract::rejection::QueryRejection) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the query string: {}", e.body_text()),
        )
    }
}

impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(e: axum::extract::rejection::PathRejection) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "bad_request",
            format!("the path: {}", e.body_text()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_array_is_refused_where_the_contract_has_an_object() {
        let free = RunRequest::FREE_FORM;
        let body = serde_json::json!({"input": {"prompt": "x"}, "turn_context": [null, null]});
        assert_eq!(
            stray_array(&body, "", free).as_deref(),
            Some("turn_context")
        );
        let settings = serde_json::json!({"input": {"prompt": "x"},
            "turn_context": {"model": {"provider": "openai", "name": "m", "config": {"stop": ["a"]}}}});
        assert_eq!(stray_array(&settings, "", free), None);
        assert_eq!(
            stray_array(&serde_json::json!([1]), "", &[]).as_deref(),
            Some("the body")
        );
    }
}
