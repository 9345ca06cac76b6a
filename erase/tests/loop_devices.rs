//! metal-erase on real loop devices (root required): erase, read-back, markers, concurrency,
//! the signed report and its offline verification, and argument errors.

#![allow(clippy::cast_possible_truncation)] // test sizes are small and the tests run on 64-bit

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use metal_erase::engine::{self, DiskJob, EraseOptions};
use metal_erase::io::{AlignedBuf, BlockTarget};
use metal_erase::pattern::Pattern;
use metal_erase::plan::Capabilities;
use metal_erase::progress::NoProgress;
use metal_erase::{device, verify};
use metal_protocol::Role;
use metal_protocol::wipe::{SanitizeMethod, VerifyMode, WipePolicy, WipeResult};
use metal_tests::identity::TestIdentity;
use metal_tests::loopdev::LoopDevice;

/// What these tests do with a loop device beyond the shared helper.
trait LoopExt {
    /// Writes `bytes` at `offset` through the device, bypassing the page cache.
    fn poke(&self, offset: u64, bytes: &[u8]);
    /// The device as discovery describes it.
    fn device(&self) -> device::BlockDevice;
    /// An erase job for it.
    fn job(&self) -> DiskJob;
}

impl LoopExt for LoopDevice {
    fn poke(&self, offset: u64, bytes: &[u8]) {
        let f = OpenOptions::new().read(true).write(true).custom_flags(libc::O_DIRECT).open(&self.path).unwrap();
        let block = offset / 4096 * 4096;
        let mut buf = AlignedBuf::new(4096);
        f.read_exact_at(&mut buf, block).unwrap();
        let at = (offset - block) as usize;
        buf[at..at + bytes.len()].copy_from_slice(bytes);
        f.write_all_at(&buf, block).unwrap();
    }

    fn device(&self) -> device::BlockDevice {
        let paths = device::SystemPaths::default();
        let devices = device::discover(&paths).unwrap();
        let (mut chosen, _) =
            device::select(&devices, &device::Selection::Named(vec![self.path.clone()]), &paths.sys).unwrap();
        chosen.remove(0)
    }

    fn job(&self) -> DiskJob {
        DiskJob {
            device: self.device(),
            target: Box::new(BlockTarget::open(&self.path, true).unwrap()),
            capabilities: Capabilities::default(),
        }
    }
}

const MIB: u64 = 1 << 20;

#[test]
fn overwrite_with_full_read_back_passes_and_leaves_only_zeros() {
    let disk = LoopDevice::new(48 * MIB);
    let options = EraseOptions { policy: WipePolicy::Overwrite, io_size: 4 << 20, ..Default::default() };
    let wipe = engine::erase_disk(&disk.job(), &options, &NoProgress);
    assert_eq!(wipe.result, WipeResult::Pass, "{wipe:?}");
    assert_eq!(wipe.method, Some(SanitizeMethod::OverwriteZeros));
    let v = wipe.verification.unwrap();
    assert_eq!((v.mode, v.coverage_percent, v.bytes_read), (VerifyMode::Full, 100.0, 48 * MIB));
    assert!(disk.read_all().iter().all(|b| *b == 0), "old data left on the disk");
}

#[test]
fn a_random_overwrite_is_verified_against_the_keyed_stream() {
    let disk = LoopDevice::new(16 * MIB);
    let options = EraseOptions {
        policy: WipePolicy::Overwrite,
        pattern: metal_erase::plan::SoftwarePattern::Random,
        ..Default::default()
    };
    let wipe = engine::erase_disk(&disk.job(), &options, &NoProgress);
    assert_eq!(wipe.result, WipeResult::Pass, "{wipe:?}");
    assert_eq!(wipe.verification.unwrap().expected, "keyed-stream");
    let data = disk.read_all();
    assert!(!data.windows(4096).step_by(4096).any(|w| w.iter().all(|b| *b == 0xa5)), "old data left");
}

