//! Errors of `ServiceRuntime`.

use std::path::PathBuf;

use crate::bundle::BundleError;

/// Result alias of the runtime.
pub type Result<T, E = RuntimeError> = std::result::Result<T, E>;

/// What went wrong in a runtime call; each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The bundle reference or bundle is bad (create_session, or a persisted session whose bundle is gone).
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// No session with this id (every call taking a session id).
    #[error("no session with id \"{0}\"; list sessions with `service-rs sessions`")]
    SessionNotFound(String),
    /// A turn is already running in the session (start_turn).
    #[error("session {session_id} is already running turn {turn_id}; wait for it or interrupt it")]
    TurnInProgress {
        /// Session id.
        session_id: String,
        /// The running turn.
        turn_id: String,
    },
    /// The session's journal reached its quota (start_turn).
    #[error("session {session_id} has used its journal quota of {quota} bytes; delete it and start a new session (the operator sets the quota with SERVICE_JOURNAL_QUOTA_MB)")]
    JournalQuota {
        /// Session id.
        session_id: String,
        /// The quota in bytes.
        quota: u64,
    },
    /// No turn is running (interrupt).
    #[error("session {0} has no running turn")]
    NoTurnRunning(String),
    /// A request argument is invalid, e.g. a cwd that does not exist or an unknown provider (start_turn,
    /// create_session).
    #[error("{0}")]
    InvalidRequest(String),
    /// No approval request with this id was ever pending (resolve_approval).
    #[error("no approval request with id \"{0}\"")]
    ApprovalNotFound(String),
    /// The approval request was already resolved, or dropped when its turn ended (resolve_approval).
    #[error(
        "approval request \"{0}\" is no longer pending: it was already resolved or its turn ended"
    )]
    ApprovalNotPending(String),
    /// The session of the approval request was deleted (resolve_approval).
    #[error("approval request \"{0}\" belongs to a session that was deleted")]
    ApprovalSessionGone(String),
    /// The bundle needs a confined sandbox that this machine cannot provide (start_turn, run_session_command).
    #[error("{0}")]
    SandboxUnavailable(String),
    /// The worker could not be started or reached (start_turn, run_session_command).
    #[error("the session worker is unavailable: {0}")]
    WorkerUnavailable(String),
    /// The worker died before answering (run_turn, run_session_command).
    #[error("the session worker died: {0}")]
    WorkerDied(String),
    /// A store file could not be read or written.
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// A store file is damaged.
    #[error("{path}: {message}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

impl RuntimeError {
    /// An I/O error with the action and path that failed.
    pub fn io(action: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RuntimeError::Io {
            action,
            path: path.into(),
            source,
        }
    }
}
