//! The Redfish readers against real-world payloads: DMTF mockup-derived samples and Dell
//! iDRAC samples (fixtures/redfish/README.md says where they come from).

use metal_bmc::model::PowerState;
use metal_bmc::redfish::parse;
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/redfish/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn dmtf_system_and_manager() {
    let system = fixture("system");
    assert_eq!(parse::power_state(&system), Ok(PowerState::On));
    let (target, allowed, info) = parse::reset_action(&system).unwrap();
    assert_eq!(target, "/redfish/v1/Systems/437XR1138R2/Actions/ComputerSystem.Reset");
    assert!(allowed.contains(&"ForceRestart".to_owned()) && !allowed.contains(&"PowerCycle".to_owned()));
    assert_eq!(info, None);
    assert!(parse::boot_targets(&system).contains(&"BiosSetup".to_owned()));
    let identity = parse::identity(&system, Some(&fixture("manager")));
    assert_eq!(identity.manufacturer.as_deref(), Some("Contoso"));
    assert_eq!(identity.serial.as_deref(), Some("437XR1138R2"));
    assert_eq!(identity.bios_version.as_deref(), Some("P79 v1.45 (12/06/2017)"));
    assert_eq!(identity.bmc_version.as_deref(), Some("1.00"));
    assert_eq!(parse::health(&system).as_deref(), Some("OK"));
    // The newer schema version reads the same.
    assert_eq!(parse::identity(&fixture("systemv1_20"), None).uuid, identity.uuid);
}

#[test]
fn idrac_system_lists_power_cycle_and_its_manager_version() {
    let system = fixture("idrac-system");
    assert_eq!(parse::power_state(&system), Ok(PowerState::On));
    let (target, allowed, _) = parse::reset_action(&system).unwrap();
    assert_eq!(target, "/redfish/v1/Systems/System.Embedded.1/Actions/ComputerSystem.Reset");
    assert!(allowed.contains(&"PowerCycle".to_owned()));
    let identity = parse::identity(&system, Some(&fixture("idrac-manager")));
    assert_eq!(identity.model.as_deref(), Some("PowerEdge R640"));
    assert_eq!(identity.bmc_version.as_deref(), Some("3.34.34.34"));
    let root = fixture("idrac-root");
    assert_eq!(parse::odata_id(&root["Systems"]).as_deref(), Some("/redfish/v1/Systems"));
}

#[test]
fn thermal_power_firmware_media_and_tasks() {
    let temps = parse::temperatures(&fixture("thermal"));
    assert!(!temps.is_empty());
    assert!(temps.iter().all(|t| t.celsius > 0.0), "{temps:?}");
    // This chassis reports per supply only: the sum of what they delivered.
    let power = fixture("power");
    let delivered: f64 =
        power["PowerSupplies"].as_array().unwrap().iter().filter_map(|s| s["LastPowerOutputWatts"].as_f64()).sum();
    assert!(delivered > 0.0);
    assert_eq!(parse::power_watts(&power), Some(delivered));
    assert_eq!(parse::power_watts(&serde_json::json!({"PowerControl": [{"PowerConsumedWatts": 344.0}]})), Some(344.0));
    assert_eq!(parse::power_watts(&serde_json::json!({})), None);
    let fw = parse::firmware_component(&fixture("softwareinventory"), "/x");
    assert_eq!(fw.version, "1.45.455b66-rev4");
    let floppy = fixture("virtual_media");
    assert!(!parse::is_cd(&floppy));
    let status = parse::media_status(&floppy);
    assert!(status.inserted);
    assert_eq!(status.image.as_deref(), Some("https://www.dmtf.org/freeImages/Sardine.img"));
    assert!(parse::media_action(&floppy, "EjectMedia").unwrap().ends_with("VirtualMedia.EjectMedia"));
    assert_eq!(fixture("task")["TaskState"], "Completed");
    assert!(!parse::task_running("Completed"));
    assert!(parse::task_running(fixture("task2")["TaskState"].as_str().unwrap()));
    assert!(parse::task_running(fixture("idrac-task")["TaskState"].as_str().unwrap()));
    let cd = fixture("virtual_mediav1_6");
    assert!(parse::is_cd(&cd));
    assert!(!parse::needs_reset(&fixture("task")));
}

#[test]
fn update_tasks_that_wait_for_a_reset() {
    let task = |messages: Value| serde_json::json!({"TaskState": "Completed", "Messages": messages});
    assert!(parse::needs_reset(&task(serde_json::json!([{"MessageId": "Base.1.8.ResetRequired"}]))));
    assert!(parse::needs_reset(&task(serde_json::json!([{"MessageId": "Update.1.0.AwaitingActivation"}]))));
    assert!(!parse::needs_reset(&task(serde_json::json!([{"MessageId": "Update.1.0.UpdateSuccessful"}]))));
    assert!(parse::needs_reset(&serde_json::json!({"@Redfish.OperationApplyTime": "OnReset"})));
    assert!(parse::needs_reset(
        &serde_json::json!({"@Message.ExtendedInfo": [{"MessageId": "Base.1.0.ResetRequired"}]})
    ));
}

#[test]
fn dmtf_bios_and_its_pending_settings() {
    let bios = fixture("bios");
    let current = parse::attributes(&bios);
    assert_eq!(current.len(), 10);
    assert_eq!(current["ProcTurboMode"], "Enabled");
    assert_eq!(current["ProcCoreDisable"], 0, "numbers stay numbers");
    assert_eq!(parse::settings_object(&bios).as_deref(), Some("/redfish/v1/Systems/437XR1138R2/BIOS/Settings"));
    let pending = parse::attributes(&fixture("bios_settings"));
    assert_eq!(pending["ProcTurboMode"], "Disabled");
    assert_eq!(parse::settings_object(&fixture("bios_settings")), None, "the settings object has none of its own");
}
