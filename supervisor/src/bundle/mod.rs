//! Bundles: parsing and validating their files, building, installing, OCI layouts and references.
//!
//! - [`manifest`], [`agent`], [`skills`]: the files of a bundle and their validation.
//! - [`archive`]: the deterministic tar that is both the OCI layer and the install source.
//! - [`store`]: installs under `$SERVICE_HOME/bundles/installs` and lists them.
//! - [`oci`]: writes and verifies OCI image layouts.
//! - [`reference`]: parses references and resolves them, the one place that does.
//! - [`oci_archive`]: a layout as one tar file (`export`, `import`).
//! - [`template`]: the starter bundle of `init`.
//! - [`unpack`]: unpacking a tar as a hostile archive (layers and imports).

pub mod a2a_agents;
pub mod agent;
pub mod archive;
pub mod builtin;
pub mod error;
pub mod hooks;
pub mod manifest;
pub mod mcp;
pub mod model;
pub mod oci;
pub mod oci_archive;
pub(crate) mod parse;
pub mod reference;
pub mod script;
pub mod skills;
pub mod store;
pub mod subagents;
pub mod template;
pub mod unpack;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use agent::AgentSpec;
pub use error::{BundleError, Result};
pub use manifest::{Manifest, SandboxSpec};
pub use reference::{resolve, BundleRef};
pub use skills::Skill;

use agent::AGENT_FILE;
use manifest::MANIFEST_FILE;

/// Where a loaded bundle came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// Installed in the local store under a namespace.
    Installed {
        /// Namespace, e.g. `local`.
        namespace: String,
    },
    /// An OCI layout directory, unpacked into the layout cache.
    Layout {
        /// The layout directory as given.
        #[schema(value_type = String)]
        path: PathBuf,
    },
    /// A bundle project directory used in place.
    Project {
        /// The project directory.
        #[schema(value_type = String)]
        path: PathBuf,
    },
}

/// A validated bundle on disk.
#[derive(Debug, Clone)]
pub struct Bundle {
    /// Directory holding the bundle files.
    pub root: PathBuf,
    /// Parsed manifest.
    pub manifest: Manifest,
    /// Parsed agent definition.
    pub agent: AgentSpec,
    /// Skills found under `skills/`.
    pub skills: Vec<Skill>,
    /// Where it came from.
    pub origin: Origin,
    /// `sha256:` digest of its content tar.
    pub digest: String,
}

/// Reads and validates the bundle files in `root` (manifest, agent, skills, the scripted provider's script).
pub fn load_files(root: &Path) -> Result<(Manifest, AgentSpec, Vec<Skill>)> {
    let manifest_path = root.join(MANIFEST_FILE);
    if !manifest_path.is_file() {
        return Err(BundleError::NotABundle {
            path: root.to_path_buf(),
            message: format!(
                "no {MANIFEST_FILE} here; create a bundle with `service-rs init <dir>`"
            ),
        });
    }
    let text = read_text(&manifest_path)?;
    let manifest = Manifest::parse(&text)?;
    let agent_path = root.join(AGENT_FILE);
    if !agent_path.is_file() {
        return Err(BundleError::NotABundle {
            path: root.to_path_buf(),
            message: format!("no {AGENT_FILE} here; every bundle needs one beside {MANIFEST_FILE}"),
        });
    }
    let agent = AgentSpec::parse(&read_text(&agent_path)?)?;
    if let Some(script) = agent.script_path() {
        if !root.join(script).is_file() {
            return Err(BundleError::invalid(
                AGENT_FILE,
                "model.config.script",
                format!("script file \"{script}\" does not exist in the bundle"),
            ));
        }
        script::Script::load(root, script)?;
    }
    let mut agent = agent;
    let hooks_path = root.join(hooks::BUNDLE_HOOKS_FILE);
    if hooks_path.is_file() {
        let file: hooks::HooksFile = serde_json::from_str(&read_text(&hooks_path)?)
            .map_err(|e| BundleError::invalid(hooks::BUNDLE_HOOKS_FILE, "hooks", e.to_string()))?;
        hooks::validate(&file.hooks, false).map_err(|(key, why)| {
            BundleError::invalid(hooks::BUNDLE_HOOKS_FILE, format!("hooks.{key}"), why)
        })?;
        hooks::merge(&mut agent.hooks, file.hooks);
    }
    let skills = skills::scan(root)?;
    Ok((manifest, agent, skills))
}

