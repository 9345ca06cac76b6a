//! Disk identity and transport: how inventory, deploy hints and wipe reports name a disk.
//!
//! A kernel name (`sda`, `nvme0n1`) changes between boots, so it is never identity. A disk is
//! the same disk when its WWN matches, else its serial, else its by-path link; its size must
//! match too. Disks with none of those fall back to model plus size.

use serde::{Deserialize, Serialize};

/// How a disk is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// NVMe (PCIe or fabrics).
    Nvme,
    /// SATA/ATA, including AHCI.
    Sata,
    /// Serial Attached SCSI.
    Sas,
    /// Other SCSI (parallel, iSCSI, FC, emulated).
    Scsi,
    /// virtio-blk.
    Virtio,
    /// USB mass storage.
    Usb,
    /// SD/eMMC.
    Mmc,
    /// Anything else (loop, ram, device-mapper, unknown).
    Other,
}

/// The stable identity of a disk.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiskIdentity {
    /// Serial number as the device reports it, trimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Model string, trimmed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// World Wide Name (or NVMe EUI-64/NGUID), as in `/sys/block/X/device/wwid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    /// The `/dev/disk/by-path` link, when no better identity exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_path: Option<String>,
    /// Capacity in bytes.
    pub size_bytes: u64,
}

impl DiskIdentity {
    /// Whether this disk is one the root device hints allow: every hint given must match
    /// (serial, WWN, model, by-path exactly; size within the range). The error says which
    /// hint did not.
    pub fn matches_hints(&self, hints: &crate::deploy::RootDeviceHints) -> Result<(), String> {
        let same = |want: &Option<String>, have: &Option<String>| want.is_none() || want.as_deref() == have.as_deref();
        if !same(&hints.serial, &self.serial) {
            return Err(format!("serial {:?} is not {:?}", self.serial, hints.serial));
        }
        if !same(&hints.wwn, &self.wwn) {
            return Err(format!("WWN {:?} is not {:?}", self.wwn, hints.wwn));
        }
        if !same(&hints.model, &self.model) {
            return Err(format!("model {:?} is not {:?}", self.model, hints.model));
        }
        if !same(&hints.by_path, &self.by_path) {
            return Err(format!("by-path {:?} is not {:?}", self.by_path, hints.by_path));
        }
        if hints.min_size_bytes.is_some_and(|min| self.size_bytes < min)
            || hints.max_size_bytes.is_some_and(|max| self.size_bytes > max)
        {
            return Err(format!("size {} is outside the hinted range", self.size_bytes));
        }
        Ok(())
    }

    /// Whether `other` is the same physical disk (see the module comment for the rule).
    pub fn same_disk(&self, other: &DiskIdentity) -> bool {
        if self.size_bytes != other.size_bytes {
            return false;
        }
        for (a, b) in [(&self.wwn, &other.wwn), (&self.serial, &other.serial), (&self.by_path, &other.by_path)] {
            if let (Some(a), Some(b)) = (a, b) {
                return a == b;
            }
        }
        self.model == other.model
    }

    /// A short human label: serial, WWN, by-path or model, whichever exists first.
    pub fn label(&self) -> String {
        let name = self.serial.as_ref().or(self.wwn.as_ref()).or(self.by_path.as_ref()).or(self.model.as_ref());
        match name {
            Some(name) => format!("{name} ({} bytes)", self.size_bytes),
            None => format!("unnamed disk ({} bytes)", self.size_bytes),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(serial: Option<&str>, wwn: Option<&str>, size: u64) -> DiskIdentity {
        DiskIdentity {
            serial: serial.map(Into::into),
            model: Some("M".into()),
            wwn: wwn.map(Into::into),
            by_path: None,
            size_bytes: size,
        }
    }

    #[test]
    fn identity_prefers_wwn_then_serial_and_always_checks_size() {
        assert!(disk(Some("a"), Some("w"), 10).same_disk(&disk(Some("b"), Some("w"), 10)));
        assert!(!disk(Some("a"), Some("w"), 10).same_disk(&disk(Some("a"), Some("x"), 10)));
        assert!(disk(Some("a"), None, 10).same_disk(&disk(Some("a"), Some("x"), 10)));
        assert!(!disk(Some("a"), None, 10).same_disk(&disk(Some("a"), None, 11)));
        assert!(!disk(Some("a"), None, 10).same_disk(&disk(Some("b"), None, 10)));
        assert!(disk(None, None, 10).same_disk(&disk(None, None, 10)));
    }
}
