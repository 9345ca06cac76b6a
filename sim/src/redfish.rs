//! A simulated machine's BMC, speaking Redfish over HTTP on its own loopback address (one
//! listener per BMC, all in this process). What metal-bmc's client uses and real BMCs offer:
//! the service root (unauthenticated), one system with power (Reset, read back), a boot
//! override (Once or Continuous), a manager with a virtual CD, a chassis with Thermal and
//! Power readings, an UpdateService with a FirmwareInventory and SimpleUpdate (the BMC
//! fetches the image URI; a metal-sim firmware image says which component and version it
//! carries, and `Targets` must name that component), and an AccountService whose password can be changed. Basic authentication on
//! everything but the root, as sushy-tools does, and a SessionService with as few session
//! slots as a small BMC has ([`SESSION_SLOTS`]): a client that never logs out runs out of
//! them. Faults change what it answers.
//!
//! A BMC of the `sushy-tools` flavor has the quirks sushy-tools 2.2.0 showed on these
//! machines (the emulator notes): no `PowerCycle` among its reset types, a boot override
//! asked `Once` stored and reported `Continuous`, the virtual CD under the system instead of
//! the manager, and a power state that reads the old value for a while after a reset.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use serde_json::{Value, json};

use crate::fault::Fault;
use crate::machine::{BootSource, Flavor, Machine, SUSHY_POWER_LAG};

/// The BMC's one account.
pub const USER: &str = "admin";
/// Sessions a BMC keeps open at once (iDRAC and iLO keep a handful); one more is refused.
pub const SESSION_SLOTS: usize = 8;
/// The session collection.
const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
/// The first line of a simulated firmware image: `metal-sim-firmware COMPONENT VERSION`.
pub const FIRMWARE_MAGIC: &str = "metal-sim-firmware";

const RESET_TYPES: [&str; 5] = ["On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle"];
/// sushy-tools' (libvirt driver) reset types.
const SUSHY_RESET_TYPES: [&str; 7] =
    ["On", "ForceOff", "GracefulShutdown", "GracefulRestart", "ForceRestart", "Nmi", "ForceOn"];

impl Flavor {
    fn reset_types(self) -> &'static [&'static str] {
        match self {
            Flavor::Standard => &RESET_TYPES,
            Flavor::SushyTools => &SUSHY_RESET_TYPES,
        }
    }

    /// Where the virtual CD collection is.
    fn media_collection(self) -> &'static str {
        match self {
            Flavor::Standard => "/redfish/v1/Managers/1/VirtualMedia",
            Flavor::SushyTools => "/redfish/v1/Systems/1/VirtualMedia",
        }
    }
}

/// Serves `machine`'s BMC on `listener` until the runtime ends.
pub async fn serve(machine: Arc<Machine>, listener: tokio::net::TcpListener) {
    let router = axum::Router::new().fallback(handle).with_state(machine);
    if let Err(e) = axum::serve(listener, router).await {
        tracing::error!(error = %e, "a simulated BMC stopped");
    }
}

fn error(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"code": "Base.1.0.GeneralError", "message": message}});
    (status, axum::Json(body)).into_response()
}

fn authorized(machine: &Machine, headers: &HeaderMap) -> bool {
    if let Some(token) = headers.get("x-auth-token").and_then(|v| v.to_str().ok()) {
        return machine.state().sessions.contains(token);
    }
    let Some(basic) = headers.get("authorization").and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Basic "))
    else {
        return false;
    };
    let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(basic.trim()) else { return false };
    let expected = format!("{USER}:{}", machine.state().bmc_password);
    decoded == expected.as_bytes()
}

