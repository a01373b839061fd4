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

/// `POST /sessions`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateSession {
    /// A bundle reference: `<name>`, `<name>@latest`, `<namespace>/<name>:<version>` or a directory on the server.
    pub bundle_ref: String,
    /// Working directory of the session on the server (default: a fresh workspace under the session).
    #[serde(default)]
    pub cwd: Option<String>,
}

/// `POST /sessions/{id}/run-sync` and `POST /sessions/{id}/run`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// The Task: `prompt`, `submission_id` (a UUID), `completed` (false for a new turn).
    #[schema(value_type = Object)]
    pub input: Task,
    /// Per-turn overrides: `cwd` (inside the workspace when sandboxed) and `model` (`{provider, name, config}`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub turn_context: Option<TurnOverrides>,
}

/// The outcome of a turn.
#[derive(Debug, Serialize, ToSchema)]
pub struct TurnResult {
    /// Turn id.
    pub turn_id: String,
    /// `completed`, `failed` or `interrupted`.
    #[schema(value_type = String)]
    pub status: TurnStatus,
    /// Final assistant message (empty unless completed).
    pub final_message: String,
    /// Token usage: `input_tokens`, `output_tokens`.
    #[schema(value_type = Object)]
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
            error: o.error.map(|(code, message)| ErrorBody { code, message }),
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
    #[schema(value_type = String)]
    pub decision: ApprovalDecision,
}

/// The answer to a decision.
#[derive(Debug, Serialize, ToSchema)]
pub struct DecisionResult {
    /// The request.
    pub request_id: String,
    /// The decision applied.
    #[schema(value_type = String)]
    pub decision: ApprovalDecision,
}

/// `GET /sessions/{id}/events` query.
#[derive(Debug, Deserialize, ToSchema)]
pub struct EventsQuery {
    /// Replay journaled events after this sequence number first (0 replays the whole session).
    pub after: Option<u64>,
}

/// `GET /healthz`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// Always `ok`.
    pub status: String,
    /// Server version.
    pub version: String,
}

/// The error body.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// Stable snake_case code.
    pub code: String,
    /// What went wrong and what to do.
    pub message: String,
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
}

impl ApiError {
    /// An error with a status, code and message.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                code: code.into(),
                message: message.into(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(ErrorEnvelope { error: self.body })).into_response()
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
            RuntimeError::Bundle(BundleError::BadReference { .. }) => {
                (S::UNPROCESSABLE_ENTITY, "invalid_bundle_ref")
            }
            RuntimeError::Bundle(BundleError::Io { .. }) => (S::INTERNAL_SERVER_ERROR, "internal"),
            RuntimeError::Bundle(_) => (S::UNPROCESSABLE_ENTITY, "invalid_bundle"),
            RuntimeError::SessionNotFound(_) => (S::NOT_FOUND, "session_not_found"),
            RuntimeError::TurnInProgress { .. } => (S::CONFLICT, "turn_in_progress"),
            RuntimeError::NoTurnRunning(_) => (S::CONFLICT, "no_turn_running"),
            RuntimeError::JournalQuota { .. } => (S::CONFLICT, "journal_quota"),
            RuntimeError::InvalidRequest(_) => (S::UNPROCESSABLE_ENTITY, "invalid_request"),
            RuntimeError::ApprovalNotFound(_) => (S::NOT_FOUND, "approval_not_found"),
            RuntimeError::ApprovalNotPending(_) => (S::CONFLICT, "approval_not_pending"),
            RuntimeError::ApprovalSessionGone(_) => (S::NOT_FOUND, "session_not_found"),
            RuntimeError::SandboxUnavailable(_) => (S::SERVICE_UNAVAILABLE, "sandbox_unavailable"),
            RuntimeError::WorkerUnavailable(_) => (S::SERVICE_UNAVAILABLE, "worker_unavailable"),
            RuntimeError::WorkerDied(_) => (S::SERVICE_UNAVAILABLE, "worker_died"),
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

/// A JSON body whose rejections use the API's error shape: 400 malformed, 413 too large, 422 invalid.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        match axum::Json::<T>::from_request(req, state).await {
            Ok(axum::Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(match rejection {
                JsonRejection::JsonSyntaxError(e) => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "malformed_json",
                    format!("the body is not valid JSON: {}", e.body_text()),
                ),
                JsonRejection::JsonDataError(e) => ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "invalid_request",
                    e.body_text(),
                ),
                JsonRejection::MissingJsonContentType(_) => ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "malformed_json",
                    "send the body as JSON with content-type: application/json",
                ),
                JsonRejection::BytesRejection(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                    ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "payload_too_large",
                        format!("the body is larger than the {} byte limit", super::MAX_BODY),
                    )
                }
                other => ApiError::new(StatusCode::BAD_REQUEST, "bad_request", other.body_text()),
            }),
        }
    }
}
