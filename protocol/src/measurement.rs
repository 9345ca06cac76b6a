//! Boot evidence: what a ramdisk sends to prove what its machine booted (a TPM quote of the
//! boot PCRs by the TPM's attestation key, and the firmware's event log), and the check that
//! turns it into trusted PCR values and events, or a refusal that names what is wrong.
//!
//! The check proves that the quote is fresh (it binds the caller's data), signed by a
//! restricted key of a TPM (so its PCR values are the TPM's), and that the log replays to
//! exactly the quoted values (so each event can be judged on its own). Whether the attestation
//! key lives in the TPM of the node's pinned EK is proven separately, by credential
//! activation.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::eventlog::{EventLog, HashAlgorithm};
use crate::tpm::{PublicKey, Quote, attributes};
use crate::{CaCertificate, Envelope, Identity, Role};

/// The PCRs a boot's measurements go into, and that every quote covers.
pub const BOOT_PCRS: std::ops::RangeInclusive<u32> = 0..=9;

/// A TPM's keys as the ramdisk names them: what it asks a challenge with
/// (`POST /v1/boot/attest/challenge`), and part of its evidence. Bytes are base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TpmKeys {
    /// The EK's `TPMT_PUBLIC` (recreated from the TCG default template).
    #[serde(with = "bytes")]
    pub ek_public: Vec<u8>,
    /// The EK certificate from the TPM's NV (DER), when the TPM has one.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "optional_bytes")]
    pub ek_certificate: Option<Vec<u8>>,
    /// The attestation key's `TPMT_PUBLIC`.
    #[serde(with = "bytes")]
    pub ak_public: Vec<u8>,
}

/// What the ramdisk sends to prove what booted. Bytes are base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BootEvidence {
    /// The keys: the quote is the attestation key's.
    pub keys: TpmKeys,
    /// The quote's `TPMS_ATTEST`.
    #[serde(with = "bytes")]
    pub attest: Vec<u8>,
    /// Its `TPMT_SIGNATURE`.
    #[serde(with = "bytes")]
    pub signature: Vec<u8>,
    /// The firmware's TCG2 event log, as securityfs gave it.
    #[serde(with = "bytes")]
    pub event_log: Vec<u8>,
}

/// The controller's challenge: a one-time nonce and a credential only the TPM of the pinned
/// EK can open for that attestation key. The quote must bind [`binding`] of the nonce, the
/// opened secret and the ramdisk's own key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Challenge {
    /// Names the challenge in the report that answers it.
    pub challenge_id: String,
    /// The one-time nonce.
    #[serde(with = "bytes")]
    pub nonce: Vec<u8>,
    /// MakeCredential's `TPM2B_ID_OBJECT` contents.
    #[serde(with = "bytes")]
    pub credential_blob: Vec<u8>,
    /// MakeCredential's `TPM2B_ENCRYPTED_SECRET` contents.
    #[serde(with = "bytes")]
    pub encrypted_seed: Vec<u8>,
    /// When the challenge stops being accepted.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: time::OffsetDateTime,
}

/// The answer to a challenge, signed by the ramdisk's certificate like every report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AttestationReport {
    /// The node the ramdisk runs on.
    pub node_id: String,
    /// The challenge answered.
    pub challenge_id: String,
    /// The quote, keys and event log.
    pub evidence: BootEvidence,
}

impl AttestationReport {
    /// DSSE payload type.
    pub const PAYLOAD_TYPE: &'static str = "application/vnd.metal.attestation.v1+json";
}

/// Why evidence was refused. One variant per rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvidenceRefusal {
    /// A structure could not be read.
    #[error("malformed evidence: {0}")]
    Malformed(String),
    /// The signing key is not a restricted signing key fixed to its TPM.
    #[error("the quoting key is not a TPM attestation key: {0}")]
    NotAnAttestationKey(String),
    /// The signature does not verify under the attestation key.
    #[error("the quote's signature does not verify under the attestation key")]
    BadSignature,
    /// The quote binds other data than this challenge's (a replayed or foreign quote).
    #[error("the quote does not bind this challenge (a replayed or foreign quote)")]
    WrongChallenge,
    /// The quote covers other PCRs or another bank.
    #[error("the quote covers {0}, not SHA-256 PCRs 0-9")]
    WrongSelection(String),
    /// The log's events do not produce the PCR values the TPM signed.
    #[error("the event log does not replay to the quoted PCRs (an event was altered, added or left out)")]
    LogDoesNotReplay,
}

