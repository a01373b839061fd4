//! Secrets a node reads again while it serves: the server token (serve.token, or `SERVICE_TOKEN_FILE`), the metrics
//! token (`SERVICE_METRICS_TOKEN_FILE`) and the TLS certificate and key. When a file's content changes, the next
//! request is checked against the new secret and the old one stops working, without a restart; this is how an
//! operator rotates them (`service-rs tokens server --rotate`, a renewed certificate, a platform's mounted secret).
//! A file that cannot be read or holds no valid secret keeps the one in force and logs why, so a half-written file
//! neither locks everyone out nor lets anyone in.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::tls::LiveTls;

/// How often the files are read again.
pub const RELOAD_EVERY: Duration = Duration::from_secs(2);

/// Reads and checks a secret file: the secret, or why it is not one.
pub type ReadSecret = fn(&std::path::Path) -> Result<String, String>;

/// One secret and the file it comes from, when it comes from one.
pub struct LiveSecret {
    value: RwLock<Arc<str>>,
    source: Option<(PathBuf, ReadSecret)>,
    /// What the log calls it: "server token", "metrics token".
    name: &'static str,
    /// Why the last read failed, said once rather than at every read.
    failing: std::sync::Mutex<Option<String>>,
}

impl std::fmt::Debug for LiveSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveSecret")
            .field("name", &self.name)
            .field("file", &self.source.as_ref().map(|s| &s.0))
            .finish_non_exhaustive()
    }
}

impl LiveSecret {
    /// A secret given on the command line or in the environment: fixed until the node restarts.
    pub fn fixed(name: &'static str, value: &str) -> LiveSecret {
        LiveSecret {
            value: RwLock::new(Arc::from(value)),
            source: None,
            name,
            failing: Default::default(),
        }
    }

    /// A secret read from `file` (its content now is `value`), read again when the file changes.
    pub fn from_file(
        name: &'static str,
        value: &str,
        file: PathBuf,
        read: ReadSecret,
    ) -> LiveSecret {
        LiveSecret {
            value: RwLock::new(Arc::from(value)),
            source: Some((file, read)),
            name,
            failing: Default::default(),
        }
    }

    /// Whether `given` is the secret in force, compared in constant time.
    pub fn matches(&self, given: &[u8]) -> bool {
        let value = self.value.read().unwrap_or_else(|p| p.into_inner());
        crate::tenancy::token::same_secret(given, value.as_bytes())
    }

    fn reload(&self) {
        let Some((file, read)) = &self.source else {
            return;
        };
        let shown = file.display();
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match read(file) {
            Ok(new) => {
                *failing = None;
                let mut value = self.value.write().unwrap_or_else(|p| p.into_inner());
                if **value != *new {
                    *value = Arc::from(new.as_str());
                    tracing::info!(file = %shown, "the {} changed; the previous one no longer works", self.name);
                }
            }
            Err(why) if failing.as_deref() != Some(why.as_str()) => {
                tracing::warn!(file = %shown, "the {} was not reloaded: {why}; the one in force is kept", self.name);
                *failing = Some(why);
            }
            // Said already: once per cause, not at every read.
            Err(_) => {}
        }
    }
}

/// Why a secret file holds no secret.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    /// It could not be read.
    #[error("cannot read it: {0}")]
    Unreadable(#[from] std::io::Error),
    /// It holds nothing but whitespace.
    #[error("it is empty")]
    Empty,
    /// It holds more than the one line a secret is.
    #[error("it holds more than one line")]
    Lines,
}

/// The secret in a file as `*_FILE` variables name them: its content less trailing whitespace, one line, not
/// empty. `serve` reads them by this rule at start (`cli::secret_files`) and again while it runs.
pub fn secret_in(path: &std::path::Path) -> Result<String, SecretFileError> {
    let text = std::fs::read_to_string(path)?;
    match text.trim_end() {
        "" => Err(SecretFileError::Empty),
        v if v.contains('\n') => Err(SecretFileError::Lines),
        v => Ok(v.to_string()),
    }
}

/// [`secret_in`] as a [`ReadSecret`].
pub fn read_secret_file(path: &std::path::Path) -> Result<String, String> {
    secret_in(path).map_err(|e| e.to_string())
}

/// Reads every file-backed secret and the TLS files every `every` until `shutdown`.
pub async fn watch(
    secrets: Vec<Arc<LiveSecret>>,
    tls: Option<Arc<LiveTls>>,
    every: Duration,
    shutdown: CancellationToken,
) {
    if tls.is_none() && secrets.iter().all(|s| s.source.is_none()) {
        return;
    }
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                for secret in &secrets {
                    secret.reload();
                }
                if let Some(tls) = &tls {
                    tls.reload();
                }
            }
            _ = shutdown.cancelled() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_file_replaces_the_secret_and_a_broken_one_keeps_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "first\n").unwrap();
        let secret = LiveSecret::from_file("server token", "first", file.clone(), read_secret_file);
        assert!(secret.matches(b"first"));
        std::fs::write(&file, "second\n").unwrap();
        secret.reload();
        assert!(secret.matches(b"second") && !secret.matches(b"first"));
        for broken in ["", "\n", "a\nb\n"] {
            std::fs::write(&file, broken).unwrap();
            secret.reload();
            assert!(secret.matches(b"second"), "{broken:?}");
        }
        std::fs::remove_file(&file).unwrap();
        secret.reload();
        assert!(secret.matches(b"second"));
    }
}
