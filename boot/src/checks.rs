//! The four basic commissioning tests, each pass/fail with details: memory (a pattern test
//! over a share of the free RAM), every disk readable (sampled reads across the disk, and
//! the NVMe health log or the ATA SMART status where there is one), every NIC's link, and the CPUs (all present
//! cores online, the same checksum workload on each core giving the same answer).

use std::time::Instant;

use metal_erase::device::{BlockDevice, DeviceKind};
use std::os::fd::AsFd as _;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};

use metal_erase::io::AlignedBuf;
use metal_erase::passthrough::{ata, nvme};
use metal_protocol::inventory::{Nic, TestKind, TestResult};
use sha2::Digest as _;

use crate::inventory::{SystemPaths, meminfo_field};

fn timed(kind: TestKind, f: impl FnOnce() -> Result<String, String>) -> TestResult {
    let started = Instant::now();
    let result = f();
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    match result {
        Ok(details) => TestResult { kind, passed: true, details, duration_ms },
        Err(details) => TestResult { kind, passed: false, details, duration_ms },
    }
}

/// Memory: fills `fraction` of the available memory with an address-dependent pattern and
/// its inverse, reading each back.
pub fn memory(roots: &SystemPaths, fraction: f64) -> TestResult {
    timed(TestKind::Memory, || {
        let meminfo = std::fs::read_to_string(roots.proc.join("meminfo")).map_err(|e| format!("meminfo: {e}"))?;
        let available = meminfo_field(&meminfo, "MemAvailable:").ok_or("no MemAvailable in /proc/meminfo")?;
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let bytes = ((available as f64 * fraction.clamp(0.0, 0.9)) as u64).max(1 << 20);
        let words = usize::try_from(bytes / 8).map_err(|_| "too much memory to test")?;
        let mut buf: Vec<u64> = Vec::new();
        buf.try_reserve_exact(words).map_err(|e| format!("cannot allocate {bytes} bytes: {e}"))?;
        buf.resize(words, 0);
        for (pass, invert) in [(1, 0u64), (2, u64::MAX)] {
            for (i, w) in buf.iter_mut().enumerate() {
                *w = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ invert;
            }
            if let Some(bad) =
                buf.iter().enumerate().position(|(i, w)| *w != (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ invert)
            {
                return Err(format!("pass {pass}: word {bad} (byte {}) read back wrong", bad * 8));
            }
        }
        Ok(format!("{} MiB of {} MiB available tested with two patterns", bytes >> 20, available >> 20))
    })
}

/// Disks: `samples` reads of 64 KiB spread over each disk, and the NVMe SMART critical
/// warning where the disk is NVMe.
pub fn disks(devices: &[BlockDevice], samples: u64) -> TestResult {
    timed(TestKind::Disk, || {
        let mut lines = Vec::new();
        let mut failed = false;
        for device in devices.iter().filter(|d| d.kind == DeviceKind::Disk && d.disk.identity.size_bytes > 0) {
            let line = match check_disk(device, samples) {
                Ok(line) => line,
                Err(line) => {
                    failed = true;
                    line
                }
            };
            lines.push(format!("{}: {line}", device.name()));
        }
        if lines.is_empty() {
            return Ok("no disks".into());
        }
        if failed { Err(lines.join("; ")) } else { Ok(lines.join("; ")) }
    })
}

fn check_disk(device: &BlockDevice, samples: u64) -> Result<String, String> {
    const READ: u64 = 64 << 10;
    // Read-only and shared (no O_EXCL): a mounted disk is read, not refused.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&device.path)
        .map_err(|e| format!("cannot open: {e}"))?;
    let size = device.disk.identity.size_bytes;
    let block = u64::from(device.disk.logical_block_size.max(512));
    let mut buf = AlignedBuf::new(usize::try_from(READ).unwrap_or(65536));
    let count = samples.max(1).min(size / READ).max(1);
    for i in 0..count {
        let offset = (size.saturating_sub(READ) / count.max(1) * i) / block * block;
        let len = READ.min(size - offset) / block * block;
        file.read_exact_at(&mut buf[..usize::try_from(len).unwrap_or(0)], offset)
            .map_err(|e| format!("read at byte {offset} failed: {e}"))?;
    }
    let mut line = format!("{count} sampled reads OK");
    if device.disk.transport == metal_protocol::Transport::Nvme {
        let mut log = vec![0u8; 512];
        let command = nvme::get_log_page(0x02, nvme::NSID_ALL, 512, false).map_err(|e| e.to_string())?;
        match metal_erase::ioctl::nvme_admin(file.as_fd(), &command, &mut log) {
            Ok(done) if done.status == 0 => {
                let (warning, spare, used) = (log[0], log[3], log[5]);
                if warning != 0 {
                    return Err(format!("{line}; NVMe SMART critical warning {warning:#04x}"));
                }
                line.push_str(&format!("; NVMe health: no critical warning, spare {spare}%, {used}% used"));
            }
            Ok(done) => line.push_str(&format!("; NVMe health log refused ({:#06x})", done.status)),
            Err(e) => line.push_str(&format!("; NVMe health log unavailable ({e})")),
        }
    }
    if device.disk.transport == metal_protocol::Transport::Sata {
        let outcome = metal_erase::ioctl::sg_io(
            file.as_fd(),
            &ata::smart_return_status(),
            &mut [],
            std::time::Duration::from_secs(30),
        );
        match outcome
            .map_err(|e| e.to_string())
            .and_then(|o| ata::check_completion(&o.sense).map_err(|e| e.to_string()))
        {
            Ok(Some(regs)) => match ata::smart_status(&regs) {
                Some(true) => line.push_str("; SMART: no threshold exceeded"),
                Some(false) => {
                    return Err(format!("{line}; SMART: a threshold is exceeded (the drive predicts its failure)"));
                }
                None => line.push_str("; SMART status unreadable"),
            },
            Ok(None) => line.push_str("; SMART status not returned"),
            Err(e) => line.push_str(&format!("; SMART unavailable ({e})")),
        }
    }
    Ok(line)
}

/// NICs: every physical NIC has a link.
pub fn nics(nics: &[Nic]) -> TestResult {
    timed(TestKind::Nic, || {
        if nics.is_empty() {
            return Err("no network interfaces with a device".into());
        }
        let lines: Vec<String> = nics
            .iter()
            .map(|n| format!("{} ({}): {}", n.name, n.mac, if n.link { "link up" } else { "NO LINK" }))
            .collect();
        // Unplugged ports are normal (a four-port card with one cable); a machine with no
        // link anywhere is not.
        if nics.iter().any(|n| n.link) { Ok(lines.join("; ")) } else { Err(lines.join("; ")) }
    })
}

/// The workload every core runs: SHA-256 chained over a fixed buffer.
fn workload() -> [u8; 32] {
    let mut state = [0u8; 32];
    let block = vec![0x5au8; 64 << 10];
    for _ in 0..64 {
        let mut h = sha2::Sha256::new();
        h.update(state);
        h.update(&block);
        state = h.finalize().into();
    }
    state
}

/// CPUs: every present CPU is online, and each computes the workload to the same answer.
pub fn cpus(roots: &SystemPaths) -> TestResult {
    timed(TestKind::Cpu, || {
        let read = |f: &str| std::fs::read_to_string(roots.sys.join("devices/system/cpu").join(f)).unwrap_or_default();
        let (present, online) = (parse_cpu_list(&read("present")), parse_cpu_list(&read("online")));
        let offline: Vec<usize> = present.iter().filter(|c| !online.contains(c)).copied().collect();
        if present.is_empty() {
            return Err("no CPUs listed as present".into());
        }
        if !offline.is_empty() {
            return Err(format!("{} of {} CPUs offline: {offline:?}", offline.len(), present.len()));
        }
        let expected = workload();
        let handles: Vec<_> = online
            .iter()
            .map(|&cpu| {
                std::thread::spawn(move || -> Result<(), String> {
                    crate::sys::pin_to_cpu(cpu).map_err(|e| format!("CPU {cpu}: cannot pin: {e}"))?;
                    if workload() == expected { Ok(()) } else { Err(format!("CPU {cpu}: wrong checksum")) }
                })
            })
            .collect();
        let errors: Vec<String> = handles
            .into_iter()
            .filter_map(|h| h.join().unwrap_or_else(|_| Err("a worker panicked".into())).err())
            .collect();
        if errors.is_empty() {
            Ok(format!("{} CPUs online, checksum workload identical on each", online.len()))
        } else {
            Err(errors.join("; "))
        }
    })
}

/// Parses a kernel CPU list such as `0-3,8,10-11`.
pub fn parse_cpu_list(text: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    out.extend(a..=b);
                }
            }
            None => out.extend(part.parse::<usize>().ok()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("0-3,8,10-11\n"), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(parse_cpu_list(""), Vec::<usize>::new());
    }

    #[test]
    fn an_offline_cpu_fails_and_a_full_set_passes() {
        let dir = tempfile::tempdir().unwrap();
        let roots = SystemPaths::under(dir.path());
        let cpu_dir = roots.sys.join("devices/system/cpu");
        std::fs::create_dir_all(&cpu_dir).unwrap();
        std::fs::write(cpu_dir.join("present"), "0-1\n").unwrap();
        std::fs::write(cpu_dir.join("online"), "0\n").unwrap();
        let failed = cpus(&roots);
        assert!(!failed.passed && failed.details.contains("1 of 2 CPUs offline: [1]"), "{failed:?}");
        std::fs::write(cpu_dir.join("online"), "0-1\n").unwrap();
        let ok = cpus(&roots);
        assert!(ok.passed, "{ok:?}");
    }

    #[test]
    fn a_nic_without_link_fails() {
        let nic = |name: &str, link| Nic {
            name: name.into(),
            mac: "52:54:00:12:34:56".into(),
            driver: None,
            link,
            speed_mbps: None,
            pci_address: None,
            lldp: None,
        };
        assert!(nics(&[nic("eth0", true)]).passed);
        let unplugged = nics(&[nic("eth0", true), nic("eth1", false)]);
        assert!(unplugged.passed && unplugged.details.contains("eth1 (52:54:00:12:34:56): NO LINK"));
        let none = nics(&[nic("eth0", false), nic("eth1", false)]);
        assert!(!none.passed && none.details.contains("eth0 (52:54:00:12:34:56): NO LINK"));
        assert!(!nics(&[]).passed);
    }

    #[test]
    fn memory_test_runs_on_this_machine() {
        let result = memory(&SystemPaths::default(), 0.001);
        assert!(result.passed, "{result:?}");
    }
}
