//! The teardown's fencing drivers: cut a released machine off the tenant's network and
//! keep it off. `fence-agents` runs ClusterLabs' `fence_redfish` or `fence_ipmilan` (the
//! tools Pacemaker sites already run) with its options on standard input, so the BMC
//! password never appears on a command line. `fence_ipmilan` itself would hand it to
//! `ipmitool` as `-P PASSWORD`, readable by every process in /proc: it gets no password and
//! runs `ipmitool` through [`IPMITOOL_WRAPPER`], which drops the empty `-P` and has ipmitool
//! read `IPMI_PASSWORD` from the environment it inherits. `command` runs the site's own
//! command with the node's MACs and BMC address in its environment; `none` is recorded as
//! such.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt as _;

use metal_types::model::bmc::{BmcInfo, BmcProtocol, BmcTls};
use metal_types::model::pool::Fencing;

/// How long one fencing command may run.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// The `ipmitool` fence_ipmilan runs: drops its `-P ...` and reads the password from
/// `IPMI_PASSWORD` instead (`-E`).
pub const IPMITOOL_WRAPPER: &str = r#"#!/bin/sh
# metal: ipmitool for fence_ipmilan, the password from IPMI_PASSWORD, never from -P.
skip=
for arg do
  shift
  if [ -n "$skip" ]; then skip=; continue; fi
  if [ "$arg" = -P ]; then skip=1; continue; fi
  set -- "$@" "$arg"
done
exec ipmitool -E "$@"
"#;

/// What a fencing driver is given.
#[derive(Debug)]
pub struct Target<'a> {
    /// The node.
    pub node: &'a str,
    /// Its NICs' MACs (from the platform inventory).
    pub macs: &'a [String],
    /// Its BMC.
    pub bmc: &'a BmcInfo,
    /// The BMC password, for fence-agents only.
    pub password: &'a metal_bmc::Secret,
}

/// Fences `target` with `driver`; the raw outcome for the evidence, or why it failed.
pub async fn fence(driver: Option<&Fencing>, target: &Target<'_>) -> Result<Value, String> {
    match driver {
        None | Some(Fencing::None) => Ok(json!({"driver": "none", "note": "the pool configures no fencing"})),
        Some(Fencing::Command { command }) => site_command(command, target).await,
        Some(Fencing::FenceAgents) => fence_agents(target).await,
    }
}

struct Finished {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut start = text.len().saturating_sub(2000);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    text[start..].trim().to_owned()
}

async fn run(mut command: tokio::process::Command, stdin: Option<String>) -> Result<Finished, String> {
    command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
    let mut child = command.spawn().map_err(|e| format!("starting it: {e}"))?;
    let mut input = child.stdin.take().ok_or("no stdin")?;
    if let Some(text) = stdin {
        input.write_all(text.as_bytes()).await.map_err(|e| format!("writing its options: {e}"))?;
    }
    drop(input);
    let output = tokio::time::timeout(TIMEOUT, child.wait_with_output())
        .await
        .map_err(|_| format!("no answer within {}s", TIMEOUT.as_secs()))?
        .map_err(|e| e.to_string())?;
    Ok(Finished { code: output.status.code(), stdout: tail(&output.stdout), stderr: tail(&output.stderr) })
}

async fn site_command(line: &str, target: &Target<'_>) -> Result<Value, String> {
    let mut command = tokio::process::Command::new("sh");
    command
        .arg("-c")
        .arg(line)
        .env("METAL_NODE", target.node)
        .env("METAL_MACS", target.macs.join(","))
        .env("METAL_BMC_ADDRESS", &target.bmc.address)
        .env("METAL_ACTION", "fence");
    let done = run(command, None).await.map_err(|e| format!("fencing command: {e}"))?;
    let evidence = json!({"driver": "command", "exit": done.code, "stdout": done.stdout, "stderr": done.stderr});
    if done.code == Some(0) {
        Ok(evidence)
    } else {
        Err(format!("the fencing command exited {:?}: {}", done.code, done.stderr))
    }
}

