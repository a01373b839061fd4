//! The conversation as the worker keeps it and the model sees it, and the chunks a model streams back.

use serde::{Deserialize, Serialize};

use crate::task::ModelRef;

/// Who wrote a conversation message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatRole {
    /// Instructions for the model.
    System,
    /// The user's prompt.
    User,
    /// The model's answer, possibly with tool calls.
    Assistant,
    /// A tool's result, answering one tool call.
    Tool,
}

/// The first line of a CodeAct observation (see [`ChatMessage::observation`]).
pub const OBSERVATION_HEADER: &str = "Observation of your program:";

/// A tool call the model made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Call id, unique within the conversation.
    pub id: String,
    /// Tool name as the model sent it.
    pub name: String,
    /// Arguments as JSON text, exactly as the model produced them (they may be invalid JSON).
    pub arguments: String,
}

/// One conversation message.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Author.
    pub role: ChatRole,
    /// Text content (may be empty for an assistant message that only calls tools).
    pub content: String,
    /// Tool calls of an assistant message.
    #[serde(default)]
    pub tool_calls: Vec<ToolCall>,
    /// For a tool message: the call it answers.
    #[serde(default)]
    pub tool_call_id: Option<String>,
    /// Items of an assistant message that only its provider reads back, sent before its content (a Responses
    /// API's encrypted reasoning); other providers leave them out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opaque: Vec<serde_json::Value>,
}

impl ChatMessage {
    /// A message with text only.
    pub fn text(role: ChatRole, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            opaque: Vec::new(),
        }
    }

    /// What a CodeAct program printed and what its calls returned, as the user message that follows it.
    pub fn observation(content: &str) -> Self {
        ChatMessage::text(ChatRole::User, format!("{OBSERVATION_HEADER}\n{content}"))
    }

    /// Whether this is a CodeAct observation, which continues a turn rather than starting one.
    pub fn is_observation(&self) -> bool {
        self.role == ChatRole::User && self.content.starts_with(OBSERVATION_HEADER)
    }

    /// A tool result answering `call_id`.
    pub fn tool_result(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            role: ChatRole::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id.into()),
            opaque: Vec::new(),
        }
    }
}

/// A tool offered to the model: name, description and JSON Schema of its arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct ToolSpec {
    /// Tool name.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: serde_json::Value,
}

/// Token counts reported by a provider; `None` (null on the wire) when the server reported none, which is not 0.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default)]
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default)]
    pub output_tokens: Option<u64>,
    /// Prompt tokens the provider served from its cache (part of `input_tokens`), when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Completion tokens spent on reasoning (part of `output_tokens`), when the provider said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Model calls counted, in a turn's usage (the supervisor counts them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u32>,
    /// Prompt tokens of the turn's latest call: how much of the context window the conversation fills.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_tokens: Option<u64>,
    /// The model's context window in tokens, when the model's `config.context_window` gives it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

impl Usage {
    /// Counts as reported: both known.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens: Some(input_tokens),
            output_tokens: Some(output_tokens),
            ..Usage::default()
        }
    }

    /// Adds one model call's usage to a turn's: the counts, the call, and its prompt as the context now used.
    pub fn count_call(&mut self, call: Usage) {
        self.add(call);
        self.model_calls = Some(self.model_calls.unwrap_or(0).saturating_add(1));
        self.context_tokens = call.input_tokens.or(self.context_tokens);
    }

    /// Tokens in and out together, when either is known.
    pub fn total(&self) -> Option<u64> {
        match (self.input_tokens, self.output_tokens) {
            (None, None) => None,
            (i, o) => Some(i.unwrap_or(0).saturating_add(o.unwrap_or(0))),
        }
    }

    /// Adds another call's usage to this one; a count stays `None` only while no call reported it.
    pub fn add(&mut self, other: Usage) {
        fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
            match (a, b) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(0).saturating_add(b.unwrap_or(0))),
            }
        }
        self.input_tokens = sum(self.input_tokens, other.input_tokens);
        self.output_tokens = sum(self.output_tokens, other.output_tokens);
        self.cached_tokens = sum(self.cached_tokens, other.cached_tokens);
        self.reasoning_tokens = sum(self.reasoning_tokens, other.reasoning_tokens);
    }
}

