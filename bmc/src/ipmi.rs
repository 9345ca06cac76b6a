//! IPMI over LAN (RMCP+) through `ipmitool -I lanplus`. The password reaches ipmitool in
//! its environment (`-E` reads `IPMI_PASSWORD`), never in its argument list; a new password
//! for a rotation goes in on stdin (`exec /dev/stdin`). Output is parsed line by line and
//! failures are named from ipmitool's messages.

use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use tokio::io::AsyncWriteExt as _;
use tokio::sync::Mutex;

use crate::error::{BmcError, BmcResult};
use std::collections::BTreeMap;

use crate::model::{
    BiosSettings, BiosValue, BootPersistence, BootTarget, FirmwareComponent, FirmwareUpdate, Identity, LogEntry,
    MediaStatus, PowerAction, PowerOutcome, PowerState, ReadModel, Section, SecureBootState, Temperature,
    UpdateOutcome,
};
use crate::secret::{Credential, Secret};

/// Where to reach an IPMI BMC and how.
#[derive(Debug, Clone)]
pub struct IpmiConfig {
    /// Host name or address.
    pub host: String,
    /// UDP port (623).
    pub port: u16,
    /// The credential.
    pub credential: Credential,
    /// RMCP+ cipher suite (3 by default: some BMCs, ipmi_sim among them, do not answer the
    /// cipher suite query and every command would wait for it).
    pub cipher_suite: u8,
    /// Session privilege level (`ADMINISTRATOR`; `OPERATOR` or `USER` for lesser accounts).
    pub privilege: String,
    /// The ipmitool binary.
    pub tool: std::path::PathBuf,
    /// One ipmitool run.
    pub timeout: Duration,
    /// How long to wait for a power state after a command.
    pub settle: Duration,
}

impl IpmiConfig {
    /// Defaults for a BMC at `host:port`.
    pub fn new(host: impl Into<String>, port: u16, credential: Credential) -> Self {
        Self {
            host: host.into(),
            port,
            credential,
            cipher_suite: 3,
            privilege: "ADMINISTRATOR".into(),
            tool: "ipmitool".into(),
            timeout: Duration::from_secs(30),
            settle: Duration::from_secs(60),
        }
    }
}

/// An IPMI BMC.
#[derive(Debug)]
pub struct IpmiBmc {
    config: IpmiConfig,
    credential: Mutex<Credential>,
    name: String,
}

/// Parses `chassis power status` ("Chassis Power is on").
fn parse_power(out: &str) -> Option<PowerState> {
    let line = out.lines().find(|l| l.starts_with("Chassis Power is"))?;
    match line.trim_start_matches("Chassis Power is").trim() {
        "on" => Some(PowerState::On),
        "off" => Some(PowerState::Off),
        _ => None,
    }
}

/// `key : value` lines, keys trimmed.
fn fields(out: &str) -> Vec<(String, String)> {
    out.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn field(fields: &[(String, String)], key: &str) -> Option<String> {
    fields.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone()).filter(|v| !v.is_empty())
}

/// Parses `chassis bootparam get 5`: the device and whether it applies to all boots.
fn parse_boot(out: &str) -> Option<(String, BootPersistence)> {
    let device = out.lines().find_map(|l| l.trim().strip_prefix("- Boot Device Selector :"))?.trim().to_owned();
    let persistence = if out.contains("Options apply to all future boots") {
        BootPersistence::Persistent
    } else {
        BootPersistence::Once
    };
    Some((device, persistence))
}

/// Parses `user list 1` into (id, name).
fn parse_users(out: &str) -> Vec<(u8, String)> {
    out.lines()
        .skip(1)
        .filter_map(|l| {
            let mut words = l.split_whitespace();
            let id = words.next()?.parse().ok()?;
            let name = words.next()?;
            // An unnamed slot shows "true" (its Callin column) where the name would be.
            (name != "true" && name != "false").then(|| (id, name.to_owned()))
        })
        .collect()
}

