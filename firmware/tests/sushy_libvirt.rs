//! `metal-firmware reflash` and `bios` against sushy-tools' libvirt driver, whose UpdateService
//! really changes the system's BiosVersion on SimpleUpdate (it bumps the minor version,
//! whatever the image): INVALID_CONFIG, compliant, the quarantine policy, a missing image,
//! a checksum mismatch, a reflash that fixes the drift and one whose drift survives. Each
//! case reads the BIOS version the previous one left, so "nothing was written" is checked
//! on the emulator's own state. Then `metal-firmware bios` on a UEFI domain: BIOS attributes
//! and Secure Boot found drifted, written back, verified, and drift named.

use std::process::Output;

use metal_tests::emulators::{Files, LibvirtDomain, SUSHY_PASSWORD, Sushy};
use serde_json::{Value, json};
use sha2::Digest as _;

struct Bench {
    sushy: Sushy,
    files: Files,
    dir: tempfile::TempDir,
}

impl Bench {
    fn firmware(&self, args: &[&str]) -> (Option<i32>, Value, String) {
        let pass = self.dir.path().join("bmc.pass");
        std::fs::write(&pass, SUSHY_PASSWORD).unwrap();
        let out: Output = std::process::Command::new(env!("CARGO_BIN_EXE_metal-firmware"))
            .args(args)
            .args(["--bmc-address", &self.sushy.endpoint, "--bmc-user", "admin"])
            .args(["--tls-fingerprint", &self.sushy.pki.fingerprint])
            .arg("--bmc-password-file")
            .arg(&pass)
            .env("METAL_LOG", "warn")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out.status.code(), stdout, stderr)
    }

    fn reflash(&self, name: &str, policy: Value) -> (Option<i32>, Value, String) {
        let file = self.dir.path().join(format!("{name}.json"));
        std::fs::write(&file, policy.to_string()).unwrap();
        self.firmware(&["reflash", "--node", "n1", "--allow-http", "--policy", file.to_str().unwrap()])
    }

    fn image(&self, name: &str, bytes: &[u8]) -> Value {
        std::fs::write(self.files.dir.path().join(name), bytes).unwrap();
        json!({"url": format!("{}/{name}", self.files.url), "sha256": hex::encode(sha2::Sha256::digest(bytes))})
    }
}

/// The BIOS version an outcome's first check found.
fn bios_before(outcome: &Value) -> String {
    let components = outcome["before"]["components"].as_array().unwrap();
    components.iter().find(|c| c["component"] == "bios").unwrap()["found"].as_str().unwrap().to_owned()
}

/// sushy's SimpleUpdate: 1.0.0 -> 1.1.0.
fn bumped(version: &str) -> String {
    let mut parts: Vec<String> = version.split('.').map(str::to_owned).collect();
    parts[1] = (parts[1].parse::<u32>().unwrap() + 1).to_string();
    parts.join(".")
}

fn code(outcome: &Value) -> &str {
    outcome["code"].as_str().unwrap_or("none")
}

