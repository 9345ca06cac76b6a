//! zstd's seekable format (facebook/zstd `contrib/seekable_format`), the form the controller
//! stores and serves an image in: one independent zstd frame per deploy-plan chunk (each
//! decompresses to exactly one chunk of raw bytes and carries its content size), then the
//! seek table in a skippable frame. Any zstd decoder still reads the file as one stream (it
//! skips skippable frames); the ramdisk cuts it into frames by the plan's `frames` sizes and
//! decompresses them in parallel.
//!
//! Seek table: `0x184D2A5E` (skippable frame magic, u32 LE), the frame size (u32 LE), one
//! entry per frame {compressed size u32 LE, decompressed size u32 LE, optional checksum u32
//! LE}, then the footer {number of frames u32 LE, descriptor byte (bit 7: checksums present,
//! bits 2-6 reserved, zero), `0x8F92EAB1` u32 LE}. This writer stores no checksums; the
//! manifest's SHA-256 covers every chunk.

use std::collections::BTreeMap;
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::sync::Mutex;
use std::sync::mpsc::sync_channel;

use metal_protocol::deploy::{CHUNK_SIZE_RANGE, ChunkManifest, Digest, DigestAlgorithm};

use crate::digest::Hasher;
use crate::manifest::{ChunkDigest, ManifestBuilder, read_full};

/// The magic number of the skippable frame that holds the seek table.
pub const SKIPPABLE_MAGIC: u32 = 0x184D_2A5E;
/// The magic number that ends a seekable file.
pub const SEEKABLE_MAGIC: u32 = 0x8F92_EAB1;
/// Skippable frame header: magic and frame size.
const HEADER_LEN: u64 = 8;
/// Footer: number of frames, descriptor, seekable magic.
const FOOTER_LEN: u64 = 9;
/// Descriptor bit 7: every entry carries a checksum.
const CHECKSUM_FLAG: u8 = 0x80;
/// Descriptor bits 2-6, reserved.
const RESERVED_BITS: u8 = 0x7c;
/// Raw bytes in flight while compressing (at least two chunks whatever the chunk size).
const IN_FLIGHT_BYTES: u64 = 256 << 20;

/// One frame of a seek table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameEntry {
    /// Bytes of the frame in the file.
    pub compressed_size: u32,
    /// Bytes it decompresses to.
    pub decompressed_size: u32,
    /// The low 32 bits of the XXH64 of the decompressed bytes, when the table has them.
    pub checksum: Option<u32>,
}

/// What [`write_seekable`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seekable {
    /// SHA-256 of every byte written (the file as it will be served).
    pub served: Digest,
    /// Bytes written.
    pub served_size: u64,
    /// The manifest of the raw bytes; its `image_digest` is `served`.
    pub manifest: ChunkManifest,
    /// Compressed size of each frame, one per chunk (the plan's `image.frames`).
    pub frames: Vec<u64>,
}

fn invalid(message: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.into())
}

