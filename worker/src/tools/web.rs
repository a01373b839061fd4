//! WebFetch: a URL fetched through the sandbox's egress forwarder, so the supervisor's proxy applies the manifest's
//! host list and `permissions.network: ask` to it as to any command. The worker holds no provider key, so none can
//! be sent. HTML is turned into markdown here, inside the sandbox, because a page is hostile input.

use std::time::Duration;

use serde::Deserialize;

use super::{ToolCtx, ToolResult};
use crate::egress;

/// Time for the whole fetch, redirects and body included.
const TIMEOUT: Duration = Duration::from_secs(30);
/// Largest body read; the rest is not downloaded.
const MAX_BODY: usize = 5 * 1024 * 1024;
/// Largest text returned to the model.
const MAX_OUTPUT: usize = 100 * 1024;
/// Redirects followed; each one goes through the proxy's decision again.
const MAX_REDIRECTS: usize = 5;
/// Elements whose content is not prose.
const SKIPPED: [&str; 8] = [
    "script", "style", "noscript", "template", "svg", "iframe", "head", "canvas",
];

#[derive(Deserialize)]
pub struct FetchArgs {
    url: String,
    /// What the model wants from the page. The page is returned whole, so the model applies this itself.
    #[serde(default)]
    #[allow(dead_code)]
    prompt: Option<String>,
}

/// Fetches `args.url` and returns it as markdown (HTML) or as it is (text, JSON, XML).
pub async fn fetch(args: FetchArgs, ctx: &ToolCtx<'_>) -> ToolResult {
    let url = match reqwest::Url::parse(args.url.trim()) {
        Ok(u) if matches!(u.scheme(), "http" | "https") => u,
        Ok(u) => {
            return ToolResult::error(format!(
                "WebFetch takes http and https URLs, not {}:",
                u.scheme()
            ))
        }
        Err(e) => return ToolResult::error(format!("{:?} is not a URL: {e}", args.url)),
    };
    if egress::proxy_url().is_none() {
        return ToolResult::error(
            "this sandbox has no network: WebFetch needs the host in the bundle's sandbox.permissions.network, or \
             permissions.network: ask in agent.yaml",
        );
    }
    tokio::select! {
        r = tokio::time::timeout(TIMEOUT, get(url.clone())) => match r {
            Ok(Ok(page)) => page.into_result().await,
            Ok(Err(e)) => ToolResult::error(format!("could not fetch {url}: {e}")),
            Err(_) => ToolResult::error(format!("could not fetch {url}: no answer within {}s", TIMEOUT.as_secs())),
        },
        _ = ctx.cancel.cancelled() => ToolResult::error("interrupted"),
    }
}

/// What came back, before conversion.
struct Page {
    url: reqwest::Url,
    status: reqwest::StatusCode,
    content_type: String,
    body: Vec<u8>,
    truncated: bool,
}

async fn get(url: reqwest::Url) -> Result<Page, String> {
    let client = egress::http_client_builder()?
        .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS))
        .build()
        .map_err(|e| format!("HTTP client: {e}"))?;
    let mut response = client
        .get(url)
        .header(
            reqwest::header::ACCEPT,
            "text/html, text/markdown, text/plain, application/json;q=0.9, */*;q=0.5",
        )
        .send()
        .await
        .map_err(|e| explain(&e))?;
    let content_type = response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let (url, status) = (response.url().clone(), response.status());
    let mut body = Vec::new();
    let mut truncated = false;
    while let Some(chunk) = response.chunk().await.map_err(|e| explain(&e))? {
        let room = MAX_BODY - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            truncated = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Page {
        url,
        status,
        content_type,
        body,
        truncated,
    })
}

impl Page {
    async fn into_result(self) -> ToolResult {
        let mime = self
            .content_type
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_string();
        let html = mime == "text/html" || mime == "application/xhtml+xml";
        let texty = html
            || mime.starts_with("text/")
            || mime.ends_with("json")
            || mime.ends_with("xml")
            || (mime.is_empty() && std::str::from_utf8(&self.body).is_ok());
        if !texty {
            return ToolResult::error(format!(
                "{} answered {} with {} ({} bytes), which WebFetch does not show; fetch it with a command to \
                 save it as a file",
                self.url,
                self.status,
                self.content_type,
                self.body.len()
            ));
        }
        let text = String::from_utf8_lossy(&self.body).into_owned();
        let text = if html {
            match tokio::task::spawn_blocking(move || to_markdown(&text)).await {
                Ok(md) => md,
                Err(e) => return ToolResult::error(format!("converting the page failed: {e}")),
            }
        } else {
            text
        };
        let mut out = format!("{} ({})\n\n", self.url, self.status);
        let cut = super::clip(&text, MAX_OUTPUT);
        out.push_str(cut);
        if cut.len() < text.len() || self.truncated {
            out.push_str(&format!(
                "\n\n[cut: the page is longer than WebFetch returns ({} KB); fetch it with a command to read it \
                 whole]",
                MAX_OUTPUT / 1024
            ));
        }
        if self.status.is_success() {
            ToolResult::ok(out)
        } else {
            ToolResult::error(out)
        }
    }
}

/// HTML as markdown, without scripts, styles and other non-prose elements.
fn to_markdown(html: &str) -> String {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(SKIPPED.to_vec())
        .build();
    converter
        .convert(html)
        .unwrap_or_else(|e| format!("(the page could not be converted: {e})"))
}

/// A fetch error with its causes; a refused tunnel says who refuses and why.
fn explain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    if text.contains("tunnel") || text.contains("403") {
        text.push_str(
            " (the sandbox's egress proxy refused the host: it is not in the bundle's \
             sandbox.permissions.network, or the operator denied it)",
        );
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_becomes_markdown_without_scripts() {
        let md = to_markdown(
            "<html><head><title>t</title><script>alert(1)</script></head><body><h1>Title</h1>\
             <p>Some <b>bold</b> text.</p><ul><li>one</li><li>two</li></ul></body></html>",
        );
        assert!(md.contains("# Title"), "{md}");
        assert!(md.contains("**bold**"), "{md}");
        assert!(md.contains("one") && md.contains("two"), "{md}");
        assert!(!md.contains("alert"), "{md}");
    }

    #[test]
    fn clipping_keeps_whole_characters() {
        assert_eq!(super::super::clip("héllo", 2), "h");
        assert_eq!(super::super::clip("abc", 10), "abc");
    }
}