/// Parses `sdr type temperature` lines: `Name | 30h | ok | 3.1 | 41 degrees C`.
fn parse_temperatures(out: &str) -> Vec<Temperature> {
    out.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('|').map(str::trim).collect();
            let reading = cols.get(4)?.strip_suffix("degrees C")?.trim().parse().ok()?;
            Some(Temperature { name: cols[0].to_owned(), celsius: reading, upper_critical: None })
        })
        .collect()
}

/// Parses `sel elist`: `   1 | 11/29/2026 | 15:20:01 | Temperature #0x30 | Upper Critical going high | Asserted`.
fn parse_sel(out: &str) -> Vec<LogEntry> {
    out.lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('|').map(str::trim).collect();
            (cols.len() >= 4).then(|| LogEntry {
                created: Some(format!("{} {}", cols[1], cols[2])),
                severity: None,
                message: cols[3..].join(" | "),
            })
        })
        .collect()
}

impl IpmiBmc {
    /// A BMC handle (nothing is sent until the first call).
    pub fn new(config: IpmiConfig) -> Self {
        let name = format!("{}:{}", config.host, config.port);
        Self { credential: Mutex::new(config.credential.clone()), config, name }
    }

    fn no_bios(&self) -> BmcError {
        BmcError::Unsupported {
            bmc: self.name.clone(),
            operation: "BIOS and Secure Boot settings".into(),
            message: "IPMI has no standard BIOS or Secure Boot settings; use the BMC's Redfish service".into(),
        }
    }

    fn ipmitool_error(&self, operation: &str, stderr: &str, user: &str) -> BmcError {
        let message = stderr.lines().filter(|l| !l.trim().is_empty()).collect::<Vec<_>>().join("; ");
        let lower = message.to_lowercase();
        if lower.contains("unauthorized name")
            || lower.contains("invalid user name")
            || lower.contains("rakp 2 hmac is invalid")
            || lower.contains("rakp 2 message indicates an error")
        {
            BmcError::Unauthorized { bmc: self.name.clone(), user: user.to_owned() }
        } else if lower.contains("unable to establish") || lower.contains("no response") || lower.contains("timeout") {
            BmcError::Unreachable { bmc: self.name.clone(), message }
        } else {
            BmcError::Refused { bmc: self.name.clone(), operation: operation.to_owned(), message }
        }
    }

    /// Why a session could not be established: ipmitool says only "Unable to establish"
    /// unless verbose, so ask again verbosely (a rejected name or password is Unauthorized).
    async fn diagnose(&self, credential: &Credential, first: BmcError) -> BmcError {
        match self.run_once(credential, &["-v", "mc", "info"], None).await {
            Err(e @ BmcError::Unauthorized { .. }) => e,
            _ => first,
        }
    }

    /// Runs ipmitool with `args` as `credential`, feeding `stdin` when given.
    async fn run_as(&self, credential: &Credential, args: &[&str], stdin: Option<&str>) -> BmcResult<String> {
        match self.run_once(credential, args, stdin).await {
            Err(e @ BmcError::Unreachable { .. }) => Err(self.diagnose(credential, e).await),
            other => other,
        }
    }

