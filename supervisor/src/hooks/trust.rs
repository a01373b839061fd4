//! Which project hooks files the user trusted: `hooks-trusted.json` in the store, the project directory and the
//! digest of the file's content as it was trusted. Trust names content, not a path: an edit turns the hooks off.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::home::ServiceHome;

/// The trust file, in the store's root.
const FILE: &str = "hooks-trusted.json";

/// The `sha256:` digest of a hooks file's content.
pub fn digest(content: &[u8]) -> String {
    crate::bundle::archive::sha256_digest(content)
}

fn path(home: &ServiceHome) -> PathBuf {
    home.root().join(FILE)
}

fn key(dir: &Path) -> String {
    dir.canonicalize()
        .unwrap_or_else(|_| dir.to_path_buf())
        .display()
        .to_string()
}

fn read(home: &ServiceHome) -> BTreeMap<String, String> {
    std::fs::read_to_string(path(home))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// Whether the user trusted the hooks file of `dir` with this digest.
pub fn is_trusted(home: &ServiceHome, dir: &Path, digest: &str) -> bool {
    read(home).get(&key(dir)).is_some_and(|d| d == digest)
}

/// Trusts the hooks file of `dir` whose content has `digest`; written whole and renamed into place.
pub fn trust(home: &ServiceHome, dir: &Path, digest: &str) -> std::io::Result<()> {
    let mut all = read(home);
    all.insert(key(dir), digest.to_string());
    let text = serde_json::to_string_pretty(&all).map_err(std::io::Error::other)?;
    let file = path(home);
    let tmp = file.with_extension("json.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &file)
}
