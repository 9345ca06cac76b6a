//! metal-boot as PID 1 deploys in QEMU: it joins the (test) controller, fetches its plan over
//! mutual TLS, streams a GPT disk image over HTTPS pinned to the site CA onto the guest's
//! NVMe disk (chosen by the plan's serial hint over a smaller virtio disk), adds the
//! cloud-init seed partition, reads everything back and reports the task signed. The host
//! then checks the disk image: the image bit-exact, a valid partition table, and a FAT
//! volume labelled cidata.

use std::process::Command;

use metal_protocol::boot::TaskReport;
use metal_protocol::deploy::DigestAlgorithm;
use metal_tests::hil::{Bus, Guest};

const MIB: usize = 1 << 20;

#[test]
fn metal_boot_deploys_a_plan_from_the_controller_in_the_ramdisk() {
    let dir = tempfile::tempdir().unwrap();
    let token = "tok_hil_deploy_0123456789";
    let controller = metal_tests::controller::TestController::start(&[token], 0, &["10.0.2.2"]);
    let image = metal_tests::images::gpt_image(dir.path());
    let image_file = dir.path().join("disk.img");
    std::fs::write(&image_file, &image).unwrap();
    let url = format!("https://10.0.2.2:{}/images/disk.img", controller.port);
    let mut plan = metal_boot::plan::make_plan(&image_file, &url, 1 << 20, DigestAlgorithm::Sha512).unwrap();
    plan.target.serial = Some("HILNVME01".into());
    plan.cloud_init = Some(metal_tests::images::seed("node-9-gen-2", "node-9"));
    {
        let mut state = controller.state.lock().unwrap();
        state.plan = Some(plan);
        state.files.insert("disk.img".into(), image.clone());
    }
    let (nvme, small) = (dir.path().join("nvme.img"), dir.path().join("small.img"));
    std::fs::write(&nvme, vec![0xa5u8; 64 * MIB]).unwrap();
    std::fs::write(&small, vec![0xa5u8; 40 * MIB]).unwrap();
    let console = Guest::new()
        .args(&["-netdev", "user,id=n0", "-device", "e1000e,netdev=n0"])
        .disk(&Bus::Nvme { serial: "HILNVME01".into() }, &nvme, "unmap")
        .disk(&Bus::Virtio { serial: "HILSMALL".into() }, &small, "unmap")
        .append(&format!(
            "rdinit=/bin/metal-boot metal.task=deploy metal.end=poweroff metal.controller=https://10.0.2.2:{} metal.token={token} metal.ca={}",
            controller.port, controller.fingerprint
        ))
        // A boot that stalls under TCG may have spent the one-time join token: give it back.
        .run_again_if_stalled_after(|| {
            controller.state.lock().unwrap().tokens.insert(token.to_owned());
        });
    assert!(console.finished, "the guest did not power off:\n{}", console.text);
    assert!(console.text.contains("metal-boot: deploy done"), "{}", console.text);

    // The signed task report reached the controller.
    let state = controller.state.lock().unwrap();
    let (_, payload_type, payload) = state.reports.last().unwrap();
    assert_eq!(payload_type, TaskReport::PAYLOAD_TYPE);
    let report: TaskReport = serde_json::from_value(payload.clone()).unwrap();
    assert!(report.ok && report.detail.contains("/dev/nvme0n1"), "{report:?}");

    // The NVMe disk holds the image and the seed; the smaller virtio disk was not touched.
    let written = std::fs::read(&nvme).unwrap();
    assert!(written[MIB..7 * MIB] == image[MIB..7 * MIB], "the image is not bit-exact");
    assert!(std::fs::read(&small).unwrap().iter().all(|b| *b == 0xa5));
    let verify = Command::new("sfdisk").arg("--verify").arg(&nvme).output().unwrap();
    assert!(verify.status.success(), "{}", String::from_utf8_lossy(&verify.stdout));
    let blkid =
        Command::new("blkid").args(["-p", "-o", "export", "-O", &(8 * MIB).to_string()]).arg(&nvme).output().unwrap();
    let found = String::from_utf8_lossy(&blkid.stdout);
    assert!(found.contains("TYPE=vfat") && found.contains("LABEL=cidata"), "{found}");
}
