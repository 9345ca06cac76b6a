//! What an overwrite writes and a read-back expects: zeros, or a keyed pseudo-random stream.
//!
//! The keyed stream is ChaCha8 keyed with a random 256-bit key and positioned by byte
//! offset, so any block can be regenerated for comparison without storing what was written,
//! and a drive cannot "compress away" or predict it. Offsets must be multiples of 4.

use rand::{RngCore as _, SeedableRng as _};
use rand_chacha::ChaCha8Rng;

/// Bytes compared at a time when scanning for a mismatch.
const SCAN_CHUNK: usize = 4096;

/// An overwrite pattern.
#[derive(Clone)]
pub enum Pattern {
    /// All zero bytes.
    Zeros,
    /// ChaCha8 keystream under this key, indexed by byte offset.
    Keyed([u8; 32]),
}

impl std::fmt::Debug for Pattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.write_str(self.name())
    }
}

impl Pattern {
    /// A keyed pattern with a fresh random key.
    pub fn random() -> Self {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        Pattern::Keyed(key)
    }

    /// Name as it appears in reports: "zeros" or "keyed-stream".
    pub fn name(&self) -> &'static str {
        match self {
            Pattern::Zeros => "zeros",
            Pattern::Keyed(_) => "keyed-stream",
        }
    }

    /// Fills `buf` with the pattern's bytes for device offset `offset`.
    pub fn fill(&self, offset: u64, buf: &mut [u8]) {
        match self {
            Pattern::Zeros => buf.fill(0),
            Pattern::Keyed(key) => {
                debug_assert!(offset.is_multiple_of(4), "keyed pattern offsets must be multiples of 4");
                let mut rng = ChaCha8Rng::from_seed(*key);
                rng.set_word_pos(u128::from(offset / 4));
                rng.fill_bytes(buf);
            }
        }
    }

    /// Compares `actual` (read at `offset`) with the pattern; returns the index of the first
    /// byte that differs. `scratch` must be at least as long as `actual` (unused for zeros).
    pub fn first_mismatch(&self, offset: u64, actual: &[u8], scratch: &mut [u8]) -> Option<usize> {
        match self {
            Pattern::Zeros => first_nonzero(actual),
            Pattern::Keyed(_) => {
                let expected = &mut scratch[..actual.len()];
                self.fill(offset, expected);
                if expected == actual {
                    return None;
                }
                actual.iter().zip(expected.iter()).position(|(a, e)| a != e)
            }
        }
    }
}

/// Index of the first non-zero byte. Scans in chunks whose OR-reduction vectorises, and
/// only looks byte by byte inside a chunk that has one.
pub fn first_nonzero(buf: &[u8]) -> Option<usize> {
    for (i, chunk) in buf.chunks(SCAN_CHUNK).enumerate() {
        if chunk.iter().fold(0u8, |acc, b| acc | b) != 0 {
            let within = chunk.iter().position(|b| *b != 0)?;
            return Some(i * SCAN_CHUNK + within);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_stream_is_seekable_by_offset() {
        let p = Pattern::Keyed([9; 32]);
        let mut whole = vec![0u8; 1 << 16];
        p.fill(0, &mut whole);
        let mut part = vec![0u8; 4096];
        p.fill(12_288, &mut part);
        assert_eq!(&whole[12_288..16_384], &part[..]);
        let mut odd = vec![0u8; 100];
        p.fill(1028, &mut odd);
        assert_eq!(&whole[1028..1128], &odd[..]);
        assert_ne!(whole[..64], [0u8; 64]);
    }

    #[test]
    fn different_keys_give_different_streams() {
        let (mut a, mut b) = (vec![0u8; 64], vec![0u8; 64]);
        Pattern::Keyed([1; 32]).fill(0, &mut a);
        Pattern::Keyed([2; 32]).fill(0, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn mismatches_are_found_at_their_exact_index() {
        let mut scratch = vec![0u8; 1 << 16];
        let mut zeros = vec![0u8; 1 << 16];
        assert_eq!(Pattern::Zeros.first_mismatch(0, &zeros, &mut scratch), None);
        zeros[40_000] = 1;
        zeros[50_000] = 1;
        assert_eq!(Pattern::Zeros.first_mismatch(0, &zeros, &mut scratch), Some(40_000));

        let p = Pattern::Keyed([3; 32]);
        let mut data = vec![0u8; 8192];
        p.fill(4096, &mut data);
        assert_eq!(p.first_mismatch(4096, &data, &mut scratch), None);
        data[777] ^= 0x10;
        assert_eq!(p.first_mismatch(4096, &data, &mut scratch), Some(777));
        // The same bytes read at the wrong offset do not match.
        data[777] ^= 0x10;
        assert_eq!(p.first_mismatch(8192, &data, &mut scratch), Some(0));
    }

    #[test]
    fn debug_never_shows_the_key() {
        assert_eq!(format!("{:?}", Pattern::Keyed([0xab; 32])), "keyed-stream");
    }
}
