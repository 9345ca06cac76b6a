//! A site CA and a role certificate for tests that sign or verify reports: a fresh CA
//! (valid from ten minutes ago for a day) and a key with its certificate for one node,
//! generation and role (valid for an hour), as PEM and, when asked, as files.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use metal_protocol::identity::{pem_encode, signing_key_pem};
use metal_protocol::{Role, SigningKey, SiteCa};

/// A CA and one holder of a certificate it issued.
#[derive(Debug)]
pub struct TestIdentity {
    /// The site CA (site `site-a`).
    pub ca: SiteCa,
    /// The holder's private key, PKCS#8 PEM.
    pub key_pem: String,
    /// The holder's certificate, then the CA's (PEM).
    pub chain_pem: String,
}

impl TestIdentity {
    /// A fresh CA and a `role` certificate for `node` at `generation`.
    pub fn issue(node: &str, generation: u64, role: Role) -> TestIdentity {
        let now = SystemTime::now();
        let ca = SiteCa::create("site-a", now - Duration::from_secs(600), Duration::from_secs(86400)).unwrap();
        let key = SigningKey::generate(&mut rand::rngs::OsRng);
        let cert = ca
            .issue(
                &key.verifying_key(),
                node,
                generation,
                role,
                now - Duration::from_secs(600),
                Duration::from_secs(3600),
            )
            .unwrap();
        let chain_pem = pem_encode("CERTIFICATE", &cert) + &ca.certificate().pem();
        TestIdentity { key_pem: signing_key_pem(&key).unwrap().to_string(), chain_pem, ca }
    }

    /// Writes `id.key`, `id.crt` (the chain) and `ca.crt` into `dir`; returns their paths.
    pub fn write(&self, dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let (key, cert, ca) = (dir.join("id.key"), dir.join("id.crt"), dir.join("ca.crt"));
        std::fs::write(&key, &self.key_pem).unwrap();
        std::fs::write(&cert, &self.chain_pem).unwrap();
        std::fs::write(&ca, self.ca.certificate().pem()).unwrap();
        (key, cert, ca)
    }
}
