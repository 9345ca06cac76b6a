//! The boot service's API types and the one rule that needs no database: what a node that
//! network-boots is sent to do, from its lifecycle state.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::model::node::NodeState;

/// A task the ramdisk runs (`metal.task=` on its kernel command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BootTask {
    /// Inventory and basic tests; the report moves the node to ready or failed.
    Commission,
    /// The teardown's wipe: every disk erased and read back, a signed wipe report.
    Erase,
    /// Write the node's deploy plan to its disk.
    Deploy,
    /// The teardown's in-band firmware check (before the erase, when the pool has a baseline).
    Firmware,
    /// A lessee's rescue environment (sshd with the lessee's keys, the disks untouched): not
    /// a metal-boot task; its token only fetches the rescue's files, never joins.
    Rescue,
    /// Not a ramdisk task: a distribution installer's token (an installer deploy), which
    /// fetches its rendered configuration and reports the install done.
    Install,
}

impl BootTask {
    /// Every task.
    pub const ALL: [BootTask; 6] = [
        BootTask::Commission,
        BootTask::Erase,
        BootTask::Deploy,
        BootTask::Firmware,
        BootTask::Install,
        BootTask::Rescue,
    ];

    /// Name on the kernel command line and in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            BootTask::Commission => "commission",
            BootTask::Erase => "erase",
            BootTask::Deploy => "deploy",
            BootTask::Firmware => "firmware",
            BootTask::Install => "install",
            BootTask::Rescue => "rescue",
        }
    }
}

impl fmt::Display for BootTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BootTask {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [
            BootTask::Commission,
            BootTask::Erase,
            BootTask::Deploy,
            BootTask::Firmware,
            BootTask::Install,
            BootTask::Rescue,
        ]
        .into_iter()
        .find(|t| t.as_str() == s)
        .ok_or_else(|| format!("unknown boot task {s:?}"))
    }
}

/// What a network-booting node is told to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootStep {
    /// Boot the ramdisk for this task.
    Ramdisk(BootTask),
    /// Boot the distribution installer of the node's installer deploy.
    Installer,
    /// Nothing for the ramdisk: leave network boot and boot the next device (the local disk).
    LocalDisk,
}

/// What a releasing node still needs from a ramdisk in this release (`store::boot::due`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// Its pool has a firmware baseline and no compliant check was recorded yet.
    pub firmware: bool,
    /// No wipe report was accepted yet.
    pub erase: bool,
}

impl Due {
    /// Everything (a release that has just begun).
    pub const ALL: Due = Due { firmware: true, erase: true };
}

/// The step for a node in `state`: new and commissioning nodes are commissioned; a releasing
/// node has its firmware checked first when that is due, then is erased until a wipe report
/// is accepted (a ramdisk that reboots after its erase is not handed a second one), then
/// boots its disk; a deploying node is deployed; a node in rescue boots the rescue (when
/// its rescue run started a boot); every other state boots its disk.
pub fn boot_step(state: NodeState, due: Due) -> BootStep {
    match state {
        NodeState::New | NodeState::Commissioning => BootStep::Ramdisk(BootTask::Commission),
        NodeState::Releasing if due.firmware => BootStep::Ramdisk(BootTask::Firmware),
        NodeState::Releasing if due.erase => BootStep::Ramdisk(BootTask::Erase),
        NodeState::Deploying => BootStep::Ramdisk(BootTask::Deploy),
        NodeState::Rescue => BootStep::Ramdisk(BootTask::Rescue),
        _ => BootStep::LocalDisk,
    }
}

/// One boot the scheduler started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeBoot {
    /// Its id (`boot-...`).
    pub id: String,
    /// The node.
    pub node_id: String,
    /// Who started it: a workflow step, an operator, a lifecycle move.
    pub armed_by: String,
    /// The workflow run that started it, if one did.
    pub run_id: Option<String>,
    /// When it was armed.
    #[serde(with = "time::serde::rfc3339")]
    pub armed_at: time::OffsetDateTime,
    /// Until when an untaken boot can be taken.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: time::OffsetDateTime,
    /// The task its token was handed for (once taken).
    pub task: Option<BootTask>,
    /// The SHA-256 of its token (once taken; never in an answer).
    #[serde(skip)]
    pub token_hash: Option<String>,
    /// The client address the token went to.
    pub handed_to: Option<String>,
    /// The address the ramdisk joined from.
    pub joined_from: Option<String>,
    /// The public key (base64) the ramdisk joined with.
    pub joined_key: Option<String>,
    /// Why it ended, when it has.
    pub ended: Option<String>,
    /// The client whose request contested it.
    pub contested_by: Option<String>,
    /// The SHA-256 of the claim a virtual-media boot's ISO carries (never in an answer):
    /// such a boot is taken by its claim, never by a request naming the node's MAC.
    #[serde(skip)]
    pub claim_hash: Option<String>,
}

