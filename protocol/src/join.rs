//! What a deployed OS and its controller say to each other when the OS joins as a host.
//!
//! The deploy's seed leaves the join's inputs in [`CONFIG_DIR`] (the controller URL, the site
//! CA with its pinned fingerprint, the SHA-256 of the join script, the single-use enrolment
//! token) and a fixed bootstrap ([`BOOTSTRAP`]) that fetches the script over the pinned CA,
//! checks its digest and runs it. The script installs `metal-agent`, which trades the token
//! and a public key whose private half never leaves the host for a `node` (or, under
//! tenant-controlled trust, `node-tenant`) certificate ([`HostJoinRequest`] ->
//! [`HostJoinResponse`]), sets up the networks and storage pools the token names
//! ([`HostSetup`]) all or nothing, and says how that went in a signed [`HostSetupReport`].
//! Certificates renew over mutual TLS ([`HostRenewRequest`]). A join that stops before the
//! agent runs says why with [`JoinFailure`].

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::Role;

/// Where the agent joins (no client certificate; the token authenticates).
pub const HOST_JOIN_PATH: &str = "/v1/hosts/join";
/// Where a joined host renews its certificate (mutual TLS).
pub const HOST_RENEW_PATH: &str = "/v1/hosts/renew";
/// Where the bootstrap says why a join stopped before the agent ran (the token authenticates).
pub const HOST_JOIN_FAILED_PATH: &str = "/v1/hosts/join-failed";
/// The join script (public: it carries no secret; its SHA-256 is in the seed).
pub const HOST_INSTALL_PATH: &str = "/v1/hosts/install.sh";
/// The `metal-agent` binary (public; its SHA-256 is in the join script).
pub const HOST_AGENT_PATH: &str = "/v1/hosts/agent";

/// The directory the seed writes the join's inputs to, and the agent keeps its key in.
pub const CONFIG_DIR: &str = "/etc/metal";
/// `CONFIG_DIR/…`: the controller's base URL (`https://host:port`), one line.
pub const CONTROLLER_URL_FILE: &str = "controller-url";
/// `CONFIG_DIR/…`: the site CA certificate (PEM).
pub const CA_FILE: &str = "ca.pem";
/// `CONFIG_DIR/…`: the SHA-256 of the site CA certificate's DER, 64 hex digits: the pin.
pub const CA_SHA256_FILE: &str = "ca.sha256";
/// `CONFIG_DIR/…`: the SHA-256 of the join script, 64 hex digits.
pub const INSTALL_SHA256_FILE: &str = "install.sha256";
/// `CONFIG_DIR/…`: the single-use enrolment token (mode 0600; removed after the join).
pub const TOKEN_FILE: &str = "enrolment-token";
/// `CONFIG_DIR/…`: the fixed first-boot bootstrap ([`BOOTSTRAP`]).
pub const BOOTSTRAP_FILE: &str = "bootstrap";

/// The first-boot bootstrap the seed writes and runs: pins the CA, fetches the join script
/// with curl trusting only that CA, checks the script's SHA-256 against the seed's, and only
/// then runs it. A stop is reported to the controller with the token (from a file, on
/// stdin: never on a command line) and printed on the console. Constant text: every value
/// it uses is read from a file the seed wrote.
pub const BOOTSTRAP: &str = r#"#!/bin/sh
# metal's first-boot join, written by the deploy's cloud-init seed. Checks the site CA in
# /etc/metal against its pinned fingerprint, fetches the join script over that CA alone,
# checks the script's SHA-256 against the seed's, and only then runs it.
set -u
d=${METAL_CONFIG_DIR:-/etc/metal}
export METAL_CONFIG_DIR="$d"
url=$(cat "$d/controller-url")
stop() {
  echo "metal-join: $2" >&2
  # Tell the controller (best effort), so the join log says why.
  printf '{"token":"%s","stage":"%s","reason":"%s"}' "$(cat "$d/enrolment-token")" "$1" "$2" \
    | curl -fsS --max-time 20 --cacert "$d/ca.pem" -H 'Content-Type: application/json' \
        --data-binary @- "$url/v1/hosts/join-failed" >/dev/null 2>&1
  exit 1
}
pin=$(openssl x509 -in "$d/ca.pem" -outform DER | sha256sum | cut -d' ' -f1)
[ "$pin" = "$(cat "$d/ca.sha256")" ] || { echo "metal-join: the site CA in $d/ca.pem is not the pinned one; not joining" >&2; exit 1; }
script=/run/metal-join.sh
curl -fsS --retry 10 --retry-delay 3 --retry-all-errors --max-time 60 --cacert "$d/ca.pem" \
  -o "$script" "$url/v1/hosts/install.sh" || stop fetch "cannot fetch the join script from $url"
