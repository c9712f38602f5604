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
    use crate::RetryPolicy;
    use crate::webhook::Webhook;
    use std::process::Command;
    use std::time::Duration;

    /// A CA and a server certificate for `localhost` signed by it, made by openssl in `dir`:
    /// (CA PEM, server chain PEM, server key PEM). `None` without openssl.
    fn pki(dir: &Path, tag: &str) -> Option<(PathBuf, Vec<u8>, Vec<u8>)> {
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir).output();
            match out {
                Ok(o) if o.status.success() => Some(()),
                Ok(o) => panic!("openssl {args:?}: {}", String::from_utf8_lossy(&o.stderr)),
                Err(_) => None,
            }
        };
        let (ca_key, ca) = (format!("{tag}-ca.key"), format!("{tag}-ca.pem"));
        openssl(&[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &ca_key,
            "-out",
            &ca,
            "-days",
            "1",
            "-subj",
            &format!("/CN={tag} test CA"),
        ])?;
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=localhost",
        ])?;
        std::fs::write(dir.join("san.ext"), "subjectAltName=DNS:localhost\n").ok()?;
        openssl(&[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            &ca,
            "-CAkey",
            &ca_key,
            "-CAcreateserial",
            "-out",
            "server.pem",
            "-days",
            "1",
            "-extfile",
            "san.ext",
        ])?;
        Some((
            dir.join(ca),
            std::fs::read(dir.join("server.pem")).ok()?,
            std::fs::read(dir.join("server.key")).ok()?,
        ))
    }

    /// An https webhook answers when its certificate chains to the CA given, and is refused,
    /// naming the certificate, when it does not: an off-node webhook cannot be spoofed.
    #[tokio::test]
    async fn an_https_webhook_is_trusted_only_with_its_ca() {
        let dir = tempfile::tempdir().unwrap();
        let Some((ca, chain, key)) = pki(dir.path(), "ours") else {
            eprintln!("SKIP an_https_webhook_is_trusted_only_with_its_ca: needs openssl");
            return;
        };
        let (script, _) =
            crate::fake::clouds::webhook("pci-0000-01-00-0", 9000, "p", "10.0.0.5/24");
        let server = crate::fake::FakeServer::start_tls(&chain, &key, script)
            .await
            .unwrap();
        let quick = RetryPolicy {
            budget: Duration::from_millis(200),
            ..RetryPolicy::default()
        };
        let tls = Tls::from_ca_file(&ca).unwrap();
        let hook = Webhook::connect(&server.endpoint, Some(tls), Duration::from_secs(5), quick)
            .await
            .unwrap();
        assert!(hook.capabilities().cloud_provider);

        let other = tempfile::tempdir().unwrap();
        let (other_ca, _, _) = pki(other.path(), "theirs").unwrap();
        let theirs = Tls::from_ca_file(&other_ca).unwrap();
        let e = Webhook::connect(
            &server.endpoint,
            Some(theirs),
            Duration::from_secs(5),
            quick,
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("certificate"), "{e}");

        let e = Webhook::connect(&server.endpoint, None, Duration::from_secs(5), quick)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("--webhook-ca-file"), "{e}");
    }

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
