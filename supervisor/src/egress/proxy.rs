//! The proxy's HTTP side (hyper): one task per client connection, a decision per request, then a CONNECT tunnel
//! or one forwarded plain-HTTP exchange.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderName, HeaderValue, CONNECTION, HOST};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use service_ipc::{EventPayload, NetworkDecision};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::OwnedSemaphorePermit;

use super::policy::{self, normalise_host};
use super::resolve::{self, is_internal};
use super::tunnel::{self, Counted, Counters, RelayError};
use super::{Answer, Shared, Sink, MAX_TUNNELS};

type Body = BoxBody<Bytes, hyper::Error>;

/// Time to resolve a name, and again to connect to it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Headers that belong to one hop and are not forwarded (RFC 9110 section 7.6.1).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Accepts client connections until the proxy is dropped.
pub(super) async fn serve(listener: UnixListener, shared: Arc<Shared>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                // Closed unanswered: a sandbox whose session can journal nothing more gets no way out either.
                if shared.sink.get().is_some_and(|s| !s.admits()) {
                    drop(stream);
                    continue;
                }
                tokio::spawn(connection(stream, shared.clone()));
            }
            Err(e) => {
                tracing::warn!("egress proxy: accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn connection(stream: UnixStream, shared: Arc<Shared>) {
    let closed = shared.closed.clone();
    let service = hyper::service::service_fn(move |req| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(handle(shared, req).await) }
    });
    let serving = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades();
    tokio::select! {
        _ = serving => {}
        _ = closed.cancelled() => {}
    }
}

fn text(status: StatusCode, message: impl Into<String>) -> Response<Body> {
    let mut body = message.into();
    body.push('\n');
    let mut resp = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed());
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

/// A refused request: its status and the reason, which is both the body and the event's `reason`.
struct Refusal {
    status: StatusCode,
    reason: String,
}

impl Refusal {
    fn forbidden(reason: String) -> Refusal {
        Refusal {
            status: StatusCode::FORBIDDEN,
            reason,
        }
    }

    fn bad_gateway(reason: String) -> Refusal {
        Refusal {
            status: StatusCode::BAD_GATEWAY,
            reason,
        }
    }
}

/// One request's target and where its events go.
#[derive(Clone)]
struct Conn {
    id: String,
    host: String,
    port: u16,
    turn: Option<String>,
    sink: Arc<dyn Sink>,
}

impl Conn {
    fn access(&self, decision: NetworkDecision, rule: Option<String>, reason: Option<String>) {
        self.sink.record(EventPayload::NetworkAccess {
            turn_id: self.turn.clone(),
            connection_id: self.id.clone(),
            host: self.host.clone(),
            port: self.port,
            decision,
            rule,
            reason,
        });
    }

    fn refuse(&self, rule: Option<String>, refusal: Refusal) -> Response<Body> {
        self.access(NetworkDecision::Deny, rule, Some(refusal.reason.clone()));
        text(
            refusal.status,
            format!("service-rs egress proxy: {}", refusal.reason),
        )
    }

    fn closed(&self, counters: &Counters, started: Instant) {
        use std::sync::atomic::Ordering::Relaxed;
        self.sink.record(EventPayload::NetworkClosed {
            turn_id: self.turn.clone(),
            connection_id: self.id.clone(),
            host: self.host.clone(),
            port: self.port,
            bytes_sent: counters.sent.load(Relaxed),
            bytes_received: counters.received.load(Relaxed),
            duration_ms: started.elapsed().as_millis() as u64,
        });
    }
}

