//! The real scheduler drives real ramdisk boots in QEMU: machines PXE-boot through QEMU's
//! iPXE option ROM and the repository's `ipxe/metal.ipxe`, fetch their script, kernel and
//! initrd from the scheduler's boot service, join it over TLS and report. Commissioning
//! stores the inventory QEMU was given; the erase's signed wipe report is accepted (and a
//! tenant-signed or partial one refused); a disk that lies about discards is caught; a UEFI
//! machine with a TPM attests what booted and the scheduler verifies it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use metal_protocol::{InventoryReport, Role, WipeReport};
use metal_tests::hil::{BootFrom, Bus, Console, DISK_MARKER, Guest, MIB, filled, tftp_dir};
use metal_tests::scheduler::{Admin as _, TestScheduler};
use metal_types::config::Config;
use serde_json::Value;

/// A scheduler whose boot service guests reach at 10.0.2.2 and that serves the test ramdisk
/// with metal-boot as PID 1; `extra` goes on every ramdisk's kernel command line.
fn scheduler(extra: &str) -> TestScheduler {
    let ramdisk = metal_tests::hil::ramdisk();
    serving(&ramdisk.join("vmlinuz"), &ramdisk.join("initrd.cpio.gz"), &format!("rdinit=/bin/metal-boot {extra}"))
}

/// A scheduler serving this kernel and initrd, with `args` on every ramdisk's command line.
fn serving(kernel: &Path, initrd: &Path, args: &str) -> TestScheduler {
    serving_with(kernel, initrd, args, |_| {})
}

/// [`serving`], with `configure` laid over its configuration.
fn serving_with(kernel: &Path, initrd: &Path, args: &str, configure: impl FnOnce(&mut Config)) -> TestScheduler {
    let args = format!("console=ttyS0 panic=-1 {args}");
    let s = TestScheduler::start(|c: &mut Config| {
        let port = c.boot.listen.unwrap().port();
        c.boot.controller_url = Some(format!("https://10.0.2.2:{port}"));
        c.boot.kernel_args = args;
        configure(c);
    });
    let files = s.files_dir();
    std::fs::create_dir_all(&files).unwrap();
    std::os::unix::fs::symlink(kernel, files.join("vmlinuz")).unwrap();
    std::os::unix::fs::symlink(initrd, files.join("initrd")).unwrap();
    s
}

/// Network-boots a guest with `disks` (bus, image, discard mode) until it ends by itself.
/// A guest whose emulated kernel stalled (no console output for minutes) is booted once more.
fn pxe_boot(s: &TestScheduler, dir: &Path, mac: &str, disks: &[(Bus, &Path, &str)]) -> Console {
    let tftp = tftp_dir(dir, &format!("http://10.0.2.2:{}", s.port));
    let boot = || {
        let mut guest = Guest::new().boot(BootFrom::Network(tftp.clone())).nic(mac).timeout(Duration::from_secs(420));
        for (bus, image, discard) in disks {
            guest = guest.disk(bus, image, discard);
        }
        guest.run()
    };
    let mut console = boot();
    if console.stalled {
        eprintln!("the guest stalled; booting it again. Its console:\n{}", console.text);
        // The stalled boot may have taken its token: the next is a boot started anew, by
        // hand, as an operator would (a second request for the same boot is contested).
        let (_, nodes) = s.call("GET", "/v1/nodes", None);
        let node = nodes.as_array().and_then(|n| n.iter().find(|n| n["bootMac"] == mac));
        if let Some(id) = node.and_then(|n| n["id"].as_str()) {
            s.arm_boot(id);
        }
        console = boot();
    }
    assert!(console.finished, "the guest did not end by itself:\n{}", console.text);
    console
}

