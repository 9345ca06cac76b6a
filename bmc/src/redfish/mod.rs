//! Redfish: everything is discovered from the service root (the system, its manager, the
//! virtual CD wherever the BMC puts it, UpdateService, AccountService, SessionService); no
//! vendor path is hard-coded. Reset types are chosen from what the BMC lists as allowed.

mod http;
pub mod parse;
mod update;

use async_trait::async_trait;
use serde_json::{Value, json};

pub use http::{Answer, Timing, Transport};

use crate::error::{BmcError, BmcResult};
use crate::model::{
    BiosSettings, BiosValue, BootPersistence, BootTarget, FirmwareComponent, FirmwareUpdate, LogEntry, MediaStatus,
    PowerAction, PowerOutcome, PowerState, ReadModel, Section, SecureBootState, Temperature, UpdateOutcome,
};
use crate::secret::{Credential, Secret};
use crate::tls::{TlsTrust, http_client};
use parse::{members, odata_id, text};

/// Where to reach a Redfish BMC and how.
#[derive(Debug, Clone)]
pub struct RedfishConfig {
    /// `https://host[:port]` (http only for emulators on loopback).
    pub endpoint: String,
    /// The credential.
    pub credential: Credential,
    /// TLS trust.
    pub trust: TlsTrust,
    /// Which system, when the BMC has several (its `Id` or `UUID`); the first otherwise.
    pub system: Option<String>,
    /// Timeouts and retries.
    pub timing: Timing,
}

/// The resources found from the service root.
#[derive(Debug, Clone)]
struct Layout {
    system: String,
    manager: Option<String>,
    chassis: Option<String>,
    update_service: Option<String>,
    account_service: Option<String>,
}

/// A Redfish BMC.
#[derive(Debug)]
pub struct RedfishBmc {
    transport: Transport,
    layout: Layout,
}