/// The host and port a request is for: the CONNECT authority, or an absolute `http://` URL's.
fn target(req: &Request<Incoming>) -> Result<(String, u16), &'static str> {
    let uri = req.uri();
    if req.method() == Method::CONNECT {
        let authority = uri.authority().ok_or("CONNECT needs host:port")?;
        let port = authority.port_u16().ok_or("CONNECT needs host:port")?;
        return Ok((normalise_host(authority.host()), port));
    }
    match (uri.scheme_str(), uri.authority()) {
        (Some("http"), Some(authority)) => Ok((
            normalise_host(authority.host()),
            authority.port_u16().unwrap_or(80),
        )),
        _ => Err(
            "this is an HTTP proxy: send an absolute http:// URL, or CONNECT host:port for anything else (https)",
        ),
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let Some(sink) = shared.sink.get().cloned() else {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "service-rs egress proxy: this sandbox has no session yet",
        );
    };
    let (host, port) = match target(&req) {
        Ok(t) => t,
        Err(message) => return text(StatusCode::BAD_REQUEST, message),
    };
    let conn = Conn {
        id: uuid::Uuid::new_v4().to_string(),
        turn: sink.turn(),
        host,
        port,
        sink,
    };
    let (rule, addrs) = match decide(&shared, &conn).await {
        Ok(r) => r,
        Err((rule, refusal)) => return conn.refuse(rule, refusal),
    };
    let Ok(permit) = shared.tunnels.clone().try_acquire_owned() else {
        let refusal = Refusal {
            status: StatusCode::TOO_MANY_REQUESTS,
            reason: format!(
                "{}:{} was not opened: this sandbox already has {MAX_TUNNELS} connections open; close some first",
                conn.host, conn.port
            ),
        };
        return conn.refuse(Some(rule), refusal);
    };
    conn.access(NetworkDecision::Allow, Some(rule), None);
    let started = Instant::now();
    let counters = Arc::new(Counters::default());
    let upstream = match connect(&addrs).await {
        Ok(s) => s,
        Err(e) => {
            conn.closed(&counters, started);
            return text(
                StatusCode::BAD_GATEWAY,
                format!(
                    "service-rs egress proxy: cannot connect to {}:{}: {e}",
                    conn.host, conn.port
                ),
            );
        }
    };
    let upstream = Counted::new(upstream, counters.clone());
    let closed = shared.closed.clone();
    if req.method() == Method::CONNECT {
        let upgrade = hyper::upgrade::on(req);
        tokio::spawn(async move {
            let _permit = permit;
            let relayed = async {
                let client = upgrade.await.map_err(std::io::Error::other)?;
                tunnel::relay(TokioIo::new(client), upstream, &conn.host).await
            };
            let result = tokio::select! {
                r = relayed => r,
                _ = closed.cancelled() => Ok(()),
            };
            if let Err(e @ (RelayError::ServerName(_) | RelayError::Hello)) = result {
                conn.access(
                    NetworkDecision::Deny,
                    None,
                    Some(format!("tunnel closed: {e}")),
                );
            }
            conn.closed(&counters, started);
        });
        return Response::new(Empty::new().map_err(|e| match e {}).boxed());
    }
    forward(req, upstream, conn, counters, started, permit, closed).await
}

/// Which rule lets the connection through and the addresses to connect to; or the rule that matched, if any, and
/// why it is refused. A listed host is resolved and checked against internal addresses (unless listed exactly); an
/// unlisted one under `ask` is resolved first, so the operator sees where it leads, and an approval then counts as
/// an exact entry for those addresses.
async fn decide(
    shared: &Shared,
    conn: &Conn,
) -> Result<(String, Vec<SocketAddr>), (Option<String>, Refusal)> {
    let (rule, addrs) = decide_by_policy(shared, conn).await?;
    let own = addrs
        .iter()
        .find(|a| shared.reserved.iter().any(|r| resolve::reaches(r, a)));
    if let Some(own) = own {
        return Err((
            Some(rule),
            Refusal::forbidden(format!(
                "{}:{} is not allowed: it resolves to {own}, the service's own (its session database, its API or another node's), \
                 which no sandbox may reach",
                conn.host, conn.port
            )),
        ));
    }
    Ok((rule, addrs))
}

