//! What the HTTP providers share: keys and base URLs, the retry policy, time-outs, and SSE decoding.
//!
//! Policy: 429, 5xx and connection failures before any output are retried up to `max_retries` times (default 4)
//! with exponential backoff from `retry_base_ms` (default 500 ms, capped at 8 s) plus up to 50% jitter, or after
//! the server's `retry-after` (capped at 30 s). Once output has streamed, a failure ends the turn: retrying would
//! repeat text the user already saw. 401/403 say the key was refused; other 4xx carry the provider's message.
//! `timeout_ms` (default 120 s) bounds the wait for response headers and for each next chunk.

use std::time::Duration;

use futures::{Stream, StreamExt};
use service_ipc::{ModelChunk, ModelRef};
use tokio::sync::mpsc;

use super::keys::KeyPolicy;

/// Settings of one model call, from the model `config` and the environment.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Provider name, for messages.
    pub provider: &'static str,
    /// Full URL of the streaming endpoint.
    pub url: String,
    /// API key, when one is set and may go to this URL.
    pub key: Option<String>,
    /// The URL came from a bundle or a request, so it was sent no key.
    pub unvetted: bool,
    /// `OPENAI` or `ANTHROPIC`, for messages.
    pub env_prefix: String,
    /// Wait for headers and between chunks.
    pub timeout: Duration,
    /// Retries of 429/5xx before output.
    pub max_retries: u32,
    /// First backoff.
    pub retry_base: Duration,
}

impl Endpoint {
    /// Resolves the endpoint through the operator's [`KeyPolicy`]: `config.base_url`, else `$<PREFIX>_BASE_URL`,
    /// else `default_base`. The key goes only where the policy allows; a base URL from a bundle or a request gets
    /// none. A missing key for the official or operator endpoint is an error that names the variable.
    pub fn resolve(
        provider: &'static str,
        env_prefix: &str,
        default_base: &str,
        path: &str,
        model: &ModelRef,
        keys: &KeyPolicy,
    ) -> Result<Endpoint, ModelChunk> {
        let config = model.config.as_ref();
        let setting = |k: &str| config.and_then(|c| c.get(k));
        let requested = setting("base_url").and_then(|v| v.as_str());
        let target = keys.target(provider, env_prefix, default_base, requested);
        let key = target
            .key_env
            .as_deref()
            .and_then(|var| std::env::var(var).ok())
            .filter(|k| !k.is_empty());
        if key.is_none() && requested.is_none() {
            return Err(ModelChunk::Failed {
                code: "provider_auth".into(),
                message: format!(
                    "no API key for the {provider} provider: set {env_prefix}_API_KEY in the environment of service-rs \
                     (or point {env_prefix}_BASE_URL at a server that needs no key)"
                ),
            });
        }
        let ms = |k: &str, d: u64| setting(k).and_then(|v| v.as_u64()).unwrap_or(d);
        Ok(Endpoint {
            provider,
            url: format!("{}{path}", target.base.trim_end_matches('/')),
            key,
            unvetted: target.unvetted,
            env_prefix: env_prefix.to_string(),
            timeout: Duration::from_millis(ms("timeout_ms", 120_000)),
            max_retries: ms("max_retries", 4) as u32,
            retry_base: Duration::from_millis(ms("retry_base_ms", 500)),
        })
    }
}

fn client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .unwrap_or_default()
        })
        .clone()
}

fn failed(code: &str, message: String) -> ModelChunk {
    ModelChunk::Failed {
        code: code.into(),
        message,
    }
}

/// Backoff before attempt `n` (1-based): the server's retry-after, or exponential with jitter.
fn backoff(ep: &Endpoint, n: u32, retry_after: Option<Duration>) -> Duration {
    if let Some(after) = retry_after {
        return after.min(Duration::from_secs(30));
    }
    let exp = ep
        .retry_base
        .saturating_mul(1u32 << (n - 1).min(5))
        .min(Duration::from_secs(8));
    let jitter = (uuid::Uuid::new_v4().as_u128() % 1000) as u32;
    exp + exp.mul_f64(f64::from(jitter) / 2000.0)
}

