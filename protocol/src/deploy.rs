//! `DeployPlan`: what the deploy ramdisk writes, and the digests that must hold before it does.
//!
//! Two digests protect an image. `image.digest` covers the file at `image.url` exactly as
//! served (usually compressed; it is what upstream publishes). The chunk manifest covers the
//! raw bytes that land on disk, in fixed-size chunks, so each chunk is verified before it is
//! written; it names the image digest it was computed from, which binds the two together.

use serde::{Deserialize, Serialize};

/// Smallest and largest chunk sizes a plan may use.
pub const CHUNK_SIZE_RANGE: std::ops::RangeInclusive<u64> = (64 * 1024)..=(256 * 1024 * 1024);

/// Everything a deploy needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct DeployPlan {
    /// The image to fetch.
    pub image: ImageSource,
    /// Per-chunk digests of the raw (decompressed) image.
    pub chunks: ChunkManifest,
    /// Which disk to write; empty hints mean "the smallest suitable disk".
    #[serde(default)]
    pub target: RootDeviceHints,
    /// The cloud-init NoCloud seed to write after the image, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init: Option<CloudInitSeed>,
}

/// Where the image comes from and what it must hash to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ImageSource {
    /// `https://` URL (plain `http://` only where the deployer explicitly allows it).
    pub url: String,
    /// Size in bytes of the file at `url`.
    pub size_bytes: u64,
    /// Container format of the file at `url`; the ramdisk also checks magic bytes.
    pub format: ImageFormat,
    /// Digest of the file at `url`.
    pub digest: Digest,
    /// When the file is in zstd's seekable format with one frame per chunk: the compressed
    /// size of each frame, in order (frame `i` decompresses to chunk `i`). Empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<u64>,
}

/// Image container formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ImageFormat {
    /// Uncompressed disk image.
    Raw,
    /// Zstandard-compressed raw image.
    Zstd,
    /// xz-compressed raw image.
    Xz,
    /// gzip-compressed raw image.
    Gzip,
}

/// A digest with its algorithm.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Digest {
    /// Hash algorithm.
    pub algorithm: DigestAlgorithm,
    /// Lower-case hex value.
    pub hex: String,
}

/// Supported hash algorithms for whole images.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum DigestAlgorithm {
    /// SHA-256 (64 hex digits).
    Sha256,
    /// SHA-512 (128 hex digits).
    Sha512,
}

impl DigestAlgorithm {
    /// Number of hex digits in a digest of this algorithm.
    pub fn hex_len(self) -> usize {
        match self {
            DigestAlgorithm::Sha256 => 64,
            DigestAlgorithm::Sha512 => 128,
        }
    }
}

/// Per-chunk SHA-256 digests of the raw image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ChunkManifest {
    /// The image digest (of the file at the URL) these chunks were computed from.
    pub image_digest: Digest,
    /// Size of the raw image in bytes (what lands on disk).
    pub raw_size_bytes: u64,
    /// Chunk size in bytes; every chunk but the last is exactly this long.
    pub chunk_size: u64,
    /// Lower-case hex SHA-256 of each chunk, in order.
    pub sha256: Vec<String>,
    /// Indices (ascending) of the chunks whose raw bytes are all zero; each one's `sha256`
    /// is that of zeros, so the flag cannot lie without the digest lying too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zero_chunks: Vec<u64>,
}

/// Root device hints: every hint given must match.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RootDeviceHints {
    /// Exact serial number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// Exact WWN.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wwn: Option<String>,
    /// Exact model string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Smallest acceptable size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_size_bytes: Option<u64>,
    /// Largest acceptable size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_size_bytes: Option<u64>,
    /// Exact `/dev/disk/by-path` link name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by_path: Option<String>,
}

/// The NoCloud seed: three documents and where to put them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CloudInitSeed {
    /// The `meta-data` document (YAML).
    pub meta_data: String,
    /// The `user-data` document (`#cloud-config` YAML).
    pub user_data: String,
    /// The `network-config` document (YAML), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_config: Option<String>,
    /// Where the `cidata` volume goes.
    #[serde(default)]
    pub volume: SeedVolume,
}

/// Where and how the `cidata` volume is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum SeedVolume {
    /// A new FAT partition appended after the image's partitions.
    #[default]
    VfatPartition,
    /// A new ISO 9660 partition appended after the image's partitions.
    Iso9660Partition,
}

/// A plan that contradicts itself.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid deploy plan: {field}: {message}")]
pub struct PlanError {
    /// The offending field, in JSON path form.
    pub field: &'static str,
    /// What is wrong with it.
    pub message: String,
}

fn plan_error(field: &'static str, message: impl Into<String>) -> PlanError {
    PlanError { field, message: message.into() }
}

fn check_hex(field: &'static str, hex: &str, len: usize) -> Result<(), PlanError> {
    if hex.len() == len && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        Ok(())
    } else {
        Err(plan_error(field, format!("must be {len} lower-case hex digits")))
    }
}

impl Digest {
    fn validate(&self, field: &'static str) -> Result<(), PlanError> {
        check_hex(field, &self.hex, self.algorithm.hex_len())
    }
}

impl ChunkManifest {
    /// Number of chunks a raw image of `raw_size` bytes has at `chunk_size`.
    pub fn chunk_count(raw_size: u64, chunk_size: u64) -> u64 {
        raw_size.div_ceil(chunk_size)
    }

    /// Length of chunk `index` (the last one may be short).
    pub fn chunk_len(&self, index: u64) -> u64 {
        let start = index.saturating_mul(self.chunk_size);
        self.raw_size_bytes.saturating_sub(start).min(self.chunk_size)
    }

