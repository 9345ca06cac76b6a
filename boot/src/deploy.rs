//! The deploy pipeline, the path a tenant's data rides on: stream -> whole-image digest ->
//! decompress -> cut into the manifest's chunks -> verify each chunk (hashers in parallel)
//! -> write in order with direct I/O. The first MiB (partition table, boot sector) is held
//! back and written last, after every chunk and the whole-image digest checked out; before
//! anything is written the first and last MiB of the disk are zeroed, so a deploy that
//! fails at any point leaves a disk nothing will boot.
//!
//! Memory is bounded by the chunks in flight: at most 256 MiB whatever the image size.

use std::collections::BTreeMap;
use std::io::{self, BufReader, Read};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use metal_erase::io::{AlignedBuf, Target};
use metal_protocol::deploy::{DeployPlan, PlanError};

use metal_image::digest::{HashingReader, chunk_sha256};
use metal_image::format;
use metal_image::manifest::read_full;

/// The bytes held back and written last.
pub const HELD_BACK: u64 = 1 << 20;
/// Upper bound of chunk memory in flight.
const MEMORY_BUDGET: u64 = 256 << 20;

/// How to deploy.
#[derive(Debug, Clone, Default)]
pub struct DeployOptions {
    /// The target is known to read zero everywhere (it was just erased): all-zero chunks
    /// are verified but not written.
    pub target_zeroed: bool,
    /// Read everything back after writing and check it against the manifest.
    pub read_back: bool,
    /// Hashing threads (0: one per CPU, at most 8).
    pub hashers: usize,
}

/// What a deploy did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DeployOutcome {
    /// Raw bytes of the image.
    pub raw_bytes: u64,
    /// Bytes written to the disk.
    pub bytes_written: u64,
    /// Chunks verified.
    pub chunks: u64,
    /// All-zero chunks not written (target known zeroed).
    pub chunks_skipped: u64,
    /// Whether everything was read back and checked.
    pub read_back: bool,
    /// Wall time.
    pub seconds: f64,
    /// The process's peak resident memory when the deploy ended.
    pub peak_memory_bytes: u64,
}