async fn handle(
    State(machine): State<Arc<Machine>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if machine.faults.has(Fault::BmcTimeout) {
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    if machine.faults.has(Fault::BmcUnavailable) {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the BMC is busy");
    }
    let path = uri.path().trim_end_matches('/');
    if path == "/redfish/v1" && method == Method::GET {
        return axum::Json(root(machine.flavor)).into_response();
    }
    if path == SESSIONS && method == Method::POST && machine.flavor == Flavor::Standard {
        return log_in(&machine, &body);
    }
    if !authorized(&machine, &headers) {
        return error(StatusCode::UNAUTHORIZED, "authentication required");
    }
    let body: Value = if body.is_empty() {
        Value::Null
    } else {
        match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(e) => return error(StatusCode::BAD_REQUEST, &format!("the body is not JSON: {e}")),
        }
    };
    if let Some(token) = path.strip_prefix(SESSIONS).and_then(|rest| rest.strip_prefix('/'))
        && method == Method::DELETE
    {
        return match machine.state().sessions.remove(token) {
            true => StatusCode::NO_CONTENT.into_response(),
            false => error(StatusCode::NOT_FOUND, "no such session"),
        };
    }
    if let Some(rest) = path.strip_prefix(machine.flavor.media_collection()) {
        return virtual_media(&machine, &method, rest, &body);
    }
    match (method, path) {
        (Method::GET, "/redfish/v1/Systems") => collection("/redfish/v1/Systems", &["1"]),
        (Method::GET, "/redfish/v1/Systems/1") => axum::Json(system(&machine)).into_response(),
        (Method::PATCH, "/redfish/v1/Systems/1") => set_boot(&machine, &body),
        (Method::POST, "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset") => reset(&machine, &body),
        (Method::GET, BIOS) => axum::Json(bios(&machine, false)).into_response(),
        (Method::GET, BIOS_SETTINGS) => axum::Json(bios(&machine, true)).into_response(),
        (Method::PATCH, BIOS_SETTINGS) => set_bios(&machine, &body),
        (Method::POST, BIOS_RESET) => reset_bios(&machine),
        (Method::GET, SECURE_BOOT) => axum::Json(secure_boot(&machine)).into_response(),
        (Method::PATCH, SECURE_BOOT) => set_secure_boot(&machine, &body),
        (Method::GET, "/redfish/v1/Managers") => collection("/redfish/v1/Managers", &["1"]),
        (Method::GET, "/redfish/v1/Managers/1") => axum::Json(manager(&machine)).into_response(),
        (Method::GET, "/redfish/v1/Chassis") => collection("/redfish/v1/Chassis", &["1"]),
        (Method::GET, "/redfish/v1/Chassis/1") => axum::Json(chassis()).into_response(),
        (Method::GET, "/redfish/v1/Chassis/1/Thermal") => axum::Json(thermal(&machine)).into_response(),
        (Method::GET, "/redfish/v1/Chassis/1/Power") => axum::Json(power(&machine)).into_response(),
        (Method::GET, "/redfish/v1/UpdateService") => axum::Json(update_service()).into_response(),
        (Method::GET, "/redfish/v1/UpdateService/FirmwareInventory") => {
            collection("/redfish/v1/UpdateService/FirmwareInventory", &["BMC", "BIOS"])
        }
        (Method::GET, "/redfish/v1/UpdateService/FirmwareInventory/BMC") => {
            let version = machine.state().bmc_version.clone();
            axum::Json(firmware_item("BMC", "BMC Firmware", &version)).into_response()
        }
        (Method::GET, "/redfish/v1/UpdateService/FirmwareInventory/BIOS") => {
            axum::Json(firmware_item("BIOS", "System BIOS", &machine.bios_version())).into_response()
        }
        (Method::POST, "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate") => {
            simple_update(&machine, &body).await
        }
        (Method::GET, "/redfish/v1/AccountService") => axum::Json(json!({
            "@odata.id": "/redfish/v1/AccountService", "Id": "AccountService",
            "Accounts": {"@odata.id": "/redfish/v1/AccountService/Accounts"}
        }))
        .into_response(),
        (Method::GET, "/redfish/v1/AccountService/Accounts") => {
            collection("/redfish/v1/AccountService/Accounts", &["1"])
        }
        (Method::GET, "/redfish/v1/AccountService/Accounts/1") => axum::Json(json!({
            "@odata.id": "/redfish/v1/AccountService/Accounts/1", "Id": "1", "UserName": USER,
            "RoleId": "Administrator", "Enabled": true
        }))
        .into_response(),
        (Method::PATCH, "/redfish/v1/AccountService/Accounts/1") => rotate(&machine, &body),
        (Method::GET | Method::PATCH | Method::POST, _) => error(StatusCode::NOT_FOUND, &format!("no resource {path}")),
        _ => error(StatusCode::METHOD_NOT_ALLOWED, "method not allowed"),
    }
}

