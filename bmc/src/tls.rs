//! How a server's TLS certificate is trusted: a pinned CA (the hostname is checked), a pinned
//! SHA-256 fingerprint of the BMC's own certificate (the pin is the identity, as for the
//! self-signed certificates most BMCs ship), the fingerprint of a CA the server sends in its
//! chain (how a ramdisk trusts its controller), or, only when asked for explicitly per BMC,
//! no verification at all.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest as _, Sha256};

use crate::error::BmcError;

/// What to trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsTrust {
    /// Certificates issued by this CA (PEM); the hostname must match.
    Ca(Vec<u8>),
    /// Exactly the certificate with this SHA-256 fingerprint.
    Fingerprint([u8; 32]),
    /// Certificates issued by the CA with this SHA-256 fingerprint, which the server sends
    /// in its chain (the site CA pinned on a ramdisk's kernel command line); the hostname
    /// must match.
    CaFingerprint([u8; 32]),
    /// Nothing is verified (explicit per BMC; every connection logs a warning).
    InsecureSkipVerify,
}

/// Parses a SHA-256 fingerprint written as hex, with or without colons.
pub fn parse_fingerprint(text: &str) -> Result<[u8; 32], BmcError> {
    let hex_digits: String = text.chars().filter(|c| *c != ':').collect();
    let bytes = hex::decode(&hex_digits)
        .map_err(|_| BmcError::Invalid(format!("fingerprint {text:?} is not hex (64 digits, colons allowed)")))?;
    bytes.try_into().map_err(|_| BmcError::Invalid(format!("fingerprint {text:?} is not 32 bytes (SHA-256)")))
}

/// The SHA-256 fingerprint of a DER certificate.
pub fn fingerprint(der: &[u8]) -> [u8; 32] {
    Sha256::digest(der).into()
}

/// What a connection's certificate must show.
#[derive(Debug, Clone, Copy)]
enum Pin {
    /// Nothing (explicitly insecure).
    Nothing,
    /// The server's own certificate has this fingerprint.
    Leaf([u8; 32]),
    /// The server's chain includes the CA with this fingerprint and verifies against it.
    Ca([u8; 32]),
}

#[derive(Debug)]
struct Pinned {
    pin: Pin,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.pin {
            Pin::Nothing => {
                tracing::warn!(bmc = ?server_name, "TLS verification is switched off for this BMC");
                Ok(ServerCertVerified::assertion())
            }
            Pin::Leaf(pin) => {
                let seen = fingerprint(end_entity);
                if seen == pin {
                    Ok(ServerCertVerified::assertion())
                } else {
                    Err(rustls::Error::General(format!(
                        "certificate fingerprint {} is not the pinned {}",
                        hex::encode(seen),
                        hex::encode(pin)
                    )))
                }
            }
            Pin::Ca(pin) => {
                // The pinned CA, found in the chain the server sends, becomes the only trust
                // anchor; the usual WebPKI checks (chain, validity, hostname) run against it.
                let ca = intermediates.iter().find(|c| fingerprint(c) == pin).ok_or_else(|| {
                    rustls::Error::General(format!(
                        "the server's certificate chain does not include the pinned CA {}",
                        hex::encode(pin)
                    ))
                })?;
                let mut roots = rustls::RootCertStore::empty();
                roots.add(ca.clone()).map_err(|e| rustls::Error::General(format!("the pinned CA: {e}")))?;
                let webpki =
                    rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                        .build()
                        .map_err(|e| rustls::Error::General(format!("the pinned CA: {e}")))?;
                webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            }
        }
    }

    // The handshake signatures are still checked: the server must hold the pinned key.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// A client certificate chain (DER, leaf first) and its PKCS#8 key, for mutual TLS.
pub struct ClientIdentity {
    /// The chain.
    pub chain: Vec<Vec<u8>>,
    /// The private key, PKCS#8 DER (zeroed when dropped).
    pub key_pkcs8: zeroize::Zeroizing<Vec<u8>>,
}

impl std::fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientIdentity").field("chain_len", &self.chain.len()).finish_non_exhaustive()
    }
}

/// An HTTP client for one BMC with its trust, timeouts and no redirects to other hosts.
pub fn http_client(trust: &TlsTrust, timeout: std::time::Duration) -> Result<reqwest::Client, BmcError> {
    http_client_with_identity(trust, timeout, None)
}

