//! metal-erase inside the test ramdisk on QEMU, against an NVMe, a SATA (AHCI), a virtio
//! and a virtio-scsi disk full of data: the probes read what each device really offers (QEMU's NVMe
//! controller formats but has no Sanitize and cannot crypto erase, FNA=0; its AHCI disk has
//! neither the ATA Security nor the Sanitize feature set; its SCSI disk does not report
//! SANITIZE support), the NVMe disk is erased by
//! Format NVM (user data erase) and proved by markers and samples, the others are
//! overwritten and read back in full, and the signed report verifies offline. A Sanitize the
//! operator names on that NVMe disk is refused by the controller and reported. The host then
//! reads every disk image: nothing of the data is left.

use std::path::Path;
use std::time::Duration;

use metal_protocol::wipe::{SanitizeMethod, VerifyMode, WipeResult};
use metal_protocol::{CaCertificate, Envelope, Role};
use metal_tests::hil::{Bus, Guest};
use metal_tests::identity::TestIdentity;
use serde_json::Value;

const SIZE: usize = 64 << 20;

/// The tenant's data: never zero, so any byte left over shows.
fn tenant_data(seed: u8) -> Vec<u8> {
    (0..SIZE).map(|i| (i.to_le_bytes()[0] ^ seed) | 1).collect()
}

fn filled_disk(path: &Path, seed: u8) {
    std::fs::write(path, tenant_data(seed)).unwrap();
}

/// 4 KiB blocks of the image that still hold the tenant's data.
fn surviving_blocks(path: &Path, seed: u8) -> usize {
    let (now, before) = (std::fs::read(path).unwrap(), tenant_data(seed));
    now.chunks(4096).zip(before.chunks(4096)).filter(|(a, b)| a == b).count()
}

