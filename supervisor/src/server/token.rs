//! The generated server token: random, stored with mode 0600 at `$SERVICE_HOME/serve.token` for the CLI, the TUI
//! and local tools, and never logged.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;

use std::sync::Arc;

use super::live::LiveSecret;
use super::{Auth, ServeError};
use crate::home::ServiceHome;

/// The server token `auth` asks for, and the token when a new one was generated: generated tokens and
/// `SERVICE_TOKEN_FILE` are read again when their file changes (see `live`).
pub fn resolve(
    auth: Auth,
    home: &ServiceHome,
) -> Result<(Option<Arc<LiveSecret>>, Option<String>), ServeError> {
    const NAME: &str = "server token";
    let from_home = |t: &str| {
        LiveSecret::from_file(NAME, t, home.token_file(), |path| {
            stored_at(path).ok_or_else(|| {
                "it must hold 64 hex digits and be a regular file of this user's, mode 0600".into()
            })
        })
    };
    Ok(match auth {
        Auth::None => (None, None),
        Auth::Token(t) => (Some(Arc::new(LiveSecret::fixed(NAME, &t))), None),
        Auth::TokenFile { token, file } => (
            Some(Arc::new(LiveSecret::from_file(
                NAME,
                &token,
                file,
                super::live::read_secret_file,
            ))),
            None,
        ),
        Auth::Generated { rotate } => match stored(home).filter(|_| !rotate) {
            // Kept across restarts, so that signed-in browsers and scripts keep working.
            Some(t) => (Some(Arc::new(from_home(&t))), None),
            None => {
                let t = generate();
                store(home, &t)?;
                (Some(Arc::new(from_home(&t))), Some(t))
            }
        },
    })
}

/// The first 16 hex digits of the token's SHA-256: enough to tell two tokens apart in a listing, nothing to
/// recover either from.
pub fn fingerprint(token: &str) -> String {
    use sha2::Digest;
    hex::encode(&sha2::Sha256::digest(token.as_bytes())[..8])
}

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
    stored_at(&home.token_file())
}

fn stored_at(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).ok()?;
    let ours =
        meta.is_file() && meta.mode() & 0o077 == 0 && meta.uid() == nix::unistd::geteuid().as_raw();
    let token = std::fs::read_to_string(path).ok()?.trim().to_string();
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
