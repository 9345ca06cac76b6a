//! Open vSwitch through `ovs-vsctl`, the way networking-generic-switch's OVS device drives
//! it: `set port P vlan_mode=access tag=V`, read back with `get port P tag vlan_mode`.
//! It runs here (`ovs-vsctl`, optionally against a given database socket) or on the switch
//! over SSH (OpenSSH's `ssh`, with the switch's key in a private file made for the one call
//! and its host key pinned). The key is never on a command line or in a log.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;
use zeroize::Zeroizing;

use crate::{PortState, Switch, SwitchError, SwitchResult, Vlan, check_port, check_vlan};

/// How long `ovs-vsctl` waits for the database and for ovs-vswitchd to apply a change.
const OVS_TIMEOUT: Duration = Duration::from_secs(5);

/// Where `ovs-vsctl` runs.
pub enum Transport {
    /// On this host; `db` is its `--db` (`unix:/run/openvswitch/db.sock` when absent).
    Local {
        /// The OVSDB remote, when not the default.
        db: Option<String>,
    },
    /// On the switch, over SSH.
    Ssh {
        /// `user@host`.
        destination: String,
        /// The SSH port.
        port: u16,
        /// The private key (OpenSSH format).
        key: Zeroizing<String>,
        /// The switch's public host key (`ssh-ed25519 AAAA...`): the only one accepted.
        host_key: String,
    },
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Transport::Local { db } => f.debug_struct("Local").field("db", db).finish(),
            Transport::Ssh { destination, port, .. } => {
                f.debug_struct("Ssh").field("destination", destination).field("port", port).finish_non_exhaustive()
            }
        }
    }
}

/// An Open vSwitch.
#[derive(Debug)]
pub struct OvsSwitch {
    name: String,
    transport: Transport,
    program: PathBuf,
}

impl OvsSwitch {
    /// The switch `name` (for messages) reached through `transport`, with `ovs-vsctl` from
    /// the PATH (here, or on the switch).
    pub fn new(name: impl Into<String>, transport: Transport) -> Self {
        Self { name: name.into(), transport, program: PathBuf::from("ovs-vsctl") }
    }

    /// The same, with another `ovs-vsctl` (a wrapper, a build of its own).
    pub fn with_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.program = program.into();
        self
    }

    fn unreachable(&self, message: impl Into<String>) -> SwitchError {
        SwitchError::Unreachable { switch: self.name.clone(), message: message.into() }
    }

    /// Runs `ovs-vsctl ARGS` where the switch is; its standard output.
    async fn vsctl(&self, args: &[String]) -> SwitchResult<String> {
        let mut vsctl = vec![format!("--timeout={}", OVS_TIMEOUT.as_secs())];
        // Kept alive until the command ends: the SSH key and known-hosts files.
        let mut files = Vec::new();
        let mut command = match &self.transport {
            Transport::Local { db } => {
                vsctl.extend(db.iter().map(|db| format!("--db={db}")));
                vsctl.extend(args.iter().cloned());
                let mut command = Command::new(&self.program);
                command.args(&vsctl);
                command
            }
            Transport::Ssh { destination, port, key, host_key } => {
                vsctl.extend(args.iter().cloned());
                let key_file =
                    private_file(key.as_bytes()).map_err(|e| self.unreachable(format!("a key file: {e}")))?;
                let host = destination.rsplit('@').next().unwrap_or(destination);
                let known = if *port == 22 { host.to_owned() } else { format!("[{host}]:{port}") };
                let hosts_file = private_file(format!("{known} {host_key}\n").as_bytes())
                    .map_err(|e| self.unreachable(format!("a known-hosts file: {e}")))?;
                let mut command = Command::new("ssh");
                command
                    .arg("-i")
                    .arg(key_file.path())
                    .args(["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes"])
                    .args(["-o", "ConnectTimeout=5", "-o", "LogLevel=ERROR", "-F", "/dev/null"])
                    .arg("-o")
                    .arg(format!("UserKnownHostsFile={}", hosts_file.path().display()))
                    .args(["-p", &port.to_string(), destination, "--"])
                    .arg(&self.program)
                    .args(&vsctl);
                files.push(key_file);
                files.push(hosts_file);
                command
            }
        };
        command.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        let running = command.output();
        let output = tokio::time::timeout(OVS_TIMEOUT * 3, running)
            .await
            .map_err(|_| self.unreachable(format!("no answer in {} s", (OVS_TIMEOUT * 3).as_secs())))?
            .map_err(|e| self.unreachable(format!("cannot run {}: {e}", self.program.display())))?;
        drop(files);
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        if output.status.success() {
            return String::from_utf8(output.stdout)
                .map_err(|_| SwitchError::Unreadable { switch: self.name.clone(), message: "not UTF-8".into() });
        }
        let ssh_failed = matches!(self.transport, Transport::Ssh { .. }) && output.status.code() == Some(255);
        let unreachable = ["database connection failed", "timed out", "Connection refused", "No such file"];
        if ssh_failed || unreachable.iter().any(|u| stderr.contains(u)) {
            return Err(self.unreachable(stderr));
        }
        Err(SwitchError::Refused { switch: self.name.clone(), message: stderr })
    }
}

