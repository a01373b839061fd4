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
    /// The tenant holds as many sessions as its quota allows (create_session, fork, subagents).
    #[error(
        "tenant \"{tenant}\" has {have} sessions, its limit; delete one (DELETE /sessions/{{id}}) or ask an admin to \
         raise it (service-rs tokens quota {tenant} --sessions N)"
    )]
    QuotaSessions {
        /// The tenant.
        tenant: String,
        /// Sessions it holds.
        have: u64,
    },
    /// No turn is running (interrupt).
    #[error("session {0} has no running turn")]
    NoTurnRunning(String),
    /// A request argument is invalid, e.g. a cwd that does not exist or an unknown provider (start_turn,
    /// create_session).
    #[error("{0}")]
    InvalidRequest(String),
    /// The working directory asked for does not exist (create_session, start_turn).
    #[error("{0}")]
    CwdNotFound(String),
    /// The working directory asked for is outside what the sandbox shows (start_turn).
    #[error("{0}")]
    CwdOutsideWorkspace(String),
    /// A live session uses the bundle (remove_bundle).
    #[error("bundle {reference} is in use by live sessions {}; stop or delete them, or remove it with --force (which stops them)", sessions.join(", "))]
    BundleInUse {
        /// The bundle.
        reference: String,
        /// The live sessions.
        sessions: Vec<String>,
    },
    /// Another process on the store (a `serve`) runs sessions of the bundle (remove_bundle).
    #[error("bundle {reference} is in use by sessions {} that another process on this store runs (a `service-rs serve`); stop or delete them there (service-rs --remote URL sessions delete ID), or stop that process", sessions.join(", "))]
    BundleLiveElsewhere {
        /// The bundle.
        reference: String,
        /// The sessions live elsewhere.
        sessions: Vec<String>,
    },
    /// The session's bundle was removed from the store (start_turn, run_session_command).
    #[error("this session's bundle {0} was removed from the store; install it again (build, pull or import) to go on")]
    BundleRemoved(String),
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
    /// The summary call of a compaction failed; the history is unchanged (compact_session).
    #[error("compaction failed, the history is unchanged: {0}")]
    CompactionFailed(String),
    /// A rewind or fork named a turn the session does not have (rewind_session, fork_session).
    #[error("session {session_id} has no turn {turn}; {}", turn_range(*turns))]
    TurnOutOfRange {
        /// Session id.
        session_id: String,
        /// The turn asked for.
        turn: u64,
        /// Turns the session has.
        turns: u32,
    },
    /// The checkpoint a rewind or fork needs is not on this node (rewind_session, fork_session).
    #[error("{0}")]
    CheckpointMissing(String),
    /// The checkpoint to go back to passed over files that did not fit in `checkpoint_max_mb` (rewind).
    #[error("{0}")]
    CheckpointIncomplete(String),
    /// Files changed outside the session since its last turn, and a rewind would undo that (rewind_session).
    #[error("{0}")]
    WorkspaceChanged(String),
    /// The worker died before answering (run_turn, run_session_command).
    #[error("the session worker died: {0}")]
    WorkerDied(String),
    /// The bundle under a session's reference on this node is not the one the session was created with (a shared
    /// store, load).
    #[error("session bundle {reference} here has digest {have}, but the session was created with {want}; install the same version on every node (pull it from the registry, or share the store path)")]
    BundleMismatch {
        /// The reference.
        reference: String,
        /// The digest the session was created with.
        want: String,
        /// The digest found on this node.
        have: String,
    },
    /// The bundle of a session made on another node could not be pulled here (a shared store, load).
    #[error("session bundle {reference} is not on this node and pulling it failed: {message}")]
    BundleUnavailable {
        /// The registry reference the session was created from.
        reference: String,
        /// Why the pull failed.
        message: String,
    },
    /// Another live node runs the session; the request belongs there (a shared store).
    #[error("session {session_id} is run by node {node_id} at {url}")]
    OwnedElsewhere {
        /// Session id.
        session_id: String,
        /// The owning node.
        node_id: String,
        /// Its advertised base URL.
        url: String,
    },
    /// The session's files are on a node that is gone (a shared store): running it elsewhere would run it without
    /// them.
    #[error(
        "session {session_id}'s files (its workspace and checkpoints) are on node {node_id}, which has not been \
         seen for a lease; its turns run there only. Start node {node_id} again with its SERVICE_HOME, or delete \
         the session"
    )]
    WorkspaceLost {
        /// Session id.
        session_id: String,
        /// The node whose disk holds the files.
        node_id: String,
    },
    /// This home's session directories belong to a cluster, whose records are in its database (see
    /// `ServiceHome::cluster_file`): a command over the home's own files cannot tell which are leftovers.
    #[error(
        "this SERVICE_HOME serves a cluster whose sessions are in {store}: their directories here have their \
         records there, not in this home. Prune the cluster's sessions through a node (`service-rs --remote URL \
         sessions prune`), or remove the file `cluster` of this home if no node uses it any more"
    )]
    ClusterHome {
        /// The database and node, as `serve` wrote them.
        store: String,
    },
    /// The server is stopping and takes no new turn; another node, or this one once restarted, will.
    #[error("this server is stopping and takes no new turn; retry, and the next node (or this one, restarted) will take it")]
    Draining,
    /// The shared database does not hold this release's schema, or could not take it.
    #[error("the session database at {host} cannot be used: {message}")]
    Schema {
        /// Host (and port) of the database, never its password.
        host: String,
        /// What is wrong, with PostgreSQL's own message.
        message: String,
    },
    /// The shared database cannot be reached or refused the request.
    #[error("the session database at {host} is unavailable ({message}); retry shortly")]
    Database {
        /// Host (and port) of the database, never its password.
        host: String,
        /// What went wrong.
        message: String,
    },
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

