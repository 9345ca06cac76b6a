//! `metal-boot plan`: the deploy plan of an image file, as the controller computes it at image
//! import: the digest of the file as it will be served, its format (from its magic bytes),
//! the chunk manifest of the raw bytes that will land on disk (`metal_image::manifest`, zero
//! chunks marked), and, for a file in zstd's seekable format whose frames line up with the
//! chunks, the size of every frame.

use std::fs::File;
use std::io;
use std::path::Path;

use metal_image::seekable::{chunk_frames, read_seek_table, write_seekable};
use metal_protocol::deploy::{
    ChunkManifest, DeployPlan, DigestAlgorithm, ImageFormat, ImageSource, PlanError, RootDeviceHints,
};

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

fn io_error(path: &Path) -> impl Fn(io::Error) -> MakePlanError + '_ {
    move |source| MakePlanError::Io { path: path.display().to_string(), source }
}

/// The plan for the image at `path`, to be served at `url`.
pub fn make_plan(
    path: &Path,
    url: &str,
    chunk_size: u64,
    algorithm: DigestAlgorithm,
) -> Result<DeployPlan, MakePlanError> {
    let analysis = metal_image::manifest::analyze(File::open(path).map_err(io_error(path))?, chunk_size, algorithm)
        .map_err(io_error(path))?;
    let frames = match analysis.format {
        ImageFormat::Zstd => {
            let table = read_seek_table(&mut File::open(path).map_err(io_error(path))?).map_err(io_error(path))?;
            table.and_then(|entries| chunk_frames(&entries, &analysis.manifest)).unwrap_or_default()
        }
        _ => Vec::new(),
    };
    plan_of(url, analysis.size_bytes, analysis.format, frames, analysis.manifest)
}

/// The plan of a served file, checked.
fn plan_of(
    url: &str,
    size_bytes: u64,
    format: ImageFormat,
    frames: Vec<u64>,
    chunks: ChunkManifest,
) -> Result<DeployPlan, MakePlanError> {
    let digest = chunks.image_digest.clone();
    let image = ImageSource { url: url.to_owned(), size_bytes, format, digest, frames };
    let plan = DeployPlan { image, chunks, target: RootDeviceHints::default(), cloud_init: None };
    plan.validate()?;
    Ok(plan)
}

/// Converts the image at `input` (raw, gzip, zstd or xz) into zstd's seekable form at
/// `output`, one frame per `chunk_size` raw bytes at zstd `level`, and returns the plan of
/// the result, to be served at `url` (SHA-256).
pub fn make_seekable(
    input: &Path,
    output: &Path,
    url: &str,
    chunk_size: u64,
    level: i32,
) -> Result<DeployPlan, MakePlanError> {
    let source = File::open(input).map_err(io_error(input))?;
    let mut source = io::BufReader::with_capacity(1 << 20, source);
    let format = metal_image::format::sniff(&mut source).map_err(io_error(input))?;
    let raw = metal_image::format::decoder(format, source).map_err(io_error(input))?;
    let mut out = io::BufWriter::with_capacity(1 << 20, File::create(output).map_err(io_error(output))?);
    let written = write_seekable(raw, &mut out, chunk_size, level).map_err(io_error(output))?;
    out.into_inner().map_err(|e| io_error(output)(e.into_error()))?.sync_all().map_err(io_error(output))?;
    plan_of(url, written.served_size, ImageFormat::Zstd, written.frames, written.manifest)
}
