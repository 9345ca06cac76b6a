//! Pools: a tenant's set of nodes at a site, their policy (seed 000), offers and rollups.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;

pub use metal_firmware::bios::BiosBaseline;
pub use metal_firmware::reflash::{FirmwareImage, FirmwareRemediation};

/// Whether the pool's nodes run a site agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AgentMode {
    /// No agent: teardown runs the out-of-band variant (no wipe).
    None,
}

/// How the teardown cuts a released machine off the tenant's network and keeps it off.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "driver", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Fencing {
    /// ClusterLabs' fence-agents through the node's BMC (`fence_redfish` or
    /// `fence_ipmilan`, chosen by the BMC's protocol): off, then status reads it back.
    FenceAgents,
    /// A site command (run with `sh -c`), given the node id, its MACs and its BMC address
    /// in the environment (`METAL_NODE`, `METAL_MACS`, `METAL_BMC_ADDRESS`); exit 0 fences.
    Command {
        /// The command line.
        command: String,
    },
    /// No fencing: recorded as such in the evidence.
    None,
}

/// Pool policy, as in seed 000.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolPolicy {
    /// Hardware profile name of the pool's machines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hardware_profile: Option<String>,
    /// Whole-node, dedicated-root leases are allowed.
    #[serde(default)]
    pub tenant_root: bool,
    /// `{component: version}` the teardown verifies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware_baseline: Option<BTreeMap<String, String>>,
    /// What to do about drift.
    #[serde(default)]
    pub firmware_remediation: FirmwareRemediation,
    /// Images to reflash, by component.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub firmware_images: BTreeMap<String, FirmwareImage>,
    /// `none` for agentless pools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentMode>,
    /// Agentless teardown (no wipe) may return nodes to ready.
    #[serde(default)]
    pub allow_unverified_release: bool,
    /// The teardown's fencing driver (none when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing: Option<Fencing>,
    /// Tenant isolation on the switch: the VLANs the pool's node ports move between (no
    /// moves when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkPolicy>,
    /// Measured boot (issue 32): whether the teardown's erase boot must attest with the
    /// machine's TPM, and what its PCRs are compared with (off when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_boot: Option<MeasuredBootPolicy>,
    /// BIOS settings custody (issue 32): the attribute values the teardown writes back
    /// before its erase boot and checks after it (no check when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios_baseline: Option<BiosBaseline>,
}

/// What a teardown does with the erase boot's TPM quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MeasuredBootMode {
    /// Nothing: the `attest` step passes without a quote.
    Off,
    /// A quote is required and verified; PCRs that differ from the node's baseline become
    /// its new baseline (the old one obsolete), recorded as an event. For vetted hardware.
    Learn,
    /// A quote is required, verified and compared: any compared PCR that differs from the
    /// node's active baseline, or no baseline, quarantines the node.
    Enforce,
}

/// A pool's measured-boot policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MeasuredBootPolicy {
    /// Off, learn or enforce.
    pub mode: MeasuredBootMode,
    /// The PCRs compared with the baseline, of 0-7 (the firmware's, boot entries included);
    /// 0-3 and 5-7 when absent. PCR 4 (the boot loader and kernel) and 8-9 (the command line
    /// with its one-time token) change with each ramdisk build or boot.
    #[serde(default = "MeasuredBootPolicy::default_pcrs")]
    pub pcrs: Vec<u32>,
    /// Of `pcrs`, those compared with each node's own baseline when the pool names a
    /// `hardwareProfile` (PCR 1, the boot entries, by default); the others are compared with
    /// the profile's baseline at the firmware the pool's `firmwareBaseline` names, so a
    /// firmware is qualified once for every node of the profile. Without a profile, every PCR
    /// is compared per node.
    #[serde(default = "MeasuredBootPolicy::default_node_pcrs")]
    pub node_pcrs: Vec<u32>,
}

impl MeasuredBootPolicy {
    /// PCRs 0-3 and 5-7.
    pub fn default_pcrs() -> Vec<u32> {
        vec![0, 1, 2, 3, 5, 6, 7]
    }

    /// PCR 1.
    pub fn default_node_pcrs() -> Vec<u32> {
        vec![1]
    }

