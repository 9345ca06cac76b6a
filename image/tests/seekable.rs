//! zstd's seekable format as `write_seekable` writes it: the real `zstd` CLI decompresses it
//! whole, the seek table parses back and lines up with the chunks, every frame decodes alone
//! to exactly its chunk, the manifest is the raw file's (zero chunks marked), and a file
//! without a table, with a truncated or garbage tail, or with a hostile table is told apart.

use std::io::{Cursor, Write as _};
use std::process::Command;

use metal_image::digest::chunk_sha256;
use metal_image::manifest::analyze;
use metal_image::seekable::{
    FrameDecoder, FrameEntry, Seekable, chunk_frames, frame_bound, read_seek_table, write_seekable,
};
use metal_protocol::deploy::{DigestAlgorithm, ImageFormat};

const CHUNK: usize = 64 << 10;

/// Text-like data, a run of zero chunks, incompressible bytes, and a short last chunk.
fn raw_image() -> Vec<u8> {
    let mut raw = Vec::new();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..(9 * CHUNK + 1234) {
        let chunk = i / CHUNK;
        let byte = match chunk {
            2 | 3 | 6 => 0,
            5 => {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[0]
            }
            _ => b"the quick brown fox jumps over the lazy dog "[i % 44],
        };
        raw.push(byte);
    }
    raw
}

fn seekable(raw: &[u8]) -> (Vec<u8>, Seekable) {
    let mut out = Vec::new();
    let written = write_seekable(raw, &mut out, CHUNK as u64, 3).unwrap();
    (out, written)
}

#[test]
fn the_zstd_cli_decompresses_it_whole() {
    let raw = raw_image();
    let (file, written) = seekable(&raw);
    assert_eq!(written.served_size, file.len() as u64);
    assert_eq!(written.served.hex, chunk_sha256(&file), "the served digest is the SHA-256 of the file");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("image.zst");
    std::fs::write(&path, &file).unwrap();
    let out = Command::new("zstd").arg("-dc").arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout == raw, "zstd -dc does not give back the raw image");
    let test = Command::new("zstd").arg("-t").arg(&path).output().unwrap();
    assert!(test.status.success(), "{}", String::from_utf8_lossy(&test.stderr));
}

#[test]
fn the_seek_table_lines_up_and_every_frame_decodes_alone() {
    let raw = raw_image();
    let (file, written) = seekable(&raw);
    let entries = read_seek_table(&mut Cursor::new(&file)).unwrap().expect("a seek table");
    assert_eq!(entries.len(), 10);
    assert!(entries.iter().all(|e| e.checksum.is_none()));
    assert_eq!(entries.iter().map(|e| u64::from(e.compressed_size)).collect::<Vec<_>>(), written.frames);
    assert_eq!(chunk_frames(&entries, &written.manifest).as_ref(), Some(&written.frames));
    assert!(written.frames.iter().all(|f| *f <= frame_bound(CHUNK as u64)), "incompressible chunk 5 fits the bound");
    let mut decoder = FrameDecoder::new().unwrap();
    let mut at = 0usize;
    let mut buf = vec![0u8; CHUNK];
    for (index, entry) in entries.iter().enumerate() {
        let frame = &file[at..at + entry.compressed_size as usize];
        // Each frame says its content size in its header.
        assert_eq!(zstd::zstd_safe::get_frame_content_size(frame).unwrap(), Some(u64::from(entry.decompressed_size)));
        let n = decoder.decode(frame, &mut buf).unwrap();
        let start = index * CHUNK;
        assert_eq!(&buf[..n], &raw[start..(start + CHUNK).min(raw.len())], "frame {index}");
        at += entry.compressed_size as usize;
    }
    // A buffer one byte short of the frame's content is refused.
    assert!(decoder.decode(&file[..entries[0].compressed_size as usize], &mut buf[..CHUNK - 1]).is_err());
}

#[test]
fn the_manifest_is_the_raw_files_with_zero_chunks_marked() {
    let raw = raw_image();
    let (file, written) = seekable(&raw);
    let of_raw = analyze(&raw[..], CHUNK as u64, DigestAlgorithm::Sha256).unwrap();
    assert_eq!(of_raw.format, ImageFormat::Raw);
    let m = &written.manifest;
    assert_eq!(
        (&m.sha256, &m.zero_chunks, m.raw_size_bytes, m.chunk_size),
        (&of_raw.manifest.sha256, &of_raw.manifest.zero_chunks, raw.len() as u64, CHUNK as u64)
    );
    assert_eq!(m.zero_chunks, vec![2, 3, 6]);
    assert_eq!(m.image_digest, written.served);
    // What `metal-boot plan` computes from the served file is the same manifest.
    let of_served = analyze(&file[..], CHUNK as u64, DigestAlgorithm::Sha256).unwrap();
    assert_eq!(of_served.format, ImageFormat::Zstd);
    assert_eq!(of_served.size_bytes, written.served_size);
    assert_eq!(&of_served.manifest, m);
}

