//! `WipeReport`: what was done to every disk of a node, how it was checked, and the verdict.
//!
//! The report is the evidence a tenant-root teardown rests on, so it records the decision
//! trail (method chosen and why, methods rejected and the capability that ruled each out, raw
//! device statuses) and exactly what was verified, not just a pass/fail bit.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::disk::DiskIdentity;
use crate::tool::Tool;

/// The signed result of erasing a node's disks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WipeReport {
    /// The node whose disks were erased.
    pub node_id: String,
    /// The platform inventory's disk list this report answers to.
    pub inventory_disks: Vec<DiskIdentity>,
    /// The policy requested.
    pub policy: WipePolicy,
    /// One entry per disk erased (or attempted).
    pub disks: Vec<DiskWipe>,
    /// When the first disk started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When the last disk finished.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    /// The tool that erased.
    pub tool: Tool,
}

impl WipeReport {
    /// DSSE payload type of a signed wipe report.
    pub const PAYLOAD_TYPE: &'static str = "application/vnd.metal.wipe-report+json";

    /// Whether every disk passed.
    pub fn passed(&self) -> bool {
        !self.disks.is_empty() && self.disks.iter().all(|d| d.result == WipeResult::Pass)
    }
}

/// How strongly to erase.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WipePolicy {
    /// Strongest device sanitize (crypto, block erase), falling back to overwrite.
    Purge,
    /// Overwrite-class sanitize (device overwrite or software overwrite).
    Clear,
    /// Software overwrite only.
    Overwrite,
}

/// Every way metal can erase a disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SanitizeMethod {
    /// NVMe Sanitize, crypto erase.
    NvmeSanitizeCrypto,
    /// NVMe Sanitize, block erase.
    NvmeSanitizeBlock,
    /// NVMe Sanitize, overwrite.
    NvmeSanitizeOverwrite,
    /// NVMe Format NVM, SES=2 (cryptographic erase).
    NvmeFormatCrypto,
    /// NVMe Format NVM, SES=1 (user data erase).
    NvmeFormatUserData,
    /// ATA SANITIZE, CRYPTO SCRAMBLE EXT.
    AtaSanitizeCrypto,
    /// ATA SANITIZE, BLOCK ERASE EXT.
    AtaSanitizeBlock,
    /// ATA SANITIZE, OVERWRITE EXT.
    AtaSanitizeOverwrite,
    /// ATA SECURITY ERASE UNIT, enhanced mode.
    AtaSecurityEraseEnhanced,
    /// ATA SECURITY ERASE UNIT, normal mode.
    AtaSecurityErase,
    /// SCSI SANITIZE, CRYPTOGRAPHIC ERASE.
    ScsiSanitizeCrypto,
    /// SCSI SANITIZE, BLOCK ERASE.
    ScsiSanitizeBlock,
    /// SCSI SANITIZE, OVERWRITE.
    ScsiSanitizeOverwrite,
    /// BLKSECDISCARD over the whole device.
    SecureDiscard,
    /// BLKDISCARD (TRIM/UNMAP) over the whole device: only ever used when named, and only
    /// as good as the read-back that follows (many devices acknowledge and keep the data).
    Discard,
    /// Software overwrite with zeros (O_DIRECT).
    OverwriteZeros,
    /// Software overwrite with a keyed pseudo-random stream (O_DIRECT).
    OverwriteRandom,
}

/// A method that was considered and not used.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RejectedMethod {
    /// The method.
    pub method: SanitizeMethod,
    /// The capability that ruled it out (e.g. "SANICAP.CES=0", "security frozen").
    pub capability: String,
    /// A sentence for people.
    pub reason: String,
}

/// One command issued to a device, with its raw completion status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DeviceCommand {
    /// What was issued, e.g. "nvme format-nvm ses=1 nsid=1" or "BLKSECDISCARD".
    pub command: String,
    /// Raw completion status as the device or kernel returned it (NVMe status field, ATA
    /// status/error registers, SCSI sense, or errno), hex.
    pub status: String,
    /// Whether the command succeeded.
    pub ok: bool,
    /// When it was issued.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When it completed.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
}

/// How thoroughly the result was read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum VerifyMode {
    /// Every byte read and compared.
    Full,
    /// Random samples spread over every region of the disk.
    Sampled,
    /// Markers written before the erase must be gone (plus samples).
    Markers,
}

/// What the read-back checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Verification {
    /// The mode.
    pub mode: VerifyMode,
    /// Share of the disk's bytes read back, 0 to 100.
    pub coverage_percent: f64,
    /// Seed of the sample and marker positions (hex), so the check can be repeated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_seed: Option<String>,
    /// Bytes read back.
    pub bytes_read: u64,
    /// What the medium had to read as: "zeros", "keyed-stream" or "not-markers".
    pub expected: String,
}

/// Pass or fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WipeResult {
    /// Erased and the read-back found nothing left.
    Pass,
    /// The erase failed or the read-back found data.
    Fail,
}

/// NIST SP 800-88 sanitization category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NistCategory {
    /// Clear: protects against simple, non-invasive recovery.
    Clear,
    /// Purge: protects against laboratory recovery.
    Purge,
}

/// The erase of one disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiskWipe {
    /// Device path used, e.g. "/dev/nvme0n1".
    pub device: String,
    /// The disk's stable identity.
    pub identity: DiskIdentity,
    /// The method that ran last (the one the verdict rests on), if any ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<SanitizeMethod>,
    /// Why that method was chosen.
    pub method_reason: String,
    /// Methods considered and not used, each with what ruled it out.
    pub rejected_methods: Vec<RejectedMethod>,
    /// Every device command issued, in order.
    pub commands: Vec<DeviceCommand>,
    /// When work on this disk started.
    #[serde(with = "time::serde::rfc3339")]
    pub started_at: OffsetDateTime,
    /// When work on this disk ended.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
    /// What the read-back checked; `None` when the erase itself failed before verification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<Verification>,
    /// The verdict.
    pub result: WipeResult,
    /// On a read-back mismatch, the byte offset of the first bad byte found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_bad_offset: Option<u64>,
    /// Why the disk failed, for people.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// NIST SP 800-88 category the method achieves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nist_category: Option<NistCategory>,
}
