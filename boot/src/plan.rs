//! `metal-boot plan`: the deploy plan of an image file, as the controller computes it at image
//! import: the digest of the file as it will be served, its format (from its magic bytes),
//! and the chunk manifest of the raw bytes that will land on disk.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

use metal_protocol::deploy::{ChunkManifest, DeployPlan, DigestAlgorithm, ImageSource, PlanError, RootDeviceHints};

use crate::digest::{HashingReader, chunk_sha256};
use crate::format;

/// Why a plan could not be made.
#[derive(Debug, thiserror::Error)]
pub enum MakePlanError {
    /// The image could not be read or decoded.
    #[error("{path}: {source}")]
    Io {
        /// The image file.
        path: String,
        /// What failed.
        source: io::Error,
    },
    /// The result is not a valid plan (bad URL, chunk size, empty image).
    #[error(transparent)]
    Invalid(#[from] PlanError),
}

/// Reads `count` bytes or up to the end; returns how many were read.
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

/// The plan for the image at `path`, to be served at `url`.
pub fn make_plan(
    path: &Path,
    url: &str,
    chunk_size: u64,
    algorithm: DigestAlgorithm,
) -> Result<DeployPlan, MakePlanError> {
    let io_error = |source| MakePlanError::Io { path: path.display().to_string(), source };
    let file = File::open(path).map_err(io_error)?;
    let mut served = HashingReader::new(file, algorithm);
    let mut input = BufReader::with_capacity(1 << 20, &mut served);
    let image_format = format::sniff(&mut input).map_err(io_error)?;
    let mut raw = format::decoder(image_format, input).map_err(io_error)?;
    let mut buf = vec![0u8; usize::try_from(chunk_size).unwrap_or(usize::MAX).min(256 << 20)];
    let (mut sha256, mut raw_size) = (Vec::new(), 0u64);
    loop {
        let n = read_full(raw.as_mut(), &mut buf).map_err(io_error)?;
        if n == 0 {
            break;
        }
        sha256.push(chunk_sha256(&buf[..n]));
        raw_size += n as u64;
        if n < buf.len() {
            break;
        }
    }
    drop(raw);
    let (digest, size_bytes) = served.finish().map_err(io_error)?;
    let plan = DeployPlan {
        image: ImageSource { url: url.to_owned(), size_bytes, format: image_format, digest: digest.clone() },
        chunks: ChunkManifest { image_digest: digest, raw_size_bytes: raw_size, chunk_size, sha256 },
        target: RootDeviceHints::default(),
        cloud_init: None,
    };
    plan.validate()?;
    Ok(plan)
}
