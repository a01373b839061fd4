//! OCI image layouts of bundles: `oci-layout`, `index.json` and `blobs/sha256/` holding the manifest, a config
//! and one tar layer.
//!
//! Writing is reproducible (the same input gives byte-identical blobs: the layer is the deterministic tar and no
//! timestamps are recorded). Loading verifies the size and digest of every blob it reads and refuses malformed
//! digests before they can name a path.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{BundleError, Result};
use super::store::swap_into_place;
use super::{archive, load_files, AgentSpec, Bundle, Manifest, Origin};
use crate::home::ServiceHome;

const MT_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const MT_CONFIG: &str = "application/vnd.service.bundle.config.v1+json";
const MT_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
const ARTIFACT_TYPE: &str = "application/vnd.service.bundle.v1";
const MAX_JSON_BLOB: u64 = 4 * 1024 * 1024;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    annotations: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImageIndex {
    schema_version: u32,
    // Optional in the image spec, and left out by skopeo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    manifests: Vec<Descriptor>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ImageManifest {
    schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    media_type: Option<String>,
    #[serde(default)]
    artifact_type: String,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

/// The config blob: the parsed bundle files, so a layout can be inspected without unpacking it.
#[derive(Debug, Serialize, Deserialize)]
struct BundleConfig {
    manifest: Manifest,
    agent: AgentSpec,
}

/// Builds the project at `project` into an OCI layout at `out`. `out` must be absent, empty, or an earlier layout
/// (which is replaced atomically). Returns the manifest digest.
pub fn write_layout(project: &Path, out: &Path) -> Result<String> {
    let (manifest, agent, _) = load_files(project)?;
    if out.exists() && !out.join("oci-layout").is_file() && !is_empty_dir(out)? {
        return Err(BundleError::NotABundle {
            path: out.to_path_buf(),
            message:
                "exists, is not empty and is not a bundle layout; choose a new --output directory"
                    .into(),
        });
    }
    let layer = archive::pack(project)?;
    let config = serde_json::to_vec(&BundleConfig {
        manifest: manifest.clone(),
        agent,
    })
    .map_err(|e| BundleError::io("cannot encode config for", out, std::io::Error::other(e)))?;
    let layer_desc = descriptor(MT_LAYER, &layer);
    let config_desc = descriptor(MT_CONFIG, &config);
    let image = serde_json::to_vec(&ImageManifest {
        schema_version: 2,
        media_type: Some(MT_MANIFEST.into()),
        artifact_type: ARTIFACT_TYPE.into(),
        config: config_desc,
        layers: vec![layer_desc],
    })
    .map_err(|e| BundleError::io("cannot encode manifest for", out, std::io::Error::other(e)))?;
    let mut image_desc = descriptor(MT_MANIFEST, &image);
    image_desc.annotations = Some(
        [
            (
                "org.opencontainers.image.ref.name".to_string(),
                manifest.version.clone(),
            ),
            (
                "org.opencontainers.image.title".to_string(),
                manifest.id.clone(),
            ),
        ]
        .into_iter()
        .collect(),
    );
    let manifest_digest = image_desc.digest.clone();
    let index = serde_json::to_vec_pretty(&ImageIndex {
        schema_version: 2,
        media_type: Some(MT_INDEX.into()),
        manifests: vec![image_desc],
    })
    .map_err(|e| BundleError::io("cannot encode index for", out, std::io::Error::other(e)))?;

    let parent = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent).map_err(|e| BundleError::io("cannot create", parent, e))?;
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let staging = parent.join(format!(".{name}.staging-{}", uuid::Uuid::new_v4()));
    let written = (|| {
        write_files(&staging, &index, &[&layer, &config, &image])?;
        if out.exists() && is_empty_dir(out)? {
            std::fs::remove_dir(out).map_err(|e| BundleError::io("cannot replace", out, e))?;
        }
        swap_into_place(&staging, out)
    })();
    if written.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    written.map(|()| manifest_digest)
}