/// The virtual CD's resources under the flavor's collection (`rest` is what follows it).
fn virtual_media(machine: &Machine, method: &Method, rest: &str, body: &Value) -> Response {
    let at = machine.flavor.media_collection();
    match (method, rest) {
        (&Method::GET, "") => collection(at, &["Cd"]),
        (&Method::GET, "/Cd") => axum::Json(cd(machine)).into_response(),
        (&Method::POST, "/Cd/Actions/VirtualMedia.InsertMedia") => match body["Image"].as_str() {
            Some(image) if !image.is_empty() => {
                machine.state().media = Some(image.to_owned());
                StatusCode::NO_CONTENT.into_response()
            }
            _ => error(StatusCode::BAD_REQUEST, "InsertMedia needs an Image"),
        },
        (&Method::POST, "/Cd/Actions/VirtualMedia.EjectMedia") => {
            machine.state().media = None;
            StatusCode::NO_CONTENT.into_response()
        }
        _ => error(StatusCode::NOT_FOUND, &format!("no resource {at}{rest}")),
    }
}

fn root(flavor: Flavor) -> Value {
    let mut root = json!({
        "@odata.id": "/redfish/v1", "Id": "RootService", "Name": "metal-sim BMC", "RedfishVersion": "1.15.0",
        "Systems": {"@odata.id": "/redfish/v1/Systems"},
        "Managers": {"@odata.id": "/redfish/v1/Managers"},
        "Chassis": {"@odata.id": "/redfish/v1/Chassis"},
        "UpdateService": {"@odata.id": "/redfish/v1/UpdateService"},
        "AccountService": {"@odata.id": "/redfish/v1/AccountService"}
    });
    // sushy-tools has no SessionService.
    if flavor == Flavor::Standard {
        root["SessionService"] = json!({"@odata.id": "/redfish/v1/SessionService"});
        root["Links"] = json!({"Sessions": {"@odata.id": SESSIONS}});
    }
    root
}

/// Opens a session for the account's user and password, while a slot is free.
fn log_in(machine: &Machine, body: &[u8]) -> Response {
    let login: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let mut state = machine.state();
    if login["UserName"].as_str() != Some(USER) || login["Password"].as_str() != Some(state.bmc_password.as_str()) {
        return error(StatusCode::UNAUTHORIZED, "wrong user name or password");
    }
    if state.sessions.len() >= SESSION_SLOTS {
        return error(StatusCode::SERVICE_UNAVAILABLE, "every session slot is taken: log out of one first");
    }
    let token = hex::encode(rand::random::<[u8; 16]>());
    state.sessions.insert(token.clone());
    state.sessions_opened += 1;
    let location = format!("{SESSIONS}/{token}");
    let mut answer =
        (StatusCode::CREATED, axum::Json(json!({"@odata.id": location, "UserName": USER}))).into_response();
    let headers = answer.headers_mut();
    for (name, value) in [("x-auth-token", &token), ("location", &location)] {
        if let Ok(value) = axum::http::HeaderValue::from_str(value) {
            headers.insert(name, value);
        }
    }
    answer
}

fn collection(at: &str, ids: &[&str]) -> Response {
    let members: Vec<Value> = ids.iter().map(|id| json!({"@odata.id": format!("{at}/{id}")})).collect();
    axum::Json(json!({"@odata.id": at, "Members@odata.count": members.len(), "Members": members})).into_response()
}

