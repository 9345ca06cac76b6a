//! Finding disks and deciding which may be erased.
//!
//! Discovery reads `/sys/block` (paths are parameters, so tests build a fake tree), and
//! describes each whole block device with the same `protocol::inventory::Disk` the inventory
//! uses, plus what erase needs: its kind, discard limits and whether something holds it.
//! A device that is mounted, used as swap, held by another block device (dm, md) or named
//! as the boot medium is never erased, not even when named explicitly.

use std::collections::HashSet;
use std::fs;
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::path::{Path, PathBuf};

use metal_protocol::inventory::Disk;
use metal_protocol::{DiskIdentity, Transport};

pub use metal_protocol::inventory::SystemPaths;

/// What sort of block device it is, which decides whether `--all` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// A disk (NVMe namespace, SCSI/SATA disk, virtio, MMC).
    Disk,
    /// A loop device (a file).
    Loop,
    /// A RAM disk (`ram*`, `zram*`).
    Ram,
    /// An optical drive (`sr*`).
    Optical,
    /// A virtual device stacked on others (device-mapper, md, nbd, ...).
    Virtual,
}

/// One whole block device.
#[derive(Debug, Clone)]
pub struct BlockDevice {
    /// `/dev/NAME`.
    pub path: PathBuf,
    /// The inventory view: identity, block sizes, transport, flags.
    pub disk: Disk,
    /// What sort of device.
    pub kind: DeviceKind,
    /// Largest discard the device accepts in one request (0: no discard).
    pub discard_max_bytes: u64,
    /// Why nothing may touch it (mounted, swap, held, boot medium), if so.
    pub in_use: Option<String>,
}

impl BlockDevice {
    /// Kernel name, e.g. "nvme0n1".
    pub fn name(&self) -> &str {
        &self.disk.name
    }
}

/// A device that `--all` left out, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Kernel name.
    pub name: String,
    /// Why it is not erased.
    pub reason: String,
}

/// Why devices could not be found or chosen.
#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    /// sysfs could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// What was being read.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A named device is not a block device.
    #[error("{0} is not a block device (attach a file with `losetup --find --show FILE` first)")]
    NotBlockDevice(PathBuf),
    /// A named device is a partition.
    #[error("{path} is a partition of {disk}: name the whole disk")]
    Partition {
        /// The partition named.
        path: PathBuf,
        /// Its disk.
        disk: String,
    },
    /// A named device is in use or the boot medium.
    #[error("refusing to erase {path}: {reason}")]
    InUse {
        /// The device named.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A named device is read-only.
    #[error("refusing to erase {0}: it is read-only")]
    ReadOnly(PathBuf),
    /// Nothing to erase.
    #[error("no disk to erase: {0}")]
    NothingToErase(String),
}

fn read_trimmed(path: &Path) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let text = text.trim().trim_matches('\0').trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn read_number(path: &Path) -> Option<u64> {
    read_trimmed(path)?.parse().ok()
}

/// Serial of a SCSI/SATA disk from VPD page 0x80 (4-byte header, then ASCII).
fn vpd_serial(path: &Path) -> Option<String> {
    let bytes = fs::read(path).ok()?;
    let len = usize::from(*bytes.get(3)?);
    let text = String::from_utf8_lossy(bytes.get(4..4 + len)?).trim().trim_matches('\0').trim().to_owned();
    (!text.is_empty()).then_some(text)
}

fn kind_of(name: &str) -> DeviceKind {
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| name.starts_with(p));
    if starts(&["loop"]) {
        DeviceKind::Loop
    } else if starts(&["ram", "zram"]) {
        DeviceKind::Ram
    } else if starts(&["sr"]) {
        DeviceKind::Optical
    } else if starts(&["dm-", "md", "nbd", "drbd", "rbd", "zd", "bcache"]) {
        DeviceKind::Virtual
    } else {
        DeviceKind::Disk
    }
}

