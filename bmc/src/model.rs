//! What a BMC reports and what it is asked to do, the same for Redfish and IPMI.

use serde::{Deserialize, Serialize};

/// Chassis power.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PowerState {
    /// Running.
    On,
    /// Stopped.
    Off,
}

/// A power request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum PowerAction {
    /// Power on (nothing when running).
    On,
    /// Hard power off (nothing when stopped).
    Off,
    /// Warm reset (power on when stopped).
    Reset,
    /// Power off then on (power on when stopped).
    Cycle,
}

impl std::str::FromStr for PowerAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "on" => Ok(Self::On),
            "off" => Ok(Self::Off),
            "reset" => Ok(Self::Reset),
            "cycle" => Ok(Self::Cycle),
            other => Err(format!("unknown power action {other:?} (on, off, reset, cycle)")),
        }
    }
}

/// What a power request did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PowerOutcome {
    /// The state before.
    pub before: PowerState,
    /// The state read back after.
    pub after: PowerState,
    /// The commands sent, in order (empty when nothing had to be done), e.g. `["ForceOff", "On"]`.
    pub sent: Vec<String>,
}

/// Where the next boot goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BootTarget {
    /// Network (PXE).
    Pxe,
    /// Local disk.
    Disk,
    /// CD (virtual media).
    Cd,
    /// Firmware setup.
    Bios,
}

impl std::str::FromStr for BootTarget {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "pxe" => Ok(Self::Pxe),
            "disk" => Ok(Self::Disk),
            "cd" => Ok(Self::Cd),
            "bios" => Ok(Self::Bios),
            other => Err(format!("unknown boot target {other:?} (pxe, disk, cd, bios)")),
        }
    }
}

/// Whether a boot override holds for one boot or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BootPersistence {
    /// The next boot only.
    Once,
    /// Every boot until changed.
    Persistent,
}

/// The virtual CD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaStatus {
    /// Whether an image is inserted.
    pub inserted: bool,
    /// Its URL, if any.
    pub image: Option<String>,
}

/// A BIOS attribute's value as Redfish carries it: a string, a number or a boolean.
pub type BiosValue = serde_json::Value;

/// The BIOS attributes a BMC reports (Redfish `Bios`): those in effect and those written
/// for the next boot (`Bios/Settings`, where they differ).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BiosSettings {
    /// In effect now.
    pub current: std::collections::BTreeMap<String, BiosValue>,
    /// Written and applied at the next boot: only those that differ from `current`.
    pub pending: std::collections::BTreeMap<String, BiosValue>,
    /// The attribute registry the BMC names (what each attribute may hold).
    pub registry: Option<String>,
}

/// UEFI Secure Boot as a BMC reports it (Redfish `SecureBoot`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SecureBootState {
    /// Whether the firmware is to verify what it boots (`SecureBootEnable`; most BMCs apply
    /// a change at the next boot).
    pub enabled: bool,
    /// Whether the running boot was verified (`SecureBootCurrentBoot`), when shown.
    pub current_boot: Option<String>,
    /// `SetupMode`, `UserMode`, `AuditMode` or `DeployedMode`, when shown.
    pub mode: Option<String>,
}

/// A section of the read model: what the BMC reported, or why it is absent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase", tag = "status", content = "value")]
pub enum Section<T> {
    /// Reported.
    Present(T),
    /// Not reported by this BMC (the reason says what was missing).
    Absent(String),
}

impl<T> Section<T> {
    /// The value, if present.
    pub fn present(&self) -> Option<&T> {
        match self {
            Section::Present(v) => Some(v),
            Section::Absent(_) => None,
        }
    }
}

/// Who the machine is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// Manufacturer.
    pub manufacturer: Option<String>,
    /// Model.
    pub model: Option<String>,
    /// Serial number.
    pub serial: Option<String>,
    /// System UUID.
    pub uuid: Option<String>,
    /// BIOS version, when the BMC shows it.
    pub bios_version: Option<String>,
    /// BMC firmware version.
    pub bmc_version: Option<String>,
}

/// One temperature sensor.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Temperature {
    /// Sensor name.
    pub name: String,
    /// Reading in degrees Celsius.
    pub celsius: f64,
    /// Upper critical threshold, if known.
    pub upper_critical: Option<f64>,
}

/// One firmware component.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FirmwareComponent {
    /// The BMC's id for it.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Installed version.
    pub version: String,
    /// Whether the BMC can update it.
    pub updateable: Option<bool>,
    /// The resource an update of it targets (Redfish: the inventory item's `@odata.id`).
    #[serde(skip)]
    pub resource: Option<String>,
}

/// One log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LogEntry {
    /// When, as the BMC wrote it.
    pub created: Option<String>,
    /// Severity.
    pub severity: Option<String>,
    /// Text.
    pub message: String,
}

/// Everything the BMC says about the machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadModel {
    /// Identity.
    pub identity: Section<Identity>,
    /// Health rollup (`OK`, `Warning`, `Critical`).
    pub health: Section<String>,
    /// Power state.
    pub power: Section<PowerState>,
    /// Temperatures.
    pub temperatures: Section<Vec<Temperature>>,
    /// Power draw in watts.
    pub power_watts: Section<f64>,
    /// Firmware inventory.
    pub firmware: Section<Vec<FirmwareComponent>>,
    /// Newest log entries, newest first.
    pub logs: Section<Vec<LogEntry>>,
}

/// What a firmware update is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateTarget {
    /// The host firmware (Redfish: the computer system).
    System,
    /// The BMC itself (Redfish: its manager).
    Manager,
    /// These firmware inventory resources.
    Resources(Vec<String>),
}

/// A firmware image to write through the BMC.
#[derive(Debug, Clone)]
pub struct FirmwareUpdate {
    /// What it updates.
    pub target: UpdateTarget,
    /// Where the BMC can fetch it (SimpleUpdate).
    pub image_url: String,
    /// The image itself, already checked, for BMCs that take a push.
    pub image: Option<Vec<u8>>,
    /// File name to present with a push.
    pub file_name: String,
}

/// How an update reached its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateOutcome {
    /// How the image was handed over (`SimpleUpdate` or `MultipartPush`).
    pub method: &'static str,
    /// The final task (or action) answer's TaskState, when it had one.
    pub task_state: Option<String>,
    /// The BMC said the new firmware takes effect only after a reset.
    pub reset_required: bool,
}
