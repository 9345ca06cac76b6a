//! `metal-firmware inventory` and `check` against sushy-tools: the BMC's own version named
//! `bmc`, compliant and drifted baselines with their exit codes, no baseline as
//! INVALID_CONFIG, a refused password as a BMC failure, and a check signed with a node
//! certificate that verifies against the site CA.

use std::process::{Command, Output};

use metal_tests::emulators::{SUSHY_PASSWORD, Sushy};
use serde_json::{Value, json};

fn firmware(sushy: &Sushy, dir: &std::path::Path, password: &str, args: &[&str]) -> Output {
    let pass = dir.join("bmc.pass");
    std::fs::write(&pass, format!("{password}\n")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_metal-firmware"))
        .args(args)
        .args(["--bmc-address", &sushy.endpoint, "--bmc-user", "admin", "--tls-fingerprint", &sushy.pki.fingerprint])
        .arg("--bmc-password-file")
        .arg(&pass)
        .output()
        .unwrap()
}

fn baseline(dir: &std::path::Path, name: &str, value: Value) -> String {
    let path = dir.join(name);
    std::fs::write(&path, value.to_string()).unwrap();
    path.display().to_string()
}

#[test]
fn inventory_and_baseline_checks_against_sushy() {
    let sushy = Sushy::start();
    let dir = tempfile::tempdir().unwrap();
    let o = firmware(&sushy, dir.path(), SUSHY_PASSWORD, &["inventory"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let inventory: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(inventory, json!([{"component": "bmc", "version": "1.00", "source": "redfish"}]));

    let ok = baseline(dir.path(), "ok.json", json!({"bmc": "1.00"}));
    let o = firmware(&sushy, dir.path(), SUSHY_PASSWORD, &["check", "--node", "n1", "--baseline", &ok]);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let report: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        (&report["compliant"], &report["comparison"], &report["nodeId"]),
        (&json!(true), &json!("exact"), &json!("n1"))
    );

    let drift = baseline(dir.path(), "drift.json", json!({"bmc": "2.00", "bios": "U46 v2.1"}));
    let o = firmware(&sushy, dir.path(), SUSHY_PASSWORD, &["check", "--node", "n1", "--baseline", &drift]);
    assert_eq!(o.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("FIRMWARE_DRIFT bios: expected U46 v2.1, not found in the inventory"), "{stderr}");
    assert!(stderr.contains("FIRMWARE_DRIFT bmc: expected 2.00, found 1.00"), "{stderr}");

    let empty = baseline(dir.path(), "empty.json", json!({}));
    let o = firmware(&sushy, dir.path(), SUSHY_PASSWORD, &["check", "--node", "n1", "--baseline", &empty]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("INVALID_CONFIG"));

    let o = firmware(&sushy, dir.path(), "not-the-password", &["inventory"]);
    assert_eq!(o.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("authentication failed for user admin") && !stderr.contains("not-the-password"),
        "{stderr}"
    );
}

#[test]
fn a_signed_check_speaks_for_the_certificate_s_node() {
    use std::time::SystemTime;

    use metal_protocol::{Envelope, FirmwareReport, Role};
    use metal_tests::identity::TestIdentity;

    let sushy = Sushy::start();
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let identity = TestIdentity::issue("node-7", 3, Role::Ramdisk);
    let (key_file, cert_file, _) = identity.write(dir.path());
    let ca = &identity.ca;
    let ok = baseline(dir.path(), "ok.json", json!({"bmc": "1.00"}));
    let signing = ["--key", key_file.to_str().unwrap(), "--cert", cert_file.to_str().unwrap()];

    // In band and out of band together; this host reports no in-band BMC, so only the
    // BMC's own version counts.
    let mut args = vec!["check", "--in-band", "--baseline", &ok];
    args.extend(signing);
    let o = firmware(&sushy, dir.path(), SUSHY_PASSWORD, &args);
    assert_eq!(o.status.code(), Some(0), "{}", String::from_utf8_lossy(&o.stderr));
    let envelope = Envelope::from_json(&o.stdout).unwrap();
    assert_eq!(envelope.payload_type, FirmwareReport::PAYLOAD_TYPE);
    let signature = envelope.single_signature().unwrap();
    let leaf = signature.certificate_ders().unwrap().remove(0);
    let verified = ca.certificate().verify(&leaf, now).unwrap();
    envelope.verify_signature(signature, &verified.public_key).unwrap();
    let report: FirmwareReport = serde_json::from_slice(&envelope.payload_bytes().unwrap()).unwrap();
    assert_eq!((report.node_id.as_str(), report.compliant), ("node-7", true));

    // A --node that is not the certificate's is refused before anything is read.
    let mut args = vec!["check", "--node", "node-8", "--baseline", &ok];
    args.extend(signing);
    let o = firmware(&sushy, dir.path(), SUSHY_PASSWORD, &args);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("differs from the certificate's node node-7"));
}
