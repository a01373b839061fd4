//! The bundles the binary carries, `builtin/<name>`: they resolve without a build, and `bundles` lists them. The
//! store installs one under the `builtin` namespace on first use, and again when this binary carries other
//! contents (see `store::install_builtins`).

use std::path::Path;

use super::error::{BundleError, Result};

/// The namespace of the built-in bundles; nothing else installs into it.
pub const NAMESPACE: &str = "builtin";

/// The bundle a run, the TUI or ACP uses when none is named and no `default_bundle` is set: the coding agent.
pub const DEFAULT: &str = "builtin/coder";

/// One built-in bundle: its name and its files (relative path, text).
pub struct Builtin {
    /// The bundle id, `coder` for `builtin/coder`.
    pub name: &'static str,
    /// Its files.
    pub files: &'static [(&'static str, &'static str)],
}

/// Every built-in bundle.
pub const ALL: &[Builtin] = &[Builtin {
    name: "coder",
    files: &[
        (
            "service.bundle.json5",
            include_str!("../../builtin/coder/service.bundle.json5"),
        ),
        ("agent.yaml", include_str!("../../builtin/coder/agent.yaml")),
        ("README.md", include_str!("../../builtin/coder/README.md")),
    ],
}];

/// The built-in bundle `name`.
pub fn get(name: &str) -> Option<&'static Builtin> {
    ALL.iter().find(|b| b.name == name)
}

impl Builtin {
    /// Writes its files under `dir`.
    pub fn write_to(&self, dir: &Path) -> Result<()> {
        for (rel, text) in self.files {
            let path = dir.join(rel);
            if let Some(parent) = path.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| BundleError::io("cannot create", parent, e))?;
            }
            std::fs::write(&path, text).map_err(|e| BundleError::io("cannot write", &path, e))?;
        }
        Ok(())
    }

    /// Whether `dir` holds exactly these contents for each of its files.
    pub fn written_in(&self, dir: &Path) -> bool {
        self.files.iter().all(|(rel, text)| {
            std::fs::read(dir.join(rel)).is_ok_and(|have| have == text.as_bytes())
        })
    }

    /// Its version, from its manifest.
    pub fn version(&self) -> Option<String> {
        let (_, manifest) = self
            .files
            .iter()
            .find(|(rel, _)| *rel == super::manifest::MANIFEST_FILE)?;
        let value = super::parse::json5_value(super::manifest::MANIFEST_FILE, manifest).ok()?;
        value["version"].as_str().map(String::from)
    }
}
