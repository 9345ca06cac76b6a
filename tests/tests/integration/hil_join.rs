//! A real OS joins: the test OS (`scripts/build-test-os`, Debian 12 with cloud-init) is
//! imported, named in a profile with a host setup (a bridge, a VLAN on the boot NIC, a
//! directory pool, an LVM volume group on a second disk) and provisioned; the real ramdisk network-boots in QEMU and writes it;
//! the machine boots it from that disk; cloud-init finds the `cidata` seed; the bootstrap
//! pins the CA, fetches and checks the join script, which fetches and checks `metal-agent`;
//! the agent joins with a `node` certificate and sets the host up with systemd-networkd.
//! After a reboot the host keeps its identity and its agent reports, signed, and what it
//! set up is there when looked at over SSH.

use std::time::{Duration, Instant};

use metal_protocol::{InventoryReport, Role};
use metal_tests::hil::{BootFrom, Bus, Console, DeploySite, Guest, tftp_dir};
use metal_tests::scheduler::{Admin as _, TestScheduler};
use serde_json::{Value, json};

const MAC: &str = "52:54:00:00:0a:01";
const SERIAL: &str = "HILJOIN";
const DISK_BYTES: u64 = 2 << 30;

/// The platform inventory of the guest as commissioning would store it: one virtio disk of
/// `DISK_BYTES` with serial `SERIAL` (the commissioning boot itself is `hil_boot_service`'s).
fn inventory(node: &str) -> InventoryReport {
    let mut report: InventoryReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/inventory-report.json")).unwrap();
    report.node_id = node.into();
    report.disks.truncate(1);
    let disk = &mut report.disks[0];
    disk.identity.size_bytes = DISK_BYTES;
    disk.identity.serial = Some(SERIAL.into());
    disk.identity.wwn = None;
    disk.removable = false;
    disk.read_only = false;
    report
}

/// The machine: the disk the OS goes on, and a second one for the LVM pool.
fn guest(disk: &std::path::Path, boot: BootFrom) -> Guest {
    guest_forwarding(disk, boot, &[])
}

/// The machine, with guest ports reachable on the host.
fn guest_forwarding(disk: &std::path::Path, boot: BootFrom, forwards: &[(u16, u16)]) -> Guest {
    let lvm = disk.with_file_name("lvm.img");
    if !lvm.exists() {
        std::fs::File::create(&lvm).unwrap().set_len(64 << 20).unwrap();
    }
    Guest::new()
        .boot(boot)
        .nic_forwarding(MAC, forwards)
        .args(&["-m", "1024"])
        .disk(&Bus::Virtio { serial: SERIAL.into() }, disk, "unmap")
        .disk(&Bus::Virtio { serial: "HILLVM".into() }, &lvm, "unmap")
}

/// Boots, once more if the emulated kernel stalled.
fn run(make: impl Fn() -> Guest) -> Console {
    let console = make().run();
    if console.stalled {
        eprintln!("the guest stalled; booting it again. Its console:\n{}", console.text);
        return make().run();
    }
    console
}

fn events_after(s: &TestScheduler, kind: &str, after: usize) -> Vec<Value> {
    s.events(kind).into_iter().skip(after).collect()
}