/// Transport from the kernel name and the device's path under /sys/devices.
fn transport_of(name: &str, device_path: &str) -> Transport {
    if name.starts_with("nvme") {
        Transport::Nvme
    } else if name.starts_with("vd") {
        Transport::Virtio
    } else if name.starts_with("mmcblk") {
        Transport::Mmc
    } else if name.starts_with("sd") || name.starts_with("sr") {
        if device_path.contains("/usb") {
            Transport::Usb
        } else if device_path.contains("/ata") {
            Transport::Sata
        } else if device_path.contains("/end_device-") || device_path.contains("/sas_") {
            Transport::Sas
        } else {
            Transport::Scsi
        }
    } else {
        Transport::Other
    }
}

/// Names of `/dev/disk/by-*` links that point at `name`.
fn links_to(dir: &Path, name: &str) -> Vec<String> {
    let Ok(entries) = fs::read_dir(dir) else { return Vec::new() };
    let mut links: Vec<String> = entries
        .filter_map(Result::ok)
        .filter(|e| fs::read_link(e.path()).ok().and_then(|t| t.file_name().map(|f| f == name)).unwrap_or(false))
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    links.sort();
    links
}

/// Devices (major:minor) with a mounted filesystem, from mountinfo, and mount points by device.
fn mounted_devices(proc: &Path) -> Vec<(String, String)> {
    let Ok(text) = fs::read_to_string(proc.join("self/mountinfo")) else { return Vec::new() };
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            Some(((*fields.get(2)?).to_owned(), (*fields.get(4)?).to_owned()))
        })
        .collect()
}

/// Swap devices by path.
fn swap_paths(proc: &Path) -> HashSet<String> {
    let Ok(text) = fs::read_to_string(proc.join("swaps")) else { return HashSet::new() };
    text.lines().skip(1).filter_map(|l| l.split_whitespace().next().map(str::to_owned)).collect()
}

/// `metal.bootdev=NAME[,NAME]` on the kernel command line: media the ramdisk booted from.
fn boot_devices(proc: &Path) -> HashSet<String> {
    let Ok(cmdline) = fs::read_to_string(proc.join("cmdline")) else { return HashSet::new() };
    cmdline
        .split_whitespace()
        .filter_map(|arg| arg.strip_prefix("metal.bootdev="))
        .flat_map(|v| v.split(','))
        .map(|n| n.trim_start_matches("/dev/").to_owned())
        .collect()
}

/// The whole device and its partitions: (name, "major:minor").
fn device_and_partitions(block_dir: &Path, name: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(dev) = read_trimmed(&block_dir.join("dev")) {
        out.push((name.to_owned(), dev));
    }
    if let Ok(entries) = fs::read_dir(block_dir) {
        for entry in entries.filter_map(Result::ok) {
            let p = entry.path();
            if p.join("partition").exists()
                && let (Some(part), Some(dev)) = (entry.file_name().into_string().ok(), read_trimmed(&p.join("dev")))
            {
                out.push((part, dev));
            }
        }
    }
    out
}

fn holders(block_dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    let mut dirs = vec![block_dir.join("holders")];
    if let Ok(entries) = fs::read_dir(block_dir) {
        dirs.extend(
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.join("partition").exists())
                .map(|p| p.join("holders")),
        );
    }
    for dir in dirs {
        if let Ok(entries) = fs::read_dir(dir) {
            names.extend(entries.filter_map(Result::ok).filter_map(|e| e.file_name().into_string().ok()));
        }
    }
    names.sort();
    names
}

/// Every whole block device of the system, sorted by name.
pub fn discover(paths: &SystemPaths) -> Result<Vec<BlockDevice>, DeviceError> {
    let block = paths.sys.join("block");
    let entries = fs::read_dir(&block).map_err(|source| DeviceError::Io { path: block.clone(), source })?;
    let mounts = mounted_devices(&paths.proc);
    let swaps = swap_paths(&paths.proc);
    let boot = boot_devices(&paths.proc);
    let mut devices = Vec::new();
    for entry in entries.filter_map(Result::ok) {
        let Ok(name) = entry.file_name().into_string() else { continue };
        let dir = block.join(&name);
        // Hidden devices (an NVMe multipath controller path like nvme0c0n1) have no /dev
        // node; the namespace's own device (nvme0n1) reaches the same blocks.
        if read_number(&dir.join("hidden")) == Some(1) {
            continue;
        }
        devices.push(describe(paths, &dir, &name, &mounts, &swaps, &boot));
    }
    devices.sort_by(|a, b| a.disk.name.cmp(&b.disk.name));
    Ok(devices)
}

