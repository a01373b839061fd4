//! The installed-bundle store: `$SERVICE_HOME/bundles/installs/<namespace>/<id>/<version>/`.
//!
//! An install is staged in a hidden sibling directory and swapped into place with one rename, so a reader sees
//! either the old complete version or the new complete version, never a mix.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::{BundleError, Result};
use super::{archive, builtin, load_files, Bundle, Origin};
use crate::home::ServiceHome;

/// Namespace of bundles built on this machine.
pub const LOCAL_NAMESPACE: &str = "local";
/// Install metadata written beside the bundle files (hidden, so not part of the content).
const INSTALL_META: &str = ".service-install.json";

#[derive(Debug, Serialize, Deserialize)]
struct InstallMeta {
    digest: String,
    installed_at: String,
    source: PathBuf,
    /// Installed from, or shared with, the bundles of a cluster's store: the node gives it up when the cluster does.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    shared: bool,
}

/// Validates the project at `project` and installs it as `local/<id>/<version>`, replacing that version if present.
pub fn install(home: &ServiceHome, project: &Path) -> Result<Bundle> {
    install_as(home, project, LOCAL_NAMESPACE, false)
}

/// The content tar of an installed bundle, which its digest is the SHA-256 of: what a cluster's store keeps.
pub fn content_of(bundle: &Bundle) -> Result<Vec<u8>> {
    archive::pack(&bundle.root)
}

/// Installs `local/<id>/<version>` from `content`, a bundle's content tar another node shared, when its SHA-256 is
/// `digest`, marked as the cluster's.
pub fn install_shared(home: &ServiceHome, content: &[u8], digest: &str) -> Result<Bundle> {
    let tampered = |actual: &str| {
        BundleError::Layout {
        path: PathBuf::from("the cluster's copy of a bundle"),
        message: format!(
            "its content's digest is {actual}, not the {digest} recorded with it; import the bundle again through \
             any node"
        ),
    }
    };
    let actual = archive::sha256_digest(content);
    if actual != digest {
        return Err(tampered(&actual));
    }
    let incoming = home
        .installs()
        .join(format!(".incoming-{}", uuid::Uuid::new_v4()));
    let installed = archive::unpack(content, &incoming)
        .and_then(|()| install_as(home, &incoming, LOCAL_NAMESPACE, true));
    let _ = std::fs::remove_dir_all(&incoming);
    let bundle = installed?;
    if bundle.digest != digest {
        let _ = remove(home, &bundle);
        return Err(tampered(&bundle.digest));
    }
    Ok(bundle)
}

/// Whether installed bundle `local/<id>/<version>` is the cluster's (see [`install_shared`], [`mark_shared`]).
pub fn is_shared(home: &ServiceHome, id: &str, version: &str) -> bool {
    read_meta(&home.installs().join(LOCAL_NAMESPACE).join(id).join(version))
        .is_some_and(|m| m.shared)
}

/// Marks an installed bundle as shared with the cluster's store.
pub fn mark_shared(bundle: &Bundle) -> Result<()> {
    let Some(mut meta) = read_meta(&bundle.root) else {
        return Err(damaged_meta(&bundle.root));
    };
    meta.shared = true;
    write_meta(&bundle.root, &meta)
}

fn read_meta(root: &Path) -> Option<InstallMeta> {
    std::fs::read(root.join(INSTALL_META))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
}

fn write_meta(root: &Path, meta: &InstallMeta) -> Result<()> {
    let path = root.join(INSTALL_META);
    let json = serde_json::to_vec_pretty(meta).unwrap_or_default();
    std::fs::write(&path, json).map_err(|e| BundleError::io("cannot write", &path, e))
}

fn damaged_meta(root: &Path) -> BundleError {
    BundleError::NotABundle {
        path: root.to_path_buf(),
        message: format!(
            "install metadata {INSTALL_META} is missing or damaged; rebuild the bundle"
        ),
    }
}