fn system(machine: &Machine) -> Value {
    let state = machine.state().clone();
    // The BMC's word, in real time as a BMC's is (metal-bmc waits for it in real time).
    let read = match machine.flavor {
        Flavor::Standard => state.power_on,
        Flavor::SushyTools => state.power_read_with_lag(SUSHY_POWER_LAG),
    };
    let on = read != machine.faults.has(Fault::BmcLiesAboutPower);
    let (target, enabled) = match state.boot_override {
        Some((source, true)) => (source.redfish(), "Once"),
        Some((source, false)) => (source.redfish(), "Continuous"),
        None => ("None", "Disabled"),
    };
    let mut system = json!({
        "@odata.id": "/redfish/v1/Systems/1", "Id": "1", "Name": machine.id,
        "Manufacturer": "metal-sim", "Model": "Simulated Server", "SerialNumber": machine.hardware.serial,
        "UUID": machine.hardware.uuid, "BiosVersion": machine.bios_version(),
        "PowerState": if on { "On" } else { "Off" },
        "Status": {"State": "Enabled", "Health": "OK"},
        "ProcessorSummary": {"Count": 1, "CoreCount": machine.hardware.cores},
        "MemorySummary": {"TotalSystemMemoryGiB": machine.hardware.memory_bytes >> 30},
        "Boot": {
            "BootSourceOverrideTarget": target, "BootSourceOverrideEnabled": enabled,
            "BootSourceOverrideTarget@Redfish.AllowableValues": ["None", "Pxe", "Hdd", "Cd", "BiosSetup"]
        },
        "Actions": {"#ComputerSystem.Reset": {
            "target": "/redfish/v1/Systems/1/Actions/ComputerSystem.Reset",
            "ResetType@Redfish.AllowableValues": machine.flavor.reset_types()
        }},
        "Links": {"ManagedBy": [{"@odata.id": "/redfish/v1/Managers/1"}], "Chassis": [{"@odata.id": "/redfish/v1/Chassis/1"}]},
        "Bios": {"@odata.id": BIOS},
        "SecureBoot": {"@odata.id": SECURE_BOOT}
    });
    if machine.flavor == Flavor::SushyTools {
        system["VirtualMedia"] = json!({"@odata.id": Flavor::SushyTools.media_collection()});
    }
    system
}

const BIOS: &str = "/redfish/v1/Systems/1/Bios";
const BIOS_SETTINGS: &str = "/redfish/v1/Systems/1/Bios/Settings";
const BIOS_RESET: &str = "/redfish/v1/Systems/1/Bios/Actions/Bios.ResetBios";

/// The `Bios` resource (the attributes in effect) or its settings object (with what waits
/// for the next power-on).
fn bios(machine: &Machine, settings: bool) -> Value {
    let state = machine.state();
    let mut attributes = state.bios.clone();
    if settings {
        attributes.extend(state.bios_pending.clone());
        return json!({"@odata.id": BIOS_SETTINGS, "Id": "Settings", "Name": "BIOS Pending Settings",
                      "AttributeRegistry": BIOS_REGISTRY, "Attributes": attributes});
    }
    json!({
        "@odata.id": BIOS, "Id": "Bios", "Name": "BIOS Current Settings", "AttributeRegistry": BIOS_REGISTRY,
        "Attributes": attributes,
        "@Redfish.Settings": {"SettingsObject": {"@odata.id": BIOS_SETTINGS}, "SupportedApplyTimes": ["OnReset"]},
        "Actions": {"#Bios.ResetBios": {"target": BIOS_RESET}}
    })
}

const BIOS_REGISTRY: &str = "BiosAttributeRegistryMetalSim.v1_0_0";

/// Refused while a setup password locks the settings (the `bios-locked` fault).
fn bios_locked(machine: &Machine) -> Option<Response> {
    machine.faults.has(Fault::BiosLocked).then(|| {
        error(StatusCode::FORBIDDEN, "the BIOS settings are locked by a setup password; enter it in BIOS setup first")
    })
}

