//! BMC credentials at rest. With `METAL_MASTER_KEY` (32 bytes as 64 hex digits) set, a
//! password is sealed with ChaCha20-Poly1305 under it, with the node id as associated data
//! (a sealed value copied to another node does not open); without it, the value is stored
//! as is and the service warns at start. Nothing here logs or returns a secret.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{ChaCha20Poly1305, Key, Nonce};
use rand::RngCore as _;
use zeroize::Zeroizing;

use metal_bmc::Secret;

/// The key sealing BMC credentials.
#[derive(Clone, PartialEq, Eq)]
pub struct MasterKey(Zeroizing<[u8; 32]>);

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MasterKey(***)")
    }
}

impl MasterKey {
    /// Parses 64 hex digits.
    pub fn from_hex(text: &str) -> Result<Self, String> {
        let bytes = Zeroizing::new(hex::decode(text.trim()).map_err(|_| "is not hex".to_owned())?);
        let key: [u8; 32] = bytes.as_slice().try_into().map_err(|_| "must be 32 bytes (64 hex digits)".to_owned())?;
        Ok(Self(Zeroizing::new(key)))
    }

    fn cipher(&self) -> ChaCha20Poly1305 {
        ChaCha20Poly1305::new(Key::from_slice(self.0.as_slice()))
    }
}

/// Why a stored credential cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    /// The credential is sealed and no key is configured.
    #[error("the BMC credential of node {0} is encrypted and METAL_MASTER_KEY is not set")]
    NoKey(String),
    /// The key does not open it (another key, another node, or a damaged value).
    #[error("the BMC credential of node {0} does not decrypt with METAL_MASTER_KEY (another key, or a damaged value)")]
    WrongKey(String),
    /// The stored value has an unknown form.
    #[error("the BMC credential of node {0} is stored in an unknown form")]
    Malformed(String),
}

const SEALED: &str = "enc:v1:";
const PLAIN: &str = "plain:";

/// Whether a stored value is sealed.
pub fn is_sealed(stored: &str) -> bool {
    stored.starts_with(SEALED)
}

/// The stored form of `secret` for `node`.
pub fn seal(key: Option<&MasterKey>, node: &str, secret: &Secret) -> String {
    let Some(key) = key else { return format!("{PLAIN}{}", secret.expose()) };
    let mut nonce = [0u8; 12];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let sealed = key
        .cipher()
        .encrypt(Nonce::from_slice(&nonce), Payload { msg: secret.expose().as_bytes(), aad: node.as_bytes() })
        .expect("ChaCha20-Poly1305 encryption of a short message cannot fail");
    format!("{SEALED}{}:{}", hex::encode(nonce), hex::encode(sealed))
}

/// The secret from its stored form.
pub fn open(key: Option<&MasterKey>, node: &str, stored: &str) -> Result<Secret, SecretError> {
    if let Some(plain) = stored.strip_prefix(PLAIN) {
        return Ok(Secret::new(plain));
    }
    let sealed = stored.strip_prefix(SEALED).ok_or_else(|| SecretError::Malformed(node.to_owned()))?;
    let key = key.ok_or_else(|| SecretError::NoKey(node.to_owned()))?;
    let (nonce, body) = sealed.split_once(':').ok_or_else(|| SecretError::Malformed(node.to_owned()))?;
    let nonce: [u8; 12] = hex::decode(nonce)
        .ok()
        .and_then(|n| n.try_into().ok())
        .ok_or_else(|| SecretError::Malformed(node.to_owned()))?;
    let body = hex::decode(body).map_err(|_| SecretError::Malformed(node.to_owned()))?;
    let plain = Zeroizing::new(
        key.cipher()
            .decrypt(Nonce::from_slice(&nonce), Payload { msg: &body, aad: node.as_bytes() })
            .map_err(|_| SecretError::WrongKey(node.to_owned()))?,
    );
    String::from_utf8(plain.to_vec()).map(Secret::new).map_err(|_| SecretError::Malformed(node.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> MasterKey {
        MasterKey::from_hex(&hex::encode([byte; 32])).unwrap()
    }

    #[test]
    fn sealed_credentials_open_only_with_their_key_and_node() {
        let secret = Secret::new("bmc-password");
        let stored = seal(Some(&key(1)), "n1", &secret);
        assert!(is_sealed(&stored) && !stored.contains("bmc-password"));
        assert_ne!(stored, seal(Some(&key(1)), "n1", &secret), "fresh nonce each time");
        assert_eq!(open(Some(&key(1)), "n1", &stored).unwrap(), secret);
        assert_eq!(open(Some(&key(2)), "n1", &stored), Err(SecretError::WrongKey("n1".into())));
        assert_eq!(open(Some(&key(1)), "n2", &stored), Err(SecretError::WrongKey("n2".into())));
        assert_eq!(open(None, "n1", &stored), Err(SecretError::NoKey("n1".into())));
        let plain = seal(None, "n1", &secret);
        assert!(!is_sealed(&plain));
        assert_eq!(open(Some(&key(1)), "n1", &plain).unwrap(), secret);
        assert_eq!(open(None, "n1", "weird"), Err(SecretError::Malformed("n1".into())));
    }

    #[test]
    fn master_keys_parse_and_never_print() {
        assert!(MasterKey::from_hex("zz").unwrap_err().contains("not hex"));
        assert!(MasterKey::from_hex("abcd").unwrap_err().contains("32 bytes"));
        assert_eq!(format!("{:?}", key(9)), "MasterKey(***)");
    }
}