#[test]
fn pxe_commission_then_erase_with_a_signed_wipe_report_the_scheduler_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let s = scheduler("");
    let mac = "52:54:00:00:07:01";
    s.enrol("hil-1", mac);
    let (nvme, sata, virtio) =
        (dir.path().join("nvme.img"), dir.path().join("sata.img"), dir.path().join("virtio.img"));
    filled(&nvme, 64 * MIB);
    filled(&sata, 48 * MIB);
    filled(&virtio, 32 * MIB);
    let disks = [
        (Bus::Nvme { serial: "HILNVME01".into() }, nvme.as_path(), "unmap"),
        (Bus::Sata { model: "HIL SATA".into(), serial: "HILSATA01".into() }, sata.as_path(), "unmap"),
        (Bus::Virtio { serial: "HILVIRT01".into() }, virtio.as_path(), "unmap"),
    ];

    // 1. A new node PXE-boots, is commissioned, and its inventory is what QEMU was given.
    let console = pxe_boot(&s, dir.path(), mac, &disks);
    assert!(console.text.contains("task: Commission"), "{}", console.text);
    assert!(console.text.contains("report sent; accepted: true"), "{}", console.text);
    let node = s.node("hil-1");
    assert_eq!(node["state"], "ready", "{node}\n{}", console.text);
    let (status, stored) = s.call("GET", "/v1/nodes/hil-1/inventory", None);
    assert_eq!(status, 200, "{stored}");
    let report: InventoryReport = serde_json::from_value(stored["inventory"].clone()).unwrap();
    let mut disks_seen: Vec<(String, u64)> =
        report.disks.iter().map(|d| (d.identity.serial.clone().unwrap_or_default(), d.identity.size_bytes)).collect();
    disks_seen.sort();
    assert_eq!(
        disks_seen,
        [("HILNVME01".into(), 64 << 20), ("HILSATA01".into(), 48 << 20), ("HILVIRT01".into(), 32 << 20)],
        "{stored}"
    );
    assert!(report.nics.iter().any(|n| n.mac == mac), "{:?}", report.nics);

    // 4. While it is releasing, wipe reports that do not hold up are refused with the reason.
    s.walk("hil-1", &["ready", "allocated", "deploying", "deployed", "releasing"]);
    let mut forged: WipeReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/wipe-report.json")).unwrap();
    forged.node_id = "hil-1".into();
    forged.inventory_disks = report.disks.iter().map(|d| d.identity.clone()).collect();
    let template = forged.disks[0].clone();
    forged.disks = report
        .disks
        .iter()
        .map(|d| metal_protocol::DiskWipe {
            identity: d.identity.clone(),
            device: format!("/dev/{}", d.name),
            ..template.clone()
        })
        .collect();
    let receipt = s.post_report_as(Role::NodeTenant, "hil-1", 1, WipeReport::PAYLOAD_TYPE, &forged);
    assert_eq!(receipt["accepted"], false, "{receipt}");
    assert!(receipt["reason"].as_str().unwrap().starts_with("role-not-allowed"), "{receipt}");
    let mut partial = forged.clone();
    partial.disks.retain(|d| d.identity.serial.as_deref() != Some("HILSATA01"));
    let receipt = s.post_report_as(Role::Ramdisk, "hil-1", 1, WipeReport::PAYLOAD_TYPE, &partial);
    assert_eq!(receipt["accepted"], false, "{receipt}");
    assert!(receipt["reason"].as_str().unwrap().contains("missing-disk: disk"), "{receipt}");
    assert!(receipt["reason"].as_str().unwrap().contains("HILSATA01"), "{receipt}");
    assert_eq!(s.node("hil-1")["state"], "releasing");

    // The teardown's firmware step first: the node's pool wants the BIOS it commissioned with;
    // the ramdisk reads it in band and the scheduler finds it compliant.
    let bios = report.firmware.iter().find(|v| v.component == "bios").unwrap().version.clone();
    let pool = serde_json::json!({"id": "p1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated",
        "policy": {"tenantRoot": true, "firmwareBaseline": {"bios": bios}}});
    assert_eq!(s.call("POST", "/v1/pools", Some(pool)).0, 201);
    assert_eq!(s.call("PATCH", "/v1/nodes/hil-1", Some(serde_json::json!({"poolId": "p1"}))).0, 200);
    // Booted by hand (no BMC here): the boot its ramdisk may take; the firmware check's
    // report arms the erase's.
    s.arm_boot("hil-1");
    let console = pxe_boot(&s, dir.path(), mac, &disks);
    assert!(console.text.contains("task: Firmware"), "{}", console.text);
    assert!(console.text.contains("firmware check done: "), "{}", console.text);
    assert_eq!(s.events("node.firmware.checked")[0]["data"]["compliant"], true);

    // 2. The erase: NVMe Format where the controller has it, overwrites elsewhere, read back,
    //    the signed report accepted, the node ready again, and no old byte left.
    let console = pxe_boot(&s, dir.path(), mac, &disks);
    assert!(console.text.contains("task: Erase"), "{}", console.text);
    assert!(console.text.contains("/dev/nvme0n1 by nvme-format-user-data: erased and verified"), "{}", console.text);
    assert!(
        console.text.contains("erase done: 3 of 3 disks erased and verified; wipe report accepted"),
        "{}",
        console.text
    );
    let node = s.node("hil-1");
    assert_eq!(node["state"], "ready", "{node}");
    let (_, records) = s.call("GET", "/v1/nodes/hil-1/wipe-reports", None);
    let accepted: Vec<&Value> = records.as_array().unwrap().iter().filter(|r| r["accepted"] == true).collect();
    assert_eq!(accepted.len(), 1, "{records}");
    assert!(accepted[0]["signer"].as_str().unwrap().ends_with("/node/hil-1/gen/1/ramdisk"), "{records}");
    for image in [&nvme, &sata, &virtio] {
        assert!(std::fs::read(image).unwrap().iter().all(|b| *b == 0), "{} still holds data", image.display());
    }
}

