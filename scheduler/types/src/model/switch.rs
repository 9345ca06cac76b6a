//! Switches and the node ports on them: the API types of tenant isolation on the switch.
//! A switch is a resource of the site (its driver, how to reach it, sealed credentials that
//! are never returned); a node's ports are `(switch, port)` per NIC, set by the operator (or
//! learned by LLDP); a pool's `network` policy names the VLANs its nodes move between.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;
use crate::model::node::normalize_mac;

/// A switch's driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SwitchDriver {
    /// Open vSwitch, through `ovs-vsctl` (here, or over SSH).
    Ovs,
}

impl SwitchDriver {
    /// The stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            SwitchDriver::Ovs => "ovs",
        }
    }
}

impl std::str::FromStr for SwitchDriver {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "ovs" => Ok(SwitchDriver::Ovs),
            other => Err(format!("unknown switch driver {other:?}")),
        }
    }
}

/// Registers a switch. `sshKey` is sealed at rest (like BMC passwords) and never returned.
#[derive(Clone, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwitchCreate {
    /// Switch id.
    pub id: String,
    /// Driver.
    pub driver: SwitchDriver,
    /// How to reach it: `local` (`ovs-vsctl` on the scheduler's host), `ovsdb:REMOTE` (the
    /// same against that OVSDB, e.g. `ovsdb:unix:/run/openvswitch/db.sock`) or
    /// `ssh://USER@HOST[:PORT]` (`ovs-vsctl` on the switch, over SSH).
    pub address: String,
    /// The `ovs-vsctl` to run, when not the one on the PATH.
    #[serde(default)]
    pub command: Option<String>,
    /// For `ssh://`: the private key (OpenSSH format).
    #[serde(default)]
    pub ssh_key: Option<String>,
    /// For `ssh://`: the switch's public host key (`ssh-ed25519 AAAA...`), the only one accepted.
    #[serde(default)]
    pub host_key: Option<String>,
    /// The chassis id its LLDPDUs carry (a MAC, lower case), which commissioning matches NICs'
    /// neighbours against (as it matches a system name equal to the switch's id).
    #[serde(default)]
    pub chassis_id: Option<String>,
}

impl std::fmt::Debug for SwitchCreate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwitchCreate")
            .field("id", &self.id)
            .field("driver", &self.driver)
            .field("address", &self.address)
            .field("command", &self.command)
            .field("ssh_key", &self.ssh_key.as_ref().map(|_| "***"))
            .field("host_key", &self.host_key)
            .field("chassis_id", &self.chassis_id)
            .finish()
    }
}

/// Where a switch is, parsed from its address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SwitchAddress {
    /// This host, the default OVSDB or the one named.
    Local(Option<String>),
    /// Over SSH.
    Ssh {
        /// `USER@HOST`.
        destination: String,
        /// The port.
        port: u16,
    },
}

impl SwitchAddress {
    /// Parses `local`, `ovsdb:REMOTE` or `ssh://USER@HOST[:PORT]`.
    pub fn parse(address: &str) -> Result<SwitchAddress, ApiError> {
        let invalid = |why: &str| ApiError::invalid("address", format!("{address:?}: {why}"));
        let plain = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-:/[]".contains(&b));
        if address == "local" {
            return Ok(SwitchAddress::Local(None));
        }
        if let Some(remote) = address.strip_prefix("ovsdb:") {
            return if plain(remote) {
                Ok(SwitchAddress::Local(Some(remote.to_owned())))
            } else {
                Err(invalid("not an OVSDB remote"))
            };
        }
        let Some(rest) = address.strip_prefix("ssh://") else {
            return Err(invalid("use local, ovsdb:REMOTE or ssh://USER@HOST[:PORT]"));
        };
        let (user, host) = rest.split_once('@').ok_or_else(|| invalid("ssh:// needs USER@HOST"))?;
        let (host, port) = match host.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || host.starts_with('[') => {
                (host, port.parse::<u16>().map_err(|_| invalid("the port is not a number"))?)
            }
            _ => (host, 22),
        };
        let name = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
        let host_ok = name(host) || (host.starts_with('[') && host.ends_with(']') && plain(host));
        if !name(user) || !host_ok {
            return Err(invalid("USER and HOST are letters, digits and ._-"));
        }
        Ok(SwitchAddress::Ssh { destination: format!("{user}@{host}"), port })
    }
}

