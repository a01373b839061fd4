//! `agent.yaml`: default model, executor, memory, system prompt and tool permission rules.

use serde::{Deserialize, Serialize};
use service_ipc::{ExecutorKind, MemoryProvider, Permissions};

use super::error::{BundleError, Result};
use super::parse;

pub use super::model::{AgentModel, KNOWN_PROVIDERS};
pub use super::parse::is_safe_relative;

/// File name of the agent definition inside a bundle.
pub const AGENT_FILE: &str = "agent.yaml";

/// The agent definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentSpec {
    /// Default model.
    pub model: AgentModel,
    /// Turn executor; `react` when absent.
    #[serde(default = "default_executor")]
    pub executor: ExecutorKind,
    /// Memory provider and its settings.
    #[serde(default)]
    pub memory: MemorySpec,
    /// System prompt.
    #[serde(default)]
    pub system_prompt: String,
    /// Model calls allowed per turn.
    #[serde(default = "default_max_steps")]
    pub max_steps: u32,
    /// Tool permission rules.
    #[serde(default)]
    pub permissions: Permissions,
    /// Whether the project's `AGENTS.md` (and the like) is added to the system prompt (see
    /// `project_instructions`); true when absent.
    #[serde(default = "default_true")]
    pub project_instructions: bool,
    /// MCP servers the session runs, by name.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_servers: std::collections::BTreeMap<String, super::mcp::McpServerSpec>,
    /// Remote A2A agents the bundle calls, each as a tool `a2a__<name>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub a2a_agents: Vec<super::a2a_agents::A2aAgentSpec>,
    /// Other bundles the `Agent` tool may hand a task to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<super::subagents::SubagentEntry>,
    /// Settings of the `codeact` executor.
    #[serde(default)]
    pub codeact: CodeactSpec,
    /// Hooks, by event, as Claude Code writes them (see `bundle::hooks`); `hooks/hooks.json` adds to them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub hooks: super::hooks::HookMap,
}

/// `codeact` of agent.yaml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CodeactSpec {
    /// The time one program may run before it is killed, with everything it started.
    #[serde(default = "default_codeact_timeout_ms")]
    pub timeout_ms: u64,
}

impl Default for CodeactSpec {
    fn default() -> Self {
        CodeactSpec {
            timeout_ms: default_codeact_timeout_ms(),
        }
    }
}

fn default_codeact_timeout_ms() -> u64 {
    120_000
}

impl AgentSpec {
    /// Whether the supervisor may make a turn's first model call itself (see `runtime::lead`): not when some tools
    /// are known only once the worker runs (MCP servers' lists, A2A agents' cards), nor with subagents, nor for the
    /// codeact executor, whose every step runs a program in the sandbox.
    pub fn supervisor_may_lead(&self) -> bool {
        // Hooks run in the sandbox, on the prompt and at the turn's end too.
        self.hooks.is_empty()
            && self.mcp_servers.is_empty()
            && self.a2a_agents.is_empty()
            && self.subagents.is_empty()
            && self.executor == ExecutorKind::React
    }
}

/// `memory` of agent.yaml.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// Memory provider.
    #[serde(default = "default_memory")]
    pub provider: MemoryProvider,
    /// `sliding_window`: messages kept besides the system prompt.
    #[serde(default = "default_window")]
    pub window: usize,
    /// `compact`: the share of the context window past which the next turn first compacts; 1.0 leaves it to an
    /// overflow or a compaction by hand.
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    /// `compact`: the last turns kept whole after the summary.
    #[serde(default = "default_keep_recent_turns")]
    pub keep_recent_turns: usize,
    /// `compact`: the longest summary, in tokens.
    #[serde(default = "default_summary_max_tokens")]
    pub summary_max_tokens: u32,
    /// `off`: no compaction at all, not even when the provider refuses a context as too long.
    #[serde(default)]
    pub compaction: Compaction,
}

/// `memory.compaction` of agent.yaml.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Compaction {
    /// Compact past the threshold (`compact`), when the provider refuses the context, and by hand.
    #[default]
    On,
    /// Never.
    Off,
}

impl MemorySpec {
    /// Messages of the history a model call sees: the window, or all of it when compaction keeps it short.
    pub fn window_messages(&self) -> usize {
        match self.provider {
            MemoryProvider::SlidingWindow => self.window,
            MemoryProvider::Compact => usize::MAX,
        }
    }

    /// Whether a turn may compact before its first call (past `threshold`).
    pub fn compacts_ahead(&self) -> bool {
        self.provider == MemoryProvider::Compact
            && self.compaction == Compaction::On
            && self.threshold < 1.0
    }
}

fn default_true() -> bool {
    true
}
fn default_executor() -> ExecutorKind {
    ExecutorKind::React
}
fn default_memory() -> MemoryProvider {
    MemoryProvider::SlidingWindow
}
fn default_window() -> usize {
    40
}
fn default_max_steps() -> u32 {
    20
}
fn default_threshold() -> f64 {
    0.8
}
fn default_keep_recent_turns() -> usize {
    2
}
fn default_summary_max_tokens() -> u32 {
    2000
}

impl Default for MemorySpec {
    fn default() -> Self {
        MemorySpec {
            provider: default_memory(),
            window: default_window(),
            threshold: default_threshold(),
            keep_recent_turns: default_keep_recent_turns(),
            summary_max_tokens: default_summary_max_tokens(),
            compaction: Compaction::On,
        }
    }
}

