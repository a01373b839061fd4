//! What a server says, bounded before it reaches the model: its tool list within caps (count, name, description
//! and schema size), and its results rendered as text and cut like a command's output.

use serde_json::Value;
use service_ipc::ToolSpec;

use super::tool_name;

/// Tools kept per server; the rest are dropped, so a server cannot flood the prompt.
const MAX_TOOLS: usize = 128;
/// Longest model-facing tool name; a tool whose `mcp__<server>__<tool>` is longer is not offered.
const MAX_NAME: usize = 64;
/// Longest tool description kept.
const MAX_DESCRIPTION: usize = 2048;
/// Largest input schema kept (serialized); a larger one is replaced by an open object schema.
const MAX_SCHEMA: usize = 32 * 1024;
/// Result text kept for the model.
pub(crate) const OUTPUT_CAP: usize = 64 * 1024;

/// One offered tool: the spec the model sees and the server's own name for it.
#[derive(Debug, Clone)]
pub(super) struct Offered {
    pub(super) spec: ToolSpec,
    pub(super) original: String,
}

/// The tools a server listed, as offered to the model, within the caps.
pub(super) fn offered(server: &str, listed: Vec<rmcp::model::Tool>) -> Vec<Offered> {
    let mut out: Vec<Offered> = Vec::new();
    for tool in listed.into_iter().take(MAX_TOOLS) {
        let v = serde_json::to_value(&tool).unwrap_or(Value::Null);
        let original = v["name"].as_str().unwrap_or_default().to_string();
        let name = tool_name(server, &original);
        // OpenAI-compatible servers refuse function names over 64 characters.
        if original.is_empty() || name.len() > MAX_NAME || out.iter().any(|t| t.spec.name == name) {
            continue;
        }
        let description: String = v["description"]
            .as_str()
            .unwrap_or_default()
            .chars()
            .take(MAX_DESCRIPTION)
            .collect();
        let schema = v["inputSchema"].clone();
        let parameters = if schema.is_object() && schema.to_string().len() <= MAX_SCHEMA {
            schema
        } else {
            serde_json::json!({"type": "object"})
        };
        out.push(Offered {
            spec: ToolSpec {
                name,
                description,
                parameters,
            },
            original,
        });
    }
    out
}

/// A tool result as text: text blocks as they are, structured content as JSON, other blocks noted; cut at the cap.
pub(super) fn render(result: &Value) -> String {
    let mut text = String::new();
    for block in result["content"].as_array().into_iter().flatten() {
        if !text.is_empty() {
            text.push('\n');
        }
        match block["type"].as_str().unwrap_or_default() {
            "text" => text.push_str(block["text"].as_str().unwrap_or_default()),
            "image" | "audio" => text.push_str(&format!(
                "[{} omitted: {}, {} bytes of base64]",
                block["type"].as_str().unwrap_or_default(),
                block["mimeType"].as_str().unwrap_or("unknown type"),
                block["data"].as_str().map(str::len).unwrap_or(0)
            )),
            "resource" => match block["resource"]["text"].as_str() {
                Some(t) => text.push_str(t),
                None => text.push_str(&format!(
                    "[resource {}]",
                    block["resource"]["uri"].as_str().unwrap_or("?")
                )),
            },
            "resource_link" => text.push_str(&format!(
                "[resource link {}]",
                block["uri"].as_str().unwrap_or("?")
            )),
            other => text.push_str(&format!("[{other} content omitted]")),
        }
    }
    if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
        if !text.is_empty() {
            text.push('\n');
        }
        text.push_str(&structured.to_string());
    }
    cut(text)
}

/// `text` cut at the cap, with a note of how much was left out.
pub(crate) fn cut(mut text: String) -> String {
    if text.len() <= OUTPUT_CAP {
        return text;
    }
    let mut end = OUTPUT_CAP;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let omitted = text.len() - end;
    text.truncate(end);
    text.push_str(&format!("\n[{omitted} bytes of output omitted]"));
    text
}
