//! The machine's inventory (`protocol::InventoryReport` without its tests): CPU and memory
//! from procfs, DIMMs from the SMBIOS memory device entries, DMI identity, disks as
//! metal-erase discovers them, NICs from sysfs and the ethtool driver, and the in-band
//! firmware versions. Paths are parameters, so tests read fake trees; what a machine does
//! not show stays empty, never guessed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use metal_protocol::inventory::{Cpu, Dimm, Disk, Dmi, Memory, Nic};

pub use metal_protocol::inventory::SystemPaths;

fn read_trimmed(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// CPU model, sockets, cores and threads from `/proc/cpuinfo`, on `architecture` (x86's
/// field names, or arm64's: no model name, sockets or core ids, but the implementer and part
/// numbers that name the core, and `Features` for the flags).
pub fn cpu(cpuinfo: &str, architecture: &str) -> Cpu {
    let mut model = String::new();
    let mut flags = Vec::new();
    let (mut sockets, mut cores, mut threads) = (BTreeSet::new(), BTreeSet::new(), 0u32);
    let (mut physical, mut implementer, mut part) = (String::new(), String::new(), String::new());
    for line in cpuinfo.lines() {
        let Some((key, value)) = line.split_once(':') else { continue };
        let (key, value) = (key.trim(), value.trim());
        match key {
            "processor" => threads += 1,
            "model name" if model.is_empty() => model = value.to_owned(),
            "flags" | "Features" if flags.is_empty() => {
                flags = value.split_whitespace().map(str::to_owned).collect();
            }
            "CPU implementer" if implementer.is_empty() => implementer = value.to_owned(),
            "CPU part" if part.is_empty() => part = value.to_owned(),
            "physical id" => {
                physical = value.to_owned();
                sockets.insert(physical.clone());
            }
            "core id" => {
                cores.insert((physical.clone(), value.to_owned()));
            }
            _ => {}
        }
    }
    if model.is_empty() && !implementer.is_empty() {
        model = arm_core_name(&implementer, &part);
    }
    let count = |n: usize| u32::try_from(n).unwrap_or(u32::MAX).max(u32::from(threads > 0));
    Cpu {
        architecture: architecture.to_owned(),
        model,
        sockets: count(sockets.len()),
        cores: if cores.is_empty() { threads } else { count(cores.len()) },
        threads,
        flags,
    }
}

/// The name of an arm64 core from its MIDR implementer and part numbers (as
/// `/proc/cpuinfo` prints them, `0x41` and `0xd4f`): Arm's Neoverse server cores (Grace is
/// V2, Ampere Altra N1), else the two numbers.
fn arm_core_name(implementer: &str, part: &str) -> String {
    let number = |text: &str| u32::from_str_radix(text.trim_start_matches("0x"), 16).ok();
    let known = match (number(implementer), number(part)) {
        (Some(0x41), Some(0xd0c)) => Some("Arm Neoverse-N1"),
        (Some(0x41), Some(0xd40)) => Some("Arm Neoverse-V1"),
        (Some(0x41), Some(0xd49)) => Some("Arm Neoverse-N2"),
        (Some(0x41), Some(0xd4f)) => Some("Arm Neoverse-V2"),
        _ => None,
    };
    known.map_or_else(|| format!("arm64 implementer {implementer} part {part}"), str::to_owned)
}

/// `MemTotal` from `/proc/meminfo`, in bytes.
pub fn mem_total(meminfo: &str) -> u64 {
    meminfo_field(meminfo, "MemTotal:").unwrap_or(0)
}

/// A `/proc/meminfo` field (kB) in bytes.
pub fn meminfo_field(meminfo: &str, field: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix(field)?.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// One SMBIOS structure's string `index` (1-based; 0 is none).
fn smbios_string(raw: &[u8], formatted_len: usize, index: u8) -> Option<String> {
    if index == 0 || raw.len() <= formatted_len {
        return None;
    }
    let s = raw[formatted_len..].split(|b| *b == 0).nth(usize::from(index) - 1)?;
    let text = String::from_utf8_lossy(s).trim().to_owned();
    (!text.is_empty()).then_some(text)
}

/// A DIMM from an SMBIOS type 17 (Memory Device) structure; `None` for an empty slot.
pub fn dimm(raw: &[u8]) -> Option<Dimm> {
    let len = usize::from(*raw.get(1)?);
    if raw.first() != Some(&17) || len < 0x15 || raw.len() < len {
        return None;
    }
    let word = |off: usize| (off + 1 < len).then(|| u16::from_le_bytes([raw[off], raw[off + 1]]));
    let size_field = word(0x0c)?;
    let size_bytes = match size_field {
        0 | 0xffff => return None,
        0x7fff if len >= 0x20 => u64::from(u32::from_le_bytes([raw[0x1c], raw[0x1d], raw[0x1e], raw[0x1f]])) << 20,
        s if s & 0x8000 != 0 => u64::from(s & 0x7fff) << 10,
        s => u64::from(s) << 20,
    };
    let kind = match raw.get(0x12).copied() {
        Some(0x12) => Some("DDR".to_owned()),
        Some(0x13) => Some("DDR2".to_owned()),
        Some(0x18) => Some("DDR3".to_owned()),
        Some(0x1a) => Some("DDR4".to_owned()),
        Some(0x22) => Some("DDR5".to_owned()),
        Some(0x07) => Some("RAM".to_owned()),
        _ => None,
    };
    Some(Dimm {
        locator: smbios_string(raw, len, raw[0x10]).unwrap_or_default(),
        size_bytes,
        kind,
        speed_mts: word(0x15).filter(|s| *s != 0 && *s != 0xffff).map(u32::from),
        manufacturer: raw.get(0x17).and_then(|i| smbios_string(raw, len, *i)),
        serial: raw.get(0x18).and_then(|i| smbios_string(raw, len, *i)),
    })
}

/// Memory: total from procfs, DIMMs from `/sys/firmware/dmi/entries/17-*/raw`.
pub fn memory(roots: &SystemPaths) -> Memory {
    let meminfo = std::fs::read_to_string(roots.proc.join("meminfo")).unwrap_or_default();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(roots.sys.join("firmware/dmi/entries"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("17-")))
        .collect();
    entries.sort();
    let dimms = entries.iter().filter_map(|e| std::fs::read(e.join("raw")).ok()).filter_map(|raw| dimm(&raw)).collect();
    Memory { total_bytes: mem_total(&meminfo), dimms }
}

/// DMI identity from `/sys/class/dmi/id`.
pub fn dmi(roots: &SystemPaths) -> Dmi {
    let id = roots.sys.join("class/dmi/id");
    let f = |name: &str| read_trimmed(&id.join(name));
    Dmi {
        system_vendor: f("sys_vendor"),
        system_product: f("product_name"),
        system_serial: f("product_serial"),
        system_uuid: f("product_uuid"),
        board_vendor: f("board_vendor"),
        board_product: f("board_name"),
        board_serial: f("board_serial"),
        bios_vendor: f("bios_vendor"),
        bios_version: f("bios_version"),
        bios_date: f("bios_date"),
        chassis_vendor: f("chassis_vendor"),
        chassis_serial: f("chassis_serial"),
        chassis_asset_tag: f("chassis_asset_tag"),
    }
}

/// Physical NICs (those with a device behind them) from `/sys/class/net`.
pub fn nics(roots: &SystemPaths) -> Vec<Nic> {
    let mut out = Vec::new();
    let mut entries: Vec<PathBuf> = std::fs::read_dir(roots.sys.join("class/net"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .collect();
    entries.sort();
    for dir in entries {
        let Some(name) = dir.file_name().and_then(|n| n.to_str()).map(str::to_owned) else { continue };
        let Ok(device) = std::fs::canonicalize(dir.join("device")) else { continue };
        let pci_address = device
            .ancestors()
            .filter_map(|p| p.file_name()?.to_str())
            .find(|n| n.len() == 12 && n.as_bytes()[4] == b':' && n.as_bytes()[7] == b':' && n.as_bytes()[10] == b'.')
            .map(str::to_owned);
        let driver = std::fs::read_link(dir.join("device/driver"))
            .ok()
            .and_then(|d| d.file_name().and_then(|n| n.to_str()).map(str::to_owned));
        out.push(Nic {
            mac: read_trimmed(&dir.join("address")).unwrap_or_default(),
            driver,
            link: read_trimmed(&dir.join("carrier")).as_deref() == Some("1"),
            speed_mbps: read_trimmed(&dir.join("speed"))
                .and_then(|s| s.parse::<i64>().ok())
                .and_then(|s| u32::try_from(s).ok()),
            pci_address,
            name,
            lldp: None,
        });
    }
    out
}

/// Disks as metal-erase discovers them (whole disks only; loop, RAM and optical left out).
pub fn disks(roots: &SystemPaths) -> Vec<Disk> {
    let paths =
        metal_erase::device::SystemPaths { sys: roots.sys.clone(), dev: roots.dev.clone(), proc: roots.proc.clone() };
    metal_erase::device::discover(&paths)
        .unwrap_or_default()
        .into_iter()
        .filter(|d| d.kind == metal_erase::device::DeviceKind::Disk && d.disk.identity.size_bytes > 0)
        .map(|d| d.disk)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_counts_sockets_cores_and_threads() {
        let mut text = String::new();
        for (thread, (socket, core)) in
            [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0), (0, 1), (1, 0), (1, 1)].iter().enumerate()
        {
            text.push_str(&format!(
                "processor\t: {thread}\nmodel name\t: Intel(R) Xeon(R) Gold 6338\nphysical id\t: {socket}\ncore id\t\t: {core}\nflags\t\t: fpu sse2 avx2\n\n"
            ));
        }
        let found = cpu(&text, "x86_64");
        assert_eq!((found.sockets, found.cores, found.threads), (2, 4, 8));
        assert_eq!(found.model, "Intel(R) Xeon(R) Gold 6338");
        assert_eq!(found.flags, ["fpu", "sse2", "avx2"]);
        // No topology lines (some VMs): every thread is a core on one socket.
        let bare = cpu("processor\t: 0\nmodel name\t: QEMU Virtual CPU\nprocessor\t: 1\n", "x86_64");
        assert_eq!((bare.sockets, bare.cores, bare.threads), (1, 2, 2));
    }

    #[test]
    fn arm64_cpuinfo_names_the_core_from_its_part_number() {
        // arch/arm64/kernel/cpuinfo.c's format, as a Grace (Neoverse-V2) prints it.
        let mut text = String::new();
        for n in 0..4 {
            text.push_str(&format!(
                "processor\t: {n}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd evtstrm aes sve sve2\n\
                 CPU implementer\t: 0x41\nCPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\n\
                 CPU revision\t: 0\n\n"
            ));
        }
        let found = cpu(&text, "aarch64");
        assert_eq!((found.architecture.as_str(), found.model.as_str()), ("aarch64", "Arm Neoverse-V2"));
        assert_eq!((found.sockets, found.cores, found.threads), (1, 4, 4));
        assert_eq!(found.flags, ["fp", "asimd", "evtstrm", "aes", "sve", "sve2"]);
        let unknown = cpu("processor\t: 0\nCPU implementer\t: 0x4e\nCPU part\t: 0x004\n", "aarch64");
        assert_eq!(unknown.model, "arm64 implementer 0x4e part 0x004");
    }

    #[test]
    fn meminfo_and_smbios_memory_devices() {
        assert_eq!(mem_total("MemTotal:       16314312 kB\nMemFree: 1 kB\n"), 16314312 * 1024);
        // Type 17, length 0x28: 16 GiB DDR4 3200 in "DIMM_A1" by "Samsung", serial "1234ABCD".
        let mut raw = vec![0u8; 0x28];
        raw[0] = 17;
        raw[1] = 0x28;
        raw[0x0c..0x0e].copy_from_slice(&16384u16.to_le_bytes());
        raw[0x10] = 1;
        raw[0x12] = 0x1a;
        raw[0x15..0x17].copy_from_slice(&3200u16.to_le_bytes());
        raw[0x17] = 2;
        raw[0x18] = 3;
        raw.extend_from_slice(b"DIMM_A1\x00Samsung\x001234ABCD\x00\x00");
        let d = dimm(&raw).unwrap();
        assert_eq!(
            (d.locator.as_str(), d.size_bytes, d.kind.as_deref(), d.speed_mts),
            ("DIMM_A1", 16 << 30, Some("DDR4"), Some(3200))
        );
        assert_eq!((d.manufacturer.as_deref(), d.serial.as_deref()), (Some("Samsung"), Some("1234ABCD")));
        // An empty slot (size 0) is not a DIMM; extended size (0x7fff) reads the dword.
        raw[0x0c..0x0e].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(dimm(&raw), None);
        raw[0x0c..0x0e].copy_from_slice(&0x7fffu16.to_le_bytes());
        raw[0x1c..0x20].copy_from_slice(&65536u32.to_le_bytes());
        assert_eq!(dimm(&raw).unwrap().size_bytes, 64 << 30);
    }
}