#[test]
fn one_corrupted_byte_after_the_erase_is_caught_at_its_offset() {
    let disk = LoopDevice::new(16 * MIB);
    let target = BlockTarget::open(&disk.path, true).unwrap();
    engine::overwrite(&target, &Pattern::Zeros, 1 << 20, &|_| {}).unwrap();
    drop(target);
    let bad = 11 * MIB + 12_345;
    disk.poke(bad, &[0x01]);
    let target = BlockTarget::open(&disk.path, false).unwrap();
    let read_back = verify::full(&target, &Pattern::Zeros, 1 << 20, &|_| {}).unwrap();
    assert_eq!(read_back.first_bad_offset, Some(bad));
    // Sampling at full coverage finds it too.
    let positions = verify::sample_positions(16 * MIB, 512, 100.0, 3);
    let sampled = verify::sampled(&target, &Pattern::Zeros, &positions, &|_| {}).unwrap();
    assert_eq!(sampled.first_bad_offset, Some(bad));
}

#[test]
fn unsupported_secure_discard_falls_back_to_overwrite_and_is_recorded() {
    // Loop devices answer BLKSECDISCARD with EOPNOTSUPP.
    let disk = LoopDevice::new(8 * MIB);
    let wipe = engine::erase_disk(&disk.job(), &EraseOptions::default(), &NoProgress);
    assert_eq!(wipe.result, WipeResult::Pass, "{wipe:?}");
    let discard = wipe.commands.iter().find(|c| c.command.starts_with("BLKSECDISCARD")).unwrap();
    assert!(!discard.ok && discard.status.contains("0x5f"), "{discard:?}");
    let rejected = wipe.rejected_methods.iter().find(|r| r.method == SanitizeMethod::SecureDiscard).unwrap();
    assert!(rejected.capability.contains("BLKSECDISCARD"), "{rejected:?}");
    // Purge was asked for but no firmware method exists: the report says Clear.
    assert_eq!(wipe.nist_category, Some(metal_protocol::wipe::NistCategory::Clear));
}

#[test]
fn a_forced_method_the_device_refuses_fails_the_disk_without_fallback() {
    let disk = LoopDevice::new(8 * MIB);
    let options = EraseOptions { forced_method: Some(SanitizeMethod::SecureDiscard), ..Default::default() };
    let wipe = engine::erase_disk(&disk.job(), &options, &NoProgress);
    assert_eq!(wipe.result, WipeResult::Fail);
    assert_eq!(wipe.failure.as_deref(), Some("every method was refused"));
    assert!(disk.read_all().contains(&0xa5), "nothing else may have run");
}

#[test]
fn markers_are_planted_and_must_be_gone() {
    let disk = LoopDevice::new(16 * MIB);
    let target = BlockTarget::open(&disk.path, true).unwrap();
    let markers = verify::Markers::plant(&target, 64, 42).unwrap();
    assert_eq!(markers.len(), 64);
    let survived = markers.check(&target).unwrap();
    assert!(survived.first_bad_offset.is_some(), "markers not found right after planting");
    engine::overwrite(&target, &Pattern::Zeros, 1 << 20, &|_| {}).unwrap();
    assert_eq!(markers.check(&target).unwrap().first_bad_offset, None);
    drop(target);
    // And the markers mode of a whole run passes on an honest overwrite.
    let options = EraseOptions { verify: Some(VerifyMode::Markers), coverage_percent: 10.0, ..Default::default() };
    let wipe = engine::erase_disk(&disk.job(), &options, &NoProgress);
    assert_eq!(wipe.result, WipeResult::Pass, "{wipe:?}");
    assert!(wipe.verification.unwrap().sample_seed.is_some());
}

fn identity_files(dir: &Path, role: Role) -> (PathBuf, PathBuf, PathBuf) {
    TestIdentity::issue("node-9", 2, role).write(dir)
}