/// A writer that hashes and counts what passes through it.
struct HashingWriter<W> {
    inner: W,
    hasher: Hasher,
    count: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A chunk on its way through a compressing thread, with the buffers it travels in.
struct Job {
    index: u64,
    raw: Vec<u8>,
    frame: Vec<u8>,
}

/// A compressed chunk.
struct Done {
    job: Job,
    digest: ChunkDigest,
}

/// Reads `raw` to its end and writes it to `out` in the seekable format: one independent
/// zstd frame (at `level`, with its content size) per `chunk_size` bytes, compressed on every
/// CPU with a few chunks in flight, then the seek table. `chunk_size` must be a valid plan
/// chunk size (a power of two, 64 KiB to 256 MiB).
pub fn write_seekable<R: Read, W: Write>(mut raw: R, out: W, chunk_size: u64, level: i32) -> io::Result<Seekable> {
    if !CHUNK_SIZE_RANGE.contains(&chunk_size) || !chunk_size.is_power_of_two() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("chunk size {chunk_size}: must be a power of two between 64 KiB and 256 MiB"),
        ));
    }
    let len = usize::try_from(chunk_size).map_err(|_| invalid("the chunk size does not fit in memory"))?;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let in_flight = usize::try_from((IN_FLIGHT_BYTES / chunk_size).clamp(2, 2 * threads as u64 + 2)).unwrap_or(2);
    let mut out = HashingWriter { inner: out, hasher: Hasher::new(DigestAlgorithm::Sha256), count: 0 };
    let mut builder = ManifestBuilder::new(chunk_size);
    let mut entries = Vec::new();
    let (job_tx, job_rx) = sync_channel::<Job>(in_flight);
    let (done_tx, done_rx) = sync_channel::<io::Result<Done>>(in_flight);
    let job_rx = Mutex::new(job_rx);
    std::thread::scope(|scope| -> io::Result<()> {
        // Both ends the calling thread holds go when it returns, early or not, which ends
        // every compressing thread (blocked on a job or on handing one back).
        let (job_tx, done_rx, job_rx) = (job_tx, done_rx, &job_rx);
        for _ in 0..threads {
            let done_tx = done_tx.clone();
            scope.spawn(move || {
                let mut compressor = match zstd::bulk::Compressor::new(level)
                    .and_then(|mut c| c.set_parameter(zstd::zstd_safe::CParameter::ContentSizeFlag(true)).map(|()| c))
                {
                    Ok(c) => c,
                    Err(e) => return drop(done_tx.send(Err(e))),
                };
                loop {
                    let next = job_rx.lock().map(|rx| rx.recv());
                    let Ok(Ok(mut job)) = next else { return };
                    job.frame.clear();
                    job.frame.reserve(zstd::zstd_safe::compress_bound(job.raw.len()));
                    let done = compressor
                        .compress_to_buffer(&job.raw, &mut job.frame)
                        .map(|_| Done { digest: ChunkDigest::of(&job.raw), job });
                    if done_tx.send(done).is_err() {
                        return;
                    }
                }
            });
        }
        drop(done_tx);
        let mut free: Vec<Job> =
            (0..in_flight).map(|_| Job { index: 0, raw: Vec::with_capacity(len), frame: Vec::new() }).collect();
        let mut pending = BTreeMap::new();
        let (mut sent, mut written, mut eof) = (0u64, 0u64, false);
        loop {
            while !eof && let Some(mut job) = free.pop() {
                job.raw.resize(len, 0);
                let n = read_full(&mut raw, &mut job.raw)?;
                eof = n < len;
                if n == 0 {
                    free.push(job);
                    break;
                }
                job.raw.truncate(n);
                job.index = sent;
                job_tx.send(job).map_err(|_| io::Error::other("the compressing threads stopped"))?;
                sent += 1;
            }
            if written == sent {
                return Ok(());
            }
            let done = done_rx.recv().map_err(|_| io::Error::other("the compressing threads stopped"))??;
            pending.insert(done.job.index, done);
            while let Some(done) = pending.remove(&written) {
                out.write_all(&done.job.frame)?;
                let size = |n: usize| u32::try_from(n).map_err(|_| invalid(format!("frame {written} is over 4 GiB")));
                entries.push(FrameEntry {
                    compressed_size: size(done.job.frame.len())?,
                    decompressed_size: size(done.job.raw.len())?,
                    checksum: None,
                });
                builder.push(done.digest);
                free.push(done.job);
                written += 1;
            }
        }
    })?;
    out.write_all(&seek_table(&entries))?;
    out.flush()?;
    let served = out.hasher.finish();
    let frames = entries.iter().map(|e| u64::from(e.compressed_size)).collect();
    Ok(Seekable { served: served.clone(), served_size: out.count, manifest: builder.finish(served), frames })
}

