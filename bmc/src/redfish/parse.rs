//! Pure readers of Redfish payloads: what the client needs out of a system, manager,
//! thermal, power, firmware, log, virtual media or task resource. Unit-tested against
//! real-world payloads (DMTF mockup-derived and Dell iDRAC samples, `bmc/tests/fixtures`).

use serde_json::Value;

use crate::model::{FirmwareComponent, Identity, LogEntry, MediaStatus, PowerState, Temperature};

/// A resource link.
pub fn odata_id(v: &Value) -> Option<String> {
    v["@odata.id"].as_str().map(str::to_owned)
}

/// The member links of a collection.
pub fn members(collection: &Value) -> Vec<String> {
    collection["Members"].as_array().into_iter().flatten().filter_map(odata_id).collect()
}

/// A non-empty string property.
pub fn text(v: &Value) -> Option<String> {
    v.as_str().filter(|s| !s.is_empty()).map(str::to_owned)
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array().into_iter().flatten().filter_map(text).collect()
}

/// A system's power state (transitions count as the state they leave).
pub fn power_state(system: &Value) -> Result<PowerState, String> {
    match system["PowerState"].as_str() {
        Some("On" | "PoweringOff" | "Paused") => Ok(PowerState::On),
        Some("Off" | "PoweringOn") => Ok(PowerState::Off),
        other => Err(format!("PowerState {other:?}")),
    }
}

/// The Reset action of a system: its target, the reset types listed inline, and the
/// ActionInfo link that lists them elsewhere.
pub fn reset_action(system: &Value) -> Option<(String, Vec<String>, Option<String>)> {
    let action = &system["Actions"]["#ComputerSystem.Reset"];
    Some((
        text(&action["target"])?,
        strings(&action["ResetType@Redfish.AllowableValues"]),
        text(&action["@Redfish.ActionInfo"]),
    ))
}

/// The reset types an ActionInfo resource allows.
pub fn action_info_reset_types(info: &Value) -> Vec<String> {
    info["Parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["Name"] == "ResetType")
        .flat_map(|p| strings(&p["AllowableValues"]))
        .collect()
}

/// The boot override targets a system lists as allowed (empty: it does not say).
pub fn boot_targets(system: &Value) -> Vec<String> {
    strings(&system["Boot"]["BootSourceOverrideTarget@Redfish.AllowableValues"])
}

/// Who the machine is, from the system and its manager.
pub fn identity(system: &Value, manager: Option<&Value>) -> Identity {
    Identity {
        manufacturer: text(&system["Manufacturer"]),
        model: text(&system["Model"]),
        serial: text(&system["SerialNumber"]),
        uuid: text(&system["UUID"]),
        bios_version: text(&system["BiosVersion"]),
        bmc_version: manager.and_then(|m| text(&m["FirmwareVersion"])),
    }
}

/// The health rollup (some BMCs spell it `HealthRollUp`), else the resource's own health.
pub fn health(resource: &Value) -> Option<String> {
    let status = &resource["Status"];
    text(&status["HealthRollup"]).or_else(|| text(&status["HealthRollUp"])).or_else(|| text(&status["Health"]))
}

/// Temperatures with a reading from a Thermal resource.
pub fn temperatures(thermal: &Value) -> Vec<Temperature> {
    thermal["Temperatures"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Temperature {
                name: text(&t["Name"]).unwrap_or_else(|| "sensor".into()),
                celsius: t["ReadingCelsius"].as_f64()?,
                upper_critical: t["UpperThresholdCritical"].as_f64(),
            })
        })
        .collect()
}

/// Power drawn, from a Power resource: its first PowerControl's consumption, else the sum of
/// what the power supplies last delivered (chassis that only report per supply).
pub fn power_watts(power: &Value) -> Option<f64> {
    if let Some(w) = power["PowerControl"][0]["PowerConsumedWatts"].as_f64() {
        return Some(w);
    }
    let supplies: Vec<f64> = power["PowerSupplies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["LastPowerOutputWatts"].as_f64())
        .collect();
    (!supplies.is_empty()).then(|| supplies.iter().sum())
}

/// One firmware inventory item.
pub fn firmware_component(item: &Value, path: &str) -> FirmwareComponent {
    FirmwareComponent {
        id: text(&item["Id"]).unwrap_or_else(|| path.to_owned()),
        name: text(&item["Name"]).unwrap_or_default(),
        version: text(&item["Version"]).unwrap_or_default(),
        updateable: item["Updateable"].as_bool(),
        resource: Some(odata_id(item).unwrap_or_else(|| path.to_owned())),
    }
}

/// The newest `limit` entries of a LogEntry collection, newest first.
pub fn log_entries(entries: &Value, limit: usize) -> Vec<LogEntry> {
    let mut out: Vec<LogEntry> = entries["Members"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| LogEntry {
            created: text(&e["Created"]),
            severity: text(&e["Severity"]),
            message: text(&e["Message"]).unwrap_or_default(),
        })
        .collect();
    out.sort_by(|a, b| b.created.cmp(&a.created));
    out.truncate(limit);
    out
}

/// Whether a virtual media device takes CDs or DVDs.
pub fn is_cd(media: &Value) -> bool {
    media["MediaTypes"].as_array().into_iter().flatten().any(|t| matches!(t.as_str(), Some("CD" | "DVD")))
}

/// What a virtual media device holds.
pub fn media_status(media: &Value) -> MediaStatus {
    MediaStatus { inserted: media["Inserted"].as_bool().unwrap_or(false), image: text(&media["Image"]) }
}

/// A media action's target (`InsertMedia`, `EjectMedia`).
pub fn media_action(media: &Value, action: &str) -> Option<String> {
    text(&media["Actions"][format!("#VirtualMedia.{action}")]["target"])
}

/// A `Bios` (or settings) resource's attributes.
pub fn attributes(bios: &Value) -> std::collections::BTreeMap<String, Value> {
    bios["Attributes"].as_object().map(|a| a.iter().map(|(k, v)| (k.clone(), v.clone())).collect()).unwrap_or_default()
}

/// Where a resource takes its settings for the next boot (`@Redfish.Settings`).
pub fn settings_object(resource: &Value) -> Option<String> {
    odata_id(&resource["@Redfish.Settings"]["SettingsObject"])
}

/// Whether a task state is still running.
pub fn task_running(state: &str) -> bool {
    matches!(state, "New" | "Starting" | "Running" | "Pending" | "Stopping" | "Suspended" | "Interrupted")
}

/// Whether a finished update task (or action answer) says the new firmware waits for a
/// reset: a `ResetRequired` or `AwaitingActivation` message, or an apply time of `OnReset`.
pub fn needs_reset(task: &Value) -> bool {
    let messages = task["Messages"].as_array().into_iter().flatten();
    let extended = task["@Message.ExtendedInfo"].as_array().into_iter().flatten();
    messages.chain(extended).filter_map(|m| m["MessageId"].as_str()).any(|id| {
        let name = id.rsplit('.').next().unwrap_or(id);
        matches!(name, "ResetRequired" | "AwaitingActivation" | "RestartRequired")
    }) || task["@Redfish.OperationApplyTime"].as_str() == Some("OnReset")
}

/// A task's messages, joined.
pub fn task_messages(task: &Value) -> String {
    let messages: Vec<&str> =
        task["Messages"].as_array().into_iter().flatten().filter_map(|m| m["Message"].as_str()).collect();
    if messages.is_empty() { "no message".to_owned() } else { messages.join("; ") }
}
