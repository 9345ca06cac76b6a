//! The site's top-of-rack switch, simulated: an Open vSwitch-like model of ports (one per
//! machine, `n001-p0`) on access VLANs, and the wire it makes. The scheduler drives it with
//! its real OVS driver: the switch is registered with `ovs-vsctl` set to this program under
//! that name ([`vsctl_main`]), which answers `get port P tag vlan_mode` and `set port P
//! vlan_mode=access tag=V` as ovs-vsctl does, from the simulator's control endpoint. A
//! machine whose port is on neither the provisioning nor the cleaning VLAN gets no answer to
//! its network boot (it goes on to its disk), so a teardown that boots a ramdisk before it
//! moved the port to the cleaning VLAN stalls as it would on a real network. The fault
//! `switch-refuses` makes the switch refuse to move that machine's port.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

/// The switch's id in the scheduler.
pub const SWITCH: &str = "tor1";
/// The provisioning VLAN: commissioning, deploys, ready machines.
pub const PROVISIONING_VLAN: u16 = 10;
/// The cleaning VLAN: the teardown's ramdisks.
pub const CLEANING_VLAN: u16 = 20;
/// The tenant VLANs, first and last: one per live lease (3,995 leases at once at most).
pub const TENANT_VLANS: (u16, u16) = (100, 4094);

/// The name `ovs-vsctl` this program answers to.
pub const VSCTL: &str = "ovs-vsctl";

/// The switch port of a machine's one NIC.
pub fn port_of(node: &str) -> String {
    format!("{node}-p0")
}

/// The machine on a port.
pub fn node_of(port: &str) -> Option<&str> {
    port.strip_suffix("-p0")
}

/// The pool's `policy.network`: the VLANs above.
pub fn network_policy() -> Value {
    json!({"provisioningVlan": PROVISIONING_VLAN, "cleaningVlan": CLEANING_VLAN,
           "tenantVlans": {"first": TENANT_VLANS.0, "last": TENANT_VLANS.1}})
}

/// A port as the switch has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Port {
    /// Its access VLAN.
    pub tag: u16,
}

/// The switch: its ports and their VLANs.
#[derive(Debug, Default)]
pub struct SimSwitch {
    ports: Mutex<BTreeMap<String, Port>>,
}

impl SimSwitch {
    /// A switch with `ports`, each on the provisioning VLAN.
    pub fn new(ports: impl IntoIterator<Item = String>) -> SimSwitch {
        let ports = ports.into_iter().map(|p| (p, Port { tag: PROVISIONING_VLAN })).collect();
        SimSwitch { ports: Mutex::new(ports) }
    }

