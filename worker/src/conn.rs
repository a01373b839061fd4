//! The worker's side of the socket: adopt the inherited descriptor, handshake, and the outbox that serialises every
//! outgoing frame.
//!
//! The supervisor hands the worker one end of a connected socket pair as an inherited descriptor (`--ipc-fd`), so
//! the sandbox holds no socket path and no host directory it could write to. The descriptor is marked close-on-exec
//! at once, with every other inherited one, so no command the worker starts inherits it.

use std::io::Write;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};

use futures::{SinkExt, StreamExt};
use service_ipc::{
    shrink_idle, FrameCodec, ToSupervisor, ToWorker, WorkerConfig, PROTOCOL_VERSION,
};
use tokio::net::UnixStream as Stream;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, FramedWrite};
use tokio_util::sync::CancellationToken;

use crate::error::{Result, WorkerError};

/// Frames from the supervisor.
pub type Inbound = FramedRead<tokio::io::ReadHalf<Stream>, FrameCodec<ToWorker, ToSupervisor>>;

/// Bound of the outbox: tasks wait (backpressure) rather than buffer without limit when the socket is slow.
const OUTBOX_CAPACITY: usize = 1024;

/// The longest an event waits in the outbox for company: below what a person or a stream reader can tell.
const HOLD: std::time::Duration = std::time::Duration::from_millis(1);

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
/// drains the outbox (it ends once every outbox clone is dropped, or once `finish` is cancelled, after writing what
/// was queued).
pub struct Connection {
    /// Configuration received in the handshake.
    pub config: WorkerConfig,
    /// Frames from the supervisor.
    pub inbound: Inbound,
    /// Sender of frames to the supervisor.
    pub outbox: Outbox,
    /// The writer task.
    pub writer: tokio::task::JoinHandle<()>,
    /// Ends the writer once it has written what is queued, whoever still holds an outbox (an MCP server's task
    /// may, until its server is gone).
    pub finish: CancellationToken,
}

/// Takes ownership of the inherited socket `fd` and marks every inherited descriptor close-on-exec. Call it first,
/// before any other descriptor is opened. The socket stays blocking for [`enter_cgroups`]; [`connect`] changes that.
pub fn adopt(fd: RawFd) -> Result<std::os::unix::net::UnixStream> {
    let connect_err = |source| WorkerError::Connect {
        path: format!("fd {fd}"),
        source,
    };
    // SAFETY: fcntl on a descriptor number; an invalid one fails with EBADF, which we report.
    let flags = unsafe { nix::libc::fcntl(fd, nix::libc::F_GETFD) };
    if fd < 3 || flags < 0 {
        return Err(connect_err(std::io::Error::other(
            "no inherited socket at that descriptor; the worker is started by the supervisor",
        )));
    }
    // SAFETY: close_range with CLOSE_RANGE_CLOEXEC only sets a flag on descriptors from 3 on.
    unsafe {
        nix::libc::syscall(
            nix::libc::SYS_close_range,
            3u32,
            u32::MAX,
            nix::libc::CLOSE_RANGE_CLOEXEC,
        );
    }
    // SAFETY: the descriptor was checked above and is ours alone: the supervisor passed it for this purpose.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(std::os::unix::net::UnixStream::from(owned))
}

/// Reads the cgroup handoff (see [`service_ipc::ENTER_CGROUPS_FLAG`]) from the adopted, still blocking `stream`,
/// and moves this process into those cgroups by writing `0` into each `tasks` file. Call it before any other
/// thread starts: the write moves only the calling thread, which, unlike moving a process by its pid, skips the
/// kernel's global threadgroup lock and its RCU grace period (5-15 ms on the bench machine, against 0.06 ms). The
/// supervisor checks the result and makes any move that was not made, so a failed write is left to it. False when
/// the supervisor closed the socket first (a spare worker it no longer needs).
pub fn enter_cgroups(stream: &std::os::unix::net::UnixStream) -> Result<bool> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    use std::os::fd::AsRawFd;
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!([RawFd; service_ipc::MAX_CGROUP_HANDLES]);
    let msg = loop {
        match recvmsg::<()>(
            stream.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Err(nix::errno::Errno::EINTR) => continue,
            other => {
                break other.map_err(|e| WorkerError::Connect {
                    path: "the inherited socket".into(),
                    source: e.into(),
                })?
            }
        }
    };
    if msg.bytes == 0 {
        return Ok(false);
    }
    let handles: Vec<OwnedFd> = msg
        .cmsgs()
        .into_iter()
        .flatten()
        .filter_map(|c| match c {
            ControlMessageOwned::ScmRights(fds) => Some(fds),
            _ => None,
        })
        .flatten()
        // SAFETY: the kernel installed these descriptors in this process for this message; nothing else owns them.
        .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) })
        .collect();
    for handle in handles {
        let _ = std::fs::File::from(handle).write_all(b"0");
    }
    Ok(true)
}

