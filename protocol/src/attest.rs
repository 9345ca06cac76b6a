//! Accepting a wipe report: the rules a report must pass before a node may be leased again.
//!
//! `verify_wipe_report` is the single gate the scheduler and `metal-erase verify` both use.
//! Each rule has its own refusal so an operator (and a test) sees exactly which one failed.
//! Only `ramdisk` and `node` certificates of the node's current identity generation vouch for
//! a wipe: a `node-tenant` certificate is refused even for the very same node.

use std::time::SystemTime;

use crate::disk::DiskIdentity;
use crate::dsse::{Envelope, EnvelopeError};
use crate::identity::{CaCertificate, IdentityError, Role};
use crate::wipe::{WipeReport, WipeResult};

/// Why a wipe report was refused. One variant per rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WipeRefusal {
    /// The envelope, its certificate or its payload could not be read.
    #[error("malformed wipe report: {0}")]
    Malformed(String),
    /// The signature does not verify under the signer certificate's key.
    #[error("bad signature: the report was not signed by the key of its certificate, or was altered")]
    BadSignature,
    /// The signer certificate does not chain to this site's CA.
    #[error("certificate does not chain to this site's CA: {0}")]
    ForeignCa(String),
    /// The signer certificate is outside its validity period.
    #[error("signer certificate is not valid at the time of the check: {0}")]
    CertificateExpired(String),
    /// Only `ramdisk` and `node` certificates vouch for a wipe.
    #[error("a {0} certificate cannot vouch for a wipe (only ramdisk or node)")]
    RoleNotAllowed(Role),
    /// The certificate or the report names another node.
    #[error("report is for node {found:?}, expected {expected:?}")]
    WrongNode {
        /// The node being checked.
        expected: String,
        /// The node the certificate or report names.
        found: String,
    },
    /// The certificate belongs to an older identity generation of the node.
    #[error("certificate is of identity generation {found}, the node is at {current}")]
    StaleGeneration {
        /// The node's current generation.
        current: u64,
        /// The certificate's generation.
        found: u64,
    },
    /// A disk of the platform inventory is not in the report.
    #[error("disk {0} of the platform inventory is missing from the report")]
    MissingDisk(String),
    /// A disk in the report did not pass its erase and read-back.
    #[error("disk {disk} {}", disk_failure(*first_bad_offset, failure.as_deref()))]
    DiskFailed {
        /// The disk's label.
        disk: String,
        /// Offset of the first bad byte, when a mismatch was found.
        first_bad_offset: Option<u64>,
        /// What the ramdisk said went wrong, when the erase stopped before its read-back.
        failure: Option<String>,
    },
}

/// How a failed disk failed: the read-back's first bad byte, else the ramdisk's words.
fn disk_failure(first_bad_offset: Option<u64>, failure: Option<&str>) -> String {
    match (first_bad_offset, failure) {
        (Some(offset), _) => format!("did not pass read-back (first bad byte at offset {offset})"),
        (None, Some(failure)) => format!("failed: {failure}"),
        (None, None) => "did not pass read-back".to_owned(),
    }
}

impl WipeRefusal {
    /// A stable machine-readable code for the refusal (stored and published with events).
    pub fn code(&self) -> &'static str {
        match self {
            WipeRefusal::Malformed(_) => "malformed",
            WipeRefusal::BadSignature => "bad-signature",
            WipeRefusal::ForeignCa(_) => "foreign-ca",
            WipeRefusal::CertificateExpired(_) => "certificate-expired",
            WipeRefusal::RoleNotAllowed(_) => "role-not-allowed",
            WipeRefusal::WrongNode { .. } => "wrong-node",
            WipeRefusal::StaleGeneration { .. } => "stale-generation",
            WipeRefusal::MissingDisk(_) => "missing-disk",
            WipeRefusal::DiskFailed { .. } => "disk-failed",
        }
    }
}

impl From<EnvelopeError> for WipeRefusal {
    fn from(e: EnvelopeError) -> Self {
        match e {
            EnvelopeError::BadSignature => WipeRefusal::BadSignature,
            other => WipeRefusal::Malformed(other.to_string()),
        }
    }
}

impl From<IdentityError> for WipeRefusal {
    fn from(e: IdentityError) -> Self {
        match e {
            IdentityError::ForeignCa(why) => WipeRefusal::ForeignCa(why),
            e @ (IdentityError::Expired { .. }
            | IdentityError::NotYetValid { .. }
            | IdentityError::CaNotValid { .. }) => WipeRefusal::CertificateExpired(e.to_string()),
            other => WipeRefusal::Malformed(other.to_string()),
        }
    }
}

/// What the node being checked is expected to be.
#[derive(Debug, Clone, Copy)]
pub struct WipeExpectation<'a> {
    /// The node id.
    pub node_id: &'a str,
    /// The node's current identity generation.
    pub generation: u64,
    /// The disks the platform inventoried for the node.
    pub disks: &'a [DiskIdentity],
    /// The time the signer's certificate must be valid at (the scheduler passes now).
    pub at: SystemTime,
}

/// Verifies a signed wipe report and returns it, or the first rule it breaks.
pub fn verify_wipe_report(
    envelope: &Envelope,
    ca: &CaCertificate,
    expect: &WipeExpectation<'_>,
) -> Result<WipeReport, WipeRefusal> {
    if envelope.payload_type != WipeReport::PAYLOAD_TYPE {
        return Err(WipeRefusal::Malformed(format!(
            "payload type is {:?}, expected {:?}",
            envelope.payload_type,
            WipeReport::PAYLOAD_TYPE
        )));
    }
    let signature = envelope.single_signature()?;
    let chain = signature.certificate_ders()?;
    let leaf = chain.first().ok_or_else(|| WipeRefusal::Malformed("signature carries no certificate".into()))?;
    let signer = ca.verify(leaf, expect.at)?;
    envelope.verify_signature(signature, &signer.public_key)?;

    let identity = &signer.identity;
    if !matches!(identity.role, Role::Ramdisk | Role::Node) {
        return Err(WipeRefusal::RoleNotAllowed(identity.role));
    }
    if identity.node != expect.node_id {
        return Err(WipeRefusal::WrongNode { expected: expect.node_id.to_owned(), found: identity.node.clone() });
    }
    if identity.generation != expect.generation {
        return Err(WipeRefusal::StaleGeneration { current: expect.generation, found: identity.generation });
    }

    let report: WipeReport = serde_json::from_slice(&envelope.payload_bytes()?)
        .map_err(|e| WipeRefusal::Malformed(format!("payload is not a wipe report: {e}")))?;
    if report.node_id != expect.node_id {
        return Err(WipeRefusal::WrongNode { expected: expect.node_id.to_owned(), found: report.node_id });
    }
    // Match inventory disks to report disks one to one, so one erased disk cannot answer for two.
    let mut unmatched: Vec<&DiskIdentity> = report.disks.iter().map(|d| &d.identity).collect();
    for wanted in expect.disks {
        match unmatched.iter().position(|d| d.same_disk(wanted)) {
            Some(i) => {
                unmatched.swap_remove(i);
            }
            None => return Err(WipeRefusal::MissingDisk(wanted.label())),
        }
    }
    if let Some(failed) = report.disks.iter().find(|d| d.result != WipeResult::Pass || d.verification.is_none()) {
        return Err(WipeRefusal::DiskFailed {
            disk: failed.identity.label(),
            first_bad_offset: failed.first_bad_offset,
            failure: failed.failure.clone(),
        });
    }
    Ok(report)
}
