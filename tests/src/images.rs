//! Disk images and cloud-init seeds for deploy tests.

use std::process::{Command, Stdio};

const MIB: usize = 1 << 20;

/// The NoCloud seed deploy tests write: host `hostname`, an `ops` admin with one SSH key, a
/// FAT seed partition.
pub fn seed(instance_id: &str, hostname: &str) -> metal_protocol::deploy::CloudInitSeed {
    metal_protocol::cloudinit::render(&metal_protocol::cloudinit::SeedInput {
        instance_id: instance_id.into(),
        hostname: hostname.into(),
        admin_user: "ops".into(),
        ssh_authorized_keys: vec![
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops".into(),
        ],
        join: None,
        network: vec![],
        volume: metal_protocol::deploy::SeedVolume::VfatPartition,
        extras: Default::default(),
    })
    .unwrap()
}

/// An 8 MiB GPT disk image (made with sfdisk) with one Linux partition named `root` from
/// 1 MiB to 7 MiB, full of never-zero data.
pub fn gpt_image(dir: &std::path::Path) -> Vec<u8> {
    let file = dir.join("gpt.img");
    std::fs::write(&file, vec![0u8; 8 * MIB]).unwrap();
    let mut sfdisk = Command::new("sfdisk")
        .arg("--quiet")
        .arg(&file)
        .stdin(Stdio::piped())
        .spawn()
        .expect("sfdisk (scripts/setup installs fdisk)");
    std::io::Write::write_all(
        sfdisk.stdin.as_mut().unwrap(),
        b"label: gpt\nstart=2048, size=12288, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=\"root\"\n",
    )
    .unwrap();
    assert!(sfdisk.wait().unwrap().success());
    let mut image = std::fs::read(&file).unwrap();
    for (i, b) in image[MIB..7 * MIB].iter_mut().enumerate() {
        *b = u8::try_from(i % 251).unwrap() ^ 0x5a | 1;
    }
    image
}
