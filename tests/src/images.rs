//! Disk images and cloud-init seeds for deploy tests, and the mirror they are imported from.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use crate::controller::{ImageServer, Misbehaviour};

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

/// `image` with a DOS partition table written over its first sector: one Linux partition
/// from 1 MiB to its end, and the boot signature (an import refuses an image without a
/// partition table: a deploy could never add its seed).
pub fn with_mbr(mut image: Vec<u8>) -> Vec<u8> {
    assert!(image.len() > MIB, "an image with a partition from 1 MiB is more than 1 MiB");
    let sectors = u32::try_from((image.len() - MIB) / 512).unwrap();
    image[446..512].fill(0);
    let entry = &mut image[446..462];
    entry[4] = 0x83;
    entry[8..12].copy_from_slice(&2048u32.to_le_bytes());
    entry[12..16].copy_from_slice(&sectors.to_le_bytes());
    image[510] = 0x55;
    image[511] = 0xaa;
    image
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

/// An image mirror on its own CA (the scheduler trusts that CA for imports: give
/// `ca_file` to `Config::images.ca_file`).
#[derive(Debug)]
pub struct Mirror {
    /// The server.
    pub server: ImageServer,
    /// The mirror CA's certificate (PEM).
    pub ca_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Mirror {
    /// Serves `files` (name -> bytes), misbehaving as told.
    pub fn start(files: HashMap<String, Vec<u8>>, misbehaviour: Misbehaviour) -> Mirror {
        let ca = metal_protocol::SiteCa::create(
            "mirror",
            SystemTime::now() - Duration::from_secs(600),
            Duration::from_secs(86400),
        )
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ca_file = dir.path().join("mirror-ca.pem");
        std::fs::write(&ca_file, ca.certificate().pem()).unwrap();
        let server = ImageServer::misbehaving(&ca, &[], files, misbehaviour);
        Mirror { server, ca_file, _dir: dir }
    }

    /// Imports `file` (whose bytes are `bytes`) into `s` as `name`, verified by its SHA-256,
    /// and waits until it is ready (at most `timeout`); returns the image id.
    pub fn import(
        &self,
        s: &crate::scheduler::TestScheduler,
        file: &str,
        bytes: &[u8],
        name: &str,
        timeout: Duration,
    ) -> String {
        self.import_for(s, file, bytes, name, None, timeout)
    }

    /// [`Mirror::import`] as an image for `architecture` (`amd64`, `arm64`; None: the default).
    pub fn import_for(
        &self,
        s: &crate::scheduler::TestScheduler,
        file: &str,
        bytes: &[u8],
        name: &str,
        architecture: Option<&str>,
        timeout: Duration,
    ) -> String {
        let sha256 = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(bytes));
        let mut body = serde_json::json!({"url": self.server.url(file), "checksum": sha256, "name": name});
        if let Some(architecture) = architecture {
            body["architecture"] = architecture.into();
        }
        let (status, started) = s.call("POST", "/v1/images", Some(body));
        assert_eq!(status, 202, "{started}");
        let id = started["id"].as_str().unwrap().to_owned();
        let deadline = Instant::now() + timeout;
        while s.call("GET", &format!("/v1/images/{id}"), None).1["state"] == "importing" {
            assert!(Instant::now() < deadline, "the import did not end");
            std::thread::sleep(Duration::from_millis(200));
        }
        let (_, imported) = s.call("GET", &format!("/v1/images/{id}"), None);
        assert_eq!(imported["state"], "ready", "{imported}");
        id
    }
}

/// `bytes` compressed by the zstd tool with `args` (`-q -3 -c`, say).
pub fn zstd_cli(bytes: &[u8], args: &[&str]) -> Vec<u8> {
    use std::io::Write as _;
    let mut child = Command::new("zstd").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success());
    out.stdout
}
