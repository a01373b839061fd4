//! The streamable-HTTP transport of an MCP server: rmcp's client over the worker's HTTP client
//! ([`crate::egress::http_client`]), so the manifest's host list (and the `ask` routing) decides whether the server
//! may be reached.

use std::collections::{BTreeMap, HashMap};

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
    let client = crate::egress::http_client()?;
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