#[test]
fn erase_nvme_sata_virtio_and_scsi_in_the_ramdisk() {
    let dir = tempfile::tempdir().unwrap();
    let identity = TestIdentity::issue("hil-node-1", 4, Role::Ramdisk);
    let (key_pem, chain, ca) = (&identity.key_pem, &identity.chain_pem, &identity.ca);

    let image = |name: &str| dir.path().join(format!("{name}.img"));
    let (nvme, sata, virtio, scsi) = (image("nvme"), image("sata"), image("virtio"), image("scsi"));
    for (seed, disk) in [&nvme, &sata, &virtio, &scsi].into_iter().enumerate() {
        filled_disk(disk, u8::try_from(seed).unwrap());
    }
    // The forced run names the NVMe namespace by path: NVMe names follow the controller
    // order, and there is one controller.
    let console = Guest::new()
        .disk(&Bus::Nvme { serial: "HILNVME01".into() }, &nvme, "unmap")
        .disk(&Bus::Sata { model: "HILSATA".into(), serial: "HILSATA01".into() }, &sata, "unmap")
        .disk(&Bus::Virtio { serial: "HILVIRTIO01".into() }, &virtio, "unmap")
        .disk(&Bus::Scsi { serial: "HILSCSI01".into() }, &scsi, "unmap")
        .file("/etc/metal/id.key", key_pem.as_bytes(), 0o600)
        .file("/etc/metal/id.crt", chain.as_bytes(), 0o644)
        .script(
            "echo BEGIN list; metal-erase list --json; echo END list\n\
             METAL_LOG=warn metal-erase run --all --yes-destroy-data --key /etc/metal/id.key --cert /etc/metal/id.crt \
               --report /tmp/report.json --coverage 5 2>/tmp/erase.log; echo \"erase-exit $?\"\n\
             echo BEGIN report; cat /tmp/report.json; echo; echo END report\n\
             echo BEGIN log; tail -5 /tmp/erase.log; echo END log\n\
             METAL_LOG=warn metal-erase run --device /dev/nvme0n1 --method nvme-sanitize-crypto --yes-destroy-data \
               --key /etc/metal/id.key --cert /etc/metal/id.crt --report /tmp/forced.json 2>/dev/null; echo \"forced-exit $?\"\n\
             echo BEGIN forced; cat /tmp/forced.json; echo; echo END forced",
        )
        .timeout(Duration::from_secs(300))
        .run_again_if_stalled();
    assert!(console.finished, "the guest did not power off:\n{}", console.text);
    assert!(console.text.contains("erase-exit 0"), "{}", console.text);

    // What list planned for each disk.
    let list: Value = serde_json::from_str(&console.section("list").unwrap()).unwrap();
    // By serial: kernel names (sda, sdb) depend on probe order.
    let row = |serial: &str| {
        let rows = list.as_array().unwrap();
        rows.iter()
            .find(|r| r["disk"]["identity"]["serial"] == serial)
            .cloned()
            .unwrap_or_else(|| panic!("no {serial}: {list:#}"))
    };
    let methods = |r: &Value| {
        r["plan"].as_array().unwrap().iter().map(|m| m["method"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(methods(&row("HILNVME01")), ["nvme-format-user-data", "overwrite-zeros"], "{list:#}");
    let rejected = |r: &Value| {
        r["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["method"].as_str().unwrap().to_owned(), m["capability"].as_str().unwrap().to_owned()))
            .collect::<Vec<_>>()
    };
    let nvme_rejected = rejected(&row("HILNVME01"));
    assert!(nvme_rejected.contains(&("nvme-sanitize-crypto".into(), "SANICAP.CES=0".into())), "{nvme_rejected:?}");
    assert!(
        nvme_rejected.contains(&("nvme-format-crypto".into(), "OACS.FORMAT=1, FNA.CRYPTO=0".into())),
        "{nvme_rejected:?}"
    );
    assert_eq!(methods(&row("HILSATA01")), ["overwrite-zeros"]);
    let sata_rejected = rejected(&row("HILSATA01"));
    assert!(
        sata_rejected
            .iter()
            .any(|(m, why)| m == "ata-security-erase" && why.contains("Security feature set not supported")),
        "{sata_rejected:?}"
    );
    assert!(
        sata_rejected
            .iter()
            .any(|(m, why)| m == "ata-sanitize-block" && why.contains("SANITIZE feature set not supported")),
        "{sata_rejected:?}"
    );
    assert_eq!(methods(&row("HILVIRTIO01")), ["overwrite-zeros"]);
    assert!(rejected(&row("HILVIRTIO01")).is_empty());
    // QEMU's SCSI disk does not answer REPORT SUPPORTED OPERATION CODES: SANITIZE is unknown,
    // so it is not tried.
    assert_eq!(methods(&row("HILSCSI01")), ["overwrite-zeros"]);
    let scsi_rejected = rejected(&row("HILSCSI01"));
    assert!(
        scsi_rejected.iter().any(|(m, why)| m == "scsi-sanitize-crypto" && why.starts_with("SANITIZE support unknown")),
        "{scsi_rejected:?}"
    );

    // The signed report verifies offline and says what was done to each disk.
    let envelope = Envelope::from_json(console.section("report").unwrap().as_bytes()).unwrap();
    let ca_cert = CaCertificate::from_pem(&ca.certificate().pem()).unwrap();
    let report = metal_erase::report::verify_offline(&envelope, &ca_cert, None)
        .unwrap_or_else(|e| panic!("{e:?}\n{}", console.text));
    assert_eq!(report.node_id, "hil-node-1");
    let disk = |serial: &str| {
        report
            .disks
            .iter()
            .find(|d| d.identity.serial.as_deref() == Some(serial))
            .unwrap_or_else(|| panic!("no {serial}"))
    };
    let nvme_wipe = disk("HILNVME01");
    assert_eq!(
        (nvme_wipe.method, nvme_wipe.result),
        (Some(SanitizeMethod::NvmeFormatUserData), WipeResult::Pass),
        "{nvme_wipe:#?}"
    );
    assert_eq!(nvme_wipe.verification.as_ref().unwrap().mode, VerifyMode::Markers);
    assert!(
        nvme_wipe.commands.iter().any(|c| c.command.starts_with("Format NVM nsid 1") && c.ok),
        "{:#?}",
        nvme_wipe.commands
    );
    for serial in ["HILSATA01", "HILVIRTIO01", "HILSCSI01"] {
        let wipe = disk(serial);
        assert_eq!((wipe.method, wipe.result), (Some(SanitizeMethod::OverwriteZeros), WipeResult::Pass), "{wipe:#?}");
        assert_eq!(wipe.verification.as_ref().unwrap().mode, VerifyMode::Full);
    }

    // Sanitize named by the operator on QEMU's NVMe (no Sanitize): the controller rejects
    // the command, the report says so, nothing passes.
    assert!(console.text.contains("forced-exit 3"), "{}", console.text);
    let forced = Envelope::from_json(console.section("forced").unwrap().as_bytes()).unwrap();
    let forced: metal_protocol::WipeReport = serde_json::from_slice(&forced.payload_bytes().unwrap()).unwrap();
    let wipe = &forced.disks[0];
    assert_eq!((wipe.method, wipe.result), (None, WipeResult::Fail));
    assert!(
        wipe.rejected_methods
            .iter()
            .any(|r| r.method == SanitizeMethod::NvmeSanitizeCrypto && r.capability.contains("Invalid Command Opcode")),
        "{wipe:#?}"
    );

    // And on the host, nothing of the data is left on any disk.
    // (The NVMe disk holds the markers planted before the refused sanitize; the others
    // are all zeros.)
    for (seed, image) in [&nvme, &sata, &virtio, &scsi].into_iter().enumerate() {
        assert_eq!(surviving_blocks(image, u8::try_from(seed).unwrap()), 0, "{} still holds data", image.display());
    }
    for image in [&sata, &virtio, &scsi] {
        assert!(std::fs::read(image).unwrap().iter().all(|b| *b == 0), "{} is not all zeros", image.display());
    }
}