impl NodeBoot {
    /// Whether its token was handed out.
    pub fn taken(&self) -> bool {
        self.handed_to.is_some()
    }

    /// Whether it boots from virtual media (taken by its ISO's claim).
    pub fn by_media(&self) -> bool {
        self.claim_hash.is_some()
    }
}

/// The platform inventory of a node: what its last commissioning reported.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeInventory {
    /// The node.
    pub node_id: String,
    /// Whether every commissioning test passed.
    pub passed: bool,
    /// When the report arrived.
    #[serde(with = "time::serde::rfc3339")]
    pub reported_at: time::OffsetDateTime,
    /// The `InventoryReport` as the ramdisk signed it.
    #[schema(value_type = Object)]
    pub inventory: serde_json::Value,
}

/// One wipe report as received: accepted, or refused with the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WipeReportRecord {
    /// Id of this record.
    pub id: String,
    /// The node it was posted for (the connection's certificate names it).
    pub node_id: String,
    /// Whether it was accepted.
    pub accepted: bool,
    /// The refusal's stable code (`role-not-allowed`, `missing-disk`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The identity of the certificate that signed it, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer: Option<String>,
    /// The public key (base64 Ed25519) of that certificate, when it could be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer_key: Option<String>,
    /// When it arrived.
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: time::OffsetDateTime,
}

/// One in-band firmware check of a releasing node against its pool's baseline (the
/// teardown's firmware step): the verdict and the comparison it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct FirmwareCheckRecord {
    /// Id of this check.
    pub id: String,
    /// The node checked.
    pub node_id: String,
    /// The node's row generation when it was checked (a new release checks again).
    pub node_generation: i64,
    /// Whether every baseline component matched.
    pub compliant: bool,
    /// When the ramdisk's report arrived.
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: time::OffsetDateTime,
    /// The `FirmwareReport`: the baseline, and per component what was expected and found.
    #[schema(value_type = Object)]
    pub report: serde_json::Value,
}

/// One wipe report opened up for a person: the server's verdict on receipt, what the
/// signed payload says, and the certificate that signed it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct WipeReportDetail {
    /// The record: accepted, or refused with the rule it broke (the server's check on receipt).
    pub record: WipeReportRecord,
    /// The DSSE payload type of the envelope.
    pub payload_type: String,
    /// The signed `WipeReport` as posted (decoded from the envelope; absent when the payload
    /// is not JSON, which a refusal then explains).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub report: Option<serde_json::Value>,
    /// The signing certificate (the first of the signature's chain) and its fingerprint.
    #[serde(flatten)]
    pub signer: SignerCertificate,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_one_step() {
        let ramdisk: Vec<(NodeState, BootTask)> = NodeState::ALL
            .into_iter()
            .filter_map(|s| match boot_step(s, Due { firmware: false, erase: true }) {
                BootStep::Ramdisk(t) => Some((s, t)),
                BootStep::LocalDisk => None,
                BootStep::Installer => panic!("the state alone never says installer (the plan does)"),
            })
            .collect();
        assert_eq!(
            ramdisk,
            [
                (NodeState::New, BootTask::Commission),
                (NodeState::Commissioning, BootTask::Commission),
                (NodeState::Deploying, BootTask::Deploy),
                (NodeState::Rescue, BootTask::Rescue),
                (NodeState::Releasing, BootTask::Erase),
            ]
        );
        assert_eq!(boot_step(NodeState::Releasing, Due::ALL), BootStep::Ramdisk(BootTask::Firmware));
        let erased = Due { firmware: false, erase: false };
        assert_eq!(boot_step(NodeState::Releasing, erased), BootStep::LocalDisk, "one erase per release");
        assert_eq!(boot_step(NodeState::Ready, Due::ALL), BootStep::LocalDisk);
        for t in BootTask::ALL {
            assert_eq!(t.as_str().parse::<BootTask>(), Ok(t));
        }
        assert!("shell".parse::<BootTask>().is_err());
    }
}