/// The agent and its standard-input options for one action (the IPMI password is not
/// among them: it goes to ipmitool through the environment).
fn agent_options(target: &Target<'_>, action: &str) -> Result<(&'static str, String, Option<String>), String> {
    let bmc = target.bmc;
    let mut lines = vec![format!("action={action}"), format!("username={}", bmc.username)];
    let mut ca_bundle = None;
    let agent = match bmc.protocol {
        BmcProtocol::Redfish => {
            let url = reqwest::Url::parse(&bmc.address).map_err(|e| format!("BMC address {}: {e}", bmc.address))?;
            if url.scheme() != "https" {
                return Err("fence_redfish speaks only HTTPS; this BMC is plain HTTP".into());
            }
            lines.push(format!("password={}", target.password.expose()));
            lines.push(format!("ip={}", url.host_str().unwrap_or_default()));
            lines.push(format!("ipport={}", url.port_or_known_default().unwrap_or(443)));
            if let Some(system) = &bmc.system_id {
                lines.push(format!("systems_uri=/redfish/v1/Systems/{system}"));
            }
            match &bmc.tls {
                Some(BmcTls::Ca(pem)) => {
                    lines.push("ssl_secure=1".into());
                    ca_bundle = Some(pem.clone());
                }
                // fence-agents cannot pin a fingerprint: the power-off step before it spoke
                // to the same address with the pin checked.
                _ => lines.push("ssl_insecure=1".into()),
            }
            "fence_redfish"
        }
        BmcProtocol::Ipmi => {
            let (host, port) = metal_types::model::bmc::ipmi_address(&bmc.address).map_err(|e| e.to_string())?;
            lines.push(format!("ip={host}"));
            lines.push(format!("ipport={port}"));
            lines.push("lanplus=1".into());
            if let Some(privilege) = bmc.privilege {
                lines.push(format!("privlvl={}", privilege.as_str()));
            }
            "fence_ipmilan"
        }
    };
    Ok((agent, lines.join("\n") + "\n", ca_bundle))
}

/// [`IPMITOOL_WRAPPER`] as an executable file (removed when dropped).
fn ipmitool_wrapper() -> Result<tempfile::TempPath, String> {
    use std::os::unix::fs::PermissionsExt as _;
    let file = tempfile::Builder::new().prefix("metal-ipmitool-").tempfile().map_err(|e| e.to_string())?;
    std::fs::write(file.path(), IPMITOOL_WRAPPER).map_err(|e| e.to_string())?;
    std::fs::set_permissions(file.path(), std::fs::Permissions::from_mode(0o700)).map_err(|e| e.to_string())?;
    // Closed before it runs: a file open for writing cannot be executed (ETXTBSY).
    let path = file.into_temp_path();
    if path.to_string_lossy().contains(['\'', ' ']) {
        return Err(format!("the temporary directory's path {} cannot be quoted for fence_ipmilan", path.display()));
    }
    Ok(path)
}

async fn agent(target: &Target<'_>, action: &str) -> Result<Finished, String> {
    let (agent, mut options, ca) = agent_options(target, action)?;
    let mut command = tokio::process::Command::new(agent);
    let wrapper = match target.bmc.protocol {
        BmcProtocol::Ipmi => {
            let path = ipmitool_wrapper()?;
            options.push_str(&format!("ipmitool_path={}\n", path.display()));
            command.env("IPMI_PASSWORD", target.password.expose());
            Some(path)
        }
        BmcProtocol::Redfish => None,
    };
    let ca_file = match ca {
        Some(pem) => {
            let file = tempfile::NamedTempFile::new().map_err(|e| e.to_string())?;
            std::fs::write(file.path(), pem).map_err(|e| e.to_string())?;
            command.env("REQUESTS_CA_BUNDLE", file.path());
            Some(file)
        }
        None => None,
    };
    let done = run(command, Some(options)).await.map_err(|e| format!("{agent}: {e}"));
    drop((ca_file, wrapper));
    done
}

async fn fence_agents(target: &Target<'_>) -> Result<Value, String> {
    let off = agent(target, "off").await?;
    if off.code != Some(0) {
        return Err(format!("fence-agents off exited {:?}: {}", off.code, off.stderr));
    }
    let status = agent(target, "status").await?;
    // The agents print "Status: OFF" and exit 2 for a machine that is off.
    let read_back = format!("{} {}", status.stdout, status.stderr);
    if !read_back.contains("Status: OFF") {
        return Err(format!("fence-agents status does not read OFF: {read_back}"));
    }
    Ok(json!({"driver": "fence-agents", "off": {"exit": off.code, "output": off.stdout},
              "status": {"exit": status.code, "output": status.stdout}}))
}
