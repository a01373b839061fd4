//! The sandbox's end of the egress path. The sandbox has loopback only; the supervisor's proxy is a Unix socket
//! bound into it. The worker listens on a loopback port, forwards each connection to that socket, and gives every
//! command the proxy variables that point at the port, so curl, pip, npm, git and cargo use it unconfigured.
//! Nothing is decided here: the proxy checks every connection, and code that skips the port can reach the socket
//! just as well.

use std::sync::OnceLock;

use tokio::net::{TcpListener, TcpStream, UnixStream};

/// The variables every command gets once the forwarder runs.
static PROXY_ENV: OnceLock<Vec<(&'static str, String)>> = OnceLock::new();

/// The proxy variables for commands; empty when the sandbox has no way out.
pub fn env() -> &'static [(&'static str, String)] {
    PROXY_ENV.get().map(Vec::as_slice).unwrap_or(&[])
}

/// The forwarder as an HTTP proxy URL, for the worker's own HTTP clients (MCP servers); None when the sandbox has
/// no way out.
pub fn proxy_url() -> Option<&'static str> {
    env()
        .iter()
        .find(|(k, _)| *k == "HTTP_PROXY")
        .map(|(_, v)| v.as_str())
}

/// Listens on a loopback port (the inherited listener at descriptor `inherited`, else one of its own), forwards it
/// to the proxy `socket`, and sets [`env`] with `no_proxy` as the names commands reach directly.
pub async fn start(
    socket: String,
    no_proxy: String,
    inherited: Option<i32>,
) -> std::io::Result<u16> {
    let listener = match inherited {
        Some(fd) => {
            use std::os::fd::FromRawFd;
            // The descriptor is the one the supervisor names in the configuration it made; nothing else of the
            // worker's uses it. A number that is not a listening socket fails `accept` at once, not silently.
            // SAFETY: see above.
            let std = unsafe { std::net::TcpListener::from_raw_fd(fd) };
            std.set_nonblocking(true)?;
            TcpListener::from_std(std)?
        }
        None => TcpListener::bind(("127.0.0.1", 0)).await?,
    };
    let port = listener.local_addr()?.port();
    let url = format!("http://127.0.0.1:{port}");
    let _ = PROXY_ENV.set(vec![
        ("HTTP_PROXY", url.clone()),
        ("HTTPS_PROXY", url.clone()),
        ("ALL_PROXY", url.clone()),
        ("http_proxy", url.clone()),
        ("https_proxy", url.clone()),
        ("all_proxy", url),
        ("NO_PROXY", no_proxy.clone()),
        ("no_proxy", no_proxy),
    ]);
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(forward(client, socket.clone()));
        }
    });
    Ok(port)
}

async fn forward(mut client: TcpStream, socket: String) {
    let _ = client.set_nodelay(true);
    if let Ok(mut proxy) = UnixStream::connect(&socket).await {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut proxy).await;
    }
}

/// The worker's own HTTP client (MCP servers, A2A agents): through the forwarder like every command, so a sandbox
/// without hosts has no route out at all. TLS uses the ring provider and the webpki roots, so it needs nothing from
/// the sandbox's `/etc`.
pub fn http_client() -> Result<reqwest::Client, String> {
    http_client_builder()?
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}

/// [`http_client`]'s builder, for a caller that sets its own timeouts and redirect policy.
pub fn http_client_builder() -> Result<reqwest::ClientBuilder, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS set-up: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .user_agent(concat!("service-rs/", env!("CARGO_PKG_VERSION")));
    Ok(match proxy_url() {
        Some(proxy) => builder.proxy(reqwest::Proxy::all(proxy).map_err(|e| e.to_string())?),
        None => builder.no_proxy(),
    })
}
