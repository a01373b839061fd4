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
}

/// Serves `app` on `listener` (over TLS when `tls` is given) until `stop` resolves, then lets open requests finish
/// (5 s at most).
pub async fn serve(
    listener: tokio::net::TcpListener,
    tls: Option<Arc<super::tls::LiveTls>>,
    app: Router,
    limits: ConnLimits,
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
        let service = app.clone().map_request(
            move |mut req: axum::extract::Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ClientAddr(peer));
                req
            },
        );
        let service = hyper_util::service::TowerToHyperService::new(service);
        match &tls {
            None => {
                let conn = builder
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .into_owned();
                let conn = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = conn.await;
                    drop(permit);
                });
            }
            Some(tls) => {
                // The handshake runs on the connection's own task, so a slow client holds up no other.
                let acceptor = tls.acceptor();
                let (builder, deadline) = (builder.clone(), limits.header_read_timeout);
                let watcher = graceful.watcher();
                tokio::spawn(async move {
                    let handshake = tokio::time::timeout(deadline, acceptor.accept(stream)).await;
                    if let Ok(Ok(stream)) = handshake {
                        let conn = builder
                            .serve_connection_with_upgrades(TokioIo::new(stream), service)
                            .into_owned();
                        let _ = watcher.watch(conn).await;
                    }
                    drop(permit);
                });
            }
        }
    }
    drop(listener);
    let _ = tokio::time::timeout(Duration::from_secs(5), graceful.shutdown()).await;
}
