//! The scripted provider's script, a bundle file: read and checked when a bundle is built, replayed by the
//! `scripted` provider (`providers::scripted`).
//!
//! Script format (JSON5, path in `agent.yaml` `model.config.script`):
//! `{ turns: [ { when?: "substring", replies: [ { reasoning?, text?, tool_calls?: [{name, arguments, id?}],
//! delay_ms?, error? } ] } ] }`. The first turn entry whose `when` occurs in the turn's prompt (case-insensitive)
//! answers it; an entry without `when` answers any prompt. The n-th model call of a turn gets `replies[n]` (the
//! last reply repeats), where n counts the assistant messages after the last user message, so the choice survives
//! worker and supervisor restarts. In `text`, `{{prompt}}` is the prompt and `{{last_tool_output}}` the latest
//! tool result (or CodeAct observation), `{{message_count}}` the number of messages the model was sent.
//! `reasoning` is a string or a list of sections. `delay_ms` pauses before every chunk, so tests can catch a turn
//! mid-stream. `error` makes the call fail with that message.

use std::path::Path;

use serde::Deserialize;
use service_ipc::{ChatMessage, ChatRole};

use super::error::{BundleError, Result};
use super::parse;

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
