//! The real scheduler drives real ramdisk boots in QEMU: machines PXE-boot through QEMU's
//! iPXE option ROM and the repository's `ipxe/metal.ipxe`, fetch their script, kernel and
//! initrd from the scheduler's boot service, join it over TLS and report. Commissioning
//! stores the inventory QEMU was given; the erase's signed wipe report is accepted (and a
//! tenant-signed or partial one refused); a disk that lies about discards is caught.

use std::path::Path;
use std::time::Duration;

use metal_protocol::{InventoryReport, Role, WipeReport};
use metal_scheduler::config::Config;
use metal_tests::hil::{BootFrom, Bus, Console, Guest, tftp_dir};
use metal_tests::scheduler::TestScheduler;
use serde_json::Value;

const MIB: usize = 1 << 20;

/// A scheduler whose boot service guests reach at 10.0.2.2 and that serves the test ramdisk
/// with metal-boot as PID 1; `extra` goes on every ramdisk's kernel command line.
fn scheduler(extra: &str) -> TestScheduler {
    let ramdisk = metal_tests::hil::ramdisk();
    let args = format!("console=ttyS0 panic=-1 rdinit=/bin/metal-boot {extra}");
    let s = TestScheduler::start(|c: &mut Config| {
        let port = c.boot.listen.unwrap().port();
        c.boot.controller_url = Some(format!("https://10.0.2.2:{port}"));
        c.boot.kernel_args = args;
    });
    let files = s.files_dir();
    std::fs::create_dir_all(&files).unwrap();
    std::os::unix::fs::symlink(ramdisk.join("vmlinuz"), files.join("vmlinuz")).unwrap();
    std::os::unix::fs::symlink(ramdisk.join("initrd.cpio.gz"), files.join("initrd")).unwrap();
    s
}

/// Network-boots a guest with `disks` (bus, image, discard mode) until it ends by itself.
fn pxe_boot(s: &TestScheduler, dir: &Path, mac: &str, disks: &[(Bus, &Path, &str)]) -> Console {
    let tftp = tftp_dir(dir, &format!("http://10.0.2.2:{}", s.port));
    let mut guest = Guest::new().boot(BootFrom::Network(tftp)).nic(mac).timeout(Duration::from_secs(420));
    for (bus, image, discard) in disks {
        guest = guest.disk(bus, image, discard);
    }
    let console = guest.run();
    assert!(console.finished, "the guest did not end by itself:\n{}", console.text);
    console
}

fn filled(path: &Path, size: usize) {
    let block: Vec<u8> = (0..MIB).map(|i| u8::try_from(i % 251).unwrap() | 1).collect();
    std::fs::write(path, block.repeat(size / MIB)).unwrap();
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
        serde_json::from_str(include_str!("../../protocol/tests/golden/wipe-report.json")).unwrap();
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

    let console = pxe_boot(&s, dir.path(), mac, &disks);
    assert!(console.text.contains("/dev/vda by discard: FAILED"), "{}", console.text);
    assert!(console.text.contains("wipe report refused: disk-failed"), "{}", console.text);
    let node = s.node("hil-3");
    assert_eq!((node["state"].as_str(), node["failedFrom"].as_str()), (Some("failed"), Some("releasing")), "{node}");
    let (_, records) = s.call("GET", "/v1/nodes/hil-3/wipe-reports", None);
    assert_eq!(records[0]["code"], "disk-failed", "{records}");
    assert!(std::fs::read(&liar).unwrap().iter().any(|b| *b != 0), "the data really is still there");
}

/// `ipxe/build-ipxe-iso.sh` for the scheduler at `url`.
fn iso(dir: &Path, url: &str, hybrid: bool) -> std::path::PathBuf {
    let out = dir.join(if hybrid { "hybrid.iso" } else { "bios.iso" });
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ipxe/build-ipxe-iso.sh");
    let mut command = std::process::Command::new(script);
    command.args(["--url", url]).arg(&out);
    if hybrid {
        command.arg("--hybrid");
    }
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    out
}

#[test]
fn virtual_media_isos_boot_the_ramdisk_to_the_controller() {
    let dir = tempfile::tempdir().unwrap();
    let s = scheduler("");
    let url = format!("http://10.0.2.2:{}", s.port);
    let disk = dir.path().join("disk.img");
    filled(&disk, 16 * MIB);

    // 6. The isolinux ISO as a CD: iPXE with the embedded script, then the whole commissioning.
    let mac = "52:54:00:00:07:06";
    s.enrol("hil-6", mac);
    let console = Guest::new()
        .boot(BootFrom::Cdrom(iso(dir.path(), &url, false)))
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

    // The BIOS + UEFI ISO from grub-mkrescue, under BIOS: GRUB starts the same iPXE.
    let mac = "52:54:00:00:07:07";
    s.enrol("hil-7", mac);
    let console = Guest::new()
        .boot(BootFrom::Cdrom(iso(dir.path(), &url, true)))
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
}
