//! TPM 2.0 structures on the wire (TPM 2.0 Library, Part 2), as far as attestation needs
//! them: the key templates the ramdisk creates its EK and attestation key from, a key's
//! public area and name, and a quote (`TPMS_ATTEST` and its signature) with its
//! verification. The ramdisk marshals commands with [`Writer`] and reads answers with
//! [`Reader`]; the scheduler parses and verifies what the ramdisk sends. Everything here is
//! big-endian, every length is checked, and nothing needs a TSS library.

use sha2::Digest as _;

use crate::eventlog::HashAlgorithm;

/// Why TPM bytes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TpmError {
    /// The bytes end inside a structure.
    #[error("TPM structure truncated at byte {0}")]
    Truncated(usize),
    /// A structure holds a value this code does not accept.
    #[error("TPM structure: {0}")]
    Unsupported(String),
    /// The quote's signature does not verify under the attestation key.
    #[error("the quote's signature does not verify under the attestation key")]
    BadSignature,
}

/// `TPM_ALG_RSA`.
pub const ALG_RSA: u16 = 0x0001;
/// `TPM_ALG_AES`.
pub const ALG_AES: u16 = 0x0006;
/// `TPM_ALG_NULL`.
pub const ALG_NULL: u16 = 0x0010;
/// `TPM_ALG_RSASSA`.
pub const ALG_RSASSA: u16 = 0x0014;
/// `TPM_ALG_ECDSA`.
pub const ALG_ECDSA: u16 = 0x0018;
/// `TPM_ALG_ECC`.
pub const ALG_ECC: u16 = 0x0023;
/// `TPM_ALG_CFB`.
pub const ALG_CFB: u16 = 0x0043;
/// `TPM_ECC_NIST_P256`.
pub const ECC_NIST_P256: u16 = 0x0003;

/// `TPM_GENERATED_VALUE`: the magic opening everything the TPM itself signs.
pub const TPM_GENERATED: u32 = 0xff54_4347;
/// `TPM_ST_ATTEST_QUOTE`.
pub const ST_ATTEST_QUOTE: u16 = 0x8018;

/// `TPMA_OBJECT` bits.
pub mod attributes {
    /// The key cannot leave this TPM.
    pub const FIXED_TPM: u32 = 1 << 1;
    /// The key cannot move to another parent.
    pub const FIXED_PARENT: u32 = 1 << 4;
    /// The TPM generated the key's secret.
    pub const SENSITIVE_DATA_ORIGIN: u32 = 1 << 5;
    /// The key's user role takes its (empty) authValue.
    pub const USER_WITH_AUTH: u32 = 1 << 6;
    /// The key's admin role takes only its policy.
    pub const ADMIN_WITH_POLICY: u32 = 1 << 7;
    /// The key signs or decrypts only TPM-formatted data (it cannot sign a forged quote).
    pub const RESTRICTED: u32 = 1 << 16;
    /// A decryption (storage) key.
    pub const DECRYPT: u32 = 1 << 17;
    /// A signing key.
    pub const SIGN: u32 = 1 << 18;
}

/// The policy of the TCG default EK template: `PolicySecret(TPM_RH_ENDORSEMENT)`.
const EK_POLICY: [u8; 32] = [
    0x83, 0x71, 0x97, 0x67, 0x44, 0x84, 0xb3, 0xf8, 0x1a, 0x90, 0xcc, 0x8d, 0x46, 0xa5, 0xd7, 0x24, 0xfd, 0x52, 0xd7,
    0x6e, 0x06, 0x52, 0x0b, 0x64, 0xf2, 0xa1, 0xda, 0x1b, 0x33, 0x14, 0x69, 0xaa,
];

/// Appends big-endian TPM fields.
#[derive(Debug, Default, Clone)]
pub struct Writer(pub Vec<u8>);

impl Writer {
    /// A `u8`.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }

    /// A `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.0.extend(v.to_be_bytes());
        self
    }

    /// A `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend(v.to_be_bytes());
        self
    }

    /// Raw bytes.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.0.extend(v);
        self
    }

    /// A `TPM2B_*`: a `u16` size, then the bytes.
    pub fn sized(&mut self, v: &[u8]) -> &mut Self {
        self.u16(u16::try_from(v.len()).expect("a TPM2B holds under 64 KiB")).bytes(v)
    }
}

