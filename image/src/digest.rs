//! The whole-image digest (SHA-256 or SHA-512, as the plan says) over the bytes exactly as
//! served, computed as they stream past; the SHA-256 of one raw chunk; the all-zero test.

use std::io::{self, Read};

use metal_protocol::deploy::{Digest, DigestAlgorithm};
use sha2::Digest as _;

/// A running SHA-256 or SHA-512.
#[derive(Debug, Clone)]
pub enum Hasher {
    /// SHA-256.
    Sha256(sha2::Sha256),
    /// SHA-512.
    Sha512(sha2::Sha512),
}

impl Hasher {
    /// A fresh hasher for `algorithm`.
    pub fn new(algorithm: DigestAlgorithm) -> Self {
        match algorithm {
            DigestAlgorithm::Sha256 => Hasher::Sha256(sha2::Sha256::new()),
            DigestAlgorithm::Sha512 => Hasher::Sha512(sha2::Sha512::new()),
        }
    }

    /// Adds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match self {
            Hasher::Sha256(h) => h.update(bytes),
            Hasher::Sha512(h) => h.update(bytes),
        }
    }

    /// The digest.
    pub fn finish(self) -> Digest {
        match self {
            Hasher::Sha256(h) => Digest { algorithm: DigestAlgorithm::Sha256, hex: hex::encode(h.finalize()) },
            Hasher::Sha512(h) => Digest { algorithm: DigestAlgorithm::Sha512, hex: hex::encode(h.finalize()) },
        }
    }
}

/// The SHA-256 of one chunk, hex.
pub fn chunk_sha256(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Whether every byte of `bytes` is zero (64-byte blocks OR-ed together, which vectorises).
pub fn is_zero(bytes: &[u8]) -> bool {
    let mut blocks = bytes.chunks_exact(64);
    blocks.all(|block| block.iter().fold(0, |acc, b| acc | b) == 0) && blocks.remainder().iter().all(|b| *b == 0)
}

/// A reader that hashes and counts what passes through it.
#[derive(Debug)]
pub struct HashingReader<R> {
    inner: R,
    hasher: Hasher,
    count: u64,
}

impl<R: Read> HashingReader<R> {
    /// Wraps `inner`.
    pub fn new(inner: R, algorithm: DigestAlgorithm) -> Self {
        Self { inner, hasher: Hasher::new(algorithm), count: 0 }
    }

    /// Reads `inner` to its end (bytes a decoder left unread still count) and returns the
    /// digest and the byte count.
    pub fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((self.hasher.finish(), self.count))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        let reader = HashingReader::new(&b"abc"[..], DigestAlgorithm::Sha256);
        let (digest, count) = reader.finish().unwrap();
        assert_eq!(count, 3);
        assert_eq!(digest.hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        let (digest, _) = HashingReader::new(&b"abc"[..], DigestAlgorithm::Sha512).finish().unwrap();
        assert!(digest.hex.starts_with("ddaf35a193617aba"));
        assert_eq!(chunk_sha256(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn zero_test_sees_every_byte() {
        assert!(is_zero(&[]));
        let mut bytes = vec![0u8; 4096 + 37];
        assert!(is_zero(&bytes));
        for at in [0, 63, 64, 4095, 4096 + 36] {
            bytes[at] = 1;
            assert!(!is_zero(&bytes), "a one at {at}");
            bytes[at] = 0;
        }
    }
}