/// Evidence that passed: the PCR values the TPM signed and the log that explains them.
#[derive(Debug, Clone)]
pub struct VerifiedBoot {
    /// SHA-256 PCRs 0-9 as the TPM holds them.
    pub pcrs: BTreeMap<u32, Vec<u8>>,
    /// The event log, every event of which is accounted for by the quote.
    pub log: EventLog,
    /// The quote.
    pub quote: Quote,
    /// The attestation key.
    pub ak: PublicKey,
}

/// What a quote's extra data must be: the challenge's nonce, the secret recovered by
/// credential activation, and the ramdisk's own signing key, bound under one label.
pub fn binding(nonce: &[u8], secret: &[u8], ramdisk_key: &[u8]) -> Vec<u8> {
    let mut hasher = sha2::Sha256::new();
    for part in [&b"metal-attest-v1"[..], nonce, secret, ramdisk_key] {
        hasher.update(u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        hasher.update(part);
    }
    hasher.finalize().to_vec()
}

/// The attestation key's required attributes.
const AK_ATTRIBUTES: u32 = attributes::FIXED_TPM
    | attributes::FIXED_PARENT
    | attributes::SENSITIVE_DATA_ORIGIN
    | attributes::RESTRICTED
    | attributes::SIGN;

/// Parses an attestation key and checks that it is one: a restricted signing key that
/// never left the TPM that made it.
pub fn attestation_key(ak_public: &[u8]) -> Result<PublicKey, EvidenceRefusal> {
    let ak =
        PublicKey::parse(ak_public).map_err(|e| EvidenceRefusal::Malformed(format!("the attestation key: {e}")))?;
    if !ak.has(AK_ATTRIBUTES) {
        return Err(EvidenceRefusal::NotAnAttestationKey(format!(
            "attributes {:#010x} lack fixedTPM, fixedParent, sensitiveDataOrigin, restricted or sign",
            ak.attributes
        )));
    }
    Ok(ak)
}

impl BootEvidence {
    /// Checks the quote against `extra_data` and replays the log to it.
    pub fn verify(&self, extra_data: &[u8]) -> Result<VerifiedBoot, EvidenceRefusal> {
        self.verify_bound(Some(extra_data))
    }

    /// Checks everything [`BootEvidence::verify`] does but the challenge, which only its
    /// verifier knows: for evidence checked offline (its extra data is in the result).
    pub fn verify_unbound(&self) -> Result<VerifiedBoot, EvidenceRefusal> {
        self.verify_bound(None)
    }

    fn verify_bound(&self, extra_data: Option<&[u8]>) -> Result<VerifiedBoot, EvidenceRefusal> {
        let malformed = |what: &str, e: &dyn std::fmt::Display| EvidenceRefusal::Malformed(format!("{what}: {e}"));
        let ak = attestation_key(&self.keys.ak_public)?;
        ak.verify(&self.attest, &self.signature).map_err(|e| match e {
            crate::tpm::TpmError::BadSignature => EvidenceRefusal::BadSignature,
            other => malformed("the signature", &other),
        })?;
        let quote = Quote::parse(&self.attest).map_err(|e| malformed("the quote", &e))?;
        if extra_data.is_some_and(|expected| quote.extra_data != expected) {
            return Err(EvidenceRefusal::WrongChallenge);
        }
        if quote.bank != HashAlgorithm::SHA256 || quote.pcrs != BOOT_PCRS.collect::<Vec<_>>() {
            return Err(EvidenceRefusal::WrongSelection(format!("{} PCRs {:?}", quote.bank, quote.pcrs)));
        }
        let log = EventLog::parse(&self.event_log).map_err(|e| malformed("the event log", &e))?;
        let mut replayed = log.replay(HashAlgorithm::SHA256).map_err(|e| malformed("the event log", &e))?;
        let pcrs: BTreeMap<u32, Vec<u8>> =
            BOOT_PCRS.map(|pcr| (pcr, replayed.remove(&pcr).unwrap_or_else(|| vec![0; 32]))).collect();
        let values: Vec<&[u8]> = pcrs.values().map(Vec::as_slice).collect();
        if crate::tpm::pcr_digest(&values) != quote.pcr_digest {
            return Err(EvidenceRefusal::LogDoesNotReplay);
        }
        Ok(VerifiedBoot { pcrs, log, quote, ak })
    }
}

impl EvidenceRefusal {
    /// A short stable name for the rule, stored with a refused attestation.
    pub fn code(&self) -> &'static str {
        match self {
            EvidenceRefusal::Malformed(_) => "malformed",
            EvidenceRefusal::NotAnAttestationKey(_) => "not-an-attestation-key",
            EvidenceRefusal::BadSignature => "bad-signature",
            EvidenceRefusal::WrongChallenge => "wrong-challenge",
            EvidenceRefusal::WrongSelection(_) => "wrong-selection",
            EvidenceRefusal::LogDoesNotReplay => "log-does-not-replay",
        }
    }
}

