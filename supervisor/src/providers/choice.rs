//! The model of a bundle whose agent.yaml says `provider: auto` (the built-in agents): the supervisor picks one from
//! what this machine has, in this order, and never falls back to the scripted model:
//!
//! 1. `default_model` in `$SERVICE_HOME/config.toml`;
//! 2. Anthropic's API when `ANTHROPIC_API_KEY` is set;
//! 3. OpenAI's API when `OPENAI_API_KEY` is set (at `OPENAI_BASE_URL` when that is set);
//! 4. an OpenAI-compatible server on this machine that lists its models at `GET /v1/models`: Ollama on
//!    127.0.0.1:11434, then llama.cpp's llama-server on 127.0.0.1:8080 (or the `/v1` roots in
//!    `SERVICE_LOCAL_MODELS`, comma-separated), with the first model it lists.
//!
//! With none of them, the model stays `auto/auto`, which no provider serves: [`NO_MODEL`] says how to set one, before
//! any session is made.

use std::path::Path;
use std::time::{Duration, Instant};

use service_ipc::ModelRef;

/// The provider name that asks for a choice.
pub const AUTO: &str = "auto";

/// What a turn of an `auto` bundle fails with when this machine has no model.
pub const NO_MODEL: &str = "no model to run the agent with: set ANTHROPIC_API_KEY or OPENAI_API_KEY, start a local \
     OpenAI-compatible server (Ollama on 127.0.0.1:11434, llama.cpp's llama-server on 127.0.0.1:8080), or choose one \
     with `service-rs config set default_model provider/name` (or --model provider/name)";

/// Where local servers are looked for, unless `SERVICE_LOCAL_MODELS` lists others.
const LOCAL_SERVERS: &[&str] = &["http://127.0.0.1:11434/v1", "http://127.0.0.1:8080/v1"];

/// How long one local server may take to list its models: it is on this machine.
const LOCAL_TIMEOUT: Duration = Duration::from_millis(1500);

/// How long a choice holds before it is made again: a long-running server notices a key or a local server that
/// came or went, without asking the local servers at every session.
const CHOICE_TTL: Duration = Duration::from_secs(10);

/// The model this machine offers, by the order above; None when it offers none.
pub async fn choose(home: &Path) -> Option<ModelRef> {
    static LAST: std::sync::Mutex<Option<(Instant, std::path::PathBuf, Option<ModelRef>)>> =
        std::sync::Mutex::new(None);
    if let Some((at, for_home, chosen)) = LAST.lock().ok()?.as_ref() {
        if at.elapsed() < CHOICE_TTL && for_home == home {
            return chosen.clone();
        }
    }
    let chosen = choose_now(home).await;
    if let Ok(mut last) = LAST.lock() {
        *last = Some((Instant::now(), home.to_path_buf(), chosen.clone()));
    }
    chosen
}

async fn choose_now(home: &Path) -> Option<ModelRef> {
    let configured = crate::config_file::load(home)
        .ok()
        .and_then(|c| c.default_model);
    if let Some((provider, name)) = configured.as_deref().and_then(|m| m.split_once('/')) {
        return Some(plain(provider, name));
    }
    let set = |var: &str| std::env::var(var).is_ok_and(|v| !v.trim().is_empty());
    if set("ANTHROPIC_API_KEY") {
        return Some(plain("anthropic", "claude-sonnet-4-5"));
    }
    if set("OPENAI_API_KEY") {
        return Some(plain("openai", "gpt-4.1"));
    }
    let listed = std::env::var("SERVICE_LOCAL_MODELS").ok();
    let servers: Vec<String> = match &listed {
        Some(list) => list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        None => LOCAL_SERVERS.iter().map(|s| s.to_string()).collect(),
    };
    for base in servers {
        if let Some(model) = first_model(&base).await {
            return Some(ModelRef {
                provider: "openai".into(),
                name: model,
                config: Some(serde_json::json!({ "base_url": base })),
            });
        }
    }
    None
}

/// The models a user may switch to on this machine without configuring more: `default_model`, then each provider
/// whose key is set with its default model (as `provider/name`).
pub fn offered(home: &Path) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(m) = crate::config_file::load(home)
        .ok()
        .and_then(|c| c.default_model)
    {
        out.push(m);
    }
    for (var, model) in [
        ("ANTHROPIC_API_KEY", "anthropic/claude-sonnet-4-5"),
        ("OPENAI_API_KEY", "openai/gpt-4.1"),
    ] {
        if std::env::var(var).is_ok_and(|v| !v.trim().is_empty()) && !out.iter().any(|m| m == model)
        {
            out.push(model.to_string());
        }
    }
    out
}

/// Why a model of `provider` at its official endpoint cannot be called from this process: the key variable it
/// needs, when unset. None for providers that need no key (`scripted`) or whose key is set.
pub fn missing_key(provider: &str) -> Option<&'static str> {
    let var = match provider {
        "anthropic" => "ANTHROPIC_API_KEY",
        "openai" => "OPENAI_API_KEY",
        _ => return None,
    };
    (!std::env::var(var).is_ok_and(|v| !v.trim().is_empty())).then_some(var)
}

fn plain(provider: &str, name: &str) -> ModelRef {
    ModelRef {
        provider: provider.into(),
        name: name.into(),
        config: None,
    }
}

/// The first model a local OpenAI-compatible server at `base` (its `/v1` root) lists; no key is sent.
async fn first_model(base: &str) -> Option<String> {
    let url = format!("{}/models", base.trim_end_matches('/'));
    let resp = super::http::get(&url, &[], LOCAL_TIMEOUT).await.ok()?;
    if !resp.status().is_success() {
        return None;
    }
    let body: serde_json::Value = resp.json().await.ok()?;
    body["data"]
        .as_array()
        .or_else(|| body["models"].as_array())?
        .iter()
        .find_map(|m| m["id"].as_str().or_else(|| m["name"].as_str()))
        .map(String::from)
}

/// `bundle` with its `auto` model replaced by the one this machine offers; unchanged when its model is not `auto`
/// or nothing is offered (a turn then fails with [`NO_MODEL`] before any call).
pub async fn settle(home: &Path, mut bundle: crate::bundle::Bundle) -> crate::bundle::Bundle {
    if bundle.agent.model.provider != AUTO {
        return bundle;
    }
    if let Some(model) = choose(home).await {
        bundle.agent.model.provider = model.provider;
        bundle.agent.model.name = model.name;
        bundle.agent.model.config = model.config;
    }
    bundle
}
