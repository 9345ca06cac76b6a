//! Which disk a deploy writes: the one the root device hints name (serial, WWN, model, size
//! range, by-path), else the smallest disk that fits the image; never a removable, read-only,
//! in-use disk or the medium the ramdisk booted from (as metal-erase decides those).

use metal_erase::device::{BlockDevice, DeviceKind};
use metal_protocol::deploy::RootDeviceHints;

/// Why no disk was chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no target disk: {0}")]
pub struct NoTarget(pub String);

/// Why `device` may never be a deploy target, if so.
pub fn unfit(device: &BlockDevice, image_bytes: u64) -> Option<String> {
    let size = device.disk.identity.size_bytes;
    if let Some(why) = &device.in_use {
        Some(why.clone())
    } else if device.disk.read_only {
        Some("read-only".into())
    } else if device.disk.removable {
        Some("removable medium".into())
    } else if !matches!(device.kind, DeviceKind::Disk | DeviceKind::Loop) {
        Some(format!("{:?} device", device.kind).to_lowercase())
    } else if size < image_bytes {
        Some(format!("{size} bytes is smaller than the {image_bytes}-byte image"))
    } else {
        None
    }
}

/// The disk to write: among whole disks (loop devices are not considered), those fit for an
/// image of `image_bytes` and matching `hints`; the smallest wins.
pub fn choose<'a>(
    devices: &'a [BlockDevice],
    hints: &RootDeviceHints,
    image_bytes: u64,
) -> Result<&'a BlockDevice, NoTarget> {
    let mut reasons = Vec::new();
    let mut fit: Vec<&BlockDevice> = Vec::new();
    for device in devices.iter().filter(|d| d.kind != DeviceKind::Loop) {
        match unfit(device, image_bytes).map_or_else(|| device.disk.identity.matches_hints(hints), Err) {
            Ok(()) => fit.push(device),
            Err(why) => reasons.push(format!("{}: {why}", device.name())),
        }
    }
    fit.into_iter()
        .min_by_key(|d| (d.disk.identity.size_bytes, d.disk.name.clone()))
        .ok_or_else(|| NoTarget(if reasons.is_empty() { "no disks at all".into() } else { reasons.join("; ") }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use metal_protocol::DiskIdentity;
    use metal_protocol::inventory::Disk;

    fn disk(name: &str, size: u64, serial: &str) -> BlockDevice {
        BlockDevice {
            path: format!("/dev/{name}").into(),
            disk: Disk {
                name: name.into(),
                identity: DiskIdentity {
                    serial: Some(serial.into()),
                    model: Some("M".into()),
                    wwn: None,
                    by_path: None,
                    size_bytes: size,
                },
                by_id: vec![],
                logical_block_size: 512,
                physical_block_size: 512,
                rotational: false,
                transport: metal_protocol::Transport::Nvme,
                removable: false,
                read_only: false,
            },
            kind: DeviceKind::Disk,
            discard_max_bytes: 0,
            in_use: None,
        }
    }

    #[test]
    fn smallest_fitting_disk_unless_hints_say_otherwise() {
        let mut boot = disk("sda", 8 << 30, "BOOT");
        boot.in_use = Some("it is the boot medium (metal.bootdev)".into());
        let mut usb = disk("sdb", 4 << 30, "USB");
        usb.disk.removable = true;
        let devices = vec![
            disk("nvme0n1", 960 << 30, "BIG"),
            disk("nvme1n1", 240 << 30, "SMALL"),
            boot,
            usb,
            disk("vda", 1 << 30, "TINY"),
        ];
        let hints = RootDeviceHints::default();
        assert_eq!(choose(&devices, &hints, 2 << 30).unwrap().name(), "nvme1n1", "vda is too small; sda/sdb unfit");
        let by_serial = RootDeviceHints { serial: Some("BIG".into()), ..RootDeviceHints::default() };
        assert_eq!(choose(&devices, &by_serial, 2 << 30).unwrap().name(), "nvme0n1");
        let e =
            choose(&devices, &RootDeviceHints { serial: Some("BOOT".into()), ..RootDeviceHints::default() }, 1 << 20)
                .unwrap_err();
        assert!(e.0.contains("sda: it is the boot medium"), "{e}");
        let ranged = RootDeviceHints { min_size_bytes: Some(500 << 30), ..RootDeviceHints::default() };
        assert_eq!(choose(&devices, &ranged, 1 << 20).unwrap().name(), "nvme0n1");
        assert!(choose(&[], &hints, 1).unwrap_err().0.contains("no disks"));
    }
}
