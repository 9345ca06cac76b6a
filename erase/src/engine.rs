//! Erasing disks: one worker thread per disk runs the plan's methods in order, falling back
//! when the device refuses one, then reads the result back and records every step.
//!
//! A method the device refuses (unsupported command) falls back to the next one; an erase
//! that the device accepts but that verification shows did not happen fails the disk: a
//! device that lies about erasing is not papered over with an overwrite.

use std::io;

use metal_protocol::wipe::{
    DeviceCommand, DiskWipe, RejectedMethod, SanitizeMethod, Verification, VerifyMode, WipePolicy, WipeResult,
};
use rand::RngCore as _;

use crate::device::BlockDevice;
use crate::firmware;
use crate::io::{AlignedBuf, Target};
use crate::pattern::Pattern;
use crate::plan::{Capabilities, SoftwarePattern, is_device_method, nist_category, plan};
use crate::progress::ProgressSink;
use crate::verify::{self, Fingerprints, Markers, ReadBack};

/// Largest I/O size: two buffers of this size per disk keep memory far under 64 MiB.
pub const MAX_IO_SIZE: usize = 16 << 20;

/// How to erase and verify.
#[derive(Debug, Clone)]
pub struct EraseOptions {
    /// Strength policy.
    pub policy: WipePolicy,
    /// Verification mode; `None` chooses per method (full after an overwrite, markers after
    /// a device erase).
    pub verify: Option<VerifyMode>,
    /// Share of the disk sampled in `sampled` and `markers` modes, in percent.
    pub coverage_percent: f64,
    /// Pattern of the software overwrite.
    pub pattern: SoftwarePattern,
    /// A method the operator insists on (no fallback).
    pub forced_method: Option<SanitizeMethod>,
    /// Markers planted before a device erase.
    pub markers: u64,
    /// Bytes per read or write (a multiple of 4096, at most [`MAX_IO_SIZE`]).
    pub io_size: usize,
}

impl Default for EraseOptions {
    fn default() -> Self {
        Self {
            policy: WipePolicy::Purge,
            verify: None,
            coverage_percent: 1.0,
            pattern: SoftwarePattern::Zeros,
            forced_method: None,
            markers: 1024,
            io_size: 8 << 20,
        }
    }
}

/// One disk to erase.
pub struct DiskJob {
    /// What the disk is.
    pub device: BlockDevice,
    /// How to reach it.
    pub target: Box<dyn Target>,
    /// What its firmware supports.
    pub capabilities: Capabilities,
}

impl std::fmt::Debug for DiskJob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskJob").field("device", &self.device.path).finish_non_exhaustive()
    }
}

/// Erases all disks concurrently, one thread each; results come back in job order.
pub fn erase_disks(jobs: Vec<DiskJob>, options: &EraseOptions, progress: &dyn ProgressSink) -> Vec<DiskWipe> {
    std::thread::scope(|scope| {
        let workers: Vec<_> =
            jobs.into_iter().map(|job| scope.spawn(move || erase_disk(&job, options, progress))).collect();
        workers.into_iter().map(|w| w.join().unwrap_or_else(|panic| std::panic::resume_unwind(panic))).collect()
    })
}

/// Why one method did not erase.
enum MethodError {
    /// The device or kernel refused the command: try the next method.
    Refused(String),
    /// I/O failed in a way that leaves the disk in an unknown state.
    Failed(String),
}

/// A command log for one disk.
#[derive(Default)]
struct Log {
    commands: Vec<DeviceCommand>,
}

impl Log {
    /// Runs `f`, recording it as `command` with its raw status (0, or errno and its name).
    fn run<T>(&mut self, command: &str, f: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let started_at = metal_clock::now_utc();
        let result = f();
        let status = match &result {
            Ok(_) => "0x0".to_owned(),
            Err(e) => match e.raw_os_error() {
                Some(errno) => format!("errno {errno:#x} ({e})"),
                None => format!("error ({e})"),
            },
        };
        self.commands.push(DeviceCommand {
            command: command.to_owned(),
            status,
            ok: result.is_ok(),
            started_at,
            finished_at: metal_clock::now_utc(),
        });
        result
    }
}

