//! Serving certificates: loaded with the ring provider, and reloaded when the files change
//! (cert-manager rotates the Secret; kubelet swaps the mounted files atomically). A reload
//! affects new handshakes only: open connections keep their session.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum_server::tls_rustls::RustlsConfig;
use rustls::ServerConfig;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;

use crate::metrics::{Event, Metrics};

/// The certificate chain and key files.
#[derive(Clone, Debug)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The provider this binary uses everywhere (one choice, installed explicitly).
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Why a certificate and key pair does not load.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {error}", path.display())]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the certificate file is not PEM: {0}")]
    NotPem(rustls::pki_types::pem::Error),
    #[error("the certificate file holds no CERTIFICATE block")]
    NoCertificate,
    #[error("the key file holds no private key: {0}")]
    NoKey(rustls::pki_types::pem::Error),
    #[error("the private key cannot be used: {0}")]
    UnusableKey(rustls::Error),
    #[error("the private key does not belong to the certificate: {0}")]
    KeyMismatch(rustls::Error),
    #[error("TLS setup: {0}")]
    Setup(rustls::Error),
    /// The pair named, around one of the above (its text says all: no error source).
    #[error("serving certificate {} with key {}: {error}", cert.display(), key.display())]
    Pair {
        cert: PathBuf,
        key: PathBuf,
        error: Box<TlsError>,
    },
}

/// A TLS server config from PEM: the chain, a key that matches it, HTTP/2 and HTTP/1.1.
pub fn server_config(cert_pem: &[u8], key_pem: &[u8]) -> Result<ServerConfig, TlsError> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(TlsError::NotPem)?;
    if chain.is_empty() {
        return Err(TlsError::NoCertificate);
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(TlsError::NoKey)?;
    let provider = provider();
    let signing = provider
        .key_provider
        .load_private_key(key)
        .map_err(TlsError::UnusableKey)?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(TlsError::KeyMismatch)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(TlsError::Setup)?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(certified)));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(config)
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|error| TlsError::Read {
        path: path.to_path_buf(),
        error,
    })
}

impl CertFiles {
    fn read(&self) -> Result<(Vec<u8>, Vec<u8>), TlsError> {
        Ok((read(&self.cert)?, read(&self.key)?))
    }

    /// The first load: an error here stops the server (it cannot serve without a certificate).
    pub fn load(&self) -> Result<(RustlsConfig, Loaded), TlsError> {
        let (cert, key) = self.read()?;
        let config = server_config(&cert, &key).map_err(|e| self.context(e))?;
        Ok((
            RustlsConfig::from_config(Arc::new(config)),
            Loaded { cert, key },
        ))
    }

    fn context(&self, e: TlsError) -> TlsError {
        TlsError::Pair {
            cert: self.cert.clone(),
            key: self.key.clone(),
            error: Box::new(e),
        }
    }

    /// Polls the files every `interval` and swaps in a changed pair once it loads. A pair that
    /// does not load (a rotation caught half-written) keeps the previous one and is retried.
    pub async fn watch(
        self,
        config: RustlsConfig,
        mut loaded: Loaded,
        interval: Duration,
        metrics: Arc<Metrics>,
    ) {
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let files = self.clone();
            let Ok(read) = tokio::task::spawn_blocking(move || files.read()).await else {
                continue;
            };
            let (cert, key) = match read {
                Ok(pair) => pair,
                Err(e) => {
                    metrics.event(Event::TlsReloadFailed);
                    tracing::warn!(error = %e, "serving certificate not reloaded; the previous one stays");
                    continue;
                }
            };
            if cert == loaded.cert && key == loaded.key {
                continue;
            }
            match server_config(&cert, &key) {
                Ok(c) => {
                    config.reload_from_config(Arc::new(c));
                    loaded = Loaded { cert, key };
                    metrics.event(Event::TlsReloaded);
                    tracing::info!(cert = %self.cert.display(), "serving certificate reloaded");
                }
                Err(e) => {
                    metrics.event(Event::TlsReloadFailed);
                    tracing::warn!(error = %self.context(e), "serving certificate not reloaded; the previous one stays");
                }
            }
        }
    }
}

/// The bytes behind the certificate in use, to notice a change.
pub struct Loaded {
    cert: Vec<u8>,
    key: Vec<u8>,
}
