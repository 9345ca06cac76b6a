//! The cloud-init NoCloud seed on the deployed disk: a FAT volume labelled `cidata` holding
//! `meta-data`, `user-data` and `network-config`, in a new partition right after the image
//! (1 MiB aligned). The partition is added to the image's own table: GPT (entry, header and
//! entries CRCs, the backup table moved to the disk's end, the protective MBR resized) or
//! MBR (a free primary slot). The table edit happens in the held-back first MiB, so it lands
//! with the last write of the deploy.

use std::io::{self, Cursor, Write as _};

use metal_protocol::deploy::{CloudInitSeed, SeedVolume};

/// Size of the seed volume.
pub const SEED_BYTES: u64 = metal_protocol::cloudinit::SEED_PARTITION_BYTES;
const ALIGN: u64 = 1 << 20;
/// GPT partition type "Microsoft basic data" (what FAT volumes use), in on-disk byte order.
const BASIC_DATA: [u8; 16] =
    [0xa2, 0xa0, 0xd0, 0xeb, 0xe5, 0xb9, 0x33, 0x44, 0x87, 0xc0, 0x68, 0xb6, 0xb7, 0x26, 0x99, 0xc7];

/// Why the seed could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cloud-init seed: {0}")]
pub struct SeedError(pub String);

/// Where the seed goes and what else must be written at the disk's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedLayout {
    /// First byte of the seed partition.
    pub start: u64,
    /// The backup GPT (entries, then header) and its offset, for GPT disks.
    pub backup: Option<(u64, Vec<u8>)>,
}

fn le64(b: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(b[off..off + 8].try_into().unwrap_or([0; 8]))
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().unwrap_or([0; 4]))
}

/// Checks up front that `seed` can be written at all.
pub fn check(seed: &CloudInitSeed) -> Result<(), SeedError> {
    match seed.volume {
        SeedVolume::VfatPartition => Ok(()),
        SeedVolume::Iso9660Partition => {
            Err(SeedError("an ISO 9660 seed volume is not supported yet; use vfat-partition".into()))
        }
    }
}

/// The FAT volume with the seed's files.
pub fn fat_volume(seed: &CloudInitSeed) -> io::Result<Vec<u8>> {
    let mut disk = Cursor::new(vec![0u8; usize::try_from(SEED_BYTES).unwrap_or(0)]);
    fatfs::format_volume(&mut disk, fatfs::FormatVolumeOptions::new().volume_label(*b"cidata     "))?;
    {
        let fs = fatfs::FileSystem::new(&mut disk, fatfs::FsOptions::new())?;
        let root = fs.root_dir();
        let mut files = vec![("meta-data", &seed.meta_data), ("user-data", &seed.user_data)];
        if let Some(network) = &seed.network_config {
            files.push(("network-config", network));
        }
        for (name, content) in files {
            let mut file = root.create_file(name)?;
            file.truncate()?;
            file.write_all(content.as_bytes())?;
        }
    }
    Ok(disk.into_inner())
}

/// Adds the seed partition to the partition table in `head` (the image's first bytes, at
/// least the table) for an image of `image_bytes` on a disk of `disk_bytes` with `sector`-byte
/// logical blocks.
pub fn add_partition(head: &mut [u8], image_bytes: u64, disk_bytes: u64, sector: u64) -> Result<SeedLayout, SeedError> {
    let gpt_at = usize::try_from(sector).unwrap_or(usize::MAX);
    if head.len() >= gpt_at + 92 && &head[gpt_at..gpt_at + 8] == b"EFI PART" {
        return add_gpt(head, image_bytes, disk_bytes, sector);
    }
    if head.len() >= 512 && head[510..512] == [0x55, 0xaa] {
        return add_mbr(head, image_bytes, disk_bytes, sector);
    }
    Err(SeedError("the image has no partition table (neither GPT nor MBR) to add the seed to".into()))
}

/// A size or position from the image's partition table that does not fit the arithmetic.
fn out_of_range(what: &str) -> SeedError {
    SeedError(format!("the partition table's {what} is out of range"))
}

