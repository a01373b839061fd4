//! The local store root (`$SERVICE_HOME`, default `~/.service`) and the paths below it.

use std::path::{Path, PathBuf};

/// Environment variable that overrides the store root.
pub const HOME_ENV: &str = "SERVICE_HOME";

/// The local store root and its layout (DESIGN.md section 8).
#[derive(Debug, Clone)]
pub struct ServiceHome {
    root: PathBuf,
}

impl ServiceHome {
    /// A store rooted at `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        ServiceHome { root: root.into() }
    }

    /// The store named by `$SERVICE_HOME`, else `~/.service`; None when neither can be determined.
    pub fn from_env() -> Option<Self> {
        match std::env::var_os(HOME_ENV) {
            Some(dir) if !dir.is_empty() => Some(Self::new(dir)),
            _ => std::env::var_os("HOME")
                .filter(|h| !h.is_empty())
                .map(|h| Self::new(Path::new(&h).join(".service"))),
        }
    }

    /// The store root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `bundles/installs`: one folder per namespace.
    pub fn installs(&self) -> PathBuf {
        self.root.join("bundles").join("installs")
    }

    /// `bundles/layouts`: OCI layouts unpacked for running, keyed by content digest.
    pub fn layout_cache(&self) -> PathBuf {
        self.root.join("bundles").join("layouts")
    }

    /// `sessions`: one folder per session.
    pub fn sessions(&self) -> PathBuf {
        self.root.join("sessions")
    }

    /// `run`: worker sockets.
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }
}
