//! Provider `scripted`: an offline, deterministic model that replays a script file from the bundle.
//!
//! Script format (JSON5, path in `agent.yaml` `model.config.script`):
//! `{ turns: [ { when?: "substring", replies: [ { reasoning?, text?, tool_calls?: [{name, arguments, id?}],
//! delay_ms?, error? } ] } ] }`. The first turn entry whose `when` occurs in the turn's prompt (case-insensitive)
//! answers it; an entry without `when` answers any prompt. The n-th model call of a turn gets `replies[n]` (the
//! last reply repeats), where n counts the assistant messages after the last user message, so the choice survives
//! worker and supervisor restarts. In `text`, `{{prompt}}` is the prompt and `{{last_tool_output}}` the latest
//! tool result (or CodeAct observation), `{{message_count}}` the number of messages the model was sent. `reasoning` is a string or a list of sections. `delay_ms` pauses before every chunk, so tests can
//! catch a turn mid-stream. `error` makes the call fail with that message.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use serde::Deserialize;
use service_ipc::{ChatMessage, ChatRole, ModelChunk, ModelRequest, ToolCall, Usage};

use super::ChunkStream;
use crate::bundle::error::{BundleError, Result};
use crate::bundle::{parse, Bundle};

/// A parsed script.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Turn entries, first match wins.
    pub turns: Vec<ScriptTurn>,
}

/// Replies for the turns whose prompt matches.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptTurn {
    /// Substring the prompt must contain (case-insensitive); absent matches every prompt.
    #[serde(default)]
    pub when: Option<String>,
    /// One reply per model call of the turn.
    pub replies: Vec<Reply>,
}

/// One model reply.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reply {
    /// Reasoning: one section or several.
    #[serde(default)]
    pub reasoning: Option<Sections>,
    /// Answer text.
    #[serde(default)]
    pub text: Option<String>,
    /// Tool calls.
    #[serde(default)]
    pub tool_calls: Vec<ScriptCall>,
    /// Pause before each chunk.
    #[serde(default)]
    pub delay_ms: u64,
    /// Fail the call with this message.
    #[serde(default)]
    pub error: Option<String>,
}

/// Reasoning as one string or a list of sections.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Sections {
    /// One section.
    One(String),
    /// Several sections, with a section break between them.
    Many(Vec<String>),
}

/// A scripted tool call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    /// Tool name.
    pub name: String,
    /// Arguments (any JSON value; a string is sent as raw argument text, so scripts can send invalid JSON).
    #[serde(default)]
    pub arguments: serde_json::Value,
    /// Call id; generated when absent.
    #[serde(default)]
    pub id: Option<String>,
}

impl Script {
    /// Reads and validates a script file; errors name the file (relative to the bundle) and key path.
    pub fn load(root: &Path, rel: &str) -> Result<Script> {
        let path = root.join(rel);
        let text =
            std::fs::read_to_string(&path).map_err(|e| BundleError::io("cannot read", &path, e))?;
        let script: Script = parse::typed(rel, parse::json5_value(rel, &text)?)?;
        for (i, turn) in script.turns.iter().enumerate() {
            if turn.replies.is_empty() {
                return Err(BundleError::invalid(
                    rel,
                    format!("turns[{i}].replies"),
                    "needs at least one reply",
                ));
            }
        }
        if script.turns.is_empty() {
            return Err(BundleError::invalid(
                rel,
                "turns",
                "needs at least one turn entry",
            ));
        }
        Ok(script)
    }

    /// The reply for the next model call of the conversation in `messages`.
    pub fn reply_for(&self, messages: &[ChatMessage]) -> Option<&Reply> {
        // A CodeAct observation continues the turn: the prompt is the user message before it.
        let last_user = messages
            .iter()
            .rposition(|m| m.role == ChatRole::User && !m.is_observation());
        let prompt = last_user
            .map(|i| messages[i].content.to_lowercase())
            .unwrap_or_default();
        let step = messages[last_user.map_or(0, |i| i + 1)..]
            .iter()
            .filter(|m| m.role == ChatRole::Assistant)
            .count();
        let turn = self.turns.iter().find(|t| {
            t.when
                .as_ref()
                .is_none_or(|w| prompt.contains(&w.to_lowercase()))
        })?;
        turn.replies.get(step).or(turn.replies.last())
    }
}

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
pub fn stream(bundle: &Bundle, request: ModelRequest) -> ChunkStream {
    let chunks = match plan(bundle, &request) {
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
