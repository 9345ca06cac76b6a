//! Every ioctl metal-erase issues, with its request numbers and argument layouts, in one
//! place. Each wrapper takes a borrowed file descriptor, so the descriptor outlives the call.
//!
//! Request numbers are spelled out (with the `_IO`/`_IOR` they come from, per
//! `include/uapi/linux/fs.h`) rather than taken from libc, which does not carry them all.
//! They are 32-bit values; `libc::Ioctl` is `c_ulong` on glibc and `c_int` on musl, where
//! the high ones wrap to negative numbers exactly as in musl's own headers.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use crate::passthrough::Direction;
use crate::passthrough::nvme::AdminCommand;
use crate::passthrough::scsi::ScsiCommand;

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

/// `_IOWR('N', 0x41, struct nvme_passthru_cmd)` (72 bytes): an NVMe admin command.
const NVME_IOCTL_ADMIN_CMD: libc::Ioctl = request(0xc048_4e41);
/// `_IO('N', 0x40)`: the namespace id of an NVMe namespace block device.
const NVME_IOCTL_ID: libc::Ioctl = request(0x4e40);
/// `SG_IO` (`include/scsi/sg.h`): one SCSI command through the SCSI generic layer, which
/// also answers on sd block devices.
const SG_IO: libc::Ioctl = request(0x2285);

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

/// `struct nvme_passthru_cmd`, as bytes with the struct's 8-byte alignment.
#[repr(C, align(8))]
struct PassthruCmd([u8; 72]);

/// What an NVMe admin command ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NvmeCompletion {
    /// The status field (0 on success), as the ioctl returns it.
    pub status: u16,
    /// Completion queue entry dword 0 (`result`).
    pub result: u32,
}

/// Sends `command` through NVME_IOCTL_ADMIN_CMD on an NVMe controller or namespace device.
/// `data` is the command's data buffer (at least `command.data_len` bytes). `Err` means the
/// kernel refused to send it; a device error is a nonzero `status`.
pub fn nvme_admin(fd: BorrowedFd<'_>, command: &AdminCommand, data: &mut [u8]) -> io::Result<NvmeCompletion> {
    let len = usize::try_from(command.data_len).unwrap_or(usize::MAX);
    if data.len() < len {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "NVMe data buffer shorter than data_len"));
    }
    let addr = if len == 0 { 0 } else { data.as_mut_ptr() as u64 };
    let mut cmd = PassthruCmd(command.to_passthru_bytes(addr));
    // SAFETY: NVME_IOCTL_ADMIN_CMD reads the 72-byte nvme_passthru_cmd, moves data_len
    // bytes to or from `addr` (which points into `data`, checked long enough above, and is
    // not otherwise borrowed during the call) and writes `result` back into `cmd`.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), NVME_IOCTL_ADMIN_CMD, cmd.0.as_mut_ptr()) };
    check(ret)?;
    let status = u16::try_from(ret).map_err(|_| io::Error::other(format!("NVMe status {ret:#x} out of range")))?;
    Ok(NvmeCompletion { status, result: u32::from_le_bytes([cmd.0[68], cmd.0[69], cmd.0[70], cmd.0[71]]) })
}

/// The namespace id of an NVMe namespace block device.
pub fn nvme_namespace_id(fd: BorrowedFd<'_>) -> io::Result<u32> {
    // SAFETY: NVME_IOCTL_ID takes no argument and returns the namespace id.
    let ret = unsafe { libc::ioctl(fd.as_raw_fd(), NVME_IOCTL_ID) };
    check(ret)?;
    u32::try_from(ret).map_err(|_| io::Error::other("negative namespace id"))
}

/// `struct sg_io_hdr` (x86_64 layout, 88 bytes).
#[repr(C)]
struct SgIoHdr {
    interface_id: libc::c_int,
    dxfer_direction: libc::c_int,
    cmd_len: u8,
    mx_sb_len: u8,
    iovec_count: u16,
    dxfer_len: libc::c_uint,
    dxferp: *mut libc::c_void,
    cmdp: *const u8,
    sbp: *mut u8,
    timeout: libc::c_uint,
    flags: libc::c_uint,
    pack_id: libc::c_int,
    usr_ptr: *mut libc::c_void,
    status: u8,
    masked_status: u8,
    msg_status: u8,
    sb_len_wr: u8,
    host_status: u16,
    driver_status: u16,
    resid: libc::c_int,
    duration: libc::c_uint,
    info: libc::c_uint,
}

