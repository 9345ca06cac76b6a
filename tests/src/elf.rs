//! Just enough ELF64 reading to prove a binary is static: program headers (PT_INTERP) and the
//! dynamic section (DT_NEEDED). Static-pie binaries keep a PT_DYNAMIC for relocations, so its
//! absence is not the test; an interpreter or a needed library is.

/// ELF machine number of x86_64.
pub const EM_X86_64: u16 = 62;
/// ELF machine number of AArch64 (arm64).
pub const EM_AARCH64: u16 = 183;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NEEDED: u64 = 1;

/// What matters about an executable for the ramdisk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElfInfo {
    /// `e_machine`.
    pub machine: u16,
    /// A PT_INTERP program header is present (a dynamic loader would run first).
    pub has_interpreter: bool,
    /// The dynamic section names at least one shared library.
    pub needs_libraries: bool,
}

/// `N` bytes at `off`, or an error naming the offset when the file is too short.
fn field<const N: usize>(b: &[u8], off: usize) -> Result<[u8; N], String> {
    b.get(off..off + N).and_then(|s| s.try_into().ok()).ok_or_else(|| format!("truncated at offset {off}"))
}

fn u16_at(b: &[u8], off: usize) -> Result<u16, String> {
    field(b, off).map(u16::from_le_bytes)
}

fn u32_at(b: &[u8], off: usize) -> Result<u32, String> {
    field(b, off).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], off: usize) -> Result<u64, String> {
    field(b, off).map(u64::from_le_bytes)
}

fn usize_at(b: &[u8], off: usize) -> Result<usize, String> {
    usize::try_from(u64_at(b, off)?).map_err(|_| format!("offset at {off} does not fit in memory"))
}

/// Reads the header, program headers and dynamic section of a little-endian ELF64 file.
pub fn inspect(bytes: &[u8]) -> Result<ElfInfo, String> {
    if bytes.get(..4) != Some(b"\x7fELF") {
        return Err("not an ELF file".into());
    }
    if bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a little-endian ELF64 file".into());
    }
    let machine = u16_at(bytes, 0x12)?;
    let phoff = usize_at(bytes, 0x20)?;
    let phentsize = usize::from(u16_at(bytes, 0x36)?);
    let phnum = usize::from(u16_at(bytes, 0x38)?);
    let mut info = ElfInfo { machine, has_interpreter: false, needs_libraries: false };
    for i in 0..phnum {
        let ph = phoff + i * phentsize;
        match u32_at(bytes, ph)? {
            PT_INTERP => info.has_interpreter = true,
            PT_DYNAMIC => {
                let (offset, size) = (usize_at(bytes, ph + 0x08)?, usize_at(bytes, ph + 0x20)?);
                let mut entry = offset;
                while entry + 16 <= offset + size {
                    match u64_at(bytes, entry)? {
                        0 => break, // DT_NULL
                        DT_NEEDED => info.needs_libraries = true,
                        _ => {}
                    }
                    entry += 16;
                }
            }
            _ => {}
        }
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dynamically_linked_system_binary_is_recognised() {
        let bytes = std::fs::read("/bin/sh").unwrap();
        let info = inspect(&bytes).unwrap();
        assert_eq!(info.machine, EM_X86_64);
        assert!(info.has_interpreter && info.needs_libraries, "{info:?}");
    }

    #[test]
    fn garbage_is_refused() {
        assert!(inspect(b"#!/bin/sh\n").is_err());
        assert!(inspect(b"\x7fELF\x02\x01").is_err());
    }
}