/// Writes attributes for the next power-on: only ones the machine has, of the type it has.
fn set_bios(machine: &Machine, body: &Value) -> Response {
    if let Some(locked) = bios_locked(machine) {
        return locked;
    }
    let Some(attributes) = body["Attributes"].as_object() else {
        return error(StatusCode::BAD_REQUEST, "the body has no Attributes object");
    };
    let mut state = machine.state();
    for (name, value) in attributes {
        let same_type = |current: &Value| std::mem::discriminant(current) == std::mem::discriminant(value);
        match state.bios.get(name) {
            None => return error(StatusCode::BAD_REQUEST, &format!("no BIOS attribute {name}")),
            Some(current) if !same_type(current) => {
                return error(StatusCode::BAD_REQUEST, &format!("BIOS attribute {name} takes a value like {current}"));
            }
            Some(_) => {}
        }
    }
    state.bios_pending.extend(attributes.iter().map(|(k, v)| (k.clone(), v.clone())));
    drop(state);
    machine.say(&format!("BMC: BIOS settings written for the next boot: {}", Value::Object(attributes.clone())));
    StatusCode::NO_CONTENT.into_response()
}

const SECURE_BOOT: &str = "/redfish/v1/Systems/1/SecureBoot";

fn secure_boot(machine: &Machine) -> Value {
    let state = machine.state();
    let shown = |on: bool| if on { "Enabled" } else { "Disabled" };
    json!({"@odata.id": SECURE_BOOT, "Id": "SecureBoot", "Name": "UEFI Secure Boot",
           "SecureBootEnable": state.secure_boot, "SecureBootCurrentBoot": shown(state.secure_boot_booted),
           "SecureBootMode": "DeployedMode"})
}

/// Secure Boot's switch, for the next boot (refused while a setup password locks it).
fn set_secure_boot(machine: &Machine, body: &Value) -> Response {
    if let Some(locked) = bios_locked(machine) {
        return locked;
    }
    let Some(enabled) = body["SecureBootEnable"].as_bool() else {
        return error(StatusCode::BAD_REQUEST, "SecureBootEnable must be a boolean");
    };
    machine.state().secure_boot = enabled;
    machine.say(&format!("BMC: Secure Boot {} at the next boot", if enabled { "on" } else { "off" }));
    StatusCode::NO_CONTENT.into_response()
}

/// The vendor's defaults, applied at the next power-on.
fn reset_bios(machine: &Machine) -> Response {
    if let Some(locked) = bios_locked(machine) {
        return locked;
    }
    machine.state().bios_pending = crate::machine::bios_defaults();
    machine.say("BMC: BIOS reset to defaults at the next boot");
    StatusCode::NO_CONTENT.into_response()
}

fn set_boot(machine: &Machine, body: &Value) -> Response {
    let boot = &body["Boot"];
    let mut state = machine.state();
    let (current_target, current_once) = state.boot_override.map_or((None, true), |(s, once)| (Some(s), once));
    let once = match boot["BootSourceOverrideEnabled"].as_str() {
        None => current_once,
        // sushy-tools stores (and reports) a Once override as Continuous.
        Some("Once") => machine.flavor == Flavor::Standard,
        Some("Continuous") => false,
        Some("Disabled") => {
            state.boot_override = None;
            return StatusCode::NO_CONTENT.into_response();
        }
        Some(other) => return error(StatusCode::BAD_REQUEST, &format!("BootSourceOverrideEnabled {other:?}")),
    };
    let target = match boot["BootSourceOverrideTarget"].as_str() {
        None => current_target,
        Some("None") => None,
        Some(name) => match BootSource::from_redfish(name) {
            Some(source) => Some(source),
            None => return error(StatusCode::BAD_REQUEST, &format!("BootSourceOverrideTarget {name:?}")),
        },
    };
    state.boot_override = target.map(|t| (t, once));
    StatusCode::NO_CONTENT.into_response()
}

