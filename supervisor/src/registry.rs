//! Bundles through OCI registries (`push`, `pull`), with oci-client speaking the Distribution API.
//!
//! What travels is exactly the artifact of `build --output`: the same manifest bytes, config and layer, so a pushed
//! bundle has the manifest digest of the local build and a pulled one the content digest of the original. A push
//! uploads only the blobs the registry lacks. A pull checks every blob's digest itself and installs through the
//! same verified layout path as any OCI layout, atomically, or not at all.
//!
//! Credentials: `--username` with a password, else `SERVICE_REGISTRY_TOKEN` (a bearer token), else the `auths` entry
//! of `~/.docker/config.json` for the registry, else anonymous. Plain HTTP only to a loopback registry, or with
//! `plain_http`.

use std::path::Path;

use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::secrets::RegistryAuth;
use oci_client::{Client, Reference};
use serde_json::Value;

use crate::bundle::reference::{is_registry_reference, record_pull};
use crate::bundle::{archive, oci, store, Bundle, BundleError};
use crate::home::ServiceHome;

const MT_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// What went wrong talking to a registry; each message names the reference or digest and what to do.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A pull by the content digest `bundles` and `inspect` show, not by the manifest digest a registry knows.
    #[error("{digest} is the content digest of {bundle} (the digest of its files, as `bundles` lists it), not a manifest digest: pull by the manifest digest that push printed (`inspect` shows both), or by tag")]
    ContentDigest {
        /// The digest given.
        digest: String,
        /// The installed bundle whose content digest it is.
        bundle: String,
    },
    /// Not a registry reference.
    #[error("\"{reference}\" is not a registry reference ({message}); write <registry>/<repository>:<tag> or <registry>/<repository>@sha256:<digest>, e.g. 127.0.0.1:5000/team/hello:0.1.0")]
    BadReference {
        /// What was given.
        reference: String,
        /// Why it does not parse.
        message: String,
    },
    /// The registry refused the credentials.
    #[error("{registry} refused the credentials ({message}); check --username and the password, SERVICE_REGISTRY_TOKEN, or the auths of ~/.docker/config.json")]
    Denied {
        /// The registry.
        registry: String,
        /// Its answer.
        message: String,
    },
    /// No such tag or digest.
    #[error(
        "{reference} does not exist in the registry; check the repository and the tag or digest"
    )]
    NotFound {
        /// The reference.
        reference: String,
    },
    /// A blob or manifest did not hash to its digest.
    #[error("the content of {digest} from the registry does not match that digest; nothing was installed")]
    Tampered {
        /// The digest it should have had.
        digest: String,
    },
    /// The artifact is not a bundle.
    #[error("{reference} is not a service-rs bundle ({message})")]
    NotABundle {
        /// The reference.
        reference: String,
        /// Why.
        message: String,
    },
    /// Any other registry or transport failure.
    #[error("{registry}: {message}")]
    Transport {
        /// The registry.
        registry: String,
        /// What failed.
        message: String,
    },
    /// Reading or installing the bundle failed.
    #[error(transparent)]
    Bundle(#[from] BundleError),
}

type Result<T, E = RegistryError> = std::result::Result<T, E>;

/// How to reach a registry.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// `--username`.
    pub username: Option<String>,
    /// The password for `username` (from stdin).
    pub password: Option<String>,
    /// `--plain-http`: speak HTTP to a registry that is not on loopback.
    pub plain_http: bool,
}

/// What a push did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Pushed {
    /// The manifest digest, the same as the local `build --output`'s.
    pub digest: String,
    /// Blobs uploaded.
    pub uploaded: usize,
    /// Blobs the registry already had.
    pub present: usize,
}

fn parse(reference: &str) -> Result<Reference> {
    if !is_registry_reference(reference) {
        return Err(RegistryError::BadReference {
            reference: reference.into(),
            message: "the first part must be a registry host".into(),
        });
    }
    reference
        .parse::<Reference>()
        .map_err(|e| RegistryError::BadReference {
            reference: reference.into(),
            message: e.to_string(),
        })
}

