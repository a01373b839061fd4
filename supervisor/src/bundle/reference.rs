//! Bundle references and their resolution; every front end resolves references through [`resolve`].
//!
//! Forms: `<name>` and `<name>@latest` (highest installed local version), `<name>@<version>`,
//! `<namespace>/<name>:<version>`, `builtin/<name>` (a bundle the binary carries), a registry reference (`<host>/<repository>:<tag>` or `@sha256:<digest>`, whose
//! first part is a host: it has a `.` or a `:port`, or is `localhost`), and a directory path (anything else
//! containing `/`, or starting with `.` or `~`): an OCI layout written by `build --output`, or a bundle project used
//! in place. A registry reference resolves to what the last pull of it installed; [`BundleError::NotPulled`] says
//! it must be pulled first (front ends pull on first use).

use std::path::{Path, PathBuf};

use super::error::{BundleError, Result};
use super::manifest::check_id;
use super::store::{self, LOCAL_NAMESPACE};
use super::{load_project, oci, Bundle};
use crate::home::ServiceHome;

/// A parsed bundle reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BundleRef {
    /// An installed bundle by name: the highest version, or an exact one.
    Installed {
        /// Namespace (`local` unless given).
        namespace: String,
        /// Bundle id.
        name: String,
        /// Exact version; None for the highest installed.
        version: Option<semver::Version>,
    },
    /// A directory: an OCI layout or a bundle project.
    Path(PathBuf),
    /// A bundle in an OCI registry.
    Registry(String),
}

/// True when `reference` names a registry: its first segment is a host (a `.` or a `:port` in it, or
/// `localhost`), as in `ghcr.io/org/hello:1.0.0` or `127.0.0.1:5000/team/hello:0.1.0`.
pub fn is_registry_reference(reference: &str) -> bool {
    let Some((first, rest)) = reference.split_once('/') else {
        return false;
    };
    !rest.is_empty()
        && !first.starts_with('.')
        && !first.starts_with('~')
        && (first.contains('.') || first.contains(':') || first == "localhost")
}

/// Where the store remembers what each registry reference installed.
fn pulled_file(home: &ServiceHome) -> PathBuf {
    home.root().join("bundles").join("pulled.json")
}

/// The registry references whose pull installed `installed` (`<namespace>/<id>:<version>`), for `inspect`.
pub fn pulled_from(home: &ServiceHome, installed: &str) -> Vec<String> {
    std::fs::read(pulled_file(home))
        .ok()
        .and_then(|b| serde_json::from_slice::<std::collections::BTreeMap<String, String>>(&b).ok())
        .unwrap_or_default()
        .into_iter()
        .filter(|(_, to)| to == installed)
        .map(|(from, _)| from)
        .collect()
}

/// Remembers that pulling `reference` installed the bundle at `installed` (`<namespace>/<id>:<version>`).
pub fn record_pull(home: &ServiceHome, reference: &str, installed: &str) -> Result<()> {
    let path = pulled_file(home);
    let mut map: std::collections::BTreeMap<String, String> = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    map.insert(reference.to_string(), installed.to_string());
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| BundleError::io("cannot create", dir, e))?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir)
        .map_err(|e| BundleError::io("cannot write in", dir, e))?;
    std::io::Write::write_all(
        &mut tmp,
        &serde_json::to_vec_pretty(&map).unwrap_or_default(),
    )
    .map_err(|e| BundleError::io("cannot write", &path, e))?;
    tmp.persist(&path)
        .map_err(|e| BundleError::io("cannot write", &path, e.error))?;
    Ok(())
}

impl BundleRef {
    /// Parses a reference string.
    pub fn parse(reference: &str) -> Result<BundleRef> {
        let bad = |message: String| BundleError::BadReference {
            reference: reference.to_string(),
            message,
        };
        if reference.is_empty() {
            return Err(bad("it is empty".into()));
        }
        if is_registry_reference(reference) && !Path::new(reference).exists() {
            return Ok(BundleRef::Registry(reference.to_string()));
        }
        if let Some((namespace, rest)) = reference.split_once('/') {
            if let Some((name, version)) = rest.split_once(':') {
                if !Path::new(reference).exists() {
                    check_id(namespace).map_err(|m| bad(format!("namespace: {m}")))?;
                    check_id(name).map_err(bad)?;
                    let version = semver::Version::parse(version)
                        .map_err(|e| bad(format!("version \"{version}\": {e}")))?;
                    return Ok(BundleRef::Installed {
                        namespace: namespace.into(),
                        name: name.into(),
                        version: Some(version),
                    });
                }
            }
            // `builtin/coder`: a bundle this binary carries, unless a directory of that name is meant.
            if namespace == super::builtin::NAMESPACE
                && super::builtin::get(rest).is_some()
                && !Path::new(reference).exists()
            {
                return Ok(BundleRef::Installed {
                    namespace: namespace.into(),
                    name: rest.into(),
                    version: None,
                });
            }
            return Ok(BundleRef::Path(expand_home(reference)));
        }
        if reference.starts_with('.') || reference.starts_with('~') {
            return Ok(BundleRef::Path(expand_home(reference)));
        }
        let (name, version) = match reference.split_once('@') {
            Some((name, "latest")) => (name, None),
            Some((name, version)) => {
                let v = semver::Version::parse(version).map_err(|e| {
                    bad(format!(
                        "version \"{version}\": {e}; use <name>@latest or <name>@1.2.3"
                    ))
                })?;
                (name, Some(v))
            }
            None => (reference, None),
        };
        check_id(name).map_err(bad)?;
        Ok(BundleRef::Installed {
            namespace: LOCAL_NAMESPACE.into(),
            name: name.into(),
            version,
        })
    }
}

