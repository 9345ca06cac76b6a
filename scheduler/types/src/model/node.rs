//! Nodes: the lifecycle state machine, power, trust, taints, labels and bookable devices.
//!
//! The lifecycle is a fixed table of allowed moves; every change is a compare-and-set on
//! the current state (and optionally the row generation), so two callers can never both win
//! and anything not in the table is a CONFLICT.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;

/// Where a node is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NodeState {
    /// Enrolled, never commissioned.
    New,
    /// Running the commissioning ramdisk.
    Commissioning,
    /// Commissioned and clean: placeable.
    Ready,
    /// Booked by an allocation, not yet deploying.
    Allocated,
    /// Writing an image.
    Deploying,
    /// Running the deployed OS.
    Deployed,
    /// A lessee's rescue: booting the rescue environment, running it on the tenant network
    /// (the disks untouched), or booting the disk again (`unrescue`).
    Rescue,
    /// Being torn down (wipe, firmware check) before returning to ready.
    Releasing,
    /// Something failed; needs recovery. Quarantined when it failed from releasing.
    Failed,
    /// Out of service for good (until re-enrolled as new).
    Retired,
}

impl NodeState {
    /// Every state.
    pub const ALL: [NodeState; 10] = [
        NodeState::New,
        NodeState::Commissioning,
        NodeState::Ready,
        NodeState::Allocated,
        NodeState::Deploying,
        NodeState::Deployed,
        NodeState::Rescue,
        NodeState::Releasing,
        NodeState::Failed,
        NodeState::Retired,
    ];

    /// Name as in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::New => "new",
            NodeState::Commissioning => "commissioning",
            NodeState::Ready => "ready",
            NodeState::Allocated => "allocated",
            NodeState::Deploying => "deploying",
            NodeState::Deployed => "deployed",
            NodeState::Rescue => "rescue",
            NodeState::Releasing => "releasing",
            NodeState::Failed => "failed",
            NodeState::Retired => "retired",
        }
    }

    /// The states this one may move to.
    pub fn next(self) -> &'static [NodeState] {
        use NodeState::*;
        match self {
            New => &[Commissioning],
            Commissioning => &[Ready, Failed, New],
            Ready => &[Allocated, Commissioning, Retired],
            Allocated => &[Deploying, Ready],
            Deploying => &[Deployed, Failed],
            // A lessee's reinstall redeploys a deployed node, or one whose reinstall failed;
            // its rescue boots the rescue environment (and `unrescue` the disk again).
            Deployed => &[Releasing, Retired, Deploying, Rescue],
            Rescue => &[Deployed, Failed, Releasing, Deploying],
            Releasing => &[Ready, Failed],
            Failed => &[Commissioning, New, Retired, Releasing, Deploying, Rescue],
            Retired => &[New],
        }
    }

    /// Whether `self -> to` is an allowed move.
    pub fn can_move_to(self, to: NodeState) -> bool {
        self.next().contains(&to)
    }

    /// In-progress states have an owner and a deadline; the reaper fails them when overdue.
    pub fn in_progress(self) -> bool {
        matches!(self, NodeState::Commissioning | NodeState::Deploying | NodeState::Releasing)
    }
}

/// The lifecycle's allowed moves, one state a line (for `--help`).
pub fn moves_help() -> String {
    let mut text = String::from("Allowed moves:\n");
    for state in NodeState::ALL {
        let next: Vec<&str> = state.next().iter().map(|s| s.as_str()).collect();
        text.push_str(&format!("  {:<14} -> {}\n", state.as_str(), next.join(", ")));
    }
    text
}

impl fmt::Display for NodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NodeState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        NodeState::ALL.into_iter().find(|n| n.as_str() == s).ok_or_else(|| format!("unknown node state {s:?}"))
    }
}

/// The columns of a node import's CSV (`POST /v1/nodes/import`, `metalctl node import`):
/// `id` (required), `bootMac`, `poolId`, `labels` (`k=v;k=v`), `taints`
/// (`k=v:NoSchedule;...`), `devices` (`class=count;...`, expanded to healthy atoms
/// `class0..classN-1`) and the node's BMC (`bmcTls` is `insecure` or `fingerprint=HEX`).
pub const CSV_COLUMNS: [&str; 12] = [
    "id",
    "bootMac",
    "poolId",
    "labels",
    "taints",
    "devices",
    "bmcProtocol",
    "bmcAddress",
    "bmcUsername",
    "bmcPassword",
    "bmcTls",
    "bmcPrivilege",
];