fn seed_start(after: u64, disk_bytes: u64, reserve_end: u64) -> Result<u64, SeedError> {
    let start = after.div_ceil(ALIGN).checked_mul(ALIGN).ok_or_else(|| out_of_range("last used byte"))?;
    if start.checked_add(SEED_BYTES).and_then(|end| end.checked_add(reserve_end)).is_none_or(|end| end > disk_bytes) {
        return Err(SeedError(format!(
            "no room for the {SEED_BYTES}-byte seed after the image on a {disk_bytes}-byte disk"
        )));
    }
    Ok(start)
}

fn add_gpt(head: &mut [u8], image_bytes: u64, disk_bytes: u64, sector: u64) -> Result<SeedLayout, SeedError> {
    let h = usize::try_from(sector).unwrap_or(0);
    let header_size =
        usize::try_from(le32(head, h + 12)).unwrap_or(92).clamp(92, usize::try_from(sector).unwrap_or(512));
    if head.len() < h + header_size {
        return Err(out_of_range("header size"));
    }
    let entries_lba = le64(head, h + 72);
    let (count, entry_size) = (le32(head, h + 80) as usize, le32(head, h + 84) as usize);
    let entries_at = entries_lba.checked_mul(sector).and_then(|at| usize::try_from(at).ok());
    let entries_len = count.checked_mul(entry_size);
    let (Some(entries_at), Some(entries_len)) = (entries_at, entries_len) else {
        return Err(out_of_range("entry array"));
    };
    if entry_size < 128 || entries_at.checked_add(entries_len).is_none_or(|end| end > head.len()) {
        return Err(SeedError("the GPT partition entries are not within the image's first MiB".into()));
    }
    let entries_sectors = (entries_len as u64).div_ceil(sector);
    let disk_lbas = disk_bytes / sector;
    // The backup table at the disk's end: entries, then the header in the last LBA.
    let reserve_end = (entries_sectors + 1) * sector;
    let mut last_used = image_bytes.div_ceil(sector);
    let mut free_slot = None;
    for i in 0..count {
        let e = &head[entries_at + i * entry_size..entries_at + (i + 1) * entry_size];
        if e[..16].iter().all(|b| *b == 0) {
            free_slot = free_slot.or(Some(i));
        } else {
            let end = le64(e, 40).checked_add(1).ok_or_else(|| out_of_range("partition end"))?;
            last_used = last_used.max(end);
        }
    }
    let slot = free_slot.ok_or_else(|| SeedError("the GPT has no free partition entry".into()))?;
    let after = last_used.checked_mul(sector).ok_or_else(|| out_of_range("last used LBA"))?;
    let start = seed_start(after, disk_bytes, reserve_end)?;
    // The seed fits before the backup table, so these cannot underflow.
    let backup_entries_lba = disk_lbas - 1 - entries_sectors;
    let entry = &mut head[entries_at + slot * entry_size..entries_at + (slot + 1) * entry_size];
    entry.fill(0);
    entry[..16].copy_from_slice(&BASIC_DATA);
    entry[16..32].copy_from_slice(&rand::random::<[u8; 16]>());
    entry[32..40].copy_from_slice(&(start / sector).to_le_bytes());
    entry[40..48].copy_from_slice(&((start + SEED_BYTES) / sector - 1).to_le_bytes());
    for (i, unit) in "cidata".encode_utf16().enumerate() {
        entry[56 + 2 * i..58 + 2 * i].copy_from_slice(&unit.to_le_bytes());
    }
    let entries_crc = crc32fast::hash(&head[entries_at..entries_at + entries_len]);
    let mut header = head[h..h + header_size].to_vec();
    header[32..40].copy_from_slice(&(disk_lbas - 1).to_le_bytes()); // AlternateLBA
    header[48..56].copy_from_slice(&(backup_entries_lba - 1).to_le_bytes()); // LastUsableLBA
    header[88..92].copy_from_slice(&entries_crc.to_le_bytes());
    let seal = |header: &mut Vec<u8>| {
        header[16..20].fill(0);
        let crc = crc32fast::hash(header);
        header[16..20].copy_from_slice(&crc.to_le_bytes());
    };
    seal(&mut header);
    head[h..h + header_size].copy_from_slice(&header);
    // The backup header: MyLBA and AlternateLBA swapped, entries before it.
    let mut backup_header = header.clone();
    backup_header[24..32].copy_from_slice(&(disk_lbas - 1).to_le_bytes());
    backup_header[32..40].copy_from_slice(&1u64.to_le_bytes());
    backup_header[72..80].copy_from_slice(&backup_entries_lba.to_le_bytes());
    seal(&mut backup_header);
    let mut backup = vec![0u8; usize::try_from(reserve_end).unwrap_or(0)];
    backup[..entries_len].copy_from_slice(&head[entries_at..entries_at + entries_len]);
    let header_at = usize::try_from(entries_sectors * sector).unwrap_or(0);
    backup[header_at..header_at + header_size].copy_from_slice(&backup_header);
    // The protective MBR covers the whole disk again.
    if head[450] == 0xee {
        let size = u32::try_from(disk_lbas - 1).unwrap_or(u32::MAX);
        head[458..462].copy_from_slice(&size.to_le_bytes());
    }
    Ok(SeedLayout { start, backup: Some((backup_entries_lba * sector, backup)) })
}

