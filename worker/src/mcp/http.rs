//! The streamable-HTTP transport of an MCP server: rmcp's client over reqwest. Inside a sandbox it goes through
//! the egress forwarder like every command, so the manifest's host list (and the `ask` routing) decides whether
//! the server may be reached; a sandbox without hosts has no route out at all. TLS uses the ring provider and the
//! webpki roots, so it needs nothing from the sandbox's `/etc`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::StreamableHttpClientTransport;

/// `host:port` of `url`, as a manifest entry would name it.
pub fn authority(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => format!(
            "{}:{}",
            u.host_str().unwrap_or_default(),
            u.port_or_known_default().unwrap_or(443)
        ),
        Err(_) => url.to_string(),
    }
}

/// The transport to the server at `url`, sending `headers` with every request.
pub fn transport(
    url: &str,
    headers: &BTreeMap<String, String>,
) -> Result<StreamableHttpClientTransport<reqwest::Client>, String> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS set-up: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let builder = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .user_agent(concat!("service-rs/", env!("CARGO_PKG_VERSION")));
    let builder = match crate::egress::proxy_url() {
        Some(proxy) => builder.proxy(reqwest::Proxy::all(proxy).map_err(|e| e.to_string())?),
        None => builder.no_proxy(),
    };
    let client = builder.build().map_err(|e| format!("HTTP client: {e}"))?;
    let mut custom = HashMap::new();
    for (k, v) in headers {
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|e| format!("header {k}: {e}"))?;
        let value = HeaderValue::from_str(v).map_err(|e| format!("header {k}: {e}"))?;
        custom.insert(name, value);
    }
    let config =
        StreamableHttpClientTransportConfig::with_uri(url.to_string()).custom_headers(custom);
    Ok(StreamableHttpClientTransport::with_client(client, config))
}