#[test]
fn a_disk_that_ignores_discards_is_caught_and_the_node_is_not_returned() {
    let dir = tempfile::tempdir().unwrap();
    // Every erase on this site is forced to a plain discard (an operator's override).
    let s = scheduler("metal.erase.method=discard");
    let mac = "52:54:00:00:07:03";
    s.enrol("hil-3", mac);
    let liar = dir.path().join("liar.img");
    filled(&liar, 32 * MIB);
    let disks = [(Bus::Virtio { serial: "HILLIAR01".into() }, liar.as_path(), "ignore")];
    let console = pxe_boot(&s, dir.path(), mac, &disks);
    assert_eq!(s.node("hil-3")["state"], "ready", "{}", console.text);
    s.walk("hil-3", &["ready", "allocated", "deploying", "deployed", "releasing"]);

    s.arm_boot("hil-3");
    let console = pxe_boot(&s, dir.path(), mac, &disks);
    assert!(console.text.contains("/dev/vda by discard: FAILED"), "{}", console.text);
    assert!(console.text.contains("wipe report refused: disk-failed"), "{}", console.text);
    let node = s.node("hil-3");
    assert_eq!((node["state"].as_str(), node["failedFrom"].as_str()), (Some("failed"), Some("releasing")), "{node}");
    let (_, records) = s.call("GET", "/v1/nodes/hil-3/wipe-reports", None);
    assert_eq!(records[0]["code"], "disk-failed", "{records}");
    assert!(std::fs::read(&liar).unwrap().iter().any(|b| *b != 0), "the data really is still there");
}

/// `ipxe/build-ipxe-iso.sh --hybrid` (BIOS + UEFI) for the scheduler at `url`.
fn hybrid_iso(dir: &Path, url: &str) -> std::path::PathBuf {
    let out = dir.join("hybrid.iso");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ipxe/build-ipxe-iso.sh");
    let output = Command::new(script).args(["--url", url, "--hybrid"]).arg(&out).output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    out
}