/// How long each in-progress state may last before the reaper fails it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// Commissioning.
    pub commissioning: Duration,
    /// Deploying (the seed's 2-hour limit).
    pub deploying: Duration,
    /// Releasing (teardown: firmware check and a full wipe).
    pub releasing: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Self {
            commissioning: Duration::from_secs(3600),
            deploying: Duration::from_secs(2 * 3600),
            releasing: Duration::from_secs(12 * 3600),
        }
    }
}

impl Deadlines {
    /// The time limit of an in-progress state.
    pub fn for_state(&self, state: NodeState) -> Option<Duration> {
        match state {
            NodeState::Commissioning => Some(self.commissioning),
            NodeState::Deploying => Some(self.deploying),
            NodeState::Releasing => Some(self.releasing),
            _ => None,
        }
    }
}

/// Power, tracked apart from lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PowerState {
    /// Not known yet (no BMC reading).
    Unknown,
    /// On.
    On,
    /// Off.
    Off,
}

/// Whose code the node runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Trust {
    /// Platform-controlled: its reports count.
    Platform,
    /// A tenant has root: its reports are advisory.
    TenantControlled,
}

/// What a taint does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub enum TaintEffect {
    /// Keeps ordinary work off the node.
    NoSchedule,
}

/// A taint, written `key=value:NoSchedule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Taint {
    /// Key, e.g. "dedicated".
    pub key: String,
    /// Value, e.g. a tenant id.
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
}

impl FromStr for Taint {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (kv, effect) = s.rsplit_once(':').ok_or_else(|| format!("taint {s:?} is not key=value:NoSchedule"))?;
        let (key, value) = kv.split_once('=').ok_or_else(|| format!("taint {s:?} is not key=value:NoSchedule"))?;
        if effect != "NoSchedule" {
            return Err(format!("taint {s:?}: the only effect is NoSchedule"));
        }
        validate_label_part("taint key", key)?;
        validate_label_part("taint value", value)?;
        Ok(Taint { key: key.to_owned(), value: value.to_owned(), effect: TaintEffect::NoSchedule })
    }
}

/// One bookable device of a node (a GPU, for instance).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Device {
    /// Unique within the node, e.g. "gpu0".
    pub id: String,
    /// Device class, e.g. "gpu".
    pub class: String,
    /// Healthy by platform-trusted health.
    pub healthy: bool,
}

/// A node as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Node {
    /// Node id (also its identity in certificates).
    pub id: String,
    /// Row generation: bumps on every change; pass it back to compare-and-set.
    pub generation: i64,
    /// Lifecycle state.
    pub state: NodeState,
    /// The state a failed node failed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_from: Option<NodeState>,
    /// Why the node is in its state (set on failure and on manual moves).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_reason: Option<String>,
    /// Who drives the in-progress state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When the in-progress state times out (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>)]
    pub deadline: Option<time::OffsetDateTime>,
    /// Power state.
    pub power: PowerState,
    /// In maintenance: never placed.
    pub maintenance: bool,
    /// Cordoned: never placed.
    pub cordoned: bool,
    /// A tenant has (or had, until teardown completes) root on it.
    pub tenant_root: bool,
    /// Trust.
    pub trust: Trust,
    /// Identity generation: bumps revoke every older certificate of the node.
    pub identity_generation: i64,
    /// The allocation of the tenant-root lease holding the node (until its teardown ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_id: Option<String>,
    /// The reservation holding the node: an active one, or the tenant-root lease until its
    /// teardown ends (read-only, from the node's allocations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_by: Option<String>,
    /// What the lease's teardown must do to the disks (`secure-erase`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_wipe: Option<String>,
    /// MAC of the NIC it network-boots from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_mac: Option<String>,
    /// The pool it belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_id: Option<String>,
    /// Labels, including topology (rack, switch, ...).
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Bookable devices.
    pub devices: Vec<Device>,
    /// The machine's architecture as its commissioning ramdisk reported it (`x86_64`,
    /// `aarch64`); none before its first commissioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,
    /// Enrolment time.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub created_at: time::OffsetDateTime,
    /// Last change.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub updated_at: time::OffsetDateTime,
}

