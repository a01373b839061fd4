//! The starter bundle written by `service-rs init`.

use std::path::Path;

use service_ipc::BuiltinTool;

use super::error::{BundleError, Result};
use super::manifest::check_id;

/// Default model of a new bundle.
pub const TEMPLATE_PROVIDER: &str = "anthropic";
/// Default model name of a new bundle.
pub const TEMPLATE_MODEL: &str = "claude-sonnet-4-5";

/// Writes the starter bundle into `dir` (created if absent). Refuses a non-empty `dir` unless `force`.
/// Returns the bundle id chosen from the directory name.
pub fn init(dir: &Path, force: bool) -> Result<String> {
    if dir.exists() {
        let mut entries =
            std::fs::read_dir(dir).map_err(|e| BundleError::io("cannot read", dir, e))?;
        if entries.next().is_some() && !force {
            return Err(BundleError::NotEmpty(dir.to_path_buf()));
        }
    }
    let id = id_from_dir(dir);
    let files = [
        ("service.bundle.json5", manifest_text(&id)),
        ("agent.yaml", AGENT_YAML.to_string()),
        ("README.md", readme_text(&id)),
        ("skills/getting-started/SKILL.md", SKILL_MD.to_string()),
    ];
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
    let tools: Vec<String> = BuiltinTool::ALL
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect();
    format!(
        r#"// Bundle manifest. Reference: the README of service-rs.
{{
  manifest_version: "service.bundle/v1",
  id: "{id}",
  version: "0.1.0",
  name: "{id}",
  description: "A starter agent bundle.",
  // Builtin tools offered to the model. Remove the ones this agent should not have.
  tools: [{tools}],
  sandbox: {{
    // read_only | workspace_write | danger_full_access
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

const AGENT_YAML: &str = r#"# Agent definition: default model, executor, memory and tool permissions.
model:
  provider: anthropic          # reads the key from ANTHROPIC_API_KEY
  name: claude-sonnet-4-5
executor: react
memory:
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
tool. Tighten `sandbox` and `permissions` before you share it.

```sh
service-rs build .                    # install into the local store
service-rs inspect {id}
service-rs run {id} --prompt "What is in this workspace?"
```
"#
    )
}