impl RedfishBmc {
    /// Connects and discovers the layout from the service root.
    pub async fn connect(config: RedfishConfig) -> BmcResult<Self> {
        let base = reqwest::Url::parse(&config.endpoint)
            .map_err(|e| BmcError::Invalid(format!("BMC endpoint {:?}: {e}", config.endpoint)))?;
        if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
            return Err(BmcError::Invalid(format!("BMC endpoint {:?} must be https://host[:port]", config.endpoint)));
        }
        let http = http_client(&config.trust, config.timing.request)?;
        let transport = Transport::new(base, http, config.credential, config.timing);
        let root = transport.get("/redfish/v1/").await?.body;
        if let Some(sessions) = odata_id(&root["Links"]["Sessions"]) {
            transport.use_sessions(sessions).await;
        }
        let systems_path =
            odata_id(&root["Systems"]).ok_or_else(|| transport.unsupported("discovery", "no Systems"))?;
        let mut system = None;
        for path in members(&transport.get(&systems_path).await?.body) {
            let wanted = match &config.system {
                None => true,
                Some(id) => {
                    let s = transport.get(&path).await?.body;
                    s["Id"].as_str() == Some(id) || s["UUID"].as_str() == Some(id)
                }
            };
            if wanted {
                system = Some(path);
                break;
            }
        }
        let system = system.ok_or_else(|| {
            transport.unsupported("discovery", format!("no system {}", config.system.as_deref().unwrap_or("at all")))
        })?;
        let links = &transport.get(&system).await?.body["Links"];
        let first_link = |name: &str| links[name].as_array().and_then(|a| a.first()).and_then(odata_id);
        let layout = Layout {
            manager: first_link("ManagedBy"),
            chassis: first_link("Chassis"),
            update_service: odata_id(&root["UpdateService"]),
            account_service: odata_id(&root["AccountService"]),
            system,
        };
        tracing::debug!(bmc = transport.name(), ?layout, "redfish layout discovered");
        Ok(Self { transport, layout })
    }

    /// The transport (for firmware updates and other direct calls).
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// The system resource's path.
    pub fn system_path(&self) -> &str {
        &self.layout.system
    }

    /// The UpdateService's path, if the BMC has one.
    pub fn update_service(&self) -> Option<&str> {
        self.layout.update_service.as_deref()
    }

    async fn system(&self) -> BmcResult<Value> {
        Ok(self.transport.get(&self.layout.system).await?.body)
    }

    /// The resource the system links as `property` (`Bios`, `SecureBoot`) and its path.
    async fn system_resource(&self, property: &str, operation: &str) -> BmcResult<(String, Value)> {
        let path = odata_id(&self.system().await?[property])
            .ok_or_else(|| self.transport.unsupported(operation, format!("the system has no {property} resource")))?;
        let resource = self.transport.get(&path).await?.body;
        Ok((path, resource))
    }

    /// The reset types the BMC allows (from the action or its ActionInfo).
    async fn reset_types(&self, system: &Value) -> BmcResult<(String, Vec<String>)> {
        let (target, mut allowed, info) =
            parse::reset_action(system).ok_or_else(|| self.transport.unsupported("power", "no Reset action"))?;
        if allowed.is_empty()
            && let Some(info) = info
        {
            allowed = parse::action_info_reset_types(&self.transport.get(&info).await?.body);
        }
        if allowed.is_empty() {
            // The BMC does not say: assume the schema's basic ones.
            allowed = ["On", "ForceOff", "ForceRestart"].map(String::from).to_vec();
        }
        Ok((target, allowed))
    }

    /// The virtual CD: the first member of a VirtualMedia collection (the system's, else the
    /// manager's) that takes CD or DVD media.
    async fn virtual_cd(&self) -> BmcResult<(String, Value)> {
        let mut collections = Vec::new();
        if let Some(c) = odata_id(&self.system().await?["VirtualMedia"]) {
            collections.push(c);
        }
        if let Some(manager) = &self.layout.manager
            && let Some(c) = odata_id(&self.transport.get(manager).await?.body["VirtualMedia"])
        {
            collections.push(c);
        }
        for collection in collections {
            let Some(answer) = self.transport.get_optional(&collection).await? else { continue };
            for path in members(&answer.body) {
                let media = self.transport.get(&path).await?.body;
                if parse::is_cd(&media) {
                    return Ok((path, media));
                }
            }
        }
        Err(self.transport.unsupported("virtual media", "no virtual CD or DVD in any VirtualMedia collection"))
    }

    /// A resource the layout names, when it names one and the BMC has it.
    async fn optional(&self, path: Option<&str>) -> BmcResult<Option<Value>> {
        let Some(path) = path else { return Ok(None) };
        Ok(self.transport.get_optional(path).await?.map(|a| a.body))
    }

    async fn temperatures(&self, chassis: Option<&Value>) -> BmcResult<Section<Vec<Temperature>>> {
        let Some(chassis) = chassis else { return Ok(Section::Absent("no chassis".into())) };
        let Some(thermal) = odata_id(&chassis["Thermal"]) else {
            return Ok(Section::Absent("the chassis has no Thermal resource".into()));
        };
        let Some(thermal) = self.transport.get_optional(&thermal).await? else {
            return Ok(Section::Absent("the Thermal resource is missing".into()));
        };
        Ok(Section::Present(parse::temperatures(&thermal.body)))
    }

    async fn power_watts(&self, chassis: Option<&Value>) -> BmcResult<Section<f64>> {
        let Some(chassis) = chassis else { return Ok(Section::Absent("no chassis".into())) };
        let Some(power) = odata_id(&chassis["Power"]) else {
            return Ok(Section::Absent("the chassis has no Power resource".into()));
        };
        let Some(power) = self.transport.get_optional(&power).await? else {
            return Ok(Section::Absent("the Power resource is missing".into()));
        };
        Ok(match parse::power_watts(&power.body) {
            Some(w) => Section::Present(w),
            None => Section::Absent("no PowerConsumedWatts reading".into()),
        })
    }

    async fn firmware(&self) -> BmcResult<Section<Vec<FirmwareComponent>>> {
        let Some(update) = &self.layout.update_service else {
            return Ok(Section::Absent("no UpdateService".into()));
        };
        let service = self.transport.get(update).await?.body;
        let Some(inventory) = odata_id(&service["FirmwareInventory"]) else {
            return Ok(Section::Absent("the UpdateService has no FirmwareInventory".into()));
        };
        let Some(inventory) = self.transport.get_optional(&inventory).await? else {
            return Ok(Section::Absent("the FirmwareInventory is missing".into()));
        };
        let mut components = Vec::new();
        for path in members(&inventory.body) {
            let item = self.transport.get(&path).await?.body;
            components.push(parse::firmware_component(&item, &path));
        }
        Ok(Section::Present(components))
    }

    async fn logs(&self, system: &Value, manager: Option<&Value>) -> BmcResult<Section<Vec<LogEntry>>> {
        const NEWEST: usize = 20;
        let services: Vec<String> =
            std::iter::once(system).chain(manager).filter_map(|owner| odata_id(&owner["LogServices"])).collect();
        for collection in services {
            let Some(answer) = self.transport.get_optional(&collection).await? else { continue };
            for service in members(&answer.body) {
                let service = self.transport.get(&service).await?.body;
                let Some(entries) = odata_id(&service["Entries"]) else { continue };
                let Some(entries) = self.transport.get_optional(&entries).await? else { continue };
                let out = parse::log_entries(&entries.body, NEWEST);
                return Ok(Section::Present(out));
            }
        }
        Ok(Section::Absent("no LogServices with entries".into()))
    }

    /// The account of `user` in the AccountService.
    async fn account(&self, user: &str) -> BmcResult<String> {
        let service = self
            .layout
            .account_service
            .as_ref()
            .ok_or_else(|| self.transport.unsupported("password rotation", "no AccountService"))?;
        let accounts = odata_id(&self.transport.get(service).await?.body["Accounts"])
            .ok_or_else(|| self.transport.unsupported("password rotation", "the AccountService has no Accounts"))?;
        for path in members(&self.transport.get(&accounts).await?.body) {
            if self.transport.get(&path).await?.body["UserName"].as_str() == Some(user) {
                return Ok(path);
            }
        }
        Err(BmcError::Invalid(format!("{}: no account named {user}", self.transport.name())))
    }
}

