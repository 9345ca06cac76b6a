//! Firmware inventory in band, from the running machine (the ramdisk): BIOS from DMI, the
//! BMC through `/dev/ipmi0` (Get Device ID), NIC firmware through the ethtool driver-info
//! ioctl, NVMe firmware revisions and GPU VBIOS versions from sysfs and procfs. Components
//! are named as the out-of-band path names them (`bios`, `bmc`, `gpu-vbios`, `nic:<pci>`,
//! `nvme:<serial>`). What a machine does not have is simply absent.

use std::path::{Path, PathBuf};
use std::time::Duration;

use metal_protocol::firmware::FirmwareVersion;

use crate::sys;

pub use metal_protocol::inventory::SystemPaths;

fn read_trimmed(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> =
        std::fs::read_dir(dir).into_iter().flatten().filter_map(|e| e.ok().map(|e| e.path())).collect();
    out.sort();
    out
}

fn version(component: String, version: String, source: &str) -> FirmwareVersion {
    FirmwareVersion { component, version, source: source.into() }
}

/// The firmware revision of an IPMI Get Device ID response (completion code first), in
/// ipmitool's `major.minor` form (minor is BCD, printed as two hex digits).
pub fn device_id_firmware(response: &[u8]) -> Option<String> {
    match response {
        [0, _device_id, _revision, major, minor, ..] => Some(format!("{}.{minor:02x}", major & 0x7f)),
        _ => None,
    }
}

/// Everything readable in band. Network interfaces are those under `sys/class/net` with a
/// device behind them; their firmware comes from the ethtool ioctl on the live system.
pub fn read(roots: &SystemPaths) -> Vec<FirmwareVersion> {
    let mut out = Vec::new();
    if let Some(bios) = read_trimmed(&roots.sys.join("class/dmi/id/bios_version")) {
        out.push(version("bios".into(), bios, "dmi"));
    }
    if let Ok(device) = std::fs::OpenOptions::new().read(true).write(true).open(roots.dev.join("ipmi0")) {
        // netfn App (6), Get Device ID (1).
        match sys::ipmi_request(&device, 6, 1, &[], Duration::from_secs(5)) {
            Ok(response) => match device_id_firmware(&response) {
                Some(v) => out.push(version("bmc".into(), v, "ipmi")),
                None => tracing::warn!(?response, "unexpected Get Device ID response from /dev/ipmi0"),
            },
            Err(e) => tracing::warn!("Get Device ID through /dev/ipmi0: {e}"),
        }
    }
    for interface in entries(&roots.sys.join("class/net")) {
        if !interface.join("device").exists() {
            continue; // virtual: lo, bridges, bonds
        }
        let Some(name) = interface.file_name().and_then(|n| n.to_str()) else { continue };
        match sys::ethtool_driver_info(name) {
            Ok(info) if !info.firmware.is_empty() && !info.bus_info.is_empty() => {
                out.push(version(format!("nic:{}", info.bus_info), info.firmware, "ethtool"));
            }
            Ok(_) => {}
            Err(e) => tracing::debug!(interface = name, "ethtool driver info: {e}"),
        }
    }
    for controller in entries(&roots.sys.join("class/nvme")) {
        if let (Some(serial), Some(revision)) =
            (read_trimmed(&controller.join("serial")), read_trimmed(&controller.join("firmware_rev")))
        {
            out.push(version(format!("nvme:{serial}"), revision, "nvme-identify"));
        }
    }
    for card in entries(&roots.sys.join("class/drm")) {
        if let Some(vbios) = read_trimmed(&card.join("device/vbios_version")) {
            out.push(version("gpu-vbios".into(), vbios, "sysfs"));
        }
    }
    for gpu in entries(&roots.proc.join("driver/nvidia/gpus")) {
        let information = std::fs::read_to_string(gpu.join("information")).unwrap_or_default();
        if let Some(vbios) = information.lines().find_map(|l| l.strip_prefix("Video BIOS:")) {
            out.push(version("gpu-vbios".into(), vbios.trim().to_owned(), "nvidia"));
        }
    }
    out.sort_by(|a, b| a.component.cmp(&b.component));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, path: &str, text: &str) {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_fake_machine_reads_back_under_common_names() {
        let dir = tempfile::tempdir().unwrap();
        let roots = SystemPaths::under(dir.path());
        write(&roots.sys, "class/dmi/id/bios_version", "2.4.1\n");
        write(&roots.sys, "class/nvme/nvme0/serial", "S4EWNX0R123456      \n");
        write(&roots.sys, "class/nvme/nvme0/firmware_rev", "2B2QEXM7\n");
        write(&roots.sys, "class/nvme/nvme1/serial", "only-serial\n");
        write(&roots.sys, "class/drm/card0/device/vbios_version", "113-D4120100-100\n");
        write(&roots.sys, "class/drm/renderD128/device/vendor", "0x1002\n");
        write(
            &roots.proc,
            "driver/nvidia/gpus/0000:17:00.0/information",
            "Model: H100\nVideo BIOS: \t96.00.5f.00.01\n",
        );
        // A virtual interface (no device link) is not asked.
        std::fs::create_dir_all(roots.sys.join("class/net/lo")).unwrap();
        let found = read(&roots);
        let pairs: Vec<(&str, &str, &str)> =
            found.iter().map(|v| (v.component.as_str(), v.version.as_str(), v.source.as_str())).collect();
        assert_eq!(
            pairs,
            [
                ("bios", "2.4.1", "dmi"),
                ("gpu-vbios", "113-D4120100-100", "sysfs"),
                ("gpu-vbios", "96.00.5f.00.01", "nvidia"),
                ("nvme:S4EWNX0R123456", "2B2QEXM7", "nvme-identify"),
            ]
        );
    }

    #[test]
    fn an_empty_machine_reports_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let roots = SystemPaths::under(dir.path());
        assert!(read(&roots).is_empty());
    }

    #[test]
    fn get_device_id_firmware_revision() {
        // ipmi_sim's answer: device 0x23, revision 0, firmware 9.08.
        assert_eq!(device_id_firmware(&[0x00, 0x23, 0x00, 0x09, 0x08, 0x02]).as_deref(), Some("9.08"));
        // Bit 7 of the major byte is "device available", not part of the version.
        assert_eq!(device_id_firmware(&[0x00, 0x20, 0x81, 0x81, 0x12, 0x02]).as_deref(), Some("1.12"));
        assert_eq!(device_id_firmware(&[0xc1]), None, "a completion code other than 0 has no version");
        assert_eq!(device_id_firmware(&[0x00, 0x20, 0x01]), None);
    }
}