/// Reads big-endian TPM fields, reporting where it ran out.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    /// Reads `bytes` from the start.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { bytes, at: 0 }
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], TpmError> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.bytes.len()).ok_or(TpmError::Truncated(self.at))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    /// A `u8`.
    pub fn u8(&mut self) -> Result<u8, TpmError> {
        Ok(self.take(1)?[0])
    }

    /// A `u16`.
    pub fn u16(&mut self) -> Result<u16, TpmError> {
        Ok(u16::from_be_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }

    /// A `u32`.
    pub fn u32(&mut self) -> Result<u32, TpmError> {
        Ok(u32::from_be_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    /// A `u64`.
    pub fn u64(&mut self) -> Result<u64, TpmError> {
        Ok(u64::from_be_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }

    /// A `TPM2B_*`'s bytes.
    pub fn sized(&mut self) -> Result<&'a [u8], TpmError> {
        let size = self.u16()?;
        self.take(usize::from(size))
    }

    /// A `u8`-sized array (a PCR selection's bitmap).
    pub fn sized_u8(&mut self) -> Result<&'a [u8], TpmError> {
        let size = self.u8()?;
        self.take(usize::from(size))
    }

    /// Everything not read yet.
    pub fn rest(&mut self) -> &'a [u8] {
        let rest = &self.bytes[self.at..];
        self.at = self.bytes.len();
        rest
    }

    /// Refuses bytes left over after a structure.
    pub fn finish(&self) -> Result<(), TpmError> {
        if self.at == self.bytes.len() {
            Ok(())
        } else {
            Err(TpmError::Unsupported(format!("{} bytes after the structure", self.bytes.len() - self.at)))
        }
    }
}

/// The TCG default EK template (EK Credential Profile, template L-1: RSA 2048, AES-128-CFB,
/// the endorsement policy): the key the TPM's EK certificate certifies.
pub fn ek_rsa_template() -> Vec<u8> {
    let mut w = Writer::default();
    w.u16(ALG_RSA).u16(HashAlgorithm::SHA256.0);
    w.u32(
        attributes::FIXED_TPM
            | attributes::FIXED_PARENT
            | attributes::SENSITIVE_DATA_ORIGIN
            | attributes::ADMIN_WITH_POLICY
            | attributes::RESTRICTED
            | attributes::DECRYPT,
    );
    w.sized(&EK_POLICY);
    w.u16(ALG_AES).u16(128).u16(ALG_CFB); // symmetric
    w.u16(ALG_NULL); // scheme
    w.u16(2048).u32(0); // key bits, default exponent
    w.sized(&[0; 256]); // unique
    w.0
}

/// The attestation key's template: a restricted ECDSA P-256 signing key in the endorsement
/// hierarchy. As a primary key it is derived from the TPM's endorsement seed, so the
/// ramdisk, which keeps nothing between boots, gets the same key every boot.
pub fn ak_template() -> Vec<u8> {
    let mut w = Writer::default();
    w.u16(ALG_ECC).u16(HashAlgorithm::SHA256.0);
    w.u32(
        attributes::FIXED_TPM
            | attributes::FIXED_PARENT
            | attributes::SENSITIVE_DATA_ORIGIN
            | attributes::USER_WITH_AUTH
            | attributes::RESTRICTED
            | attributes::SIGN,
    );
    w.sized(&[]); // no policy
    w.u16(ALG_NULL); // symmetric
    w.u16(ALG_ECDSA).u16(HashAlgorithm::SHA256.0); // scheme
    w.u16(ECC_NIST_P256).u16(ALG_NULL); // curve, kdf
    w.sized(b"metal-attestation-key").sized(&[]); // unique: x (a label), y
    w.0
}

/// A key's public area (`TPMT_PUBLIC`), parsed for the two kinds attestation uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicKey {
    /// The `TPMT_PUBLIC` bytes exactly as the TPM returned them (the name is their digest).
    pub bytes: Vec<u8>,
    /// `TPMA_OBJECT`.
    pub attributes: u32,
    /// The key itself.
    pub key: KeyMaterial,
}

