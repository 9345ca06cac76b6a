//! The chunk manifest of an image's raw bytes: the SHA-256 of every fixed-size chunk and the
//! indices of the all-zero ones. `metal-boot plan`, the controller's import and the seekable
//! writer all build it here, so they cannot disagree.

use std::io::{self, BufReader, Read};

use metal_protocol::deploy::{ChunkManifest, Digest, DigestAlgorithm, ImageFormat};

use crate::digest::{HashingReader, chunk_sha256, is_zero};
use crate::format;

/// Reads until `buf` is full or the input ends; returns how many bytes were read.
pub fn read_full(reader: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

/// One raw chunk's entry in the manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkDigest {
    /// Length in bytes.
    pub len: u64,
    /// Lower-case hex SHA-256.
    pub sha256: String,
    /// Every byte is zero.
    pub zero: bool,
}

impl ChunkDigest {
    /// The entry of the raw chunk `bytes`.
    pub fn of(bytes: &[u8]) -> Self {
        Self { len: bytes.len() as u64, sha256: chunk_sha256(bytes), zero: is_zero(bytes) }
    }
}

/// A manifest built chunk by chunk, in order.
#[derive(Debug, Clone)]
pub struct ManifestBuilder {
    chunk_size: u64,
    raw_size: u64,
    sha256: Vec<String>,
    zero_chunks: Vec<u64>,
}

impl ManifestBuilder {
    /// An empty manifest of `chunk_size`-byte chunks.
    pub fn new(chunk_size: u64) -> Self {
        Self { chunk_size, raw_size: 0, sha256: Vec::new(), zero_chunks: Vec::new() }
    }

    /// Appends the next chunk (every chunk but the last is `chunk_size` long).
    pub fn push(&mut self, chunk: ChunkDigest) {
        if chunk.zero {
            self.zero_chunks.push(self.sha256.len() as u64);
        }
        self.sha256.push(chunk.sha256);
        self.raw_size += chunk.len;
    }

    /// The manifest, bound to the digest of the file it was computed from.
    pub fn finish(self, image_digest: Digest) -> ChunkManifest {
        ChunkManifest {
            image_digest,
            raw_size_bytes: self.raw_size,
            chunk_size: self.chunk_size,
            sha256: self.sha256,
            zero_chunks: self.zero_chunks,
        }
    }
}

/// An image file as served, read to its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Analysis {
    /// The container format, by its magic bytes.
    pub format: ImageFormat,
    /// Size of the file as served.
    pub size_bytes: u64,
    /// The manifest of the raw bytes; its `image_digest` is the digest of the file as served.
    pub manifest: ChunkManifest,
}

/// Reads `served` (the file exactly as it will be served) to its end: its digest under
/// `algorithm`, its format and size, and the manifest of its decoded raw bytes in
/// `chunk_size`-byte chunks (a positive chunk size; the plan's own rules are checked by
/// `DeployPlan::validate`).
pub fn analyze(served: impl Read + Send, chunk_size: u64, algorithm: DigestAlgorithm) -> io::Result<Analysis> {
    if chunk_size == 0 {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "the chunk size must be positive"));
    }
    let mut served = HashingReader::new(served, algorithm);
    let mut input = BufReader::with_capacity(1 << 20, &mut served);
    let image_format = format::sniff(&mut input)?;
    let mut raw = format::decoder(image_format, input)?;
    let mut buf = vec![0u8; usize::try_from(chunk_size).unwrap_or(usize::MAX).min(256 << 20)];
    let mut builder = ManifestBuilder::new(chunk_size);
    loop {
        let n = read_full(raw.as_mut(), &mut buf)?;
        if n == 0 {
            break;
        }
        builder.push(ChunkDigest::of(&buf[..n]));
        if n < buf.len() {
            break;
        }
    }
    drop(raw);
    let (digest, size_bytes) = served.finish()?;
    Ok(Analysis { format: image_format, size_bytes, manifest: builder.finish(digest) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_chunks_are_marked_and_sizes_add_up() {
        let chunk = 64 << 10;
        let mut raw = vec![7u8; 3 * chunk + 100];
        raw[chunk..2 * chunk].fill(0);
        let analysis = analyze(&raw[..], chunk as u64, DigestAlgorithm::Sha256).unwrap();
        let m = &analysis.manifest;
        assert_eq!(
            (analysis.format, analysis.size_bytes, m.raw_size_bytes),
            (ImageFormat::Raw, raw.len() as u64, raw.len() as u64)
        );
        assert_eq!(m.sha256.len(), 4);
        assert_eq!(m.zero_chunks, vec![1]);
        assert_eq!(m.sha256[1], chunk_sha256(&vec![0u8; chunk]));
        assert_eq!(m.sha256[3], chunk_sha256(&raw[3 * chunk..]));
    }

    #[test]
    fn a_zero_chunk_size_is_refused() {
        assert!(analyze(&b"abc"[..], 0, DigestAlgorithm::Sha256).is_err());
    }
}