#[test]
fn virtual_media_isos_boot_the_ramdisk_to_the_controller() {
    let dir = tempfile::tempdir().unwrap();
    let ramdisk = metal_tests::hil::ramdisk();
    let (kernel, initrd) = (ramdisk.join("vmlinuz"), ramdisk.join("initrd.cpio.gz"));
    let s = serving_with(&kernel, &initrd, "rdinit=/bin/metal-boot", |c| {
        metal_tests::scheduler::with_media(c, &format!("http://10.0.2.2:{}", c.listen.port()));
    });
    let url = format!("http://10.0.2.2:{}", s.port);
    let disk = dir.path().join("disk.img");
    filled(&disk, 16 * MIB);

    // 6. A per-boot ISO (isolinux) as a BMC mounts it for a boot armed with its claim: iPXE
    // runs its embedded script, which asks by the claim; a request naming the machine's MAC
    // meanwhile gets nothing. Then the whole commissioning.
    let mac = "52:54:00:00:07:06";
    s.enrol("hil-6", mac);
    s.walk("hil-6", &["new", "commissioning"]);
    let claim = metal_store::auth::new_secret();
    let (hash, now, ttl) = (metal_store::auth::hash(&claim), s.app.clock.now(), Duration::from_secs(600));
    let armed = s.app.store.write(move |tx| {
        metal_store::boots::arm_claimed(tx, "hil-6", "the test, as a teardown", None, Some(&hash), now, ttl)
    });
    s.block_on(armed).unwrap();
    let (status, per_boot) = s.get_bytes(&format!("/boot/media/{claim}/metal.iso"), None);
    assert_eq!(status, 200);
    let iso = dir.path().join("per-boot.iso");
    std::fs::write(&iso, &per_boot).unwrap();
    let script = metal_tests::scheduler::intruder_script(&s.url, mac);
    assert!(script.contains("its boot is from virtual media") && !script.contains("token="), "{script}");
    let console = Guest::new()
        .boot(BootFrom::Cdrom(iso))
        .nic(mac)
        .disk(&Bus::Virtio { serial: "HILCD01".into() }, &disk, "unmap")
        .timeout(Duration::from_secs(420))
        .run();
    assert!(console.finished, "{}", console.text);
    assert!(
        console.text.contains("joined the controller as spiffe://metal/node/hil-6/gen/1/ramdisk"),
        "{}",
        console.text
    );
    assert_eq!(s.node("hil-6")["state"], "ready", "{}", console.text);
    let taken = s.events("node.boot.ramdisk");
    assert!(taken.iter().any(|e| e["data"]["node"] == "hil-6" && e["data"]["byMedia"] == true), "{taken:?}");

    // The BIOS + UEFI ISO from grub-mkrescue, under BIOS: GRUB starts the same iPXE.
    let mac = "52:54:00:00:07:07";
    s.enrol("hil-7", mac);
    let console = Guest::new()
        .boot(BootFrom::Cdrom(hybrid_iso(dir.path(), &url)))
        .nic(mac)
        .until("joined the controller as")
        .timeout(Duration::from_secs(420))
        .run();
    assert!(console.finished, "{}", console.text);
    assert!(
        console.text.contains("joined the controller as spiffe://metal/node/hil-7/gen/1/ramdisk"),
        "{}",
        console.text
    );

    // The same ISO under UEFI: GRUB's own network stack asks /boot/grub and loads the ramdisk.
    let mac = "52:54:00:00:07:0c";
    s.enrol("hil-12", mac);
    let console = Guest::new()
        .uefi()
        .boot(BootFrom::Cdrom(dir.path().join("hybrid.iso")))
        .nic(mac)
        .until("joined the controller as")
        .timeout(Duration::from_secs(420))
        .run();
    assert!(console.finished, "{}", console.text);
    assert!(
        console.text.contains("joined the controller as spiffe://metal/node/hil-12/gen/1/ramdisk"),
        "{}",
        console.text
    );
}

/// An inventory as commissioning stores it, with one disk of `size` bytes.
fn small_inventory(node: &str, size: u64) -> InventoryReport {
    let mut report: InventoryReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/inventory-report.json")).unwrap();
    report.node_id = node.into();
    report.disks.truncate(1);
    report.disks[0].identity.size_bytes = size;
    report.disks[0].removable = false;
    report.disks[0].read_only = false;
    report
}

