//! `--remote <base_url>`: the HTTP client of a running `service-rs serve`, and the bundle commands over it.

use std::process::ExitCode;

use anyhow::{anyhow, Context};
use serde_json::Value;
use service_supervisor::bundle::BundleInfo;

/// An HTTP client of one server.
#[derive(Clone)]
pub struct Remote {
    base: String,
    client: reqwest::Client,
    token: Option<String>,
}

impl Remote {
    /// A client of `base` (e.g. `http://127.0.0.1:8472`), sending `SERVICE_TOKEN`, else the token a local server
    /// stored in `$SERVICE_HOME/serve.token`.
    pub fn new(base: &str) -> Self {
        Remote {
            base: base.trim_end_matches('/').to_string(),
            client: reqwest::Client::new(),
            token: service_supervisor::ServiceHome::from_env().and_then(|h| h.client_token()),
        }
    }

    pub(super) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let req = self.client.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        }
    }

    pub(super) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Value> {
        let mut req = self.request(method, path);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("cannot reach the server at {}", self.base))?;
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        if status.is_success() {
            return Ok(body);
        }
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or("the server gave no reason");
        let code = body["error"]["code"].as_str().unwrap_or("unknown");
        Err(anyhow!("{message} (HTTP {}, {code})", status.as_u16()))
    }
}

pub async fn bundles(remote: &Remote, json: bool) -> anyhow::Result<ExitCode> {
    let infos: Vec<BundleInfo> =
        serde_json::from_value(remote.call(reqwest::Method::GET, "/bundles", None).await?)?;
    super::bundles::print_list(&infos, json)
}

pub async fn inspect(remote: &Remote, reference: &str, json: bool) -> anyhow::Result<ExitCode> {
    let path = format!("/bundles/{}", encode(reference));
    let info: BundleInfo =
        serde_json::from_value(remote.call(reqwest::Method::GET, &path, None).await?)?;
    super::bundles::print_info(&info, json)
}

/// Percent-encodes a path segment.
pub(super) fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b':' | b'@' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}
