//! Installer deploys end to end on loopback, short of running an installer (none can run
//! here): a profile with `deployMode: installer` is provisioned; the node's iPXE script boots
//! the mirror's installer kernel with this controller's token-gated configuration URL; the
//! served kickstart passes pykickstart's `ksvalidator -v RHEL9`, the served autoinstall the
//! documented-keys schema (`tests/data/autoinstall-keys.schema.json`, unknown keys refused)
//! and its user-data cloud-init's own schema check; the installer's "done" ends the deploy
//! with the profile's role, and the token is used up.

use std::path::Path;
use std::process::Command;

use metal_protocol::{InventoryReport, Role};
use metal_tests::scheduler::{Admin as _, TestScheduler};
use serde_json::{Value, json};

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops@example";

fn commissioned(s: &TestScheduler, id: &str, mac: &str) {
    s.enrol(id, mac);
    s.walk(id, &["new", "commissioning"]);
    let mut report: InventoryReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/inventory-report.json")).unwrap();
    report.node_id = id.into();
    for disk in &mut report.disks {
        (disk.removable, disk.read_only) = (false, false);
    }
    let generation = s.node(id)["identityGeneration"].as_u64().unwrap();
    let receipt = s.post_report_as(Role::Ramdisk, id, generation, InventoryReport::PAYLOAD_TYPE, &report);
    assert_eq!(receipt["accepted"], true, "{receipt}");
}

fn profile(id: &str, kind: &str) -> Value {
    json!({
        "id": id, "deployMode": "installer", "adminUser": "ops", "sshAuthorizedKeys": [KEY], "role": "hypervisor",
        "cloudInit": {"packages": ["tmux"], "timezone": "Europe/Paris", "ntpServers": ["ntp.site-a"]},
        "installer": {"kind": kind, "kernelUrl": "http://mirror.site-a/os/vmlinuz", "initrdUrl": "http://mirror.site-a/os/initrd",
                      "sourceUrl": "http://mirror.site-a/os/tree"}
    })
}

/// Provisions `id` with `profile` and returns its iPXE script.
fn provisioned_script(s: &TestScheduler, profile_id: &str, mac: &str) -> String {
    let (status, outcome) =
        s.call("POST", "/v1/provision", Some(json!({"profileId": profile_id, "profileVersion": 1})));
    assert_eq!(status, 200, "{outcome}");
    let (status, script) = s.get_text(&format!("/boot/ipxe?mac={mac}"));
    assert_eq!(status, 200, "{script}");
    script
}

/// The configuration URL's token and its base, from a kernel line.
fn token_after(script: &str, marker: &str) -> String {
    let start = script.find(marker).unwrap_or_else(|| panic!("{marker} not in {script}")) + marker.len();
    script[start..].split('/').next().unwrap().to_owned()
}

fn venv(tool: &str) -> std::path::PathBuf {
    Path::new("/opt/metal-venv/bin").join(tool)
}

