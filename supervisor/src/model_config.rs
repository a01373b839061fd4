//! The documented keys of `model.config`, per provider, and their validation. Bundles (`build`) and per-turn
//! model overrides are checked here, so a typo is an error that names the key instead of a setting that silently
//! never reaches the server. This module depends on no other part of the supervisor.
//!
//! | key | openai | anthropic | meaning |
//! |---|---|---|---|
//! | `base_url` | yes | yes | server root; OpenAI-compatible ones end in `/v1`, Anthropic's does not |
//! | `timeout_ms`, `max_retries`, `retry_base_ms` | yes | yes | transport policy (see `providers::http`) |
//! | `max_tokens` | yes | yes | output limit; sent as `max_completion_tokens` to api.openai.com |
//! | `temperature`, `top_p`, `stop` | yes | yes | sampling; `stop` is a string or a list (`stop_sequences` for Anthropic) |
//! | `seed`, `parallel_tool_calls` | yes | no | |
//! | `top_k`, `thinking` | no | yes | |
//! | `tool_choice` | yes | yes | `auto`, `none`, `required`, or a tool name; a forcing choice applies to the first model call of a turn only |
//! | `extra_headers` | yes | yes | string map, no credential headers |
//! | `extra_body` | yes | yes | object merged into the request body |
//! | `context_window` | yes | yes | the model's context in tokens, never sent: usage lines say how much a turn filled |
//! | `wire_api` | yes | no | `chat` (Chat Completions, the default) or `responses` (OpenAI's Responses API) |
//! | `reasoning` | yes | no | Responses wire only: `{effort: minimal\|low\|medium\|high, summary: auto\|concise\|detailed}` |
//! | `verbosity` | yes | no | Responses wire only: `low`, `medium` or `high` (`text.verbosity`) |
//! | `store` | yes | no | Responses wire only: `true` keeps responses on the server and chains them by `previous_response_id` (default `false`: stateless) |
//!
//! `scripted` takes only `script` and `context_window`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Value};

const TRANSPORT: &[&str] = &["base_url", "timeout_ms", "max_retries", "retry_base_ms"];
const COMMON: &[&str] = &[
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "tool_choice",
    "extra_headers",
    "extra_body",
];
/// Keys about the model that are never sent to it.
const LOCAL: &[&str] = &["context_window"];
const OPENAI_ONLY: &[&str] = &[
    "seed",
    "parallel_tool_calls",
    "wire_api",
    "reasoning",
    "verbosity",
    "store",
];
const ANTHROPIC_ONLY: &[&str] = &["top_k", "thinking"];

/// Headers a bundle may not set: credentials go only where the operator's key policy sends them.
const FORBIDDEN_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "host",
    "content-length",
    "content-type",
    "transfer-encoding",
];

/// Body keys that service-rs owns; `extra_body` may not replace them.
const OWNED_BODY_KEYS: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "tools",
    "system",
    "input",
    "instructions",
    "store",
    "include",
];

/// The keys `provider` accepts in `model.config`.
pub fn known_keys(provider: &str) -> Vec<&'static str> {
    match provider {
        "openai" => [TRANSPORT, COMMON, OPENAI_ONLY, LOCAL].concat(),
        "anthropic" => [TRANSPORT, COMMON, ANTHROPIC_ONLY, LOCAL].concat(),
        "scripted" => ["script"].iter().chain(LOCAL).copied().collect(),
        _ => Vec::new(),
    }
}

/// Why a `model.config` cannot be used: the key (relative to `model.config`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("model.config{}: {message}", if key.is_empty() { String::new() } else { format!(".{key}") })]
pub struct SettingsError {
    /// The offending key, empty for the whole object.
    pub key: String,
    /// What is wrong and what to write instead.
    pub message: String,
}

/// `stop`: one sequence or several.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(untagged)]
pub enum StopSequences {
    /// One sequence.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl StopSequences {
    /// The sequences as a list.
    pub fn to_vec(&self) -> Vec<String> {
        match self {
            StopSequences::One(s) => vec![s.clone()],
            StopSequences::Many(v) => v.clone(),
        }
    }
}

/// `tool_choice`, in the provider-neutral form of agent.yaml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides.
    Auto,
    /// No tool calls.
    None,
    /// Some tool call.
    Required,
    /// This tool.
    Tool(String),
}

