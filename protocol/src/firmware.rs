//! Firmware versions and the `FirmwareReport` of a baseline check.
//!
//! Components are named the same way in band and out of band (`bmc`, `bios`, `gpu-vbios`,
//! `nic:<pci address>`, `nvme:<serial>`), so one baseline names them for both paths.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::tool::Tool;

/// One component's firmware version as read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FirmwareVersion {
    /// Component name, e.g. "bios" or "nic:0000:01:00.0".
    pub component: String,
    /// Version string as reported.
    pub version: String,
    /// Where it was read: "dmi", "ipmi", "ethtool", "nvme-identify", "sysfs", "redfish".
    pub source: String,
}

/// How versions are compared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Comparison {
    /// Byte-for-byte equal strings.
    Exact,
}

/// The result of comparing an inventory with a baseline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FirmwareReport {
    /// The node checked.
    pub node_id: String,
    /// The baseline checked against (`{component: version}`).
    pub baseline: BTreeMap<String, String>,
    /// How versions were compared.
    pub comparison: Comparison,
    /// One entry per baseline component.
    pub components: Vec<ComponentCheck>,
    /// True when no component drifted.
    pub compliant: bool,
    /// When the check ran.
    #[serde(with = "time::serde::rfc3339")]
    pub checked_at: OffsetDateTime,
    /// The tool that checked.
    pub tool: Tool,
}

impl FirmwareReport {
    /// DSSE payload type of a signed firmware report.
    pub const PAYLOAD_TYPE: &'static str = "application/vnd.metal.firmware-report+json";
}

/// One component of a baseline check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComponentCheck {
    /// Component name.
    pub component: String,
    /// Version found; `None` when the component was not in the inventory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<String>,
    /// Version the baseline expects.
    pub expected: String,
    /// True when `found` is missing or differs from `expected`.
    pub drift: bool,
}