#[test]
fn an_imported_image_is_provisioned_by_profile_lands_bit_exact_and_boots_from_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    // The image comes from a mirror on its own CA; the scheduler trusts that CA for imports.
    let site = metal_tests::hil::DeploySite::start();
    let (s, image) = (&site.scheduler, &site.image);

    let mac = "52:54:00:00:07:05";
    s.enrol("hil-5", mac);
    let (target, other) = (dir.path().join("target.img"), dir.path().join("other.img"));
    filled(&target, 64 * MIB);
    filled(&other, 32 * MIB);
    let disks = [
        (Bus::Virtio { serial: "HILDEPLOY".into() }, target.as_path(), "unmap"),
        (Bus::Nvme { serial: "HILOTHER".into() }, other.as_path(), "unmap"),
    ];
    pxe_boot(s, dir.path(), mac, &disks);
    assert_eq!(s.node("hil-5")["state"], "ready");
    // A second machine whose only disk is too small for the image and its seed.
    let (status, body) = s.call("POST", "/v1/nodes", Some(serde_json::json!({"id": "hil-6"})));
    assert_eq!(status, 201, "{body}");
    s.walk("hil-6", &["new", "commissioning"]);
    let receipt = s.post_report_as(
        Role::Ramdisk,
        "hil-6",
        s.node("hil-6")["identityGeneration"].as_u64().unwrap(),
        InventoryReport::PAYLOAD_TYPE,
        &small_inventory("hil-6", 20 * MIB as u64),
    );
    assert_eq!(receipt["accepted"], true, "{receipt}");

    // Import once, name it in a profile, provision by profile version.
    site.import("marker-os");
    let profile = serde_json::json!({
        "id": "marker", "image": "marker-os", "adminUser": "ops", "minDiskBytes": 40 * MIB,
        "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops"],
    });
    let (status, body) = s.call("POST", "/v1/profiles", Some(profile));
    assert_eq!(status, 201, "{body}");
    let (status, outcome) =
        s.call("POST", "/v1/provision", Some(serde_json::json!({"profileId": "marker", "profileVersion": 1})));
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["nodes"], serde_json::json!(["hil-5"]), "the machine that is too small is not chosen");
    assert_eq!(s.node("hil-6")["state"], "ready");

    // The deploy: PXE, join, plan over mTLS, the seekable image from the controller itself
    // (frames decompressed and verified in parallel), write, read back, report.
    let console = pxe_boot(s, dir.path(), mac, &disks);
    assert!(console.text.contains("task: Deploy") && console.text.contains("deploy done"), "{}", console.text);
    let node = s.node("hil-5");
    assert_eq!(node["state"], "deployed", "{node}");
    let written = std::fs::read(&target).unwrap();
    assert!(written[MIB..8 * MIB] == image[MIB..8 * MIB], "the image is not bit-exact");
    assert!(written[..446] == image[..446], "the boot code is not bit-exact");
    let blkid =
        Command::new("blkid").args(["-p", "-o", "export", "-O", &(8 * MIB).to_string()]).arg(&target).output().unwrap();
    let found = String::from_utf8_lossy(&blkid.stdout);
    assert!(found.contains("TYPE=vfat") && found.contains("LABEL=cidata"), "{found}");
    assert!(std::fs::read(&other).unwrap()[..MIB].iter().any(|b| *b != 0), "the other disk was not touched");

    // The machine network-boots again; the scheduler sends it to its disk, which boots.
    let tftp = tftp_dir(dir.path(), &format!("http://10.0.2.2:{}", s.port));
    let mut guest = Guest::new().boot(BootFrom::Network(tftp)).nic(mac).until(DISK_MARKER);
    for (bus, image, discard) in &disks {
        guest = guest.disk(bus, image, discard);
    }
    let console = guest.timeout(Duration::from_secs(240)).run();
    assert!(console.finished, "the deployed disk did not boot:\n{}", console.text);
}

