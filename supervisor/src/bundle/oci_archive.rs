//! A bundle's OCI image layout as one tar file (`export`, `import`): what `skopeo` calls an `oci-archive:`, so a
//! bundle can travel as a file and be copied to any registry.
//!
//! Export writes the layout of an installed bundle (reproducible, as `build --output`) and tars it with sorted
//! entries and zeroed times. Import unpacks only regular files and directories, bounded in size, into a temporary
//! directory, verifies the layout like any other (every blob's digest), and installs it atomically.

use std::io::Read;
use std::path::Path;

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
    stage_from(home, reader, origin)?.install(home)
}

/// Unpacks and checks the archive from `reader` (named `origin` in errors) without installing it.
pub fn stage_from(home: &ServiceHome, reader: impl Read, origin: &Path) -> Result<store::Staged> {
    let tmp = tempfile::tempdir()
        .map_err(|e| BundleError::io("cannot create a temporary directory for", origin, e))?;
    let layout = tmp.path().join("layout");
    unpack(reader, &layout, origin)?;
    // The layout's errors name where it was unpacked, a temporary path of this machine: name the archive instead.
    // A missing file of the archive is the client's error too, not the server's.
    let named = |path: &Path| {
        path.strip_prefix(&layout)
            .map(|rel| origin.join(rel))
            .unwrap_or_else(|_| origin.to_path_buf())
    };
    let loaded = oci::load_layout(home, &layout).map_err(|e| match e {
        BundleError::Layout { path, message } => BundleError::Layout {
            path: named(&path),
            message,
        },
        BundleError::Io {
            action,
            path,
            source,
        } if path.starts_with(&layout) => BundleError::Layout {
            path: named(&path),
            message: format!("{action}: {source}"),
        },
        // Its files, checked where the layer was unpacked (the store's cache): the archive is what is wrong.
        BundleError::NotABundle { message, .. } => BundleError::Layout {
            path: origin.to_path_buf(),
            message,
        },
        other => other,
    })?;
    Ok(store::Staged::new(tmp, loaded))
}

/// Unpacks the archive as a hostile one (see [`super::unpack`]), at most [`MAX_ARCHIVE_BYTES`] in all.
fn unpack(reader: impl Read, dest: &Path, origin: &Path) -> Result<()> {
    super::unpack::unpack(reader.take(MAX_ARCHIVE_BYTES + 1), dest, MAX_ARCHIVE_BYTES).map_err(
        |e| BundleError::Layout {
            path: origin.to_path_buf(),
            message: e.to_string(),
        },
    )
}
