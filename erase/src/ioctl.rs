//! Every ioctl metal-erase issues, with its request numbers and argument layouts, in one
//! place. Each wrapper takes a borrowed file descriptor, so the descriptor outlives the call.
//!
//! Request numbers are spelled out (with the `_IO`/`_IOR` they come from, per
//! `include/uapi/linux/fs.h`) rather than taken from libc, which does not carry them all.
//! They are 32-bit values; `libc::Ioctl` is `c_ulong` on glibc and `c_int` on musl, where
//! the high ones wrap to negative numbers exactly as in musl's own headers.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `_IOR(0x12, 114, size_t)`: device size in bytes (u64).
const BLKGETSIZE64: libc::Ioctl = request(0x8008_1272);
/// `_IO(0x12, 104)`: logical block size (int).
const BLKSSZGET: libc::Ioctl = request(0x1268);
/// `_IO(0x12, 123)`: physical block size (unsigned int).
const BLKPBSZGET: libc::Ioctl = request(0x127b);
/// `_IO(0x12, 119)`: discard a byte range (u64[2]: start, length).
const BLKDISCARD: libc::Ioctl = request(0x1277);
/// `_IO(0x12, 125)`: secure discard a byte range (u64[2]: start, length).
const BLKSECDISCARD: libc::Ioctl = request(0x127d);
/// `_IO(0x12, 97)`: flush and invalidate the buffer cache of the device.
const BLKFLSBUF: libc::Ioctl = request(0x1261);

/// A 32-bit request number as this libc's ioctl request type.
#[allow(clippy::cast_possible_wrap, clippy::cast_lossless, clippy::unnecessary_cast)]
const fn request(number: u32) -> libc::Ioctl {
    number as libc::Ioctl
}

fn check(ret: libc::c_int) -> io::Result<()> {
    if ret < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Size of a block device in bytes.
pub fn device_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut size: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to a live,
    // properly aligned u64 for the duration of the call; the fd is valid (borrowed).
    check(unsafe { libc::ioctl(fd.as_raw_fd(), BLKGETSIZE64, &mut size as *mut u64) })?;
    Ok(size)
}

/// Logical block size (the smallest addressable unit) in bytes.
pub fn logical_block_size(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut size: libc::c_int = 0;
    // SAFETY: BLKSSZGET writes one int through the pointer, which points to a live c_int;
    // the fd is valid (borrowed).
    check(unsafe { libc::ioctl(fd.as_raw_fd(), BLKSSZGET, &mut size as *mut libc::c_int) })?;
    u32::try_from(size).map_err(|_| io::Error::other("negative logical block size"))
}

/// Physical block size in bytes.
pub fn physical_block_size(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut size: libc::c_uint = 0;
    // SAFETY: BLKPBSZGET writes one unsigned int through the pointer, which points to a live
    // c_uint; the fd is valid (borrowed).
    check(unsafe { libc::ioctl(fd.as_raw_fd(), BLKPBSZGET, &mut size as *mut libc::c_uint) })?;
    Ok(size)
}

/// Discards `len` bytes from `start` (BLKDISCARD, or BLKSECDISCARD when `secure`).
/// Devices that cannot discard fail with `EOPNOTSUPP`.
pub fn discard(fd: BorrowedFd<'_>, start: u64, len: u64, secure: bool) -> io::Result<()> {
    let range: [u64; 2] = [start, len];
    let request = if secure { BLKSECDISCARD } else { BLKDISCARD };
    // SAFETY: both requests read two u64 (start, length) from the pointer, which points to a
    // live [u64; 2] for the duration of the call; the fd is valid (borrowed).
    check(unsafe { libc::ioctl(fd.as_raw_fd(), request, range.as_ptr()) })
}

/// Flushes and drops the kernel's buffer cache for the device, so later buffered reads come
/// from the medium.
pub fn flush_buffers(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: BLKFLSBUF takes no argument; the fd is valid (borrowed).
    check(unsafe { libc::ioctl(fd.as_raw_fd(), BLKFLSBUF, 0) })
}