/// One attestation as received (issue 32): a TPM quote of the node's boot PCRs with its
/// event log, verified against its one-time challenge and the node's pinned EK, or refused
/// with the rule it broke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttestationRecord {
    /// Id of this record.
    pub id: String,
    /// The node it was posted for.
    pub node_id: String,
    /// The node's identity generation it came from.
    pub identity_generation: i64,
    /// The challenge it answered, when it named a known one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge_id: Option<String>,
    /// Whether the quote verified, bound its challenge and the log replayed to it.
    pub verified: bool,
    /// The refusal's stable code (`ek-differs`, `wrong-challenge`, `log-does-not-replay`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// Why it was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The quoted SHA-256 PCRs 0-9 (hex), when it verified.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub pcrs: std::collections::BTreeMap<u32, String>,
    /// SHA-256 of the event log, when one was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_sha256: Option<String>,
    /// The key (base64 Ed25519) of the ramdisk that sent it: one key per ramdisk boot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ramdisk_key: Option<String>,
    /// When it arrived.
    #[serde(with = "time::serde::rfc3339")]
    pub received_at: time::OffsetDateTime,
}

/// The state of a measured-boot baseline: the node's `active` one is what its attestations
/// are compared with; one an approval or a re-learn replaced is `obsolete`; an operator
/// `retired` one is compared with no more (its key has no baseline until one is learned or
/// approved); a `revoked` one's measurements are known bad: a quote that repeats them is
/// refused and never learned, in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BaselineState {
    /// Compared with.
    Active,
    /// Replaced; kept as evidence.
    Obsolete,
    /// Taken out of use by an operator.
    Retired,
    /// Declared bad by an operator.
    Revoked,
}

impl BaselineState {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            BaselineState::Active => "active",
            BaselineState::Obsolete => "obsolete",
            BaselineState::Retired => "retired",
            BaselineState::Revoked => "revoked",
        }
    }
}

impl std::str::FromStr for BaselineState {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "active" => Ok(BaselineState::Active),
            "obsolete" => Ok(BaselineState::Obsolete),
            "retired" => Ok(BaselineState::Retired),
            "revoked" => Ok(BaselineState::Revoked),
            other => Err(format!("unknown baseline state {other:?}")),
        }
    }
}

/// What a baseline applies to: one node (its boot entries, PCR 1), or every node of a
/// hardware profile running one firmware (the firmware's own PCRs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum BaselineScope {
    /// The node it was learned on.
    Node,
    /// Its hardware profile and firmware.
    Profile,
}

impl BaselineScope {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            BaselineScope::Node => "node",
            BaselineScope::Profile => "profile",
        }
    }
}

impl std::str::FromStr for BaselineScope {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "node" => Ok(BaselineScope::Node),
            "profile" => Ok(BaselineScope::Profile),
            other => Err(format!("unknown baseline scope {other:?}")),
        }
    }
}

/// Which baseline a comparison takes: a node's own, or a hardware profile's at a firmware.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BaselineKey {
    /// The node's.
    Node(String),
    /// The profile's, at a firmware (`component=version,...`, as the pool's `firmwareBaseline`).
    Profile {
        /// The hardware profile.
        hardware_profile: String,
        /// The firmware.
        firmware: String,
    },
}

impl std::fmt::Display for BaselineKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BaselineKey::Node(node) => write!(f, "node {node}"),
            BaselineKey::Profile { hardware_profile, firmware } => {
                write!(f, "hardware profile {hardware_profile} with firmware {firmware}")
            }
        }
    }
}