echo "$(cat "$d/install.sha256")  $script" | sha256sum -c --status \
  || stop digest "the join script's SHA-256 is not the one in the seed; not running it"
echo "metal-join: the join script's SHA-256 matches the seed; running it"
sh "$script" || stop run "the join script stopped (exit $?); see the console"
"#;

/// A host asks for its certificate.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostJoinRequest {
    /// The single-use enrolment token from the seed.
    pub token: String,
    /// The host's Ed25519 public key, base64 of the 32 raw bytes.
    pub public_key: String,
    /// The host's name as it calls itself.
    pub hostname: String,
}

impl std::fmt::Debug for HostJoinRequest {
    /// Never shows the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostJoinRequest")
            .field("token", &"<redacted>")
            .field("public_key", &self.public_key)
            .field("hostname", &self.hostname)
            .finish()
    }
}

impl std::fmt::Debug for JoinFailure {
    /// Never shows the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinFailure")
            .field("token", &"<redacted>")
            .field("stage", &self.stage)
            .field("reason", &self.reason)
            .finish()
    }
}

impl std::fmt::Display for HostJoinRequest {
    /// Never shows the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "host join request from {} for key {}", self.hostname, self.public_key)
    }
}

/// The bootstrap's word that the join stopped before the agent ran.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinFailure {
    /// The enrolment token (used up by this report).
    pub token: String,
    /// Where it stopped (`fetch`, `digest`, `agent`...).
    pub stage: String,
    /// Why, in words.
    pub reason: String,
}

/// A renewal: a certificate for the (possibly new) key, asked over mutual TLS with the
/// current one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostRenewRequest {
    /// The Ed25519 public key to certify, base64 of the 32 raw bytes.
    pub public_key: String,
}

/// A host certificate as the controller issues it (at the join and at each renewal).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostCertificate {
    /// The node (and host) id.
    pub node_id: String,
    /// `node`, or `node-tenant` when the node's trust is tenant-controlled.
    pub role: Role,
    /// The node's identity generation the certificate is of.
    pub generation: u64,
    /// The certificate, then the site CA (PEM).
    pub certificate_chain: String,
    /// When the certificate expires.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// The controller's answer to a join.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostJoinResponse {
    /// The certificate.
    pub certificate: HostCertificate,
    /// The node's site.
    pub site: String,
    /// The node's rack, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// The node's labels.
    #[serde(default)]
    pub tags: std::collections::BTreeMap<String, String>,
    /// What to set up on the host (from the enrolment token).
    pub setup: HostSetup,
}

/// What an enrolment token asks the host to set up after it joins.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostSetup {
    /// Networks, as systemd-networkd files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<HostNetwork>,
    /// Storage pools.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub storage_pools: Vec<StoragePool>,
}

/// What kind of network.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NetworkKind {
    /// A Linux bridge, with `parent` (when named) as its port.
    Bridge,
    /// An 802.1Q VLAN on `parent`.
    Vlan,
}

/// One network to set up.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostNetwork {
    /// The interface to create (`br0`, `vlan100`...).
    pub name: String,
    /// Bridge or VLAN.
    pub kind: NetworkKind,
    /// The interface it sits on, by name or MAC address; `boot` means the NIC the host
    /// booted from (the one with the default route). A VLAN needs one; a bridge without one
    /// has no port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    /// The VLAN id (1 to 4094), for a VLAN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vlan_id: Option<u16>,
    /// DHCPv4 on the new interface.
    #[serde(default)]
    pub dhcp4: bool,
    /// Static addresses in CIDR form.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
}

/// What kind of storage pool.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PoolKind {
    /// A directory.
    Directory,
    /// An LVM volume group over whole devices.
    Lvm,
}

/// One storage pool to set up.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StoragePool {
    /// The pool's name (the volume group's, for LVM).
    pub name: String,
    /// Directory or LVM.
    pub kind: PoolKind,
    /// The directory, absolute (a directory pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Whole block devices (`/dev/...`) for the volume group (an LVM pool).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devices: Vec<String>,
}

/// How one item of a host's setup went.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetupOutcome {
    /// What: `network/NAME` or `pool/NAME`.
    pub item: String,
    /// Applied, or refused (and then nothing of the setup was applied).
    pub applied: bool,
    /// What was done, or why it was refused.
    pub detail: String,
}

/// How a host's setup went, signed with its new certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostSetupReport {
    /// The node (from the certificate).
    pub node_id: String,
    /// One outcome per item, in the setup's order; empty for an empty setup.
    pub outcomes: Vec<SetupOutcome>,
    /// When the setup ended.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
}

