//! `metal-firmware` over IPMI (OpenIPMI's ipmi_sim): the BMC's firmware revision from Get
//! Device ID, named `bmc` as on every other path, checked against a baseline; a reflash
//! through IPMI ends UPDATE_FAILED with the reason (IPMI has no standard update).

use std::process::Output;

use metal_tests::emulators::{Files, IpmiSim};
use serde_json::{Value, json};
use sha2::Digest as _;

fn firmware(sim: &IpmiSim, args: &[&str]) -> Output {
    let pass = sim.dir.path().join("firmware.pass");
    std::fs::write(&pass, "password").unwrap();
    std::process::Command::new(env!("CARGO_BIN_EXE_metal-firmware"))
        .args(args)
        .args(["--bmc-protocol", "ipmi", "--bmc-address", &format!("127.0.0.1:{}", sim.port), "--bmc-user", "admin"])
        .arg("--bmc-password-file")
        .arg(&pass)
        .output()
        .unwrap()
}

#[test]
fn ipmi_inventory_check_and_no_reflash() {
    let sim = IpmiSim::start();
    let o = firmware(&sim, &["inventory"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let inventory: Value = serde_json::from_slice(&o.stdout).unwrap();
    let bmc = inventory.as_array().unwrap().iter().find(|v| v["component"] == "bmc").expect("a bmc version");
    assert_eq!(bmc["source"], "ipmi");
    let version = bmc["version"].as_str().unwrap().to_owned();
    assert!(version.contains('.'), "ipmitool's major.minor: {version}");

    let baseline = sim.dir.path().join("baseline.json");
    std::fs::write(&baseline, json!({"bmc": version}).to_string()).unwrap();
    let o = firmware(&sim, &["check", "--node", "n1", "--baseline", baseline.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));

    let files = Files::start();
    let image = [0x42u8; 4096];
    std::fs::write(files.dir.path().join("bmc.bin"), image).unwrap();
    let sha256 = hex::encode(sha2::Sha256::digest(image));
    let policy = sim.dir.path().join("policy.json");
    std::fs::write(
        &policy,
        json!({"firmwareBaseline": {"bmc": "99.00"}, "firmwareRemediation": "reflash",
               "firmwareImages": {"bmc": {"url": format!("{}/bmc.bin", files.url), "sha256": sha256}}})
        .to_string(),
    )
    .unwrap();
    let o = firmware(&sim, &["reflash", "--node", "n1", "--allow-http", "--policy", policy.to_str().unwrap()]);
    let outcome: Value = serde_json::from_slice(&o.stdout).unwrap_or(Value::Null);
    assert_eq!((o.status.code(), outcome["code"].as_str()), (Some(1), Some("UPDATE_FAILED")), "{outcome:#}");
    let reason = outcome["reason"].as_str().unwrap();
    assert!(reason.contains("IPMI has no standard firmware update"), "{reason}");
}
