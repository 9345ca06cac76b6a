//! An arm64 (Grace-class) machine under qemu-system-aarch64 (TCG, AAVMF's UEFI) network-boots
//! as the provisioning network's dnsmasq sends it (option 93 = 11: GRUB's arm64 EFI network
//! loader, `ipxe/build-grub-netboot.sh`), and GRUB asks the real scheduler for its script,
//! naming its CPU. The scheduler serves the arm64 ramdisk (`scripts/build-ramdisk --arch
//! aarch64`: Debian's arm64 kernel and busybox, the aarch64 static binaries) with the
//! site's arm64 kernel arguments. It commissions the machine (the node records aarch64 from
//! its inventory, the NVMe disk by its serial); a profile on an arm64 image (a GPT disk
//! whose ESP holds GRUB's arm64 loader and an arm64 OS) is provisioned onto it, the arm64
//! ramdisk writes it bit-exact, and the machine boots it from that disk; the teardown's
//! erase formats the NVMe disk with a signed wipe report the scheduler accepts.

use std::time::Duration;

use metal_tests::hil::{BootFrom, Bus, Console, DISK_MARKER, Guest, MIB, filled, tftp_dir_arm64};
use metal_tests::scheduler::Admin as _;
use metal_types::config::Config;
use serde_json::json;

#[test]
fn an_arm64_machine_boots_grub_from_the_network_commissions_deploys_boots_its_disk_and_is_erased() {
    let dir = tempfile::tempdir().unwrap();
    let ramdisk = metal_tests::hil::ramdisk_aarch64();
    let os = metal_tests::hil::disk_os_arm64(&format!("echo \"arm64 OS on $(uname -m)\"; echo {DISK_MARKER}"));
    let site = metal_tests::hil::DeploySite::serving(os, |c: &mut Config| {
        c.boot.kernel_args_aarch64 = "console=ttyAMA0 panic=-1 rdinit=/bin/metal-boot metal.site-arm64-args".into();
        // The x86 machines' arguments never reach an arm64 one.
        c.boot.kernel_args = "console=ttyS0 metal.site-x86-args".into();
    });
    let s = &site.scheduler;
    let files = s.files_dir().join("aarch64");
    std::fs::create_dir_all(&files).unwrap();
    std::os::unix::fs::symlink(ramdisk.join("vmlinuz"), files.join("vmlinuz")).unwrap();
    std::os::unix::fs::symlink(ramdisk.join("initrd.cpio.gz"), files.join("initrd")).unwrap();
    let mac = "52:54:00:00:0b:01";
    s.enrol("hil-arm", mac);
    let nvme = dir.path().join("nvme.img");
    filled(&nvme, 128 * MIB);
    let tftp = tftp_dir_arm64(dir.path(), &format!("http://10.0.2.2:{}", s.port));
    let machine = || {
        Guest::aarch64()
            .boot(BootFrom::Network(tftp.clone()))
            .nic(mac)
            .disk(&Bus::Nvme { serial: "ARMNVME01".into() }, &nvme, "unmap")
            .timeout(Duration::from_secs(420))
    };
    let boot = || -> Console {
        // A stalled boot may have taken its token: the next is started anew, by hand.
        let console = machine().run_again_if_stalled_after(|| {
            s.arm_boot("hil-arm");
        });
        assert!(console.finished, "the arm64 machine did not end by itself:\n{}", console.text);
        console
    };

    // Commissioning: the firmware's PXE runs GRUB, GRUB asks as arm64, the arm64 ramdisk
    // reports the machine.
    let console = boot();
    let text = &console.text;
    assert!(text.contains("task: Commission") && text.contains("report sent; accepted: true"), "{text}");
    let command_line = text.lines().find(|l| l.contains("Kernel command line:")).unwrap_or_default();
    assert!(command_line.contains("metal.site-arm64-args"), "the arm64 kernel arguments: {text}");
    assert!(!command_line.contains("metal.site-x86-args"), "{command_line}");
    let node = s.node("hil-arm");
    assert_eq!((node["state"].as_str(), node["architecture"].as_str()), (Some("ready"), Some("aarch64")), "{node}");
    assert_eq!(s.events("node.boot.ramdisk")[0]["data"]["arch"], "aarch64");
    let (_, stored) = s.call("GET", "/v1/nodes/hil-arm/inventory", None);
    let report: metal_protocol::InventoryReport = serde_json::from_value(stored["inventory"].clone()).unwrap();
    assert_eq!(report.cpu.architecture, "aarch64");
    let disks: Vec<_> = report.disks.iter().map(|d| (d.identity.serial.as_deref(), d.identity.size_bytes)).collect();
    assert_eq!(disks, [(Some("ARMNVME01"), 128 << 20)], "{stored}");
    assert!(report.passed(), "{:?}", report.tests);

    // The deploy: a profile on the arm64 image lands on the arm64 machine, whose ramdisk
    // writes it bit-exact.
    site.import_arm64("arm64-os");
    let profile = json!({"id": "arm", "image": "arm64-os", "adminUser": "ops",
        "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops"]});
    let (status, body) = s.call("POST", "/v1/profiles", Some(profile));
    assert_eq!(status, 201, "{body}");
    let (status, outcome) = s.call("POST", "/v1/provision", Some(json!({"profileId": "arm", "profileVersion": 1})));
    assert_eq!((status, &outcome["nodes"]), (200, &json!(["hil-arm"])), "{outcome}");
    let console = boot();
    assert!(console.text.contains("task: Deploy") && console.text.contains("deploy done"), "{}", console.text);
    assert_eq!(s.node("hil-arm")["state"], "deployed");
    let written = std::fs::read(&nvme).unwrap();
    // The ESP bit-exact (the deploy adds its seed partition to the GPT around it).
    let esp = MIB..site.image.len() - MIB;
    assert!(written[esp.clone()] == site.image[esp], "the arm64 image is not bit-exact");

    // It network-boots again: the scheduler sends it on, and the firmware boots the disk.
    let console = machine().until(DISK_MARKER).run();
    assert!(console.finished, "the deployed arm64 disk did not boot:\n{}", console.text);
    assert!(console.text.contains("arm64 OS on aarch64"), "{}", console.text);

    // The teardown's erase, the node known as arm64: NVMe Format, read back, the signed
    // report accepted, the node ready again and no old byte left.
    s.walk("hil-arm", &["deployed", "releasing"]);
    s.arm_boot("hil-arm");
    let console = boot();
    let text = &console.text;
    assert!(text.contains("task: Erase"), "{text}");
    assert!(text.contains("/dev/nvme0n1 by nvme-format-user-data: erased and verified"), "{text}");
    assert!(text.contains("erase done: 1 of 1 disks erased and verified; wipe report accepted"), "{text}");
    assert_eq!(s.node("hil-arm")["state"], "ready");
    let (_, records) = s.call("GET", "/v1/nodes/hil-arm/wipe-reports", None);
    let accepted: Vec<_> = records.as_array().unwrap().iter().filter(|r| r["accepted"] == true).collect();
    assert_eq!(accepted.len(), 1, "{records}");
    assert!(accepted[0]["signer"].as_str().unwrap().ends_with("/node/hil-arm/gen/1/ramdisk"), "{records}");
    assert!(std::fs::read(&nvme).unwrap().iter().all(|b| *b == 0), "the NVMe disk still holds data");
}