impl ToolChoice {
    /// True when the choice forces a call, which only the first model call of a turn may do (otherwise the
    /// model could never give its final answer).
    pub fn forces(&self) -> bool {
        matches!(self, ToolChoice::Required | ToolChoice::Tool(_))
    }
}

impl<'de> Deserialize<'de> for ToolChoice {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(match s.as_str() {
            "auto" => ToolChoice::Auto,
            "none" => ToolChoice::None,
            "required" | "any" => ToolChoice::Required,
            "" => {
                return Err(serde::de::Error::custom(
                    "must not be empty; write auto, none, required or a tool name",
                ))
            }
            _ => ToolChoice::Tool(s),
        })
    }
}

/// The validated settings of one model; absent keys are `None` and keep the server's defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSettings {
    /// Server root.
    pub base_url: Option<String>,
    /// Wait for headers and between chunks.
    pub timeout_ms: Option<u64>,
    /// Retries of 429/5xx before output.
    pub max_retries: Option<u32>,
    /// First backoff.
    pub retry_base_ms: Option<u64>,
    /// Output token limit.
    pub max_tokens: Option<u64>,
    /// Sampling temperature.
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    pub top_p: Option<f64>,
    /// Top-k sampling (Anthropic).
    pub top_k: Option<u64>,
    /// Stop sequences.
    pub stop: Option<StopSequences>,
    /// Sampling seed (OpenAI-compatible).
    pub seed: Option<i64>,
    /// Which tool the model must call, if any.
    pub tool_choice: Option<ToolChoice>,
    /// Whether several tool calls may come in one answer (OpenAI-compatible).
    pub parallel_tool_calls: Option<bool>,
    /// Extended thinking (Anthropic), passed through.
    pub thinking: Option<Value>,
    /// Extra request headers.
    #[serde(default)]
    pub extra_headers: BTreeMap<String, String>,
    /// Extra body keys.
    pub extra_body: Option<Map<String, Value>>,
    /// The scripted provider's script.
    pub script: Option<String>,
    /// The model's context window in tokens (never sent).
    pub context_window: Option<u64>,
    /// Which OpenAI wire the `openai` provider speaks.
    pub wire_api: Option<WireApi>,
    /// Reasoning settings of the Responses wire.
    pub reasoning: Option<Reasoning>,
    /// `text.verbosity` of the Responses wire.
    pub verbosity: Option<Level>,
    /// Responses kept on the server and chained by `previous_response_id` (Responses wire).
    pub store: Option<bool>,
}

/// The OpenAI wire formats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireApi {
    /// `POST /chat/completions`.
    #[default]
    Chat,
    /// `POST /responses`.
    Responses,
}

/// `reasoning` of the Responses wire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reasoning {
    /// How much the model reasons.
    pub effort: Option<Effort>,
    /// Which reasoning summary the model streams.
    pub summary: Option<Summary>,
}

/// `reasoning.effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Effort {
    /// Least.
    Minimal,
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// Most.
    High,
}

/// `reasoning.summary`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Summary {
    /// The model's choice.
    Auto,
    /// Short.
    Concise,
    /// Long.
    Detailed,
}

/// A low/medium/high setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Low.
    Low,
    /// Medium.
    Medium,
    /// High.
    High,
}

/// Validates `config` for `provider`: every unknown key is named, each value checked.
pub fn parse(provider: &str, config: Option<&Value>) -> Result<ModelSettings, SettingsError> {
    let map = match config {
        None | Some(Value::Null) => return Ok(ModelSettings::default()),
        Some(Value::Object(map)) => map,
        Some(_) => {
            return Err(SettingsError {
                key: String::new(),
                message: "must be a mapping of settings, e.g. {max_tokens: 512, temperature: 0.2}"
                    .into(),
            })
        }
    };
    let known = known_keys(provider);
    let unknown: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .filter(|k| !known.contains(k))
        .collect();
    if !unknown.is_empty() {
        return Err(SettingsError {
            key: unknown[0].to_string(),
            message: format!(
                "unknown key{} {} for the {provider} provider; it accepts {}",
                if unknown.len() > 1 { "s" } else { "" },
                unknown
                    .iter()
                    .map(|k| format!("\"{k}\""))
                    .collect::<Vec<_>>()
                    .join(", "),
                known.join(", ")
            ),
        });
    }
    let settings: ModelSettings = serde_path_to_error::deserialize(Value::Object(map.clone()))
        .map_err(|e| SettingsError {
            key: e.path().to_string(),
            message: e.into_inner().to_string(),
        })?;
    settings.check()?;
    Ok(settings)
}