/// An HTTP client with its trust and timeouts that presents `identity` (mutual TLS; pinned
/// trusts only).
pub fn http_client_with_identity(
    trust: &TlsTrust,
    timeout: std::time::Duration,
    identity: Option<&ClientIdentity>,
) -> Result<reqwest::Client, BmcError> {
    let builder = reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout.min(std::time::Duration::from_secs(10)))
        // One idle connection kept per BMC, for a few seconds: a client kept for each of
        // thousands of BMCs must not hold thousands of sockets (the session it keeps is what
        // is worth keeping).
        .pool_max_idle_per_host(1)
        .pool_idle_timeout(std::time::Duration::from_secs(10))
        .redirect(reqwest::redirect::Policy::limited(3));
    let builder = match (trust, identity) {
        (TlsTrust::Ca(pem), None) => {
            let ca = reqwest::Certificate::from_pem(pem)
                .map_err(|e| BmcError::Invalid(format!("the BMC CA is not a PEM certificate: {e}")))?;
            builder.use_rustls_tls().tls_built_in_root_certs(false).add_root_certificate(ca)
        }
        (TlsTrust::Ca(_), Some(_)) => {
            return Err(BmcError::Invalid("a client certificate needs a pinned trust".into()));
        }
        (TlsTrust::Fingerprint(pin), _) => builder.use_preconfigured_tls(pinned_config(Pin::Leaf(*pin), identity)?),
        (TlsTrust::CaFingerprint(pin), _) => builder.use_preconfigured_tls(pinned_config(Pin::Ca(*pin), identity)?),
        (TlsTrust::InsecureSkipVerify, _) => builder.use_preconfigured_tls(pinned_config(Pin::Nothing, identity)?),
    };
    builder.build().map_err(|e| BmcError::Invalid(format!("cannot build the HTTP client: {e}")))
}

/// A rustls client configuration that trusts servers as `trust` says, presenting no client
/// certificate (for clients other than reqwest's async one, `metalctl`'s for instance).
pub fn client_config(trust: &TlsTrust) -> Result<rustls::ClientConfig, BmcError> {
    match trust {
        TlsTrust::Ca(pem) => {
            use rustls::pki_types::pem::PemObject as _;
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| BmcError::Invalid(format!("the CA file is not PEM certificates: {e}")))?;
                roots.add(cert).map_err(|e| BmcError::Invalid(format!("the CA file: {e}")))?;
            }
            if roots.is_empty() {
                return Err(BmcError::Invalid("the CA file holds no PEM certificate".into()));
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            Ok(rustls::ClientConfig::builder_with_details(provider, Arc::new(metal_clock::RustlsTime))
                .with_safe_default_protocol_versions()
                .map_err(|e| BmcError::Invalid(format!("TLS configuration: {e}")))?
                .with_root_certificates(roots)
                .with_no_client_auth())
        }
        TlsTrust::Fingerprint(pin) => pinned_config(Pin::Leaf(*pin), None),
        TlsTrust::CaFingerprint(pin) => pinned_config(Pin::Ca(*pin), None),
        TlsTrust::InsecureSkipVerify => pinned_config(Pin::Nothing, None),
    }
}

fn pinned_config(pin: Pin, identity: Option<&ClientIdentity>) -> Result<rustls::ClientConfig, BmcError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_details(provider.clone(), Arc::new(metal_clock::RustlsTime))
        .with_safe_default_protocol_versions()
        .map_err(|e| BmcError::Invalid(format!("TLS configuration: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Pinned { pin, provider }));
    Ok(match identity {
        None => builder.with_no_client_auth(),
        Some(id) => {
            let chain = id.chain.iter().map(|der| CertificateDer::from(der.clone())).collect();
            let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
                id.key_pkcs8.to_vec(),
            ));
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| BmcError::Invalid(format!("the client certificate: {e}")))?
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_parse_with_or_without_colons() {
        let hex64 = "ab".repeat(32);
        let colons = vec!["AB"; 32].join(":");
        assert_eq!(parse_fingerprint(&hex64).unwrap(), [0xab; 32]);
        assert_eq!(parse_fingerprint(&colons).unwrap(), [0xab; 32]);
        assert!(parse_fingerprint("abcd").unwrap_err().to_string().contains("not 32 bytes"));
        assert!(parse_fingerprint("zz").unwrap_err().to_string().contains("not hex"));
    }
}
