//! metal-image: an OS image as the controller stores and serves it and as the ramdisk reads
//! it. `format`: the container format by magic bytes and a streaming decoder for each;
//! `digest`: the whole-file digest and the per-chunk SHA-256; `manifest`: the chunk manifest
//! of the raw bytes (what `metal-boot plan` prints and the controller computes at import);
//! `seekable`: zstd's seekable format with one frame per chunk, the served form the ramdisk
//! decompresses in parallel.

pub mod digest;
pub mod format;
pub mod layout;
pub mod manifest;
pub mod seekable;
