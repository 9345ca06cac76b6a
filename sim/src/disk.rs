//! A simulated NVMe disk: a sparse file that the real erase and deploy code write through
//! metal-erase's `Target`, as they would a block device, with an NVMe controller that
//! answers the admin commands the erase engine sends (Identify Controller with Sanitize
//! crypto and block erase advertised, Sanitize, the Sanitize Status log). A sanitize or a
//! discard punches a hole over the whole file (what a thin-provisioned device does), so a
//! disk is erased in an instant and the engine's read-back finds none of the markers it
//! planted. The Sanitize Status log keeps "global data erased" set after a sanitize (the
//! spec clears it on the next write; the engine does not read it). A read that falls wholly
//! in a hole is answered with zeros without touching the file, as a thin-provisioned device
//! answers one of deallocated blocks: a thousand read-backs at once of mostly erased disks
//! would otherwise churn the host's page cache with zero pages; likewise a write of zeros
//! over a hole is not stored (a deploy zeroes each disk's head and tail, which on a tmpfs
//! would otherwise allocate memory for every leased machine's zeros). Faults make it lie: erase
//! commands acknowledged and ignored (only the read-back can tell), or reads that fail.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd as _;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

use metal_erase::io::Target;
use metal_erase::ioctl::NvmeCompletion;
use metal_erase::passthrough::nvme::{self, AdminCommand};

use crate::fault::Faults;

/// The logical block size of every simulated disk.
pub const BLOCK: u32 = 512;
/// Generic Command Status, Invalid Command Opcode.
const INVALID_OPCODE: u16 = 0x0001;
/// Generic Command Status, Invalid Field in Command.
const INVALID_FIELD: u16 = 0x0002;
/// SANICAP: Crypto Erase and Block Erase supported.
const SANICAP: u32 = 0b011;

/// A sparse file as an NVMe namespace.
#[derive(Debug)]
pub struct FileDisk {
    file: File,
    size: u64,
    serial: String,
    faults: Arc<Faults>,
    /// The last Sanitize's CDW10, once one ran.
    sanitized: Mutex<Option<u32>>,
}

impl FileDisk {
    /// Creates (or resizes) the sparse file behind a disk of `size` bytes.
    pub fn create(path: &Path, size: u64) -> io::Result<()> {
        let file = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path)?;
        file.set_len(size)
    }

    /// Opens the disk at `path` (serial `serial`) for reading and writing, under `faults`.
    pub fn open(path: &Path, serial: &str, faults: Arc<Faults>) -> io::Result<FileDisk> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
        let size = file.metadata()?.len();
        Ok(FileDisk { file, size, serial: serial.to_owned(), faults, sanitized: Mutex::new(None) })
    }

    /// Deallocates every block: they read zeros afterwards.
    fn deallocate(&self) -> io::Result<()> {
        if self.faults.disk_ignores_erase() {
            // Acknowledged, not done: only the read-back can tell.
            return Ok(());
        }
        let len = libc::off_t::try_from(self.size).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
        // SAFETY: fallocate on a file descriptor this struct owns for its whole life; the
        // range is the file's own length; no memory is passed.
        let done = unsafe {
            libc::fallocate(self.file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, 0, len)
        };
        if done == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
    }

    /// Whether `offset..offset + len` holds no data (it lies in a hole, or past the data).
    fn is_hole(&self, offset: u64, len: usize) -> bool {
        let Ok(start) = libc::off_t::try_from(offset) else { return false };
        // SAFETY: lseek on a file descriptor this struct owns; it moves only the descriptor's
        // offset, which no read or write here uses (they are positioned).
        let data = unsafe { libc::lseek(self.file.as_raw_fd(), start, libc::SEEK_DATA) };
        if data < 0 {
            // ENXIO: no data at or after `offset`; any other error: read the file.
            return io::Error::last_os_error().raw_os_error() == Some(libc::ENXIO);
        }
        u64::try_from(data).is_ok_and(|data| data >= offset + len as u64)
    }

    fn identify_controller(&self, data: &mut [u8]) -> u16 {
        let Some(page) = data.get_mut(..4096) else { return INVALID_FIELD };
        page.fill(0);
        let text = |page: &mut [u8], at: usize, len: usize, value: &str| {
            let field = &mut page[at..at + len];
            field.fill(b' ');
            let bytes = value.as_bytes();
            field[..bytes.len().min(len)].copy_from_slice(&bytes[..bytes.len().min(len)]);
        };
        page[0..2].copy_from_slice(&0x1b36u16.to_le_bytes());
        text(page, 4, 20, &self.serial);
        text(page, 24, 40, "metal-sim NVMe disk");
        text(page, 64, 8, "SIM1.0");
        page[80..84].copy_from_slice(&0x0002_0000u32.to_le_bytes());
        page[280..288].copy_from_slice(&self.size.to_le_bytes());
        page[328..332].copy_from_slice(&SANICAP.to_le_bytes());
        page[516..520].copy_from_slice(&1u32.to_le_bytes());
        0
    }

    fn sanitize_status(&self, data: &mut [u8]) -> u16 {
        let Some(page) = data.get_mut(..usize::try_from(nvme::SANITIZE_LOG_LEN).unwrap_or(512)) else {
            return INVALID_FIELD;
        };
        page.fill(0);
        page[0..2].copy_from_slice(&u16::MAX.to_le_bytes());
        let sanitized = *self.sanitized.lock().unwrap_or_else(|p| p.into_inner());
        // SSTAT: 1 completed (with the global data erased bit), or 0 never sanitized.
        let sstat: u16 = if sanitized.is_some() { 0x0101 } else { 0 };
        page[2..4].copy_from_slice(&sstat.to_le_bytes());
        page[4..8].copy_from_slice(&sanitized.unwrap_or(0).to_le_bytes());
        page[8..32].fill(0xff);
        0
    }
}