fn expand_home(reference: &str) -> PathBuf {
    match (reference.strip_prefix("~/"), std::env::var_os("HOME")) {
        (Some(rest), Some(home)) => Path::new(&home).join(rest),
        _ => PathBuf::from(reference),
    }
}

/// Resolves `reference` to a loaded, validated bundle.
pub fn resolve(home: &ServiceHome, reference: &str) -> Result<Bundle> {
    match BundleRef::parse(reference)? {
        BundleRef::Registry(source) => {
            let pulled: std::collections::BTreeMap<String, String> =
                std::fs::read(pulled_file(home))
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .unwrap_or_default();
            match pulled.get(&source) {
                Some(installed) => {
                    resolve(home, installed).map_err(|_| BundleError::NotPulled(source))
                }
                None => Err(BundleError::NotPulled(source)),
            }
        }
        BundleRef::Path(dir) => {
            // Absolute, so a session can re-resolve it after a restart from another directory.
            let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
            if dir.join("oci-layout").is_file() {
                oci::load_layout(home, &dir)
            } else if dir.is_dir() {
                load_project(&dir)
            } else {
                Err(BundleError::NotFound(format!(
                    "bundle directory {} does not exist",
                    dir.display()
                )))
            }
        }
        BundleRef::Installed {
            namespace,
            name,
            version,
        } => {
            if namespace == super::builtin::NAMESPACE {
                store::install_builtins(home)?;
            }
            let installed: Vec<_> = store::list_installed(home)?
                .into_iter()
                .filter(|i| i.namespace == namespace && i.id == name)
                .collect();
            let chosen = match &version {
                None => installed.last(),
                Some(v) => installed.iter().find(|i| &i.version == v),
            };
            match chosen {
                Some(i) => store::load_installed(home, &i.namespace, &i.id, &i.version.to_string()),
                None => Err(not_found(home, reference, &name, &installed)),
            }
        }
    }
}

fn not_found(
    home: &ServiceHome,
    reference: &str,
    name: &str,
    same_name: &[store::Installed],
) -> BundleError {
    if !same_name.is_empty() {
        let list: Vec<_> = same_name.iter().map(|i| i.reference()).collect();
        return BundleError::NotFound(format!(
            "no installed bundle matches \"{reference}\"; installed versions of {name}: {}",
            list.join(", ")
        ));
    }
    let mut message = format!("no bundle named \"{name}\" is installed");
    if Path::new(name).is_dir() {
        message.push_str(&format!("; to use the directory ./{name}, write ./{name}"));
    }
    let all: Vec<_> = store::list_installed(home)
        .unwrap_or_default()
        .iter()
        .map(|i| i.reference())
        .collect();
    let built: Vec<_> = all
        .iter()
        .filter(|r| !r.starts_with(&format!("{}/", super::builtin::NAMESPACE)))
        .collect();
    if built.is_empty() {
        message.push_str("; no bundles are installed yet: build one with `service-rs build <dir>`");
    }
    if !all.is_empty() {
        message.push_str(&format!("; installed bundles: {}", all.join(", ")));
    }
    BundleError::NotFound(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn installed(ns: &str, name: &str, version: Option<&str>) -> BundleRef {
        BundleRef::Installed {
            namespace: ns.into(),
            name: name.into(),
            version: version.map(|v| semver::Version::parse(v).unwrap()),
        }
    }

    #[test]
    fn every_reference_form_parses() {
        assert_eq!(
            BundleRef::parse("hello").unwrap(),
            installed("local", "hello", None)
        );
        assert_eq!(
            BundleRef::parse("hello@latest").unwrap(),
            installed("local", "hello", None)
        );
        assert_eq!(
            BundleRef::parse("hello@1.2.0").unwrap(),
            installed("local", "hello", Some("1.2.0"))
        );
        assert_eq!(
            BundleRef::parse("team/hello:0.3.1").unwrap(),
            installed("team", "hello", Some("0.3.1"))
        );
        assert_eq!(
            BundleRef::parse("./out").unwrap(),
            BundleRef::Path("./out".into())
        );
        assert_eq!(
            BundleRef::parse("/tmp/out").unwrap(),
            BundleRef::Path("/tmp/out".into())
        );
        assert_eq!(
            BundleRef::parse("examples/hello").unwrap(),
            BundleRef::Path("examples/hello".into())
        );
    }

    #[test]
    fn malformed_references_say_what_is_wrong() {
        for bad in ["", "Hello", "../x@1", "hello@one", "local/hello:x", "a b"] {
            let parsed = BundleRef::parse(bad);
            if bad == "../x@1" {
                // Starts with '.', so it is a path, and resolving it fails later.
                assert!(matches!(parsed, Ok(BundleRef::Path(_))));
                continue;
            }
            let err = parsed.unwrap_err().to_string();
            assert!(
                err.starts_with(&format!("invalid bundle reference \"{bad}\"")),
                "{err}"
            );
        }
    }
}
