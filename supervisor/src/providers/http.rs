//! What the HTTP providers share: keys and base URLs, the retry policy, time-outs, error reporting and SSE decoding.
//!
//! Policy: 429, 5xx, time-outs and broken connections before any output are retried up to `max_retries` times
//! (default 4) with exponential backoff from `retry_base_ms` (default 500 ms, capped at 8 s) plus up to 50% jitter,
//! or after the server's `retry-after` (capped at 30 s). A refused connection or a failed name lookup is retried at
//! most twice: a server that is not running will not start in the next seconds, and the user should hear so. A TLS
//! failure is not retried. Each retry is reported to the runtime, which journals a `model_retry` event. Once output
//! has streamed, a failure ends the turn: retrying would repeat text the user already saw. Every error names the URL
//! that was tried and the root cause. `timeout_ms` (default 120 s) bounds the wait for response headers and for each
//! next chunk.

use std::time::Duration;

use futures::{Stream, StreamExt};
use serde_json::Value;
use service_ipc::{ModelChunk, ModelRef};
use tokio::sync::mpsc;

use super::keys::KeyPolicy;
use super::{OnRetry, Retry};
use crate::model_config::ModelSettings;

/// Attempts after a refused connection or a failed lookup: the first and two retries.
const UNREACHABLE_ATTEMPTS: u32 = 3;

/// Settings of one model call, from the model `config` and the environment.
#[derive(Clone)]
pub struct Endpoint {
    /// Provider name, for messages.
    pub provider: &'static str,
    /// Full URL of the streaming endpoint.
    pub url: String,
    /// API key, when one is set and may go to this URL.
    pub key: Option<String>,
    /// The variable the key may come from for this URL, set or not.
    pub key_env: Option<String>,
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
    /// Told of each retry.
    pub on_retry: OnRetry,
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
        on_retry: OnRetry,
    ) -> Result<(Endpoint, ModelSettings), ModelChunk> {
        // The runtime checked the settings before the turn started; this only fails for a forged request.
        let settings = crate::model_config::parse(provider, model.config.as_ref())
            .map_err(|e| failed("invalid_request", e.to_string()))?;
        let requested = settings.base_url.as_deref();
        let target = keys.target(provider, env_prefix, default_base, requested);
        let key = target
            .key_env
            .as_deref()
            .and_then(|var| std::env::var(var).ok())
            .filter(|k| !k.is_empty());
        if key.is_none() && requested.is_none() {
            return Err(failed(
                "provider_auth",
                format!(
                    "no API key for the {provider} provider: set {env_prefix}_API_KEY in the environment of service-rs \
                     (or point {env_prefix}_BASE_URL at a server that needs no key)"
                ),
            ));
        }
        let endpoint = Endpoint {
            provider,
            url: format!("{}{path}", target.base.trim_end_matches('/')),
            key,
            key_env: target.key_env.clone(),
            unvetted: target.unvetted,
            env_prefix: env_prefix.to_string(),
            timeout: Duration::from_millis(settings.timeout_ms.unwrap_or(120_000)),
            max_retries: settings.max_retries.unwrap_or(4),
            retry_base: Duration::from_millis(settings.retry_base_ms.unwrap_or(500)),
            on_retry,
        };
        Ok((endpoint, settings))
    }
}

fn client() -> reqwest::Client {
    static CLIENT: std::sync::OnceLock<reqwest::Client> = std::sync::OnceLock::new();
    CLIENT
        .get_or_init(|| {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .user_agent(concat!("service-rs/", env!("CARGO_PKG_VERSION")))
                .build()
                .unwrap_or_default()
        })
        .clone()
}

pub(super) fn failed(code: &str, message: String) -> ModelChunk {
    ModelChunk::Failed {
        code: code.into(),
        message,
    }
}

/// Backoff before attempt `n + 1` after attempt `n` (1-based) failed: the server's retry-after, or exponential
/// with jitter.
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

/// Why a request got no response, for messages and the retry policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Refused,
    Dns,
    Tls,
    Timeout,
    Other,
}

