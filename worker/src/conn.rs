//! The worker's side of the socket: connect, handshake, and the outbox that serialises every outgoing frame.

use std::path::Path;

use futures::{SinkExt, StreamExt};
use interprocess::local_socket::tokio::{prelude::*, Stream};
use interprocess::local_socket::{GenericFilePath, ToFsName};
use service_ipc::{FrameCodec, ToSupervisor, ToWorker, WorkerConfig, PROTOCOL_VERSION};
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};

use crate::error::{Result, WorkerError};

/// Frames from the supervisor.
pub type Inbound = FramedRead<tokio::io::ReadHalf<Stream>, FrameCodec<ToWorker, ToSupervisor>>;

/// Bound of the outbox: tasks wait (backpressure) rather than buffer without limit when the socket is slow.
const OUTBOX_CAPACITY: usize = 1024;

/// A cloneable sender of frames to the supervisor. Sending fails only once the connection is gone.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::Sender<ToSupervisor>,
}

impl Outbox {
    /// Queues a frame; returns false when the connection is closed.
    pub async fn send(&self, msg: ToSupervisor) -> bool {
        self.tx.send(msg).await.is_ok()
    }

    /// Queues an event.
    pub async fn event(&self, payload: service_ipc::EventPayload) -> bool {
        self.send(ToSupervisor::Event(payload)).await
    }
}

/// A connected, configured worker: its configuration, the inbound frames, the outbox, and the writer task that
/// drains the outbox (it ends once every outbox clone is dropped, after writing what was queued).
pub struct Connection {
    /// Configuration received in the handshake.
    pub config: WorkerConfig,
    /// Frames from the supervisor.
    pub inbound: Inbound,
    /// Sender of frames to the supervisor.
    pub outbox: Outbox,
    /// The writer task.
    pub writer: tokio::task::JoinHandle<()>,
}

/// Connects to `socket`, says hello, receives the configuration and answers `ready`. None when the supervisor
/// closes the socket before sending a configuration: a worker started ahead of its session (see the supervisor's
/// `prestart`) that was not needed, which is a normal end.
pub async fn connect(socket: &Path) -> Result<Option<Connection>> {
    let connect_err = |source| WorkerError::Connect {
        path: socket.display().to_string(),
        source,
    };
    let name = socket
        .to_fs_name::<GenericFilePath>()
        .map_err(connect_err)?;
    let stream = Stream::connect(name).await.map_err(connect_err)?;
    let (read, write) = tokio::io::split(stream);
    let mut inbound = FramedRead::new(read, FrameCodec::<ToWorker, ToSupervisor>::new());
    let mut outbound = FramedWrite::new(write, FrameCodec::<ToWorker, ToSupervisor>::new());

    outbound
        .send(ToSupervisor::Hello {
            protocol_version: PROTOCOL_VERSION,
            pid: std::process::id(),
        })
        .await?;
    let config = match inbound.next().await {
        Some(Ok(ToWorker::Configure(config))) => config,
        Some(Ok(other)) => {
            return Err(WorkerError::Protocol(format!(
                "expected configure as the first frame, got {other:?}"
            )))
        }
        Some(Err(e)) => return Err(e.into()),
        None => return Ok(None),
    };
    if config.protocol_version != PROTOCOL_VERSION {
        return Err(WorkerError::ProtocolMismatch {
            supervisor: config.protocol_version,
            worker: PROTOCOL_VERSION,
        });
    }
    outbound.send(ToSupervisor::Ready).await?;

    let (tx, mut rx) = mpsc::channel::<ToSupervisor>(OUTBOX_CAPACITY);
    let writer = tokio::spawn(async move {
        while let Some(msg) = rx.recv().await {
            // feed + flush only when the queue is drained: many small events share one write.
            if outbound.feed(msg).await.is_err() {
                return;
            }
            if rx.is_empty() && outbound.flush().await.is_err() {
                return;
            }
        }
    });
    Ok(Some(Connection {
        config,
        inbound,
        outbox: Outbox { tx },
        writer,
    }))
}