/// The registry host (and port) of a registry reference, lower-cased, as an allowlist compares it.
pub fn registry_of(reference: &str) -> Result<String> {
    Ok(parse(reference)?.registry().to_ascii_lowercase())
}

fn is_loopback(registry: &str) -> bool {
    let host = registry
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(registry, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn client(reference: &Reference, access: &Access) -> Client {
    let registry = reference.resolve_registry().to_string();
    let protocol = if access.plain_http {
        ClientProtocol::Http
    } else if is_loopback(&registry) {
        ClientProtocol::HttpsExcept(vec![registry])
    } else {
        ClientProtocol::Https
    };
    Client::new(ClientConfig {
        protocol,
        ..Default::default()
    })
}

/// The credentials for `registry`, in the order the module documentation gives.
fn credentials(registry: &str, access: &Access) -> RegistryAuth {
    if let (Some(user), Some(password)) = (&access.username, &access.password) {
        return RegistryAuth::Basic(user.clone(), password.clone());
    }
    if let Some(token) = std::env::var("SERVICE_REGISTRY_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
    {
        return RegistryAuth::Bearer(token);
    }
    docker_config_auth(registry).unwrap_or(RegistryAuth::Anonymous)
}

/// The `auths.<registry>.auth` (base64 `user:password`) of `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`.
fn docker_config_auth(registry: &str) -> Option<RegistryAuth> {
    use base64::Engine as _;
    let dir = std::env::var_os("DOCKER_CONFIG")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".docker")))?;
    let config: Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).ok()?).ok()?;
    let auths = config["auths"].as_object()?;
    let entry = auths.iter().find_map(|(key, value)| {
        let key = key
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/');
        (key == registry).then_some(value)
    })?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(entry["auth"].as_str()?)
        .ok()?;
    let (user, password) = String::from_utf8(decoded)
        .ok()?
        .split_once(':')
        .map(|(u, p)| (u.to_string(), p.to_string()))?;
    Some(RegistryAuth::Basic(user, password))
}

/// Sorts a client error into denied, not found, tampered, or a transport failure, by its type and the registry's
/// error codes (never by searching the message, which carries digests and URLs).
fn classify(
    reference: &Reference,
    shown: &str,
    e: oci_client::errors::OciDistributionError,
) -> RegistryError {
    use oci_client::errors::{OciDistributionError as E, OciErrorCode as C};
    let registry = reference.resolve_registry().to_string();
    let denied = |message: String| RegistryError::Denied {
        registry: registry.clone(),
        message,
    };
    let not_found = || RegistryError::NotFound {
        reference: shown.into(),
    };
    match e {
        E::AuthenticationFailure(_) | E::UnauthorizedError { .. } => denied(e.to_string()),
        E::ServerError {
            code: 401 | 403, ..
        } => denied(e.to_string()),
        E::RequestError(ref r) if matches!(r.status().map(|s| s.as_u16()), Some(401 | 403)) => {
            denied(e.to_string())
        }
        E::ImageManifestNotFoundError(_) | E::ServerError { code: 404, .. } => not_found(),
        E::RequestError(ref r) if r.status().is_some_and(|s| s.as_u16() == 404) => not_found(),
        E::DigestError(oci_client::errors::DigestError::VerificationError { expected, .. }) => {
            RegistryError::Tampered { digest: expected }
        }
        E::RegistryError { ref envelope, .. } => {
            let codes: Vec<&C> = envelope.errors.iter().map(|err| &err.code).collect();
            if codes
                .iter()
                .any(|c| matches!(c, C::Unauthorized | C::Denied))
            {
                denied(e.to_string())
            } else if codes.iter().any(|c| {
                matches!(
                    c,
                    C::ManifestUnknown | C::NameUnknown | C::NotFound | C::BlobUnknown
                )
            }) {
                not_found()
            } else {
                RegistryError::Transport {
                    registry,
                    message: e.to_string(),
                }
            }
        }
        other => RegistryError::Transport {
            registry,
            message: other.to_string(),
        },
    }
}