/// The kind of a transport failure and its root cause, from the error's source chain.
fn transport_cause(e: &reqwest::Error) -> (Cause, String) {
    let mut chain: Vec<String> = Vec::new();
    let (mut refused, mut tls) = (false, false);
    for s in crate::error_chain::causes(e) {
        chain.push(s.to_string());
        tls |= s.is::<rustls::Error>();
        refused |= s
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused);
    }
    let all = chain.join(": ").to_ascii_lowercase();
    let root = chain.last().cloned().unwrap_or_default();
    let cause = if refused || all.contains("connection refused") {
        Cause::Refused
    } else if all.contains("dns error") || all.contains("failed to lookup address") {
        Cause::Dns
    } else if tls || all.contains("certificate") || all.contains("tls handshake") {
        Cause::Tls
    } else if e.is_timeout() {
        Cause::Timeout
    } else {
        Cause::Other
    };
    let text = match cause {
        Cause::Refused => {
            "connection refused: is the model server running and listening there?".to_string()
        }
        Cause::Dns => format!("the host name could not be resolved ({root})"),
        Cause::Tls => format!("TLS failed ({root})"),
        Cause::Timeout => format!("timed out ({root})"),
        Cause::Other => root,
    };
    (cause, text)
}

/// A JSON request to `ep` of `body`, serialized already.
fn post_json(ep: &Endpoint, body: &bytes::Bytes) -> reqwest::RequestBuilder {
    client()
        .post(&ep.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.clone())
}

/// `body` as a request's JSON, for a wire format that builds it as a `Value`.
pub fn json_bytes(body: &Value) -> Vec<u8> {
    serde_json::to_vec(body).unwrap_or_default()
}

/// POSTs `body`, a JSON document (with `headers`), and returns the response of the first attempt that is not
/// retryable.
pub async fn send(
    ep: &Endpoint,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> Result<reqwest::Response, ModelChunk> {
    let body = bytes::Bytes::from(body);
    let mut attempt = 0;
    loop {
        attempt += 1;
        let mut req = post_json(ep, &body);
        for (k, v) in headers {
            req = req.header(k.as_str(), v);
        }
        let mut allowed = ep.max_retries + 1;
        let result = tokio::time::timeout(ep.timeout, req.send()).await;
        let (retry_after, why) = match result {
            Err(_) => (
                None,
                format!("no response from {} within {:?}", ep.url, ep.timeout),
            ),
            Ok(Err(e)) => {
                let (cause, text) = transport_cause(&e);
                match cause {
                    Cause::Tls => {
                        return Err(failed(
                            "provider_unavailable",
                            format!("cannot reach {}: {text}", ep.url),
                        ))
                    }
                    Cause::Refused | Cause::Dns => allowed = allowed.min(UNREACHABLE_ATTEMPTS),
                    Cause::Timeout | Cause::Other => {}
                }
                (None, format!("cannot reach {}: {text}", ep.url))
            }
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
                    .filter(|s| s.is_finite() && *s >= 0.0)
                    .map(Duration::from_secs_f64);
                let text = resp.text().await.unwrap_or_default();
                let code = status.as_u16();
                if code != 429 && code < 500 {
                    return Err(client_error(ep, code, &text));
                }
                if let Some(overflow) = context_overflow(ep, &text) {
                    return Err(overflow);
                }
                (
                    retry_after,
                    format!("HTTP {code} from {}: {}", ep.url, provider_message(&text)),
                )
            }
        };
        if attempt >= allowed {
            let times = if attempt == 1 {
                "once".to_string()
            } else {
                format!("{attempt} times")
            };
            return Err(failed(
                "provider_unavailable",
                format!("the {} request failed {times}; last: {why}", ep.provider),
            ));
        }
        let delay = backoff(ep, attempt, retry_after);
        (ep.on_retry)(Retry {
            attempt,
            max_attempts: allowed,
            delay,
            reason: why,
        });
        tokio::time::sleep(delay).await;
    }
}