/// The public key a [`PublicKey`] holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyMaterial {
    /// RSA: the modulus and the public exponent.
    Rsa {
        /// The modulus, big-endian.
        modulus: Vec<u8>,
        /// The exponent (65537 when the area says 0).
        exponent: u32,
    },
    /// ECC on NIST P-256: the point.
    P256 {
        /// x, big-endian.
        x: Vec<u8>,
        /// y, big-endian.
        y: Vec<u8>,
    },
}

impl PublicKey {
    /// Parses a `TPMT_PUBLIC` of an RSA or P-256 key with a SHA-256 name algorithm.
    pub fn parse(bytes: &[u8]) -> Result<PublicKey, TpmError> {
        let mut r = Reader::new(bytes);
        let (kind, name_alg, attributes) = (r.u16()?, r.u16()?, r.u32()?);
        if name_alg != HashAlgorithm::SHA256.0 {
            return Err(TpmError::Unsupported(format!("name algorithm {:#06x}, not SHA-256", name_alg)));
        }
        r.sized()?; // authPolicy
        let key = match kind {
            ALG_RSA => {
                if r.u16()? != ALG_NULL {
                    r.u16()?; // key bits
                    r.u16()?; // mode
                }
                if r.u16()? != ALG_NULL {
                    r.u16()?; // the scheme's hash
                }
                let (_bits, exponent) = (r.u16()?, r.u32()?);
                let modulus = r.sized()?.to_vec();
                KeyMaterial::Rsa { modulus, exponent: if exponent == 0 { 65537 } else { exponent } }
            }
            ALG_ECC => {
                if r.u16()? != ALG_NULL {
                    r.u16()?;
                    r.u16()?;
                }
                if r.u16()? != ALG_NULL {
                    r.u16()?;
                }
                let curve = r.u16()?;
                if curve != ECC_NIST_P256 {
                    return Err(TpmError::Unsupported(format!("ECC curve {curve:#06x}, not NIST P-256")));
                }
                if r.u16()? != ALG_NULL {
                    r.u16()?; // the kdf's hash
                }
                let (x, y) = (r.sized()?.to_vec(), r.sized()?.to_vec());
                KeyMaterial::P256 { x, y }
            }
            other => return Err(TpmError::Unsupported(format!("key type {other:#06x}"))),
        };
        r.finish()?;
        Ok(PublicKey { bytes: bytes.to_vec(), attributes, key })
    }

    /// The key's TPM name: its name algorithm, then the digest of its public area.
    pub fn name(&self) -> Vec<u8> {
        let mut name = HashAlgorithm::SHA256.0.to_be_bytes().to_vec();
        name.extend(sha2::Sha256::digest(&self.bytes));
        name
    }

    /// The qualified name of this key as a primary of `hierarchy` (what a quote names as its
    /// signer): the name algorithm, then the digest of the hierarchy's handle and the name.
    pub fn primary_qualified_name(&self, hierarchy: u32) -> Vec<u8> {
        let mut name = HashAlgorithm::SHA256.0.to_be_bytes().to_vec();
        name.extend(sha2::Sha256::new().chain_update(hierarchy.to_be_bytes()).chain_update(self.name()).finalize());
        name
    }

    /// Whether all of `bits` are set in its attributes.
    pub fn has(&self, bits: u32) -> bool {
        self.attributes & bits == bits
    }

    /// Checks that `signature` (a `TPMT_SIGNATURE`) is this key's over `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), TpmError> {
        use ring::signature::{self as sig, UnparsedPublicKey};
        let mut r = Reader::new(signature);
        let (scheme, hash) = (r.u16()?, r.u16()?);
        if hash != HashAlgorithm::SHA256.0 {
            return Err(TpmError::Unsupported(format!("signature hash {hash:#06x}, not SHA-256")));
        }
        let verified = match (&self.key, scheme) {
            (KeyMaterial::Rsa { modulus, exponent }, ALG_RSASSA) => {
                let signature = r.sized()?;
                r.finish()?;
                let exponent = exponent.to_be_bytes();
                sig::RsaPublicKeyComponents { n: modulus.as_slice(), e: exponent.as_slice() }.verify(
                    &sig::RSA_PKCS1_2048_8192_SHA256,
                    message,
                    signature,
                )
            }
            (KeyMaterial::P256 { x, y }, ALG_ECDSA) => {
                let (sig_r, sig_s) = (r.sized()?, r.sized()?);
                r.finish()?;
                let (point, fixed) = (
                    [&[4u8][..], &left_pad(x, 32)?, &left_pad(y, 32)?].concat(),
                    [left_pad(sig_r, 32)?, left_pad(sig_s, 32)?].concat(),
                );
                UnparsedPublicKey::new(&sig::ECDSA_P256_SHA256_FIXED, point).verify(message, &fixed)
            }
            (_, scheme) => return Err(TpmError::Unsupported(format!("signature scheme {scheme:#06x} for this key"))),
        };
        verified.map_err(|_| TpmError::BadSignature)
    }
}

