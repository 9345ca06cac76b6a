//! `metalctl switch`: the site's switches (register, list, show, remove) and each node's
//! ports on them. An SSH key comes from a file or stdin, never from the command line.

use std::path::PathBuf;

use clap::Subcommand;
use metalctl::client::{Client, ClientError, RequestBody};
use serde_json::{Value, json};

use metalctl::output::{Output, print, read_input};

#[derive(Subcommand, Debug)]
pub enum SwitchCommand {
    /// Register a switch. --address is `local` (ovs-vsctl on the scheduler's host),
    /// `ovsdb:REMOTE` (the same against that OVSDB) or `ssh://USER@HOST[:PORT]` (ovs-vsctl on
    /// the switch over SSH, with --ssh-key-file and --host-key).
    Add {
        id: String,
        /// The driver (ovs: Open vSwitch).
        #[arg(long, default_value = "ovs", value_parser = ["ovs"])]
        driver: String,
        #[arg(long)]
        address: String,
        /// The ovs-vsctl to run, when not the one on the PATH.
        #[arg(long)]
        command: Option<String>,
        /// File holding the SSH private key (- is stdin); sealed at rest, never shown.
        #[arg(long)]
        ssh_key_file: Option<PathBuf>,
        /// The switch's SSH host key (`ssh-ed25519 AAAA...`), the only one accepted.
        #[arg(long)]
        host_key: Option<String>,
        /// The chassis id its LLDPDUs carry (commissioning with boot-lldp-wait matches NICs'
        /// neighbours against it, and against a system name equal to ID).
        #[arg(long)]
        chassis_id: Option<String>,
    },
    /// Every switch.
    List,
    /// One switch.
    Show { id: String },
    /// Remove a switch no node port is on.
    Remove { id: String },
    /// A node's ports: with --port, set them (replacing what was known), else show them
    /// with the network and VLAN the last move read back.
    Ports {
        node: String,
        /// MAC=SWITCH/PORT, once per NIC (e.g. 52:54:00:00:00:01=tor1/swp7).
        #[arg(long = "port", value_name = "MAC=SWITCH/PORT")]
        ports: Vec<String>,
    },
}

const SWITCH_COLUMNS: [(&str, &str); 5] =
    [("ID", "id"), ("DRIVER", "driver"), ("ADDRESS", "address"), ("SSH KEY", "hasSshKey"), ("CREATED", "createdAt")];

const PORT_COLUMNS: [(&str, &str); 7] = [
    ("MAC", "mac"),
    ("SWITCH", "switchId"),
    ("PORT", "port"),
    ("SOURCE", "source"),
    ("NETWORK", "network"),
    ("VLAN", "vlan"),
    ("MOVED", "movedAt"),
];

/// `MAC=SWITCH/PORT` as a port of the API.
fn parse_port(text: &str) -> Result<Value, ClientError> {
    let bad = || ClientError::Config(format!("--port {text:?}: use MAC=SWITCH/PORT"));
    let (mac, rest) = text.split_once('=').ok_or_else(bad)?;
    let (switch, port) = rest.split_once('/').ok_or_else(bad)?;
    Ok(json!({"mac": mac, "switchId": switch, "port": port}))
}

pub fn run(client: &Client, out: Output, command: SwitchCommand) -> Result<(), ClientError> {
    let body = |v: Value| Some(RequestBody::Json(v));
    match command {
        SwitchCommand::Add { id, driver, address, command, ssh_key_file, host_key, chassis_id } => {
            let mut spec = json!({"id": id, "driver": driver, "address": address});
            if let Some(command) = command {
                spec["command"] = json!(command);
            }
            if let Some(file) = ssh_key_file {
                spec["sshKey"] = json!(read_input(&file)?);
            }
            if let Some(host_key) = host_key {
                spec["hostKey"] = json!(host_key);
            }
            if let Some(chassis_id) = chassis_id {
                spec["chassisId"] = json!(chassis_id);
            }
            print(out, &client.request("POST", "/v1/switches", body(spec))?, &SWITCH_COLUMNS);
        }
        SwitchCommand::List => print(out, &client.list("/v1/switches", &[], None)?, &SWITCH_COLUMNS),
        SwitchCommand::Show { id } => {
            print(out, &client.request("GET", &format!("/v1/switches/{id}"), None)?, &SWITCH_COLUMNS)
        }
        SwitchCommand::Remove { id } => {
            client.request("DELETE", &format!("/v1/switches/{id}"), None)?;
        }
        SwitchCommand::Ports { node, ports } if ports.is_empty() => {
            print(out, &client.request("GET", &format!("/v1/nodes/{node}/ports"), None)?, &PORT_COLUMNS);
        }
        SwitchCommand::Ports { node, ports } => {
            let ports = ports.iter().map(|p| parse_port(p)).collect::<Result<Vec<_>, _>>()?;
            let answer = client.request("PUT", &format!("/v1/nodes/{node}/ports"), body(json!({"ports": ports})))?;
            print(out, &answer, &PORT_COLUMNS);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_argument_is_a_mac_a_switch_and_a_port() {
        let port = parse_port("52:54:00:00:00:01=tor1/Ethernet1/7").unwrap();
        assert_eq!(port, json!({"mac": "52:54:00:00:00:01", "switchId": "tor1", "port": "Ethernet1/7"}));
        assert!(parse_port("52:54:00:00:00:01").is_err());
        assert!(parse_port("52:54:00:00:00:01=tor1").is_err());
    }
}