impl Target for FileDisk {
    fn size(&self) -> u64 {
        self.size
    }

    fn block_size(&self) -> u32 {
        BLOCK
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if offset + buf.len() as u64 > self.size {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        if buf.iter().all(|b| *b == 0) && self.is_hole(offset, buf.len()) {
            // Zeros over a hole change nothing a read can see: left unwritten, as a
            // thin-provisioned device leaves them unallocated.
            return Ok(());
        }
        self.file.write_all_at(buf, offset)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        if self.faults.disk_read_errors() {
            return Err(io::Error::from_raw_os_error(libc::EIO));
        }
        if offset + buf.len() as u64 > self.size {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        if self.is_hole(offset, buf.len()) {
            buf.fill(0);
            return Ok(());
        }
        self.file.read_exact_at(buf, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn discard_all(&self, _secure: bool) -> io::Result<()> {
        self.deallocate()
    }

    fn nvme_admin(&self, command: &AdminCommand, data: &mut [u8]) -> io::Result<NvmeCompletion> {
        let status = match command.opcode {
            nvme::OPC_IDENTIFY if command.cdw10 & 0xff == u32::from(nvme::CNS_CONTROLLER) => {
                self.identify_controller(data)
            }
            nvme::OPC_GET_LOG_PAGE if command.cdw10 & 0xff == u32::from(nvme::LID_SANITIZE_STATUS) => {
                self.sanitize_status(data)
            }
            nvme::OPC_SANITIZE => match command.cdw10 & 0x7 {
                // Block Erase (010b) or Crypto Erase (100b): every block deallocated.
                0b010 | 0b100 => {
                    self.deallocate()?;
                    *self.sanitized.lock().unwrap_or_else(|p| p.into_inner()) = Some(command.cdw10);
                    0
                }
                _ => INVALID_FIELD,
            },
            nvme::OPC_IDENTIFY | nvme::OPC_GET_LOG_PAGE => INVALID_FIELD,
            _ => INVALID_OPCODE,
        };
        Ok(NvmeCompletion { status, result: 0 })
    }

    fn nvme_namespace_id(&self) -> io::Result<u32> {
        Ok(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use metal_erase::plan::Capabilities;
    use metal_protocol::wipe::SanitizeMethod;

    fn disk(dir: &Path, faults: Arc<Faults>) -> FileDisk {
        let path = dir.join("nvme0n1.img");
        FileDisk::create(&path, 4 << 20).unwrap();
        FileDisk::open(&path, "SIM00001-nvme0n1", faults).unwrap()
    }

    #[test]
    fn the_erase_engine_probes_a_sanitize_capable_nvme_disk() {
        let dir = tempfile::tempdir().unwrap();
        let disk = disk(dir.path(), Arc::default());
        let caps: Capabilities = metal_erase::firmware::probe(&disk, metal_protocol::Transport::Nvme);
        let supported: Vec<SanitizeMethod> = caps.supported.iter().map(|(m, _)| *m).collect();
        assert_eq!(supported, [SanitizeMethod::NvmeSanitizeCrypto, SanitizeMethod::NvmeSanitizeBlock], "{caps:?}");
        let mut page = vec![0u8; 4096];
        disk.nvme_admin(&nvme::identify_controller(), &mut page).unwrap();
        let id = nvme::IdentifyController::parse(&page).unwrap();
        assert_eq!((id.serial.as_str(), id.tnvmcap), ("SIM00001-nvme0n1", 4 << 20));
    }

    #[test]
    fn reads_of_holes_are_zeros_and_reads_of_data_are_the_data() {
        let dir = tempfile::tempdir().unwrap();
        let disk = disk(dir.path(), Arc::default());
        disk.write_at(&[0xa5; 4096], 1 << 20).unwrap();
        disk.sync().unwrap();
        let mut back = vec![1u8; 64 << 10];
        disk.read_at(&mut back, 2 << 20).unwrap();
        assert!(back.iter().all(|b| *b == 0), "a hole reads zeros");
        back.fill(1);
        disk.read_at(&mut back, (1 << 20) - 8192).unwrap();
        assert!(back[..8192].iter().all(|b| *b == 0), "the hole before the data");
        assert!(back[8192..8192 + 4096].iter().all(|b| *b == 0xa5), "the data");
        assert!(back[8192 + 4096..].iter().all(|b| *b == 0), "the hole after it");
        let past = disk.read_at(&mut back, (4 << 20) - 4096).unwrap_err();
        assert_eq!(past.kind(), io::ErrorKind::UnexpectedEof, "a read past the end fails");
    }

    /// The bytes of `disk`'s file actually allocated.
    fn allocated(disk: &FileDisk) -> u64 {
        use std::os::unix::fs::MetadataExt as _;
        disk.file.metadata().unwrap().blocks() * 512
    }

    #[test]
    fn zeros_written_over_a_hole_allocate_nothing_and_zeros_over_data_are_written() {
        let dir = tempfile::tempdir().unwrap();
        let disk = disk(dir.path(), Arc::default());
        let before = allocated(&disk);
        disk.write_at(&[0; 1 << 20], 0).unwrap();
        disk.write_at(&[0; 1 << 20], 3 << 20).unwrap();
        disk.sync().unwrap();
        assert_eq!(allocated(&disk), before, "zeros over holes are not stored");

        disk.write_at(&[0xa5; 8192], 1 << 20).unwrap();
        disk.write_at(&[0; 4096], 1 << 20).unwrap();
        let mut back = [1u8; 8192];
        disk.read_at(&mut back, 1 << 20).unwrap();
        assert!(back[..4096].iter().all(|b| *b == 0), "zeros over data overwrite it");
        assert!(back[4096..].iter().all(|b| *b == 0xa5), "and only the range written");
        let past = disk.write_at(&[0; 4096], (4 << 20) - 2048).unwrap_err();
        assert_eq!(past.raw_os_error(), Some(libc::ENOSPC), "a write past the end fails");
    }

    #[test]
    fn a_sanitize_deallocates_every_block_unless_the_disk_ignores_it() {
        let dir = tempfile::tempdir().unwrap();
        let faults = Arc::new(Faults::default());
        let disk = disk(dir.path(), faults.clone());
        let crypto = nvme::Sanitize {
            action: nvme::SanitizeAction::CryptoErase,
            allow_unrestricted_exit: false,
            no_deallocate: false,
        };
        let command = nvme::sanitize(&crypto).unwrap();
        let mut status = vec![0u8; 512];
        disk.nvme_admin(&nvme::sanitize_status_log(), &mut status).unwrap();
        assert_eq!(nvme::SanitizeStatusLog::parse(&status).unwrap().state, nvme::SanitizeState::NeverSanitized);

        disk.write_at(&[0xa5; 4096], 8192).unwrap();
        assert_eq!(disk.nvme_admin(&command, &mut []).unwrap().status, 0);
        let mut back = [1u8; 4096];
        disk.read_at(&mut back, 8192).unwrap();
        assert!(back.iter().all(|b| *b == 0), "a sanitized disk reads zeros");
        disk.nvme_admin(&nvme::sanitize_status_log(), &mut status).unwrap();
        let log = nvme::SanitizeStatusLog::parse(&status).unwrap();
        assert_eq!((log.state, log.global_data_erased), (nvme::SanitizeState::Completed, true));

        disk.write_at(&[0xa5; 4096], 8192).unwrap();
        faults.set(crate::fault::Fault::IgnoreDiscard, true);
        assert_eq!(disk.nvme_admin(&command, &mut []).unwrap().status, 0, "acknowledged");
        disk.read_at(&mut back, 8192).unwrap();
        assert!(back.iter().all(|b| *b == 0xa5), "and not done");
        faults.set(crate::fault::Fault::ReadErrors, true);
        assert_eq!(disk.read_at(&mut back, 0).unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(disk.nvme_admin(&AdminCommand::new(0x7f), &mut []).unwrap().status, INVALID_OPCODE);
    }
}