/// Enrolment of one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeCreate {
    /// Node id: 1 to 64 of A-Z a-z 0-9 . _ -
    pub id: String,
    /// Boot NIC MAC (aa:bb:cc:dd:ee:ff).
    #[serde(default)]
    pub boot_mac: Option<String>,
    /// Pool to put it in.
    #[serde(default)]
    pub pool_id: Option<String>,
    /// Labels (topology included).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Taints as `key=value:NoSchedule`.
    #[serde(default)]
    pub taints: Vec<String>,
    /// Bookable devices.
    #[serde(default)]
    pub devices: Vec<Device>,
}

pub fn validate_label_part(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.len() <= 63
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'/'));
    if ok { Ok(()) } else { Err(format!("{what} {s:?} must be 1 to 63 of A-Z a-z 0-9 . _ - /")) }
}

/// What a node list keeps (`GET /v1/nodes`); the store applies it, so a page is a page of
/// matching nodes.
#[derive(Debug, Clone, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct NodeFilter {
    /// Only nodes in this state.
    pub state: Option<NodeState>,
    /// Only nodes of this pool.
    pub pool: Option<String>,
    /// Only nodes whose id starts with this.
    pub prefix: Option<String>,
    /// Only nodes booked by this tenant's reservations (pending or active), or under its
    /// tenant-root lease until the lease's teardown ends.
    pub tenant: Option<String>,
    /// Only nodes with every one of these labels: `key=value`, comma-separated
    /// (`rack=r1,gpu=h200`).
    pub label: Option<String>,
}

impl NodeFilter {
    /// The label selector as (key, value) pairs; a malformed one is INVALID_INPUT `label`.
    pub fn labels(&self) -> Result<Vec<(String, String)>, ApiError> {
        let Some(selector) = &self.label else { return Ok(Vec::new()) };
        selector
            .split(',')
            .map(|term| {
                let (key, value) = term.split_once('=').ok_or_else(|| {
                    ApiError::invalid("label", format!("{term:?} is not key=value (several: rack=r1,gpu=h200)"))
                })?;
                validate_label_part("label key", key).map_err(|e| ApiError::invalid("label", e))?;
                Ok((key.to_owned(), value.to_owned()))
            })
            .collect()
    }
}

/// Validates and normalises a MAC address to lower-case colon form.
pub fn normalize_mac(mac: &str) -> Result<String, String> {
    let parts: Vec<&str> = mac.split([':', '-']).collect();
    let ok = parts.len() == 6 && parts.iter().all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    if ok { Ok(parts.join(":").to_ascii_lowercase()) } else { Err(format!("{mac:?} is not a MAC address")) }
}

impl NodeCreate {
    /// Validates every field; returns the parsed taints and the normalised MAC.
    pub fn validate(&self, prefix: &str) -> Result<(Vec<Taint>, Option<String>), ApiError> {
        let field = |name: &str| format!("{prefix}{name}");
        metal_protocol::identity::validate_name("node id", &self.id)
            .map_err(|e| ApiError::invalid(field("id"), e.to_string()))?;
        let mac = self
            .boot_mac
            .as_deref()
            .map(normalize_mac)
            .transpose()
            .map_err(|e| ApiError::invalid(field("bootMac"), e))?;
        for (k, v) in &self.labels {
            validate_label_part("label key", k).map_err(|e| ApiError::invalid(field("labels"), e))?;
            if v.len() > 63 || v.bytes().any(|b| b.is_ascii_control()) {
                return Err(ApiError::invalid(
                    field("labels"),
                    format!("label {k:?} value must be at most 63 printable characters"),
                ));
            }
        }
        let taints = self
            .taints
            .iter()
            .map(|t| t.parse())
            .collect::<Result<Vec<Taint>, _>>()
            .map_err(|e| ApiError::invalid(field("taints"), e))?;
        let mut ids = std::collections::HashSet::new();
        for d in &self.devices {
            validate_label_part("device id", &d.id).map_err(|e| ApiError::invalid(field("devices"), e))?;
            validate_label_part("device class", &d.class).map_err(|e| ApiError::invalid(field("devices"), e))?;
            if !ids.insert(&d.id) {
                return Err(ApiError::invalid(field("devices"), format!("device id {:?} appears twice", d.id)));
            }
        }
        Ok((taints, mac))
    }
}