fn describe(
    paths: &SystemPaths,
    dir: &Path,
    name: &str,
    mounts: &[(String, String)],
    swaps: &HashSet<String>,
    boot: &HashSet<String>,
) -> BlockDevice {
    let real = fs::canonicalize(dir).map(|p| p.to_string_lossy().into_owned()).unwrap_or_default();
    let queue = dir.join("queue");
    let device = dir.join("device");
    let serial = read_trimmed(&device.join("serial"))
        .or_else(|| read_trimmed(&dir.join("serial")))
        .or_else(|| vpd_serial(&device.join("vpd_pg80")));
    let wwn = read_trimmed(&dir.join("wwid"))
        .or_else(|| read_trimmed(&device.join("wwid")))
        .filter(|w| ["naa.", "eui.", "nvme."].iter().any(|p| w.starts_with(p)));
    let by_path = links_to(&paths.dev.join("disk/by-path"), name).into_iter().next();
    let logical = read_number(&queue.join("logical_block_size")).and_then(|n| u32::try_from(n).ok()).unwrap_or(512);
    let disk = Disk {
        name: name.to_owned(),
        identity: DiskIdentity {
            serial,
            model: read_trimmed(&device.join("model")),
            wwn,
            by_path,
            size_bytes: read_number(&dir.join("size")).unwrap_or(0).saturating_mul(512),
        },
        by_id: links_to(&paths.dev.join("disk/by-id"), name),
        logical_block_size: logical,
        physical_block_size: read_number(&queue.join("physical_block_size"))
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(logical),
        rotational: read_number(&queue.join("rotational")) == Some(1),
        transport: transport_of(name, &real),
        removable: read_number(&dir.join("removable")) == Some(1),
        read_only: read_number(&dir.join("ro")) == Some(1),
    };

    let mut reasons = Vec::new();
    if boot.contains(name) {
        reasons.push("it is the boot medium (metal.bootdev)".to_owned());
    }
    for (part, dev) in device_and_partitions(dir, name) {
        for (_, mount_point) in mounts.iter().filter(|(d, _)| *d == dev) {
            reasons.push(format!("{part} is mounted at {mount_point}"));
        }
        if swaps.contains(&format!("/dev/{part}")) {
            reasons.push(format!("{part} is in use as swap"));
        }
    }
    let held = holders(dir);
    if !held.is_empty() {
        reasons.push(format!("held by {}", held.join(", ")));
    }
    BlockDevice {
        path: paths.dev.join(name),
        disk,
        kind: kind_of(name),
        discard_max_bytes: read_number(&queue.join("discard_max_bytes")).unwrap_or(0),
        in_use: (!reasons.is_empty()).then(|| reasons.join("; ")),
    }
}

/// Which devices to erase.
#[derive(Debug, Clone)]
pub enum Selection {
    /// Every whole disk, except loop/RAM/optical/virtual, read-only, removable, in-use and excluded ones.
    All {
        /// Kernel names or paths to leave alone.
        exclude: Vec<String>,
    },
    /// Exactly these devices (loop devices allowed), never one in use.
    Named(Vec<PathBuf>),
}

