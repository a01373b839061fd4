//! Accepting connections with bounds: at most `max_connections` at once (the next waits in the kernel's backlog
//! until one ends), and a deadline for a request's headers, so half-open (slowloris) connections are closed rather
//! than held forever; under TLS the handshake gets the same deadline. Each request carries its client's address
//! ([`ClientAddr`]) for per-client caps.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use tower::ServiceExt;

use super::lanes::Lanes;

/// The address of the client that sent a request.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

/// Connection bounds.
#[derive(Debug, Clone, Copy)]
pub struct ConnLimits {
    /// Connections served at once.
    pub max_connections: usize,
    /// Time a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// Threads that serve connections, each connection on one of them ([`Lanes`]); zero serves them on the
    /// shared runtime.
    pub threads: usize,
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `stop` resolves, then lets open requests finish
/// (5 s at most). Connections are served on `lanes` when given, else on the caller's runtime.
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<super::tls::LiveTls>>,
    app: Router,
    limits: ConnLimits,
    lanes: Option<Lanes>,
    stop: impl Future<Output = ()>,
) {
    let permits = Arc::new(tokio::sync::Semaphore::new(limits.max_connections));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    tokio::pin!(stop);
    loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
            _ = &mut stop => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors and the like: pause rather than spin.
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut stop => break,
        };
        let connection = Connection {
            app: app.clone(),
            peer,
            builder: builder.clone(),
            watcher: graceful.watcher(),
            tls: tls
                .as_ref()
                .map(|t| (t.acceptor(), limits.header_read_timeout)),
        };
        match &lanes {
            // The socket moves to the lane's own reactor, so that its wake-ups reach that thread.
            Some(lanes) => match stream.into_std() {
                Ok(stream) => lanes.serve(async move {
                    if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                        connection.serve(stream).await;
                    }
                    drop(permit);
                }),
                Err(e) => tracing::warn!("a connection could not be handed over: {e}"),
            },
            None => drop(tokio::spawn(async move {
                connection.serve(stream).await;
                drop(permit);
            })),
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
    if let Some(lanes) = lanes {
        lanes.stop().await;
    }
}

/// What serving one accepted connection takes.
struct Connection {
    app: Router,
    peer: SocketAddr,
    builder: Builder<TokioExecutor>,
    watcher: hyper_util::server::graceful::Watcher,
    /// The TLS acceptor, and the deadline of its handshake.
    tls: Option<(tokio_rustls::TlsAcceptor, Duration)>,
}

impl Connection {
    /// Serves `stream` until the client or the server ends it; under TLS the handshake runs here, on the
    /// connection's own task, so a slow client holds up no other.
    async fn serve(self, stream: tokio::net::TcpStream) {
        let peer = self.peer;
        let service = self.app.map_request(
            move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ClientAddr(peer));
                req
            },
        );
        let service = hyper_util::service::TowerToHyperService::new(service);
        match self.tls {
            None => {
                let conn = self
                    .builder
                    .serve_connection_with_upgrades(TokioIo::new(stream), service);
                let _ = self.watcher.watch(conn.into_owned()).await;
            }
            Some((acceptor, deadline)) => {
                let handshake = tokio::time::timeout(deadline, acceptor.accept(stream)).await;
                if let Ok(Ok(stream)) = handshake {
                    let conn = self
                        .builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service);
                    let _ = self.watcher.watch(conn.into_owned()).await;
                }
            }
        }
    }
}
