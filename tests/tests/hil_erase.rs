//! metal-erase inside the test ramdisk on QEMU, against an NVMe, a SATA (AHCI) and a
//! virtio disk full of data: the probes read what each device really offers (QEMU's NVMe
//! controller formats but has no Sanitize and cannot crypto erase, FNA=0; its AHCI disk has
//! neither the ATA Security nor the Sanitize feature set), the NVMe disk is erased by
//! Format NVM (user data erase) and proved by markers and samples, the others are
//! overwritten and read back in full, and the signed report verifies offline. The host then
//! reads every disk image: nothing of the data is left.

use std::path::Path;
use std::time::{Duration, SystemTime};

use metal_protocol::wipe::{SanitizeMethod, VerifyMode, WipeResult};
use metal_protocol::{CaCertificate, Envelope, Role, SigningKey, SiteCa};
use metal_tests::hil::{Bus, Guest};
use serde_json::Value;

const SIZE: usize = 64 << 20;

fn filled_disk(path: &Path, seed: u8) {
    // Never zero, so any byte left over shows.
    let data: Vec<u8> = (0..SIZE).map(|i| (i.to_le_bytes()[0] ^ seed) | 1).collect();
    std::fs::write(path, data).unwrap();
}

fn all_zero(path: &Path) -> bool {
    std::fs::read(path).unwrap().iter().all(|b| *b == 0)
}

#[test]
fn erase_nvme_sata_and_virtio_in_the_ramdisk() {
    let dir = tempfile::tempdir().unwrap();
    let now = SystemTime::now();
    let ca = SiteCa::create("site-a", now - Duration::from_secs(600), Duration::from_secs(86400)).unwrap();
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let cert = ca
        .issue(
            &key.verifying_key(),
            "hil-node-1",
            4,
            Role::Ramdisk,
            now - Duration::from_secs(600),
            Duration::from_secs(3600),
        )
        .unwrap();
    let key_pem = metal_protocol::identity::signing_key_pem(&key).unwrap();
    let chain = metal_protocol::identity::pem_encode("CERTIFICATE", &cert) + &ca.certificate().pem();

    let (nvme, sata, virtio) =
        (dir.path().join("nvme.img"), dir.path().join("sata.img"), dir.path().join("virtio.img"));
    filled_disk(&nvme, 1);
    filled_disk(&sata, 2);
    filled_disk(&virtio, 3);
    let console = Guest::new()
        .disk(&Bus::Nvme { serial: "HILNVME01".into() }, &nvme, "unmap")
        .disk(&Bus::Sata { model: "HILSATA".into(), serial: "HILSATA01".into() }, &sata, "unmap")
        .disk(&Bus::Virtio { serial: "HILVIRTIO01".into() }, &virtio, "unmap")
        .file("/etc/metal/id.key", key_pem.as_bytes(), 0o600)
        .file("/etc/metal/id.crt", chain.as_bytes(), 0o644)
        .script(
            "echo BEGIN list; metal-erase list --json; echo END list\n\
             METAL_LOG=warn metal-erase run --all --yes-destroy-data --key /etc/metal/id.key --cert /etc/metal/id.crt \
               --report /tmp/report.json --coverage 5 2>/tmp/erase.log; echo \"erase-exit $?\"\n\
             echo BEGIN report; cat /tmp/report.json; echo; echo END report\n\
             echo BEGIN log; tail -5 /tmp/erase.log; echo END log",
        )
        .timeout(Duration::from_secs(300))
        .run();
    assert!(console.finished, "the guest did not power off:\n{}", console.text);
    assert!(console.text.contains("erase-exit 0"), "{}", console.text);

    // What list planned for each disk.
    let list: Value = serde_json::from_str(&console.section("list").unwrap()).unwrap();
    let row =
        |name: &str| list.as_array().unwrap().iter().find(|r| r["device"] == format!("/dev/{name}")).cloned().unwrap();
    let methods = |r: &Value| {
        r["plan"].as_array().unwrap().iter().map(|m| m["method"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(methods(&row("nvme0n1")), ["nvme-format-user-data", "overwrite-zeros"], "{list:#}");
    let rejected = |r: &Value| {
        r["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| (m["method"].as_str().unwrap().to_owned(), m["capability"].as_str().unwrap().to_owned()))
            .collect::<Vec<_>>()
    };
    let nvme_rejected = rejected(&row("nvme0n1"));
    assert!(nvme_rejected.contains(&("nvme-sanitize-crypto".into(), "SANICAP.CES=0".into())), "{nvme_rejected:?}");
    assert!(
        nvme_rejected.contains(&("nvme-format-crypto".into(), "OACS.FORMAT=1, FNA.CRYPTO=0".into())),
        "{nvme_rejected:?}"
    );
    assert_eq!(methods(&row("sda")), ["overwrite-zeros"]);
    let sata_rejected = rejected(&row("sda"));
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
    assert_eq!(methods(&row("vda")), ["overwrite-zeros"]);
    assert!(rejected(&row("vda")).is_empty());

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
    for serial in ["HILSATA01", "HILVIRTIO01"] {
        let wipe = disk(serial);
        assert_eq!((wipe.method, wipe.result), (Some(SanitizeMethod::OverwriteZeros), WipeResult::Pass), "{wipe:#?}");
        assert_eq!(wipe.verification.as_ref().unwrap().mode, VerifyMode::Full);
    }

    // And on the host, nothing of the data is left on any disk.
    for image in [&nvme, &sata, &virtio] {
        assert!(all_zero(image), "{} still holds data", image.display());
    }
}
