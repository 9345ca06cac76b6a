//! Reading back: the evidence behind every verdict.
//!
//! After a software overwrite the expected bytes are known, so every byte read is compared
//! with the pattern (`full`) or a seeded, region-stratified sample of it (`sampled`). After a
//! device erase the result is vendor-defined (zeros, ones, ciphertext), so the proof is that
//! what was there is gone: `Markers` planted before the erase must not survive (not even a
//! 64-byte piece of one), and sampled regions must differ from their pre-erase content
//! unless that content was uniform. Discard alone is never evidence: it is checked like any
//! device erase, so a device that acknowledges a discard and keeps the data fails.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash as _, Hasher as _};
use std::io;

use rand::{Rng as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

use crate::io::{AlignedBuf, Target};
use crate::pattern::Pattern;

/// Length of one sample read.
pub const SAMPLE_LEN: u64 = 1 << 20;
/// Length of one marker (and the granularity at which a surviving piece counts).
pub const MARKER_LEN: u64 = 4096;
const MARKER_PIECE: usize = 64;

/// The result of a read-back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadBack {
    /// Bytes read.
    pub bytes_read: u64,
    /// First offset found holding data it should not, if any.
    pub first_bad_offset: Option<u64>,
    /// What was found there, for people.
    pub finding: Option<String>,
}

impl ReadBack {
    fn pass(bytes_read: u64) -> Self {
        Self { bytes_read, first_bad_offset: None, finding: None }
    }

    fn fail(bytes_read: u64, offset: u64, finding: String) -> Self {
        Self { bytes_read, first_bad_offset: Some(offset), finding: Some(finding) }
    }

    /// Combines two read-backs of the same disk: bytes add up, the lowest bad offset wins.
    pub fn and(self, other: ReadBack) -> ReadBack {
        let bytes_read = self.bytes_read + other.bytes_read;
        match (self.first_bad_offset, other.first_bad_offset) {
            (Some(a), Some(b)) if b < a => ReadBack { bytes_read, ..other },
            (Some(_), _) => ReadBack { bytes_read, ..self },
            (None, _) => ReadBack { bytes_read, ..other },
        }
    }
}

/// Reads every byte and compares with `pattern`. `io_size` bytes per read; `progress` gets
/// bytes done so far.
pub fn full(target: &dyn Target, pattern: &Pattern, io_size: usize, progress: &dyn Fn(u64)) -> io::Result<ReadBack> {
    let size = target.size();
    let mut buf = AlignedBuf::new(io_size);
    let mut scratch = AlignedBuf::new(io_size);
    let mut offset = 0u64;
    while offset < size {
        let len = usize::try_from((size - offset).min(io_size as u64)).unwrap_or(io_size);
        target.read_at(&mut buf[..len], offset)?;
        if let Some(i) = pattern.first_mismatch(offset, &buf[..len], &mut scratch) {
            let bad = offset + i as u64;
            return Ok(ReadBack::fail(
                offset + len as u64,
                bad,
                format!("byte at offset {bad} is not {}", pattern.name()),
            ));
        }
        offset += len as u64;
        progress(offset);
    }
    Ok(ReadBack::pass(size))
}

/// Seeded sample positions: `coverage_percent` of the disk in [`SAMPLE_LEN`] reads, one in
/// each of as many equal regions, so every region of the disk is visited.
pub fn sample_positions(size: u64, block: u64, coverage_percent: f64, seed: u64) -> Vec<(u64, u64)> {
    if size == 0 {
        return Vec::new();
    }
    let len = SAMPLE_LEN.min(size) / block * block;
    let len = len.max(block.min(size));
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]
    let wanted = ((size as f64) * coverage_percent.clamp(0.0, 100.0) / 100.0 / len as f64).ceil() as u64;
    let count = wanted.clamp(1, size / len);
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..count)
        .map(|i| {
            let (start, end) = region_bounds(size, count, i, block);
            let room = end.saturating_sub(start).saturating_sub(len) / block;
            let offset = start + if room > 0 { rng.gen_range(0..=room) * block } else { 0 };
            (offset, len.min(size - offset))
        })
        .collect()
}