/// Bytes as base64 in JSON.
mod bytes {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;

    pub fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text: String = serde::Deserialize::deserialize(d)?;
        STANDARD.decode(text).map_err(serde::de::Error::custom)
    }
}

/// Optional bytes as base64 in JSON.
mod optional_bytes {
    pub fn serialize<S: serde::Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(bytes) => super::bytes::serialize(bytes, s),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        super::bytes::deserialize(d).map(Some)
    }
}

/// An attestation envelope as checked offline ([`verify_offline`]).
#[derive(Debug, Clone)]
pub struct OfflineAttestation {
    /// The ramdisk identity that signed it.
    pub signer: Identity,
    /// The report as signed.
    pub report: AttestationReport,
    /// The quote's PCRs and the log that replays to them.
    pub boot: VerifiedBoot,
}

/// Why an attestation envelope does not verify offline.
#[derive(Debug, thiserror::Error)]
pub enum OfflineRefusal {
    /// The envelope, its signature or its payload cannot be read, or the signature fails.
    #[error("the envelope: {0}")]
    Envelope(String),
    /// Its certificate was not issued by this site CA.
    #[error("the signing certificate: {0}")]
    Certificate(#[from] crate::IdentityError),
    /// Signed by a certificate of another role than a ramdisk's.
    #[error("signed by a {0} certificate, not a ramdisk's")]
    NotARamdisk(Role),
    /// The report names another node than its certificate.
    #[error("the report names node {report}, its certificate {certificate}")]
    WrongNode {
        /// The node the report names.
        report: String,
        /// The node the certificate names.
        certificate: String,
    },
    /// The evidence itself is refused.
    #[error(transparent)]
    Evidence(#[from] EvidenceRefusal),
}

/// Checks an attestation envelope without the scheduler: signed by a ramdisk certificate the
/// site CA `ca` issued for the node the report names; the quote signed by a TPM attestation
/// key (restricted, fixed to its TPM) over SHA-256 PCRs 0-9; the event log replaying to the
/// quoted digest. What only the scheduler could check at the time is not: that the attestation
/// key is in the TPM of the node's pinned EK (credential activation) and that the quote bound
/// its one-time challenge (`boot.quote.extra_data` is there to compare with the challenge on
/// record).
pub fn verify_offline(envelope: &Envelope, ca: &CaCertificate) -> Result<OfflineAttestation, OfflineRefusal> {
    let unreadable = |e: &dyn std::fmt::Display| OfflineRefusal::Envelope(e.to_string());
    if envelope.payload_type != AttestationReport::PAYLOAD_TYPE {
        return Err(OfflineRefusal::Envelope(format!(
            "payload type {:?} is not an attestation's",
            envelope.payload_type
        )));
    }
    let signature = envelope.single_signature().map_err(|e| unreadable(&e))?;
    let chain = signature.certificate_ders().map_err(|e| unreadable(&e))?;
    let leaf = chain.first().ok_or_else(|| OfflineRefusal::Envelope("the signature carries no certificate".into()))?;
    let certificate = ca.verify_as_issued(leaf)?;
    if certificate.identity.role != Role::Ramdisk {
        return Err(OfflineRefusal::NotARamdisk(certificate.identity.role));
    }
    envelope.verify_signature(signature, &certificate.public_key).map_err(|e| unreadable(&e))?;
    let payload = envelope.payload_bytes().map_err(|e| unreadable(&e))?;
    let report: AttestationReport = serde_json::from_slice(&payload).map_err(|e| unreadable(&e))?;
    if report.node_id != certificate.identity.node {
        return Err(OfflineRefusal::WrongNode { report: report.node_id, certificate: certificate.identity.node });
    }
    let boot = report.evidence.verify_unbound()?;
    Ok(OfflineAttestation { signer: certificate.identity, report, boot })
}