/// [`install`] into `namespace`.
fn install_as(home: &ServiceHome, project: &Path, namespace: &str, shared: bool) -> Result<Bundle> {
    let (manifest, _, _) = load_files(project)?;
    let content = archive::pack(project)?;
    let digest = archive::sha256_digest(&content);
    let parent = home.installs().join(namespace).join(&manifest.id);
    std::fs::create_dir_all(&parent).map_err(|e| BundleError::io("cannot create", &parent, e))?;
    let staging = parent.join(format!(".staging-{}", uuid::Uuid::new_v4()));
    let meta = InstallMeta {
        digest: digest.clone(),
        installed_at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        source: std::fs::canonicalize(project).unwrap_or_else(|_| project.to_path_buf()),
        shared,
    };
    let result = stage_and_swap(&content, &meta, &staging, &parent.join(&manifest.version));
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&staging);
    }
    result?;
    load_installed(home, namespace, &manifest.id, &manifest.version)
}

/// Installs each built-in bundle (`builtin/<name>`) this binary carries that the store lacks, or holds with other
/// contents (a binary of another version ran before). Once per process and store: a one-shot command resolves a
/// bundle several times.
pub fn install_builtins(home: &ServiceHome) -> Result<()> {
    static DONE: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());
    let done = || DONE.lock().unwrap_or_else(|p| p.into_inner());
    if done().iter().any(|h| h == home.root()) {
        return Ok(());
    }
    for builtin in builtin::ALL {
        let Some(version) = builtin.version() else {
            continue;
        };
        let root = home
            .installs()
            .join(builtin::NAMESPACE)
            .join(builtin.name)
            .join(&version);
        if builtin.written_in(&root) && root.join(INSTALL_META).is_file() {
            continue;
        }
        let tmp = tempfile::tempdir()
            .map_err(|e| BundleError::io("cannot create", Path::new("a temporary directory"), e))?;
        builtin.write_to(tmp.path())?;
        install_as(home, tmp.path(), builtin::NAMESPACE, false)?;
    }
    done().push(home.root().to_path_buf());
    Ok(())
}

/// A bundle unpacked from an archive or a registry and checked, not yet installed: who may install its name can be
/// decided before anything enters the store.
pub struct Staged {
    /// Holds the unpacked files until the install.
    _tmp: tempfile::TempDir,
    bundle: Bundle,
}

impl Staged {
    /// Keeps `bundle`, whose files are under `tmp`.
    pub fn new(tmp: tempfile::TempDir, bundle: Bundle) -> Staged {
        Staged { _tmp: tmp, bundle }
    }

    /// The bundle as it will be installed.
    pub fn bundle(&self) -> &Bundle {
        &self.bundle
    }

    /// The name it will be installed under (`local/<id>`).
    pub fn name(&self) -> String {
        format!("{LOCAL_NAMESPACE}/{}", self.bundle.manifest.id)
    }

    /// Installs it (see [`install`]).
    pub fn install(self, home: &ServiceHome) -> Result<Bundle> {
        install(home, &self.bundle.root)
    }
}

/// Whether any version of `local/<id>` is installed.
pub fn has_any_version(home: &ServiceHome, id: &str) -> bool {
    visible_dirs(&home.installs().join(LOCAL_NAMESPACE).join(id))
        .map(|versions| !versions.is_empty())
        .unwrap_or(true)
}

fn stage_and_swap(content: &[u8], meta: &InstallMeta, staging: &Path, target: &Path) -> Result<()> {
    archive::unpack(content, staging)?;
    write_meta(staging, meta)?;
    swap_into_place(staging, target)
}

/// Moves `staging` to `target` atomically; an existing `target` is exchanged out and removed afterwards.
pub(crate) fn swap_into_place(staging: &Path, target: &Path) -> Result<()> {
    if !target.exists() {
        return std::fs::rename(staging, target)
            .map_err(|e| BundleError::io("cannot install into", target, e));
    }
    #[cfg(target_os = "linux")]
    {
        use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
        if renameat2(
            AT_FDCWD,
            staging,
            AT_FDCWD,
            target,
            RenameFlags::RENAME_EXCHANGE,
        )
        .is_ok()
        {
            // `staging` now holds the previous version.
            return std::fs::remove_dir_all(staging)
                .map_err(|e| BundleError::io("cannot remove", staging, e));
        }
    }
    // Fallback where the exchange is unsupported: a short window in which the version is absent, never torn.
    let old = staging.with_extension("old");
    std::fs::rename(target, &old).map_err(|e| BundleError::io("cannot replace", target, e))?;
    std::fs::rename(staging, target)
        .map_err(|e| BundleError::io("cannot install into", target, e))?;
    std::fs::remove_dir_all(&old).map_err(|e| BundleError::io("cannot remove", &old, e))
}