/// Verifies the layout at `dir`, unpacks its layer into the layout cache (once per digest) and loads the bundle.
pub fn load_layout(home: &ServiceHome, dir: &Path) -> Result<Bundle> {
    let layout_err = |path: &Path, message: String| BundleError::Layout {
        path: path.to_path_buf(),
        message,
    };
    if !dir.join("oci-layout").is_file() {
        return Err(layout_err(
            dir,
            "not an OCI layout (no oci-layout file)".into(),
        ));
    }
    let index: ImageIndex = read_json(&dir.join("index.json"), MAX_JSON_BLOB)?;
    let image_desc = index
        .manifests
        .iter()
        .find(|d| d.media_type == MT_MANIFEST)
        .ok_or_else(|| layout_err(dir, "index.json lists no image manifest".into()))?;
    let image: ImageManifest = serde_json::from_slice(&read_blob(dir, image_desc, MAX_JSON_BLOB)?)
        .map_err(|e| layout_err(dir, format!("malformed image manifest: {e}")))?;
    // An OCI 1.0 style artifact says what it is by its config's media type alone.
    let ours = image.artifact_type == ARTIFACT_TYPE
        || (image.artifact_type.is_empty() && image.config.media_type == MT_CONFIG);
    if !ours {
        return Err(layout_err(
            dir,
            format!(
                "artifact type \"{}\" is not a service bundle",
                image.artifact_type
            ),
        ));
    }
    let config: BundleConfig =
        serde_json::from_slice(&read_blob(dir, &image.config, MAX_JSON_BLOB)?)
            .map_err(|e| layout_err(dir, format!("malformed bundle config: {e}")))?;
    let [layer_desc] = image.layers.as_slice() else {
        return Err(layout_err(
            dir,
            format!("expected one layer, found {}", image.layers.len()),
        ));
    };
    let layer = read_blob(
        dir,
        layer_desc,
        archive::MAX_BUNDLE_BYTES + 16 * 1024 * 1024,
    )?;

    let root = home.layout_cache().join(hex_of(&layer_desc.digest));
    // The cache is trusted only as far as it looks like what `unpack` writes: a tree an older version unpacked with
    // the archive's modes (setuid files, world-writable directories), or one changed since, is unpacked again.
    if root.is_dir() && !super::unpack::is_clean(&root) {
        tracing::warn!(
            "the cached layer {} has files unpacking never makes; unpacking it again",
            layer_desc.digest
        );
        let stale = home
            .layout_cache()
            .join(format!(".stale-{}", uuid::Uuid::new_v4()));
        std::fs::rename(&root, &stale).map_err(|e| BundleError::io("cannot replace", &root, e))?;
        let _ = std::fs::remove_dir_all(&stale);
    }
    if !root.is_dir() {
        let staging = home
            .layout_cache()
            .join(format!(".staging-{}", uuid::Uuid::new_v4()));
        let unpacked = archive::unpack(&layer, &staging).and_then(|()| {
            std::fs::rename(&staging, &root)
                .or_else(|e| if root.is_dir() { Ok(()) } else { Err(e) })
                .map_err(|e| BundleError::io("cannot unpack into", &root, e))
        });
        if unpacked.is_err() {
            let _ = std::fs::remove_dir_all(&staging);
        }
        unpacked?;
    }
    let (manifest, agent, skills) = load_files(&root)?;
    if manifest.id != config.manifest.id || manifest.version != config.manifest.version {
        return Err(layout_err(
            dir,
            "config and layer disagree on the bundle id or version".into(),
        ));
    }
    Ok(Bundle {
        root,
        manifest,
        agent,
        skills,
        origin: Origin::Layout {
            path: dir.to_path_buf(),
        },
        digest: layer_desc.digest.clone(),
    })
}