/// POSTs `body` (with `headers`) and returns the response of the first attempt that is not retryable.
pub async fn send(
    ep: &Endpoint,
    headers: &[(&str, String)],
    body: &serde_json::Value,
) -> Result<reqwest::Response, ModelChunk> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut req = client().post(&ep.url).json(body);
        for (k, v) in headers {
            req = req.header(*k, v);
        }
        let last = attempt > ep.max_retries;
        let result = tokio::time::timeout(ep.timeout, req.send()).await;
        let (retry_after, why) = match result {
            Err(_) => (None, format!("no response within {:?}", ep.timeout)),
            Ok(Err(e)) => (None, format!("cannot reach {}: {e}", ep.url)),
            Ok(Ok(resp)) => {
                let status = resp.status();
                if status.is_success() {
                    return Ok(resp);
                }
                let retry_after = resp
                    .headers()
                    .get("retry-after")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<f64>().ok())
                    .map(Duration::from_secs_f64);
                let text = resp.text().await.unwrap_or_default();
                let detail = provider_message(&text);
                let code = status.as_u16();
                if (code == 401 || code == 403) && ep.unvetted {
                    return Err(failed(
                        "provider_auth",
                        format!(
                            "{} answered HTTP {code} ({detail}); it was sent no key, because keys go only to the \
                             official endpoint or one the operator configured: set {1}_BASE_URL to this URL, or add \
                             it under [providers] in $SERVICE_HOME/config.toml with the variable holding its key",
                            ep.url, ep.env_prefix
                        ),
                    ));
                }
                if code == 401 || code == 403 {
                    return Err(failed(
                        "provider_auth",
                        format!(
                            "the {} API refused the key (HTTP {code}): {detail}",
                            ep.provider
                        ),
                    ));
                }
                if code != 429 && code < 500 {
                    return Err(failed(
                        "provider_error",
                        format!("the {} API answered HTTP {code}: {detail}", ep.provider),
                    ));
                }
                (retry_after, format!("HTTP {code}: {detail}"))
            }
        };
        if last {
            return Err(failed(
                "provider_unavailable",
                format!(
                    "the {} API failed {attempt} times; last: {why}",
                    ep.provider
                ),
            ));
        }
        tokio::time::sleep(backoff(ep, attempt, retry_after)).await;
    }
}

/// The `error.message` of a provider error body, else the body itself (shortened).
fn provider_message(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    parsed
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str().or(v["message"].as_str()))
        .map(str::to_string)
        .unwrap_or_else(|| body.chars().take(300).collect())
}

/// One SSE event of a provider stream.
pub struct SseEvent {
    /// The `event:` name (empty when absent).
    pub event: String,
    /// The `data:` payload.
    pub data: String,
}

/// The SSE events of a response; each wait is bounded by the endpoint's time-out. Ends with Err on a broken
/// stream or a time-out, with None when the server closed it.
pub fn events(
    ep: &Endpoint,
    resp: reqwest::Response,
) -> impl Stream<Item = Result<SseEvent, ModelChunk>> + Send {
    let timeout = ep.timeout;
    let provider = ep.provider;
    let inner = crate::event_source::events(resp.bytes_stream());
    futures::stream::unfold(Some(Box::pin(inner)), move |state| async move {
        let mut inner = state?;
        match tokio::time::timeout(timeout, inner.next()).await {
            Err(_) => Some((Err(failed("provider_timeout", format!("the {provider} stream stalled for {timeout:?}"))), None)),
            Ok(None) => None,
            Ok(Some(Err(e))) => Some((Err(failed("provider_protocol", format!("the {provider} stream broke off mid-response ({e}); the turn output is incomplete"))), None)),
            Ok(Some(Ok(ev))) => Some((Ok(SseEvent { event: ev.event, data: ev.data }), Some(inner))),
        }
    })
}

/// Runs `produce` on its own task and streams what it sends; dropping the stream stops it at its next send.
pub fn spawn_stream<F, Fut>(produce: F) -> super::ChunkStream
where
    F: FnOnce(mpsc::Sender<ModelChunk>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(produce(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx).boxed()
}

/// Parses one JSON data payload, or the chunk that fails the turn.
pub fn parse_json(provider: &str, data: &str) -> Result<serde_json::Value, ModelChunk> {
    serde_json::from_str(data).map_err(|e| {
        failed(
            "provider_protocol",
            format!(
                "the {provider} stream carried malformed JSON ({e}): {}",
                data.chars().take(200).collect::<String>()
            ),
        )
    })
}
