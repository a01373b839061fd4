//! Sandbox profiles: the embedded data files of `sandbox-profiles/`, and their resolution against the host into a
//! list of mounts. Each embedded file is parsed once per process, not at every sandboxed worker start.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use service_ipc::{SandboxMode, SystemToolsMode};

use crate::bundle::parse;

/// A `sandbox-profiles/modes/*.json5` file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModeProfile {
    /// False runs the worker on the host.
    pub confined: bool,
    /// Whether the workspace is mounted read-write.
    pub workspace_writable: bool,
}

/// A `sandbox-profiles/system_tools/*.json5` file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolsProfile {
    /// Host directories bound read-only at the same path.
    pub ro_paths: Vec<String>,
    /// Paths recreated as symlinks where the host path is a symlink.
    pub symlinks: Vec<String>,
    /// Single host files (or small directories) bound read-only.
    pub etc_files: Vec<String>,
    /// Like `etc_files`, bound only when the network is allowed (each bind costs ~70 µs of start-up).
    pub network_files: Vec<String>,
    /// Bind the executables listed in `sandbox.executables`.
    pub listed_executables: bool,
}

fn mode_text(mode: SandboxMode) -> (&'static str, &'static str) {
    match mode {
        SandboxMode::ReadOnly => (
            "modes/read_only.json5",
            include_str!("../../../sandbox-profiles/modes/read_only.json5"),
        ),
        SandboxMode::WorkspaceWrite => (
            "modes/workspace_write.json5",
            include_str!("../../../sandbox-profiles/modes/workspace_write.json5"),
        ),
        SandboxMode::DangerFullAccess => (
            "modes/danger_full_access.json5",
            include_str!("../../../sandbox-profiles/modes/danger_full_access.json5"),
        ),
    }
}

fn tools_text(mode: SystemToolsMode) -> (&'static str, &'static str) {
    match mode {
        SystemToolsMode::Explicit => (
            "system_tools/explicit.json5",
            include_str!("../../../sandbox-profiles/system_tools/explicit.json5"),
        ),
        SystemToolsMode::Standard => (
            "system_tools/standard.json5",
            include_str!("../../../sandbox-profiles/system_tools/standard.json5"),
        ),
        SystemToolsMode::All => (
            "system_tools/all.json5",
            include_str!("../../../sandbox-profiles/system_tools/all.json5"),
        ),
    }
}

/// The profile of a sandbox mode.
pub fn mode_profile(mode: SandboxMode) -> Result<ModeProfile, String> {
    static PARSED: [OnceLock<Result<ModeProfile, String>>; SandboxMode::ALL.len()] =
        [const { OnceLock::new() }; SandboxMode::ALL.len()];
    let slot = SandboxMode::ALL.iter().position(|m| *m == mode);
    parsed_once(&PARSED[slot.unwrap_or(0)], mode_text(mode))
}

/// The profile of a system tools mode.
pub fn tools_profile(mode: SystemToolsMode) -> Result<ToolsProfile, String> {
    static PARSED: [OnceLock<Result<ToolsProfile, String>>; SystemToolsMode::ALL.len()] =
        [const { OnceLock::new() }; SystemToolsMode::ALL.len()];
    let slot = SystemToolsMode::ALL.iter().position(|m| *m == mode);
    parsed_once(&PARSED[slot.unwrap_or(0)], tools_text(mode))
}

/// The embedded file `(name, text)` parsed on first use, from `cache` afterwards.
fn parsed_once<T: DeserializeOwned + Clone>(
    cache: &OnceLock<Result<T, String>>,
    (name, text): (&str, &str),
) -> Result<T, String> {
    cache
        .get_or_init(|| {
            parse::json5_value(name, text)
                .and_then(|v| parse::typed(name, v))
                .map_err(|e| e.to_string())
        })
        .clone()
}

/// One mount of the sandbox filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    /// `--ro-bind src dest`.
    ReadOnly {
        /// Host path.
        src: PathBuf,
        /// Path inside.
        dest: PathBuf,
    },
    /// `--bind src dest`.
    ReadWrite {
        /// Host path.
        src: PathBuf,
        /// Path inside.
        dest: PathBuf,
    },
    /// `--symlink target link`.
    Symlink {
        /// What the link points to.
        target: PathBuf,
        /// The link.
        link: PathBuf,
    },
}

/// Resolves the system tools profile against the host: which paths exist, which are symlinks, and where each
/// listed executable lives. Fails when a listed executable cannot be found, naming it.
pub fn host_mounts(
    tools: &ToolsProfile,
    executables: &[String],
    network: bool,
) -> Result<Vec<Mount>, String> {
    let mut mounts = Vec::new();
    for p in &tools.ro_paths {
        let path = Path::new(p);
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir()) {
            mounts.push(Mount::ReadOnly {
                src: path.into(),
                dest: path.into(),
            });
        }
    }
    for p in &tools.symlinks {
        if let Ok(target) = std::fs::read_link(p) {
            mounts.push(Mount::Symlink {
                target,
                link: p.into(),
            });
        }
    }
    let net_files = if network {
        tools.network_files.as_slice()
    } else {
        &[]
    };
    for f in tools.etc_files.iter().chain(net_files) {
        // /etc/resolv.conf and friends are often symlinks into /run: bind what they point to.
        if let Ok(real) = std::fs::canonicalize(f) {
            mounts.push(Mount::ReadOnly {
                src: real,
                dest: f.into(),
            });
        }
    }
    if tools.listed_executables {
        for exe in executables {
            let found = find_executable(exe).ok_or_else(|| {
                format!("sandbox.executables: \"{exe}\" is not an executable on the host PATH")
            })?;
            let real =
                std::fs::canonicalize(&found).map_err(|e| format!("{}: {e}", found.display()))?;
            mounts.push(Mount::ReadOnly {
                src: real,
                dest: found,
            });
        }
    }
    Ok(mounts)
}

fn find_executable(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        return Some(PathBuf::from(name)).filter(|p| p.is_file());
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn every_embedded_profile_parses() {
        for mode in SandboxMode::ALL {
            let p = mode_profile(*mode).unwrap();
            assert_eq!(p.confined, *mode != SandboxMode::DangerFullAccess);
            assert_eq!(p.workspace_writable, *mode != SandboxMode::ReadOnly);
        }
        for mode in SystemToolsMode::ALL {
            let p = tools_profile(*mode).unwrap();
            assert!(p.listed_executables);
            let exposes_bin = p.ro_paths.iter().any(|p| p == "/usr");
            assert_eq!(exposes_bin, *mode != SystemToolsMode::Explicit);
            for hidden in ["/home", "/root", "/tmp", "/var", "/etc/shadow"] {
                assert!(
                    !p.ro_paths.iter().chain(&p.etc_files).any(|x| x == hidden),
                    "{mode} exposes {hidden}"
                );
            }
        }
    }

    #[test]
    fn a_missing_listed_executable_is_named() {
        let tools = tools_profile(SystemToolsMode::Explicit).unwrap();
        let err = host_mounts(&tools, &["no-such-tool-xyz".into()], false).unwrap_err();
        assert_eq!(
            err,
            "sandbox.executables: \"no-such-tool-xyz\" is not an executable on the host PATH"
        );
    }
}