/// The seek table (a skippable frame) for `entries`, with checksums when every entry has one.
pub fn seek_table(entries: &[FrameEntry]) -> Vec<u8> {
    let checksums = !entries.is_empty() && entries.iter().all(|e| e.checksum.is_some());
    let mut table = Vec::with_capacity(entries.len() * 12 + 17);
    table.extend_from_slice(&SKIPPABLE_MAGIC.to_le_bytes());
    table.extend_from_slice(&[0; 4]); // the frame size, below
    for entry in entries {
        table.extend_from_slice(&entry.compressed_size.to_le_bytes());
        table.extend_from_slice(&entry.decompressed_size.to_le_bytes());
        if let (true, Some(checksum)) = (checksums, entry.checksum) {
            table.extend_from_slice(&checksum.to_le_bytes());
        }
    }
    let count = u32::try_from(entries.len()).unwrap_or(u32::MAX);
    table.extend_from_slice(&count.to_le_bytes());
    table.push(if checksums { CHECKSUM_FLAG } else { 0 });
    table.extend_from_slice(&SEEKABLE_MAGIC.to_le_bytes());
    let frame_size = u32::try_from(table.len() as u64 - HEADER_LEN).unwrap_or(u32::MAX);
    table[4..8].copy_from_slice(&frame_size.to_le_bytes());
    table
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The seek table at the end of `file`; `None` when the file does not end in one (it is not
/// in the seekable format). A file that ends in the seekable magic number but whose table
/// does not hold up (reserved bits set, a frame count the file cannot hold, a bad skippable
/// frame header, an empty frame, frames that do not add up to the bytes before the table)
/// is an `InvalidData` error. Memory grows with the entries actually read, never with the
/// count the footer claims.
pub fn read_seek_table(file: &mut (impl Read + Seek)) -> io::Result<Option<Vec<FrameEntry>>> {
    let len = file.seek(SeekFrom::End(0))?;
    if len < HEADER_LEN + FOOTER_LEN {
        return Ok(None);
    }
    file.seek(SeekFrom::Start(len - FOOTER_LEN))?;
    let mut footer = [0u8; 9];
    file.read_exact(&mut footer)?;
    if u32_at(&footer, 5) != SEEKABLE_MAGIC {
        return Ok(None);
    }
    let count = u64::from(u32_at(&footer, 0));
    let descriptor = footer[4];
    if descriptor & RESERVED_BITS != 0 {
        return Err(invalid(format!("seek table descriptor {descriptor:#04x} has reserved bits set")));
    }
    let checksums = descriptor & CHECKSUM_FLAG != 0;
    let entry_len: u64 = if checksums { 12 } else { 8 };
    let table_len = HEADER_LEN + count * entry_len + FOOTER_LEN;
    if table_len > len {
        return Err(invalid(format!("the seek table lists {count} frames, more than the {len}-byte file holds")));
    }
    let start = len - table_len;
    file.seek(SeekFrom::Start(start))?;
    let mut header = [0u8; 8];
    file.read_exact(&mut header)?;
    if u32_at(&header, 0) != SKIPPABLE_MAGIC || u64::from(u32_at(&header, 4)) != table_len - HEADER_LEN {
        return Err(invalid(format!("no seek table frame header at byte {start} for {count} frames")));
    }
    let mut input = BufReader::new(file.by_ref().take(count * entry_len));
    let mut entries = Vec::with_capacity(usize::try_from(count.min(1 << 16)).unwrap_or(0));
    let mut compressed = 0u64;
    let mut entry = [0u8; 12];
    for index in 0..count {
        let entry = &mut entry[..usize::try_from(entry_len).unwrap_or(12)];
        input.read_exact(entry)?;
        let frame = FrameEntry {
            compressed_size: u32_at(entry, 0),
            decompressed_size: u32_at(entry, 4),
            checksum: checksums.then(|| u32_at(entry, 8)),
        };
        if frame.compressed_size == 0 {
            return Err(invalid(format!("seek table frame {index} has no bytes")));
        }
        compressed += u64::from(frame.compressed_size);
        entries.push(frame);
    }
    if compressed != start {
        return Err(invalid(format!(
            "the seek table's frames add up to {compressed} bytes, the file has {start} before the table"
        )));
    }
    Ok(Some(entries))
}

/// The compressed size of each frame when `entries` line up with `manifest`'s chunks (one
/// frame per chunk, each decompressing to exactly its chunk's length); `None` otherwise.
pub fn chunk_frames(entries: &[FrameEntry], manifest: &ChunkManifest) -> Option<Vec<u64>> {
    let lined_up = entries.len() == manifest.sha256.len()
        && (0u64..).zip(entries).all(|(index, e)| u64::from(e.decompressed_size) == manifest.chunk_len(index));
    lined_up.then(|| entries.iter().map(|e| u64::from(e.compressed_size)).collect())
}

/// The largest zstd frame `raw_len` bytes can compress to (what a reader may buffer for
/// one frame before it refuses it).
pub fn frame_bound(raw_len: u64) -> u64 {
    usize::try_from(raw_len).map_or(u64::MAX, |len| zstd::zstd_safe::compress_bound(len) as u64)
}

/// Decompresses single frames into caller-provided buffers (a zstd context kept between
/// frames).
pub struct FrameDecoder(zstd::bulk::Decompressor<'static>);

impl std::fmt::Debug for FrameDecoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrameDecoder").finish_non_exhaustive()
    }
}

impl FrameDecoder {
    /// A decoder with a fresh context.
    pub fn new() -> io::Result<Self> {
        zstd::bulk::Decompressor::new().map(Self)
    }

    /// Decompresses `frame` (one or more whole frames) into `out`; returns the raw length.
    /// Output that would not fit in `out` is an error.
    pub fn decode(&mut self, frame: &[u8], out: &mut [u8]) -> io::Result<usize> {
        self.0.decompress_to_buffer(frame, out)
    }
}
