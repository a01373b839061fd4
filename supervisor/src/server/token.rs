//! The generated server token: random, stored with mode 0600 at `$SERVICE_HOME/serve.token` for the CLI, the TUI
//! and local tools, and never logged.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use super::ServeError;
use crate::home::ServiceHome;

/// 256 random bits as hex.
pub fn generate() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The token of `serve.token` when it holds one this process may keep using: 64 hex digits, in a regular file only
/// its owner (this user) may read.
pub fn stored(home: &ServiceHome) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let path = home.token_file();
    let meta = std::fs::symlink_metadata(&path).ok()?;
    let ours =
        meta.is_file() && meta.mode() & 0o077 == 0 && meta.uid() == nix::unistd::geteuid().as_raw();
    let token = std::fs::read_to_string(&path).ok()?.trim().to_string();
    (ours && token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit())).then_some(token)
}

/// Writes `token` to `serve.token` (0600, through a temporary file and a rename).
pub fn store(home: &ServiceHome, token: &str) -> Result<(), ServeError> {
    let path = home.token_file();
    let tmp = path.with_extension("token.tmp");
    let err = |source| ServeError::Token {
        path: path.clone(),
        source,
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let _ = std::fs::remove_file(&tmp);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(err)?;
    file.write_all(token.as_bytes()).map_err(err)?;
    file.sync_all().map_err(err)?;
    std::fs::rename(&tmp, &path).map_err(err)
}