/// A blob and its digest.
type Blob = (String, Vec<u8>);

/// The blobs of a layout written for `bundle`: the manifest bytes, and the config and layers.
fn artifact(bundle: &Bundle, dir: &Path) -> Result<(Vec<u8>, Vec<Blob>)> {
    let layout = dir.join("layout");
    let digest = oci::write_layout(&bundle.root, &layout)?;
    let blob = |digest: &str| {
        let path = layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"));
        std::fs::read(&path).map_err(|e| BundleError::io("cannot read", &path, e))
    };
    let manifest = blob(&digest)?;
    let parsed: Value = serde_json::from_slice(&manifest).unwrap_or_default();
    let mut blobs = Vec::new();
    let descriptors =
        std::iter::once(&parsed["config"]).chain(parsed["layers"].as_array().into_iter().flatten());
    for d in descriptors {
        let digest = d["digest"].as_str().unwrap_or_default().to_string();
        let bytes = blob(&digest)?;
        blobs.push((digest, bytes));
    }
    Ok((manifest, blobs))
}

/// The installed bundle whose content digest is `digest`, when a pull by digest names one (a mistake: registries
/// know manifest digests).
fn content_digest_of(home: &ServiceHome, digest: Option<&str>) -> Option<String> {
    let digest = digest?;
    crate::bundle::store::list(home)
        .ok()?
        .into_iter()
        .flatten()
        .find(|b| b.digest == digest)
        .map(|b| b.reference())
}

/// The manifest digest `bundle` has in a registry, an export or a layout (its content digest is another).
pub fn manifest_digest(bundle: &Bundle) -> Result<String> {
    let tmp = tempfile::tempdir()
        .map_err(|e| BundleError::io("cannot create a temporary directory for", &bundle.root, e))?;
    let (manifest, _) = artifact(bundle, tmp.path())?;
    Ok(archive::sha256_digest(&manifest))
}

/// Pushes `bundle` to `target` (`<registry>/<repository>:<tag>`), uploading only the blobs the registry lacks.
pub async fn push(bundle: &Bundle, target: &str, access: &Access) -> Result<Pushed> {
    let reference = parse(target)?;
    let client = client(&reference, access);
    let auth = credentials(reference.resolve_registry(), access);
    client
        .auth(&reference, &auth, oci_client::RegistryOperation::Push)
        .await
        .map_err(|e| classify(&reference, target, e))?;
    let tmp = tempfile::tempdir()
        .map_err(|e| BundleError::io("cannot create a temporary directory for", &bundle.root, e))?;
    let (manifest, blobs) = artifact(bundle, tmp.path())?;
    let (mut uploaded, mut present) = (0, 0);
    for (digest, bytes) in blobs {
        if client
            .blob_exists(&reference, &digest)
            .await
            .map_err(|e| classify(&reference, target, e))?
        {
            present += 1;
            continue;
        }
        client
            .push_blob(&reference, bytes, &digest)
            .await
            .map_err(|e| classify(&reference, target, e))?;
        uploaded += 1;
    }
    let content_type = axum::http::HeaderValue::from_static(MT_MANIFEST);
    client
        .push_manifest_raw(&reference, manifest.clone(), content_type)
        .await
        .map_err(|e| classify(&reference, target, e))?;
    Ok(Pushed {
        digest: archive::sha256_digest(&manifest),
        uploaded,
        present,
    })
}

/// Pulls the bundle at `source` (`<registry>/<repository>:<tag>` or `@sha256:<digest>`), verifies every blob and
/// installs it into the store.
pub async fn pull(home: &ServiceHome, source: &str, access: &Access) -> Result<Bundle> {
    let staged = fetch(home, source, access).await?;
    install_pulled(home, source, staged)
}

/// Installs what [`fetch`] brought from `source`, and records where it came from.
pub fn install_pulled(home: &ServiceHome, source: &str, staged: store::Staged) -> Result<Bundle> {
    let installed = staged.install(home)?;
    record_pull(home, source, &installed.reference())?;
    Ok(installed)
}