fn reset(machine: &Arc<Machine>, body: &Value) -> Response {
    let Some(kind) = body["ResetType"].as_str().filter(|k| machine.flavor.reset_types().contains(k)) else {
        return error(StatusCode::BAD_REQUEST, &format!("ResetType {} is not allowed", body["ResetType"]));
    };
    machine.say(&format!("BMC: reset {kind}"));
    match kind {
        "On" | "ForceOn" => machine.power_on(),
        "ForceOff" | "GracefulShutdown" => machine.power_off(),
        "Nmi" => {}
        _ => {
            machine.power_off();
            machine.power_on();
        }
    }
    StatusCode::NO_CONTENT.into_response()
}

fn manager(machine: &Machine) -> Value {
    let mut manager = json!({
        "@odata.id": "/redfish/v1/Managers/1", "Id": "1", "Name": "metal-sim BMC",
        "FirmwareVersion": machine.state().bmc_version, "Status": {"State": "Enabled", "Health": "OK"}
    });
    if machine.flavor == Flavor::Standard {
        manager["VirtualMedia"] = json!({"@odata.id": Flavor::Standard.media_collection()});
    }
    manager
}

fn cd(machine: &Machine) -> Value {
    let media = machine.state().media.clone();
    let at = format!("{}/Cd", machine.flavor.media_collection());
    json!({
        "@odata.id": at, "Id": "Cd", "Name": "Virtual CD",
        "MediaTypes": ["CD", "DVD"], "Inserted": media.is_some(), "Image": media, "WriteProtected": true,
        "Actions": {
            "#VirtualMedia.InsertMedia": {"target": format!("{at}/Actions/VirtualMedia.InsertMedia")},
            "#VirtualMedia.EjectMedia": {"target": format!("{at}/Actions/VirtualMedia.EjectMedia")}
        }
    })
}

fn chassis() -> Value {
    json!({
        "@odata.id": "/redfish/v1/Chassis/1", "Id": "1", "Name": "Chassis",
        "Thermal": {"@odata.id": "/redfish/v1/Chassis/1/Thermal"},
        "Power": {"@odata.id": "/redfish/v1/Chassis/1/Power"}
    })
}

fn thermal(machine: &Machine) -> Value {
    let celsius = if machine.state().power_on { 41.0 } else { 24.0 };
    json!({"@odata.id": "/redfish/v1/Chassis/1/Thermal", "Temperatures": [
        {"Name": "CPU1 Temp", "ReadingCelsius": celsius, "UpperThresholdCritical": 95.0},
        {"Name": "Inlet Temp", "ReadingCelsius": 22.0, "UpperThresholdCritical": 45.0}
    ]})
}

fn power(machine: &Machine) -> Value {
    let watts = if machine.state().power_on { 310.0 } else { 12.0 };
    json!({"@odata.id": "/redfish/v1/Chassis/1/Power", "PowerControl": [{"PowerConsumedWatts": watts}]})
}

fn update_service() -> Value {
    json!({
        "@odata.id": "/redfish/v1/UpdateService", "Id": "UpdateService", "ServiceEnabled": true,
        "FirmwareInventory": {"@odata.id": "/redfish/v1/UpdateService/FirmwareInventory"},
        "Actions": {"#UpdateService.SimpleUpdate": {
            "target": "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
            "TransferProtocol@Redfish.AllowableValues": ["HTTP", "HTTPS"]
        }}
    })
}

fn firmware_item(id: &str, name: &str, version: &str) -> Value {
    json!({
        "@odata.id": format!("/redfish/v1/UpdateService/FirmwareInventory/{id}"), "Id": id, "Name": name,
        "Version": version, "Updateable": true, "Status": {"State": "Enabled", "Health": "OK"}
    })
}