fn is_refusal(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL))
}

/// Erases and verifies one disk; never panics on device errors, it reports them.
pub fn erase_disk(job: &DiskJob, options: &EraseOptions, progress: &dyn ProgressSink) -> DiskWipe {
    let name = job.device.name();
    let started_at = metal_clock::now_utc();
    let method_plan = plan(&job.capabilities, options.policy, options.pattern, options.forced_method);
    let mut rejected = method_plan.rejected;
    let mut log = Log::default();
    let mut wipe = DiskWipe {
        device: job.device.path.display().to_string(),
        identity: job.device.disk.identity.clone(),
        method: None,
        method_reason: String::new(),
        rejected_methods: Vec::new(),
        commands: Vec::new(),
        started_at,
        finished_at: started_at,
        verification: None,
        result: WipeResult::Fail,
        first_bad_offset: None,
        failure: None,
        nist_category: None,
    };
    for (method, reason) in method_plan.candidates {
        match run_method(job, method, options, &mut log, &mut rejected, progress) {
            Ok((verification, read_back)) => {
                wipe.method = Some(method);
                wipe.method_reason = reason;
                wipe.nist_category = Some(nist_category(method));
                wipe.verification = Some(verification);
                wipe.first_bad_offset = read_back.first_bad_offset;
                wipe.failure = read_back.finding;
                wipe.result = if wipe.first_bad_offset.is_none() { WipeResult::Pass } else { WipeResult::Fail };
                break;
            }
            Err(MethodError::Refused(capability)) => {
                rejected.push(RejectedMethod { method, reason: "the device refused the command".into(), capability });
            }
            Err(MethodError::Failed(why)) => {
                wipe.method = Some(method);
                wipe.method_reason = reason;
                wipe.failure = Some(format!("could not erase: {why}"));
                break;
            }
        }
    }
    if wipe.method.is_none() {
        wipe.failure = Some("every method was refused".into());
    }
    wipe.rejected_methods = rejected;
    wipe.commands = log.commands;
    wipe.finished_at = metal_clock::now_utc();
    progress.finish(name, &wipe);
    wipe
}

fn random_seed() -> u64 {
    // Seeds are reported as hex strings, so all 64 bits are usable.
    rand::rngs::OsRng.next_u64()
}

fn io_failed(what: &str) -> impl FnOnce(io::Error) -> MethodError + '_ {
    move |e| MethodError::Failed(format!("{what}: {e}"))
}

