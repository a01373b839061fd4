//! Session names in the embedded store: `$SERVICE_HOME/names/<sha256 of the name>` is a symbolic link whose target
//! is the session id. Creating a link is atomic, so the first of two racing claims keeps the name; a client's name
//! never becomes a path, since only its hash is. Each session lists the links it holds in `names` in its folder, so
//! deleting it removes them.

use std::io::Write;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::home::ServiceHome;
use crate::runtime::error::{Result, RuntimeError};

/// The link for `name`.
fn link(home: &ServiceHome, name: &str) -> PathBuf {
    let hash = hex::encode(Sha256::digest(name.as_bytes()));
    home.root().join("names").join(hash)
}

/// The session `link` points at, when that session still exists.
fn target(home: &ServiceHome, link: &Path) -> Option<String> {
    let id = std::fs::read_link(link).ok()?.to_str()?.to_string();
    home.sessions()
        .join(&id)
        .join("session.json")
        .is_file()
        .then_some(id)
}

/// Names session `id` `name` unless a live session has it; returns the session that has it.
pub(super) fn claim(home: &ServiceHome, name: &str, id: &str) -> Result<String> {
    let path = link(home, name);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| RuntimeError::io("cannot create", dir, e))?;
    }
    for _ in 0..2 {
        match std::os::unix::fs::symlink(id, &path) {
            Ok(()) => {
                remember(home, id, &path)?;
                return Ok(id.to_string());
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                if let Some(owner) = target(home, &path) {
                    return Ok(owner);
                }
                // Left by a session that is gone: the name is free again.
                let _ = std::fs::remove_file(&path);
            }
            Err(e) => return Err(RuntimeError::io("cannot create", &path, e)),
        }
    }
    target(home, &path).ok_or_else(|| {
        RuntimeError::io(
            "cannot create",
            &path,
            std::io::Error::other("the name changed hands while it was claimed"),
        )
    })
}

/// The session named `name`.
pub(super) fn find(home: &ServiceHome, name: &str) -> Option<String> {
    target(home, &link(home, name))
}

/// Notes in the session's folder that it holds `link`.
fn remember(home: &ServiceHome, id: &str, link: &Path) -> Result<()> {
    let list = home.sessions().join(id).join("names");
    let line = format!("{}\n", link.display());
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&list)
        .and_then(|mut f| f.write_all(line.as_bytes()))
        .map_err(|e| RuntimeError::io("cannot write", &list, e))
}

/// Removes the links session `id` holds (before its folder goes).
pub(super) fn forget(home: &ServiceHome, id: &str) {
    let Ok(list) = std::fs::read_to_string(home.sessions().join(id).join("names")) else {
        return;
    };
    let names = home.root().join("names");
    for line in list.lines() {
        let path = Path::new(line);
        // Only links under names/ that still point at this session: the list is in a folder code in the sandbox
        // never sees, but a link may have passed to another session since.
        if path.parent() == Some(names.as_path())
            && std::fs::read_link(path).is_ok_and(|t| t == Path::new(id))
        {
            let _ = std::fs::remove_file(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home_with(ids: &[&str]) -> (tempfile::TempDir, ServiceHome) {
        let dir = tempfile::tempdir().unwrap();
        let home = ServiceHome::new(dir.path().to_path_buf());
        for id in ids {
            let d = home.sessions().join(id);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("session.json"), "{}").unwrap();
        }
        (dir, home)
    }

    #[test]
    fn the_first_session_to_claim_a_name_keeps_it() {
        let (_d, home) = home_with(&["a", "b"]);
        assert_eq!(claim(&home, "ctx/../../x", "a").unwrap(), "a");
        assert_eq!(claim(&home, "ctx/../../x", "b").unwrap(), "a");
        assert_eq!(find(&home, "ctx/../../x").as_deref(), Some("a"));
        assert_eq!(find(&home, "other"), None);
    }

    #[test]
    fn a_deleted_sessions_names_are_free_again() {
        let (_d, home) = home_with(&["a", "b"]);
        claim(&home, "n", "a").unwrap();
        forget(&home, "a");
        std::fs::remove_dir_all(home.sessions().join("a")).unwrap();
        assert_eq!(find(&home, "n"), None);
        assert_eq!(claim(&home, "n", "b").unwrap(), "b");
    }

    #[test]
    fn a_name_left_by_a_vanished_session_passes_to_the_next_claim() {
        let (_d, home) = home_with(&["a", "b"]);
        claim(&home, "n", "a").unwrap();
        std::fs::remove_dir_all(home.sessions().join("a")).unwrap();
        assert_eq!(claim(&home, "n", "b").unwrap(), "b");
    }
}