/// Block-aligned bounds of region `i` of `count` equal regions (the last one ends at `size`).
pub fn region_bounds(size: u64, count: u64, i: u64, block: u64) -> (u64, u64) {
    let edge = |k: u64| {
        let raw = u64::try_from(u128::from(size) * u128::from(k) / u128::from(count)).unwrap_or(size);
        raw / block * block
    };
    (edge(i), if i + 1 == count { size } else { edge(i + 1) })
}

/// Share of the disk the positions cover, in percent.
pub fn coverage_of(positions: &[(u64, u64)], size: u64) -> f64 {
    let read: u64 = positions.iter().map(|(_, len)| len).sum();
    #[allow(clippy::cast_precision_loss)]
    let percent = read as f64 * 100.0 / size.max(1) as f64;
    percent.min(100.0)
}

/// Reads the sampled positions and compares them with `pattern`.
pub fn sampled(
    target: &dyn Target,
    pattern: &Pattern,
    positions: &[(u64, u64)],
    progress: &dyn Fn(u64),
) -> io::Result<ReadBack> {
    let mut buf = AlignedBuf::new(round_up(SAMPLE_LEN));
    let mut scratch = AlignedBuf::new(round_up(SAMPLE_LEN));
    let mut read = 0u64;
    for &(offset, len) in positions {
        let n = usize::try_from(len).unwrap_or(0);
        target.read_at(&mut buf[..n], offset)?;
        read += len;
        progress(read);
        if let Some(i) = pattern.first_mismatch(offset, &buf[..n], &mut scratch) {
            let bad = offset + i as u64;
            return Ok(ReadBack::fail(read, bad, format!("sampled byte at offset {bad} is not {}", pattern.name())));
        }
    }
    Ok(ReadBack::pass(read))
}

fn round_up(n: u64) -> usize {
    usize::try_from(n.div_ceil(4096) * 4096).unwrap_or(4096)
}

/// Blocks of recognisable data written before a device erase; none may survive it.
#[derive(Debug)]
pub struct Markers {
    pattern: Pattern,
    offsets: Vec<u64>,
}

impl Markers {
    /// Chooses `count` marker positions from `seed` (one per equal region) and writes them.
    pub fn plant(target: &dyn Target, count: u64, seed: u64) -> io::Result<Self> {
        let size = target.size();
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x6d61_726b_6572_7321);
        let mut key = [0u8; 32];
        rng.fill(&mut key);
        let markers = Self { pattern: Pattern::Keyed(key), offsets: Self::positions(size, count, &mut rng) };
        let mut buf = AlignedBuf::new(round_up(MARKER_LEN));
        for &offset in &markers.offsets {
            markers.pattern.fill(offset, &mut buf);
            target.write_at(&buf, offset)?;
        }
        target.sync()?;
        Ok(markers)
    }

    fn positions(size: u64, count: u64, rng: &mut ChaCha8Rng) -> Vec<u64> {
        let slots = size / MARKER_LEN;
        let count = count.clamp(1, slots.max(1));
        if slots == 0 {
            return Vec::new();
        }
        let per_region = slots / count;
        (0..count).map(|i| (i * per_region + rng.gen_range(0..per_region.max(1))) * MARKER_LEN).collect()
    }

    /// Number of markers planted.
    pub fn len(&self) -> usize {
        self.offsets.len()
    }

    /// Whether no marker could be planted (disk smaller than one marker).
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty()
    }

    /// Reads every marker position: any 64-byte piece still equal to the marker fails.
    pub fn check(&self, target: &dyn Target) -> io::Result<ReadBack> {
        let mut buf = AlignedBuf::new(round_up(MARKER_LEN));
        let mut expected = AlignedBuf::new(round_up(MARKER_LEN));
        for (i, &offset) in self.offsets.iter().enumerate() {
            target.read_at(&mut buf, offset)?;
            self.pattern.fill(offset, &mut expected);
            let survivor = buf.chunks(MARKER_PIECE).zip(expected.chunks(MARKER_PIECE)).position(|(a, e)| a == e);
            if let Some(piece) = survivor {
                let bad = offset + (piece * MARKER_PIECE) as u64;
                let read = (i as u64 + 1) * MARKER_LEN;
                return Ok(ReadBack::fail(
                    read,
                    bad,
                    format!("marker data written before the erase survived at offset {bad}"),
                ));
            }
        }
        Ok(ReadBack::pass(self.offsets.len() as u64 * MARKER_LEN))
    }
}

