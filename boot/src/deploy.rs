//! The deploy pipeline, the path a tenant's data rides on: stream -> whole-image digest ->
//! decompress -> cut into the manifest's chunks -> verify each chunk (hashers in parallel)
//! -> write in order with direct I/O. A seekable image (the plan has `image.frames`: one
//! zstd frame per chunk) takes the parallel path instead: the reader cuts the stream into
//! frames, decompressing threads turn each into exactly its chunk and verify it, and writer
//! threads put chunks at their offsets with several writes in flight. A manifest zero chunk
//! is verified by checking it is all zero (`validate` tied the flag to its digest); on the
//! frames path its frame is not even decoded, since what goes to the disk is the manifest's
//! zeros, not the served bytes. Nor is the served file's digest recomputed there: the SHA-256
//! of every raw chunk already covers each byte written, and the served file is only an
//! encoding of them (its size is still checked, so a stream that is too long fails).
//!
//! The first MiB (partition table, boot sector) is held back and written last, after every
//! chunk and the whole-image digest checked out; before anything is written the first and
//! last MiB of the disk are zeroed, so a deploy that fails at any point leaves a disk
//! nothing will boot.
//!
//! Memory is bounded by the chunks in flight: at most 256 MiB whatever the image size.

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use metal_erase::io::{AlignedBuf, Target};
use metal_image::digest::{HashingReader, chunk_sha256, is_zero};
use metal_image::format;
use metal_image::manifest::read_full;
use metal_image::seekable::{FrameDecoder, frame_bound};
use metal_protocol::deploy::{ChunkManifest, DeployPlan, ImageFormat, PlanError};

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
    /// Hashing threads, which also decompress on the frames path (0: one per CPU, at most 8).
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
    /// A frame of a seekable image does not decompress to exactly its chunk: nothing of it
    /// was written.
    #[error("chunk {index}: its zstd frame (served bytes {start}..{end}) {problem}")]
    Frame {
        /// Chunk index.
        index: u64,
        /// The frame's first byte in the served file.
        start: u64,
        /// One past its last byte.
        end: u64,
        /// What is wrong with it.
        problem: String,
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

/// What streaming the image left for the last steps: the held-back head, bytes written,
/// zero chunks skipped.
struct Streamed {
    held: Vec<u8>,
    written: u64,
    skipped: u64,
}

/// Checks the stream's magic bytes against the plan's format.
fn check_format(input: &mut impl BufRead, plan: &DeployPlan) -> Result<ImageFormat, DeployError> {
    let found = format::sniff(input).map_err(DeployError::Source)?;
    if found == plan.image.format { Ok(found) } else { Err(DeployError::Format { plan: plan.image.format, found }) }
}

/// Reads the rest of the served stream and checks its size and whole-file digest.
fn check_served<R: Read>(served: HashingReader<R>, plan: &DeployPlan) -> Result<(), DeployError> {
    let (digest, size) = served.finish().map_err(DeployError::Source)?;
    check_served_size(size, plan)?;
    if digest != plan.image.digest {
        return Err(DeployError::Image { what: "digest", expected: plan.image.digest.hex.clone(), found: digest.hex });
    }
    Ok(())
}

/// Checks the served stream's size against the plan.
fn check_served_size(size: u64, plan: &DeployPlan) -> Result<(), DeployError> {
    if size != plan.image.size_bytes {
        return Err(DeployError::Image {
            what: "size",
            expected: plan.image.size_bytes.to_string(),
            found: size.to_string(),
        });
    }
    Ok(())
}

/// Whether `bytes` are chunk `index`: all zero for a manifest zero chunk (`validate` tied
/// the flag to the chunk's digest), else its SHA-256.
fn chunk_matches(manifest: &ChunkManifest, index: u64, bytes: &[u8]) -> bool {
    if manifest.is_zero_chunk(index) {
        is_zero(bytes)
    } else {
        usize::try_from(index).ok().and_then(|i| manifest.sha256.get(i)).is_some_and(|d| *d == chunk_sha256(bytes))
    }
}

/// Checks chunk `index` against the manifest.
fn verify_chunk(manifest: &ChunkManifest, index: u64, bytes: &[u8]) -> Result<(), DeployError> {
    if chunk_matches(manifest, index, bytes) {
        return Ok(());
    }
    let offset = index * manifest.chunk_size;
    Err(DeployError::Chunk {
        index,
        offset,
        end: offset + bytes.len() as u64,
        expected: usize::try_from(index).ok().and_then(|i| manifest.sha256.get(i)).cloned().unwrap_or_default(),
        found: chunk_sha256(bytes),
    })
}

/// How many leading bytes of a `len`-byte chunk at `offset` lie in the held-back head.
fn head_part(offset: u64, len: usize) -> usize {
    usize::try_from(HELD_BACK.saturating_sub(offset)).unwrap_or(usize::MAX).min(len)
}

/// Copies the part of a verified chunk at `offset` that lies in the held-back head into
/// `held`; returns how many leading bytes of the chunk that was.
fn hold_back(held: &mut [u8], offset: u64, bytes: &[u8]) -> usize {
    let cut = head_part(offset, bytes.len());
    if cut > 0 {
        let start = usize::try_from(offset).unwrap_or(0);
        held[start..start + cut].copy_from_slice(&bytes[..cut]);
    }
    cut
}

/// Whether the verified rest of a chunk need not be written: the target reads zero and so
/// does the chunk.
fn skippable(options: &DeployOptions, rest: &[u8]) -> bool {
    options.target_zeroed && is_zero(rest)
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
        let found = check_format(&mut input, &plan)?;
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
        check_served(served, &plan)
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
                let check = verify_chunk(&manifest, chunk.index, &chunk.bytes);
                if verified.send((chunk, check)).is_err() {
                    return;
                }
            }
        });
    }
}

