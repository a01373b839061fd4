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
        if !resp.status().is_success() {
            return Err(anyhow!(error_of(resp).await));
        }
        Ok(resp.json().await.unwrap_or(Value::Null))
    }
}

/// The server's error, from its `{"error": {...}}` body, in one line.
pub(super) async fn error_of(resp: reqwest::Response) -> String {
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or("the server gave no reason");
    let code = body["error"]["code"].as_str().unwrap_or("unknown");
    format!("{message} (HTTP {}, {code})", status.as_u16())
}

pub async fn bundles(
    remote: &Remote,
    args: super::bundles::BundlesArgs,
) -> anyhow::Result<ExitCode> {
    match args.removal() {
        Err(json) => {
            let infos: Vec<BundleInfo> =
                serde_json::from_value(remote.call(reqwest::Method::GET, "/bundles", None).await?)?;
            super::bundles::print_list(&infos, json)
        }
        Ok((reference, force)) => {
            let path = format!("/bundles/{}?force={force}", encode(reference));
            let removed: BundleInfo =
                serde_json::from_value(remote.call(reqwest::Method::DELETE, &path, None).await?)?;
            println!("removed {}", removed.reference);
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Downloads a bundle of the server as an OCI layout tar into `out`.
pub async fn export(
    remote: &Remote,
    reference: &str,
    out: &std::path::Path,
) -> anyhow::Result<ExitCode> {
    let path = format!("/bundles/{}/export", encode(reference));
    let resp = remote
        .request(reqwest::Method::GET, &path)
        .send()
        .await
        .with_context(|| format!("cannot reach the server at {}", remote.base))?;
    if !resp.status().is_success() {
        return Err(anyhow!(error_of(resp).await));
    }
    let bytes = resp.bytes().await.context("the download broke off")?;
    if out == std::path::Path::new("-") {
        super::bundles::archive_to_stdout(&bytes)?;
        eprintln!("Wrote {reference} to stdout ({} bytes)", bytes.len());
        return Ok(ExitCode::SUCCESS);
    }
    std::fs::write(out, &bytes).with_context(|| format!("cannot write {}", out.display()))?;
    println!(
        "Wrote {reference} to {} ({} bytes)",
        out.display(),
        bytes.len()
    );
    Ok(ExitCode::SUCCESS)
}

/// Uploads an OCI layout tar for the server to install.
pub async fn import(remote: &Remote, archive: &std::path::Path) -> anyhow::Result<ExitCode> {
    let bytes =
        std::fs::read(archive).with_context(|| format!("cannot read {}", archive.display()))?;
    let resp = remote
        .request(reqwest::Method::POST, "/bundles/import")
        .header(reqwest::header::CONTENT_TYPE, "application/x-tar")
        .body(bytes)
        .send()
        .await
        .with_context(|| format!("cannot reach the server at {}", remote.base))?;
    if !resp.status().is_success() {
        return Err(anyhow!(error_of(resp).await));
    }
    let installed: BundleInfo = resp.json().await?;
    println!(
        "Installed {} on the server ({})",
        installed.reference, installed.digest
    );
    Ok(ExitCode::SUCCESS)
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