/// Chooses the devices to erase. `--all` lists what it leaves out; a named device that may
/// not be erased is an error, so nothing is erased when one name is wrong.
pub fn select(
    devices: &[BlockDevice],
    selection: &Selection,
    sys: &Path,
) -> Result<(Vec<BlockDevice>, Vec<Skipped>), DeviceError> {
    match selection {
        Selection::All { exclude } => {
            let excluded = |d: &BlockDevice| {
                exclude.iter().any(|e| e.trim_start_matches("/dev/") == d.name() || Path::new(e) == d.path)
            };
            let mut chosen = Vec::new();
            let mut skipped = Vec::new();
            for d in devices {
                let reason = if excluded(d) {
                    Some("excluded on the command line".to_owned())
                } else if let Some(why) = &d.in_use {
                    Some(why.clone())
                } else {
                    match d.kind {
                        DeviceKind::Loop => Some("loop device (name it with --device to erase it)".into()),
                        DeviceKind::Ram => Some("RAM disk".into()),
                        DeviceKind::Optical => Some("optical drive".into()),
                        DeviceKind::Virtual => Some("virtual device stacked on other disks".into()),
                        DeviceKind::Disk if d.disk.read_only => Some("read-only".into()),
                        DeviceKind::Disk if d.disk.removable => Some("removable medium".into()),
                        DeviceKind::Disk if d.disk.identity.size_bytes == 0 => Some("no medium (size 0)".into()),
                        DeviceKind::Disk => None,
                    }
                };
                match reason {
                    Some(reason) => skipped.push(Skipped { name: d.name().to_owned(), reason }),
                    None => chosen.push(d.clone()),
                }
            }
            if chosen.is_empty() {
                return Err(DeviceError::NothingToErase(format!(
                    "--all found no eligible disk ({} skipped)",
                    skipped.len()
                )));
            }
            Ok((chosen, skipped))
        }
        Selection::Named(paths) => {
            let mut chosen: Vec<BlockDevice> = Vec::new();
            for path in paths {
                let name = whole_disk_name(path, sys)?;
                let device = devices
                    .iter()
                    .find(|d| d.name() == name)
                    .ok_or_else(|| DeviceError::NotBlockDevice(path.clone()))?;
                if let Some(reason) = &device.in_use {
                    return Err(DeviceError::InUse { path: path.clone(), reason: reason.clone() });
                }
                if device.disk.read_only {
                    return Err(DeviceError::ReadOnly(path.clone()));
                }
                if !chosen.iter().any(|c| c.name() == name) {
                    chosen.push(device.clone());
                }
            }
            if chosen.is_empty() {
                return Err(DeviceError::NothingToErase("no --device given".into()));
            }
            Ok((chosen, Vec::new()))
        }
    }
}

/// Kernel name of the whole disk at `path` (following symlinks such as /dev/disk/by-id).
fn whole_disk_name(path: &Path, sys: &Path) -> Result<String, DeviceError> {
    let meta = fs::metadata(path).map_err(|source| DeviceError::Io { path: path.to_owned(), source })?;
    if !meta.file_type().is_block_device() {
        return Err(DeviceError::NotBlockDevice(path.to_owned()));
    }
    let rdev = meta.rdev();
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let link = sys.join(format!("dev/block/{major}:{minor}"));
    let real = fs::canonicalize(&link).map_err(|source| DeviceError::Io { path: link.clone(), source })?;
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    if real.join("partition").exists() {
        let disk = real.parent().map(name).unwrap_or_default();
        return Err(DeviceError::Partition { path: path.to_owned(), disk });
    }
    Ok(name(&real))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    #[test]
    fn hidden_multipath_paths_are_not_disks() {
        let root = tempfile::tempdir().unwrap();
        let paths =
            SystemPaths { sys: root.path().join("sys"), dev: root.path().join("dev"), proc: root.path().join("proc") };
        for name in ["nvme0n1", "nvme0c0n1"] {
            write(&paths.sys, &format!("block/{name}/size"), "131072\n");
            write(&paths.sys, &format!("block/{name}/queue/logical_block_size"), "512\n");
        }
        write(&paths.sys, "block/nvme0c0n1/hidden", "1\n");
        write(&paths.sys, "block/nvme0n1/hidden", "0\n");
        write(&paths.proc, "mounts", "");
        let names: Vec<String> = discover(&paths).unwrap().iter().map(|d| d.name().to_owned()).collect();
        assert_eq!(names, ["nvme0n1"]);
    }
}
