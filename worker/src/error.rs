//! Errors that end a worker.

/// Result alias of the worker.
pub type Result<T, E = WorkerError> = std::result::Result<T, E>;

/// Why a worker stopped abnormally. Tool failures are not here: they are tool results the model sees.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The async runtime could not start (returned by `main`).
    #[error("cannot start the worker runtime: {0}")]
    Runtime(std::io::Error),
    /// The supervisor socket could not be reached (returned by `conn::connect`).
    #[error("cannot connect to the supervisor at {path}: {source}")]
    Connect {
        /// Socket path.
        path: String,
        /// OS error.
        source: std::io::Error,
    },
    /// The supervisor speaks another protocol version (returned by the handshake).
    #[error("protocol mismatch: supervisor speaks version {supervisor}, this worker speaks {worker}; use one service-rs binary for both")]
    ProtocolMismatch {
        /// Supervisor's version.
        supervisor: u32,
        /// Ours.
        worker: u32,
    },
    /// The supervisor broke the protocol, e.g. sent something other than `configure` first.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// Reading or writing a frame failed.
    #[error(transparent)]
    Codec(#[from] service_ipc::CodecError),
}