/// What a turn did besides its model calls, as the supervisor measured it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(utoipa::ToSchema))]
pub struct TurnActivity {
    /// Tool calls the turn's model replies asked for, as the supervisor read them from the provider (a CodeAct
    /// program's own calls are not among them).
    #[serde(default)]
    pub tool_calls: u64,
    /// Milliseconds from start to end.
    #[serde(default)]
    pub wall_ms: u64,
    /// CPU milliseconds of the session's sandbox, from its cgroup; absent where no cgroup counts it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox_cpu_ms: Option<u64>,
}

impl TurnActivity {
    /// Adds another turn's.
    pub fn add(&mut self, other: TurnActivity) {
        self.tool_calls = self.tool_calls.saturating_add(other.tool_calls);
        self.wall_ms = self.wall_ms.saturating_add(other.wall_ms);
        if let Some(cpu) = other.sandbox_cpu_ms {
            self.sandbox_cpu_ms = Some(self.sandbox_cpu_ms.unwrap_or(0).saturating_add(cpu));
        }
    }
}

/// What a worker asks of a model: the conversation and the tools, never the model itself. The supervisor decides
/// which model serves it, from the turn it started (see [`ModelRequest`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelQuery {
    /// Id the streamed chunks answer to.
    pub request_id: String,
    /// Turn the request belongs to; the supervisor refuses any other than the running turn.
    pub turn_id: String,
    /// The conversation, system prompt first.
    pub messages: Vec<ChatMessage>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
}

/// A turn's first model reply, read by the supervisor before the turn needed a worker (see `ToWorker::RunTurn`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FirstReply {
    /// Its text, already streamed to clients as events.
    pub text: String,
    /// The tool calls the worker runs next; never empty.
    pub tool_calls: Vec<ToolCall>,
    /// Its items only the provider reads back (see [`ChatMessage::opaque`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub opaque: Vec<serde_json::Value>,
    /// Its token counts.
    pub usage: Usage,
}

/// A model call as the supervisor's providers serve it: a worker's query and the model the supervisor chose.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelRequest {
    /// Id the streamed chunks answer to.
    pub request_id: String,
    /// Turn the request belongs to.
    pub turn_id: String,
    /// Model to ask, from the supervisor's own state.
    pub model: ModelRef,
    /// The conversation, system prompt first.
    pub messages: Vec<ChatMessage>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
}

impl ModelRequest {
    /// The call that serves `query` with `model`.
    pub fn new(model: ModelRef, query: ModelQuery) -> Self {
        ModelRequest {
            request_id: query.request_id,
            turn_id: query.turn_id,
            model,
            messages: query.messages,
            tools: query.tools,
        }
    }
}

/// One piece of a streamed model completion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", content = "payload", rename_all = "snake_case")]
pub enum ModelChunk {
    /// Reasoning text.
    ReasoningDelta {
        /// Text to append.
        text: String,
    },
    /// A break between reasoning sections.
    ReasoningSectionBreak,
    /// Answer text.
    TextDelta {
        /// Text to append.
        text: String,
    },
    /// A complete tool call (providers assemble streamed arguments before sending it).
    ToolCall {
        /// The call.
        call: ToolCall,
    },
    /// An item only the provider reads back, for the assistant message (see [`ChatMessage::opaque`]).
    Opaque {
        /// The item, as the provider gave it.
        item: serde_json::Value,
    },
    /// The completion ended normally; the last chunk of a request.
    Done {
        /// Token usage of this call.
        usage: Usage,
    },
    /// The completion failed; the last chunk of a request.
    Failed {
        /// Stable snake_case code, e.g. `provider_error`.
        code: String,
        /// What went wrong and what to do.
        message: String,
    },
}