fn metal_erase(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metal-erase")).args(args).output().unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `metal-erase run --yes-destroy-data` on `devices`, signing with `key`/`cert` into `report`.
fn erase_devices(key: &Path, cert: &Path, report: &Path, devices: &[&Path]) -> Output {
    let mut args = vec!["run", "--yes-destroy-data", "--key", s(key), "--cert", s(cert), "--report", s(report)];
    for d in devices {
        args.extend(["--device", s(d)]);
    }
    metal_erase(&args)
}

#[test]
fn cli_erases_several_disks_at_once_and_the_signed_report_verifies_offline() {
    let disks: Vec<LoopDevice> = (0..3).map(|_| LoopDevice::new(32 * MIB)).collect();
    let tmp = tempfile::tempdir().unwrap();
    let (key, cert, ca) = identity_files(tmp.path(), Role::Ramdisk);
    let report = tmp.path().join("report.json");
    let paths: Vec<&Path> = disks.iter().map(|d| d.path.as_path()).collect();
    let out = erase_devices(&key, &cert, &report, &paths);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    // JSON-lines progress on a non-terminal stderr.
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.lines().any(|l| l.contains("\"phase\":\"verify\"")), "{stderr}");

    let envelope: metal_protocol::Envelope = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    let payload: metal_protocol::WipeReport = serde_json::from_slice(&envelope.payload_bytes().unwrap()).unwrap();
    assert_eq!(payload.node_id, "node-9");
    assert_eq!(payload.disks.len(), 3);
    // The three disks ran concurrently: every one started before any finished.
    let last_start = payload.disks.iter().map(|d| d.started_at).max().unwrap();
    let first_end = payload.disks.iter().map(|d| d.finished_at).min().unwrap();
    assert!(last_start < first_end, "disks were erased one after another");
    for d in &disks {
        assert!(d.read_all().iter().all(|b| *b == 0));
    }

    let out = metal_erase(&["verify", "--ca", s(&ca), s(&report)]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("VALID") && stdout.contains("overwrite-zeros") && stdout.contains("Clear"), "{stdout}");

    // Tampering with one byte of the payload makes the report invalid.
    let mut tampered = envelope.clone();
    let mut bytes = tampered.payload_bytes().unwrap();
    let i = bytes.iter().position(|b| *b == b'p').unwrap();
    bytes[i] = b'q';
    use base64::Engine as _;
    tampered.payload = base64::engine::general_purpose::STANDARD.encode(bytes);
    let bad = tmp.path().join("tampered.json");
    std::fs::write(&bad, serde_json::to_vec(&tampered).unwrap()).unwrap();
    let out = metal_erase(&["verify", "--ca", s(&ca), s(&bad)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("bad-signature"));
}

#[test]
fn a_report_signed_by_a_tenant_certificate_does_not_verify() {
    let disk = LoopDevice::new(8 * MIB);
    let tmp = tempfile::tempdir().unwrap();
    let (key, cert, ca) = identity_files(tmp.path(), Role::NodeTenant);
    let report = tmp.path().join("r.json");
    let out = erase_devices(&key, &cert, &report, &[&disk.path]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let out = metal_erase(&["verify", "--ca", s(&ca), s(&report)]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).contains("role-not-allowed"));
}

#[test]
fn bad_arguments_exit_2_and_touch_nothing() {
    let disk = LoopDevice::new(4 * MIB);
    let tmp = tempfile::tempdir().unwrap();
    let (key, cert, _) = identity_files(tmp.path(), Role::Ramdisk);
    let report = tmp.path().join("r.json");
    let base = ["run", "--key", s(&key), "--cert", s(&cert), "--report", s(&report)];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--device", s(&disk.path)], "--yes-destroy-data"),
        (vec!["--yes-destroy-data"], "--device PATH"),
        (vec!["--yes-destroy-data", "--device", "/dev/null"], "not a block device"),
        (vec!["--yes-destroy-data", "--device", s(&disk.path), "--coverage", "0"], "--coverage"),
    ];
    for (extra, expected) in cases {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(extra);
        let out = metal_erase(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    // A key that is not the certificate's.
    let other = tempfile::tempdir().unwrap();
    let (other_key, _, _) = identity_files(other.path(), Role::Ramdisk);
    let out = erase_devices(&other_key, &cert, &report, &[&disk.path]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not belong"));
    // An existing report is never overwritten.
    std::fs::write(&report, b"keep me").unwrap();
    let out = erase_devices(&key, &cert, &report, &[&disk.path]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&report).unwrap(), b"keep me");
    assert!(disk.read_all().iter().all(|b| *b == 0xa5), "a refused run wrote to the disk");
}

#[test]
fn a_closed_stdout_ends_list_quietly() {
    use std::os::unix::process::ExitStatusExt as _;
    // The read end of stdout is closed before metal-erase writes its table: SIGPIPE ends it,
    // as it would `metal-erase list | head -0`, with no panic on stderr.
    let disk = LoopDevice::new(1 << 20);
    let mut child = Command::new(env!("CARGO_BIN_EXE_metal-erase"))
        .args(["list", "--device", s(&disk.path)])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(output.status.success() || output.status.signal() == Some(libc::SIGPIPE), "{:?}: {stderr}", output.status);
}