/// A big-endian integer as exactly `width` bytes.
fn left_pad(value: &[u8], width: usize) -> Result<Vec<u8>, TpmError> {
    let value = &value[value.iter().take_while(|b| **b == 0).count()..];
    if value.len() > width {
        return Err(TpmError::Unsupported(format!("a {}-byte value where {width} fit", value.len())));
    }
    let mut out = vec![0; width - value.len()];
    out.extend(value);
    Ok(out)
}

/// A `TPML_PCR_SELECTION` of one bank.
pub fn pcr_selection(bank: HashAlgorithm, pcrs: &[u32]) -> Vec<u8> {
    let mut bitmap = [0u8; 3];
    for pcr in pcrs.iter().filter(|pcr| **pcr < 24) {
        bitmap[*pcr as usize / 8] |= 1 << (pcr % 8);
    }
    let mut w = Writer::default();
    w.u32(1).u16(bank.0).u8(3).bytes(&bitmap);
    w.0
}

/// What a quote (`TPMS_ATTEST` of type `TPM_ST_ATTEST_QUOTE`) says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quote {
    /// The name of the key that signed it.
    pub signer: Vec<u8>,
    /// The caller's data bound into it (metal's nonce binding).
    pub extra_data: Vec<u8>,
    /// The TPM's reset count (moves on every TPM reset: every boot).
    pub reset_count: u32,
    /// The bank quoted.
    pub bank: HashAlgorithm,
    /// The PCRs quoted, ascending.
    pub pcrs: Vec<u32>,
    /// The digest of the quoted PCRs' values, concatenated in ascending order.
    pub pcr_digest: Vec<u8>,
}

impl Quote {
    /// Parses a `TPMS_ATTEST` that must be a quote over one bank.
    pub fn parse(attest: &[u8]) -> Result<Quote, TpmError> {
        let mut r = Reader::new(attest);
        if r.u32()? != TPM_GENERATED {
            return Err(TpmError::Unsupported("not TPM-generated (magic is not TPM_GENERATED_VALUE)".into()));
        }
        if r.u16()? != ST_ATTEST_QUOTE {
            return Err(TpmError::Unsupported("not a quote".into()));
        }
        let signer = r.sized()?.to_vec();
        let extra_data = r.sized()?.to_vec();
        let (_clock, reset_count, _restart_count, _safe) = (r.u64()?, r.u32()?, r.u32()?, r.u8()?);
        let _firmware_version = r.u64()?;
        if r.u32()? != 1 {
            return Err(TpmError::Unsupported("a quote over other than one bank".into()));
        }
        let bank = HashAlgorithm(r.u16()?);
        let bitmap = r.sized_u8()?;
        let pcrs = (0..u32::try_from(bitmap.len() * 8).unwrap_or(0))
            .filter(|pcr| bitmap[*pcr as usize / 8] & (1 << (pcr % 8)) != 0)
            .collect();
        let pcr_digest = r.sized()?.to_vec();
        r.finish()?;
        Ok(Quote { signer, extra_data, reset_count, bank, pcrs, pcr_digest })
    }
}

/// The digest a quote of `values` (ascending PCR order) carries.
pub fn pcr_digest(values: &[&[u8]]) -> Vec<u8> {
    let mut hasher = sha2::Sha256::new();
    for value in values {
        hasher.update(value);
    }
    hasher.finalize().to_vec()
}