    /// ipmitool with the connection arguments, `args`, and the password in its environment.
    fn command(&self, credential: &Credential, args: &[&str]) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(&self.config.tool);
        command
            .args(["-I", "lanplus", "-H", &self.config.host, "-p", &self.config.port.to_string()])
            .args(["-C", &self.config.cipher_suite.to_string(), "-L", &self.config.privilege])
            .args(["-U", &credential.user, "-E", "-N", "2", "-R", "3"])
            .args(args)
            .env("IPMI_PASSWORD", credential.password.expose())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        command
    }

    fn spawn(&self, mut command: tokio::process::Command) -> BmcResult<tokio::process::Child> {
        command
            .spawn()
            .map_err(|e| BmcError::Tool { tool: self.config.tool.display().to_string(), message: e.to_string() })
    }

    /// Starts a Serial-over-LAN session (`sol activate`, after deactivating a stale one) with
    /// piped stdin and stdout for the caller to bridge; killing the child ends it.
    pub async fn console(&self) -> BmcResult<tokio::process::Child> {
        // "not active" is the usual answer; anything worse shows when activating.
        let _ = self.run(&["sol", "deactivate"]).await;
        let credential = self.credential.lock().await.clone();
        let mut command = self.command(&credential, &["sol", "activate"]);
        command.stdin(Stdio::piped());
        self.spawn(command)
    }

    async fn run_once(&self, credential: &Credential, args: &[&str], stdin: Option<&str>) -> BmcResult<String> {
        let operation = args.join(" ");
        let mut command = self.command(credential, args);
        command.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        let mut child = self.spawn(command)?;
        if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(text.as_bytes()).await.map_err(|e| BmcError::Tool {
                tool: self.config.tool.display().to_string(),
                message: format!("writing its input: {e}"),
            })?;
        }
        let output = tokio::time::timeout(self.config.timeout, child.wait_with_output())
            .await
            .map_err(|_| BmcError::Timeout {
                bmc: self.name.clone(),
                operation: operation.clone(),
                seconds: self.config.timeout.as_secs(),
                message: "ipmitool did not finish".into(),
            })?
            .map_err(|e| BmcError::Tool { tool: self.config.tool.display().to_string(), message: e.to_string() })?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        if !output.status.success() {
            return Err(self.ipmitool_error(&operation, &stderr, &credential.user));
        }
        Ok(stdout)
    }

    async fn run(&self, args: &[&str]) -> BmcResult<String> {
        let credential = self.credential.lock().await.clone();
        self.run_as(&credential, args, None).await
    }

    async fn chassis(&self, command: &'static str, expect: PowerState, sent: &mut Vec<String>) -> BmcResult<()> {
        if let Err(e) = self.run(&["chassis", "power", command]).await {
            sent.push(format!("{command} (refused)"));
            return Err(e);
        }
        sent.push(command.to_owned());
        let operation = format!("chassis power {command}");
        crate::wait_for_power(self, &self.name, expect, &operation, self.config.settle, Duration::from_millis(250))
            .await
    }
}

