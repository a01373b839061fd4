//! File contents by SHA-256: one pool per store (`$SERVICE_HOME/checkpoints/objects/`), so the same content is
//! kept once across turns and sessions, and a hard link per session (`sessions/<id>/checkpoints/objects/`) that
//! counts the session's share and keeps the content while the session refers to it. Content with no session link
//! left (a pool link count of 1) is removed.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

use super::tree::Digest;

/// A session's view of the pool.
#[derive(Debug, Clone)]
pub struct Objects {
    pool: PathBuf,
    mine: PathBuf,
}

/// What storing one file's content did.
pub struct Stored {
    /// SHA-256 of the content.
    pub hash: Digest,
    /// Bytes read.
    pub size: u64,
    /// Bytes written to the pool: zero when the content was there already.
    pub written: u64,
    /// Whether the session did not hold the content before.
    pub linked: bool,
}

impl Objects {
    /// The pool under `pool`, linked into the session's `mine`.
    pub fn new(pool: PathBuf, mine: PathBuf) -> Objects {
        Objects { pool, mine }
    }

    fn pooled(&self, hash: &Digest) -> PathBuf {
        let hex = hash.to_string();
        self.pool.join(&hex[..2]).join(hex)
    }

    /// The session's link to `hash`.
    pub fn path(&self, hash: &Digest) -> PathBuf {
        self.mine.join(hash.to_string())
    }

    /// Whether the session refers to `hash` already.
    pub fn has(&self, hash: &Digest) -> bool {
        self.path(hash).exists()
    }

    /// Reads `file` to its end, storing the content unless the pool has it, and links it for the session. A file
    /// that holds more than `max` bytes (it grew since it was counted) is not stored: `ErrorKind::FileTooLarge`.
    pub fn store(&self, mut file: File, max: u64) -> std::io::Result<Stored> {
        let tmp_dir = self.pool.join("tmp");
        std::fs::create_dir_all(&tmp_dir)?;
        let mut tmp = tempfile::NamedTempFile::new_in(&tmp_dir)?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 256 * 1024];
        let mut size = 0u64;
        loop {
            let n = match file.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            size += n as u64;
            if size > max {
                return Err(std::io::Error::from(std::io::ErrorKind::FileTooLarge));
            }
            hasher.update(&buf[..n]);
            tmp.write_all(&buf[..n])?;
        }
        let hash = Digest(hasher.finalize().into());
        let pooled = self.pooled(&hash);
        let mut written = 0;
        let linked = !self.has(&hash);
        let mut tmp = Some(tmp);
        // Each round that does not link meets another writer or a release in between; a few are plenty.
        let mut rounds = 0;
        loop {
            rounds += 1;
            if rounds > 8 {
                return Err(std::io::Error::other(
                    "the pool's copy of this content kept changing while it was linked",
                ));
            }
            if !pooled.exists() {
                let Some(ours) = tmp.take() else {
                    return Err(std::io::Error::other("stored content vanished twice"));
                };
                std::fs::create_dir_all(pooled.parent().unwrap_or(&self.pool))?;
                // Never over a copy that is there: a link being made to the copy it replaced would find that
                // copy's last name gone and fail. The copy there holds the same bytes. Not flushed: a flush per
                // file made a large workspace's first checkpoint take seconds, and a copy a power cut damaged
                // fails its hash check when it is restored, rather than restoring wrong.
                match ours.persist_noclobber(&pooled) {
                    Ok(_) => written = size,
                    Err(e) if e.error.kind() == std::io::ErrorKind::AlreadyExists => {
                        tmp = Some(e.file)
                    }
                    Err(e) => return Err(e.error),
                }
            }
            match self.link(&hash, &pooled) {
                // Another session released the pool's copy in between: store ours.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tmp.is_some() => continue,
                other => other?,
            }
            break;
        }
        Ok(Stored {
            hash,
            size,
            written,
            linked,
        })
    }

    fn link(&self, hash: &Digest, pooled: &Path) -> std::io::Result<()> {
        let mine = self.path(hash);
        if mine.exists() {
            return Ok(());
        }
        std::fs::create_dir_all(&self.mine)?;
        match std::fs::hard_link(pooled, &mine) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    }

    /// Links content another session's checkpoint holds into this session (a fork's inherited checkpoints).
    pub fn adopt(&self, from: &Objects, hash: &Digest) -> std::io::Result<()> {
        self.link(hash, &from.path(hash))
    }

    /// Opens the content of `hash`.
    pub fn open(&self, hash: &Digest) -> std::io::Result<File> {
        File::open(self.path(hash))
    }

    /// Bytes of the content the session refers to.
    pub fn bytes(&self) -> u64 {
        let Ok(dir) = std::fs::read_dir(&self.mine) else {
            return 0;
        };
        dir.flatten()
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .sum()
    }

    /// Drops the session's links to every hash `keep` rejects, and the pool's copy when no session holds it.
    pub fn release(&self, keep: impl Fn(&Digest) -> bool) -> std::io::Result<()> {
        let dir = match std::fs::read_dir(&self.mine) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            other => other?,
        };
        for entry in dir.flatten() {
            let name = entry.file_name();
            let Some(hash) = name.to_str().and_then(Digest::from_hex) else {
                continue;
            };
            if keep(&hash) {
                continue;
            }
            std::fs::remove_file(entry.path())?;
            let pooled = self.pooled(&hash);
            // One link left is the pool's own: no session holds the content.
            if std::fs::metadata(&pooled).is_ok_and(|m| m.nlink() == 1) {
                let _ = std::fs::remove_file(&pooled);
            }
        }
        Ok(())
    }
}
