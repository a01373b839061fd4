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

    /// Makes the store root if missing, private to this user (0700, or 0710 with the Landlock backend's sandbox
    /// group): nothing below it (installed bundles, the layout
    /// cache, sessions, sockets) is any other local user's to read or run. A root this user owns with wider modes
    /// is narrowed where the file system lets it (a read-only store is left as it is, and says so at its first
    /// write); one owned by someone else is left alone.
    pub fn secure(&self) -> std::io::Result<()> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.root)?;
        let meta = std::fs::metadata(&self.root)?;
        // Group search alone is kept: the Landlock backend gives it to a root supervisor's sandbox group, whose
        // sandboxes reach their own directories here by path (see `sandbox::landlock_launch`).
        let wider = !matches!(meta.mode() & 0o077, 0 | 0o010);
        if meta.uid() == nix::unistd::geteuid().as_raw() && wider {
            let _ = std::fs::set_permissions(&self.root, std::fs::Permissions::from_mode(0o700));
        }
        Ok(())
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

    /// `run`: per-worker directories and prepared sandbox files.
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }

    /// `hooks/`: the operator's hook scripts, which every sandbox sees read-only (see `crate::hooks`).
    pub fn operator_hooks_dir(&self) -> PathBuf {
        self.root().join("hooks")
    }

    /// `run/sandbox`: files every sandbox of this home shares, prepared once (see `sandbox::etc_snapshot`).
    pub fn sandbox_cache(&self) -> PathBuf {
        self.run_dir().join("sandbox")
    }

    /// `run/sandbox-backend`: the sandbox backend `auto` found here, and under what (see `sandbox::backend`). A file
    /// of `run/` itself, which no sandbox is given.
    pub fn backend_file(&self) -> PathBuf {
        self.run_dir().join("sandbox-backend")
    }

    /// `cluster`: written by `serve --store postgres://…`, naming the database that holds the records of the
    /// sessions whose directories are here. A command that opens this home with its own files store (a `sessions
    /// prune` from a cron job) reads it, and leaves those directories alone.
    pub fn cluster_file(&self) -> PathBuf {
        self.root.join("cluster")
    }

    /// `serve.token`: the token a server generated (mode 0600), read by `--remote` clients.
    pub fn token_file(&self) -> PathBuf {
        self.root.join("serve.token")
    }

    /// The token of a local server: `SERVICE_TOKEN`, else the one a server stored in `serve.token`.
    pub fn client_token(&self) -> Option<String> {
        std::env::var("SERVICE_TOKEN")
            .ok()
            .filter(|t| !t.is_empty())
            .or_else(|| {
                std::fs::read_to_string(self.token_file())
                    .ok()
                    .map(|t| t.trim().to_string())
                    .filter(|t| !t.is_empty())
            })
    }
}
