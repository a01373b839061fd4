//! The one tool registry the react loop calls: the builtin tools the manifest lists and the tools of the session's
//! MCP servers. It answers what is offered, what a call's permission key is, and runs the call.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;
use service_ipc::{BuiltinTool, ToolSpec};

use crate::a2a::Agents;
use crate::mcp::Servers;
use crate::subagents::Subagents;
use crate::tools::{self, ToolCtx, ToolResult};

/// Longest permission key of an MCP or A2A call.
const MAX_MCP_KEY: usize = 16 * 1024;

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tool {
    /// A builtin tool.
    Builtin(BuiltinTool),
    /// A tool of an MCP server, by its model-facing name.
    Mcp(String),
    /// A remote A2A agent's tool (`a2a__<name>`).
    A2a(String),
    /// The `Agent` tool, which runs a subagent.
    Agent,
}

impl Tool {
    /// The name the model and the permission rules use.
    pub fn name(&self) -> &str {
        match self {
            Tool::Builtin(t) => t.as_str(),
            Tool::Mcp(name) | Tool::A2a(name) => name,
            Tool::Agent => crate::subagents::TOOL,
        }
    }
}

/// The tools of one worker.
pub struct Registry {
    builtins: Vec<BuiltinTool>,
    mcp: Arc<Servers>,
    agents: Agents,
    /// The `Agent` tool's subagents and waiting calls.
    pub subagents: Subagents,
}

impl Registry {
    /// A registry of `builtins`, the tools of `mcp` and those of the remote `agents`.
    pub fn new(
        builtins: Vec<BuiltinTool>,
        mcp: Arc<Servers>,
        agents: Agents,
        subagents: Subagents,
    ) -> Registry {
        Registry {
            builtins,
            mcp,
            agents,
            subagents,
        }
    }

    /// The specs to offer the next model call: the builtins in manifest order, then the MCP tools, then the remote
    /// agents.
    pub async fn specs(&self) -> Vec<ToolSpec> {
        let mut specs = tools::specs(&self.builtins);
        specs.extend(self.mcp.specs().await);
        specs.extend(self.agents.specs().await);
        if self.subagents.offered() {
            specs.push(self.subagents.spec());
        }
        specs
    }

    /// The tool called `name`, or the message the model gets when there is none.
    pub fn find(&self, name: &str) -> Result<Tool, String> {
        if let Ok(tool) = name.parse::<BuiltinTool>() {
            if self.builtins.contains(&tool) {
                return Ok(Tool::Builtin(tool));
            }
        }
        if self.mcp.offers(name) {
            return Ok(Tool::Mcp(name.to_string()));
        }
        if self.agents.offers(name) {
            return Ok(Tool::A2a(name.to_string()));
        }
        if name == crate::subagents::TOOL && self.subagents.offered() {
            return Ok(Tool::Agent);
        }
        if let Some(why) = self
            .mcp
            .failure_of(name)
            .or_else(|| self.agents.failure_of(name))
        {
            return Err(format!("tool \"{name}\" is not available: {why}"));
        }
        let names: Vec<&str> = self.builtins.iter().map(|t| t.as_str()).collect();
        Err(format!(
            "tool \"{name}\" is not available; available tools: {}{}",
            names.join(", "),
            if name.starts_with(crate::mcp::PREFIX) {
                ", and the MCP tools listed in the request"
            } else {
                ""
            }
        ))
    }

    /// The argument permission rules match against: a builtin's command, path or pattern; an MCP call's
    /// arguments as compact JSON, and an A2A agent's message, cut at 16 KiB (the supervisor refuses a permission
    /// request over 64 KiB).
    pub fn key_argument(&self, tool: &Tool, args: &Value, cwd: &Path) -> String {
        match tool {
            Tool::Builtin(t) => tools::key_argument(*t, args, cwd),
            Tool::A2a(_) => bounded(
                args.get("message")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            Tool::Mcp(_) => bounded(args.to_string()),
            Tool::Agent => Subagents::key(args),
        }
    }

    /// One line saying what the call is about to do, for `tool_call_delta`.
    pub fn describe(&self, tool: &Tool, args: &Value, key: &str) -> String {
        match tool {
            Tool::Builtin(t) => tools::describe(*t, args, key),
            Tool::Mcp(name) => format!("calling {name}"),
            Tool::A2a(name) => format!("asking {}", name.trim_start_matches(crate::a2a::PREFIX)),
            Tool::Agent => format!("handing the task to subagent {key}"),
        }
    }

    /// For a Write or an Edit: the diff its approval question shows (see [`tools::preview_diff`]).
    pub fn preview_diff(&self, tool: &Tool, args: &Value, cwd: &Path) -> Option<String> {
        match tool {
            Tool::Builtin(t) => tools::preview_diff(*t, args, cwd),
            Tool::Mcp(_) | Tool::A2a(_) | Tool::Agent => None,
        }
    }

    /// Runs one call.
    pub async fn run(&self, tool: &Tool, args: Value, ctx: &ToolCtx<'_>) -> ToolResult {
        match tool {
            Tool::Builtin(t) => tools::run(*t, args, ctx).await,
            Tool::Mcp(name) => self.mcp.call(name, args, ctx.cancel).await,
            Tool::A2a(name) => self.agents.call(name, args, ctx).await,
            Tool::Agent => self.subagents.call(args, ctx).await,
        }
    }
}

/// A permission key cut at [`MAX_MCP_KEY`].
fn bounded(mut key: String) -> String {
    if key.len() > MAX_MCP_KEY {
        let mut end = MAX_MCP_KEY;
        while !key.is_char_boundary(end) {
            end -= 1;
        }
        key.truncate(end);
        key.push_str("...");
    }
    key
}