/// A measured-boot baseline (issue 32): the PCRs of one verified attestation, learned in
/// platform custody (commissioning, a teardown in a `learn` pool) or approved by an operator;
/// the teardown's `attest` step compares each erase boot's quote with the node's own
/// (per-node PCRs) and its hardware profile's at its firmware (the firmware's PCRs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BootBaseline {
    /// Id of the baseline.
    pub id: String,
    /// Whether it is the node's own or its hardware profile's.
    pub scope: BaselineScope,
    /// The node whose attestation it was learned from.
    pub node_id: String,
    /// The hardware profile it applies to (scope `profile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_profile: Option<String>,
    /// The firmware it applies to, `component=version,...` (scope `profile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<String>,
    /// The verified attestation it was learned from (its event log names differing events).
    pub attestation_id: String,
    /// The quoted SHA-256 PCRs 0-9 (hex).
    pub pcrs: std::collections::BTreeMap<u32, String>,
    /// Active or obsolete.
    pub state: BaselineState,
    /// How it was learned: `commissioning`, `learn` (a teardown in a learn pool), or
    /// `approved by CREDENTIAL`.
    pub learned_by: String,
    /// When it was learned.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: time::OffsetDateTime,
    /// When it stopped being active (replaced, retired or revoked).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    pub replaced_at: Option<time::OffsetDateTime>,
    /// Who retired or revoked it, and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_reason: Option<String>,
}

impl BootBaseline {
    /// What it applies to.
    pub fn key(&self) -> BaselineKey {
        match (self.scope, &self.hardware_profile, &self.firmware) {
            (BaselineScope::Profile, Some(profile), Some(firmware)) => {
                BaselineKey::Profile { hardware_profile: profile.clone(), firmware: firmware.clone() }
            }
            _ => BaselineKey::Node(self.node_id.clone()),
        }
    }
}

/// Approves a verified attestation of the node as a baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BaselineApproval {
    /// The attestation (of this node, verified) whose PCRs become the baseline.
    pub attestation_id: String,
    /// The node's own baseline (the default), or its hardware profile's at the firmware its
    /// pool names (qualifying that firmware for every node of the profile).
    #[serde(default = "BaselineApproval::node_scope")]
    pub scope: BaselineScope,
}

impl BaselineApproval {
    fn node_scope() -> BaselineScope {
        BaselineScope::Node
    }
}

/// An operator's retirement or revocation of a baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BaselineEnd {
    /// Why (1 to 1,000 characters): a firmware withdrawn, a CVE, a machine retired.
    pub reason: String,
}

impl BaselineEnd {
    /// Refuses an empty or overlong reason.
    pub fn validate(&self) -> Result<(), crate::error::ApiError> {
        let reason = self.reason.trim();
        if reason.is_empty() || reason.chars().count() > 1000 || reason.chars().any(char::is_control) {
            return Err(crate::error::ApiError::invalid("reason", "say why, in 1 to 1,000 printable characters"));
        }
        Ok(())
    }
}

/// One event of an attestation's TCG event log, as the console lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MeasuredEvent {
    /// Its number in the log (the Spec ID header is 0, as `tpm2_eventlog` numbers).
    pub number: usize,
    /// The PCR it was extended into.
    pub pcr: u32,
    /// The TCG name of its type (`EV_EFI_PLATFORM_FIRMWARE_BLOB2`).
    pub event_type: String,
    /// Its SHA-256 digest (hex), when the log carries that bank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// An attestation compared with one of the node's active baselines, on its PCRs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BaselineComparison {
    /// The baseline.
    pub baseline_id: String,
    /// The node's own, or its hardware profile's.
    pub scope: BaselineScope,
    /// The PCRs compared.
    pub pcrs: Vec<u32>,
    /// The first difference (`PCR 0 differs (event 12, EV_EFI_PLATFORM_FIRMWARE_BLOB2) from
    /// baseline B`); absent when every compared PCR is the baseline's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub difference: Option<String>,
}

/// One attestation: the server's verdict on receipt, what its event log says was measured,
/// how it compares with the node's baseline now, and the certificate that signed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AttestationDetail {
    /// The record: verified, or refused with the rule it broke.
    pub record: AttestationRecord,
    /// The event log's events (empty when the report carried none that parses).
    pub events: Vec<MeasuredEvent>,
    /// Against the node's active baselines, its own and its hardware profile's (none for a
    /// refused quote).
    pub comparisons: Vec<BaselineComparison>,
    /// The signing certificate (the ramdisk's) and its fingerprint.
    #[serde(flatten)]
    pub signer: SignerCertificate,
}

/// The certificate that signed a report: the first of its signature's chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SignerCertificate {
    /// The certificate as PEM.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer_certificate: Option<String>,
    /// SHA-256 of its DER, hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signer_fingerprint: Option<String>,
}