/// Removes the installed `bundle` (its version directory, then its id directory when no version is left): moved
/// aside with one rename, so a reader never sees half a bundle, then deleted.
pub fn remove(home: &ServiceHome, bundle: &Bundle) -> Result<()> {
    let Origin::Installed { namespace } = &bundle.origin else {
        return Err(BundleError::NotABundle {
            path: bundle.root.clone(),
            message: "not an installed bundle: only what `build`, `pull` or `import` installed can be removed"
                .into(),
        });
    };
    let parent = home.installs().join(namespace).join(&bundle.manifest.id);
    let target = parent.join(&bundle.manifest.version);
    let trash = parent.join(format!(".removing-{}", uuid::Uuid::new_v4()));
    std::fs::rename(&target, &trash).map_err(|e| BundleError::io("cannot remove", &target, e))?;
    std::fs::remove_dir_all(&trash).map_err(|e| BundleError::io("cannot remove", &trash, e))?;
    // An id with no version left goes too (remove_dir refuses a directory that is not empty).
    let _ = std::fs::remove_dir(&parent);
    Ok(())
}

/// Loads one installed bundle.
pub fn load_installed(
    home: &ServiceHome,
    namespace: &str,
    id: &str,
    version: &str,
) -> Result<Bundle> {
    let root = home.installs().join(namespace).join(id).join(version);
    let (manifest, agent, skills) = load_files(&root)?;
    let meta = read_meta(&root).ok_or_else(|| damaged_meta(&root))?;
    Ok(Bundle {
        root,
        manifest,
        agent,
        skills,
        origin: Origin::Installed {
            namespace: namespace.to_string(),
        },
        digest: meta.digest,
    })
}

/// An installed (namespace, id, version) triple, found by listing directories.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// Namespace.
    pub namespace: String,
    /// Bundle id.
    pub id: String,
    /// Version.
    pub version: semver::Version,
}

impl Installed {
    /// `namespace/id:version`.
    pub fn reference(&self) -> String {
        format!("{}/{}:{}", self.namespace, self.id, self.version)
    }
}

/// Every installed version, sorted by namespace, id, then version, the built-in bundles included (last). Hidden
/// and non-semver entries are skipped.
pub fn list_installed(home: &ServiceHome) -> Result<Vec<Installed>> {
    // A store that cannot take them (read-only, full) still lists what it has; resolving one then says why.
    let _ = install_builtins(home);
    let mut out = Vec::new();
    for namespace in visible_dirs(&home.installs())? {
        let ns_dir = home.installs().join(&namespace);
        for id in visible_dirs(&ns_dir)? {
            for version in visible_dirs(&ns_dir.join(&id))? {
                if let Ok(version) = semver::Version::parse(&version) {
                    out.push(Installed {
                        namespace: namespace.clone(),
                        id: id.clone(),
                        version,
                    });
                }
            }
        }
    }
    // The built-in bundles last: a listing's first entry (a console's preselected bundle) stays the user's own.
    let key = |i: &Installed| {
        (
            i.namespace == builtin::NAMESPACE,
            i.namespace.clone(),
            i.id.clone(),
            i.version.clone(),
        )
    };
    out.sort_by_key(key);
    Ok(out)
}

/// Loads every installed bundle; a damaged install is reported as an error for that entry.
pub fn list(home: &ServiceHome) -> Result<Vec<Result<Bundle>>> {
    Ok(list_installed(home)?
        .into_iter()
        .map(|i| load_installed(home, &i.namespace, &i.id, &i.version.to_string()))
        .collect())
}

fn visible_dirs(dir: &Path) -> Result<Vec<String>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(BundleError::io("cannot read", dir, e)),
    };
    let mut names = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with('.') && entry.path().is_dir() {
            names.push(name);
        }
    }
    names.sort();
    Ok(names)
}
