//! The bundle's content as one deterministic tar: sorted entries, zeroed owners and times, normalised modes.
//!
//! The same bytes serve as the OCI layer and as the source of an install, so the digest names exactly what runs.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::error::{BundleError, Result};

/// Largest bundle content accepted, to keep builds and loads bounded.
pub const MAX_BUNDLE_BYTES: u64 = 256 * 1024 * 1024;

/// `sha256:<hex>` of `bytes`.
pub fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Packs the bundle at `root` into a deterministic tar. Hidden entries (`.git`, `.service-install.json`) are left
/// out; symlinks and special files are refused, so a bundle can never smuggle in a host path.
pub fn pack(root: &Path) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    builder.follow_symlinks(false);
    let mut total: u64 = 0;
    let walker = walkdir::WalkDir::new(root)
        .min_depth(1)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| !e.file_name().to_string_lossy().starts_with('.'));
    for entry in walker {
        let entry = entry.map_err(|e| {
            let path = e
                .path()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| root.to_path_buf());
            BundleError::io("cannot read", path, e.into())
        })?;
        let rel = entry
            .path()
            .strip_prefix(root)
            .map(Path::to_path_buf)
            .unwrap_or_else(|_| PathBuf::from(entry.file_name()));
        let kind = entry.file_type();
        let io_err = |e| BundleError::io("cannot pack", entry.path(), e);
        if kind.is_dir() {
            builder.append_dir(&rel, entry.path()).map_err(io_err)?;
        } else if kind.is_file() {
            total += entry.metadata().map(|m| m.len()).unwrap_or(0);
            if total > MAX_BUNDLE_BYTES {
                return Err(BundleError::NotABundle {
                    path: root.to_path_buf(),
                    message: format!("bundle content exceeds {MAX_BUNDLE_BYTES} bytes"),
                });
            }
            builder
                .append_path_with_name(entry.path(), &rel)
                .map_err(io_err)?;
        } else {
            return Err(BundleError::NotABundle {
                path: entry.path().to_path_buf(),
                message: "symlinks and special files are not allowed in a bundle; copy the file in instead".into(),
            });
        }
    }
    builder
        .into_inner()
        .map_err(|e| BundleError::io("cannot pack", root, e))
}

/// Unpacks a bundle layer into `dest` as a hostile archive (see [`super::unpack`]): files and directories only,
/// inside `dest`, with modes the supervisor chooses.
pub fn unpack(tar_bytes: &[u8], dest: &Path) -> Result<()> {
    super::unpack::unpack(tar_bytes, dest, MAX_BUNDLE_BYTES).map_err(|e| BundleError::Layout {
        path: PathBuf::from("the bundle layer"),
        message: e.to_string(),
    })
}