    /// The mode, `off` for a pool with no policy.
    pub fn mode_of(policy: Option<&MeasuredBootPolicy>) -> MeasuredBootMode {
        policy.map_or(MeasuredBootMode::Off, |p| p.mode)
    }
}

/// The VLANs of a pool that isolates its tenants on the switch. A lease's deploy runs on the
/// provisioning VLAN; its ports move to a tenant VLAN of the pool's range (each live lease its
/// own) before the deployed OS boots; the teardown moves them to the cleaning VLAN right
/// after power-off and back to provisioning before `ready`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkPolicy {
    /// The provisioning VLAN: commissioning, deploys, ready nodes.
    pub provisioning_vlan: u16,
    /// The cleaning VLAN: the teardown's ramdisk boots (the provisioning VLAN when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cleaning_vlan: Option<u16>,
    /// The tenant VLANs, `first` to `last`.
    pub tenant_vlans: VlanRange,
}

impl NetworkPolicy {
    /// The cleaning VLAN (the provisioning one when none is set).
    pub fn cleaning(&self) -> u16 {
        self.cleaning_vlan.unwrap_or(self.provisioning_vlan)
    }
}

/// A range of VLAN ids, both ends included.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VlanRange {
    /// The first.
    pub first: u16,
    /// The last.
    pub last: u16,
}

impl VlanRange {
    /// Whether `vlan` is in it.
    pub fn contains(&self, vlan: u16) -> bool {
        (self.first..=self.last).contains(&vlan)
    }
}

/// Creates a pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolCreate {
    /// Pool id (generated when absent).
    #[serde(default)]
    pub id: Option<String>,
    /// Owning tenant (the platform's is `root`).
    pub tenant_id: String,
    /// Site.
    pub site_id: String,
    /// Class, e.g. `metal-dedicated`.
    pub class: String,
    /// Policy.
    #[serde(default)]
    pub policy: PoolPolicy,
}

/// Pool capacity rollup. Nodes under tenant control add no capacity.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PoolCapacity {
    /// Nodes in the pool under platform trust.
    pub capacity: u64,
    /// Of those, placeable now: ready, not in maintenance or cordoned, not booked now.
    pub free: u64,
    /// Nodes with a live allocation now.
    pub leased: u64,
}

/// A pool.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// Id.
    pub id: String,
    /// Row generation.
    pub generation: i64,
    /// Owning tenant.
    pub tenant_id: String,
    /// Site.
    pub site_id: String,
    /// Class.
    pub class: String,
    /// Policy.
    pub policy: PoolPolicy,
    /// Tenants the pool is offered to.
    pub offered_to: Vec<String>,
    /// Capacity rollup (admins only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<PoolCapacity>,
}

/// Offers a pool to a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PoolOffer {
    /// The tenant.
    pub tenant_id: String,
}

fn check_name(field: &str, value: &str) -> Result<(), ApiError> {
    metal_protocol::identity::validate_name(field, value).map_err(|e| ApiError::invalid(field, e.to_string()))
}

fn check_network(network: &NetworkPolicy) -> Result<(), ApiError> {
    let vlans = [
        ("policy.network.provisioningVlan", network.provisioning_vlan),
        ("policy.network.cleaningVlan", network.cleaning()),
        ("policy.network.tenantVlans.first", network.tenant_vlans.first),
        ("policy.network.tenantVlans.last", network.tenant_vlans.last),
    ];
    for (field, vlan) in vlans {
        metal_switch::check_vlan(vlan).map_err(|e| ApiError::invalid(field, e.to_string()))?;
    }
    let range = network.tenant_vlans;
    if range.first > range.last {
        return Err(ApiError::invalid("policy.network.tenantVlans", "first is after last"));
    }
    for (field, vlan) in &vlans[..2] {
        if range.contains(*vlan) {
            return Err(ApiError::invalid(
                *field,
                format!("VLAN {vlan} is in the tenant range {}-{}", range.first, range.last),
            ));
        }
    }
    Ok(())
}