/// [`decide`] by the bundle's policy alone.
async fn decide_by_policy(
    shared: &Shared,
    conn: &Conn,
) -> Result<(String, Vec<SocketAddr>), (Option<String>, Refusal)> {
    let (host, port) = (&conn.host, conn.port);
    if let Some(p) = policy::matching(&shared.policy.patterns, host, port) {
        let rule = p.as_str().to_string();
        let addrs = resolve(shared, host, port)
            .await
            .map_err(|r| (Some(rule.clone()), r))?;
        if !p.is_exact() {
            if let Some(bad) = addrs.iter().find(|a| is_internal(a.ip())) {
                return Err((
                    Some(rule),
                    Refusal::forbidden(format!(
                        "{host}:{port} is not allowed: it resolves to {}, a loopback, private or link-local \
                         address, which only a host listed exactly may reach; list \"{host}\" itself (not a \
                         wildcard) in sandbox.permissions.network to allow it",
                        bad.ip()
                    )),
                ));
            }
        }
        return Ok((rule, addrs));
    }
    let entry = if port == 80 || port == 443 {
        format!("\"{host}\" (ports 80 and 443) or \"{host}:{port}\"")
    } else {
        format!("\"{host}:{port}\"")
    };
    let not_listed = format!(
        "{host}:{port} is not allowed: it is not in sandbox.permissions.network of this bundle's \
         service.bundle.json5; add {entry} to allow it"
    );
    if !shared.policy.ask {
        return Err((None, Refusal::forbidden(not_listed)));
    }
    let Some(turn) = conn.turn.clone() else {
        return Err((
            None,
            Refusal::forbidden(format!(
                "{not_listed} (agent.yaml says permissions.network: ask, but no turn is running to ask in)"
            )),
        ));
    };
    let addrs = resolve(shared, host, port).await.map_err(|r| (None, r))?;
    let ips = addrs.iter().map(|a| a.ip()).collect();
    match conn.sink.ask(turn, host.clone(), port, ips).await {
        Answer::Allow(why) => Ok((why.to_string(), addrs)),
        Answer::Deny(reason) => Err((
            None,
            Refusal::forbidden(format!("{host}:{port} is not allowed: {reason}")),
        )),
    }
}

/// The host's addresses.
async fn resolve(shared: &Shared, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refusal> {
    match tokio::time::timeout(CONNECT_TIMEOUT, shared.resolver.lookup(host, port)).await {
        Ok(Ok(a)) if !a.is_empty() => Ok(a),
        Ok(Ok(_)) => Err(Refusal::bad_gateway(format!("{host} has no address"))),
        Ok(Err(e)) => Err(Refusal::bad_gateway(format!("cannot resolve {host}: {e}"))),
        Err(_) => Err(Refusal::bad_gateway(format!(
            "resolving {host} took longer than {CONNECT_TIMEOUT:?}"
        ))),
    }
}

/// Connects to the first address that answers.
async fn connect(addrs: &[SocketAddr]) -> std::io::Result<TcpStream> {
    let mut last = std::io::Error::other("no address");
    for addr in addrs {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => last = e,
            Err(_) => last = std::io::Error::other(format!("timed out after {CONNECT_TIMEOUT:?}")),
        }
    }
    Err(last)
}

/// Sends one plain-HTTP request upstream over its own connection and returns the response as it streams.
async fn forward(
    req: Request<Incoming>,
    upstream: Counted<TcpStream>,
    conn: Conn,
    counters: Arc<Counters>,
    started: Instant,
    permit: OwnedSemaphorePermit,
    closed: tokio_util::sync::CancellationToken,
) -> Response<Body> {
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => {
                conn.closed(&counters, started);
                return text(
                    StatusCode::BAD_GATEWAY,
                    format!("service-rs egress proxy: {e}"),
                );
            }
        };
    let (mut parts, body) = req.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    if !parts.headers.contains_key(HOST) {
        if let Some(value) = parts
            .uri
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        {
            parts.headers.insert(HOST, value);
        }
    }
    parts.uri = parts
        .uri
        .path_and_query()
        .map(|pq| pq.as_str())
        .unwrap_or("/")
        .parse()
        .unwrap_or_else(|_| hyper::Uri::from_static("/"));
    let ends = conn.clone();
    tokio::spawn(async move {
        let _permit = permit;
        tokio::select! {
            _ = connection => {}
            _ = closed.cancelled() => {}
        }
        ends.closed(&counters, started);
    });
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(resp) => resp.map(|b| b.boxed()),
        Err(e) => text(
            StatusCode::BAD_GATEWAY,
            format!(
                "service-rs egress proxy: {}:{} failed: {e}",
                conn.host, conn.port
            ),
        ),
    }
}

/// Removes hop-by-hop headers, and those the `Connection` header names.
fn strip_hop_by_hop(headers: &mut hyper::HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(*name);
    }
}
