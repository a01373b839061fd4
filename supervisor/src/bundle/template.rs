//! The starter bundle written by `service-rs init`.

use std::path::Path;

use service_ipc::{BuiltinTool, ExecutorKind};

use super::error::{BundleError, Result};
use super::manifest::check_id;

/// The model a starter bundle is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Starter {
    /// Anthropic's API (key in ANTHROPIC_API_KEY).
    #[default]
    Anthropic,
    /// OpenAI's API (key in OPENAI_API_KEY), or any OpenAI-compatible server.
    Openai,
    /// An OpenAI-compatible server on this machine, at Ollama's address.
    Local,
    /// An offline scripted model that answers from a script in resources/.
    Scripted,
}

impl Starter {
    /// The `provider/name` the bundle is written with.
    pub fn model(self) -> &'static str {
        match self {
            Starter::Anthropic => "anthropic/claude-sonnet-4-5",
            Starter::Openai => "openai/gpt-4o-mini",
            Starter::Local => "openai/qwen2.5:7b",
            Starter::Scripted => "scripted/starter",
        }
    }

    /// The environment variable holding the key the model needs, if any.
    pub fn key_variable(self) -> Option<&'static str> {
        match self {
            Starter::Anthropic => Some("ANTHROPIC_API_KEY"),
            Starter::Openai => Some("OPENAI_API_KEY"),
            Starter::Local | Starter::Scripted => None,
        }
    }

    fn model_yaml(self) -> &'static str {
        match self {
            Starter::Anthropic => {
                r#"model:
  # Anthropic's API. The key comes from ANTHROPIC_API_KEY in the environment of service-rs, never from a
  # bundle file. Other choices: `service-rs init --provider openai|local|scripted`.
  provider: anthropic
  name: claude-sonnet-4-5
"#
            }
            Starter::Openai => {
                r#"model:
  # OpenAI's API; the key comes from OPENAI_API_KEY in the environment of service-rs. For another
  # OpenAI-compatible server, add `config: { base_url: ... }` with its /v1 root: llama.cpp's llama-server
  # http://127.0.0.1:8080/v1, vLLM http://127.0.0.1:8000/v1, Ollama http://127.0.0.1:11434/v1.
  provider: openai
  name: gpt-4o-mini
"#
            }
            Starter::Local => {
                r#"model:
  # An OpenAI-compatible server on this machine, here Ollama's address (run `ollama pull qwen2.5:7b` first).
  # llama.cpp's llama-server listens on http://127.0.0.1:8080/v1, vLLM on http://127.0.0.1:8000/v1; the name
  # is the model the server serves. No key is sent to a base URL the operator has not configured.
  provider: openai
  name: qwen2.5:7b
  config:
    base_url: http://127.0.0.1:11434/v1
"#
            }
            Starter::Scripted => {
                r#"model:
  # An offline scripted model: it replays resources/script.json5, so the bundle answers with no server and
  # no key. Edit the script, or switch to a real model (see `service-rs init --help`).
  provider: scripted
  name: starter
  config:
    script: resources/script.json5
"#
            }
        }
    }
}

/// Writes the starter bundle into `dir` (created if absent), with `starter`'s model. Refuses a non-empty `dir`
/// unless `force`. Returns the bundle id chosen from the directory name.
pub fn init(dir: &Path, force: bool, starter: Starter, executor: ExecutorKind) -> Result<String> {
    refuse_non_empty(dir, force)?;
    let id = id_from_dir(dir);
    let mut files = vec![
        ("service.bundle.json5", manifest_text(&id)),
        (
            "agent.yaml",
            format!(
                "{AGENT_HEAD}{}{}{AGENT_TAIL}",
                starter.model_yaml(),
                executor_yaml(executor)
            ),
        ),
        ("README.md", readme_text(&id)),
        ("skills/getting-started/SKILL.md", SKILL_MD.to_string()),
    ];
    if starter == Starter::Scripted {
        let script = match executor {
            ExecutorKind::React => SCRIPT,
            ExecutorKind::Codeact => CODEACT_SCRIPT,
        };
        files.push(("resources/script.json5", script.to_string()));
    }
    for sub in ["skills/getting-started", "resources"] {
        let path = dir.join(sub);
        std::fs::create_dir_all(&path).map_err(|e| BundleError::io("cannot create", &path, e))?;
    }
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| BundleError::io("cannot write", &path, e))?;
    }
    Ok(id)
}

/// Writes the built-in bundle `name` into `dir` (created if absent) as a project to change; refuses a non-empty
/// `dir` unless `force`. Returns its id.
pub fn init_from_builtin(dir: &Path, force: bool, name: &str) -> Result<String> {
    let builtin = super::builtin::get(name).ok_or_else(|| {
        BundleError::NotFound(format!(
            "no built-in bundle \"{name}\"; the templates are: {}",
            super::builtin::ALL
                .iter()
                .map(|b| b.name)
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })?;
    refuse_non_empty(dir, force)?;
    builtin.write_to(dir)?;
    Ok(builtin.name.to_string())
}

fn refuse_non_empty(dir: &Path, force: bool) -> Result<()> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).map_err(|e| BundleError::io("cannot read", dir, e))?;
        if entries.next().is_some() && !force {
            return Err(BundleError::NotEmpty(dir.to_path_buf()));
        }
    }
    Ok(())
}

