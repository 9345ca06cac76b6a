//! EK certificates: the certificate a TPM's maker stored in it, checked against the makers'
//! CAs a site trusts (roots and intermediates), and checked to certify the very EK the TPM
//! recreated. Validity dates are not checked: an EK certificate names a chip for its life,
//! and makers' dates are often odd (a lapsed certificate does not mean another TPM).

use ring::signature::{self, UnparsedPublicKey, VerificationAlgorithm};
use x509_parser::certificate::X509Certificate;
use x509_parser::prelude::FromDer as _;
use x509_parser::public_key::PublicKey as CertKey;

use crate::tpm::{KeyMaterial, PublicKey};

/// The deepest chain followed (a leaf, intermediates, a root).
const MAX_DEPTH: usize = 6;

/// Checks that `certificate` (DER) certifies `ek` and chains, signature by signature, to a
/// self-signed certificate among `cas` (DER). Returns the chain's subjects, leaf first.
pub fn verify(certificate: &[u8], ek: &PublicKey, cas: &[Vec<u8>]) -> Result<Vec<String>, String> {
    let (_, leaf) = X509Certificate::from_der(certificate).map_err(|e| format!("unreadable EK certificate: {e}"))?;
    certifies(&leaf, ek)?;
    let cas: Vec<X509Certificate<'_>> = cas
        .iter()
        .map(|der| X509Certificate::from_der(der).map(|(_, c)| c).map_err(|e| format!("unreadable TPM CA: {e}")))
        .collect::<Result<_, _>>()?;
    let mut chain = vec![leaf.subject().to_string()];
    let mut current = leaf;
    for _ in 0..MAX_DEPTH {
        let issuer = cas
            .iter()
            .filter(|ca| ca.subject().as_raw() == current.issuer().as_raw())
            .find(|ca| signed_by(&current, ca).is_ok())
            .ok_or_else(|| format!("no trusted TPM CA named {} signed {}", current.issuer(), current.subject()))?;
        if issuer.subject().as_raw() == issuer.issuer().as_raw() {
            chain.push(issuer.subject().to_string());
            return Ok(chain);
        }
        chain.push(issuer.subject().to_string());
        current = issuer.clone();
    }
    Err(format!("the chain from {} is deeper than {MAX_DEPTH}", chain[0]))
}

/// The certificate's key is the EK's.
fn certifies(certificate: &X509Certificate<'_>, ek: &PublicKey) -> Result<(), String> {
    let same = match (certificate.public_key().parsed(), &ek.key) {
        (Ok(CertKey::RSA(rsa)), KeyMaterial::Rsa { modulus, exponent }) => {
            strip(rsa.modulus) == strip(modulus) && strip(rsa.exponent) == strip(&exponent.to_be_bytes())
        }
        (Ok(CertKey::EC(point)), KeyMaterial::P256 { x, y }) => point.data() == [&[4u8][..], x, y].concat().as_slice(),
        _ => false,
    };
    if same { Ok(()) } else { Err("the EK certificate certifies another key than the TPM's EK".into()) }
}

/// A big-endian integer without its leading zeros.
fn strip(bytes: &[u8]) -> &[u8] {
    &bytes[bytes.iter().take_while(|b| **b == 0).count()..]
}

/// `child`'s signature verifies under `issuer`'s key.
fn signed_by(child: &X509Certificate<'_>, issuer: &X509Certificate<'_>) -> Result<(), String> {
    let oid = child.signature_algorithm.algorithm.to_id_string();
    let key = issuer.public_key();
    let curve = key.algorithm.parameters.as_ref().and_then(|p| p.as_oid().ok()).map(|o| o.to_id_string());
    let algorithm: &dyn VerificationAlgorithm = match (oid.as_str(), curve.as_deref()) {
        ("1.2.840.113549.1.1.11", _) => &signature::RSA_PKCS1_2048_8192_SHA256,
        ("1.2.840.113549.1.1.12", _) => &signature::RSA_PKCS1_2048_8192_SHA384,
        ("1.2.840.113549.1.1.13", _) => &signature::RSA_PKCS1_2048_8192_SHA512,
        ("1.2.840.10045.4.3.2", Some("1.2.840.10045.3.1.7")) => &signature::ECDSA_P256_SHA256_ASN1,
        ("1.2.840.10045.4.3.3", Some("1.3.132.0.34")) => &signature::ECDSA_P384_SHA384_ASN1,
        ("1.2.840.10045.4.3.2", Some("1.3.132.0.34")) => &signature::ECDSA_P384_SHA256_ASN1,
        ("1.2.840.10045.4.3.3", Some("1.2.840.10045.3.1.7")) => &signature::ECDSA_P256_SHA384_ASN1,
        (other, _) => return Err(format!("signature algorithm {other} is not supported")),
    };
    UnparsedPublicKey::new(algorithm, &key.subject_public_key.data)
        .verify(child.tbs_certificate.as_ref(), &child.signature_value.data)
        .map_err(|_| format!("{}'s signature does not verify under {}", child.subject(), issuer.subject()))
}