impl HostSetupReport {
    /// DSSE payload type of a signed setup report.
    pub const PAYLOAD_TYPE: &'static str = "application/vnd.metal.host-setup+json";

    /// Whether every item was applied.
    pub fn applied(&self) -> bool {
        self.outcomes.iter().all(|o| o.applied)
    }
}

/// A setup value that may not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SetupError {
    /// The offending field (`networks[0].name`...).
    pub field: String,
    /// Why.
    pub message: String,
}

fn bad(field: String, message: impl Into<String>) -> SetupError {
    SetupError { field, message: message.into() }
}

/// An interface or pool name: 1 to 15 of `[a-z0-9_-]`, starting with a letter.
fn check_name(field: String, name: &str) -> Result<(), SetupError> {
    let ok = (1..=15).contains(&name.len())
        && name.as_bytes()[0].is_ascii_lowercase()
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_'));
    if ok { Ok(()) } else { Err(bad(field, format!("{name:?} is not 1 to 15 of [a-z0-9_-] starting with a letter"))) }
}

/// A parent: `boot`, an interface name, or a MAC address.
fn check_parent(field: String, parent: &str) -> Result<(), SetupError> {
    let is_mac = parent.len() == 17
        && parent.split(':').count() == 6
        && parent.split(':').all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()));
    let is_name = (1..=15).contains(&parent.len())
        && parent.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if is_mac || is_name { Ok(()) } else { Err(bad(field, format!("{parent:?} is not an interface name or MAC"))) }
}

fn check_cidr(field: String, text: &str) -> Result<(), SetupError> {
    let parsed = text.split_once('/').and_then(|(ip, prefix)| {
        let ip: std::net::IpAddr = ip.parse().ok()?;
        let prefix: u8 = prefix.parse().ok()?;
        (prefix <= if ip.is_ipv4() { 32 } else { 128 }).then_some(())
    });
    parsed.ok_or_else(|| bad(field, format!("{text:?} is not address/prefix")))
}

/// A path with nothing a shell or a unit file could read twice: absolute, no `..`, only
/// `[A-Za-z0-9._/-]`.
fn check_path(field: String, path: &str, prefix: &str) -> Result<(), SetupError> {
    let ok = path.starts_with(prefix)
        && path.len() <= 255
        && path.len() > prefix.len()
        && path.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'/' | b'-'))
        && !path.split('/').any(|part| part == ".." || part == ".");
    if ok { Ok(()) } else { Err(bad(field, format!("{path:?} is not a plain absolute path under {prefix}"))) }
}

/// Directories a pool may not be (or be under): the system's own.
const SYSTEM_DIRS: [&str; 9] = ["/proc", "/sys", "/dev", "/run", "/boot", "/etc", "/usr", "/bin", "/sbin"];