/// GETs `url` once (for checks such as `doctor`); a transport failure is described as the model calls describe it.
pub async fn get(
    url: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> Result<reqwest::Response, String> {
    let mut req = client().get(url);
    for (k, v) in headers {
        req = req.header(k.as_str(), v);
    }
    match tokio::time::timeout(timeout, req.send()).await {
        Err(_) => Err(format!("no response from {url} within {timeout:?}")),
        Ok(Err(e)) => Err(format!("cannot reach {url}: {}", transport_cause(&e).1)),
        Ok(Ok(resp)) => Ok(resp),
    }
}

/// Sends `body` once, without retries, and returns the failure the server answers with, if any: how a stream that
/// broke off with no output learns why.
pub async fn probe(
    ep: &Endpoint,
    headers: &[(String, String)],
    body: Vec<u8>,
) -> Option<ModelChunk> {
    let body = bytes::Bytes::from(body);
    // Twice: the pooled connection the broken stream used may be the one that is handed out first, and dead.
    let mut resp = None;
    for _ in 0..2 {
        let mut req = post_json(ep, &body);
        for (k, v) in headers {
            req = req.header(k.as_str(), v);
        }
        if let Ok(Ok(r)) = tokio::time::timeout(ep.timeout, req.send()).await {
            resp = Some(r);
            break;
        }
    }
    let resp = resp?;
    let code = resp.status().as_u16();
    if resp.status().is_success() {
        return None;
    }
    let text = resp.text().await.unwrap_or_default();
    Some(client_error(ep, code, &text))
}

/// The failure for a 4xx other than 429: refused key, context overflow, or the server's message with hints.
fn client_error(ep: &Endpoint, code: u16, text: &str) -> ModelChunk {
    let detail = provider_message(text);
    if (code == 401 || code == 403) && ep.unvetted {
        return failed(
            "provider_auth",
            format!(
                "{} answered HTTP {code} ({detail}); it was sent no key, because keys go only to the official \
                 endpoint or one the operator configured: set {1}_BASE_URL to this URL, or add it under [providers] \
                 in $SERVICE_HOME/config.toml with the variable holding its key",
                ep.url, ep.env_prefix
            ),
        );
    }
    if code == 401 || code == 403 {
        return failed(
            "provider_auth",
            format!("{} refused the key (HTTP {code}): {detail}", ep.url),
        );
    }
    if let Some(overflow) = context_overflow(ep, text) {
        return overflow;
    }
    let hint = match (code, ep.provider) {
        (404, "openai") if !ep.url.contains("/v1/") => {
            "; an OpenAI-compatible base_url usually ends in /v1 (e.g. http://127.0.0.1:8080/v1)"
        }
        (404, "anthropic") if ep.url.contains("/v1/v1/") => {
            "; an anthropic base_url must not end in /v1 (service-rs adds /v1/messages)"
        }
        (404, _) => "; check base_url and the model name",
        _ => "",
    };
    failed(
        "provider_error",
        format!("{} answered HTTP {code}: {detail}{hint}", ep.url),
    )
}

/// A context-length error in a provider error body (an HTTP error or an error event of a stream), as
/// `context_length_exceeded` with the numbers the server gave. Servers word it differently: OpenAI, vLLM and
/// llama-cpp-python say "maximum context length", llama.cpp's server `exceed_context_size_error` with
/// `n_prompt_tokens` and `n_ctx`, Anthropic "prompt is too long".
pub fn context_overflow(ep: &Endpoint, body: &str) -> Option<ModelChunk> {
    let v: Value = serde_json::from_str(body).ok()?;
    let err = if v["error"].is_object() {
        &v["error"]
    } else {
        &v
    };
    let message = err["message"]
        .as_str()
        .unwrap_or_default()
        .trim_end_matches('.');
    let lower = message.to_ascii_lowercase();
    let is_overflow = err["code"] == "context_length_exceeded"
        || err["type"] == "exceed_context_size_error"
        || [
            "maximum context length",
            "context window",
            "context length",
            "prompt is too long",
            "available context size",
        ]
        .iter()
        .any(|p| lower.contains(p));
    if !is_overflow {
        return None;
    }
    let numbers = match (err["n_prompt_tokens"].as_u64(), err["n_ctx"].as_u64()) {
        (Some(prompt), Some(ctx)) => format!(" ({prompt} prompt tokens, context of {ctx})"),
        _ => String::new(),
    };
    Some(failed(
        "context_length_exceeded",
        format!(
            "the conversation does not fit the model's context{numbers}; {} said: {message}. Start a new session, \
             lower memory.window or max_tokens in agent.yaml, or use a model with a larger context",
            ep.url
        ),
    ))
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
    let url = ep.url.clone();
    let inner = crate::event_source::events(resp.bytes_stream());
    futures::stream::unfold(Some(Box::pin(inner)), move |state| {
        let url = url.clone();
        async move {
            let mut inner = state?;
            match tokio::time::timeout(timeout, inner.next()).await {
            Err(_) => Some((Err(failed("provider_timeout", format!("the stream from {url} stalled for {timeout:?}"))), None)),
            Ok(None) => None,
            Ok(Some(Err(e))) => Some((Err(failed("provider_protocol", format!("the stream from {url} broke off mid-response ({e}); the turn output is incomplete"))), None)),
            Ok(Some(Ok(ev))) => Some((Ok(SseEvent { event: ev.event, data: ev.data }), Some(inner))),
        }
        }
    })
}

/// Streams what `produce` sends, running it as the stream is polled; dropping the stream abandons it at once.
///
/// It runs in the reader's task rather than on one of its own: each chunk then goes from the HTTP connection to the
/// reader without a hand-off between threads, a measurable part of a warm turn on a small machine.
pub fn produced_stream<F, Fut>(produce: F) -> super::ChunkStream
where
    F: FnOnce(mpsc::Sender<ModelChunk>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = mpsc::channel(64);
    // The producer's future yields no item of its own; it ends once it has sent its last chunk, and the channel
    // once that is read.
    let producing =
        futures::stream::once(produce(tx)).filter_map(|()| futures::future::ready(None));
    futures::stream::select(tokio_stream::wrappers::ReceiverStream::new(rx), producing).boxed()
}

/// The request headers: the provider's own, then the bundle's `extra_headers` (which may not name credentials).
pub fn headers(own: Vec<(String, String)>, settings: &ModelSettings) -> Vec<(String, String)> {
    let mut all = own;
    all.extend(
        settings
            .extra_headers
            .iter()
            .map(|(k, v)| (k.clone(), v.clone())),
    );
    all
}

/// Merges `extra_body` into `body`; it may not replace the keys service-rs owns (checked at validation).
pub fn merge_extra_body(body: &mut Value, settings: &ModelSettings) {
    if let (Some(extra), Some(map)) = (&settings.extra_body, body.as_object_mut()) {
        for (k, v) in extra {
            map.insert(k.clone(), v.clone());
        }
    }
}

/// Sets the sampling settings both wire formats share: `temperature`, `top_p`, and the stop sequences under
/// `stop_key` (`stop` for OpenAI, `stop_sequences` for Anthropic).
pub fn sampling(body: &mut Value, settings: &ModelSettings, stop_key: &str) {
    if let Some(t) = settings.temperature {
        body["temperature"] = serde_json::json!(t);
    }
    if let Some(p) = settings.top_p {
        body["top_p"] = serde_json::json!(p);
    }
    if let Some(stop) = &settings.stop {
        body[stop_key] = serde_json::json!(stop.to_vec());
    }
}

/// The `tool_choice` for `request`: a choice that forces a call applies only to the first model call of a turn
/// (the last message is the user's), or the model could never give its final answer.
pub fn tool_choice<'a>(
    settings: &'a ModelSettings,
    request: &service_ipc::ModelRequest,
) -> Option<&'a crate::model_config::ToolChoice> {
    let first_call = request
        .messages
        .last()
        .is_some_and(|m| m.role == service_ipc::ChatRole::User);
    settings
        .tool_choice
        .as_ref()
        .filter(|c| !c.forces() || first_call)
}

/// Parses one JSON data payload, or the chunk that fails the turn.
pub fn parse_json(ep: &Endpoint, data: &str) -> Result<serde_json::Value, ModelChunk> {
    serde_json::from_str(data).map_err(|e| {
        failed(
            "provider_protocol",
            format!(
                "the stream from {} carried malformed JSON ({e}): {}",
                ep.url,
                data.chars().take(200).collect::<String>()
            ),
        )
    })
}