#[test]
fn frames_only_count_when_they_line_up_with_the_chunks() {
    let raw = raw_image();
    let (file, _) = seekable(&raw);
    let entries = read_seek_table(&mut Cursor::new(&file)).unwrap().unwrap();
    let coarser = analyze(&raw[..], 2 * CHUNK as u64, DigestAlgorithm::Sha256).unwrap().manifest;
    assert_eq!(chunk_frames(&entries, &coarser), None);
}

#[test]
fn an_empty_image_is_just_a_seek_table() {
    let (file, written) = seekable(&[]);
    assert_eq!(file.len(), 17);
    assert!(written.frames.is_empty() && written.manifest.sha256.is_empty());
    assert_eq!(read_seek_table(&mut Cursor::new(&file)).unwrap(), Some(Vec::new()));
}

#[test]
fn a_chunk_size_no_plan_allows_is_refused() {
    for size in [0, 1000, 32 << 10, 512 << 20] {
        let err = write_seekable(&b"x"[..], Vec::new(), size, 3).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{size}");
    }
}

#[test]
fn no_table_a_truncated_or_a_garbage_tail_is_not_seekable() {
    let raw = raw_image();
    let plain = zstd::encode_all(&raw[..], 3).unwrap();
    assert_eq!(read_seek_table(&mut Cursor::new(&plain)).unwrap(), None, "a plain zstd file");
    assert_eq!(read_seek_table(&mut Cursor::new(&[0u8; 16][..])).unwrap(), None, "shorter than any table");
    let (file, _) = seekable(&raw);
    let truncated = &file[..file.len() - 1];
    assert_eq!(read_seek_table(&mut Cursor::new(truncated)).unwrap(), None, "the magic is cut");
    let mut garbage = file.clone();
    garbage.extend_from_slice(b"trailing garbage");
    assert_eq!(read_seek_table(&mut Cursor::new(&garbage)).unwrap(), None, "bytes after the table");
}

/// The file with its footer's frame count, descriptor or first entry changed.
fn tampered(file: &[u8], change: impl FnOnce(&mut [u8])) -> std::io::Error {
    let mut bytes = file.to_vec();
    change(&mut bytes);
    let err = read_seek_table(&mut Cursor::new(&bytes)).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidData, "{err}");
    err
}

#[test]
fn a_hostile_table_is_an_error_and_allocates_nothing_for_its_claims() {
    let raw = raw_image();
    let (file, written) = seekable(&raw);
    let len = file.len();
    let count_at = len - 9;
    let err = tampered(&file, |b| b[count_at..count_at + 4].copy_from_slice(&u32::MAX.to_le_bytes()));
    assert!(err.to_string().contains("more than the"), "{err}");
    tampered(&file, |b| b[count_at..count_at + 4].copy_from_slice(&9u32.to_le_bytes()));
    let err = tampered(&file, |b| b[len - 5] = 0x04);
    assert!(err.to_string().contains("reserved bits"), "{err}");
    // The first entry, one byte bigger: the frames no longer add up to the file.
    let first = len - 9 - 10 * 8;
    let bigger = u32::try_from(written.frames[0] + 1).unwrap();
    let err = tampered(&file, |b| b[first..first + 4].copy_from_slice(&bigger.to_le_bytes()));
    assert!(err.to_string().contains("add up"), "{err}");
    let err = tampered(&file, |b| b[first..first + 4].copy_from_slice(&0u32.to_le_bytes()));
    assert!(err.to_string().contains("no bytes"), "{err}");
}

#[test]
fn a_table_with_checksums_parses_as_the_format_says() {
    // Two frames by hand: "ab" and "c" as raw zstd frames, then a table with checksums.
    let (a, c) = (zstd::encode_all(&b"ab"[..], 1).unwrap(), zstd::encode_all(&b"c"[..], 1).unwrap());
    let mut file = [a.clone(), c.clone()].concat();
    let mut table = Vec::new();
    table.write_all(&0x184D_2A5Eu32.to_le_bytes()).unwrap();
    table.write_all(&(2u32 * 12 + 9).to_le_bytes()).unwrap();
    for (frame, size, checksum) in [(&a, 2u32, 0x1111_1111u32), (&c, 1, 0x2222_2222)] {
        for word in [u32::try_from(frame.len()).unwrap(), size, checksum] {
            table.write_all(&word.to_le_bytes()).unwrap();
        }
    }
    table.write_all(&2u32.to_le_bytes()).unwrap();
    table.push(0x80);
    table.write_all(&0x8F92_EAB1u32.to_le_bytes()).unwrap();
    file.extend_from_slice(&table);
    let entries = read_seek_table(&mut Cursor::new(&file)).unwrap().unwrap();
    let size = |frame: &Vec<u8>| u32::try_from(frame.len()).unwrap();
    assert_eq!(
        entries,
        vec![
            FrameEntry { compressed_size: size(&a), decompressed_size: 2, checksum: Some(0x1111_1111) },
            FrameEntry { compressed_size: size(&c), decompressed_size: 1, checksum: Some(0x2222_2222) },
        ]
    );
}
