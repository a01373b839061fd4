//! Provider `scripted`: an offline, deterministic model that replays a script file from the bundle (its format:
//! `bundle::script`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use service_ipc::{ChatMessage, ChatRole, ModelChunk, ModelRequest, ToolCall, Usage};

use super::ChunkStream;
use crate::bundle::error::{BundleError, Result};
use crate::bundle::script::{Script, Sections};
use crate::bundle::Bundle;

/// A parsed script with the modification time and length it was parsed at.
type Cached = (SystemTime, u64, Arc<Script>);

/// Parsed scripts by path, reused while the file's modification time and length are unchanged: parsing a large
/// script on every model call was most of the cost of a scripted turn.
fn cached(root: &Path, rel: &str) -> Result<Arc<Script>> {
    static CACHE: OnceLock<Mutex<HashMap<PathBuf, Cached>>> = OnceLock::new();
    let path = root.join(rel);
    let meta = std::fs::metadata(&path).map_err(|e| BundleError::io("cannot read", &path, e))?;
    let stamp = (
        meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        meta.len(),
    );
    let cache = CACHE.get_or_init(Default::default);
    if let Some((m, l, script)) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(&path) {
        if (*m, *l) == stamp {
            return Ok(script.clone());
        }
    }
    let script = Arc::new(Script::load(root, rel)?);
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(path, (stamp.0, stamp.1, script.clone()));
    Ok(script)
}

/// The script that model `scripted/<name>` replays in `bundle`: `resources/<name>.json5` when the bundle has it,
/// else the one `agent.yaml` names; None when there is neither (the model then echoes).
fn script_for(bundle: &Bundle, name: &str) -> Option<String> {
    // The name comes from a turn's model override: a plain file name, never a path.
    let plain = !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    let named = format!("resources/{name}.json5");
    if plain && bundle.root.join(&named).is_file() {
        return Some(named);
    }
    bundle.agent.script_path().map(str::to_string)
}

/// The reply of a scripted model with no script: the prompt back, and where a script would go.
fn echo(name: &str, messages: &[ChatMessage]) -> Vec<(u64, ModelChunk)> {
    let text = fill(
        &format!("[scripted/{name}: this bundle has no resources/{name}.json5, so the prompt comes back] {{{{prompt}}}}"),
        messages,
    );
    let words = text.split_whitespace().count() as u64;
    let mut out: Vec<(u64, ModelChunk)> = pieces(&text)
        .map(|text| (0, ModelChunk::TextDelta { text }))
        .collect();
    out.push((0, done(messages, words)));
    out
}

/// Streams the scripted reply to `request`.
pub fn stream(bundle: &Bundle, request: &ModelRequest) -> ChunkStream {
    let chunks = match plan(bundle, request) {
        Ok(c) => c,
        Err(message) => vec![(
            0,
            ModelChunk::Failed {
                code: "script_error".into(),
                message,
            },
        )],
    };
    futures::stream::iter(chunks)
        .then(|(delay, chunk)| async move {
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            chunk
        })
        .boxed()
}

/// The chunks of the reply, each with the pause before it.
fn plan(
    bundle: &Bundle,
    request: &ModelRequest,
) -> std::result::Result<Vec<(u64, ModelChunk)>, String> {
    let name = &request.model.name;
    let Some(rel) = script_for(bundle, name) else {
        return Ok(echo(name, &request.messages));
    };
    let rel = rel.as_str();
    let script = cached(&bundle.root, rel).map_err(|e| e.to_string())?;
    let reply = script
        .reply_for(&request.messages)
        .ok_or_else(|| format!("{rel} has no turn entry whose `when` matches this prompt"))?;
    let d = reply.delay_ms;
    if let Some(message) = &reply.error {
        return Ok(vec![(
            d,
            ModelChunk::Failed {
                code: "provider_error".into(),
                message: message.clone(),
            },
        )]);
    }
    let mut out = Vec::new();
    let sections = match &reply.reasoning {
        None => Vec::new(),
        Some(Sections::One(s)) => vec![s.clone()],
        Some(Sections::Many(v)) => v.clone(),
    };
    for (i, section) in sections.iter().enumerate() {
        if i > 0 {
            out.push((d, ModelChunk::ReasoningSectionBreak));
        }
        out.extend(pieces(section).map(|text| (d, ModelChunk::ReasoningDelta { text })));
    }
    let mut output_words = 0;
    if let Some(text) = &reply.text {
        let text = fill(text, &request.messages);
        output_words += text.split_whitespace().count() as u64;
        out.extend(pieces(&text).map(|text| (d, ModelChunk::TextDelta { text })));
    }
    for call in &reply.tool_calls {
        let arguments = match &call.arguments {
            serde_json::Value::String(raw) => raw.clone(),
            serde_json::Value::Null => "{}".to_string(),
            other => other.to_string(),
        };
        out.push((
            d,
            ModelChunk::ToolCall {
                call: ToolCall {
                    id: call.id.clone().unwrap_or_else(|| {
                        format!("call_{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
                    }),
                    name: call.name.clone(),
                    arguments,
                },
            },
        ));
    }
    out.push((0, done(&request.messages, output_words)));
    Ok(out)
}

/// The end of a reply, with usage estimated from characters in and words out.
fn done(messages: &[ChatMessage], output_words: u64) -> ModelChunk {
    let input_chars: usize = messages.iter().map(|m| m.content.len()).sum();
    ModelChunk::Done {
        usage: Usage::new((input_chars / 4) as u64, output_words),
    }
}

/// Splits text into streaming pieces of about three words, keeping every character.
fn pieces(text: &str) -> impl Iterator<Item = String> + '_ {
    let words: Vec<&str> = text.split_inclusive(' ').collect();
    words
        .chunks(3)
        .map(|c| c.concat())
        .collect::<Vec<_>>()
        .into_iter()
}

/// Substitutes `{{prompt}}`, `{{last_tool_output}}` and `{{message_count}}` (messages the model was sent).
fn fill(text: &str, messages: &[ChatMessage]) -> String {
    let last = |wanted: &dyn Fn(&ChatMessage) -> bool| {
        messages
            .iter()
            .rev()
            .find(|m| wanted(m))
            .map(|m| m.content.trim().to_string())
            .unwrap_or_default()
    };
    let prompt = last(&|m| m.role == ChatRole::User && !m.is_observation());
    let output = last(&|m| m.role == ChatRole::Tool || m.is_observation());
    text.replace("{{prompt}}", &prompt)
        .replace("{{last_tool_output}}", &output)
        .replace("{{message_count}}", &messages.len().to_string())
}