fn check_measured_boot(policy: &MeasuredBootPolicy, agent: Option<AgentMode>) -> Result<(), ApiError> {
    if policy.mode != MeasuredBootMode::Off && agent == Some(AgentMode::None) {
        return Err(ApiError::invalid(
            "policy.measuredBoot.mode",
            "an agentless pool (agent: none) boots no ramdisk to quote its TPM; use off",
        ));
    }
    if policy.pcrs.is_empty() {
        return Err(ApiError::invalid("policy.measuredBoot.pcrs", "name at least one PCR"));
    }
    for (field, pcrs) in
        [("policy.measuredBoot.pcrs", &policy.pcrs), ("policy.measuredBoot.nodePcrs", &policy.node_pcrs)]
    {
        for (i, pcr) in pcrs.iter().enumerate() {
            if *pcr > 7 {
                return Err(ApiError::invalid(
                    field,
                    format!("PCR {pcr} is not a firmware PCR (0-7); 8 and 9 hold each boot's command line"),
                ));
            }
            if pcrs[..i].contains(pcr) {
                return Err(ApiError::invalid(field, format!("PCR {pcr} is named twice")));
            }
        }
    }
    Ok(())
}

fn component_ok(c: &str) -> bool {
    !c.is_empty()
        && c.len() <= 64
        && c.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b':' | b'.' | b'_' | b'-'))
}

impl PoolCreate {
    /// Validates every field, naming the first bad one.
    pub fn validate(&self) -> Result<(), ApiError> {
        if let Some(id) = &self.id {
            check_name("id", id)?;
        }
        check_name("tenantId", &self.tenant_id)?;
        check_name("siteId", &self.site_id)?;
        check_name("class", &self.class)?;
        let p = &self.policy;
        if let Some(network) = &p.network {
            check_network(network)?;
        }
        if let Some(profile) = &p.hardware_profile {
            check_name("policy.hardwareProfile", profile)?;
        }
        if let Some(baseline) = &p.firmware_baseline {
            for (component, version) in baseline {
                if !component_ok(component) {
                    return Err(ApiError::invalid(
                        "policy.firmwareBaseline",
                        format!("component {component:?} must be 1 to 64 of a-z 0-9 : . _ -"),
                    ));
                }
                if version.is_empty() || version.len() > 64 || version.chars().any(char::is_control) {
                    return Err(ApiError::invalid(
                        "policy.firmwareBaseline",
                        format!("version of {component} must be 1 to 64 printable characters"),
                    ));
                }
            }
        }
        for (component, image) in &p.firmware_images {
            let field = format!("policy.firmwareImages.{component}");
            if !p.firmware_baseline.as_ref().is_some_and(|b| b.contains_key(component)) {
                return Err(ApiError::invalid(field, "an image for a component the firmwareBaseline does not name"));
            }
            if !image.url.starts_with("https://")
                || image.url.len() > 2048
                || image.url.chars().any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(ApiError::invalid(format!("{field}.url"), "must be an https:// URL"));
            }
            if image.sha256.len() != 64 || !image.sha256.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
                return Err(ApiError::invalid(format!("{field}.sha256"), "must be 64 lower-case hex digits"));
            }
        }
        if p.firmware_remediation == FirmwareRemediation::Reflash && p.firmware_images.is_empty() {
            return Err(ApiError::invalid("policy.firmwareImages", "reflash remediation needs at least one image"));
        }
        if let Some(Fencing::Command { command }) = &p.fencing
            && (command.trim().is_empty() || command.len() > 4096 || command.contains('\0'))
        {
            return Err(ApiError::invalid("policy.fencing.command", "must be a command line of 1 to 4096 bytes"));
        }
        if let Some(measured) = &p.measured_boot {
            check_measured_boot(measured, p.agent)?;
        }
        if let Some(bios) = &p.bios_baseline {
            if p.agent == Some(AgentMode::None) {
                return Err(ApiError::invalid(
                    "policy.biosBaseline",
                    "BIOS settings apply at a boot, and an agentless pool's teardown boots nothing to apply them",
                ));
            }
            if let Some((field, message)) = bios.problem() {
                return Err(ApiError::invalid(format!("policy.biosBaseline.{field}"), message));
            }
        }
        if p.allow_unverified_release && p.agent != Some(AgentMode::None) {
            return Err(ApiError::invalid(
                "policy.allowUnverifiedRelease",
                "only agentless pools (agent: none) release without a wipe",
            ));
        }
        Ok(())
    }
}