fn ksvalidator(file: &Path) -> (bool, String) {
    let out = Command::new(venv("ksvalidator"))
        .args(["-v", "RHEL9"])
        .arg(file)
        .output()
        .expect("scripts/setup installs pykickstart");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn a_kickstart_deploy_boots_the_installer_with_a_valid_kickstart_and_its_done_ends_the_deploy() {
    let s = TestScheduler::start(|_| {});
    commissioned(&s, "rk1", "52:54:00:00:09:01");
    let (status, body) = s.call("POST", "/v1/profiles", Some(profile("rocky", "kickstart")));
    assert_eq!(status, 201, "{body}");
    let script = provisioned_script(&s, "rocky", "52:54:00:00:09:01");
    assert!(script.contains("kernel --name vmlinuz http://mirror.site-a/os/vmlinuz initrd=initrd"), "{script}");
    assert!(script.contains("initrd --name initrd http://mirror.site-a/os/initrd"), "{script}");
    assert!(script.contains("inst.repo=http://mirror.site-a/os/tree"), "{script}");
    let base = format!("inst.ks={}/boot/installer/", s.url);
    let token = token_after(&script, &base);

    let (status, ks) = s.get_text(&format!("/boot/installer/{token}/ks.cfg"));
    assert_eq!(status, 200, "{ks}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ks.cfg");
    std::fs::write(&file, &ks).unwrap();
    let (ok, output) = ksvalidator(&file);
    assert!(ok, "ksvalidator refused the kickstart:\n{output}\n{ks}");
    for line in [
        "rootpw --lock",
        "user --name=ops --groups=wheel --lock",
        "sshkey --username=ops \"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\"",
        "timezone Europe/Paris --utc",
        "timesource --ntp-server=ntp.site-a",
        "tmux",
        "network --bootproto=dhcp --device=52:54:00:00:09:01 --hostname=rk1 --activate",
    ] {
        assert!(ks.lines().any(|l| l == line), "missing {line:?}:\n{ks}");
    }
    assert!(ks.contains(&format!("curl -fsS -X POST {}/boot/installer/{token}/done", s.url)), "{ks}");
    // The check can fail: a kickstart with an unknown command is refused.
    std::fs::write(&file, format!("{ks}\nnosuchcommand --now\n")).unwrap();
    assert!(!ksvalidator(&file).0, "ksvalidator passed an invalid kickstart");
    let (status, _) = s.get_text(&format!("/boot/installer/{token}/user-data"));
    assert_eq!(status, 404, "a kickstart deploy has no user-data");
    let (status, _) = s.get_text("/boot/installer/0000/ks.cfg");
    assert_eq!(status, 403);

    // The installed system reports done: deployed, with the profile's role; the token is spent.
    let done = reqwest::blocking::Client::new().post(format!("{}/boot/installer/{token}/done", s.url)).send().unwrap();
    assert_eq!(done.status(), 204);
    let node = s.node("rk1");
    assert_eq!((&node["state"], &node["labels"]["role"]), (&json!("deployed"), &json!("hypervisor")), "{node}");
    let (status, _) = s.get_text(&format!("/boot/installer/{token}/ks.cfg"));
    assert_eq!(status, 403, "a used token serves nothing");
    let (status, script) = s.get_text("/boot/ipxe?mac=52:54:00:00:09:01");
    assert!(status == 200 && script.contains("exit"), "a deployed node boots its disk: {script}");
}

#[test]
fn an_autoinstall_deploy_serves_documented_keys_and_valid_cloud_config() {
    let s = TestScheduler::start(|_| {});
    commissioned(&s, "ub1", "52:54:00:00:09:02");
    let (status, body) = s.call("POST", "/v1/profiles", Some(profile("ubuntu", "autoinstall")));
    assert_eq!(status, 201, "{body}");
    let script = provisioned_script(&s, "ubuntu", "52:54:00:00:09:02");
    assert!(script.contains("url=http://mirror.site-a/os/tree autoinstall"), "{script}");
    let token = token_after(&script, &format!("ds=nocloud-net;s={}/boot/installer/", s.url));
    let (status, user_data) = s.get_text(&format!("/boot/installer/{token}/user-data"));
    assert_eq!(status, 200, "{user_data}");
    let (status, meta_data) = s.get_text(&format!("/boot/installer/{token}/meta-data"));
    assert_eq!(status, 200);
    assert!(serde_json::from_str::<Value>(&meta_data).unwrap()["instance-id"].as_str().unwrap().starts_with("ub1-g"));
    assert_eq!(s.get_text(&format!("/boot/installer/{token}/vendor-data")).0, 200);

    let dir = tempfile::tempdir().unwrap();
    let document: Value = serde_json::from_str(user_data.trim_start_matches("#cloud-config\n")).unwrap();
    let schema = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/autoinstall-keys.schema.json");
    let validate = |doc: &Value| {
        let file = dir.path().join("autoinstall.json");
        std::fs::write(&file, doc.to_string()).unwrap();
        let out = Command::new(venv("python3"))
            .args(["-c", "import json, sys, jsonschema; jsonschema.validate(json.load(open(sys.argv[2])), json.load(open(sys.argv[1])))"])
            .arg(&schema)
            .arg(&file)
            .output()
            .unwrap();
        (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (ok, error) = validate(&document);
    assert!(ok, "{error}\n{user_data}");
    let mut unknown = document.clone();
    unknown["autoinstall"]["identity-x"] = json!({});
    assert!(!validate(&unknown).0, "the schema refuses unknown keys");
    let auto = &document["autoinstall"];
    assert_eq!(auto["ssh"], json!({"install-server": true, "allow-pw": false}));
    assert_eq!(auto["storage"]["layout"]["name"], "direct");
    assert_eq!(auto["network"]["ethernets"]["boot"]["match"]["macaddress"], "52:54:00:00:09:02");
    assert_eq!(auto["late-commands"][0], format!("curl -fsS -X POST {}/boot/installer/{token}/done", s.url));

    // The installed system's cloud-config passes cloud-init's own schema check.
    let target = dir.path().join("target-user-data");
    std::fs::write(&target, format!("#cloud-config\n{}\n", auto["user-data"])).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/cloud-init-schema");
    let out = Command::new(script).arg(&target).output().unwrap();
    assert!(out.status.success(), "{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(auto["user-data"]["users"][0]["name"], "ops");
    assert_eq!(auto["user-data"]["ssh_pwauth"], false);
}

#[test]
fn installer_profiles_are_checked_before_anything_is_rendered() {
    let s = TestScheduler::start(|_| {});
    for (change, field) in [
        (json!({"installer": null}), "installer"),
        (json!({"image": "some-image"}), "image"),
        (
            json!({"installer": {"kind": "kickstart", "kernelUrl": "http://m/vmlinuz inst.sshd", "initrdUrl": "http://m/i", "sourceUrl": "http://m/t"}}),
            "installer.kernelUrl",
        ),
        (
            json!({"installer": {"kind": "kickstart", "kernelUrl": "http://m/k", "initrdUrl": "http://m/i", "sourceUrl": "http://m/t;reboot"}}),
            "installer.sourceUrl",
        ),
        (json!({"adminUser": "root"}), "adminUser"),
        (json!({"cloudInit": {"packages": ["vim\n%post"]}}), "cloudInit.packages[0]"),
    ] {
        let mut body = profile("p", "kickstart");
        for (k, v) in change.as_object().unwrap() {
            body[k] = v.clone();
        }
        let (status, answer) = s.call("POST", "/v1/profiles", Some(body));
        assert_eq!((status, answer["error"]["field"].as_str()), (422, Some(field)), "{answer}");
    }
}