impl HostSetup {
    /// Checks every value, and that no two items share a name.
    pub fn validate(&self) -> Result<(), SetupError> {
        let mut names = std::collections::BTreeSet::new();
        for (i, net) in self.networks.iter().enumerate() {
            let f = |name: &str| format!("networks[{i}].{name}");
            check_name(f("name"), &net.name)?;
            if !names.insert(format!("network/{}", net.name)) {
                return Err(bad(f("name"), format!("network {} is named twice", net.name)));
            }
            if let Some(parent) = &net.parent {
                check_parent(f("parent"), parent)?;
            }
            match (net.kind, net.vlan_id, &net.parent) {
                (NetworkKind::Vlan, Some(id), Some(_)) if (1..=4094).contains(&id) => {}
                (NetworkKind::Vlan, Some(id), Some(_)) => {
                    return Err(bad(f("vlanId"), format!("{id} is not a VLAN id (1 to 4094)")));
                }
                (NetworkKind::Vlan, None, _) => return Err(bad(f("vlanId"), "a VLAN needs its id")),
                (NetworkKind::Vlan, _, None) => return Err(bad(f("parent"), "a VLAN needs its parent interface")),
                (NetworkKind::Bridge, Some(_), _) => return Err(bad(f("vlanId"), "a bridge has no VLAN id")),
                (NetworkKind::Bridge, None, _) => {}
            }
            for address in &net.addresses {
                check_cidr(f("addresses"), address)?;
            }
        }
        for (i, pool) in self.storage_pools.iter().enumerate() {
            let f = |name: &str| format!("storagePools[{i}].{name}");
            check_name(f("name"), &pool.name)?;
            if !names.insert(format!("pool/{}", pool.name)) {
                return Err(bad(f("name"), format!("pool {} is named twice", pool.name)));
            }
            match pool.kind {
                PoolKind::Directory => {
                    let path = pool.path.as_deref().ok_or_else(|| bad(f("path"), "a directory pool names its path"))?;
                    check_path(f("path"), path, "/")?;
                    if SYSTEM_DIRS.iter().any(|dir| path == *dir || path.starts_with(&format!("{dir}/"))) {
                        return Err(bad(f("path"), format!("{path} is a system directory")));
                    }
                    if !pool.devices.is_empty() {
                        return Err(bad(f("devices"), "a directory pool has no devices"));
                    }
                }
                PoolKind::Lvm => {
                    if pool.devices.is_empty() {
                        return Err(bad(f("devices"), "an LVM pool names at least one device"));
                    }
                    for device in &pool.devices {
                        check_path(f("devices"), device, "/dev/")?;
                    }
                    if pool.path.is_some() {
                        return Err(bad(f("path"), "an LVM pool has no path"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Every item's name (`network/NAME`, `pool/NAME`), in order.
    pub fn items(&self) -> Vec<String> {
        let networks = self.networks.iter().map(|n| format!("network/{}", n.name));
        networks.chain(self.storage_pools.iter().map(|p| format!("pool/{}", p.name))).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> HostSetup {
        HostSetup {
            networks: vec![
                HostNetwork {
                    name: "br0".into(),
                    kind: NetworkKind::Bridge,
                    parent: None,
                    vlan_id: None,
                    dhcp4: false,
                    addresses: vec!["192.168.77.1/24".into()],
                },
                HostNetwork {
                    name: "vlan100".into(),
                    kind: NetworkKind::Vlan,
                    parent: Some("boot".into()),
                    vlan_id: Some(100),
                    dhcp4: false,
                    addresses: vec![],
                },
            ],
            storage_pools: vec![StoragePool {
                name: "scratch".into(),
                kind: PoolKind::Directory,
                path: Some("/srv/metal/scratch".into()),
                devices: vec![],
            }],
        }
    }

    #[test]
    fn a_valid_setup_passes_and_names_its_items() {
        setup().validate().unwrap();
        assert_eq!(setup().items(), ["network/br0", "network/vlan100", "pool/scratch"]);
    }

    #[test]
    fn each_bad_value_names_its_field() {
        type Edit = Box<dyn Fn(&mut HostSetup)>;
        let cases: Vec<(Edit, &str)> = vec![
            (Box::new(|s| s.networks[0].name = "Br0".into()), "networks[0].name"),
            (Box::new(|s| s.networks[0].name = "br0; rm".into()), "networks[0].name"),
            (Box::new(|s| s.networks[1].name = "br0".into()), "networks[1].name"),
            (Box::new(|s| s.networks[1].vlan_id = Some(4095)), "networks[1].vlanId"),
            (Box::new(|s| s.networks[1].vlan_id = None), "networks[1].vlanId"),
            (Box::new(|s| s.networks[1].parent = None), "networks[1].parent"),
            (Box::new(|s| s.networks[1].parent = Some("eth0\nX".into())), "networks[1].parent"),
            (Box::new(|s| s.networks[0].vlan_id = Some(5)), "networks[0].vlanId"),
            (Box::new(|s| s.networks[0].addresses = vec!["10.0.0.1".into()]), "networks[0].addresses"),
            (Box::new(|s| s.storage_pools[0].path = Some("/etc/metal".into())), "storagePools[0].path"),
            (Box::new(|s| s.storage_pools[0].path = Some("/srv/../etc".into())), "storagePools[0].path"),
            (Box::new(|s| s.storage_pools[0].path = Some("srv".into())), "storagePools[0].path"),
            (Box::new(|s| s.storage_pools[0].path = None), "storagePools[0].path"),
            (Box::new(|s| s.storage_pools[0].kind = PoolKind::Lvm), "storagePools[0].devices"),
        ];
        for (edit, field) in cases {
            let mut s = setup();
            edit(&mut s);
            assert_eq!(s.validate().unwrap_err().field, field, "{s:?}");
        }
    }

    #[test]
    fn the_join_request_never_shows_its_token() {
        let request = HostJoinRequest { token: "tok_secret".into(), public_key: "AAAA".into(), hostname: "n1".into() };
        assert!(!request.to_string().contains("tok_secret") && !format!("{request:?}").contains("tok_secret"));
        let failure = JoinFailure { token: "tok_secret".into(), stage: "digest".into(), reason: "x".into() };
        assert!(!format!("{failure:?}").contains("tok_secret"));
    }
}
