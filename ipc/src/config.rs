//! What the supervisor tells a worker right after the handshake.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::chat::ChatMessage;
use crate::names::{BuiltinTool, PermissionAction, SandboxMode};

/// One permission rule of `agent.yaml`: a tool, an optional glob over its key argument, an action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PermissionRule {
    /// The tool the rule applies to: a builtin name (`Bash`) or a glob over MCP tool names (`mcp__git__*`).
    pub tool: String,
    /// Glob over the key argument (command, path or pattern); absent matches every call.
    #[serde(default, rename = "match")]
    pub pattern: Option<String>,
    /// What a matching call resolves to.
    pub action: PermissionAction,
}

/// The ordered permission rules and the action for calls no rule matches.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Permissions {
    /// Action when no rule matches.
    #[serde(default = "default_action")]
    pub default: PermissionAction,
    /// Rules, first match wins.
    #[serde(default)]
    pub rules: Vec<PermissionRule>,
    /// What a connection to a host that `sandbox.permissions.network` does not list resolves to: `deny`, or
    /// `ask` to route it to an operator. Decided by the supervisor's egress proxy, never by the worker.
    #[serde(default = "default_network")]
    pub network: PermissionAction,
}

fn default_no_proxy() -> String {
    "localhost,127.0.0.1".into()
}

fn default_network() -> PermissionAction {
    PermissionAction::Deny
}

fn default_action() -> PermissionAction {
    PermissionAction::Allow
}

impl Default for Permissions {
    fn default() -> Self {
        Permissions {
            default: PermissionAction::Allow,
            rules: Vec::new(),
            network: default_network(),
        }
    }
}

/// A skill listed to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SkillInfo {
    /// Skill name, from its front matter.
    pub name: String,
    /// One-line description, from its front matter.
    pub description: String,
    /// Path of its SKILL.md as the worker sees it.
    pub path: String,
}

/// The workspace as a bubblewrap sandbox shows it, and as permission rules and bundles name it on every backend.
pub const WORKSPACE_IN_SANDBOX: &str = "/workspace";
/// The bundle as a bubblewrap sandbox shows it, and as permission rules and bundles name it on every backend.
pub const BUNDLE_IN_SANDBOX: &str = "/bundle";

/// Everything a worker needs to run turns for one session. Paths are as the worker sees them (inside the sandbox).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerConfig {
    /// Must equal the worker's [`crate::PROTOCOL_VERSION`].
    pub protocol_version: u32,
    /// The session this worker serves.
    pub session_id: String,
    /// The bundle's root directory (read-only).
    pub bundle_dir: String,
    /// The session's default working directory.
    pub workspace: String,
    /// Sandbox mode that confines this worker.
    pub sandbox_mode: SandboxMode,
    /// System prompt from `agent.yaml`.
    pub system_prompt: String,
    /// Tools offered to the model, from `manifest.tools`.
    pub tools: Vec<BuiltinTool>,
    /// Skills found in the bundle.
    pub skills: Vec<SkillInfo>,
    /// Model calls allowed per turn before the turn fails.
    pub max_steps: u32,
    /// Messages kept by the sliding window (besides the system prompt).
    pub memory_window: usize,
    /// Permission rules from `agent.yaml`.
    pub permissions: Permissions,
    /// Conversation so far, rebuilt from the session's persisted history.
    pub history: Vec<ChatMessage>,
    /// How often the worker sends a heartbeat.
    pub heartbeat_ms: u64,
    /// The supervisor's egress proxy socket as the worker sees it, when the sandbox may reach hosts through it:
    /// the worker forwards a loopback port to it and points every command's proxy variables at that port.
    #[serde(default)]
    pub egress_proxy: Option<String>,
    /// The loopback names commands reach directly (`NO_PROXY`): `localhost` and `127.0.0.1`, less those the
    /// bundle's network rules list, whose connections must go through the proxy to the host.
    #[serde(default = "default_no_proxy")]
    pub no_proxy: String,
    /// MCP servers from `agent.yaml`, by name; the worker starts them in its sandbox.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServer>,
    /// Time without a command after which the worker stops its spare shells, so an idle session is back to its
    /// worker and bwrap's monitor.
    #[serde(default = "default_spare_shell_idle_ms")]
    pub spare_shell_idle_ms: u64,
    /// Remote A2A agents from `agent.yaml`; each is a tool `a2a__<name>` the worker calls through the egress proxy.
    #[serde(default)]
    pub a2a_agents: Vec<A2aAgent>,
    /// The subagents the `Agent` tool may call; the tool is offered when there is one.
    #[serde(default)]
    pub subagents: Vec<SubagentInfo>,
    /// The turn executor of `agent.yaml`.
    pub executor: crate::ExecutorKind,
    /// `codeact`: the time one program may run before it is killed.
    pub codeact_timeout_ms: u64,
    /// The hooks the worker runs in its sandbox, in the order they are declared.
    #[serde(default)]
    pub hooks: Vec<HookSpec>,
    /// The session is a fork no turn has ended in yet: `SessionStart` hooks read the source `fork`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fork: bool,
    /// The operator's hook scripts, read-only (`SERVICE_OPERATOR_HOOKS_DIR` for hooks), when the store has them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_hooks_dir: Option<String>,
    /// What confines a sandboxed worker, which decides how it confines its commands.
    #[serde(default = "default_backend")]
    pub sandbox_backend: crate::SandboxBackend,
    /// Under Landlock: the inherited descriptor of the loopback listener the supervisor made for the egress
    /// forwarder (Landlock lets the sandbox connect to its port and bind none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress_listener_fd: Option<i32>,
}