/// Hashing (or, with frames, decompressing) threads: one per CPU, at most 8, unless set.
fn workers(options: &DeployOptions) -> usize {
    match options.hashers {
        0 => std::thread::available_parallelism().map_or(2, |n| n.get()).min(8),
        n => n,
    }
}

/// Streams the image, decompresses it and verifies every chunk; the chunks outside the head
/// are written in order as they check out.
fn sequential(
    plan: &DeployPlan,
    stream: Box<dyn Read + Send>,
    target: &dyn Target,
    options: &DeployOptions,
    scratch: &mut AlignedBuf,
) -> Result<Streamed, DeployError> {
    let manifest = &plan.chunks;
    let hashers = workers(options);
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

    let mut held = vec![0u8; usize::try_from(HELD_BACK.min(manifest.raw_size_bytes)).unwrap_or(0)];
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
            let cut = hold_back(&mut held, offset, &chunk.bytes);
            let rest = &chunk.bytes[cut..];
            if !rest.is_empty() {
                if skippable(options, rest) {
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
    Ok(Streamed { held, written, skipped })
}

/// Positioned writes in flight at once on the frames path.
const WRITERS: usize = 4;

/// A frame as served, cut from the stream.
struct Frame {
    index: u64,
    /// Its first byte in the served file.
    start: u64,
    bytes: Vec<u8>,
}

/// A verified chunk on its way to the disk.
struct Ready {
    index: u64,
    /// Raw length.
    len: usize,
    /// Leading bytes held back (the head).
    cut: usize,
    /// The decompressed chunk, or none for a manifest zero chunk (written from the shared
    /// zeros).
    buf: Option<AlignedBuf>,
}

/// What the threads of the frames path share: the first failure (which stops them all),
/// the held-back head and the counts.
struct Framed<'a> {
    plan: &'a DeployPlan,
    target: &'a dyn Target,
    options: &'a DeployOptions,
    failure: Mutex<Option<DeployError>>,
    failed: AtomicBool,
    held: Mutex<Vec<u8>>,
    /// One chunk of zeros, block-padded: what a manifest zero chunk writes.
    zeros: AlignedBuf,
    written: AtomicU64,
    skipped: AtomicU64,
    /// Chunks verified and written or skipped.
    done: AtomicU64,
}

impl Framed<'_> {
    fn fail(&self, error: DeployError) {
        if let Ok(mut first) = self.failure.lock() {
            first.get_or_insert(error);
        }
        self.failed.store(true, Ordering::SeqCst);
    }

    fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Reads the stream, cuts it into the plan's frames and hands them on; then checks the
    /// whole file's size.
    fn read(&self, stream: Box<dyn Read + Send>, frames: SyncSender<Frame>, free: Receiver<Vec<u8>>) {
        if let Err(e) = self.read_frames(stream, frames, free) {
            self.fail(e);
        }
    }

    fn read_frames(
        &self,
        stream: Box<dyn Read + Send>,
        frames: SyncSender<Frame>,
        free: Receiver<Vec<u8>>,
    ) -> Result<(), DeployError> {
        let plan = self.plan;
        let mut input = BufReader::with_capacity(1 << 20, stream);
        check_format(&mut input, plan)?;
        let mut start = 0u64;
        for (index, &size) in (0u64..).zip(&plan.image.frames) {
            let end = start + size;
            let bound = frame_bound(plan.chunks.chunk_len(index));
            if size > bound {
                let problem = format!("is larger than any zstd frame of its chunk can be ({bound} bytes)");
                return Err(DeployError::Frame { index, start, end, problem });
            }
            if self.failed() {
                return Ok(());
            }
            let Ok(mut bytes) = free.recv() else { return Ok(()) }; // the decompressors stopped
            bytes.resize(usize::try_from(size).unwrap_or(usize::MAX), 0);
            let n = read_full(&mut input, &mut bytes).map_err(DeployError::Source)?;
            if n < bytes.len() {
                let found = (start + n as u64).to_string();
                return Err(DeployError::Image { what: "size", expected: plan.image.size_bytes.to_string(), found });
            }
            if frames.send(Frame { index, start, bytes }).is_err() {
                return Ok(());
            }
            start = end;
        }
        let rest = io::copy(&mut input, &mut io::sink()).map_err(DeployError::Source)?;
        check_served_size(start + rest, plan)
    }

    /// Decompresses frames into chunks, verifies them, keeps the head back and hands the
    /// rest to the writers.
    fn decompress(
        &self,
        frames: &Mutex<Receiver<Frame>>,
        recycle: SyncSender<Vec<u8>>,
        pool: &Mutex<Receiver<AlignedBuf>>,
        back: SyncSender<AlignedBuf>,
        ready: SyncSender<Ready>,
    ) {
        let manifest = &self.plan.chunks;
        let mut decoder = match FrameDecoder::new() {
            Ok(d) => d,
            Err(e) => return self.fail(DeployError::Source(e)),
        };
        while !self.failed() {
            let Ok(Ok(frame)) = frames.lock().map(|rx| rx.recv()) else { return };
            let (index, start) = (frame.index, frame.start);
            let len = usize::try_from(manifest.chunk_len(index)).unwrap_or(0);
            if manifest.is_zero_chunk(index) {
                let _ = recycle.send(frame.bytes);
                // The held-back head starts zeroed, so only its length matters here.
                let cut = head_part(index * manifest.chunk_size, len);
                if !self.pass_on(Ready { index, len, cut, buf: None }, &back, &ready) {
                    return;
                }
                continue;
            }
            let Ok(Ok(mut buf)) = pool.lock().map(|rx| rx.recv()) else { return };
            let decoded = decoder.decode(&frame.bytes, &mut buf[..len]);
            let end = start + frame.bytes.len() as u64;
            let _ = recycle.send(frame.bytes);
            let checked = match decoded {
                Ok(n) if n == len => verify_chunk(manifest, index, &buf[..len]),
                Ok(n) => {
                    let problem = format!("decompresses to {n} bytes, its chunk has {len}");
                    Err(DeployError::Frame { index, start, end, problem })
                }
                Err(e) => {
                    let problem = format!("does not decompress into its {len}-byte chunk: {e}");
                    Err(DeployError::Frame { index, start, end, problem })
                }
            };
            if let Err(e) = checked {
                let _ = back.send(buf);
                return self.fail(e);
            }
            let offset = index * manifest.chunk_size;
            let cut = match self.held.lock() {
                Ok(mut held) => hold_back(&mut held, offset, &buf[..len]),
                Err(_) => return self.fail(DeployError::Source(io::Error::other("a deploy thread panicked"))),
            };
            if !self.pass_on(Ready { index, len, cut, buf: Some(buf) }, &back, &ready) {
                return;
            }
        }
    }

    /// Hands a verified chunk to the writers, or counts it done when nothing of it is left
    /// to write (all held back, or zeros onto a zeroed target). False when the writers are
    /// gone.
    fn pass_on(&self, chunk: Ready, back: &SyncSender<AlignedBuf>, ready: &SyncSender<Ready>) -> bool {
        let rest = match &chunk.buf {
            Some(buf) => &buf[chunk.cut..chunk.len],
            None => &self.zeros[chunk.cut..chunk.len],
        };
        if !rest.is_empty() && !skippable(self.options, rest) {
            return ready.send(chunk).is_ok();
        }
        if !rest.is_empty() {
            self.skipped.fetch_add(1, Ordering::SeqCst);
        }
        self.done.fetch_add(1, Ordering::SeqCst);
        if let Some(buf) = chunk.buf {
            let _ = back.send(buf);
        }
        true
    }

    /// Writes verified chunks at their offsets, several at once. Keeps draining after a
    /// failure (writing nothing more) so every buffer goes back to the pool.
    fn write(&self, ready: &Mutex<Receiver<Ready>>, back: SyncSender<AlignedBuf>) {
        let block = self.target.block_size() as usize;
        let chunk_size = self.plan.chunks.chunk_size;
        while let Ok(Ok(Ready { index, len, cut, mut buf })) = ready.lock().map(|rx| rx.recv()) {
            if !self.failed() {
                let padded = len.div_ceil(block) * block;
                let bytes = match &mut buf {
                    Some(buf) => {
                        buf[len..padded].fill(0);
                        &buf[cut..padded]
                    }
                    None => &self.zeros[cut..padded],
                };
                match self.target.write_at(bytes, index * chunk_size + cut as u64) {
                    Ok(()) => {
                        self.written.fetch_add((len - cut) as u64, Ordering::SeqCst);
                        self.done.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => self.fail(disk(format!("writing chunk {index}"))(e)),
                }
            }
            if let Some(buf) = buf {
                let _ = back.send(buf);
            }
        }
    }
}

/// Streams a seekable image: the reader cuts the served bytes into the plan's frames,
/// decompressing threads turn each into exactly its chunk and verify it, writer threads put
/// it at its offset with several writes in flight. The head is held back as on the
/// sequential path.
fn framed(
    plan: &DeployPlan,
    stream: Box<dyn Read + Send>,
    target: &dyn Target,
    options: &DeployOptions,
) -> Result<Streamed, DeployError> {
    let manifest = &plan.chunks;
    let decompressors = workers(options);
    // Half the budget for raw chunks, half for frames; at least two of each (`run` takes
    // this path only when four chunks fit in the budget).
    let per_kind = usize::try_from(MEMORY_BUDGET / 2 / manifest.chunk_size).unwrap_or(2).max(2);
    let chunk_len = usize::try_from(manifest.chunk_size).unwrap_or(0);
    let (back, pool) = sync_channel::<AlignedBuf>(per_kind.min(decompressors + WRITERS + 2));
    for _ in 0..per_kind.min(decompressors + WRITERS + 2) {
        let _ = back.send(AlignedBuf::new(chunk_len));
    }
    let (recycle, free) = sync_channel::<Vec<u8>>(per_kind.min(decompressors + 2));
    for _ in 0..per_kind.min(decompressors + 2) {
        let _ = recycle.send(Vec::new());
    }
    let (frame_tx, frame_rx) = sync_channel::<Frame>(decompressors);
    let (ready_tx, ready_rx) = sync_channel::<Ready>(WRITERS);
    // The decompressors own the frames' receiving end: when the last one stops, the reader's
    // next send fails and it stops too.
    let frame_rx = Arc::new(Mutex::new(frame_rx));
    let (pool, ready_rx) = (Mutex::new(pool), Mutex::new(ready_rx));
    let shared = Framed {
        plan,
        target,
        options,
        failure: Mutex::new(None),
        failed: AtomicBool::new(false),
        held: Mutex::new(vec![0u8; usize::try_from(HELD_BACK.min(manifest.raw_size_bytes)).unwrap_or(0)]),
        zeros: AlignedBuf::new(chunk_len),
        written: AtomicU64::new(0),
        skipped: AtomicU64::new(0),
        done: AtomicU64::new(0),
    };
    std::thread::scope(|scope| {
        let shared = &shared;
        scope.spawn(move || shared.read(stream, frame_tx, free));
        for _ in 0..decompressors {
            let (frame_rx, recycle, back, ready_tx) =
                (frame_rx.clone(), recycle.clone(), back.clone(), ready_tx.clone());
            let pool = &pool;
            scope.spawn(move || shared.decompress(&frame_rx, recycle, pool, back, ready_tx));
        }
        for _ in 0..WRITERS {
            let (back, ready_rx) = (back.clone(), &ready_rx);
            scope.spawn(move || shared.write(ready_rx, back));
        }
        // Only the threads hold channel ends now: when the decompressors stop, the writers'
        // queue closes.
        drop((frame_rx, recycle, back, ready_tx));
    });
    let Framed { failure, held, written, skipped, done, .. } = shared;
    if let Some(e) = failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let done = done.into_inner();
    if done < manifest.sha256.len() as u64 {
        return Err(DeployError::Truncated { expected: manifest.raw_size_bytes, got: done * manifest.chunk_size });
    }
    Ok(Streamed {
        held: held.into_inner().unwrap_or_else(|p| p.into_inner()),
        written: written.into_inner(),
        skipped: skipped.into_inner(),
    })
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
    // Frames are decompressed in parallel when the plan has them and four chunks (two raw,
    // two compressed) fit the memory budget; else the stream is decoded in order.
    let streamed = if !plan.image.frames.is_empty() && manifest.chunk_size * 4 <= MEMORY_BUDGET {
        framed(plan, stream, target, options)?
    } else {
        sequential(plan, stream, target, options, scratch)?
    };
    let Streamed { mut held, mut written, skipped } = streamed;
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
    for index in 0..manifest.sha256.len() as u64 {
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
        if !chunk_matches(manifest, index, &buf[..usize::try_from(len).unwrap_or(0)]) {
            return Err(DeployError::ReadBack { index, offset, end: offset + len });
        }
    }
    Ok(())
}