/// Says hello over `stream`, receives the configuration and answers `ready`. None when the supervisor closes the
/// socket before sending a configuration: a worker started ahead of its session (see the supervisor's `prestart`)
/// that was not needed, which is a normal end.
pub async fn connect(stream: std::os::unix::net::UnixStream) -> Result<Option<Connection>> {
    let connect_err = |source| WorkerError::Connect {
        path: "the inherited socket".into(),
        source,
    };
    stream.set_nonblocking(true).map_err(connect_err)?;
    let stream = Stream::from_std(stream).map_err(connect_err)?;
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
    // The configuration is the largest frame most sessions ever get; an idle session need not keep its room.
    shrink_idle(inbound.read_buffer_mut());
    shrink_idle(outbound.write_buffer_mut());

    let (tx, rx) = mpsc::channel::<ToSupervisor>(OUTBOX_CAPACITY);
    let finish = CancellationToken::new();
    let writer = tokio::spawn(write_frames(outbound, rx, finish.clone()));
    Ok(Some(Connection {
        config,
        inbound,
        outbox: Outbox { tx },
        writer,
        finish,
    }))
}

/// Writes the outbox's frames to the supervisor until every sender is gone or `finishing` is cancelled, then
/// writes what is queued.
///
/// Events written less than [`HOLD`] after the last write wait for the next one (Nagle's rule, for events only): a
/// program making thousands of tool calls a second then wakes the supervisor once per `HOLD`, not twice per call.
/// Every other frame is a request or an end that the supervisor must see at once, and takes the held events along.
async fn write_frames<W: tokio::io::AsyncWrite + Unpin>(
    mut outbound: FramedWrite<W, FrameCodec<ToWorker, ToSupervisor>>,
    mut rx: mpsc::Receiver<ToSupervisor>,
    finishing: CancellationToken,
) {
    let mut flushed_at = tokio::time::Instant::now();
    let mut held = false;
    loop {
        let msg = tokio::select! {
            msg = rx.recv() => msg,
            () = tokio::time::sleep_until(flushed_at + HOLD), if held => {
                if outbound.flush().await.is_err() {
                    return;
                }
                (held, flushed_at) = (false, tokio::time::Instant::now());
                shrink_idle(outbound.write_buffer_mut());
                continue;
            }
            () = finishing.cancelled() => {
                // No new frame is taken from here on; what is queued is still written.
                rx.close();
                rx.recv().await
            }
        };
        let Some(msg) = msg else {
            let _ = outbound.flush().await;
            return;
        };
        let holdable = matches!(msg, ToSupervisor::Event(_));
        // feed + flush only when the queue is drained: many small events share one write.
        if outbound.feed(msg).await.is_err() {
            return;
        }
        if rx.is_empty() {
            if holdable && !finishing.is_cancelled() && flushed_at.elapsed() < HOLD {
                held = true;
                continue;
            }
            if outbound.flush().await.is_err() {
                return;
            }
            (held, flushed_at) = (false, tokio::time::Instant::now());
            shrink_idle(outbound.write_buffer_mut());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use service_ipc::EventPayload;
    use std::time::Duration;

    fn delta(text: &str) -> ToSupervisor {
        ToSupervisor::Event(EventPayload::AgentMessageDelta {
            turn_id: "t".into(),
            delta: text.into(),
        })
    }

    /// The supervisor's end of a socket pair whose other end `write_frames` writes.
    fn pair() -> (
        mpsc::Sender<ToSupervisor>,
        FramedRead<Stream, FrameCodec<ToSupervisor, ToWorker>>,
        CancellationToken,
    ) {
        let (ours, theirs) = Stream::pair().unwrap();
        let (tx, rx) = mpsc::channel(OUTBOX_CAPACITY);
        let finish = CancellationToken::new();
        tokio::spawn(write_frames(
            FramedWrite::new(ours, FrameCodec::new()),
            rx,
            finish.clone(),
        ));
        (tx, FramedRead::new(theirs, FrameCodec::new()), finish)
    }

    async fn next(
        frames: &mut FramedRead<Stream, FrameCodec<ToSupervisor, ToWorker>>,
    ) -> ToSupervisor {
        tokio::time::timeout(Duration::from_secs(5), frames.next())
            .await
            .expect("no frame within 5 s")
            .unwrap()
            .unwrap()
    }

    #[tokio::test]
    async fn an_event_held_for_company_is_written_when_none_comes() {
        let (tx, mut frames, _finish) = pair();
        tx.send(delta("a")).await.unwrap();
        tx.send(delta("b")).await.unwrap();
        assert_eq!(next(&mut frames).await, delta("a"));
        assert_eq!(next(&mut frames).await, delta("b"));
        // Right after a write: this one is held, and nothing else follows it.
        tx.send(delta("c")).await.unwrap();
        assert_eq!(next(&mut frames).await, delta("c"));
    }

    #[tokio::test]
    async fn a_request_takes_the_held_events_along_in_order() {
        let (tx, mut frames, finish) = pair();
        tx.send(delta("a")).await.unwrap();
        assert_eq!(next(&mut frames).await, delta("a"));
        tx.send(delta("b")).await.unwrap();
        tx.send(ToSupervisor::Heartbeat).await.unwrap();
        assert_eq!(next(&mut frames).await, delta("b"));
        assert_eq!(next(&mut frames).await, ToSupervisor::Heartbeat);
        // Finishing writes what was queued, held or not.
        tx.send(delta("c")).await.unwrap();
        finish.cancel();
        assert_eq!(next(&mut frames).await, delta("c"));
        assert!(frames.next().await.is_none(), "the writer ended");
    }
}
