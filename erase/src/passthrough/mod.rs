//! Device commands for firmware erase, as pure data: builders for the NVMe admin commands,
//! the ATA commands tunnelled through SCSI ATA PASS-THROUGH(16), and SCSI SANITIZE; parsers
//! for what the devices answer (identify data, sanitize status, completion status, sense).
//!
//! Design decision: nothing here touches a device. A builder returns plain values (the fields
//! of `struct nvme_passthru_cmd`, or a CDB with its data phase) and a parser takes a byte
//! slice, so every layout is unit-tested byte for byte against the specifications and the
//! reference tools (nvme-cli/libnvme, hdparm, sg3_utils). The `ioctl` module only copies these
//! values into `struct nvme_passthru_cmd` / `struct sg_io_hdr`, fills in the buffer pointers,
//! and hands back the bytes the device returned.

pub mod ata;
pub mod nvme;
pub mod scsi;

/// Direction of a command's data phase, seen from the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    /// No data phase.
    None,
    /// The device sends data to the host (identify data, log pages, sense, replies).
    FromDevice,
    /// The host sends data to the device (passwords, parameter lists).
    ToDevice,
}

/// Little-endian u16 at `off`; the caller has checked the length.
fn le_u16(buf: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([buf[off], buf[off + 1]])
}

/// Little-endian u32 at `off`; the caller has checked the length.
fn le_u32(buf: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([buf[off], buf[off + 1], buf[off + 2], buf[off + 3]])
}

/// Little-endian u64 at `off`; the caller has checked the length.
fn le_u64(buf: &[u8], off: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[off..off + 8]);
    u64::from_le_bytes(b)
}

/// Big-endian u16 at `off`; the caller has checked the length.
fn be_u16(buf: &[u8], off: usize) -> u16 {
    u16::from_be_bytes([buf[off], buf[off + 1]])
}

/// Bytes of a space-padded ASCII field, trimmed of the padding (and of NULs some firmware
/// uses instead). Non-ASCII bytes are replaced, never trusted.
fn trimmed_ascii(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim_matches(|c: char| c == ' ' || c == '\0').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    // NVMe/ATA structures are little-endian; SCSI fields are big-endian (SPC-4 3.5).
    #[test]
    fn little_and_big_endian_helpers() {
        let b = [0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07, 0x08];
        assert_eq!(le_u16(&b, 0), 0x0201);
        assert_eq!(le_u32(&b, 1), 0x0504_0302);
        assert_eq!(le_u64(&b, 0), 0x0807_0605_0403_0201);
        assert_eq!(be_u16(&b, 0), 0x0102);
    }

    // NVMe SN/MN/FR and ATA strings are space-padded ASCII.
    #[test]
    fn ascii_fields_are_trimmed() {
        assert_eq!(trimmed_ascii(b"  Samsung SSD 980  \0\0"), "Samsung SSD 980");
        assert_eq!(trimmed_ascii(b"        "), "");
    }
}