fn add_mbr(head: &mut [u8], image_bytes: u64, disk_bytes: u64, sector: u64) -> Result<SeedLayout, SeedError> {
    let mut last_used = image_bytes;
    let mut free = None;
    for i in 0..4 {
        let e = &head[446 + 16 * i..462 + 16 * i];
        if e[4] == 0 {
            free = free.or(Some(i));
        } else {
            last_used = last_used.max((u64::from(le32(e, 8)) + u64::from(le32(e, 12))) * sector);
        }
    }
    let slot = free.ok_or_else(|| SeedError("the MBR has no free primary partition slot".into()))?;
    let start = seed_start(last_used, disk_bytes, 0)?;
    let lba =
        u32::try_from(start / sector).map_err(|_| SeedError("the seed is beyond the MBR's 2 TiB reach".into()))?;
    let count = u32::try_from(SEED_BYTES / sector).unwrap_or(0);
    let e = &mut head[446 + 16 * slot..462 + 16 * slot];
    e.copy_from_slice(&[0x00, 0xfe, 0xff, 0xff, 0x0c, 0xfe, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0]);
    e[8..12].copy_from_slice(&lba.to_le_bytes());
    e[12..16].copy_from_slice(&count.to_le_bytes());
    Ok(SeedLayout { start, backup: None })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed() -> CloudInitSeed {
        CloudInitSeed {
            meta_data: "{\"instance-id\":\"i-1\"}".into(),
            user_data: "#cloud-config\n{}\n".into(),
            network_config: None,
            volume: SeedVolume::VfatPartition,
        }
    }

    #[test]
    fn the_fat_volume_holds_the_files_under_the_cidata_label() {
        let volume = fat_volume(&seed()).unwrap();
        let fs = fatfs::FileSystem::new(Cursor::new(volume), fatfs::FsOptions::new()).unwrap();
        assert_eq!(fs.volume_label(), "cidata");
        let mut text = String::new();
        std::io::Read::read_to_string(&mut fs.root_dir().open_file("user-data").unwrap(), &mut text).unwrap();
        assert_eq!(text, "#cloud-config\n{}\n");
    }

    #[test]
    fn an_mbr_image_gets_a_fat_partition_after_its_last_one() {
        let mut head = vec![0u8; 1 << 20];
        head[510] = 0x55;
        head[511] = 0xaa;
        // One partition: LBA 2048, 10240 sectors (1 MiB .. 6 MiB).
        head[446 + 4] = 0x83;
        head[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
        head[446 + 12..446 + 16].copy_from_slice(&10240u32.to_le_bytes());
        let layout = add_partition(&mut head, 6 << 20, 64 << 20, 512).unwrap();
        assert_eq!(layout, SeedLayout { start: 6 << 20, backup: None });
        assert_eq!(head[462 + 4], 0x0c);
        assert_eq!(le32(&head, 462 + 8), 12288);
        assert!(add_partition(&mut head, 6 << 20, 16 << 20, 512).unwrap_err().0.contains("no room"));
        assert!(add_partition(&mut vec![0u8; 4096], 1, 1 << 30, 512).unwrap_err().0.contains("no partition table"));
        assert!(check(&CloudInitSeed { volume: SeedVolume::Iso9660Partition, ..seed() }).is_err());
    }
}
