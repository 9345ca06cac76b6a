//! DSSE envelopes (the in-toto/sigstore "Dead Simple Signing Envelope") signed with Ed25519.
//!
//! A report travels as `{payloadType, payload, signatures}`; each signature signs the DSSE
//! pre-authentication encoding (PAE) of type and payload, never the JSON around it, so the
//! envelope's own formatting can change without breaking signatures. We add one field per
//! signature, `certificates`: the signer's certificate chain (base64 DER, leaf first), so a
//! report can be verified offline with nothing but the site CA certificate.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::canonical::{CanonicalError, to_canonical_vec};

/// A signed envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Envelope {
    /// Media type of the payload, e.g. [`crate::WipeReport::PAYLOAD_TYPE`].
    pub payload_type: String,
    /// The payload bytes, standard base64 with padding.
    pub payload: String,
    /// One or more signatures over PAE(payloadType, payload).
    pub signatures: Vec<EnvelopeSignature>,
}

/// One signature of an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnvelopeSignature {
    /// Hex SHA-256 of the signer's raw Ed25519 public key; a hint, never trusted.
    pub keyid: String,
    /// The Ed25519 signature, standard base64.
    pub sig: String,
    /// The signer's certificate chain, leaf first, each standard base64 of DER.
    #[serde(default)]
    pub certificates: Vec<String>,
}

/// Why an envelope could not be made or read.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// The payload value has no canonical JSON form.
    #[error("payload is not canonical JSON: {0}")]
    Canonical(#[from] CanonicalError),
    /// A base64 field did not decode.
    #[error("{field} is not valid base64")]
    Base64 {
        /// Which field.
        field: &'static str,
    },
    /// The envelope carries no signature, or more than one where one was required.
    #[error("envelope must carry exactly one signature, it has {0}")]
    SignatureCount(usize),
    /// The signature bytes do not verify under the given key.
    #[error("signature does not verify")]
    BadSignature,
    /// The envelope's JSON is not a DSSE envelope.
    #[error("not a DSSE envelope: {0}")]
    Json(#[from] serde_json::Error),
}

/// A key that signs envelopes, with the certificate chain (DER, leaf first) that vouches for it.
pub struct Signer {
    key: SigningKey,
    chain: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print key material.
        f.debug_struct("Signer")
            .field("keyid", &key_id(&self.key.verifying_key()))
            .field("chain_len", &self.chain.len())
            .finish()
    }
}

impl Signer {
    /// A signer for `key`, presenting `chain` (DER certificates, leaf first).
    pub fn new(key: SigningKey, chain: Vec<Vec<u8>>) -> Self {
        Self { key, chain }
    }

    /// The public half of the signing key.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.key.verifying_key()
    }
}

/// The DSSE pre-authentication encoding: `"DSSEv1" SP len(type) SP type SP len(body) SP body`.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + payload_type.len() + 32);
    out.extend_from_slice(b"DSSEv1 ");
    out.extend_from_slice(payload_type.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload_type.as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload.len().to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(payload);
    out
}

/// The key id we put in signatures: hex SHA-256 of the raw public key.
pub fn key_id(key: &VerifyingKey) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

impl Envelope {
    /// Signs raw payload bytes.
    pub fn sign(payload_type: &str, payload: &[u8], signer: &Signer) -> Self {
        let signature = signer.key.sign(&pae(payload_type, payload));
        Self {
            payload_type: payload_type.to_owned(),
            payload: BASE64.encode(payload),
            signatures: vec![EnvelopeSignature {
                keyid: key_id(&signer.key.verifying_key()),
                sig: BASE64.encode(signature.to_bytes()),
                certificates: signer.chain.iter().map(|der| BASE64.encode(der)).collect(),
            }],
        }
    }

    /// Signs a value serialized as canonical JSON.
    pub fn sign_json<T: Serialize>(payload_type: &str, value: &T, signer: &Signer) -> Result<Self, EnvelopeError> {
        Ok(Self::sign(payload_type, &to_canonical_vec(value)?, signer))
    }

    /// Parses an envelope from its JSON form.
    pub fn from_json(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        Ok(serde_json::from_slice(bytes)?)
    }

    /// The decoded payload bytes.
    pub fn payload_bytes(&self) -> Result<Vec<u8>, EnvelopeError> {
        BASE64.decode(&self.payload).map_err(|_| EnvelopeError::Base64 { field: "payload" })
    }

    /// The only signature, for envelopes that must carry exactly one.
    pub fn single_signature(&self) -> Result<&EnvelopeSignature, EnvelopeError> {
        match self.signatures.as_slice() {
            [only] => Ok(only),
            many => Err(EnvelopeError::SignatureCount(many.len())),
        }
    }

    /// Checks `signature` (one of this envelope's) under `key`. Strict Ed25519 verification:
    /// non-canonical signatures and weak keys are refused.
    pub fn verify_signature(&self, signature: &EnvelopeSignature, key: &VerifyingKey) -> Result<(), EnvelopeError> {
        let payload = self.payload_bytes()?;
        let bytes = BASE64.decode(&signature.sig).map_err(|_| EnvelopeError::Base64 { field: "sig" })?;
        let signature = ed25519_dalek::Signature::from_slice(&bytes).map_err(|_| EnvelopeError::BadSignature)?;
        key.verify_strict(&pae(&self.payload_type, &payload), &signature).map_err(|_| EnvelopeError::BadSignature)
    }
}

impl EnvelopeSignature {
    /// The certificate chain, decoded to DER.
    pub fn certificate_ders(&self) -> Result<Vec<Vec<u8>>, EnvelopeError> {
        self.certificates
            .iter()
            .map(|b64| BASE64.decode(b64).map_err(|_| EnvelopeError::Base64 { field: "certificates" }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_dsse_specification() {
        // The worked example from the DSSE protocol document.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world".to_vec()
        );
    }

    #[test]
    fn sign_and_verify_round_trip() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let signer = Signer::new(key.clone(), vec![vec![1, 2, 3]]);
        let env = Envelope::sign_json("application/json", &serde_json::json!({"b": 1, "a": [true]}), &signer).unwrap();
        assert_eq!(env.payload_bytes().unwrap(), br#"{"a":[true],"b":1}"#);
        let sig = env.single_signature().unwrap();
        env.verify_signature(sig, &key.verifying_key()).unwrap();
        assert_eq!(sig.certificate_ders().unwrap(), vec![vec![1, 2, 3]]);
        let other = SigningKey::from_bytes(&[8u8; 32]).verifying_key();
        assert!(matches!(env.verify_signature(sig, &other), Err(EnvelopeError::BadSignature)));
        let json = serde_json::to_vec(&env).unwrap();
        assert_eq!(Envelope::from_json(&json).unwrap(), env);
    }

    #[test]
    fn changing_the_payload_type_breaks_the_signature() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let mut env = Envelope::sign("a/b", b"x", &Signer::new(key.clone(), vec![]));
        env.payload_type = "a/c".into();
        let sig = env.signatures[0].clone();
        assert!(matches!(env.verify_signature(&sig, &key.verifying_key()), Err(EnvelopeError::BadSignature)));
    }
}