    fn locked(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Port>> {
        self.ports.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The port, when the switch has it.
    pub fn port(&self, name: &str) -> Option<Port> {
        self.locked().get(name).copied()
    }

    /// Every port's VLAN.
    pub fn ports(&self) -> BTreeMap<String, Port> {
        self.locked().clone()
    }

    /// Puts the port on access VLAN `tag`; false when the switch has no such port.
    pub fn set(&self, name: &str, tag: u16) -> bool {
        match self.locked().get_mut(name) {
            Some(port) => {
                port.tag = tag;
                true
            }
            None => false,
        }
    }

    /// Whether a machine on `port` reaches the boot service (DHCP, iPXE's script): only from
    /// the provisioning and the cleaning VLAN. The error says what the machine sees.
    pub fn reaches_boot_service(&self, port: &str) -> Result<(), String> {
        match self.port(port) {
            Some(Port { tag: PROVISIONING_VLAN | CLEANING_VLAN }) => Ok(()),
            Some(Port { tag }) => Err(format!("no DHCP offer on {port} (VLAN {tag}, not a provisioning network)")),
            None => Err(format!("no link: the switch has no port {port}")),
        }
    }
}

/// `ovs-vsctl` as the scheduler's OVS driver runs it, against the simulated switch: the
/// arguments after the program name. Its exit status, output and errors follow ovs-vsctl's,
/// so the driver reads them as it reads a real switch's.
pub fn vsctl_main(args: &[String]) -> ExitCode {
    match vsctl(args) {
        Ok(out) => {
            print!("{out}");
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("{VSCTL}: {message}");
            ExitCode::FAILURE
        }
    }
}

/// What a call prints, or its error (without the program's name).
fn vsctl(args: &[String]) -> Result<String, String> {
    let mut db = None;
    let mut timeout = Duration::from_secs(5);
    let mut words = Vec::new();
    for arg in args {
        if let Some(remote) = arg.strip_prefix("--db=") {
            db = Some(remote);
        } else if let Some(seconds) = arg.strip_prefix("--timeout=") {
            timeout = Duration::from_secs(seconds.parse().map_err(|_| format!("--timeout={seconds}: not seconds"))?);
        } else {
            words.push(arg.as_str());
        }
    }
    let remote = db.ok_or("the simulated switch is reached with --db=tcp:HOST:PORT (its simulator's endpoint)")?;
    let address =
        remote.strip_prefix("tcp:").ok_or_else(|| format!("{remote}: the simulated switch is at tcp:HOST:PORT"))?;
    match words.as_slice() {
        ["get", "port", port, "tag", "vlan_mode"] => {
            let answer = request(address, remote, timeout, "GET", &format!("/sim/switch/ports/{port}"), None)?;
            let port: Port = match answer {
                (200, body) => serde_json::from_str(&body).map_err(|e| format!("the switch's answer: {e}"))?,
                (404, _) => return Err(format!("no row \"{port}\" in table Port")),
                (status, body) => return Err(format!("transaction error: {status} {body}")),
            };
            Ok(format!("{}\naccess\n", port.tag))
        }
        ["set", "port", port, "vlan_mode=access", tag] => {
            let tag = tag.strip_prefix("tag=").ok_or_else(|| format!("{tag}: expected tag=VLAN"))?;
            let body = json!({"tag": tag.parse::<u16>().map_err(|_| format!("tag={tag}: not a VLAN"))?}).to_string();
            match request(address, remote, timeout, "PUT", &format!("/sim/switch/ports/{port}"), Some(&body))? {
                (200, _) => Ok(String::new()),
                (404, _) => Err(format!("no row \"{port}\" in table Port")),
                (_, body) => Err(format!("transaction error: {body}")),
            }
        }
        _ => Err(format!(
            "{words:?}: the simulated switch answers only `get port P tag vlan_mode` and `set port P \
             vlan_mode=access tag=V`"
        )),
    }
}

/// One HTTP/1.1 request to the simulator's endpoint: the status and the body.
fn request(
    address: &str,
    remote: &str,
    timeout: Duration,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), String> {
    let failed = |e: std::io::Error| format!("{remote}: database connection failed ({e})");
    let target = address.parse::<std::net::SocketAddr>().map_err(|e| format!("{remote}: {e}"))?;
    let mut stream = TcpStream::connect_timeout(&target, timeout).map_err(failed)?;
    stream.set_read_timeout(Some(timeout)).map_err(failed)?;
    let body = body.unwrap_or("");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(head.as_bytes()).map_err(failed)?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).map_err(|e| format!("{remote}: timed out or cut ({e})"))?;
    let (head, body) = answer.split_once("\r\n\r\n").ok_or_else(|| format!("{remote}: an answer without a head"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{remote}: an answer without a status"))?;
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_provisioning_and_cleaning_vlans_reach_the_boot_service() {
        let switch = SimSwitch::new([port_of("n001")]);
        assert_eq!(switch.port("n001-p0"), Some(Port { tag: PROVISIONING_VLAN }));
        assert!(switch.reaches_boot_service("n001-p0").is_ok());
        assert!(switch.set("n001-p0", 117));
        let refused = switch.reaches_boot_service("n001-p0").unwrap_err();
        assert!(refused.contains("VLAN 117"), "{refused}");
        assert!(switch.set("n001-p0", CLEANING_VLAN) && switch.reaches_boot_service("n001-p0").is_ok());
        assert!(!switch.set("n002-p0", 10) && switch.reaches_boot_service("n002-p0").is_err());
        assert_eq!(node_of(&port_of("n042")), Some("n042"));
    }

    #[test]
    fn vsctl_refuses_what_it_cannot_do_before_it_calls_anything() {
        let args = |a: &[&str]| a.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(vsctl(&args(&["get", "port", "p", "tag", "vlan_mode"])).unwrap_err().contains("--db=tcp"));
        let unknown = vsctl(&args(&["--db=tcp:127.0.0.1:1", "del-port", "p"])).unwrap_err();
        assert!(unknown.contains("answers only"), "{unknown}");
        // Nothing listens on port 1: the driver reads this as an unreachable switch.
        let down = vsctl(&args(&["--db=tcp:127.0.0.1:1", "get", "port", "p", "tag", "vlan_mode"])).unwrap_err();
        assert!(down.contains("database connection failed"), "{down}");
    }
}