fn pick<'a>(allowed: &[String], preferred: &[&'a str]) -> Option<&'a str> {
    preferred.iter().copied().find(|p| allowed.iter().any(|a| a == p))
}

/// The reset commands that carry out `action` from `before`, given what the BMC allows.
/// Each step is the command and the power state to wait for after it.
fn reset_plan(
    action: PowerAction,
    before: PowerState,
    allowed: &[String],
) -> Result<Vec<(&'static str, PowerState)>, String> {
    use PowerAction as A;
    use PowerState::{Off, On};
    let on = || pick(allowed, &["On", "ForceOn"]).map(|c| (c, On)).ok_or("neither On nor ForceOn is allowed");
    let off = || {
        pick(allowed, &["ForceOff", "GracefulShutdown"])
            .map(|c| (c, Off))
            .ok_or("neither ForceOff nor GracefulShutdown is allowed")
    };
    Ok(match (action, before) {
        (A::On, On) | (A::Off, Off) => vec![],
        (A::On | A::Reset | A::Cycle, Off) => vec![on()?],
        (A::Off, On) => vec![off()?],
        (A::Reset, On) => match pick(allowed, &["ForceRestart", "GracefulRestart", "PowerCycle"]) {
            Some(c) => vec![(c, On)],
            None => vec![off()?, on()?],
        },
        (A::Cycle, On) => match pick(allowed, &["PowerCycle"]) {
            Some(c) => vec![(c, On)],
            // Many BMCs have no PowerCycle: off and on again is one.
            None => match (off(), on()) {
                (Ok(off), Ok(on)) => vec![off, on],
                _ => vec![(pick(allowed, &["ForceRestart"]).ok_or("no PowerCycle, off/on or ForceRestart")?, On)],
            },
        },
    })
}

fn boot_target_name(target: BootTarget) -> &'static str {
    match target {
        BootTarget::Pxe => "Pxe",
        BootTarget::Disk => "Hdd",
        BootTarget::Cd => "Cd",
        BootTarget::Bios => "BiosSetup",
    }
}