/// Loads a bundle project directory in place, computing its digest from its content.
pub fn load_project(root: &Path) -> Result<Bundle> {
    let (manifest, agent, skills) = load_files(root)?;
    let digest = archive::sha256_digest(&archive::pack(root)?);
    Ok(Bundle {
        root: root.to_path_buf(),
        manifest,
        agent,
        skills,
        origin: Origin::Project {
            path: root.to_path_buf(),
        },
        digest,
    })
}

fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| BundleError::io("cannot read", path, e))
}

/// Metadata of a bundle as `inspect --json` and `bundles --json` print it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BundleInfo {
    /// Bundle id.
    pub id: String,
    /// Version.
    pub version: String,
    /// Namespace when installed.
    pub namespace: Option<String>,
    /// The reference that names exactly this bundle.
    pub reference: String,
    /// Display name.
    pub name: String,
    /// Description.
    pub description: Option<String>,
    /// Directory holding the files; shown to the store's operator only (an admin token), never to a tenant.
    #[schema(value_type = Option<String>)]
    #[serde(default, skip_serializing_if = "is_hidden")]
    pub path: PathBuf,
    /// Content digest.
    pub digest: String,
    /// Where it came from.
    pub origin: Origin,
    /// Default model.
    pub model: agent::AgentModel,
    /// Executor.
    pub executor: service_ipc::ExecutorKind,
    /// Memory settings.
    pub memory: agent::MemorySpec,
    /// Tools offered to the model.
    pub tools: Vec<service_ipc::BuiltinTool>,
    /// Sandbox settings.
    pub sandbox: SandboxSpec,
    /// Skill names.
    pub skills: Vec<String>,
    /// MCP servers, by name, as agent.yaml declares them.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub mcp_servers: std::collections::BTreeMap<String, mcp::McpServerSpec>,
    /// Remote A2A agents the bundle calls, as agent.yaml declares them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub a2a_agents: Vec<a2a_agents::A2aAgentSpec>,
    /// Subagents the `Agent` tool may call, as agent.yaml declares them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagents: Vec<subagents::SubagentEntry>,
    /// Set on the store's `default_bundle` (config.toml) in `GET /bundles`, which a new-session picker starts on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,
}

impl BundleInfo {
    /// As a client may see it: the store's paths only for an admin.
    pub fn for_caller(mut self, admin: bool) -> BundleInfo {
        if !admin {
            self.path = PathBuf::new();
        }
        self
    }
}

fn is_hidden(path: &std::path::Path) -> bool {
    path.as_os_str().is_empty()
}

impl Bundle {
    /// The reference that names exactly this bundle.
    pub fn reference(&self) -> String {
        match &self.origin {
            Origin::Installed { namespace } => {
                format!("{namespace}/{}:{}", self.manifest.id, self.manifest.version)
            }
            Origin::Layout { path } | Origin::Project { path } => path.display().to_string(),
        }
    }

    /// Metadata for display.
    pub fn info(&self) -> BundleInfo {
        BundleInfo {
            id: self.manifest.id.clone(),
            version: self.manifest.version.clone(),
            namespace: match &self.origin {
                Origin::Installed { namespace } => Some(namespace.clone()),
                _ => None,
            },
            reference: self.reference(),
            name: self.manifest.display_name().to_string(),
            description: self.manifest.description.clone(),
            path: self.root.clone(),
            digest: self.digest.clone(),
            origin: self.origin.clone(),
            model: self.agent.model.clone(),
            executor: self.agent.executor,
            memory: self.agent.memory.clone(),
            tools: self.manifest.tools.clone(),
            sandbox: self.manifest.sandbox.clone(),
            skills: self.skills.iter().map(|s| s.name.clone()).collect(),
            mcp_servers: self.agent.mcp_servers.clone(),
            a2a_agents: self.agent.a2a_agents.clone(),
            subagents: self.agent.subagents.clone(),
            default: false,
        }
    }
}
