//! A simulated machine's system trees: the `/sys`, `/proc` and `/dev` the real inventory,
//! erase and firmware code read, written as plain files (the way their own tests fake them),
//! with each `/dev/vdX` a link to the disk's sparse file. What the ramdisk code reports is
//! what this tree says: cores, memory, DMI identity, NICs, disks and firmware versions.
//!
//! Two things are the host's, not the machine's: `MemAvailable` is kept small (the memory
//! test fills a fraction of it, in this process) and the CPUs online are the host's (the CPU
//! test pins a thread to each).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use metal_protocol::inventory::SystemPaths;

/// What a simulated machine is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hardware {
    /// Cores (one thread each).
    pub cores: u32,
    /// Memory in bytes.
    pub memory_bytes: u64,
    /// Disk sizes in bytes: nvme0n1, nvme1n1, ...
    pub disks: Vec<u64>,
    /// The boot NIC's MAC.
    pub mac: String,
    /// The system serial number (and the disks' serials start with it).
    pub serial: String,
    /// The system UUID.
    pub uuid: String,
    /// The BIOS version the machine reports in band.
    pub bios_version: String,
    /// `x86_64`, or `aarch64` for a Grace-class machine (its kernel says so in
    /// `/proc/sys/kernel/arch`, its cpuinfo is Arm's).
    pub architecture: &'static str,
}

/// The kernel name of the `index`th disk: nvme0n1, nvme1n1, ...
pub fn disk_name(index: usize) -> String {
    format!("nvme{index}n1")
}

/// A disk's EUI-64 world wide name, from its serial.
pub fn disk_wwn(serial: &str) -> String {
    let digest = <sha2::Sha256 as sha2::Digest>::digest(serial.as_bytes());
    format!("eui.{}", hex::encode(&digest[..8]))
}

/// The serial number of a machine's disk.
pub fn disk_serial(machine_serial: &str, disk: &str) -> String {
    format!("{machine_serial}-{disk}")
}