fn run_method(
    job: &DiskJob,
    method: SanitizeMethod,
    options: &EraseOptions,
    log: &mut Log,
    rejected: &mut Vec<RejectedMethod>,
    progress: &dyn ProgressSink,
) -> Result<(Verification, ReadBack), MethodError> {
    let target = job.target.as_ref();
    let name = job.device.name();
    let size = target.size();
    let block = u64::from(target.block_size());
    let seed = random_seed();
    let mode = options.verify.unwrap_or(if is_device_method(method) { VerifyMode::Markers } else { VerifyMode::Full });
    let coverage = if mode == VerifyMode::Full { 100.0 } else { options.coverage_percent };
    let positions = verify::sample_positions(size, block, coverage, seed);

    if is_device_method(method) {
        progress.phase(name, "markers", options.markers * verify::MARKER_LEN);
        let markers = Markers::plant(target, options.markers, seed).map_err(io_failed("planting markers"))?;
        progress.phase(name, "fingerprint", size.min(positions.iter().map(|p| p.1).sum()));
        let fingerprints =
            Fingerprints::take(target, &positions).map_err(io_failed("reading samples before the erase"))?;
        progress.phase(name, method_label(method), 0);
        device_erase(target, method, log)?;
        log.run("fsync + BLKFLSBUF", || target.sync()).map_err(io_failed("sync"))?;
        progress.phase(name, "verify", positions.iter().map(|p| p.1).sum());
        let read_back = markers
            .check(target)
            .and_then(|m| Ok(m.and(fingerprints.check(target, &|done| progress.advance(name, done))?)))
            .map_err(io_failed("reading back"))?;
        let verification = Verification {
            mode,
            coverage_percent: verify::coverage_of(&positions, size),
            sample_seed: Some(format!("{seed:016x}")),
            bytes_read: read_back.bytes_read,
            expected: format!("{} markers gone; sampled regions changed or uniform", markers.len()),
        };
        return Ok((verification, read_back));
    }

    let pattern = match method {
        SanitizeMethod::OverwriteRandom => Pattern::random(),
        _ => Pattern::Zeros,
    };
    // Secure discard first where the device has it (it may reach blocks an overwrite cannot,
    // such as over-provisioned flash); it is never evidence, the read-back is.
    match log.run("BLKSECDISCARD 0..size", || target.discard_all(true)) {
        Ok(()) => {}
        Err(e) => rejected.push(RejectedMethod {
            method: SanitizeMethod::SecureDiscard,
            reason: "secure discard before the overwrite was not possible".into(),
            capability: format!("BLKSECDISCARD: {e}"),
        }),
    }
    let markers = if mode == VerifyMode::Markers {
        Some(Markers::plant(target, options.markers, seed).map_err(io_failed("planting markers"))?)
    } else {
        None
    };
    progress.phase(name, "overwrite", size);
    let io_size = options.io_size.clamp(4096, MAX_IO_SIZE);
    log.run(&format!("overwrite {} O_DIRECT {} bytes in {} KiB writes", pattern.name(), size, io_size / 1024), || {
        overwrite(target, &pattern, io_size, &|done| progress.advance(name, done))
    })
    .map_err(io_failed("overwrite"))?;
    log.run("fsync + BLKFLSBUF", || target.sync()).map_err(io_failed("sync"))?;
    let on_read = |done| progress.advance(name, done);
    let read_back = match mode {
        VerifyMode::Full => {
            progress.phase(name, "verify", size);
            verify::full(target, &pattern, io_size, &on_read)
        }
        VerifyMode::Sampled | VerifyMode::Markers => {
            progress.phase(name, "verify", positions.iter().map(|p| p.1).sum());
            let sampled = verify::sampled(target, &pattern, &positions, &on_read);
            match &markers {
                Some(m) => sampled.and_then(|s| Ok(s.and(m.check(target)?))),
                None => sampled,
            }
        }
    }
    .map_err(io_failed("reading back"))?;
    let verification = Verification {
        mode,
        coverage_percent: verify::coverage_of(&positions, size),
        sample_seed: (mode != VerifyMode::Full).then(|| format!("{seed:016x}")),
        bytes_read: read_back.bytes_read,
        expected: pattern.name().to_owned(),
    };
    Ok((verification, read_back))
}

fn method_label(method: SanitizeMethod) -> &'static str {
    match method {
        SanitizeMethod::SecureDiscard => "secure-discard",
        SanitizeMethod::Discard => "discard",
        _ => "device-erase",
    }
}

/// Issues a device-side erase. A refusal (unsupported command) lets the plan fall back.
fn device_erase(target: &dyn Target, method: SanitizeMethod, log: &mut Log) -> Result<(), MethodError> {
    let discard = match method {
        SanitizeMethod::SecureDiscard => Some(("BLKSECDISCARD 0..size", true)),
        SanitizeMethod::Discard => Some(("BLKDISCARD 0..size", false)),
        _ => None,
    };
    let Some((command, secure)) = discard else {
        let mut record = |sent: firmware::Sent| {
            log.commands.push(DeviceCommand {
                command: sent.command,
                status: sent.status,
                ok: sent.ok,
                started_at: sent.started_at,
                finished_at: metal_clock::now_utc(),
            });
        };
        return firmware::run(target, method, &mut record).map_err(|e| match e {
            firmware::EraseError::Refused(why) => MethodError::Refused(why),
            firmware::EraseError::Failed(why) => MethodError::Failed(why),
        });
    };
    log.run(command, || target.discard_all(secure)).map_err(|e| {
        if is_refusal(&e) {
            MethodError::Refused(format!("{}: {e}", method_label(method)))
        } else {
            MethodError::Failed(e.to_string())
        }
    })
}

