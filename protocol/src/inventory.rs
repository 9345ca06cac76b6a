//! `InventoryReport`: what the commissioning ramdisk found on a machine, and its basic tests.
//!
//! Everything the ramdisk cannot see is `None` or empty, never guessed: a report is evidence.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::disk::{DiskIdentity, Transport};
use crate::firmware::FirmwareVersion;
use crate::tool::Tool;

/// The inventory and basic test results of one machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InventoryReport {
    /// The node the report is about.
    pub node_id: String,
    /// When the inventory was taken.
    #[serde(with = "time::serde::rfc3339")]
    pub collected_at: OffsetDateTime,
    /// Processors.
    pub cpu: Cpu,
    /// Memory.
    pub memory: Memory,
    /// Whole block devices.
    pub disks: Vec<Disk>,
    /// Network interfaces (physical ones; no loopback, bridges or virtual links).
    pub nics: Vec<Nic>,
    /// SMBIOS/DMI identity.
    pub dmi: Dmi,
    /// Firmware versions seen in band.
    pub firmware: Vec<FirmwareVersion>,
    /// Basic test results; an empty list means no test ran.
    pub tests: Vec<TestResult>,
    /// The tool that produced the report.
    pub tool: Tool,
}

impl InventoryReport {
    /// DSSE payload type of a signed inventory report.
    pub const PAYLOAD_TYPE: &'static str = "application/vnd.metal.inventory-report+json";

    /// Whether every basic test passed (false when any failed).
    pub fn passed(&self) -> bool {
        self.tests.iter().all(|t| t.passed)
    }
}

/// Processors.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Cpu {
    /// The instruction set the machine runs, as Rust names it: `x86_64` or `aarch64` (the
    /// ramdisk's own, which runs natively). Reports from before the field are x86_64's.
    #[serde(default = "x86_64")]
    pub architecture: String,
    /// Model name, e.g. "AMD EPYC 9654 96-Core Processor" (on arm64, the core's name from its
    /// implementer and part numbers, e.g. "Arm Neoverse-V2").
    pub model: String,
    /// Populated sockets.
    pub sockets: u32,
    /// Physical cores in all sockets.
    pub cores: u32,
    /// Hardware threads (logical CPUs) in all sockets.
    pub threads: u32,
    /// Flags that matter for placement and checks (virtualization, AES, AVX-512, SEV, TDX, ...).
    pub flags: Vec<String>,
}

/// The architecture of a report from before [`Cpu::architecture`].
fn x86_64() -> String {
    "x86_64".into()
}

/// Memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Memory {
    /// Usable memory in bytes, as the kernel reports it.
    pub total_bytes: u64,
    /// Populated DIMMs, when SMBIOS makes them visible.
    pub dimms: Vec<Dimm>,
}

/// One memory module.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dimm {
    /// Slot label, e.g. "DIMM_A1".
    pub locator: String,
    /// Size in bytes.
    pub size_bytes: u64,
    /// Memory type, e.g. "DDR5".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Configured speed in MT/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mts: Option<u32>,
    /// Manufacturer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub manufacturer: Option<String>,
    /// Serial number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
}

/// One whole block device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Disk {
    /// Kernel name, e.g. "nvme0n1"; changes between boots.
    pub name: String,
    /// Stable identity (serial, model, WWN, by-path, size).
    pub identity: DiskIdentity,
    /// `/dev/disk/by-id` links.
    pub by_id: Vec<String>,
    /// Logical block size in bytes.
    pub logical_block_size: u32,
    /// Physical block size in bytes.
    pub physical_block_size: u32,
    /// Spinning medium.
    pub rotational: bool,
    /// How it is attached.
    pub transport: Transport,
    /// Removable medium (USB sticks, CD drives).
    pub removable: bool,
    /// Read-only.
    pub read_only: bool,
}

/// One network interface.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Nic {
    /// Kernel name, e.g. "enp1s0".
    pub name: String,
    /// Permanent MAC address, lower-case colon form.
    pub mac: String,
    /// Kernel driver, e.g. "ice".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub driver: Option<String>,
    /// Carrier detected.
    pub link: bool,
    /// Negotiated speed in Mbit/s, when the link is up and the driver says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed_mbps: Option<u32>,
    /// PCI address, e.g. "0000:01:00.0".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_address: Option<String>,
    /// The switch port at the other end, from the LLDPDUs it sent (commissioning with
    /// `metal.lldp`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lldp: Option<crate::lldp::LldpNeighbor>,
}

/// SMBIOS/DMI identity; fields the firmware leaves empty or filled with junk are `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Dmi {
    /// System manufacturer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_vendor: Option<String>,
    /// System product name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_product: Option<String>,
    /// System serial number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_serial: Option<String>,
    /// System UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_uuid: Option<String>,
    /// Baseboard manufacturer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_vendor: Option<String>,
    /// Baseboard product name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_product: Option<String>,
    /// Baseboard serial number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub board_serial: Option<String>,
    /// BIOS/UEFI vendor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios_vendor: Option<String>,
    /// BIOS/UEFI version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios_version: Option<String>,
    /// BIOS/UEFI release date as the firmware writes it (usually MM/DD/YYYY).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios_date: Option<String>,
    /// Chassis manufacturer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis_vendor: Option<String>,
    /// Chassis serial number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis_serial: Option<String>,
    /// Chassis asset tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chassis_asset_tag: Option<String>,
}

/// Which basic test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TestKind {
    /// Pattern test of part of free memory.
    Memory,
    /// Sampled reads across every disk, plus SMART/NVMe health where available.
    Disk,
    /// Link on every NIC.
    Nic,
    /// All cores online and a checksum workload on each.
    Cpu,
}

/// One basic test's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestResult {
    /// Which test.
    pub kind: TestKind,
    /// Whether it passed.
    pub passed: bool,
    /// What was checked and what was found, for people.
    pub details: String,
    /// Wall time in milliseconds.
    pub duration_ms: u64,
}

/// Where a machine's kernel views live (`/sys`, `/proc`, `/dev`); the running system by
/// default, a fake tree in tests. Shared by everything that reads them (erase, firmware,
/// boot) so a test points all of them at one tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemPaths {
    /// sysfs mount point.
    pub sys: std::path::PathBuf,
    /// procfs mount point.
    pub proc: std::path::PathBuf,
    /// devtmpfs mount point.
    pub dev: std::path::PathBuf,
}

impl Default for SystemPaths {
    fn default() -> Self {
        Self { sys: "/sys".into(), proc: "/proc".into(), dev: "/dev".into() }
    }
}

impl SystemPaths {
    /// `sys`, `proc` and `dev` under `root` (a test's fake tree).
    pub fn under(root: &std::path::Path) -> Self {
        Self { sys: root.join("sys"), proc: root.join("proc"), dev: root.join("dev") }
    }
}