#[test]
fn reflash_through_sushy_libvirt() {
    let domain = LibvirtDomain::define();
    let bench =
        Bench { sushy: Sushy::start_libvirt(&domain.uuid), files: Files::start(), dir: tempfile::tempdir().unwrap() };
    let image = bench.image("bios.bin", &[0x42; 1 << 20]);

    let (status, _, stderr) = bench.reflash("none", json!({"firmwareRemediation": "reflash"}));
    assert_eq!(status, Some(2), "{stderr}");
    assert!(stderr.contains("INVALID_CONFIG"), "{stderr}");

    let (status, inventory, stderr) = bench.firmware(&["inventory"]);
    assert_eq!(status, Some(0), "{stderr}");
    let start =
        inventory.as_array().unwrap().iter().find(|v| v["component"] == "bios").expect("a BIOS version")["version"]
            .as_str()
            .unwrap()
            .to_owned();
    let next = bumped(&start);

    let (status, outcome, stderr) = bench.reflash("compliant", json!({"firmwareBaseline": {"bios": start}}));
    assert_eq!((status, code(&outcome)), (Some(0), "COMPLIANT"), "{stderr}");

    // The default remediation is quarantine: drift found, nothing written.
    let (status, outcome, stderr) =
        bench.reflash("quarantine", json!({"firmwareBaseline": {"bios": next}, "firmwareImages": {"bios": image}}));
    assert_eq!((status, code(&outcome)), (Some(1), "FIRMWARE_DRIFT"), "{stderr}");
    assert!(stderr.contains(&format!("bios: expected {next}, found {start}")), "{stderr}");

    let (status, outcome, stderr) =
        bench.reflash("missing", json!({"firmwareBaseline": {"bios": next}, "firmwareRemediation": "reflash"}));
    assert_eq!((status, code(&outcome)), (Some(1), "NO_IMAGE"), "{stderr}");
    assert_eq!(bios_before(&outcome), start, "the quarantine policy wrote nothing");

    let mut tampered = image.clone();
    tampered["sha256"] = json!("00".repeat(32));
    let (status, outcome, stderr) = bench.reflash(
        "tampered",
        json!({"firmwareBaseline": {"bios": next}, "firmwareRemediation": "reflash", "firmwareImages": {"bios": tampered}}),
    );
    assert_eq!((status, code(&outcome)), (Some(1), "IMAGE_CHECKSUM_MISMATCH"), "{stderr}");
    assert_eq!(bios_before(&outcome), start, "a missing image wrote nothing");

    let (status, outcome, stderr) = bench.reflash(
        "fix",
        json!({"firmwareBaseline": {"bios": next}, "firmwareRemediation": "reflash", "firmwareImages": {"bios": image}}),
    );
    assert_eq!((status, code(&outcome)), (Some(0), "REFLASHED"), "{stderr}\n{outcome:#}");
    assert_eq!(bios_before(&outcome), start, "a bad checksum wrote nothing");
    assert_eq!(outcome["after"]["compliant"], true);
    let update = outcome["steps"].as_array().unwrap().iter().find(|s| s["action"] == "update").unwrap();
    assert!(update["detail"].as_str().unwrap().starts_with("SimpleUpdate of http://"), "{update}");

    let (status, outcome, stderr) = bench.reflash(
        "survives",
        json!({"firmwareBaseline": {"bios": "9.9.9"}, "firmwareRemediation": "reflash", "firmwareImages": {"bios": image}}),
    );
    assert_eq!((status, code(&outcome)), (Some(1), "DRIFT_SURVIVED_REFLASH"), "{stderr}");
    assert_eq!(bios_before(&outcome), next);
    let after = bumped(&next);
    assert_eq!(outcome["reason"], format!("drift survived the reflash: bios: expected 9.9.9, found {after}"));
}

#[test]
fn bios_settings_and_secure_boot_through_sushy_libvirt() {
    let domain = LibvirtDomain::define_uefi();
    let bench =
        Bench { sushy: Sushy::start_libvirt(&domain.uuid), files: Files::start(), dir: tempfile::tempdir().unwrap() };
    let baseline = bench.dir.path().join("bios.json");
    let bios = |args: &[&str]| bench.firmware(&[&["bios", "--baseline", baseline.to_str().unwrap()], args].concat());
    std::fs::write(&baseline, json!({"attributes": {"NoSuchKnob": "On"}}).to_string()).unwrap();
    let (status, _, stderr) = bios(&["--write"]);
    assert_eq!(status, Some(2), "{stderr}");
    assert!(
        stderr.contains("the BMC has no BIOS attribute NoSuchKnob (registry BiosAttributeRegistryP89.v1_0_0)"),
        "{stderr}"
    );

    std::fs::write(
        &baseline,
        json!({"attributes": {"ProcTurboMode": "Disabled", "BootMode": "Uefi"}, "secureBoot": true}).to_string(),
    )
    .unwrap();
    let (status, check, stderr) = bios(&[]);
    assert_eq!(status, Some(1), "{stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.starts_with("BIOS_DRIFT")).collect();
    assert_eq!(
        lines,
        [
            r#"BIOS_DRIFT ProcTurboMode is "Enabled", the baseline wants "Disabled""#,
            "BIOS_DRIFT SecureBootEnable is false, the baseline wants true"
        ],
        "{stderr}"
    );
    assert_eq!(check["secureBoot"]["enabled"], false, "{check}");

    let (status, written, stderr) = bios(&["--write"]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(written["set"], json!({"ProcTurboMode": "Disabled"}), "{written}");
    assert_eq!(
        (written["secureBoot"].as_bool(), written["secureBootSet"].as_bool()),
        (Some(false), Some(true)),
        "{written}"
    );
    assert!(domain.xml().contains("secure='yes'"), "Secure Boot's keys and loader in the domain: {}", domain.xml());
    let (status, check, stderr) = bios(&[]);
    assert_eq!(status, Some(0), "{stderr}");
    assert_eq!(check["found"], json!({"BootMode": "Uefi", "ProcTurboMode": "Disabled"}), "{check}");
}
