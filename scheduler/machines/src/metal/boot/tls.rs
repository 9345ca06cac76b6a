//! The TLS configuration of the boot service's listener (the ramdisk protocol, measured
//! boot's challenges and the hosts' join service; `metal-api` serves its routes). Its
//! certificate is issued by the site CA for the controller URL's host
//! (`server_tls::RenewingCertificate`); client certificates are optional at the handshake
//! (the join has none) and checked against the site CA by the handlers that need them
//! (`Peer`).

use std::sync::Arc;

use rustls::server::WebPkiClientVerifier;

use crate::metal::boot::BootService;
use crate::server_tls::RenewingCertificate;

/// The rustls configuration of the boot listener.
pub fn server_config(service: &BootService) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let resolver = RenewingCertificate::new(service.ca.clone(), service.certificate_names(), provider.clone())?;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(service.ca.certificate().der().to_vec().into()).map_err(|e| e.to_string())?;
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .allow_unauthenticated()
        .build()
        .map_err(|e| e.to_string())?;
    Ok(rustls::ServerConfig::builder_with_details(provider, Arc::new(metal_clock::RustlsTime))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(resolver)))
}