/// Pulls `source` and checks it as [`pull`] does, without installing it.
pub async fn fetch(home: &ServiceHome, source: &str, access: &Access) -> Result<store::Staged> {
    let reference = parse(source)?;
    let client = client(&reference, access);
    let auth = credentials(reference.resolve_registry(), access);
    let (manifest, _) = client
        .pull_manifest_raw(&reference, &auth, &[MT_MANIFEST])
        .await
        .map_err(|e| match content_digest_of(home, reference.digest()) {
            Some(bundle) => RegistryError::ContentDigest {
                digest: reference.digest().unwrap_or_default().to_string(),
                bundle,
            },
            None => classify(&reference, source, e),
        })?;
    let manifest_digest = archive::sha256_digest(&manifest);
    if let Some(wanted) = reference.digest() {
        if wanted != manifest_digest {
            return Err(RegistryError::Tampered {
                digest: wanted.to_string(),
            });
        }
    }
    let parsed: Value =
        serde_json::from_slice(&manifest).map_err(|e| RegistryError::NotABundle {
            reference: source.into(),
            message: format!("its manifest is not JSON: {e}"),
        })?;
    let descriptors: Vec<&Value> = std::iter::once(&parsed["config"])
        .chain(parsed["layers"].as_array().into_iter().flatten())
        .collect();
    let tmp = tempfile::tempdir()
        .map_err(|e| BundleError::io("cannot create a temporary directory in", home.root(), e))?;
    let layout = tmp.path().join("layout");
    let mut pulled = Vec::new();
    for d in descriptors {
        let digest = d["digest"]
            .as_str()
            .filter(|d| oci::is_digest(d))
            .ok_or_else(|| RegistryError::NotABundle {
                reference: source.into(),
                message: "a descriptor has no sha256 digest".into(),
            })?;
        let size = d["size"].as_u64().unwrap_or(u64::MAX);
        if size > archive::MAX_BUNDLE_BYTES + 16 * 1024 * 1024 {
            return Err(RegistryError::NotABundle {
                reference: source.into(),
                message: format!("blob {digest} is larger than a bundle may be"),
            });
        }
        let mut bytes = Vec::new();
        client
            .pull_blob(&reference, digest, &mut bytes)
            .await
            .map_err(|e| match classify(&reference, source, e) {
                // Name the digest the manifest asked for, not one a response header claimed.
                RegistryError::Tampered { .. } => RegistryError::Tampered {
                    digest: digest.into(),
                },
                other => other,
            })?;
        if archive::sha256_digest(&bytes) != digest {
            return Err(RegistryError::Tampered {
                digest: digest.into(),
            });
        }
        pulled.push(bytes);
    }
    pulled.push(manifest.to_vec());
    let blobs: Vec<&[u8]> = pulled.iter().map(Vec::as_slice).collect();
    oci::write_files(&layout, &oci::index_of(&manifest), &blobs)?;
    let loaded = oci::load_layout(home, &layout).map_err(|e| match e {
        BundleError::Layout { message, .. } => RegistryError::NotABundle {
            reference: source.into(),
            message,
        },
        other => other.into(),
    })?;
    Ok(store::Staged::new(tmp, loaded))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_registry_reference_starts_with_a_host() {
        assert!(is_registry_reference("127.0.0.1:5000/team/hello:0.1.0"));
        assert!(is_registry_reference("ghcr.io/org/hello@sha256:00"));
        assert!(is_registry_reference("localhost/hello"));
        assert!(
            !is_registry_reference("local/hello:0.1.0"),
            "a store namespace is not a host"
        );
        assert!(!is_registry_reference("./dir/x"));
        assert!(!is_registry_reference("hello"));
        assert!(
            is_loopback("127.0.0.1:5000")
                && is_loopback("localhost:80")
                && is_loopback("[::1]:5000")
        );
        assert!(!is_loopback("ghcr.io") && !is_loopback("10.0.0.1:5000"));
    }
}