/// A file only this user can read, holding `bytes`.
fn private_file(bytes: &[u8]) -> std::io::Result<tempfile::NamedTempFile> {
    // tempfile creates its files with mode 0600.
    let mut file = tempfile::NamedTempFile::new()?;
    file.write_all(bytes)?;
    file.flush()?;
    Ok(file)
}

/// `ovs-vsctl get port P tag vlan_mode`'s answer: a number or `[]`, then a mode or `[]`.
fn parse_port(switch: &str, answer: &str) -> SwitchResult<PortState> {
    let unreadable = || SwitchError::Unreadable { switch: switch.to_owned(), message: format!("{answer:?}") };
    let mut lines = answer.lines().map(str::trim);
    let (Some(tag), Some(mode)) = (lines.next(), lines.next()) else { return Err(unreadable()) };
    let vlan = match tag {
        "[]" => None,
        number => Some(number.parse::<Vlan>().map_err(|_| unreadable())?),
    };
    let mode = match mode {
        "[]" => None,
        mode => Some(mode.trim_matches('"').to_owned()),
    };
    Ok(PortState { vlan, mode })
}

#[async_trait::async_trait]
impl Switch for OvsSwitch {
    fn driver(&self) -> &'static str {
        "ovs"
    }

    async fn port(&self, port: &str) -> SwitchResult<PortState> {
        check_port(port)?;
        let answer = self.vsctl(&["get".into(), "port".into(), port.into(), "tag".into(), "vlan_mode".into()]).await?;
        parse_port(&self.name, &answer)
    }

    async fn set_access_vlan(&self, port: &str, vlan: Vlan) -> SwitchResult<()> {
        check_port(port)?;
        check_vlan(vlan)?;
        let args = ["set".into(), "port".into(), port.into(), "vlan_mode=access".into(), format!("tag={vlan}")];
        self.vsctl(&args).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ovs_vsctl_answers_are_read_as_a_tag_and_a_mode() {
        let port = parse_port("sw", "100\naccess\n").unwrap();
        assert_eq!(port, PortState { vlan: Some(100), mode: Some("access".into()) });
        assert_eq!(parse_port("sw", "[]\n[]\n").unwrap(), PortState { vlan: None, mode: None });
        for bad in ["", "100\n", "x\naccess\n", "70000\n[]\n"] {
            assert!(matches!(parse_port("sw", bad), Err(SwitchError::Unreadable { .. })), "{bad:?}");
        }
    }

    #[test]
    fn the_transports_debug_shows_no_key() {
        let ssh = Transport::Ssh {
            destination: "ops@sw1".into(),
            port: 22,
            key: Zeroizing::new("-----BEGIN OPENSSH PRIVATE KEY-----secret".into()),
            host_key: "ssh-ed25519 AAAA".into(),
        };
        let shown = format!("{ssh:?}");
        assert!(shown.contains("ops@sw1") && !shown.contains("secret"), "{shown}");
    }
}
