//! TLS on the listener (`serve --tls-cert PEM --tls-key PEM`), for a node no proxy fronts. The files are read
//! again when they change (see `live`), so a renewed certificate is served without a restart; connections already
//! open keep the one they began with.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// Why a certificate and key cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {what} {path}: {source}")]
    Read {
        /// "--tls-cert" or "--tls-key".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file holds no PEM object of the kind it should.
    #[error(
        "{path} holds no {kind} in PEM form (-----BEGIN {kind}-----); {what} takes a PEM file, such as \
         `openssl req -x509` or a certificate authority writes"
    )]
    Empty {
        /// "--tls-cert" or "--tls-key".
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What was looked for.
        kind: &'static str,
    },
    /// rustls refused the pair: a key that does not match the certificate, or one of a kind it cannot use.
    #[error("cannot serve the certificate of {cert} with the key of {key}: {source}; give the key the certificate was issued for")]
    Refused {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        source: rustls::Error,
    },
}

/// Where the certificate chain and its key are.
#[derive(Debug, Clone)]
pub struct TlsFiles {
    /// PEM certificate chain, the node's own certificate first.
    pub cert: PathBuf,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

/// The configuration in force, swapped when the files change.
pub struct LiveTls {
    files: TlsFiles,
    config: RwLock<Arc<rustls::ServerConfig>>,
    /// The bytes the configuration was made from, to tell a change.
    read: RwLock<(Vec<u8>, Vec<u8>)>,
    /// The bytes of a pair that could not be served, said once rather than at every read.
    refused: std::sync::Mutex<Option<(Vec<u8>, Vec<u8>)>>,
}

impl LiveTls {
    /// Reads the files once; an error names what is wrong with them.
    pub fn load(files: TlsFiles) -> Result<LiveTls, TlsError> {
        let bytes = read_both(&files)?;
        let config = config(&files, &bytes)?;
        Ok(LiveTls {
            files,
            config: RwLock::new(config),
            read: RwLock::new(bytes),
            refused: Default::default(),
        })
    }

    /// The configuration a new connection's handshake uses.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        let config = self.config.read().unwrap_or_else(|p| p.into_inner());
        tokio_rustls::TlsAcceptor::from(config.clone())
    }

    /// Reads the files again and serves them from now on when they changed and make a valid pair; a pair that does
    /// not (a renewal caught between writing the certificate and the key) keeps the old one and says why.
    pub fn reload(&self) {
        let Ok(bytes) = read_both(&self.files) else {
            return;
        };
        let mut refused = self.refused.lock().unwrap_or_else(|p| p.into_inner());
        if *self.read.read().unwrap_or_else(|p| p.into_inner()) == bytes
            || refused.as_ref() == Some(&bytes)
        {
            return;
        }
        match config(&self.files, &bytes) {
            Ok(config) => {
                *self.config.write().unwrap_or_else(|p| p.into_inner()) = config;
                *self.read.write().unwrap_or_else(|p| p.into_inner()) = bytes;
                tracing::info!(cert = %self.files.cert.display(), "the TLS certificate changed; new connections use it");
            }
            Err(e) => {
                tracing::warn!("{e}; the certificate in force is kept until the files make a pair");
                *refused = Some(bytes);
            }
        }
    }
}

fn read_both(files: &TlsFiles) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
    let read = |what, path: &Path| {
        std::fs::read(path).map_err(|source| TlsError::Read {
            what,
            path: path.to_path_buf(),
            source,
        })
    };
    Ok((
        read("--tls-cert", &files.cert)?,
        read("--tls-key", &files.key)?,
    ))
}

/// A server configuration for the PEM `bytes` of `files`, offering HTTP/2 and HTTP/1.1.
fn config(
    files: &TlsFiles,
    (cert, key): &(Vec<u8>, Vec<u8>),
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
        .filter_map(Result::ok)
        .collect();
    if chain.is_empty() {
        return Err(TlsError::Empty {
            what: "--tls-cert",
            path: files.cert.clone(),
            kind: "CERTIFICATE",
        });
    }
    let key = PrivateKeyDer::from_pem_slice(key).map_err(|_| TlsError::Empty {
        what: "--tls-key",
        path: files.key.clone(),
        kind: "PRIVATE KEY",
    })?;
    let refused = |source| TlsError::Refused {
        cert: files.cert.clone(),
        key: files.key.clone(),
        source,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(refused)?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .map_err(refused)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