/// Fetches the image and applies what its first line says (`metal-sim-firmware bios 2.1.0`).
async fn simple_update(machine: &Machine, body: &Value) -> Response {
    let Some(uri) = body["ImageURI"].as_str() else {
        return error(StatusCode::BAD_REQUEST, "SimpleUpdate needs an ImageURI");
    };
    let image = match reqwest::get(uri).await.and_then(reqwest::Response::error_for_status) {
        Ok(answer) => answer.text().await.unwrap_or_default(),
        Err(e) => return error(StatusCode::BAD_REQUEST, &format!("cannot fetch {uri}: {e}")),
    };
    let words: Vec<&str> = image.lines().next().unwrap_or_default().split_whitespace().collect();
    let [FIRMWARE_MAGIC, component, version] = words.as_slice() else {
        return error(StatusCode::BAD_REQUEST, &format!("{uri} is not a firmware image for this BMC"));
    };
    if let Err(problem) = check_targets(component, &body["Targets"]) {
        return error(StatusCode::BAD_REQUEST, &problem);
    }
    machine.say(&format!("BMC: firmware update of {component} to {version}"));
    match *component {
        "bmc" => machine.state().bmc_version = (*version).to_owned(),
        "bios" if *version == machine.hardware.bios_version => machine.faults.set(Fault::FirmwareDrift, false),
        "bios" => return error(StatusCode::BAD_REQUEST, "this BIOS image does not fit this machine"),
        other => return error(StatusCode::BAD_REQUEST, &format!("no component {other:?}")),
    }
    StatusCode::NO_CONTENT.into_response()
}

/// The resources an image for `component` applies to: its FirmwareInventory item and the
/// resource that owns it (what a client names in SimpleUpdate's `Targets`).
fn component_resources(component: &str) -> &'static [&'static str] {
    match component {
        "bmc" => &["/redfish/v1/Managers/1", "/redfish/v1/UpdateService/FirmwareInventory/BMC"],
        "bios" => &["/redfish/v1/Systems/1", "/redfish/v1/UpdateService/FirmwareInventory/BIOS"],
        _ => &[],
    }
}

/// Checks SimpleUpdate's `Targets` (absent or empty: the BMC picks, as the image says)
/// against the image's component, as a BMC that will not flash one component's image onto
/// another does.
fn check_targets(component: &str, targets: &Value) -> Result<(), String> {
    let listed = match targets {
        Value::Null => return Ok(()),
        Value::Array(list) => list,
        _ => return Err("Targets must be a list of resource paths".into()),
    };
    for target in listed {
        let Some(path) = target.as_str() else { return Err(format!("Targets holds {target}, not a resource path")) };
        if !component_resources(component).contains(&path.trim_end_matches('/')) {
            return Err(format!("the image is for the {component}, and Targets names {path}"));
        }
    }
    Ok(())
}

fn rotate(machine: &Machine, body: &Value) -> Response {
    if machine.faults.has(Fault::RefuseRotation) {
        return error(StatusCode::BAD_REQUEST, "the password does not meet the BMC's policy");
    }
    match body["Password"].as_str() {
        Some(password) if !password.is_empty() => {
            machine.state().bmc_password = password.to_owned();
            machine.say("BMC: the account's password was changed");
            StatusCode::NO_CONTENT.into_response()
        }
        _ => error(StatusCode::BAD_REQUEST, "only Password can be changed"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_goes_only_to_the_component_it_is_for() {
        assert_eq!(check_targets("bios", &Value::Null), Ok(()));
        assert_eq!(check_targets("bios", &json!([])), Ok(()));
        assert_eq!(check_targets("bios", &json!(["/redfish/v1/Systems/1"])), Ok(()));
        assert_eq!(check_targets("bmc", &json!(["/redfish/v1/UpdateService/FirmwareInventory/BMC/"])), Ok(()));
        let wrong = check_targets("bios", &json!(["/redfish/v1/Systems/1", "/redfish/v1/Managers/1"]));
        assert_eq!(wrong, Err("the image is for the bios, and Targets names /redfish/v1/Managers/1".into()));
        assert!(check_targets("bmc", &json!("/redfish/v1/Managers/1")).unwrap_err().contains("a list"));
        assert!(check_targets("bmc", &json!([7])).unwrap_err().contains("not a resource path"));
    }
}