/// Why a deploy failed. The disk is left without a partition table or boot sector.
#[derive(Debug, thiserror::Error)]
pub enum DeployError {
    /// The plan itself is not valid.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// The image does not fit the disk.
    #[error("the {image}-byte image does not fit the {disk}-byte disk")]
    TooLarge {
        /// Raw image size.
        image: u64,
        /// Disk size.
        disk: u64,
    },
    /// The stream is not in the format the plan names.
    #[error("the image is {found:?} by its magic bytes, the plan says {plan:?}")]
    Format {
        /// What the plan says.
        plan: metal_protocol::deploy::ImageFormat,
        /// What the bytes say.
        found: metal_protocol::deploy::ImageFormat,
    },
    /// A chunk's bytes differ from the manifest: nothing of it was written.
    #[error("chunk {index} (bytes {offset}..{end}) fails its SHA-256: expected {expected}, got {found}")]
    Chunk {
        /// Chunk index.
        index: u64,
        /// First byte.
        offset: u64,
        /// One past the last byte.
        end: u64,
        /// Manifest digest.
        expected: String,
        /// Digest of what arrived.
        found: String,
    },
    /// The decompressed image is shorter than the manifest (a truncated stream).
    #[error("truncated image: {got} raw bytes, the manifest says {expected}")]
    Truncated {
        /// Manifest size.
        expected: u64,
        /// Bytes received.
        got: u64,
    },
    /// The decompressed image is longer than the manifest.
    #[error("the image is longer than the manifest's {expected} raw bytes")]
    TooLong {
        /// Manifest size.
        expected: u64,
    },
    /// The whole-image digest (or size) differs from the plan.
    #[error("the image's {what} differs from the plan: expected {expected}, got {found}")]
    Image {
        /// "digest" or "size".
        what: &'static str,
        /// The plan's value.
        expected: String,
        /// What arrived.
        found: String,
    },
    /// Reading the stream failed.
    #[error("reading the image: {0}")]
    Source(io::Error),
    /// Writing or reading the disk failed.
    #[error("{what}: {source}")]
    Disk {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
    /// The cloud-init seed cannot be written.
    #[error(transparent)]
    Seed(#[from] crate::seed::SeedError),
    /// What was written does not read back as the manifest says.
    #[error("read-back of chunk {index} (bytes {offset}..{end}) differs from the manifest")]
    ReadBack {
        /// Chunk index.
        index: u64,
        /// First byte.
        offset: u64,
        /// One past the last byte.
        end: u64,
    },
}

fn disk(what: impl Into<String>) -> impl FnOnce(io::Error) -> DeployError {
    let what = what.into();
    move |source| DeployError::Disk { what, source }
}

/// A raw chunk in flight.
struct Chunk {
    index: u64,
    bytes: Vec<u8>,
}

/// Writes `bytes` at `offset` through an aligned buffer, padding the tail with zeros to the
/// block size.
fn write_aligned(target: &dyn Target, scratch: &mut AlignedBuf, bytes: &[u8], offset: u64) -> io::Result<()> {
    let block = target.block_size() as usize;
    let mut done = 0;
    while done < bytes.len() {
        let n = (bytes.len() - done).min(scratch.len());
        let padded = n.div_ceil(block) * block;
        scratch[..n].copy_from_slice(&bytes[done..done + n]);
        scratch[n..padded].fill(0);
        target.write_at(&scratch[..padded], offset + done as u64)?;
        done += n;
    }
    Ok(())
}

/// Zeroes `len` bytes at `offset`.
fn zero(target: &dyn Target, scratch: &mut AlignedBuf, offset: u64, len: u64) -> io::Result<()> {
    let zeros = vec![0u8; usize::try_from(len).unwrap_or(0)];
    write_aligned(target, scratch, &zeros, offset)
}

/// Leaves the disk without a partition table or boot sector at either end.
fn make_unbootable(target: &dyn Target, scratch: &mut AlignedBuf) -> io::Result<()> {
    let size = target.size();
    let head = HELD_BACK.min(size);
    zero(target, scratch, 0, head)?;
    if size > head {
        let tail = HELD_BACK.min(size - head);
        zero(target, scratch, size - tail, tail)?;
    }
    target.sync()
}

/// Deploys `plan` from `stream` (the bytes at the plan's URL) onto `target`.
pub fn deploy(
    plan: &DeployPlan,
    stream: Box<dyn Read + Send>,
    target: &dyn Target,
    options: &DeployOptions,
) -> Result<DeployOutcome, DeployError> {
    plan.validate()?;
    let started = Instant::now();
    let manifest = &plan.chunks;
    let mut needed = manifest.raw_size_bytes;
    if let Some(seed) = &plan.cloud_init {
        crate::seed::check(seed)?;
        // The seed partition after the image, and room for a backup GPT at the end.
        needed = needed.div_ceil(HELD_BACK) * HELD_BACK + crate::seed::SEED_BYTES + HELD_BACK;
    }
    if needed > target.size() {
        return Err(DeployError::TooLarge { image: needed, disk: target.size() });
    }
    let mut scratch = AlignedBuf::new(4 << 20);
    make_unbootable(target, &mut scratch).map_err(disk("clearing the old partition table"))?;
    let result = run(plan, stream, target, options, &mut scratch);
    if result.is_err() {
        // Whatever happened, nothing bootable is left behind.
        let _ = make_unbootable(target, &mut scratch);
    }
    let (bytes_written, chunks_skipped, read_back) = result?;
    Ok(DeployOutcome {
        raw_bytes: manifest.raw_size_bytes,
        bytes_written,
        chunks: manifest.sha256.len() as u64,
        chunks_skipped,
        read_back,
        seconds: started.elapsed().as_secs_f64(),
        peak_memory_bytes: crate::sys::peak_rss_bytes(),
    })
}

/// Reads the stream into chunks on its own thread; the last message is the stream's verdict
/// (digest, size, exact raw length).
fn spawn_reader(
    plan: DeployPlan,
    stream: Box<dyn Read + Send>,
    chunks: SyncSender<Chunk>,
    free: Receiver<Vec<u8>>,
) -> std::thread::JoinHandle<Result<(), DeployError>> {
    std::thread::spawn(move || {
        let manifest = &plan.chunks;
        let mut served = HashingReader::new(stream, plan.image.digest.algorithm);
        let mut input = BufReader::with_capacity(1 << 20, &mut served);
        let found = format::sniff(&mut input).map_err(DeployError::Source)?;
        if found != plan.image.format {
            return Err(DeployError::Format { plan: plan.image.format, found });
        }
        let mut raw = format::decoder(found, input).map_err(DeployError::Source)?;
        let count = manifest.sha256.len() as u64;
        let mut got = 0u64;
        for index in 0..count {
            let len = usize::try_from(manifest.chunk_len(index)).unwrap_or(0);
            let Ok(mut bytes) = free.recv() else { return Ok(()) }; // the writer stopped
            bytes.resize(len, 0);
            let n = read_full(raw.as_mut(), &mut bytes).map_err(DeployError::Source)?;
            got += n as u64;
            if n < len {
                return Err(DeployError::Truncated { expected: manifest.raw_size_bytes, got });
            }
            if chunks.send(Chunk { index, bytes }).is_err() {
                return Ok(());
            }
        }
        if read_full(raw.as_mut(), &mut [0u8; 1]).map_err(DeployError::Source)? != 0 {
            return Err(DeployError::TooLong { expected: manifest.raw_size_bytes });
        }
        drop(raw);
        let (digest, size) = served.finish().map_err(DeployError::Source)?;
        if size != plan.image.size_bytes {
            return Err(DeployError::Image {
                what: "size",
                expected: plan.image.size_bytes.to_string(),
                found: size.to_string(),
            });
        }
        if digest != plan.image.digest {
            return Err(DeployError::Image {
                what: "digest",
                expected: plan.image.digest.hex.clone(),
                found: digest.hex,
            });
        }
        Ok(())
    })
}

type Verified = (Chunk, Result<(), DeployError>);

fn spawn_hashers(count: usize, plan: &DeployPlan, chunks: Receiver<Chunk>, verified: SyncSender<Verified>) {
    let chunks = Arc::new(Mutex::new(chunks));
    for _ in 0..count {
        let (chunks, verified, manifest) = (chunks.clone(), verified.clone(), plan.chunks.clone());
        std::thread::spawn(move || {
            loop {
                let next = chunks.lock().map(|rx| rx.recv());
                let Ok(Ok(chunk)) = next else { return };
                let found = chunk_sha256(&chunk.bytes);
                let expected = &manifest.sha256[usize::try_from(chunk.index).unwrap_or(usize::MAX)];
                let offset = chunk.index * manifest.chunk_size;
                let check = if &found == expected {
                    Ok(())
                } else {
                    Err(DeployError::Chunk {
                        index: chunk.index,
                        offset,
                        end: offset + chunk.bytes.len() as u64,
                        expected: expected.clone(),
                        found,
                    })
                };
                if verified.send((chunk, check)).is_err() {
                    return;
                }
            }
        });
    }
}

/// Returns (bytes written, chunks skipped, read back).
fn run(
    plan: &DeployPlan,
    stream: Box<dyn Read + Send>,
    target: &dyn Target,
    options: &DeployOptions,
    scratch: &mut AlignedBuf,
) -> Result<(u64, u64, bool), DeployError> {
    let manifest = &plan.chunks;
    let hashers = match options.hashers {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()).min(8),
        n => n,
    };
    // Buffers in flight: enough to keep every hasher busy, within the memory budget (one
    // 256 MiB chunk at a time at the largest chunk size).
    let in_flight =
        usize::try_from((MEMORY_BUDGET / manifest.chunk_size).clamp(1, 2 * hashers as u64 + 2)).unwrap_or(1);
    let (free_tx, free_rx) = sync_channel::<Vec<u8>>(in_flight);
    for _ in 0..in_flight {
        let _ = free_tx.send(Vec::with_capacity(usize::try_from(manifest.chunk_size).unwrap_or(0)));
    }
    let (chunk_tx, chunk_rx) = sync_channel::<Chunk>(in_flight);
    let (verified_tx, verified_rx) = sync_channel::<Verified>(in_flight);
    let reader = spawn_reader(plan.clone(), stream, chunk_tx, free_rx);
    spawn_hashers(hashers, plan, chunk_rx, verified_tx);

    let held_len = usize::try_from(HELD_BACK.min(manifest.raw_size_bytes)).unwrap_or(0);
    let mut held = vec![0u8; held_len];
    let mut pending: BTreeMap<u64, Chunk> = BTreeMap::new();
    let (mut next, mut written, mut skipped) = (0u64, 0u64, 0u64);
    let count = manifest.sha256.len() as u64;
    let mut failure = None;
    while next < count {
        let Ok((chunk, check)) = verified_rx.recv() else { break };
        if let Err(e) = check {
            failure = Some(e);
            break;
        }
        pending.insert(chunk.index, chunk);
        while let Some(chunk) = pending.remove(&next) {
            let offset = chunk.index * manifest.chunk_size;
            // The part inside the first MiB waits for the end.
            let cut = usize::try_from(HELD_BACK.saturating_sub(offset)).unwrap_or(usize::MAX).min(chunk.bytes.len());
            if cut > 0 {
                let start = usize::try_from(offset).unwrap_or(0);
                held[start..start + cut].copy_from_slice(&chunk.bytes[..cut]);
            }
            let rest = &chunk.bytes[cut..];
            if !rest.is_empty() {
                if options.target_zeroed && rest.iter().all(|b| *b == 0) {
                    skipped += 1;
                } else {
                    write_aligned(target, scratch, rest, offset + cut as u64)
                        .map_err(disk(format!("writing chunk {next}")))?;
                    written += rest.len() as u64;
                }
            }
            let _ = free_tx.send(chunk.bytes);
            next += 1;
        }
    }
    drop(verified_rx);
    drop(free_tx);
    let verdict =
        reader.join().unwrap_or_else(|_| Err(DeployError::Source(io::Error::other("the reader thread panicked"))));
    if let Some(e) = failure {
        return Err(e);
    }
    verdict?;
    if next < count {
        return Err(DeployError::Truncated { expected: manifest.raw_size_bytes, got: next * manifest.chunk_size });
    }
    // Everything checked out. The seed (and its partition, edited into the held-back table)
    // next, then the first MiB last.
    let original_head = held.clone();
    if let Some(seed) = &plan.cloud_init {
        let layout = crate::seed::add_partition(
            &mut held,
            manifest.raw_size_bytes,
            target.size(),
            u64::from(target.block_size()),
        )?;
        let volume = crate::seed::fat_volume(seed).map_err(disk("building the cloud-init seed"))?;
        write_aligned(target, scratch, &volume, layout.start).map_err(disk("writing the cloud-init seed"))?;
        written += volume.len() as u64;
        if let Some((offset, backup)) = &layout.backup {
            write_aligned(target, scratch, backup, *offset).map_err(disk("writing the backup GPT"))?;
        }
        tracing::info!(start = layout.start, bytes = volume.len(), "cloud-init seed written (partition cidata)");
    }
    target.sync().map_err(disk("syncing the image"))?;
    write_aligned(target, scratch, &held, 0).map_err(disk("writing the first MiB"))?;
    written += held.len() as u64;
    target.sync().map_err(disk("syncing the first MiB"))?;
    if options.read_back {
        read_back(plan, target, &original_head, &held)?;
    }
    Ok((written, skipped, options.read_back))
}

/// Reads the image back from the disk and checks every chunk against the manifest. The
/// first MiB must read back as `written_head` (the image's head, with the seed partition
/// when there is one); the manifest is checked with the image's own head, `image_head`.
fn read_back(
    plan: &DeployPlan,
    target: &dyn Target,
    image_head: &[u8],
    written_head: &[u8],
) -> Result<(), DeployError> {
    let manifest = &plan.chunks;
    let block = u64::from(target.block_size());
    let mut buf = AlignedBuf::new(usize::try_from(manifest.chunk_size.div_ceil(block) * block).unwrap_or(0));
    for (index, expected) in (0u64..).zip(&manifest.sha256) {
        let offset = index * manifest.chunk_size;
        let len = manifest.chunk_len(index);
        let aligned = usize::try_from(len.div_ceil(block) * block).unwrap_or(0);
        target.read_at(&mut buf[..aligned], offset).map_err(disk(format!("reading back chunk {index}")))?;
        // The part of this chunk inside the held-back head.
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(written_head.len());
        let end = usize::try_from(offset + len).unwrap_or(usize::MAX).min(written_head.len());
        if start < end {
            let at = start - usize::try_from(offset).unwrap_or(0);
            if buf[at..at + end - start] != written_head[start..end] {
                return Err(DeployError::ReadBack { index, offset, end: offset + len });
            }
            buf[at..at + end - start].copy_from_slice(&image_head[start..end]);
        }
        if &chunk_sha256(&buf[..usize::try_from(len).unwrap_or(0)]) != expected {
            return Err(DeployError::ReadBack { index, offset, end: offset + len });
        }
    }
    Ok(())
}