#[async_trait]
impl crate::Bmc for IpmiBmc {
    fn protocol(&self) -> &'static str {
        "ipmi"
    }

    async fn power_state(&self) -> BmcResult<PowerState> {
        let out = self.run(&["chassis", "power", "status"]).await?;
        parse_power(&out).ok_or_else(|| BmcError::Protocol {
            bmc: self.name.clone(),
            operation: "chassis power status".into(),
            message: format!("unexpected output {:?}", out.trim()),
        })
    }

    async fn power(&self, action: PowerAction) -> BmcResult<PowerOutcome> {
        use PowerState::{Off, On};
        let before = self.power_state().await?;
        let mut sent = Vec::new();
        match (action, before) {
            (PowerAction::On, On) | (PowerAction::Off, Off) => {}
            (PowerAction::On | PowerAction::Reset | PowerAction::Cycle, Off) => {
                self.chassis("on", On, &mut sent).await?
            }
            (PowerAction::Off, On) => self.chassis("off", Off, &mut sent).await?,
            (PowerAction::Reset, On) => self.chassis("reset", On, &mut sent).await?,
            (PowerAction::Cycle, On) => {
                // BMCs that reject cycle get a reset, then off and on.
                if let Err(cycle) = self.chassis("cycle", On, &mut sent).await {
                    tracing::warn!(bmc = %self.name, error = %cycle, "power cycle refused; trying reset");
                    if let Err(reset) = self.chassis("reset", On, &mut sent).await {
                        tracing::warn!(bmc = %self.name, error = %reset, "power reset refused; off and on");
                        self.chassis("off", Off, &mut sent).await?;
                        self.chassis("on", On, &mut sent).await?;
                    }
                }
            }
        }
        let after = self.power_state().await?;
        tracing::info!(bmc = %self.name, ?action, ?before, ?after, ?sent, "power");
        Ok(PowerOutcome { before, after, sent })
    }

    async fn set_boot(&self, target: BootTarget, persistence: BootPersistence) -> BmcResult<()> {
        let (device, shown) = match target {
            BootTarget::Pxe => ("pxe", "Force PXE"),
            BootTarget::Disk => ("disk", "Force Boot from default Hard-Drive"),
            BootTarget::Cd => ("cdrom", "Force Boot from CD/DVD"),
            BootTarget::Bios => ("bios", "Force Boot into BIOS Setup"),
        };
        let mut args = vec!["chassis", "bootdev", device];
        if persistence == BootPersistence::Persistent {
            args.push("options=persistent");
        }
        self.run(&args).await?;
        let out = self.run(&["chassis", "bootparam", "get", "5"]).await?;
        match parse_boot(&out) {
            Some((reported, _)) if reported == shown => Ok(()),
            other => Err(BmcError::Protocol {
                bmc: self.name.clone(),
                operation: "chassis bootdev".into(),
                message: format!("asked for {shown:?}, the BMC reports {other:?}"),
            }),
        }
    }

    async fn insert_media(&self, _url: &str) -> BmcResult<()> {
        Err(BmcError::Unsupported {
            bmc: self.name.clone(),
            operation: "virtual media".into(),
            message: "IPMI has no virtual media; use the BMC's Redfish".into(),
        })
    }

    async fn eject_media(&self) -> BmcResult<()> {
        self.insert_media("").await
    }

    async fn media_status(&self) -> BmcResult<MediaStatus> {
        self.insert_media("").await.map(|()| MediaStatus { inserted: false, image: None })
    }

    async fn read_model(&self) -> BmcResult<ReadModel> {
        let mc = fields(&self.run(&["mc", "info"]).await?);
        let fru = match self.run(&["fru", "print", "0"]).await {
            Ok(out) => fields(&out),
            Err(BmcError::Refused { .. }) => Vec::new(),
            Err(e) => return Err(e),
        };
        let bmc_version = field(&mc, "Firmware Revision");
        let identity = Identity {
            manufacturer: field(&fru, "Product Manufacturer").or_else(|| field(&mc, "Manufacturer Name")),
            model: field(&fru, "Product Name").or_else(|| field(&mc, "Product Name")),
            serial: field(&fru, "Product Serial").or_else(|| field(&fru, "Board Serial")),
            uuid: None,
            bios_version: None,
            bmc_version: bmc_version.clone(),
        };
        let temperatures = match self.run(&["sdr", "type", "temperature"]).await {
            Ok(out) => Section::Present(parse_temperatures(&out)),
            Err(BmcError::Refused { message, .. }) => Section::Absent(message),
            Err(e) => return Err(e),
        };
        let power_watts = match self.run(&["dcmi", "power", "reading"]).await {
            Ok(out) => field(&fields(&out), "Instantaneous power reading")
                .and_then(|v| v.split_whitespace().next().and_then(|w| w.parse().ok()))
                .map_or_else(|| Section::Absent("no power reading".into()), Section::Present),
            Err(BmcError::Refused { message, .. }) => Section::Absent(format!("no DCMI: {message}")),
            Err(e) => return Err(e),
        };
        let logs = match self.run(&["sel", "elist", "last", "20"]).await {
            Ok(out) => {
                let mut entries = parse_sel(&out);
                entries.reverse();
                Section::Present(entries)
            }
            Err(BmcError::Refused { message, .. }) => Section::Absent(message),
            Err(e) => return Err(e),
        };
        Ok(ReadModel {
            identity: Section::Present(identity),
            health: Section::Absent("IPMI has no health rollup".into()),
            power: Section::Present(self.power_state().await?),
            temperatures,
            power_watts,
            firmware: Section::Present(
                bmc_version
                    .map(|v| FirmwareComponent {
                        id: "bmc".into(),
                        name: "BMC".into(),
                        version: v,
                        updateable: None,
                        resource: None,
                    })
                    .into_iter()
                    .collect(),
            ),
            logs,
        })
    }

    async fn bios(&self) -> BmcResult<BiosSettings> {
        Err(self.no_bios())
    }

    async fn set_bios(&self, _attributes: &BTreeMap<String, BiosValue>) -> BmcResult<()> {
        Err(self.no_bios())
    }

    async fn reset_bios(&self) -> BmcResult<()> {
        Err(self.no_bios())
    }

    async fn secure_boot(&self) -> BmcResult<SecureBootState> {
        Err(self.no_bios())
    }

    async fn set_secure_boot(&self, _enabled: bool) -> BmcResult<()> {
        Err(self.no_bios())
    }

    async fn update_firmware(&self, _update: &FirmwareUpdate) -> BmcResult<UpdateOutcome> {
        Err(BmcError::Unsupported {
            bmc: self.name.clone(),
            operation: "firmware update".into(),
            message: "IPMI has no standard firmware update; use the BMC's Redfish service".into(),
        })
    }

    async fn rotate_password(&self, user: &str, new: &Secret) -> BmcResult<()> {
        let length = new.expose().len();
        if length == 0 || length > 20 || new.expose().contains(char::is_whitespace) {
            return Err(BmcError::Invalid("an IPMI password has 1 to 20 characters and no spaces".into()));
        }
        let users = parse_users(&self.run(&["user", "list", "1"]).await?);
        let id = users
            .iter()
            .find(|(_, name)| name == user)
            .map(|(id, _)| *id)
            .ok_or_else(|| BmcError::Invalid(format!("{}: no IPMI user named {user}", self.name)))?;
        let size = if length > 16 { "20" } else { "16" };
        // The new password goes in on stdin, never on the command line.
        let script = format!("user set password {id} {} {size}\n", new.expose());
        let current = self.credential.lock().await.clone();
        let out = self.run_as(&current, &["exec", "/dev/stdin"], Some(&script)).await?;
        if !out.contains("successful") {
            return Err(BmcError::Refused {
                bmc: self.name.clone(),
                operation: format!("set password of user {id}"),
                message: out.trim().to_owned(),
            });
        }
        // Prove it: log in with the new password before anyone relies on it.
        let rotated = Credential { user: user.to_owned(), password: new.clone() };
        self.run_as(&rotated, &["mc", "info"], None).await?;
        if current.user == user {
            *self.credential.lock().await = rotated;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_status_parses() {
        assert_eq!(parse_power("Chassis Power is on\n"), Some(PowerState::On));
        assert_eq!(parse_power("Chassis Power is off\n"), Some(PowerState::Off));
        assert_eq!(parse_power("garbage"), None);
    }

    #[test]
    fn boot_parameters_parse() {
        let out = "Boot parameter version: 1\nBoot parameter 5 is valid/unlocked\nBoot parameter data: 8004000000\n Boot Flags :\n   - Boot Flag Valid\n   - Options apply to only next boot\n   - BIOS PC Compatible (legacy) boot\n   - Boot Device Selector : Force PXE\n";
        assert_eq!(parse_boot(out), Some(("Force PXE".into(), BootPersistence::Once)));
        let persistent = out.replace("only next boot", "all future boots");
        assert_eq!(parse_boot(&persistent).unwrap().1, BootPersistence::Persistent);
    }

    #[test]
    fn user_lists_skip_unnamed_slots() {
        let out = "ID  Name\t     Callin  Link Auth\tIPMI Msg   Channel Priv Limit\n1                    true    false      true       USER\n2   admin            true    false      true       ADMINISTRATOR\n3   ops              true    false      true       OPERATOR\n";
        assert_eq!(parse_users(out), vec![(2, "admin".into()), (3, "ops".into())]);
    }

    #[test]
    fn sensors_and_sel_parse() {
        let sdr =
            "CPU Temp         | 30h | ok  |  3.1 | 41 degrees C\nFan 1            | 40h | ok  |  7.1 | 3000 RPM\n";
        assert_eq!(
            parse_temperatures(sdr),
            vec![Temperature { name: "CPU Temp".into(), celsius: 41.0, upper_critical: None }]
        );
        let sel = "   1 | 11/29/2026 | 15:20:01 | Temperature #0x30 | Upper Critical going high | Asserted\n";
        let entries = parse_sel(sel);
        assert_eq!(entries[0].created.as_deref(), Some("11/29/2026 15:20:01"));
        assert_eq!(entries[0].message, "Temperature #0x30 | Upper Critical going high | Asserted");
    }

    #[test]
    fn mc_info_fields_parse() {
        let out = "Device ID                 : 35\nFirmware Revision         : 9.08\nManufacturer Name         : Unknown (0x1291)\n";
        let f = fields(out);
        assert_eq!(field(&f, "Firmware Revision").as_deref(), Some("9.08"));
        assert_eq!(field(&f, "Nope"), None);
    }
}