/// The turns a rewind or fork may name, for its error.
fn turn_range(turns: u32) -> String {
    match turns {
        0 => "it has no turns yet".into(),
        n => format!("valid turns are 1..{n}"),
    }
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

    /// For a failed write to the store: `storage_full` (no space or quota left) or `storage_error` (read-only, or
    /// another I/O failure), with the cause in words that name no server path; None for any other error.
    pub fn storage_fault(&self) -> Option<(&'static str, String)> {
        let (action, io) = match self {
            RuntimeError::Io { action, source, .. } => (*action, source),
            RuntimeError::Bundle(BundleError::Io { action, source, .. }) => (*action, source),
            _ => return None,
        };
        let (code, cause) = storage_fault(io);
        // A failed read is the server's own trouble (a 500), unless the store is full or read-only.
        let write = [
            "cannot write",
            "cannot append",
            "cannot create",
            "cannot replace",
        ]
        .iter()
        .any(|w| action.starts_with(w));
        (write || code == "storage_full" || cause.contains("read-only")).then_some((code, cause))
    }
}

/// The code and cause of a failed store write.
pub fn storage_fault(io: &std::io::Error) -> (&'static str, String) {
    use nix::errno::Errno;
    use std::io::ErrorKind;
    // Wrappers (tempfile's, for one) keep the kind but not the OS error number.
    let errno = io.raw_os_error().map(Errno::from_raw);
    let full = matches!(errno, Some(Errno::ENOSPC | Errno::EDQUOT))
        || matches!(io.kind(), ErrorKind::StorageFull | ErrorKind::QuotaExceeded);
    let read_only = errno == Some(Errno::EROFS) || io.kind() == ErrorKind::ReadOnlyFilesystem;
    match (full, read_only) {
        (true, _) => (
            "storage_full",
            "the server's store is out of space; the operator must free space (the session resumes once there is)"
                .into(),
        ),
        (_, true) => (
            "storage_error",
            "the server's store is read-only; the operator must make it writable".into(),
        ),
        _ => (
            "storage_error",
            format!("the server could not write to its store ({})", io.kind()),
        ),
    }
}