    /// Whether chunk `index` is marked all zero.
    pub fn is_zero_chunk(&self, index: u64) -> bool {
        self.zero_chunks.binary_search(&index).is_ok()
    }

    /// Checks `zero_chunks`: ascending, in range, and each digest that of zeros.
    fn validate_zero_chunks(&self) -> Result<(), PlanError> {
        const FIELD: &str = "chunks.zeroChunks";
        let count = self.sha256.len() as u64;
        // Two lengths occur (full chunks and a short last one): hash each once, when needed.
        let (full, short) = (std::cell::OnceCell::new(), std::cell::OnceCell::new());
        for (at, &index) in self.zero_chunks.iter().enumerate() {
            if at > 0 && index <= self.zero_chunks[at - 1] {
                return Err(plan_error(FIELD, "must be ascending, without repeats"));
            }
            if index >= count {
                return Err(plan_error(FIELD, format!("chunk {index} is past the last chunk ({count} chunks)")));
            }
            let len = self.chunk_len(index);
            let cell = if len == self.chunk_size { &full } else { &short };
            let zero = cell.get_or_init(|| zeros_sha256(len));
            if &self.sha256[usize::try_from(index).unwrap_or(usize::MAX)] != zero {
                return Err(plan_error(
                    FIELD,
                    format!("chunk {index} is marked zero but its sha256 is not that of zeros"),
                ));
            }
        }
        Ok(())
    }
}

/// The lower-case hex SHA-256 of `len` zero bytes.
fn zeros_sha256(len: u64) -> String {
    use sha2::Digest as _;
    let block = [0u8; 64 * 1024];
    let mut hasher = sha2::Sha256::new();
    let mut left = len;
    while left > 0 {
        let n = left.min(block.len() as u64);
        hasher.update(&block[..usize::try_from(n).unwrap_or(block.len())]);
        left -= n;
    }
    hex::encode(hasher.finalize())
}

impl ImageSource {
    /// Checks `frames` against the manifest: only a zstd file has them, one per chunk, none
    /// empty, and together shorter than the file (its seek table follows them).
    fn validate_frames(&self, manifest: &ChunkManifest) -> Result<(), PlanError> {
        const FIELD: &str = "image.frames";
        if self.frames.is_empty() {
            return Ok(());
        }
        if self.format != ImageFormat::Zstd {
            return Err(plan_error(FIELD, "only a zstd (seekable) image has frames"));
        }
        if self.frames.len() != manifest.sha256.len() {
            return Err(plan_error(
                FIELD,
                format!("has {} frames for {} chunks: one frame per chunk", self.frames.len(), manifest.sha256.len()),
            ));
        }
        if let Some(index) = self.frames.iter().position(|f| *f == 0) {
            return Err(plan_error(FIELD, format!("frame {index} is empty")));
        }
        let total = self.frames.iter().try_fold(0u64, |sum, f| sum.checked_add(*f));
        if total.is_none_or(|t| t >= self.size_bytes) {
            return Err(plan_error(FIELD, "the frames add up to the file's size or more (no room for the seek table)"));
        }
        Ok(())
    }
}

impl DeployPlan {
    /// DSSE payload type, when a plan travels signed.
    pub const PAYLOAD_TYPE: &'static str = "application/vnd.metal.deploy-plan+json";

    /// Checks that the plan is self-consistent: URL scheme, digest lengths, chunk size and
    /// count, the manifest bound to the image digest, zero chunks and frames, and hint
    /// ranges.
    pub fn validate(&self) -> Result<(), PlanError> {
        let url = &self.image.url;
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(plan_error("image.url", "must be an https:// (or explicitly allowed http://) URL"));
        }
        self.image.digest.validate("image.digest.hex")?;
        let m = &self.chunks;
        m.image_digest.validate("chunks.imageDigest.hex")?;
        if m.image_digest != self.image.digest {
            return Err(plan_error(
                "chunks.imageDigest",
                "does not match image.digest: the manifest belongs to another image",
            ));
        }
        if !CHUNK_SIZE_RANGE.contains(&m.chunk_size) || !m.chunk_size.is_power_of_two() {
            return Err(plan_error("chunks.chunkSize", "must be a power of two between 64 KiB and 256 MiB"));
        }
        if m.raw_size_bytes == 0 {
            return Err(plan_error("chunks.rawSizeBytes", "must be greater than zero"));
        }
        let expected = ChunkManifest::chunk_count(m.raw_size_bytes, m.chunk_size);
        if u64::try_from(m.sha256.len()).ok() != Some(expected) {
            return Err(plan_error(
                "chunks.sha256",
                format!(
                    "has {} digests, a {}-byte image in {}-byte chunks needs {expected}",
                    m.sha256.len(),
                    m.raw_size_bytes,
                    m.chunk_size
                ),
            ));
        }
        for digest in &m.sha256 {
            check_hex("chunks.sha256", digest, 64)?;
        }
        m.validate_zero_chunks()?;
        self.image.validate_frames(m)?;
        if self.image.format == ImageFormat::Raw && self.image.size_bytes != m.raw_size_bytes {
            return Err(plan_error("image.sizeBytes", "a raw image's size must equal chunks.rawSizeBytes"));
        }
        if let (Some(min), Some(max)) = (self.target.min_size_bytes, self.target.max_size_bytes)
            && min > max
        {
            return Err(plan_error("target.minSizeBytes", "is larger than target.maxSizeBytes"));
        }
        Ok(())
    }
}