/// Fingerprints of sampled regions taken before a device erase.
#[derive(Debug)]
pub struct Fingerprints {
    /// (offset, length, hash of the content, or None when the content was uniform).
    samples: Vec<(u64, u64, Option<u64>)>,
}

/// Every byte the same: each equals the next (one `memcmp` of the slice against itself
/// shifted by a byte, several times faster than comparing byte by byte).
fn uniform(data: &[u8]) -> bool {
    data.len() < 2 || data[1..] == data[..data.len() - 1]
}

fn fingerprint(data: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    data.hash(&mut h);
    h.finish()
}

impl Fingerprints {
    /// Reads and fingerprints every sample position.
    pub fn take(target: &dyn Target, positions: &[(u64, u64)]) -> io::Result<Self> {
        let mut buf = AlignedBuf::new(round_up(SAMPLE_LEN));
        let mut samples = Vec::with_capacity(positions.len());
        for &(offset, len) in positions {
            let data = &mut buf[..usize::try_from(len).unwrap_or(0)];
            target.read_at(data, offset)?;
            samples.push((offset, len, (!uniform(data)).then(|| fingerprint(data))));
        }
        Ok(Self { samples })
    }

    /// After the erase: a region whose non-uniform content is unchanged fails.
    pub fn check(&self, target: &dyn Target, progress: &dyn Fn(u64)) -> io::Result<ReadBack> {
        let mut buf = AlignedBuf::new(round_up(SAMPLE_LEN));
        let mut read = 0u64;
        for &(offset, len, before) in &self.samples {
            let data = &mut buf[..usize::try_from(len).unwrap_or(0)];
            target.read_at(data, offset)?;
            read += len;
            progress(read);
            if let Some(before) = before
                && fingerprint(data) == before
            {
                return Ok(ReadBack::fail(
                    read,
                    offset,
                    format!("the {len} bytes at offset {offset} are unchanged by the erase"),
                ));
            }
        }
        Ok(ReadBack::pass(read))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_means_every_byte_the_same() {
        assert!(uniform(&[]) && uniform(&[7]) && uniform(&[0; 4096]) && uniform(&[0xff; 4097]));
        for at in [0, 1, 2048, 4095] {
            let mut data = vec![0xa5u8; 4096];
            data[at] = 0xa4;
            assert!(!uniform(&data), "a byte differing at {at}");
        }
    }

    #[test]
    fn samples_cover_every_region_and_respect_coverage() {
        let size = 10u64 << 30;
        let positions = sample_positions(size, 4096, 1.0, 7);
        assert_eq!(positions.len(), 103); // ceil(1% of 10 GiB / 1 MiB)
        let count = positions.len() as u64;
        for (i, (offset, len)) in positions.iter().enumerate() {
            let (start, end) = region_bounds(size, count, i as u64, 4096);
            assert_eq!(offset % 4096, 0);
            assert!(*offset >= start && offset + len <= end, "sample {i} leaves its region");
        }
        assert_eq!(region_bounds(size, count, count - 1, 4096).1, size);
        assert!((coverage_of(&positions, size) - 1.0).abs() < 0.01);
        assert_eq!(sample_positions(size, 4096, 1.0, 7), positions, "same seed, same samples");
        assert_ne!(sample_positions(size, 4096, 1.0, 8), positions);
    }

    #[test]
    fn full_coverage_of_a_small_disk_reads_it_all() {
        let positions = sample_positions(3 << 20, 512, 100.0, 1);
        assert_eq!(positions, vec![(0, 1 << 20), (1 << 20, 1 << 20), (2 << 20, 1 << 20)]);
        assert_eq!(coverage_of(&positions, 3 << 20), 100.0);
    }

    #[test]
    fn read_backs_combine_to_the_lowest_bad_offset() {
        let a = ReadBack::fail(10, 500, "a".into());
        let b = ReadBack::fail(10, 100, "b".into());
        assert_eq!(a.clone().and(b.clone()).first_bad_offset, Some(100));
        assert_eq!(ReadBack::pass(5).and(a.clone()).first_bad_offset, Some(500));
        assert_eq!(ReadBack::pass(5).and(ReadBack::pass(6)), ReadBack::pass(11));
    }
}