impl SwitchCreate {
    /// Checks the request.
    pub fn validate(&self) -> Result<SwitchAddress, ApiError> {
        crate::model::image::check_name("id", &self.id)?;
        let address = SwitchAddress::parse(&self.address)?;
        if let Some(chassis) = &self.chassis_id
            && (chassis.is_empty() || chassis.len() > 64 || chassis.chars().any(char::is_control))
        {
            return Err(ApiError::invalid("chassisId", "1 to 64 printable characters (a MAC, as LLDP carries it)"));
        }
        if let Some(command) = &self.command
            && (command.is_empty() || command.len() > 256 || !command.bytes().all(|b| b.is_ascii_graphic()))
        {
            return Err(ApiError::invalid("command", "a program path without spaces"));
        }
        match (&address, &self.ssh_key, &self.host_key) {
            (SwitchAddress::Ssh { .. }, Some(key), Some(host_key)) => {
                if !key.contains("PRIVATE KEY-----") {
                    return Err(ApiError::invalid("sshKey", "not an OpenSSH private key"));
                }
                let mut parts = host_key.split_whitespace();
                if !matches!((parts.next(), parts.next()), (Some(kind), Some(_)) if kind.starts_with("ssh-") || kind.starts_with("ecdsa-"))
                {
                    return Err(ApiError::invalid(
                        "hostKey",
                        "a public host key, as in known_hosts (ssh-ed25519 AAAA...)",
                    ));
                }
            }
            (SwitchAddress::Ssh { .. }, _, _) => {
                return Err(ApiError::invalid("sshKey", "an ssh:// switch needs sshKey and hostKey"));
            }
            (SwitchAddress::Local(_), None, None) => {}
            (SwitchAddress::Local(_), _, _) => {
                return Err(ApiError::invalid("sshKey", "only an ssh:// switch takes sshKey and hostKey"));
            }
        }
        Ok(address)
    }
}

/// A switch as the API shows it: never its key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SwitchInfo {
    /// Switch id.
    pub id: String,
    /// Driver.
    pub driver: SwitchDriver,
    /// How it is reached.
    pub address: String,
    /// The `ovs-vsctl` run, when not the default.
    pub command: Option<String>,
    /// Whether an SSH key is stored (sealed).
    pub has_ssh_key: bool,
    /// The pinned SSH host key.
    pub host_key: Option<String>,
    /// The chassis id its LLDPDUs carry.
    pub chassis_id: Option<String>,
    /// When it was registered.
    #[serde(with = "time::serde::rfc3339")]
    pub created_at: time::OffsetDateTime,
}

/// Where a node's port came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PortSource {
    /// Set by an operator.
    Operator,
    /// Learned from the LLDPDUs the switch sent during commissioning.
    Lldp,
}

/// One NIC's place on a switch, as set by an operator.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePortSpec {
    /// The NIC's MAC.
    pub mac: String,
    /// The switch.
    pub switch_id: String,
    /// Its port on the switch.
    pub port: String,
}

/// Replaces a node's ports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodePortsPut {
    /// Every port of the node (an empty list forgets them).
    pub ports: Vec<NodePortSpec>,
}

impl NodePortsPut {
    /// Checks the request (MACs normalised).
    pub fn validate(mut self) -> Result<NodePortsPut, ApiError> {
        for (i, port) in self.ports.iter_mut().enumerate() {
            port.mac = normalize_mac(&port.mac).map_err(|m| ApiError::invalid(format!("ports[{i}].mac"), m))?;
            crate::model::image::check_name(&format!("ports[{i}].switchId"), &port.switch_id)?;
            metal_switch::check_port(&port.port)
                .map_err(|e| ApiError::invalid(format!("ports[{i}].port"), e.to_string()))?;
        }
        Ok(self)
    }
}

/// A node's port, with what the last move read back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodePort {
    /// The NIC's MAC.
    pub mac: String,
    /// The switch.
    pub switch_id: String,
    /// Its port on the switch.
    pub port: String,
    /// Where this came from.
    pub source: PortSource,
    /// The network it was last moved to (`provisioning`, `cleaning`, `tenant`).
    pub network: Option<String>,
    /// The access VLAN the switch read back after that move.
    pub vlan: Option<u16>,
    /// When it moved.
    #[serde(default, with = "time::serde::rfc3339::option")]
    pub moved_at: Option<time::OffsetDateTime>,
}