fn descriptor(media_type: &str, bytes: &[u8]) -> Descriptor {
    Descriptor {
        media_type: media_type.into(),
        digest: archive::sha256_digest(bytes),
        size: bytes.len() as u64,
        annotations: None,
    }
}

fn hex_of(digest: &str) -> String {
    digest.trim_start_matches("sha256:").to_string()
}

/// Writes a layout into `dir`: `oci-layout`, `index.json` and each blob under its digest.
pub(crate) fn write_files(dir: &Path, index: &[u8], blobs: &[&[u8]]) -> Result<()> {
    let path = dir.join("blobs").join("sha256");
    std::fs::create_dir_all(&path).map_err(|e| BundleError::io("cannot create", &path, e))?;
    for blob in blobs {
        write_file(&path.join(hex_of(&archive::sha256_digest(blob))), blob)?;
    }
    write_file(
        &dir.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    write_file(&dir.join("index.json"), index)
}

/// The `index.json` of a layout that holds the one image `manifest`.
pub(crate) fn index_of(manifest: &[u8]) -> Vec<u8> {
    serde_json::to_vec_pretty(&ImageIndex {
        schema_version: 2,
        media_type: Some(MT_INDEX.into()),
        manifests: vec![descriptor(MT_MANIFEST, manifest)],
    })
    .unwrap_or_default()
}

/// True for `sha256:` and 64 lowercase hex digits, the only digests a blob path is made from.
pub(crate) fn is_digest(digest: &str) -> bool {
    let hex = digest.strip_prefix("sha256:").unwrap_or("");
    hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The blob path of `digest`, refusing anything but `sha256:` and 64 lowercase hex digits.
fn blob_path(dir: &Path, digest: &str) -> Result<PathBuf> {
    let hex = hex_of(digest);
    if !is_digest(digest) {
        return Err(BundleError::Layout {
            path: dir.to_path_buf(),
            message: format!(
                "invalid digest \"{digest}\"; expected sha256: and 64 lowercase hex digits"
            ),
        });
    }
    Ok(dir.join("blobs").join("sha256").join(hex))
}

/// Reads a blob and checks its size and digest against the descriptor.
fn read_blob(dir: &Path, desc: &Descriptor, max: u64) -> Result<Vec<u8>> {
    let path = blob_path(dir, &desc.digest)?;
    if desc.size > max {
        return Err(BundleError::Layout {
            path,
            message: format!("blob of {} bytes exceeds the {max}-byte limit", desc.size),
        });
    }
    let bytes = read_limited(&path, max)?;
    let actual = archive::sha256_digest(&bytes);
    if bytes.len() as u64 != desc.size || actual != desc.digest {
        return Err(BundleError::Layout {
            path,
            message: format!(
                "blob does not match its descriptor (expected {} with {} bytes, found {actual} with {} bytes); \
                 the layout was modified after it was built, rebuild it",
                desc.digest,
                desc.size,
                bytes.len()
            ),
        });
    }
    Ok(bytes)
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path, max: u64) -> Result<T> {
    let bytes = read_limited(path, max)?;
    serde_json::from_slice(&bytes).map_err(|e| BundleError::Layout {
        path: path.to_path_buf(),
        message: format!("malformed JSON: {e}"),
    })
}

fn read_limited(path: &Path, max: u64) -> Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| BundleError::io("cannot read", path, e))?;
    let mut bytes = Vec::new();
    file.take(max + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| BundleError::io("cannot read", path, e))?;
    if bytes.len() as u64 > max {
        return Err(BundleError::Layout {
            path: path.to_path_buf(),
            message: format!("file exceeds the {max}-byte limit"),
        });
    }
    Ok(bytes)
}

fn write_file(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).map_err(|e| BundleError::io("cannot write", path, e))
}

fn is_empty_dir(path: &Path) -> Result<bool> {
    Ok(std::fs::read_dir(path)
        .map_err(|e| BundleError::io("cannot read", path, e))?
        .next()
        .is_none())
}
