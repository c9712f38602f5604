//! TLS for a webhook off the node: `https://` with the server's certificate checked against the
//! operator's CA bundle (the cluster's own CA, for a webhook behind a Service with a cluster
//! certificate). Plain `http://` answers can be spoofed by anything on the path, and the webhook
//! decides a NIC's addresses and routes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The CA bundle a pod's service account carries: the cluster's CA.
pub const SERVICE_ACCOUNT_CA: &str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";

/// A CA bundle that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// The file could not be read.
    #[error("CA bundle {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no usable certificate.
    #[error("CA bundle {path}: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// How an `https://` endpoint is trusted: the certificates of a CA bundle, and nothing else (not
/// the host's store: a webhook is the operator's, with the operator's CA).
#[derive(Clone)]
pub struct Tls {
    config: Arc<rustls::ClientConfig>,
    source: PathBuf,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("ca", &self.source).finish()
    }
}

impl PartialEq for Tls {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.config, &other.config)
    }
}

impl Eq for Tls {}

impl Tls {
    /// Trusts the certificates of the PEM bundle at `path` (one or more `CERTIFICATE` blocks).
    pub fn from_ca_file(path: &Path) -> Result<Self, TlsError> {
        let pem = std::fs::read(path).map_err(|source| TlsError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let invalid = |reason: String| TlsError::Invalid {
            path: path.to_path_buf(),
            reason,
        };
        let mut roots = rustls::RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&pem) {
            let cert = cert.map_err(|e| invalid(format!("not PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| invalid(format!("a certificate rustls refuses: {e}")))?;
        }
        if roots.is_empty() {
            return Err(invalid("no CERTIFICATE block".into()));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(e.to_string()))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Self {
            config: Arc::new(config),
            source: path.to_path_buf(),
        })
    }

    /// The client configuration.
    pub(crate) fn config(&self) -> Arc<rustls::ClientConfig> {
        self.config.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ca_bundle_without_certificates_is_refused_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("ca.pem");
        std::fs::write(&f, "not a certificate\n").unwrap();
        let e = Tls::from_ca_file(&f).unwrap_err().to_string();
        assert!(e.contains("ca.pem") && e.contains("no CERTIFICATE"), "{e}");
        let e = Tls::from_ca_file(&dir.path().join("missing.pem"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
    }
}