/// What a SCSI command ended with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SgOutcome {
    /// SCSI status (0 GOOD, 2 CHECK CONDITION).
    pub status: u8,
    /// Host adapter status (0: no error).
    pub host_status: u16,
    /// Driver status (0, or 0x08 DRIVER_SENSE with sense data).
    pub driver_status: u16,
    /// The sense data the device returned (empty when none).
    pub sense: Vec<u8>,
}

/// Sends `command` through SG_IO. `data_in` receives a data-in phase (at least
/// `command.data_len` bytes). `Err` means the kernel refused to send it.
pub fn sg_io(
    fd: BorrowedFd<'_>,
    command: &ScsiCommand,
    data_in: &mut [u8],
    timeout: Duration,
) -> io::Result<SgOutcome> {
    let mut data_out = command.data_out.clone();
    let len = usize::try_from(command.data_len).unwrap_or(usize::MAX);
    let (direction, buffer): (libc::c_int, *mut libc::c_void) = match command.direction {
        Direction::None => (-1, std::ptr::null_mut()),
        Direction::ToDevice if data_out.len() >= len => (-2, data_out.as_mut_ptr().cast()),
        Direction::FromDevice if data_in.len() >= len => (-3, data_in.as_mut_ptr().cast()),
        _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "SCSI data buffer shorter than data_len")),
    };
    let cmd_len = u8::try_from(command.cdb.len()).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let mut sense = [0u8; 64];
    let mut hdr = SgIoHdr {
        interface_id: libc::c_int::from(b'S'),
        dxfer_direction: direction,
        cmd_len,
        mx_sb_len: 64,
        iovec_count: 0,
        dxfer_len: command.data_len,
        dxferp: buffer,
        cmdp: command.cdb.as_ptr(),
        sbp: sense.as_mut_ptr(),
        timeout: libc::c_uint::try_from(timeout.as_millis()).unwrap_or(libc::c_uint::MAX),
        flags: 0,
        pack_id: 0,
        usr_ptr: std::ptr::null_mut(),
        status: 0,
        masked_status: 0,
        msg_status: 0,
        sb_len_wr: 0,
        host_status: 0,
        driver_status: 0,
        resid: 0,
        duration: 0,
        info: 0,
    };
    // SAFETY: SG_IO reads the header, `cmd_len` bytes of the CDB at `cmdp` and, for a
    // data-out phase, `dxfer_len` bytes at `dxferp`; it writes at most `dxfer_len` bytes of a
    // data-in phase to `dxferp`, at most `mx_sb_len` (64) sense bytes to `sbp`, and the
    // header's output fields. Every pointer refers to a buffer (the CDB, `data_out` or
    // `data_in`, `sense`) that is at least that long and lives across the call.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), SG_IO, &raw mut hdr) })?;
    let written = usize::from(hdr.sb_len_wr).min(sense.len());
    Ok(SgOutcome {
        status: hdr.status,
        host_status: hdr.host_status,
        driver_status: hdr.driver_status,
        sense: sense[..written].to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passthrough_layouts_match_the_kernel() {
        assert_eq!(std::mem::size_of::<PassthruCmd>(), 72, "_IOWR('N', 0x41) encodes 0x48 bytes");
        assert_eq!(std::mem::align_of::<PassthruCmd>(), 8);
        assert_eq!(std::mem::size_of::<SgIoHdr>(), 88);
        assert_eq!(std::mem::offset_of!(SgIoHdr, dxferp), 16);
        assert_eq!(std::mem::offset_of!(SgIoHdr, timeout), 40);
        assert_eq!(std::mem::offset_of!(SgIoHdr, usr_ptr), 56);
        assert_eq!(std::mem::offset_of!(SgIoHdr, status), 64);
        assert_eq!(std::mem::offset_of!(SgIoHdr, resid), 72);
    }

    #[test]
    fn a_regular_file_takes_no_passthrough() {
        let file = tempfile::tempfile().unwrap();
        let identify = crate::passthrough::nvme::identify_controller();
        let mut buf = vec![0u8; 4096];
        let e = nvme_admin(std::os::fd::AsFd::as_fd(&file), &identify, &mut buf).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        let inquiry = ScsiCommand::data_in(vec![0x12, 0, 0, 0, 96, 0], 96);
        let e = sg_io(std::os::fd::AsFd::as_fd(&file), &inquiry, &mut buf, Duration::from_secs(1)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTTY));
        assert_eq!(
            nvme_admin(std::os::fd::AsFd::as_fd(&file), &identify, &mut [0u8; 16]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }
}