/// A lifecycle move, compare-and-set on the current state (and generation when given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeTransition {
    /// The state the caller believes the node is in.
    pub from: NodeState,
    /// The state to move to.
    pub to: NodeState,
    /// The generation the caller last saw (optional, stricter).
    #[serde(default)]
    pub generation: Option<i64>,
    /// Who drives the new state (for in-progress states).
    #[serde(default)]
    pub owner: Option<String>,
    /// Why.
    #[serde(default)]
    pub reason: Option<String>,
}

/// Changes to a node's placement attributes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePatch {
    /// Maintenance on or off.
    #[serde(default)]
    pub maintenance: Option<bool>,
    /// Cordon on or off.
    #[serde(default)]
    pub cordoned: Option<bool>,
    /// Replace the labels.
    #[serde(default)]
    pub labels: Option<BTreeMap<String, String>>,
    /// Replace the taints (`key=value:NoSchedule`).
    #[serde(default)]
    pub taints: Option<Vec<String>>,
    /// Replace the devices.
    #[serde(default)]
    pub devices: Option<Vec<Device>>,
    /// Move to this pool ("" takes it out of any pool).
    #[serde(default)]
    pub pool_id: Option<String>,
    /// The generation the caller last saw (optional compare-and-set).
    #[serde(default)]
    pub generation: Option<i64>,
}

/// What placement needs to know about a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    /// Node id.
    pub id: String,
    /// Lifecycle state.
    pub state: NodeState,
    /// Maintenance.
    pub maintenance: bool,
    /// Cordoned.
    pub cordoned: bool,
    /// Trust.
    pub trust: Trust,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Labels (topology).
    pub labels: BTreeMap<String, String>,
    /// Bookable devices.
    pub devices: Vec<Device>,
    /// Architecture from commissioning (none: commissioned before it was recorded, x86_64).
    pub architecture: Option<String>,
    /// Live bookings as [start, end) in milliseconds.
    pub bookings: Vec<(i64, i64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_matches_the_design() {
        use NodeState::*;
        assert!(New.can_move_to(Commissioning));
        assert!(!New.can_move_to(Ready));
        assert!(Deployed.can_move_to(Releasing));
        assert!(!Deployed.can_move_to(Ready), "a release always goes through the teardown");
        assert!(Releasing.can_move_to(Failed));
        assert!(Retired.can_move_to(New));
        assert!(!Retired.can_move_to(Ready));
        for s in NodeState::ALL {
            assert!(!s.can_move_to(s), "{s} -> {s} is not a move");
            assert_eq!(s.as_str().parse::<NodeState>().unwrap(), s);
        }
    }

    #[test]
    fn taints_parse_and_refuse_nonsense() {
        let t: Taint = "dedicated=acme:NoSchedule".parse().unwrap();
        assert_eq!((t.key.as_str(), t.value.as_str()), ("dedicated", "acme"));
        for bad in ["dedicated=acme", "dedicated:NoSchedule", "a=b:NoExecute", "=b:NoSchedule", "a b=c:NoSchedule"] {
            assert!(bad.parse::<Taint>().is_err(), "{bad}");
        }
    }

    #[test]
    fn macs_are_normalised() {
        assert_eq!(normalize_mac("52-54-00-AB-cd-01").unwrap(), "52:54:00:ab:cd:01");
        assert!(normalize_mac("52:54:00:ab:cd").is_err());
        assert!(normalize_mac("52:54:00:ab:cd:zz").is_err());
    }
}

/// Outcome of an import.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportResult {
    /// Ids enrolled.
    pub created: Vec<String>,
    /// Entries left alone because the node (or its boot MAC) already exists.
    pub skipped: Vec<Skipped>,
}

/// An entry an import left alone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Skipped {
    /// The node id.
    pub id: String,
    /// Why.
    pub reason: String,
}