/// Writes `pattern` over the whole target in `io_size` writes.
pub fn overwrite(target: &dyn Target, pattern: &Pattern, io_size: usize, progress: &dyn Fn(u64)) -> io::Result<()> {
    let size = target.size();
    let mut buf = AlignedBuf::new(io_size);
    let mut offset = 0u64;
    let zeros = matches!(pattern, Pattern::Zeros);
    while offset < size {
        let len = usize::try_from((size - offset).min(io_size as u64)).unwrap_or(io_size);
        if !zeros {
            pattern.fill(offset, &mut buf[..len]);
        }
        target.write_at(&buf[..len], offset)?;
        offset += len as u64;
        progress(offset);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::device::{BlockDevice, DeviceKind};
    use crate::progress::NoProgress;

    /// An in-memory disk whose discard is acknowledged and does nothing: the lie the
    /// read-back must catch.
    struct LyingDisk {
        data: Mutex<Vec<u8>>,
    }

    impl Target for LyingDisk {
        fn size(&self) -> u64 {
            self.data.lock().unwrap().len() as u64
        }
        fn block_size(&self) -> u32 {
            512
        }
        fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
            let start = usize::try_from(offset).unwrap();
            self.data.lock().unwrap()[start..start + buf.len()].copy_from_slice(buf);
            Ok(())
        }
        fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
            let start = usize::try_from(offset).unwrap();
            buf.copy_from_slice(&self.data.lock().unwrap()[start..start + buf.len()]);
            Ok(())
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
        fn discard_all(&self, _secure: bool) -> io::Result<()> {
            Ok(())
        }
    }

    fn job(size: usize) -> DiskJob {
        let data: Vec<u8> = (0..size).map(|i| u8::try_from(i % 251).unwrap()).collect();
        DiskJob {
            device: BlockDevice {
                path: "/dev/fake0".into(),
                disk: metal_protocol::inventory::Disk {
                    name: "fake0".into(),
                    identity: metal_protocol::DiskIdentity {
                        serial: Some("FAKE".into()),
                        model: None,
                        wwn: None,
                        by_path: None,
                        size_bytes: size as u64,
                    },
                    by_id: vec![],
                    logical_block_size: 512,
                    physical_block_size: 512,
                    rotational: false,
                    transport: metal_protocol::Transport::Other,
                    removable: false,
                    read_only: false,
                },
                kind: DeviceKind::Disk,
                discard_max_bytes: 1 << 30,
                in_use: None,
            },
            target: Box::new(LyingDisk { data: Mutex::new(data) }),
            capabilities: Capabilities::default(),
        }
    }

    #[test]
    fn a_discard_that_keeps_the_data_fails_verification() {
        for (method, command) in
            [(SanitizeMethod::SecureDiscard, "BLKSECDISCARD"), (SanitizeMethod::Discard, "BLKDISCARD")]
        {
            let options = EraseOptions { forced_method: Some(method), markers: 16, ..Default::default() };
            let wipe = erase_disk(&job(8 << 20), &options, &NoProgress);
            assert_eq!(wipe.result, WipeResult::Fail);
            assert_eq!(wipe.method, Some(method));
            let bad = wipe.first_bad_offset.expect("the surviving data is located");
            assert!(wipe.failure.unwrap().contains(&bad.to_string()));
            assert!(
                wipe.commands.iter().any(|c| c.command.starts_with(command) && c.ok),
                "the lie was acknowledged: {:?}",
                wipe.commands
            );
        }
    }

    #[test]
    fn unchanged_samples_fail_even_without_markers() {
        let target =
            LyingDisk { data: Mutex::new((0..(4usize << 20)).map(|i| u8::try_from(i % 7).unwrap()).collect()) };
        let positions = verify::sample_positions(4 << 20, 512, 50.0, 9);
        let before = Fingerprints::take(&target, &positions).unwrap();
        let after = before.check(&target, &|_| {}).unwrap();
        assert_eq!(after.first_bad_offset, Some(positions[0].0));
        // Uniform regions (all zeros before and after) are not evidence of survival.
        let zeros = LyingDisk { data: Mutex::new(vec![0u8; 4 << 20]) };
        let before = Fingerprints::take(&zeros, &positions).unwrap();
        assert_eq!(before.check(&zeros, &|_| {}).unwrap().first_bad_offset, None);
    }
}