#[test]
fn a_deployed_debian_boots_from_its_disk_joins_as_a_host_and_keeps_its_identity_across_a_reboot() {
    let dir = tempfile::tempdir().unwrap();
    let raw = std::fs::read(metal_tests::hil::test_os().join("debian-12-metal.raw")).unwrap();
    let image = metal_tests::images::zstd_cli(&raw, &["-q", "-3", "-T0", "-c"]);
    drop(raw);
    let site = DeploySite::serving(image, |_| {});
    let s = &site.scheduler;
    let agent = metal_tests::hil::static_binaries().join("metal-agent");
    std::os::unix::fs::symlink(&agent, s.files_dir().join("metal-agent")).unwrap();

    let body = json!({"id": "hil-j", "bootMac": MAC, "labels": {"rack": "r9", "zone": "z1"}});
    assert_eq!(s.call("POST", "/v1/nodes", Some(body)).0, 201);
    s.walk("hil-j", &["new", "commissioning"]);
    let receipt = s.post_report_as(Role::Ramdisk, "hil-j", 1, InventoryReport::PAYLOAD_TYPE, &inventory("hil-j"));
    assert_eq!(receipt["accepted"], true, "{receipt}");
    let started = Instant::now();
    site.import("debian-12");
    eprintln!("imported the test OS in {:?}", started.elapsed());
    // The profile's admin key is one made here, to look inside the host after its reboot.
    let key = dir.path().join("id_ed25519");
    let keygen =
        std::process::Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&key).status();
    assert!(keygen.unwrap().success());
    let public_key = std::fs::read_to_string(key.with_extension("pub")).unwrap().trim().to_owned();
    let profile = json!({
        "id": "joiner", "image": "debian-12", "adminUser": "ops",
        "sshAuthorizedKeys": [public_key],
        "host": {
            "networks": [{"name": "br-metal", "kind": "bridge", "addresses": ["192.168.77.1/24"]},
                         {"name": "vlan42", "kind": "vlan", "parent": "boot", "vlanId": 42,
                          "addresses": ["192.168.42.7/24"]}],
            "storagePools": [{"name": "scratch", "kind": "directory", "path": "/srv/metal/scratch"},
                             {"name": "vg0", "kind": "lvm", "devices": ["/dev/disk/by-id/virtio-HILLVM"]}]}});
    let (status, body) = s.call("POST", "/v1/profiles", Some(profile));
    assert_eq!(status, 201, "{body}");
    let (status, body) = s.call("POST", "/v1/provision", Some(json!({"profileId": "joiner", "profileVersion": 1})));
    assert_eq!((status, &body["nodes"]), (200, &json!(["hil-j"])), "{body}");

    // The deploy: the ramdisk network-boots, writes the image and the seed, powers off.
    let disk = dir.path().join("disk.img");
    std::fs::File::create(&disk).unwrap().set_len(DISK_BYTES).unwrap();
    let tftp = tftp_dir(dir.path(), &format!("http://10.0.2.2:{}", s.port));
    let started = Instant::now();
    // Each boot (a second one after a stall too) is one its ramdisk may take a token for.
    let console = run(|| {
        s.arm_boot("hil-j");
        guest(&disk, BootFrom::Network(tftp.clone())).timeout(Duration::from_secs(900))
    });
    assert!(console.finished && console.text.contains("deploy done"), "{}", console.text);
    assert_eq!(s.node("hil-j")["state"], "deployed");
    eprintln!("deployed in {:?}", started.elapsed());

    // The first boot from the disk: cloud-init, the bootstrap, the join script, the agent.
    let started = Instant::now();
    // Until cloud-init's last stage ended, and a little longer, so that its record of the
    // first boot is on the disk before the guest is killed.
    let finished = "Cloud-init v. 22.4.2 finished at";
    let console = run(|| {
        guest(&disk, BootFrom::Firmware)
            .until(finished)
            .linger(Duration::from_secs(15))
            .timeout(Duration::from_secs(900))
    });
    assert!(console.finished, "the host did not join:\n{}", console.text);
    eprintln!("booted from the disk and joined in {:?}", started.elapsed());
    // The kernel's clock when each first-boot milestone was printed (boot-to-join time).
    for marker in ["running 'init-local'", "the join script's SHA-256 matches", "metal-join: joined", finished] {
        let line = console.text.lines().find(|l| l.contains(marker)).unwrap_or_default();
        eprintln!("first boot: {line}");
    }
    assert!(console.text.contains("the join script's SHA-256 matches the seed"), "{}", console.text);
    assert!(console.text.contains("joined as spiffe://"), "{}", console.text);
    assert!(console.text.contains("metal-join: joined; metal-agent.service is running"), "{}", console.text);
    let (status, host) = s.call("GET", "/v1/hosts/hil-j", None);
    assert_eq!(status, 200, "{host}");
    assert_eq!(
        (&host["state"], &host["role"], &host["rack"], &host["hostname"], &host["identityGeneration"]),
        (&json!("joined"), &json!("node"), &json!("r9"), &json!("hil-j"), &json!(1)),
        "{host}"
    );
    let (_, log) = s.call("GET", "/v1/hosts/hil-j/join-log", None);
    let steps: Vec<(&str, bool)> =
        log.as_array().unwrap().iter().map(|e| (e["step"].as_str().unwrap(), e["ok"] == true)).collect();
    assert_eq!(
        steps,
        [
            ("token", true),
            ("certificate", true),
            ("network/br-metal", true),
            ("network/vlan42", true),
            ("pool/scratch", true),
            ("pool/vg0", true),
            ("joined", true)
        ],
        "{log}"
    );
    let lvm = log.as_array().unwrap().iter().find(|e| e["step"] == "pool/vg0").unwrap();
    assert!(lvm["detail"].as_str().unwrap().contains("LVM volume group vg0 on /dev/vd"), "{lvm}");
    let inventories = s.events("node.inventory.changed").len();
    let certificates = s.events("host.certificate.issued").len();

    // A reboot: no second join (were cloud-init's record of the first boot lost with the
    // kill, its bootstrap would find the host joined), the same certificate, the agent
    // reports, and the setup is there, seen from inside over SSH.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let done = "METAL-HIL-JOIN-LOOKED-INSIDE";
    let reboot =
        guest_forwarding(&disk, BootFrom::Firmware, &[(port, 22)]).until(done).timeout(Duration::from_secs(900));
    let running = std::thread::spawn(move || reboot.run());
    let ssh = |command: &str| {
        std::process::Command::new("ssh")
            .args(["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes"])
            .args(["-o", "ConnectTimeout=10", "-o", "LogLevel=ERROR", "-i"])
            .arg(&key)
            .args(["-p", &port.to_string(), "ops@127.0.0.1", command])
            .output()
            .unwrap()
    };
    let started = Instant::now();
    while !ssh("true").status.success() {
        assert!(started.elapsed() < Duration::from_secs(600) && !running.is_finished(), "no SSH into the host");
        std::thread::sleep(Duration::from_secs(5));
    }
    let look = "ip -o addr show dev br-metal; ip -o addr show dev vlan42; ip -d -o link show dev vlan42; \
                test -d /srv/metal/scratch && echo scratch-dir; sudo -n vgs --noheadings -o vg_name,pv_count vg0; \
                sudo -n stat -c '%a %n' /etc/metal/agent/key.pem";
    let inside = ssh(look);
    let seen = format!("{}{}", String::from_utf8_lossy(&inside.stdout), String::from_utf8_lossy(&inside.stderr));
    assert!(inside.status.success(), "{seen}");
    for expected in [
        "br-metal",
        "192.168.77.1/24",
        "192.168.42.7/24",
        "vlan protocol 802.1Q id 42",
        "scratch-dir",
        "vg0",
        "600 /etc/metal/agent/key.pem",
    ] {
        assert!(seen.contains(expected), "{expected:?} is not in what the host shows:\n{seen}");
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while events_after(s, "node.inventory.changed", inventories).is_empty() {
        assert!(Instant::now() < deadline && !running.is_finished(), "the agent did not report after the reboot");
        std::thread::sleep(Duration::from_secs(2));
    }
    let _ = ssh(&format!("echo {done} | sudo -n tee /dev/ttyS0"));
    let console = running.join().unwrap();
    assert!(console.finished, "{}", console.text);
    assert_eq!(s.events("host.certificate.issued").len(), certificates, "the host joined again:\n{}", console.text);
    let reported = events_after(s, "node.inventory.changed", inventories);
    assert!(!reported.is_empty(), "no inventory after the reboot");
    let data = &reported.last().unwrap()["data"];
    assert_eq!((&data["advisory"], &data["signer"]), (&json!(false), &json!(host_identity(s))), "{data}");
    let (_, after) = s.call("GET", "/v1/hosts/hil-j", None);
    assert_eq!(after["joinedAt"], host["joinedAt"], "the host kept its join: {after}");
}

fn host_identity(s: &TestScheduler) -> String {
    format!("spiffe://{}/node/hil-j/gen/1/node", s.ca().certificate().site())
}
