//! Moving bytes once a connection is allowed: the CONNECT relay with its server-name check, and a stream wrapper
//! that counts what passes for `network_closed`.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use super::policy::normalise_host;

/// The largest ClientHello read before giving up on it (real ones are under 2 KiB, 16 KiB with huge extensions).
const MAX_HELLO: usize = 64 * 1024;

/// TLS record type of a handshake, the first byte a TLS client sends.
const TLS_HANDSHAKE: u8 = 0x16;

/// Why a tunnel ended before its peers closed it.
#[derive(Debug, thiserror::Error)]
pub(super) enum RelayError {
    /// A read or write failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The client's TLS server name is another host than the one allowed.
    #[error("the TLS server name \"{0}\" is not the CONNECT host")]
    ServerName(String),
    /// The first bytes looked like TLS but were no readable ClientHello.
    #[error("the client's TLS hello could not be read")]
    Hello,
}

/// Bytes in each direction.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// From the sandbox to the host.
    pub sent: AtomicU64,
    /// From the host to the sandbox.
    pub received: AtomicU64,
}

/// An upstream stream that counts its bytes.
pub(super) struct Counted<T> {
    inner: T,
    counters: Arc<Counters>,
}

impl<T> Counted<T> {
    /// Wraps `inner`, counting into `counters`.
    pub fn new(inner: T, counters: Arc<Counters>) -> Self {
        Counted { inner, counters }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = (buf.filled().len() - before) as u64;
        self.counters.received.fetch_add(n, Ordering::Relaxed);
        poll
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = poll {
            self.counters.sent.fetch_add(n as u64, Ordering::Relaxed);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Relays between the client and the upstream until both directions have ended. The client's first bytes are
/// held back until, for a TLS client, its ClientHello has been read and its server name, if any, matches `host`.
/// The upstream's bytes flow meanwhile, so protocols where the server speaks first work too.
pub(super) async fn relay<C, U>(client: C, upstream: U, host: &str) -> Result<(), RelayError>
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let (mut client_read, mut client_write) = tokio::io::split(client);
    let (mut upstream_read, mut upstream_write) = tokio::io::split(upstream);
    let up = async {
        let first = check_hello(&mut client_read, host).await?;
        upstream_write.write_all(&first).await?;
        tokio::io::copy(&mut client_read, &mut upstream_write).await?;
        upstream_write.shutdown().await?;
        Ok::<(), RelayError>(())
    };
    let down = async {
        tokio::io::copy(&mut upstream_read, &mut client_write).await?;
        client_write.shutdown().await?;
        Ok::<(), RelayError>(())
    };
    tokio::try_join!(up, down)?;
    Ok(())
}

/// Reads the client's first bytes; for a TLS client, up to its whole ClientHello, whose server name must be
/// `host`. Returns what was read, to be sent on.
async fn check_hello<R: AsyncRead + Unpin>(r: &mut R, host: &str) -> Result<Vec<u8>, RelayError> {
    let mut buf = Vec::with_capacity(4096);
    if r.read_buf(&mut buf).await? == 0 || buf[0] != TLS_HANDSHAKE {
        return Ok(buf);
    }
    let mut acceptor = rustls::server::Acceptor::default();
    let mut fed = 0;
    loop {
        while fed < buf.len() {
            let mut rest = &buf[fed..];
            match acceptor.read_tls(&mut rest) {
                Ok(0) => break,
                Ok(n) => fed += n,
                Err(_) => return Err(RelayError::Hello),
            }
        }
        match acceptor.accept() {
            Ok(Some(accepted)) => {
                return match accepted.client_hello().server_name() {
                    Some(sni) if normalise_host(sni) != host => {
                        Err(RelayError::ServerName(sni.to_string()))
                    }
                    _ => Ok(buf),
                };
            }
            Ok(None) => {}
            Err(_) => return Err(RelayError::Hello),
        }
        if buf.len() >= MAX_HELLO || r.read_buf(&mut buf).await? == 0 {
            return Err(RelayError::Hello);
        }
    }
}