fn default_backend() -> crate::SandboxBackend {
    crate::SandboxBackend::Bwrap
}

/// One hook command: what starts it, and how it runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookSpec {
    /// The event it runs on.
    pub event: crate::HookEvent,
    /// Which tool calls it runs for (a regular expression over tool names, `Bash(PREFIX:*)` for commands); every
    /// one when absent. Only tool events use it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matcher: Option<String>,
    /// The command line, run by the shell in the session's workspace.
    pub command: String,
    /// The time it may run before it is killed.
    pub timeout_ms: u64,
    /// Any non-zero exit blocks, not only 2; a time-out or a failed start always blocks a tool's hooks.
    #[serde(default)]
    pub fail_closed: bool,
    /// Where it was declared.
    pub source: crate::HookSource,
}

/// A subagent as the model sees it in the `Agent` tool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubagentInfo {
    /// The name the `Agent` call gives.
    pub name: String,
    /// What it is for.
    pub description: String,
}

/// A remote agent the bundle calls over A2A (`a2a_agents` of agent.yaml).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct A2aAgent {
    /// Its name; the tool is `a2a__<name>`.
    pub name: String,
    /// Its base URL; the agent card is at `<url>/.well-known/agent-card.json`.
    pub url: String,
    /// The bearer token to send (the supervisor read `token_env` from its environment).
    #[serde(default)]
    pub token: Option<String>,
    /// Time allowed for one call; past it the remote task is cancelled.
    pub tool_timeout_ms: u64,
}

/// [`WorkerConfig::spare_shell_idle_ms`] when the supervisor does not say: 30 s.
pub const fn default_spare_shell_idle_ms() -> u64 {
    30_000
}

/// How a session reaches one MCP server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "transport", rename_all = "snake_case")]
pub enum McpServer {
    /// A process the worker starts in the sandbox, speaking JSON-RPC on its stdin and stdout.
    Stdio {
        /// Program.
        command: String,
        /// Arguments.
        args: Vec<String>,
        /// Its whole environment besides the sandbox's base variables (the supervisor resolved `env_from_host`).
        env: BTreeMap<String, String>,
        /// Working directory; the workspace when absent.
        cwd: Option<String>,
        /// Time allowed for start-up and the tool list.
        startup_timeout_ms: u64,
        /// Time allowed for one tool call.
        tool_timeout_ms: u64,
    },
    /// A streamable-HTTP server, reached through the session's network policy.
    Http {
        /// Endpoint URL.
        url: String,
        /// Extra request headers.
        headers: BTreeMap<String, String>,
        /// Time allowed for start-up and the tool list.
        startup_timeout_ms: u64,
        /// Time allowed for one tool call.
        tool_timeout_ms: u64,
    },
}