/// A valid bundle id derived from the directory name (`my-agent` when nothing usable remains).
fn id_from_dir(dir: &Path) -> String {
    let base = std::fs::canonicalize(dir)
        .ok()
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
        .or_else(|| dir.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let cleaned: String = base
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = cleaned.trim_start_matches(['-', '_', '.']);
    let id: String = trimmed.chars().take(64).collect();
    if check_id(&id).is_ok() {
        id
    } else {
        "my-agent".into()
    }
}

fn manifest_text(id: &str) -> String {
    // The spec's starter lists the spec's tools; WebFetch reaches the network, and a bundle adds it by name.
    let tools: Vec<String> = BuiltinTool::ALL
        .iter()
        .filter(|t| **t != BuiltinTool::WebFetch)
        .map(|t| format!("\"{t}\""))
        .collect();
    format!(
        r#"// Bundle manifest. Reference: the Bundles chapter of the service-rs manual (docs/src/bundles.md).
{{
  manifest_version: "service.bundle/v1",
  id: "{id}",
  version: "0.1.0",
  name: "{id}",
  description: "A starter agent bundle.",
  // Builtin tools offered to the model. Remove the ones this agent should not have.
  tools: [{tools}],
  sandbox: {{
    // read_only: commands may read the workspace but not change it, so Write and Edit fail. workspace_write
    // lets the agent change files in its workspace; danger_full_access runs it unconfined on the host.
    mode: "read_only",
    permissions: {{
      // Hosts commands may reach, through the supervisor's egress proxy: "pypi.org", "*.pythonhosted.org",
      // "api.github.com:443". ["*"] is any public host (never the host's loopback or LAN); [] is no network.
      network: ["*"],
    }},
    // explicit | standard | all
    system_tools_mode: "standard",
  }},
}}
"#,
        tools = tools.join(", ")
    )
}

const AGENT_HEAD: &str =
    "# Agent definition: default model, executor, memory and tool permissions.\n";

fn executor_yaml(executor: ExecutorKind) -> &'static str {
    match executor {
        ExecutorKind::React => {
            "executor: react               # one JSON tool call per step; or codeact\n"
        }
        ExecutorKind::Codeact => {
            r#"# The model answers with a Python program that calls the tools (read, write, edit, bash, glob, grep, ...)
# through the module service_tools; the program runs in the sandbox, and what it prints is the next observation.
executor: codeact
codeact:
  timeout_ms: 120000           # one program's time limit; past it the program and all it started are killed
"#
        }
    }
}

const AGENT_TAIL: &str = r#"memory:
  provider: sliding_window
  window: 40                   # messages kept besides the system prompt
max_steps: 20
system_prompt: |
  You are a helpful agent. Use the tools you are given to inspect the workspace before you answer,
  and keep answers short.
permissions:
  default: allow               # allow | deny | ask, for calls no rule matches
  network: deny                # deny | ask, for hosts that sandbox.permissions.network does not list
  rules:
    - { tool: Bash, match: "rm *", action: ask }
    - { tool: Write, match: "/etc/**", action: deny }
"#;

const SCRIPT: &str = r#"// The replies of the scripted model. The first turn entry whose `when` occurs in the prompt answers it (an
// entry without `when` answers any prompt); the n-th model call of a turn gets replies[n]. In text,
// {{prompt}} is the prompt and {{last_tool_output}} the latest tool result.
{
  turns: [
    {
      when: "hello",
      replies: [{ text: "Hello! I am a scripted starter agent; ask me what is in this workspace." }],
    },
    {
      replies: [
        {
          reasoning: "I should look at the workspace before I answer.",
          tool_calls: [{ name: "Bash", arguments: { command: "echo \"files: $(ls -A | wc -l)\"; ls -A | head -20" } }],
        },
        { text: "You asked: \"{{prompt}}\". I looked in the workspace:\n{{last_tool_output}}" },
      ],
    },
  ],
}
"#;

const CODEACT_SCRIPT: &str = r#"// The replies of the scripted model, for the codeact executor: each reply's ```python block is a program that
// runs in the sandbox. The first turn entry whose `when` occurs in the prompt answers it; the n-th model call of a
// turn gets replies[n]. In text, {{prompt}} is the prompt and {{last_tool_output}} the last program's observation.
{
  turns: [
    {
      when: "hello",
      replies: [{ text: "Hello! I am a scripted starter agent that acts in Python; ask me what is in this workspace." }],
    },
    {
      replies: [
        { text: "I will look at the workspace first.\n\n```python\nprint(bash('echo \"files: $(ls -A | wc -l)\"; ls -A | head -20'))\n```" },
        { text: "You asked: \"{{prompt}}\". I looked in the workspace:\n{{last_tool_output}}" },
      ],
    },
  ],
}
"#;

const SKILL_MD: &str = r#"---
name: getting-started
description: How to explore an unfamiliar workspace before changing it.
---
1. List the files with Glob before reading any of them.
2. Read the README first, then the files it points to.
3. Summarise what you found in a few bullet points.
"#;

fn readme_text(id: &str) -> String {
    format!(
        r#"# {id}

An agent bundle for service-rs.

- `service.bundle.json5`: the manifest (id, version, tools, sandbox).
- `agent.yaml`: the default model, executor, memory and tool permission rules.
- `skills/<name>/SKILL.md`: skills listed to the model; front matter gives `name` and `description`.
- `resources/`: files the agent can read at run time.

The template is a development starting point, not a hardened policy: it allows the network and every builtin
tool. Tighten `sandbox` and `permissions` before you share it. Under `sandbox.mode: read_only` the Write and Edit
tools fail; set `workspace_write` to let the agent change its workspace.

```sh
service-rs build .                    # install into the local store
service-rs inspect {id}
service-rs run {id} --prompt "What is in this workspace?"
```
"#
    )
}
