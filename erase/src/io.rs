//! Direct I/O on a block device: aligned buffers and a `Target` the engine writes and reads.
//!
//! Everything the engine does to a disk goes through the `Target` trait, so the same erase
//! and verification code runs on real block devices (O_DIRECT, bypassing the page cache, so
//! a read-back reads the medium) and, in unit tests, on targets that lie.

use std::alloc::{Layout, alloc_zeroed, dealloc};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsFd as _;
use std::os::unix::fs::{FileExt as _, FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::time::Duration;

use crate::ioctl::{self, NvmeCompletion, SgOutcome};
use crate::passthrough::nvme::AdminCommand;
use crate::passthrough::scsi::ScsiCommand;

/// Alignment of every I/O buffer: covers 4 KiB logical blocks and page alignment.
pub const BUFFER_ALIGN: usize = 4096;

/// A zeroed, 4 KiB-aligned heap buffer for O_DIRECT.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its allocation exclusively (like Vec<u8>), so moving it to another
// thread or sharing &AlignedBuf (which only hands out &[u8]) is sound.
unsafe impl Send for AlignedBuf {}
// SAFETY: see Send; shared references give only immutable access.
unsafe impl Sync for AlignedBuf {}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedBuf").field("len", &self.len).finish()
    }
}

impl AlignedBuf {
    /// Allocates `len` zeroed bytes (`len` > 0, a multiple of [`BUFFER_ALIGN`]).
    pub fn new(len: usize) -> Self {
        assert!(len > 0 && len.is_multiple_of(BUFFER_ALIGN), "buffer length {len} must be a positive multiple of 4096");
        let layout = Self::layout(len);
        // SAFETY: the layout has a non-zero size (asserted above) and a valid alignment.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| std::alloc::handle_alloc_error(layout));
        Self { ptr, len }
    }

    fn layout(len: usize) -> Layout {
        Layout::from_size_align(len, BUFFER_ALIGN).unwrap_or_else(|_| panic!("invalid buffer layout for {len} bytes"))
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr points to `len` initialised (zeroed at allocation) bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in Deref, and &mut self guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: ptr was allocated in `new` with exactly this layout and is freed only here.
        unsafe { dealloc(self.ptr.as_ptr(), Self::layout(self.len)) }
    }
}

/// What the engine needs from a disk.
pub trait Target: Send + Sync {
    /// Size in bytes.
    fn size(&self) -> u64;
    /// I/O alignment in bytes (logical block size, at least 512).
    fn block_size(&self) -> u32;
    /// Writes all of `buf` at `offset` (both aligned to the block size).
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
    /// Reads exactly `buf.len()` bytes at `offset` (both aligned to the block size).
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Makes every write durable on the medium.
    fn sync(&self) -> io::Result<()>;
    /// Discards the whole device (BLKSECDISCARD when `secure`, else BLKDISCARD).
    fn discard_all(&self, secure: bool) -> io::Result<()>;
    /// Sends an NVMe admin command (anything but an NVMe device answers ENOTTY).
    fn nvme_admin(&self, _command: &AdminCommand, _data: &mut [u8]) -> io::Result<NvmeCompletion> {
        Err(io::Error::from_raw_os_error(libc::ENOTTY))
    }
    /// The NVMe namespace id (anything but an NVMe namespace answers ENOTTY).
    fn nvme_namespace_id(&self) -> io::Result<u32> {
        Err(io::Error::from_raw_os_error(libc::ENOTTY))
    }
    /// Sends a SCSI command through SG_IO (anything but a SCSI/SATA disk answers ENOTTY).
    fn sg_io(&self, _command: &ScsiCommand, _data_in: &mut [u8], _timeout: Duration) -> io::Result<SgOutcome> {
        Err(io::Error::from_raw_os_error(libc::ENOTTY))
    }
}

/// A block device opened for direct I/O.
#[derive(Debug)]
pub struct BlockTarget {
    path: PathBuf,
    file: File,
    size: u64,
    block_size: u32,
}

impl BlockTarget {
    /// Opens `path` read-write (or read-only) with O_DIRECT and O_EXCL: the kernel refuses
    /// when the device is mounted or otherwise claimed, and a concurrent mount is refused
    /// while we hold it.
    pub fn open(path: &Path, writable: bool) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(writable)
            .custom_flags(libc::O_DIRECT | libc::O_EXCL | libc::O_CLOEXEC)
            .open(path)?;
        if !file.metadata()?.file_type().is_block_device() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a block device", path.display()),
            ));
        }
        let size = ioctl::device_size(file.as_fd())?;
        let block_size = ioctl::logical_block_size(file.as_fd())?.max(512);
        Ok(Self { path: path.to_owned(), file, size, block_size })
    }

    /// The device path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Target for BlockTarget {
    fn size(&self) -> u64 {
        self.size
    }

    fn block_size(&self) -> u32 {
        self.block_size
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_all()?;
        ioctl::flush_buffers(self.file.as_fd())
    }

    fn discard_all(&self, secure: bool) -> io::Result<()> {
        ioctl::discard(self.file.as_fd(), 0, self.size, secure)
    }

    fn nvme_admin(&self, command: &AdminCommand, data: &mut [u8]) -> io::Result<NvmeCompletion> {
        ioctl::nvme_admin(self.file.as_fd(), command, data)
    }

    fn nvme_namespace_id(&self) -> io::Result<u32> {
        ioctl::nvme_namespace_id(self.file.as_fd())
    }

    fn sg_io(&self, command: &ScsiCommand, data_in: &mut [u8], timeout: Duration) -> io::Result<SgOutcome> {
        ioctl::sg_io(self.file.as_fd(), command, data_in, timeout)
    }
}