impl AgentSpec {
    /// Parses and validates agent.yaml text.
    pub fn parse(text: &str) -> Result<AgentSpec> {
        let value = parse::yaml_value(AGENT_FILE, text)?;
        let agent: AgentSpec = parse::typed(AGENT_FILE, value)?;
        agent.validate()?;
        Ok(agent)
    }

    /// The scripted provider's script path, relative to the bundle root, when the provider is `scripted`.
    pub fn script_path(&self) -> Option<&str> {
        if self.model.provider != "scripted" {
            return None;
        }
        self.model.config.as_ref()?.get("script")?.as_str()
    }

    fn validate(&self) -> Result<()> {
        let bad = |key: &str, message: String| Err(BundleError::invalid(AGENT_FILE, key, message));
        if let Err((key, why)) = super::hooks::validate(&self.hooks, false) {
            return bad(&format!("hooks.{key}"), why);
        }
        if !KNOWN_PROVIDERS.contains(&self.model.provider.as_str()) {
            return bad(
                "model.provider",
                format!(
                    "unknown value \"{}\"; expected one of {}",
                    self.model.provider,
                    KNOWN_PROVIDERS.join(", ")
                ),
            );
        }
        if self.model.name.trim().is_empty() {
            return bad("model.name", "must not be empty".into());
        }
        if let Err(e) = crate::model_config::parse(&self.model.provider, self.model.config.as_ref())
        {
            let key = if e.key.is_empty() {
                "model.config".to_string()
            } else {
                format!("model.config.{}", e.key)
            };
            return bad(&key, e.message);
        }
        if self.model.provider == "scripted" {
            match self.script_path() {
                Some(path) if is_safe_relative(path) => {}
                Some(path) => {
                    return bad(
                        "model.config.script",
                        format!("\"{path}\" must be a relative path inside the bundle"),
                    )
                }
                None => {
                    return bad(
                        "model.config.script",
                        "the scripted provider needs the path of its script file, e.g. resources/script.json5"
                            .into(),
                    )
                }
            }
        }
        if !(1..=1000).contains(&self.max_steps) {
            return bad(
                "max_steps",
                format!("{} is out of range 1..=1000", self.max_steps),
            );
        }
        if self.memory.window < 2 {
            return bad("memory.window", "must keep at least 2 messages".into());
        }
        let m = &self.memory;
        if !(m.threshold > 0.0 && m.threshold <= 1.0) {
            return bad(
                "memory.threshold",
                format!("{} is out of range: a share of the context window above 0 and at most 1 (1 turns automatic compaction off)", m.threshold),
            );
        }
        if m.keep_recent_turns > 1000 {
            return bad("memory.keep_recent_turns", "at most 1000".into());
        }
        if !(16..=100_000).contains(&m.summary_max_tokens) {
            return bad(
                "memory.summary_max_tokens",
                format!("{} is out of range 16..=100000", m.summary_max_tokens),
            );
        }
        if self.permissions.network == service_ipc::PermissionAction::Allow {
            return bad(
                "permissions.network",
                "\"allow\" is not accepted here; use \"deny\" or \"ask\", and list the hosts to allow in \
                 service.bundle.json5 sandbox.permissions.network (\"*\" for any public host)"
                    .into(),
            );
        }
        for (name, server) in &self.mcp_servers {
            if let Err((key, message)) = server.validate(name) {
                return bad(&key, message);
            }
        }
        if let Err((key, message)) = super::subagents::validate(&self.subagents) {
            return bad(&key, message);
        }
        for (i, agent) in self.a2a_agents.iter().enumerate() {
            if let Err((key, message)) = agent.validate(i) {
                return bad(&key, message);
            }
            if self.a2a_agents[..i].iter().any(|a| a.name == agent.name) {
                return bad(
                    &format!("a2a_agents[{i}].name"),
                    format!(
                        "\"{}\" is named twice; each agent needs its own name",
                        agent.name
                    ),
                );
            }
        }
        for (i, rule) in self.permissions.rules.iter().enumerate() {
            let (tool, inner) = service_worker::permissions::split_tool(&rule.tool);
            if let Some(Err(e)) = inner.map(globset::Glob::new) {
                return bad(
                    &format!("permissions.rules[{i}].tool"),
                    format!("invalid glob in \"{}\": {e}", rule.tool),
                );
            }
            if tool.starts_with("mcp__") || tool.starts_with("a2a__") {
                if let Err(e) = globset::Glob::new(tool) {
                    return bad(
                        &format!("permissions.rules[{i}].tool"),
                        format!("invalid glob \"{tool}\": {e}"),
                    );
                }
            } else if tool != SUBAGENT_TOOL && tool.parse::<service_ipc::BuiltinTool>().is_err() {
                return bad(
                    &format!("permissions.rules[{i}].tool"),
                    format!(
                        "unknown tool \"{tool}\"; expected a builtin tool ({}), Agent or Agent(subagent) for \
                         subagents, an MCP tool name or glob such as mcp__git__*, or an A2A agent's tool such as \
                         a2a__helper",
                        service_ipc::BuiltinTool::ALL.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                );
            }
            if let Some(pattern) = &rule.pattern {
                if let Err(e) = globset::Glob::new(pattern) {
                    return bad(
                        &format!("permissions.rules[{i}].match"),
                        format!(
                            "invalid glob \"{pattern}\" in the rule for {}: {e}",
                            rule.tool
                        ),
                    );
                }
            }
        }
        Ok(())
    }
}

/// The tool that hands a task to a subagent, which permission rules may name (`Agent`, `Agent(reviewer)`).
pub const SUBAGENT_TOOL: &str = "Agent";
