//! TPM2_MakeCredential done by the verifier (TPM 2.0 Library, Part 1, 24): a secret that
//! only the TPM holding a given EK can recover, and only for a key of a given name loaded in
//! that same TPM. When the ramdisk answers with the secret (by TPM2_ActivateCredential), the
//! attestation key it quotes with is proven to live beside the pinned EK.

use aes::cipher::{AsyncStreamCipher as _, KeyIvInit as _};
use hmac::Mac as _;
use rsa::{BigUint, Oaep, RsaPublicKey};
use sha2::Sha256;

use crate::tpm::{KeyMaterial, PublicKey, TpmError, Writer};

/// What the ramdisk hands its TPM: `TPM2B_ID_OBJECT` and `TPM2B_ENCRYPTED_SECRET`, both
/// without their outer size (the command marshals them as `TPM2B`s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// The `TPM2B_ID_OBJECT`'s contents: the integrity HMAC, then the encrypted secret.
    pub blob: Vec<u8>,
    /// The `TPM2B_ENCRYPTED_SECRET`'s contents: the seed, encrypted to the EK.
    pub encrypted_seed: Vec<u8>,
}

/// Encrypts `secret` (at most 32 bytes) so that only the TPM of `ek` (an RSA 2048 EK with
/// AES-128 as its symmetric algorithm, the TCG default) can recover it, and only for the
/// object named `key_name`.
pub fn make_credential(
    ek: &PublicKey,
    key_name: &[u8],
    secret: &[u8],
    rng: &mut (impl rand::CryptoRng + rand::RngCore),
) -> Result<Credential, TpmError> {
    let KeyMaterial::Rsa { modulus, exponent } = &ek.key else {
        return Err(TpmError::Unsupported("an ECC EK (only RSA EKs are supported)".into()));
    };
    if secret.len() > 32 {
        return Err(TpmError::Unsupported("a credential over 32 bytes".into()));
    }
    let ek_key = RsaPublicKey::new(BigUint::from_bytes_be(modulus), BigUint::from(*exponent))
        .map_err(|e| TpmError::Unsupported(format!("the EK's RSA key: {e}")))?;
    let mut seed = [0u8; 32];
    rng.fill_bytes(&mut seed);
    let encrypted_seed = ek_key
        .encrypt(rng, Oaep::new_with_label::<Sha256, _>("IDENTITY\0"), &seed)
        .map_err(|e| TpmError::Unsupported(format!("encrypting to the EK: {e}")))?;

    let sym_key = kdfa(&seed, "STORAGE", key_name, 128);
    let mut encrypted = Writer::default();
    encrypted.sized(secret);
    let mut encrypted = encrypted.0;
    cfb_mode::Encryptor::<aes::Aes128>::new_from_slices(&sym_key, &[0; 16])
        .expect("a 16-byte key and IV")
        .encrypt(&mut encrypted);
    let hmac_key = kdfa(&seed, "INTEGRITY", &[], 256);
    let integrity = hmac_sha256(&hmac_key, &[&encrypted, key_name]);
    let mut blob = Writer::default();
    blob.sized(&integrity).bytes(&encrypted);
    Ok(Credential { blob: blob.0, encrypted_seed })
}

/// KDFa with HMAC-SHA-256 (Part 1, 11.4.10.2), `context_v` empty: `bits` of key derived
/// from `key` for `label` (used with its terminating zero) and `context_u`.
fn kdfa(key: &[u8], label: &str, context_u: &[u8], bits: u32) -> Vec<u8> {
    let bytes = usize::try_from(bits / 8).expect("small");
    let mut out = Vec::with_capacity(bytes + 32);
    let mut counter = 1u32;
    while out.len() < bytes {
        out.extend(hmac_sha256(key, &[&counter.to_be_bytes(), label.as_bytes(), &[0], context_u, &bits.to_be_bytes()]));
        counter += 1;
    }
    out.truncate(bytes);
    out
}

fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key size");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The derivation's layout (the counter first, the label with its zero, the bit count
    /// last; a second block for longer keys). That the TPM agrees is tested against swtpm.
    #[test]
    fn kdfa_takes_the_counter_label_zero_context_and_bit_count() {
        let expected = hmac_sha256(b"key", &[&1u32.to_be_bytes(), b"STORAGE\0", b"name", &128u32.to_be_bytes()]);
        assert_eq!(kdfa(b"key", "STORAGE", b"name", 128), expected[..16]);
        let long = kdfa(b"key", "INTEGRITY", &[], 512);
        assert_eq!(long.len(), 64);
        assert_eq!(long[32..], hmac_sha256(b"key", &[&2u32.to_be_bytes(), b"INTEGRITY\0", &512u32.to_be_bytes()]));
    }
}