/// Polls until the node is in `state`, or failed, or the timeout passed.
fn wait_for_state(s: &TestScheduler, id: &str, state: &str, timeout: Duration) -> Value {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let node = s.node(id);
        if node["state"] == state || node["state"] == "failed" || std::time::Instant::now() > deadline {
            return node;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn the_scheduler_powers_a_machine_on_into_pxe_through_its_ipmi_bmc() {
    let dir = tempfile::tempdir().unwrap();
    let s = scheduler("");
    let mac = "52:54:00:00:07:08";
    s.enrol("hil-8", mac);
    let disk = dir.path().join("disk.img");
    filled(&disk, 16 * MIB);
    let console = dir.path().join("console.log");
    let tftp = tftp_dir(dir.path(), &format!("http://10.0.2.2:{}", s.port));
    let machine = Guest::new()
        .boot(BootFrom::Network(tftp))
        .nic(mac)
        .disk(&Bus::Sata { model: "HIL SATA".into(), serial: "HILIPMI01".into() }, &disk, "unmap")
        .machine_args(&console);
    let bmc = metal_tests::emulators::IpmiSim::machine(&machine);
    let spec = serde_json::json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", bmc.port),
                                  "username": "admin", "password": "password"});
    let (status, body) = s.call("PUT", "/v1/nodes/hil-8/bmc", Some(spec));
    assert_eq!(status, 200, "{body}");

    // 7. Boot-to-PXE and power on through ipmitool; ipmi_sim's chassis program starts QEMU.
    let (status, body) = s.call("POST", "/v1/nodes/hil-8/boot", Some(serde_json::json!({"target": "pxe"})));
    assert!(status == 204, "{status} {body}");
    let (status, body) = s.call("POST", "/v1/nodes/hil-8/power", Some(serde_json::json!({"action": "on"})));
    assert_eq!(status, 200, "{body}");
    let node = wait_for_state(&s, "hil-8", "ready", Duration::from_secs(420));
    let text = std::fs::read_to_string(&console).unwrap_or_default();
    assert_eq!(node["state"], "ready", "{node}\n{text}\nchassis: {}", bmc.chassis_log());
    assert!(bmc.chassis_log().contains("start -boot once=n"), "{}", bmc.chassis_log());
    let (_, stored) = s.call("GET", "/v1/nodes/hil-8/inventory", None);
    assert_eq!(stored["inventory"]["disks"][0]["identity"]["serial"], "HILIPMI01", "{stored}");

    // The ramdisk rebooted at the end (QEMU runs with -no-reboot): the BMC reads power off.
    // Under a loaded CI machine an emulated guest's shutdown has taken over a minute.
    let deadline = std::time::Instant::now() + Duration::from_secs(180);
    loop {
        let (status, power) = s.call("GET", "/v1/nodes/hil-8/power", None);
        assert_eq!(status, 200, "{power}");
        if power["power"] == "off" {
            break;
        }
        if std::time::Instant::now() > deadline {
            let text = std::fs::read_to_string(&console).unwrap_or_default();
            let tail: String =
                text.lines().rev().take(30).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n");
            panic!("still on: {power}\nchassis: {}\nconsole tail:\n{tail}", bmc.chassis_log());
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn the_scheduler_powers_a_machine_on_into_pxe_through_sushy_tools_and_libvirt() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    // libvirt runs QEMU as its own user: it must reach the disk and the TFTP directory.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let s = scheduler("");
    let mac = "52:54:00:00:07:09";
    s.enrol("hil-9", mac);
    let disk = dir.path().join("disk.img");
    filled(&disk, 16 * MIB);
    let tftp = tftp_dir(dir.path(), &format!("http://10.0.2.2:{}", s.port));
    let domain = metal_tests::emulators::LibvirtDomain::machine(&metal_tests::emulators::LibvirtMachine {
        disk: &disk,
        serial: "HILRF01",
        mac,
        tftp: &tftp,
    });
    let sushy = metal_tests::emulators::Sushy::start_libvirt(&domain.uuid);
    let spec = serde_json::json!({"protocol": "redfish", "address": sushy.endpoint, "username": "admin",
        "password": metal_tests::emulators::SUSHY_PASSWORD, "tls": {"mode": "fingerprint", "value": sushy.pki.fingerprint}});
    let (status, body) = s.call("PUT", "/v1/nodes/hil-9/bmc", Some(spec));
    assert_eq!(status, 200, "{body}");

    // 7. Boot override to PXE and power on through Redfish; sushy-tools drives libvirt.
    let (status, body) = s.call("POST", "/v1/nodes/hil-9/boot", Some(serde_json::json!({"target": "pxe"})));
    assert!(status == 204, "{status} {body}");
    let xml = domain.xml();
    let nic = &xml[xml.find("<interface").unwrap()..xml.find("</interface>").unwrap()];
    assert!(nic.contains("<boot order='1'/>"), "sushy put the network first: {xml}");
    let (status, body) = s.call("POST", "/v1/nodes/hil-9/power", Some(serde_json::json!({"action": "on"})));
    assert_eq!(status, 200, "{body}");
    let node = wait_for_state(&s, "hil-9", "ready", Duration::from_secs(420));
    assert_eq!(node["state"], "ready", "{node}\n{}", domain.console());
    let (_, stored) = s.call("GET", "/v1/nodes/hil-9/inventory", None);
    assert_eq!(stored["inventory"]["disks"][0]["identity"]["serial"], "HILRF01", "{stored}");
}

#[test]
fn the_production_mkosi_ramdisk_commissions_a_network_booted_machine() {
    let dir = tempfile::tempdir().unwrap();
    let ramdisk = metal_tests::hil::mkosi_ramdisk();
    let s = serving(&ramdisk.join("vmlinuz"), &ramdisk.join("initrd"), "");
    let mac = "52:54:00:00:07:0a";
    s.enrol("hil-10", mac);
    let (nvme, sata) = (dir.path().join("nvme.img"), dir.path().join("sata.img"));
    filled(&nvme, 32 * MIB);
    filled(&sata, 16 * MIB);
    let disks = [
        (Bus::Nvme { serial: "HILMKOSI1".into() }, nvme.as_path(), "unmap"),
        (Bus::Sata { model: "HIL SATA".into(), serial: "HILMKOSI2".into() }, sata.as_path(), "unmap"),
    ];
    let console = pxe_boot(&s, dir.path(), mac, &disks);
    assert!(
        console.text.contains("Run /init as init process") && console.text.contains("metal-boot: PID 1"),
        "{}",
        console.text
    );
    assert_eq!(s.node("hil-10")["state"], "ready", "{}", console.text);
    let (_, stored) = s.call("GET", "/v1/nodes/hil-10/inventory", None);
    let report: InventoryReport = serde_json::from_value(stored["inventory"].clone()).unwrap();
    let mut serials: Vec<String> = report.disks.iter().filter_map(|d| d.identity.serial.clone()).collect();
    serials.sort();
    assert_eq!(serials, ["HILMKOSI1", "HILMKOSI2"], "{stored}");
}

#[test]
fn a_uefi_machine_with_a_tpm_network_boots_the_ramdisk_and_attests_what_booted() {
    // Debian's iPXE starts an EFI-stub kernel without its initrd unless the kernel line names
    // it (initrd=initrd): this boot reaches metal-boot only if the scheduler's script does.
    // With a TPM (swtpm, manufactured with an EK certificate), the commissioning ramdisk
    // attests the boot as production boots it (OVMF, iPXE, the EFI stub) before it reports;
    // in a pool that enforces measured boot its quote becomes the node's baseline. Booted
    // again with another OVMF build in its flash, the machine's quote differs in PCR 0, at
    // the firmware's own measurement of itself.
    let dir = tempfile::tempdir().unwrap();
    let ramdisk = metal_tests::hil::ramdisk();
    let bundle = metal_tests::tpm::local_ca_bundle(dir.path(), true);
    let s = serving_with(&ramdisk.join("vmlinuz"), &ramdisk.join("initrd.cpio.gz"), "rdinit=/bin/metal-boot", |c| {
        c.boot.tpm_ca_file = Some(bundle)
    });
    let mac = "52:54:00:00:07:0b";
    s.enrol("hil-11", mac);
    let pool = serde_json::json!({"id": "p1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated",
        "policy": {"measuredBoot": {"mode": "enforce"}}});
    assert_eq!(s.call("POST", "/v1/pools", Some(pool)).0, 201);
    assert_eq!(s.call("PATCH", "/v1/nodes/hil-11", Some(serde_json::json!({"poolId": "p1"}))).0, 200);
    let tftp = tftp_dir(dir.path(), &format!("http://10.0.2.2:{}", s.port));
    let state = metal_tests::tpm::manufacture(&dir.path().join("tpm"));
    let machine = || Guest::new().tpm(&state).boot(BootFrom::Network(tftp.clone())).nic(mac).until("report sent");
    let console =
        machine().uefi().timeout(Duration::from_secs(420)).run_again_if_stalled_after(|| drop(s.arm_boot("hil-11")));
    assert!(console.finished, "{}", console.text);
    assert!(
        console.text.contains("joined the controller as spiffe://metal/node/hil-11/gen/1/ramdisk"),
        "{}",
        console.text
    );
    assert!(console.text.contains("measured boot: attestation accepted"), "{}", console.text);
    let (status, attestations) = s.call("GET", "/v1/nodes/hil-11/attestations", None);
    assert_eq!(status, 200, "{attestations}");
    let attestation = &attestations[0];
    assert_eq!(attestation["verified"], true, "{attestations}");
    // The firmware measured itself (PCR 0) and iPXE measured the kernel it started (PCR 4).
    for pcr in ["0", "4"] {
        assert_ne!(attestation["pcrs"][pcr], "0".repeat(64), "PCR {pcr}: {attestations}");
    }
    let registered = s.events("node.tpm.registered");
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0]["data"]["certificate"], "verified", "{registered:?}");
    let (_, baselines) = s.call("GET", "/v1/nodes/hil-11/boot-baselines", None);
    assert_eq!(
        (&baselines[0]["learnedBy"], &baselines[0]["attestationId"]),
        (&serde_json::json!("commissioning"), &attestation["id"])
    );

    // Commissioned again, with the 4 MiB OVMF build (code and variable store in flash).
    let state_now = s.node("hil-11")["state"].as_str().unwrap().to_owned();
    s.walk("hil-11", &[&state_now, "commissioning"]);
    s.arm_boot("hil-11");
    let ovmf = Path::new("/usr/share/OVMF");
    let console = machine()
        .uefi_split(&ovmf.join("OVMF_CODE_4M.fd"), &ovmf.join("OVMF_VARS_4M.fd"), dir.path())
        .timeout(Duration::from_secs(420))
        .run_again_if_stalled_after(|| drop(s.arm_boot("hil-11")));
    assert!(console.text.contains("measured boot: attestation accepted"), "{}", console.text);
    let (_, attestations) = s.call("GET", "/v1/nodes/hil-11/attestations", None);
    let second = attestations.as_array().unwrap().iter().find(|a| a["id"] != attestation["id"]).unwrap();
    assert_eq!(second["verified"], true, "{attestations}");
    let id = second["id"].as_str().unwrap();
    let (_, detail) = s.call("GET", &format!("/v1/nodes/hil-11/attestations/{id}"), None);
    let difference = detail["comparisons"][0]["difference"].as_str().unwrap_or_else(|| panic!("{detail}"));
    assert!(difference.starts_with("PCR 0 differs (event "), "{detail}");
    assert!(difference.ends_with(&format!("from baseline {}", baselines[0]["id"].as_str().unwrap())), "{detail}");
    let event: usize = difference["PCR 0 differs (event ".len()..].split(',').next().unwrap().parse().unwrap();
    let measured = detail["events"].as_array().unwrap().iter().find(|e| e["number"] == event).unwrap();
    assert_eq!(measured["pcr"], 0, "{detail}");
    assert!(difference.contains(measured["eventType"].as_str().unwrap()), "{detail}");

    // That firmware approved as the node's baseline, the machine boots once more with the
    // same code and a variable store where a tenant allowed its own boot loader in Secure
    // Boot's db (virt-fw-vars --add-db-hash; no PK, so nothing is enforced yet): the firmware
    // is the same (PCR 0), its Secure Boot configuration is not (PCR 7, the variables
    // measured as EV_EFI_VARIABLE_DRIVER_CONFIG).
    let approval = serde_json::json!({"attestationId": id});
    assert_eq!(s.call("POST", "/v1/nodes/hil-11/boot-baselines", Some(approval)).0, 201);
    s.walk("hil-11", &[s.node("hil-11")["state"].as_str().unwrap(), "commissioning"]);
    s.arm_boot("hil-11");
    let keys = dir.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let tenant_vars = keys.join("tenant-db.fd");
    let written = std::process::Command::new("/opt/metal-venv/bin/virt-fw-vars")
        .arg("--input")
        .arg(ovmf.join("OVMF_VARS_4M.fd"))
        .arg("--output")
        .arg(&tenant_vars)
        .args(["--add-db-hash", "a5f0d0b4-4c3e-4d1e-9a43-6b1f3d1c9e27", &"ab".repeat(32)])
        .output()
        .expect("virt-fw-vars (scripts/setup installs virt-firmware)");
    assert!(written.status.success(), "virt-fw-vars: {}", String::from_utf8_lossy(&written.stderr));
    let console = machine()
        .uefi_split(&ovmf.join("OVMF_CODE_4M.fd"), &tenant_vars, &keys)
        .timeout(Duration::from_secs(420))
        .run_again_if_stalled_after(|| drop(s.arm_boot("hil-11")));
    assert!(console.text.contains("measured boot: attestation accepted"), "{}", console.text);
    let (_, attestations) = s.call("GET", "/v1/nodes/hil-11/attestations", None);
    let third =
        attestations.as_array().unwrap().iter().find(|a| a["id"] != attestation["id"] && a["id"] != id).unwrap();
    assert_eq!(third["pcrs"]["0"], second["pcrs"]["0"], "the same firmware: {attestations}");
    assert_ne!(third["pcrs"]["7"], second["pcrs"]["7"], "Secure Boot's keys: {attestations}");
    let (_, detail) = s.call("GET", &format!("/v1/nodes/hil-11/attestations/{}", third["id"].as_str().unwrap()), None);
    let events = detail["events"].as_array().unwrap();
    assert!(events.iter().any(|e| e["pcr"] == 7 && e["eventType"] == "EV_EFI_VARIABLE_DRIVER_CONFIG"), "{detail}");
    let difference = detail["comparisons"][0]["difference"].as_str().unwrap_or_else(|| panic!("{detail}"));
    assert!(difference.starts_with("PCR 1 differs") || difference.starts_with("PCR 7 differs"), "{detail}");
}