/// Writes the trees of `hardware` under `root`, with the disks' backing files in `disks`;
/// returns where they are.
pub fn write(root: &Path, hardware: &Hardware, disks: &[PathBuf]) -> io::Result<SystemPaths> {
    let paths = SystemPaths { sys: root.join("sys"), proc: root.join("proc"), dev: root.join("dev") };
    let put = |path: PathBuf, text: &str| -> io::Result<()> {
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(path, text)
    };
    let link = |target: &Path, at: PathBuf| -> io::Result<()> {
        if let Some(parent) = at.parent() {
            fs::create_dir_all(parent)?;
        }
        let _ = fs::remove_file(&at);
        std::os::unix::fs::symlink(target, at)
    };

    // CPUs: cpuinfo says what the machine has; the CPUs online are the host's.
    let mut cpuinfo = String::new();
    for core in 0..hardware.cores {
        cpuinfo.push_str(&if hardware.architecture == "aarch64" {
            // Grace: Neoverse-V2 cores, as arm64 kernels list them (no model name).
            format!(
                "processor\t: {core}\nBogoMIPS\t: 2000.00\nFeatures\t: fp asimd sve2\nCPU implementer\t: 0x41\n\
                 CPU architecture: 8\nCPU variant\t: 0x0\nCPU part\t: 0xd4f\nCPU revision\t: 0\n\n"
            )
        } else {
            format!(
                "processor\t: {core}\nmodel name\t: metal-sim virtual CPU\nflags\t\t: fpu sse2 avx2\nphysical id\t: 0\ncore id\t\t: {core}\n\n"
            )
        });
    }
    put(paths.proc.join("cpuinfo"), &cpuinfo)?;
    put(paths.proc.join("sys/kernel/arch"), &format!("{}\n", hardware.architecture))?;
    let host_cpus = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    let online = if host_cpus > 1 { format!("0-{}\n", host_cpus - 1) } else { "0\n".to_owned() };
    put(paths.sys.join("devices/system/cpu/present"), &online)?;
    put(paths.sys.join("devices/system/cpu/online"), &online)?;

    // Memory: the machine's total; a few MiB available to the memory test.
    put(
        paths.proc.join("meminfo"),
        &format!(
            "MemTotal:       {} kB\nMemFree:        16384 kB\nMemAvailable:   16384 kB\n",
            hardware.memory_bytes / 1024
        ),
    )?;
    put(paths.proc.join("mounts"), "")?;
    put(paths.proc.join("swaps"), "Filename\tType\tSize\tUsed\tPriority\n")?;
    put(paths.proc.join("cmdline"), "")?;

    // DMI identity and the BIOS version (what the in-band firmware check reads).
    let dmi = paths.sys.join("class/dmi/id");
    for (name, value) in [
        ("sys_vendor", "metal-sim"),
        ("product_name", "Simulated Server"),
        ("product_serial", hardware.serial.as_str()),
        ("product_uuid", hardware.uuid.as_str()),
        ("bios_vendor", "metal-sim"),
        ("bios_version", hardware.bios_version.as_str()),
        ("bios_date", "01/01/2026"),
    ] {
        put(dmi.join(name), &format!("{value}\n"))?;
    }

    // The boot NIC, on a PCI device with a driver.
    let pci = paths.sys.join("devices/pci0000:00/0000:00:03.0");
    fs::create_dir_all(&pci)?;
    let driver = paths.sys.join("bus/pci/drivers/virtio-pci");
    fs::create_dir_all(&driver)?;
    link(&driver, pci.join("driver"))?;
    let eth0 = paths.sys.join("class/net/eth0");
    put(eth0.join("address"), &format!("{}\n", hardware.mac))?;
    put(eth0.join("carrier"), "1\n")?;
    put(eth0.join("speed"), "25000\n")?;
    link(&pci, eth0.join("device"))?;

    // Disks: NVMe namespaces, each /dev node a link to its file.
    for (index, (size, file)) in hardware.disks.iter().zip(disks).enumerate() {
        let name = disk_name(index);
        let block = paths.sys.join("block").join(&name);
        put(block.join("size"), &format!("{}\n", size / 512))?;
        put(block.join("removable"), "0\n")?;
        put(block.join("ro"), "0\n")?;
        put(block.join("queue/logical_block_size"), "512\n")?;
        put(block.join("queue/physical_block_size"), "4096\n")?;
        put(block.join("queue/rotational"), "0\n")?;
        put(block.join("queue/discard_max_bytes"), &format!("{}\n", 1u64 << 30))?;
        let serial = disk_serial(&hardware.serial, &name);
        put(block.join("device/serial"), &format!("{serial}\n"))?;
        put(block.join("device/model"), "metal-sim NVMe disk\n")?;
        put(block.join("wwid"), &format!("{}\n", disk_wwn(&serial)))?;
        link(file, paths.dev.join(&name))?;
        link(Path::new(&format!("../../{name}")), paths.dev.join(format!("disk/by-id/nvme-{serial}")))?;
    }
    Ok(paths)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_inventory_code_reads_the_machine_the_tree_describes() {
        let dir = tempfile::tempdir().unwrap();
        let disk_file = dir.path().join("nvme0n1.img");
        crate::disk::FileDisk::create(&disk_file, 64 << 20).unwrap();
        let hardware = Hardware {
            cores: 16,
            memory_bytes: 64 << 30,
            disks: vec![64 << 20],
            mac: "52:54:00:5e:00:07".into(),
            serial: "SIM00007".into(),
            uuid: "4c4c4544-0000-4000-8000-000000000007".into(),
            bios_version: "2.1.0".into(),
            architecture: "x86_64",
        };
        let paths = write(&dir.path().join("root"), &hardware, std::slice::from_ref(&disk_file)).unwrap();
        let report = metal_boot::report::collect(&paths, "n7", Some((0.05, 8)));
        assert_eq!(report.cpu.threads, 16, "{:?}", report.cpu);
        assert_eq!(report.cpu.architecture, "x86_64");
        assert_eq!(report.memory.total_bytes, 64 << 30);
        assert_eq!(report.dmi.system_serial.as_deref(), Some("SIM00007"));
        assert_eq!(report.nics.len(), 1);
        assert_eq!((report.nics[0].mac.as_str(), report.nics[0].link), ("52:54:00:5e:00:07", true));
        assert_eq!(report.disks.len(), 1);
        let disk = &report.disks[0];
        assert_eq!((disk.name.as_str(), disk.identity.size_bytes), ("nvme0n1", 64 << 20));
        assert_eq!(disk.identity.serial.as_deref(), Some("SIM00007-nvme0n1"));
        assert_eq!(disk.identity.wwn, Some(disk_wwn("SIM00007-nvme0n1")));
        assert_eq!(disk.transport, metal_protocol::Transport::Nvme);
        assert!(report.firmware.iter().any(|f| f.component == "bios" && f.version == "2.1.0"), "{:?}", report.firmware);
        assert!(report.passed(), "{:?}", report.tests);

        // A Grace-class machine: its kernel says aarch64, its cores are Neoverse-V2.
        let grace = Hardware { architecture: "aarch64", ..hardware };
        let paths = write(&dir.path().join("grace"), &grace, &[disk_file]).unwrap();
        let report = metal_boot::report::collect(&paths, "n8", Some((0.05, 8)));
        assert_eq!((report.cpu.architecture.as_str(), report.cpu.threads), ("aarch64", 16), "{:?}", report.cpu);
        assert_eq!(report.cpu.model, "Arm Neoverse-V2", "{:?}", report.cpu);
    }
}
