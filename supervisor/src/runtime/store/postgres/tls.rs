//! TLS to the database. With `sslmode=require` in the store URL (or a CA given with `serve --store-ca`), every
//! connection is TLS and the server's certificate is verified, name included, against the web's roots and that CA:
//! `require` without verification would let anyone on the path read the sessions. Without either, connections are
//! plain (a Unix socket or a loopback port); libpq's default `prefer`, which would fall back to plain when TLS fails,
//! is taken as plain rather than silently either.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector for `config`, whose TLS mode it settles: required and verified, or off.
pub(super) fn connector(
    config: &mut tokio_postgres::Config,
    ca: Option<&Path>,
) -> Result<MakeRustlsConnect, String> {
    let required = ca.is_some() || config.get_ssl_mode() == SslMode::Require;
    config.ssl_mode(if required {
        SslMode::Require
    } else {
        SslMode::Disable
    });
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    if let Some(ca) = ca {
        let certs = CertificateDer::pem_file_iter(ca)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("cannot read the database CA {}: {e}", ca.display()))?;
        if certs.is_empty() {
            return Err(format!(
                "{} holds no PEM certificate; give the CA that signed the database's certificate",
                ca.display()
            ));
        }
        for cert in certs {
            roots
                .add(cert)
                .map_err(|e| format!("the database CA {} is not usable: {e}", ca.display()))?;
        }
    }
    // The provider is named: with more than one compiled in, rustls has no process default to pick.
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS set-up: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(tls))
}

/// The TLS stack's reason, when connecting failed on it (an unknown CA, a name mismatch).
pub(super) fn refused(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    crate::error_chain::causes(e)
        .find_map(|s| s.downcast_ref::<rustls::Error>())
        .map(|e| e.to_string())
}
