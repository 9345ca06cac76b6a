//! Loop devices backed by sparse files, for tests that need a real block device (root
//! required): filled with recognisable old data, detached on drop, also when a test fails.

use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::FileExt as _;
use std::path::PathBuf;
use std::process::Command;

/// A file attached to a loop device.
#[derive(Debug)]
pub struct LoopDevice {
    /// `/dev/loopN`.
    pub path: PathBuf,
    _dir: tempfile::TempDir,
}

/// The byte every loop device starts filled with.
pub const OLD_DATA: u8 = 0xa5;

impl LoopDevice {
    /// A `size`-byte device full of [`OLD_DATA`], so a region a test misses shows.
    pub fn new(size: u64) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("disk.img");
        let f = File::create(&file).unwrap();
        f.set_len(size).unwrap();
        let junk = vec![OLD_DATA; 1 << 20];
        let mut offset = 0;
        while offset < size {
            let n = usize::try_from((size - offset).min(junk.len() as u64)).unwrap();
            f.write_all_at(&junk[..n], offset).unwrap();
            offset += n as u64;
        }
        f.sync_all().unwrap();
        let out =
            Command::new("losetup").args(["--find", "--show"]).arg(&file).output().expect("losetup (run as root)");
        assert!(out.status.success(), "losetup: {}", String::from_utf8_lossy(&out.stderr));
        let path = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
        Self { path, _dir: dir }
    }

    /// Everything on the device, read through it.
    pub fn read_all(&self) -> Vec<u8> {
        let mut data = Vec::new();
        File::open(&self.path).unwrap().read_to_end(&mut data).unwrap();
        data
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.path).status();
    }
}
