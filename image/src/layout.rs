//! What partition table an image starts with, from its first bytes: GPT (its header's
//! signature in the second logical block, 512- or 4096-byte) or MBR (the boot signature).
//! A deploy adds the cloud-init seed as a partition of the image's own table, so an image
//! without one can never deploy; the import checks it up front.

/// A partition table's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionTable {
    /// A GUID partition table (behind its protective MBR).
    Gpt,
    /// A DOS (MBR) partition table.
    Mbr,
}

/// How many leading bytes [`partition_table`] reads at most.
pub const HEAD_BYTES: usize = 4096 + 8;

/// The partition table at the start of an image whose first bytes are `head`, if any.
pub fn partition_table(head: &[u8]) -> Option<PartitionTable> {
    let gpt_at = |sector: usize| head.get(sector..sector + 8) == Some(b"EFI PART".as_slice());
    if gpt_at(512) || gpt_at(4096) {
        Some(PartitionTable::Gpt)
    } else if head.get(510..512) == Some([0x55, 0xaa].as_slice()) {
        Some(PartitionTable::Mbr)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt_on_either_sector_size_then_mbr_then_none() {
        let mut head = vec![0u8; HEAD_BYTES];
        assert_eq!(partition_table(&head), None);
        head[510..512].copy_from_slice(&[0x55, 0xaa]);
        assert_eq!(partition_table(&head), Some(PartitionTable::Mbr));
        head[4096..4104].copy_from_slice(b"EFI PART");
        assert_eq!(partition_table(&head), Some(PartitionTable::Gpt), "4096-byte sectors, protective MBR");
        let mut small = vec![0u8; 1024];
        small[512..520].copy_from_slice(b"EFI PART");
        assert_eq!(partition_table(&small), Some(PartitionTable::Gpt));
        assert_eq!(partition_table(&small[..300]), None, "too short to say");
    }
}
