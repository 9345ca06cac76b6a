//! The newc cpio format the kernel unpacks as an initramfs: the per-boot archive a rescue
//! loads after its ramdisk (the lessee's keys), written in memory.

/// One entry: a path without a leading `/`, its mode (type and permissions), its bytes
/// (empty for a directory).
#[derive(Debug)]
pub struct Entry<'a> {
    /// Path in the archive.
    pub path: &'a str,
    /// `st_mode`: `0o040755` for a directory, `0o100644` for a file.
    pub mode: u32,
    /// Contents.
    pub data: &'a [u8],
}

/// The archive of `entries` (parents before children), with its trailer.
pub fn newc(entries: &[Entry<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for (ino, entry) in (1u32..).zip(entries) {
        let nlink = if entry.mode & 0o170000 == 0o040000 { 2 } else { 1 };
        header(&mut out, ino, entry.mode, nlink, entry.path, entry.data.len());
        out.extend_from_slice(entry.data);
        pad(&mut out);
    }
    header(&mut out, 0, 0, 1, "TRAILER!!!", 0);
    out
}

fn header(out: &mut Vec<u8>, ino: u32, mode: u32, nlink: u32, name: &str, size: usize) {
    out.extend_from_slice(b"070701");
    let size = u32::try_from(size).unwrap_or(u32::MAX);
    let name_size = u32::try_from(name.len() + 1).unwrap_or(u32::MAX);
    // ino mode uid gid nlink mtime filesize devmajor devminor rdevmajor rdevminor namesize check
    for field in [ino, mode, 0, 0, nlink, 0, size, 0, 0, 0, 0, name_size, 0] {
        out.extend_from_slice(format!("{field:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad(out);
}

/// Pads to the next multiple of four bytes.
fn pad(out: &mut Vec<u8>) {
    out.resize(out.len().next_multiple_of(4), 0);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gnu_cpio_unpacks_what_we_write() {
        let dir = tempfile::tempdir().unwrap();
        let archive = newc(&[
            Entry { path: "etc", mode: 0o040755, data: b"" },
            Entry { path: "etc/metal-rescue", mode: 0o040700, data: b"" },
            Entry { path: "etc/metal-rescue/authorized_keys", mode: 0o100600, data: b"ssh-ed25519 AAAA x\n" },
            Entry { path: "odd", mode: 0o100644, data: b"12345" },
        ]);
        assert_eq!(archive.len() % 4, 0);
        let mut child = std::process::Command::new("cpio")
            .args(["-i", "-d", "--quiet"])
            .current_dir(dir.path())
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("cpio");
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), &archive).unwrap();
        assert!(child.wait().unwrap().success());
        let keys = dir.path().join("etc/metal-rescue/authorized_keys");
        assert_eq!(std::fs::read(&keys).unwrap(), b"ssh-ed25519 AAAA x\n");
        assert_eq!(std::fs::read(dir.path().join("odd")).unwrap(), b"12345");
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(std::fs::metadata(&keys).unwrap().permissions().mode() & 0o777, 0o600);
    }
}
