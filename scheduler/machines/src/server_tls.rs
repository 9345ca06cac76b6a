//! Server certificates of the service's TLS listeners: one the site CA issues for a set of
//! names from a key that lives only in memory, re-issued when half its life is gone (the
//! boot listener's, and the API's with `tls-names`), or a chain and key an operator gives
//! as PEM files (the API's with `tls-cert-file` and `tls-key-file`).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use metal_protocol::{SigningKey, SiteCa};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::{CertifiedKey, SingleCertAndKey};
use tracing::{info, warn};

use metal_types::config::ApiTransport;

/// How long a certificate the site CA issues to a listener is valid.
const VALIDITY: Duration = Duration::from_secs(30 * 86400);

/// A listener's certificate, re-issued by the site CA when half of its life is gone.
#[derive(Debug)]
pub struct RenewingCertificate {
    ca: Arc<SiteCa>,
    names: Vec<String>,
    provider: Arc<CryptoProvider>,
    current: Mutex<(Arc<CertifiedKey>, SystemTime)>,
}

fn issue(ca: &SiteCa, names: &[String], provider: &CryptoProvider) -> Result<(Arc<CertifiedKey>, SystemTime), String> {
    let now = metal_clock::now();
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let der = ca
        .issue_server(&key.verifying_key(), names, now - Duration::from_secs(300), VALIDITY)
        .map_err(|e| e.to_string())?;
    let pkcs8 = ed25519_dalek::pkcs8::EncodePrivateKey::to_pkcs8_der(&key).map_err(|e| e.to_string())?;
    let key_der = PrivateKeyDer::Pkcs8(pkcs8.as_bytes().to_vec().into());
    let signing = provider.key_provider.load_private_key(key_der).map_err(|e| e.to_string())?;
    let chain = vec![der.into(), ca.certificate().der().to_vec().into()];
    Ok((Arc::new(CertifiedKey::new(chain, signing)), now + VALIDITY / 2))
}

impl RenewingCertificate {
    /// Issues the first certificate for `names`.
    pub fn new(ca: Arc<SiteCa>, names: Vec<String>, provider: Arc<CryptoProvider>) -> Result<Self, String> {
        let current = issue(&ca, &names, &provider)?;
        Ok(Self { ca, names, provider, current: Mutex::new(current) })
    }
}

impl ResolvesServerCert for RenewingCertificate {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let mut current = self.current.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if metal_clock::now() >= current.1 {
            match issue(&self.ca, &self.names, &self.provider) {
                Ok(renewed) => {
                    info!(names = ?self.names, "renewed a listener's certificate");
                    *current = renewed;
                }
                Err(e) => warn!(error = %e, "could not renew a listener's certificate; serving the old one"),
            }
        }
        Some(current.0.clone())
    }
}

/// A server configuration without client certificates that presents `resolver`'s.
pub fn server_config(
    provider: Arc<CryptoProvider>,
    resolver: Arc<dyn ResolvesServerCert>,
) -> Result<rustls::ServerConfig, String> {
    Ok(rustls::ServerConfig::builder_with_details(provider, Arc::new(metal_clock::RustlsTime))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_cert_resolver(resolver))
}

/// The certificate chain and key in two PEM files, checked to belong together.
pub fn from_files(cert: &Path, key: &Path, provider: &CryptoProvider) -> Result<SingleCertAndKey, String> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .and_then(Iterator::collect)
        .map_err(|e| format!("tls-cert-file {}: {e}", cert.display()))?;
    if chain.is_empty() {
        return Err(format!("tls-cert-file {}: no PEM certificate in it", cert.display()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("tls-key-file {}: {e}", key.display()))?;
    let signing =
        provider.key_provider.load_private_key(key_der).map_err(|e| format!("tls-key-file {}: {e}", key.display()))?;
    let certified = CertifiedKey::new(chain, signing);
    certified.keys_match().map_err(|e| {
        format!("tls-key-file {} is not the key of tls-cert-file {}: {e}", key.display(), cert.display())
    })?;
    Ok(certified.into())
}

/// The API listener's TLS configuration for `transport` (None: plain HTTP); `ca` opens the
/// site CA when the certificate is to come from it.
pub fn api_config(
    transport: &ApiTransport,
    ca: impl FnOnce() -> Result<Arc<SiteCa>, String>,
) -> Result<Option<rustls::ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver: Arc<dyn ResolvesServerCert> = match transport {
        ApiTransport::Plain => return Ok(None),
        ApiTransport::Files { cert, key } => Arc::new(from_files(cert, key, &provider)?),
        ApiTransport::SiteCa(names) => Arc::new(RenewingCertificate::new(ca()?, names.clone(), provider.clone())?),
    };
    server_config(provider, resolver).map(Some)
}
