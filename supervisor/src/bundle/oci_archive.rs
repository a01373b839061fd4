//! A bundle's OCI image layout as one tar file (`export`, `import`): what `skopeo` calls an `oci-archive:`, so a
//! bundle can travel as a file and be copied to any registry.
//!
//! Export writes the layout of an installed bundle (reproducible, as `build --output`) and tars it with sorted
//! entries and zeroed times. Import unpacks only regular files and directories, bounded in size, into a temporary
//! directory, verifies the layout like any other (every blob's digest), and installs it atomically.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::error::{BundleError, Result};
use super::{archive, oci, store, Bundle};
use crate::home::ServiceHome;

/// Largest archive accepted: a bundle at its size limit plus its config and manifest.
pub const MAX_ARCHIVE_BYTES: u64 = archive::MAX_BUNDLE_BYTES + 16 * 1024 * 1024;

/// Writes `bundle` as an OCI layout tar at `out` (replaced atomically); returns the manifest digest.
pub fn export(bundle: &Bundle, out: &Path) -> Result<String> {
    let (digest, bytes) = export_bytes(bundle)?;
    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut staged = tempfile::NamedTempFile::new_in(parent)
        .map_err(|e| BundleError::io("cannot write in", parent, e))?;
    std::io::Write::write_all(&mut staged, &bytes)
        .map_err(|e| BundleError::io("cannot write", out, e))?;
    staged
        .persist(out)
        .map_err(|e| BundleError::io("cannot write", out, e.error))?;
    Ok(digest)
}

/// The manifest digest of `bundle`'s layout and the layout as tar bytes.
pub fn export_bytes(bundle: &Bundle) -> Result<(String, Vec<u8>)> {
    let tmp = tempfile::tempdir()
        .map_err(|e| BundleError::io("cannot create a temporary directory for", &bundle.root, e))?;
    let layout = tmp.path().join("layout");
    let digest = oci::write_layout(&bundle.root, &layout)?;
    Ok((digest, tar_dir(&layout)?))
}

/// Tars the files under `dir`, sorted, with deterministic headers.
fn tar_dir(dir: &Path) -> Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.mode(tar::HeaderMode::Deterministic);
    for entry in walkdir::WalkDir::new(dir).min_depth(1).sort_by_file_name() {
        let entry =
            entry.map_err(|e| BundleError::io("cannot read", dir, std::io::Error::other(e)))?;
        let rel = entry.path().strip_prefix(dir).unwrap_or(entry.path());
        let appended = if entry.file_type().is_dir() {
            builder.append_dir(rel, entry.path())
        } else {
            builder.append_path_with_name(entry.path(), rel)
        };
        appended.map_err(|e| BundleError::io("cannot archive", entry.path(), e))?;
    }
    builder
        .into_inner()
        .map_err(|e| BundleError::io("cannot archive", dir, e))
}

/// Installs the bundle in the OCI layout tar at `path`.
pub fn import(home: &ServiceHome, path: &Path) -> Result<Bundle> {
    let file = std::fs::File::open(path).map_err(|e| BundleError::io("cannot read", path, e))?;
    import_from(home, file, path)
}

/// Installs the bundle in the OCI layout tar read from `reader` (`origin` names it in errors).
pub fn import_from(home: &ServiceHome, reader: impl Read, origin: &Path) -> Result<Bundle> {
    let tmp = tempfile::tempdir()
        .map_err(|e| BundleError::io("cannot create a temporary directory for", origin, e))?;
    let layout = tmp.path().join("layout");
    unpack(reader, &layout, origin)?;
    let loaded = oci::load_layout(home, &layout)?;
    store::install(home, &loaded.root)
}

/// Unpacks regular files and directories only (no links, devices or paths that climb out), at most
/// [`MAX_ARCHIVE_BYTES`] in all.
fn unpack(reader: impl Read, dest: &Path, origin: &Path) -> Result<()> {
    let bad = |message: String| BundleError::Layout {
        path: origin.to_path_buf(),
        message,
    };
    std::fs::create_dir_all(dest).map_err(|e| BundleError::io("cannot create", dest, e))?;
    let mut archive = tar::Archive::new(reader.take(MAX_ARCHIVE_BYTES + 1));
    let mut total: u64 = 0;
    let entries = archive
        .entries()
        .map_err(|e| bad(format!("not a tar archive: {e}")))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| bad(format!("damaged tar archive: {e}")))?;
        let rel: PathBuf = entry
            .path()
            .map_err(|e| bad(format!("an entry has an unreadable name: {e}")))?
            .into_owned();
        let kind = entry.header().entry_type();
        if !(kind.is_file() || kind.is_dir()) {
            return Err(bad(format!(
                "{}: only files and directories may be in a bundle archive",
                rel.display()
            )));
        }
        total += entry.size();
        if total > MAX_ARCHIVE_BYTES {
            return Err(bad(format!(
                "larger than the {MAX_ARCHIVE_BYTES} byte limit of a bundle archive"
            )));
        }
        // `unpack_in` refuses absolute paths and `..`.
        let inside = entry
            .unpack_in(dest)
            .map_err(|e| bad(format!("{}: cannot unpack: {e}", rel.display())))?;
        if !inside {
            return Err(bad(format!(
                "{}: the path leaves the archive",
                rel.display()
            )));
        }
    }
    Ok(())
}