impl ModelSettings {
    fn check(&self) -> Result<(), SettingsError> {
        let bad = |key: &str, message: String| {
            Err(SettingsError {
                key: key.into(),
                message,
            })
        };
        if let Some(url) = &self.base_url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return bad(
                    "base_url",
                    format!("\"{url}\" is not an http(s) URL, e.g. http://127.0.0.1:8080/v1"),
                );
            }
        }
        if let Some(t) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return bad("temperature", format!("{t} is out of range 0..=2"));
        }
        if let Some(p) = self.top_p.filter(|p| !(0.0..=1.0).contains(p)) {
            return bad("top_p", format!("{p} is out of range 0..=1"));
        }
        if self.max_tokens == Some(0) {
            return bad("max_tokens", "must be at least 1".into());
        }
        if self.timeout_ms == Some(0) {
            return bad("timeout_ms", "must be at least 1".into());
        }
        if let Some(n) = self.max_retries.filter(|n| *n > 10) {
            return bad("max_retries", format!("{n} is out of range 0..=10"));
        }
        for (name, value) in &self.extra_headers {
            let key = format!("extra_headers.{name}");
            if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return bad(&key, format!("\"{name}\" is not a valid header name"));
            }
            if reqwest::header::HeaderValue::from_str(value).is_err() {
                return bad(&key, "the value is not a valid header value".into());
            }
            if FORBIDDEN_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
                return bad(
                    &key,
                    format!(
                        "\"{name}\" may not be set by a bundle; an API key belongs in the operator's environment \
                         or in $SERVICE_HOME/config.toml (api_key_env), never in agent.yaml"
                    ),
                );
            }
        }
        let responses = self.wire_api == Some(WireApi::Responses);
        for (key, set) in [
            ("reasoning", self.reasoning.is_some()),
            ("verbosity", self.verbosity.is_some()),
            ("store", self.store.is_some()),
        ] {
            if set && !responses {
                return bad(
                    key,
                    "applies to the Responses wire only; add wire_api: responses".into(),
                );
            }
        }
        if let Some(body) = &self.extra_body {
            if let Some(k) = body.keys().find(|k| OWNED_BODY_KEYS.contains(&k.as_str())) {
                return bad(
                    &format!("extra_body.{k}"),
                    format!("\"{k}\" is set by service-rs and cannot be replaced; use the matching model setting"),
                );
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn every_unknown_key_is_named_with_the_accepted_ones() {
        let e = parse(
            "openai",
            Some(&json!({"max_token": 5, "temprature": 1, "seed": 1})),
        )
        .unwrap_err();
        let text = e.to_string();
        assert!(text.contains("\"max_token\", \"temprature\""), "{text}");
        assert!(text.contains("max_tokens"), "{text}");
        let e = parse("anthropic", Some(&json!({"seed": 1}))).unwrap_err();
        assert_eq!(e.key, "seed");
    }

    #[test]
    fn a_wrong_type_names_the_key() {
        let e = parse("openai", Some(&json!({"temperature": "hot"}))).unwrap_err();
        assert_eq!(e.key, "temperature", "{e}");
        let e = parse("openai", Some(&json!({"stop": [1]}))).unwrap_err();
        assert!(e.to_string().starts_with("model.config.stop"), "{e}");
    }

    #[test]
    fn credential_headers_and_owned_body_keys_are_refused() {
        let e = parse(
            "openai",
            Some(&json!({"extra_headers": {"Authorization": "Bearer x"}})),
        )
        .unwrap_err();
        assert_eq!(e.key, "extra_headers.Authorization");
        let e = parse("anthropic", Some(&json!({"extra_body": {"messages": []}}))).unwrap_err();
        assert_eq!(e.key, "extra_body.messages");
    }

    #[test]
    fn tool_choice_takes_the_keywords_or_a_tool_name() {
        let s = parse(
            "openai",
            Some(&json!({"tool_choice": "Bash", "stop": "\n\n"})),
        )
        .unwrap();
        assert_eq!(s.tool_choice, Some(ToolChoice::Tool("Bash".into())));
        assert!(s.tool_choice.unwrap().forces());
        assert_eq!(s.stop.unwrap().to_vec(), vec!["\n\n".to_string()]);
        let s = parse("openai", Some(&json!({"tool_choice": "auto"}))).unwrap();
        assert!(!s.tool_choice.unwrap().forces());
    }
}
