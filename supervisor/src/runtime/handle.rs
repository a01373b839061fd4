//! The session's hold on its running worker: a queue of frames to it, and a way to stop it. It knows nothing of
//! sessions or of how the worker was started.

use std::path::{Path, PathBuf};
use std::time::Duration;

use service_ipc::{SandboxMode, ToWorker};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

use super::error::{Result, RuntimeError};

/// A cloneable handle on a running worker.
#[derive(Clone)]
pub struct WorkerHandle {
    pub(super) tx: mpsc::Sender<ToWorker>,
    pub(super) kill: CancellationToken,
    pub(super) exited: watch::Receiver<bool>,
    /// The mode that confines this worker.
    pub confinement: SandboxMode,
    /// The worker's pid when it runs in a sandbox of its own (it is that sandbox's pid 1).
    pub(super) sandbox_pid: Option<u32>,
    /// Host workspace and its path inside the worker's view.
    pub paths: (PathBuf, PathBuf),
    /// Its cgroups and socket directory: what a process that leaves without waiting for it must have removed.
    pub(super) remains: (Vec<PathBuf>, PathBuf),
}

impl WorkerHandle {
    /// Queues a frame; fails once the worker is gone. (A worker gets a handle only once it is inside its limits:
    /// `spawn::configure` waits for them before the configuration.)
    pub async fn send(&self, msg: ToWorker) -> Result<()> {
        self.tx
            .send(msg)
            .await
            .map_err(|_| RuntimeError::WorkerUnavailable("the worker has exited".into()))
    }

    /// Queues a frame without waiting; false when the queue is full or the worker is gone.
    pub fn try_send(&self, msg: ToWorker) -> bool {
        self.tx.try_send(msg).is_ok()
    }

    /// True until the actor has seen the worker's connection end (or was told to kill it).
    pub fn is_alive(&self) -> bool {
        !self.kill.is_cancelled() && !*self.exited.borrow()
    }

    /// Asks the worker to exit, waits up to `grace`, then kills it; returns once it is gone.
    pub async fn shutdown(&self, grace: Duration) {
        let _ = self.tx.try_send(ToWorker::Shutdown);
        let mut exited = self.exited.clone();
        if tokio::time::timeout(grace, exited.wait_for(|e| *e))
            .await
            .is_err()
        {
            self.kill.cancel();
            let _ = exited.wait_for(|e| *e).await;
        }
    }

    /// True when the worker runs in a sandbox that holds nothing besides it, so that stopping it loses nothing
    /// (see `sandbox::occupancy`). Reads `/proc`: call it off the async threads.
    pub fn holds_nothing_else(&self) -> bool {
        self.is_alive()
            && self
                .sandbox_pid
                .is_some_and(crate::sandbox::occupancy::holds_only_its_worker)
    }

    /// Kills the worker at once.
    pub fn kill(&self) {
        self.kill.cancel();
    }

    /// The worker's view of a host path (paths outside the workspace are passed unchanged).
    pub fn worker_path(&self, host: &Path) -> PathBuf {
        worker_path(&self.paths, host)
    }
}

/// The view of `host` of a worker whose workspace is `paths.1` for the host's `paths.0` (paths outside the
/// workspace are passed unchanged).
pub(super) fn worker_path((host_ws, worker_ws): &(PathBuf, PathBuf), host: &Path) -> PathBuf {
    match host.strip_prefix(host_ws) {
        Ok(rel) if rel.as_os_str().is_empty() => worker_ws.clone(),
        Ok(rel) => worker_ws.join(rel),
        Err(_) => host.to_path_buf(),
    }
}