#[async_trait]
impl crate::Bmc for RedfishBmc {
    fn protocol(&self) -> &'static str {
        "redfish"
    }

    async fn power_state(&self) -> BmcResult<PowerState> {
        parse::power_state(&self.system().await?).map_err(|m| self.transport.protocol("power status", m))
    }

    async fn power(&self, action: PowerAction) -> BmcResult<PowerOutcome> {
        let system = self.system().await?;
        let before = parse::power_state(&system).map_err(|m| self.transport.protocol("power status", m))?;
        let (target, allowed) = self.reset_types(&system).await?;
        let plan = reset_plan(action, before, &allowed).map_err(|m| {
            self.transport.unsupported(&format!("power {action:?}"), format!("{m} (allowed: {})", allowed.join(", ")))
        })?;
        let mut sent = Vec::new();
        // Each step is read back before the next; the last read-back is the answer.
        let mut after = before;
        for (command, expect) in plan {
            let operation = format!("reset {command}");
            self.transport.post_action(&operation, &target, &json!({"ResetType": command})).await?;
            sent.push(command.to_owned());
            let timing = &self.transport.timing;
            crate::wait_for_power(self, self.transport.name(), expect, &operation, timing.settle, timing.poll).await?;
            after = expect;
        }
        tracing::info!(bmc = self.transport.name(), ?action, ?before, ?after, ?sent, "power");
        Ok(PowerOutcome { before, after, sent })
    }

    async fn set_boot(&self, target: BootTarget, persistence: BootPersistence) -> BmcResult<()> {
        let name = boot_target_name(target);
        let system = self.system().await?;
        let allowed = parse::boot_targets(&system);
        if !allowed.is_empty() && !allowed.iter().any(|a| a == name) {
            return Err(self
                .transport
                .unsupported("boot override", format!("{name} is not allowed ({})", allowed.join(", "))));
        }
        let enabled = match persistence {
            BootPersistence::Once => "Once",
            BootPersistence::Persistent => "Continuous",
        };
        let body = json!({"Boot": {"BootSourceOverrideTarget": name, "BootSourceOverrideEnabled": enabled}});
        self.transport.patch("boot override", &self.layout.system, &body).await?;
        let boot = &self.system().await?["Boot"];
        if boot["BootSourceOverrideTarget"].as_str() != Some(name) {
            return Err(self.transport.protocol(
                "boot override",
                format!("asked for {name}, the BMC now reports {}", boot["BootSourceOverrideTarget"]),
            ));
        }
        if boot["BootSourceOverrideEnabled"].as_str() != Some(enabled) {
            tracing::warn!(bmc = self.transport.name(), asked = enabled, reported = %boot["BootSourceOverrideEnabled"],
                "the BMC reports another boot override persistence than asked");
        }
        Ok(())
    }

    async fn insert_media(&self, url: &str) -> BmcResult<()> {
        let (path, media) = self.virtual_cd().await?;
        if media["Inserted"].as_bool() == Some(true) {
            if text(&media["Image"]).as_deref() == Some(url) {
                return Ok(());
            }
            self.eject_media().await?;
        }
        match parse::media_action(&media, "InsertMedia") {
            Some(target) => {
                let body = json!({"Image": url, "Inserted": true, "WriteProtected": true});
                self.transport.post_action("insert media", &target, &body).await?;
            }
            None => {
                self.transport.patch("insert media", &path, &json!({"Image": url, "Inserted": true})).await?;
            }
        }
        let status = self.media_status().await?;
        if !status.inserted || status.image.as_deref() != Some(url) {
            return Err(self.transport.protocol("insert media", format!("the BMC reports {status:?} afterwards")));
        }
        Ok(())
    }

    async fn eject_media(&self) -> BmcResult<()> {
        let (path, media) = self.virtual_cd().await?;
        if media["Inserted"].as_bool() != Some(true) && text(&media["Image"]).is_none() {
            return Ok(());
        }
        match parse::media_action(&media, "EjectMedia") {
            Some(target) => {
                self.transport.post_action("eject media", &target, &json!({})).await?;
            }
            None => {
                self.transport.patch("eject media", &path, &json!({"Image": null, "Inserted": false})).await?;
            }
        }
        let status = self.media_status().await?;
        if status.inserted {
            return Err(self.transport.protocol("eject media", format!("the BMC reports {status:?} afterwards")));
        }
        Ok(())
    }

    async fn media_status(&self) -> BmcResult<MediaStatus> {
        let (_, media) = self.virtual_cd().await?;
        Ok(parse::media_status(&media))
    }

    /// The system, manager and chassis are each read once, and what hangs below them is read
    /// from those answers. One request at a time: a BMC serves few at once.
    async fn read_model(&self) -> BmcResult<ReadModel> {
        let system = self.system().await?;
        let manager = self.optional(self.layout.manager.as_deref()).await?;
        let chassis = self.optional(self.layout.chassis.as_deref()).await?;
        let health = parse::health(&system);
        Ok(ReadModel {
            identity: Section::Present(parse::identity(&system, manager.as_ref())),
            health: health.map_or_else(|| Section::Absent("no Status.Health".into()), Section::Present),
            power: match parse::power_state(&system) {
                Ok(p) => Section::Present(p),
                Err(e) => Section::Absent(self.transport.protocol("power status", e).to_string()),
            },
            temperatures: self.temperatures(chassis.as_ref()).await?,
            power_watts: self.power_watts(chassis.as_ref()).await?,
            firmware: self.firmware().await?,
            logs: self.logs(&system, manager.as_ref()).await?,
        })
    }

    async fn close(&self) {
        self.transport.logout().await;
    }

    async fn update_firmware(&self, update: &FirmwareUpdate) -> BmcResult<UpdateOutcome> {
        self.apply_update(update).await
    }

    async fn bios(&self) -> BmcResult<BiosSettings> {
        let (_, bios) = self.system_resource("Bios", "BIOS settings").await?;
        let current = parse::attributes(&bios);
        let pending = match parse::settings_object(&bios) {
            Some(settings) => parse::attributes(&self.transport.get(&settings).await?.body)
                .into_iter()
                .filter(|(name, value)| current.get(name) != Some(value))
                .collect(),
            None => Default::default(),
        };
        Ok(BiosSettings { current, pending, registry: text(&bios["AttributeRegistry"]) })
    }

    async fn set_bios(&self, attributes: &std::collections::BTreeMap<String, BiosValue>) -> BmcResult<()> {
        const OPERATION: &str = "BIOS settings";
        let (path, bios) = self.system_resource("Bios", OPERATION).await?;
        // Written to the settings object where the BMC has one (applied at the next boot),
        // to the resource itself otherwise.
        let target = parse::settings_object(&bios).unwrap_or(path);
        self.transport.patch(OPERATION, &target, &json!({"Attributes": attributes})).await?;
        Ok(())
    }

    async fn secure_boot(&self) -> BmcResult<SecureBootState> {
        let (_, secure) = self.system_resource("SecureBoot", "Secure Boot").await?;
        let enabled = secure["SecureBootEnable"]
            .as_bool()
            .ok_or_else(|| self.transport.protocol("Secure Boot", "SecureBoot has no SecureBootEnable"))?;
        Ok(SecureBootState {
            enabled,
            current_boot: text(&secure["SecureBootCurrentBoot"]),
            mode: text(&secure["SecureBootMode"]),
        })
    }

    async fn set_secure_boot(&self, enabled: bool) -> BmcResult<()> {
        const OPERATION: &str = "Secure Boot";
        let (path, _) = self.system_resource("SecureBoot", OPERATION).await?;
        self.transport.patch(OPERATION, &path, &json!({"SecureBootEnable": enabled})).await?;
        Ok(())
    }

    async fn reset_bios(&self) -> BmcResult<()> {
        const OPERATION: &str = "BIOS reset";
        let (_, bios) = self.system_resource("Bios", OPERATION).await?;
        let target = text(&bios["Actions"]["#Bios.ResetBios"]["target"])
            .ok_or_else(|| self.transport.unsupported(OPERATION, "the Bios resource has no ResetBios action"))?;
        self.transport.post_action(OPERATION, &target, &json!({})).await?;
        Ok(())
    }

    async fn rotate_password(&self, user: &str, new: &Secret) -> BmcResult<()> {
        let account = self.account(user).await?;
        self.transport.patch("password rotation", &account, &json!({"Password": new.expose()})).await?;
        // Prove the new password before anyone relies on it.
        let rotated = Credential { user: user.to_owned(), password: new.clone() };
        let probe = self.transport.with_credential(rotated.clone()).await;
        probe.get(&self.layout.system).await?;
        probe.logout().await;
        if self.transport.user().await == user {
            self.transport.set_credential(rotated).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowed(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn reset_plans_follow_what_the_bmc_allows() {
        use PowerAction as A;
        use PowerState::{Off, On};
        let sushy =
            allowed(&["On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"]);
        assert_eq!(reset_plan(A::On, On, &sushy).unwrap(), vec![]);
        assert_eq!(reset_plan(A::Off, Off, &sushy).unwrap(), vec![]);
        assert_eq!(reset_plan(A::Cycle, Off, &sushy).unwrap(), vec![("On", On)]);
        assert_eq!(reset_plan(A::Reset, Off, &sushy).unwrap(), vec![("On", On)]);
        // No PowerCycle: a cycle is off then on.
        assert_eq!(reset_plan(A::Cycle, On, &sushy).unwrap(), vec![("ForceOff", Off), ("On", On)]);
        assert_eq!(reset_plan(A::Reset, On, &sushy).unwrap(), vec![("ForceRestart", On)]);
        let full = allowed(&["On", "ForceOff", "PowerCycle"]);
        assert_eq!(reset_plan(A::Cycle, On, &full).unwrap(), vec![("PowerCycle", On)]);
        assert_eq!(reset_plan(A::Reset, On, &full).unwrap(), vec![("PowerCycle", On)]);
        let graceful_only = allowed(&["On", "GracefulShutdown"]);
        assert_eq!(reset_plan(A::Off, On, &graceful_only).unwrap(), vec![("GracefulShutdown", Off)]);
        assert!(reset_plan(A::On, Off, &allowed(&["ForceOff"])).unwrap_err().contains("neither On nor ForceOn"));
    }
}
