//! `service.bundle.json5`: the bundle manifest and its validation.

use serde::{Deserialize, Serialize};
use service_ipc::{BuiltinTool, SandboxMode, SystemToolsMode};

use super::error::{BundleError, Result};
use super::parse;

/// File name of the manifest inside a bundle.
pub const MANIFEST_FILE: &str = "service.bundle.json5";
/// The only manifest version this build reads.
pub const MANIFEST_VERSION: &str = "service.bundle/v1";

/// The bundle manifest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Must be `service.bundle/v1`.
    pub manifest_version: String,
    /// Bundle id: lowercase letters, digits, `-`, `_`, `.`; starts with a letter or digit; at most 64 characters.
    pub id: String,
    /// Semantic version.
    pub version: String,
    /// Display name; defaults to the id.
    #[serde(default)]
    pub name: Option<String>,
    /// One-line description.
    #[serde(default)]
    pub description: Option<String>,
    /// Builtin tools offered to the model.
    pub tools: Vec<BuiltinTool>,
    /// Confinement of the worker.
    #[serde(default)]
    pub sandbox: SandboxSpec,
}

/// `sandbox` of the manifest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxSpec {
    /// Confinement mode; `read_only` when absent.
    #[serde(default = "default_mode")]
    pub mode: SandboxMode,
    /// What the sandboxed commands may reach.
    #[serde(default)]
    pub permissions: SandboxPermissions,
    /// Which host executables are visible; `standard` when absent.
    #[serde(default = "default_tools_mode")]
    pub system_tools_mode: SystemToolsMode,
    /// Executables bound in under `explicit` (names looked up in the host PATH, or absolute paths).
    #[serde(default)]
    pub executables: Vec<String>,
    /// Resource limits of the worker and everything it starts.
    #[serde(default)]
    pub resources: Resources,
}

/// `sandbox.permissions`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxPermissions {
    /// Hosts the sandbox may reach through the egress proxy: `"pypi.org"`, `"*.pythonhosted.org"`,
    /// `"api.github.com:443"`, `"*"` for any public host; `[]` (the default) for none.
    #[serde(default)]
    pub network: Vec<String>,
}

/// `sandbox.resources`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// CPU cores.
    #[serde(default = "default_cpu")]
    pub cpu: u32,
    /// Memory limit in MiB.
    #[serde(default = "default_memory_mb")]
    pub memory_mb: u64,
}

fn default_mode() -> SandboxMode {
    SandboxMode::ReadOnly
}
fn default_tools_mode() -> SystemToolsMode {
    SystemToolsMode::Standard
}
fn default_cpu() -> u32 {
    1
}
fn default_memory_mb() -> u64 {
    512
}

impl Default for SandboxSpec {
    fn default() -> Self {
        SandboxSpec {
            mode: default_mode(),
            permissions: SandboxPermissions::default(),
            system_tools_mode: default_tools_mode(),
            executables: Vec::new(),
            resources: Resources::default(),
        }
    }
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpu: default_cpu(),
            memory_mb: default_memory_mb(),
        }
    }
}

impl SandboxPermissions {
    /// True when commands may reach some host (through the egress proxy).
    pub fn network_enabled(&self) -> bool {
        !self.network.is_empty()
    }

    /// The parsed host patterns; the error carries the index of the first malformed entry.
    pub fn hosts(
        &self,
    ) -> std::result::Result<
        Vec<crate::egress::HostPattern>,
        (usize, crate::egress::policy::PatternError),
    > {
        crate::egress::policy::parse_all(&self.network)
    }
}

impl Manifest {
    /// Parses and validates manifest text.
    pub fn parse(text: &str) -> Result<Manifest> {
        let value = parse::json5_value(MANIFEST_FILE, text)?;
        let manifest: Manifest = parse::typed(MANIFEST_FILE, value)?;
        manifest.validate()?;
        Ok(manifest)
    }

    /// The parsed semantic version (validated by `parse`).
    pub fn semver(&self) -> Result<semver::Version> {
        parse_version(&self.version)
    }

    /// Display name: `name`, else the id.
    pub fn display_name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.id)
    }

    fn validate(&self) -> Result<()> {
        let bad =
            |key: &str, message: String| Err(BundleError::invalid(MANIFEST_FILE, key, message));
        if self.manifest_version != MANIFEST_VERSION {
            return bad(
                "manifest_version",
                format!(
                    "unsupported value \"{}\"; expected \"{MANIFEST_VERSION}\"",
                    self.manifest_version
                ),
            );
        }
        if let Err(message) = check_id(&self.id) {
            return bad("id", message);
        }
        parse_version(&self.version)?;
        for (i, tool) in self.tools.iter().enumerate() {
            if self.tools[..i].contains(tool) {
                return bad(&format!("tools[{i}]"), format!("{tool} is listed twice"));
            }
        }
        if let Err((i, e)) = self.sandbox.permissions.hosts() {
            return bad(&format!("sandbox.permissions.network[{i}]"), e.to_string());
        }
        if self.sandbox.resources.cpu == 0 {
            return bad("sandbox.resources.cpu", "must be at least 1".into());
        }
        if self.sandbox.resources.memory_mb < 16 {
            return bad("sandbox.resources.memory_mb", "must be at least 16".into());
        }
        for (i, exe) in self.sandbox.executables.iter().enumerate() {
            if exe.is_empty() || exe.contains('\0') {
                return bad(
                    &format!("sandbox.executables[{i}]"),
                    "must be a command name or an absolute path".into(),
                );
            }
        }
        Ok(())
    }
}

/// Checks a bundle id: safe as one path component, stable across file systems.
pub fn check_id(id: &str) -> std::result::Result<(), String> {
    let valid_chars = id
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '-' | '_' | '.'));
    let starts_well = id
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if !valid_chars || !starts_well || id.len() > 64 {
        return Err(format!(
            "invalid id \"{id}\"; use 1 to 64 lowercase letters, digits, '-', '_' or '.', starting with a letter or \
             digit"
        ));
    }
    Ok(())
}

fn parse_version(version: &str) -> Result<semver::Version> {
    semver::Version::parse(version).map_err(|e| {
        BundleError::invalid(
            MANIFEST_FILE,
            "version",
            format!("invalid semantic version \"{version}\": {e}; expected for example \"1.2.0\""),
        )
    })
}
