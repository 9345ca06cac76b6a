//! NVMe admin commands for erase (Identify, Get Log Page, Sanitize, Format NVM) and the
//! parsers for their data (Identify Controller/Namespace, Sanitize Status log) and for
//! completion status.
//!
//! Design decision: [`AdminCommand`] mirrors Linux `struct nvme_passthru_cmd` field for field
//! (include/uapi/linux/nvme_ioctl.h) except the two user pointers (`metadata`, `addr`) and
//! the output `result`: the builder states the data direction and length, the ioctl layer
//! owns the buffer and fills the pointer. [`AdminCommand::to_passthru_bytes`] gives the
//! exact 72-byte ioctl argument so the layout itself is tested here.

use std::fmt;

use super::{Direction, le_u16, le_u32, le_u64, trimmed_ascii};

/// Admin opcode Get Log Page (NVMe Base 2.1 Figure 28); data controller-to-host.
pub const OPC_GET_LOG_PAGE: u8 = 0x02;
/// Admin opcode Identify; data controller-to-host.
pub const OPC_IDENTIFY: u8 = 0x06;
/// Admin opcode Format NVM (NVM Command Set); no data.
pub const OPC_FORMAT_NVM: u8 = 0x80;
/// Admin opcode Security Send (TCG/Opal transport); data host-to-controller.
pub const OPC_SECURITY_SEND: u8 = 0x81;
/// Admin opcode Security Receive (TCG/Opal transport); data controller-to-host.
pub const OPC_SECURITY_RECEIVE: u8 = 0x82;
/// Admin opcode Sanitize; no data.
pub const OPC_SANITIZE: u8 = 0x84;

/// Identify CNS 00h: Identify Namespace data structure (NVM Command Set).
pub const CNS_NAMESPACE: u8 = 0x00;
/// Identify CNS 01h: Identify Controller data structure.
pub const CNS_CONTROLLER: u8 = 0x01;
/// Size of every Identify data structure.
pub const IDENTIFY_LEN: u32 = 4096;
/// Log identifier of the Sanitize Status log page.
pub const LID_SANITIZE_STATUS: u8 = 0x81;
/// Size of the Sanitize Status log page.
pub const SANITIZE_LOG_LEN: u32 = 512;
/// NSID meaning "all namespaces" / the controller.
pub const NSID_ALL: u32 = 0xFFFF_FFFF;

/// Errors building NVMe commands, parsing their data, or reported by the device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NvmeError {
    /// A data buffer is shorter than the structure it must hold.
    #[error("{what}: need {need} bytes, got {got}")]
    BufferTooShort {
        /// Which structure.
        what: &'static str,
        /// Bytes required.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// A log page length must be a nonzero multiple of 4 bytes (it is sent in dwords).
    #[error("log page length {0} is not a nonzero multiple of 4")]
    LogLength(u32),
    /// The namespace identifier is not valid for this command.
    #[error("namespace id {0:#x} is not valid here")]
    NamespaceId(u32),
    /// LBA format indexes run 0 to 63.
    #[error("LBA format index {0} outside 0..=63")]
    LbaFormat(u8),
    /// Sanitize overwrite runs 1 to 16 passes.
    #[error("overwrite pass count {0} outside 1..=16")]
    OverwritePasses(u8),
    /// FLBAS selects a format beyond the NLBAF formats the namespace lists.
    #[error("current LBA format {index} is beyond the {count} formats listed")]
    FormatIndex {
        /// Index FLBAS selects.
        index: u8,
        /// Formats listed (NLBAF + 1).
        count: u8,
    },
    /// The controller completed the command with an error status.
    #[error("NVMe command failed: {0}")]
    Status(NvmeStatus),
}

/// One NVMe admin command: `struct nvme_passthru_cmd` (a.k.a. `nvme_admin_cmd`) without
/// its pointers and output field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdminCommand {
    /// Opcode (bits 1:0 encode the data direction: 10b from controller, 01b to it).
    pub opcode: u8,
    /// Flags (fused operation / PSDT); 0.
    pub flags: u8,
    /// Reserved; 0.
    pub rsvd1: u16,
    /// Namespace identifier.
    pub nsid: u32,
    /// Command dword 2; 0 for the commands here.
    pub cdw2: u32,
    /// Command dword 3; 0 for the commands here.
    pub cdw3: u32,
    /// Metadata buffer length; 0 (no metadata buffer is used).
    pub metadata_len: u32,
    /// Data buffer length in bytes.
    pub data_len: u32,
    /// Direction of the data buffer (not a field of the C struct; decides `addr`).
    pub direction: Direction,
    /// Command dword 10.
    pub cdw10: u32,
    /// Command dword 11.
    pub cdw11: u32,
    /// Command dword 12.
    pub cdw12: u32,
    /// Command dword 13.
    pub cdw13: u32,
    /// Command dword 14.
    pub cdw14: u32,
    /// Command dword 15.
    pub cdw15: u32,
    /// Timeout in milliseconds; 0 takes the kernel's admin timeout.
    pub timeout_ms: u32,
}

impl AdminCommand {
    /// A command with every field zero but the opcode, and no data.
    pub fn new(opcode: u8) -> Self {
        Self {
            opcode,
            flags: 0,
            rsvd1: 0,
            nsid: 0,
            cdw2: 0,
            cdw3: 0,
            metadata_len: 0,
            data_len: 0,
            direction: Direction::None,
            cdw10: 0,
            cdw11: 0,
            cdw12: 0,
            cdw13: 0,
            cdw14: 0,
            cdw15: 0,
            timeout_ms: 0,
        }
    }

    /// The same command with an explicit timeout.
    pub fn with_timeout_ms(self, timeout_ms: u32) -> Self {
        Self { timeout_ms, ..self }
    }

    /// The 72-byte `struct nvme_passthru_cmd` for `NVME_IOCTL_ADMIN_CMD`, little-endian,
    /// with `addr` as given, `metadata` 0 and `result` 0. Offsets: opcode 0, flags 1,
    /// rsvd1 2, nsid 4, cdw2 8, cdw3 12, metadata 16, addr 24, metadata_len 32, data_len 36,
    /// cdw10..cdw15 40..60, timeout_ms 64, result 68.
    pub fn to_passthru_bytes(&self, addr: u64) -> [u8; 72] {
        let mut b = [0u8; 72];
        b[0] = self.opcode;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.rsvd1.to_le_bytes());
        b[4..8].copy_from_slice(&self.nsid.to_le_bytes());
        b[8..12].copy_from_slice(&self.cdw2.to_le_bytes());
        b[12..16].copy_from_slice(&self.cdw3.to_le_bytes());
        b[24..32].copy_from_slice(&addr.to_le_bytes());
        b[32..36].copy_from_slice(&self.metadata_len.to_le_bytes());
        b[36..40].copy_from_slice(&self.data_len.to_le_bytes());
        for (i, dw) in [self.cdw10, self.cdw11, self.cdw12, self.cdw13, self.cdw14, self.cdw15].into_iter().enumerate()
        {
            b[40 + 4 * i..44 + 4 * i].copy_from_slice(&dw.to_le_bytes());
        }
        b[64..68].copy_from_slice(&self.timeout_ms.to_le_bytes());
        b
    }
}

/// Identify (NVMe Base 2.1 5.1.13): CDW10 bits 7:0 CNS, bits 31:16 CNTID (0 here); 4096
/// bytes in. libnvme `nvme_identify()` builds the same.
fn identify(cns: u8, nsid: u32) -> AdminCommand {
    AdminCommand {
        nsid,
        cdw10: u32::from(cns),
        data_len: IDENTIFY_LEN,
        direction: Direction::FromDevice,
        ..AdminCommand::new(OPC_IDENTIFY)
    }
}

/// Identify Controller (CNS 01h, NSID 0), as `nvme id-ctrl` sends it.
pub fn identify_controller() -> AdminCommand {
    identify(CNS_CONTROLLER, 0)
}

/// Identify Namespace (CNS 00h) for `nsid`, as `nvme id-ns` sends it: gives NSZE, NLBAF,
/// FLBAS and the LBA formats needed to reformat with the current format.
pub fn identify_namespace(nsid: u32) -> Result<AdminCommand, NvmeError> {
    if nsid == 0 {
        return Err(NvmeError::NamespaceId(nsid));
    }
    Ok(identify(CNS_NAMESPACE, nsid))
}

/// Get Log Page (NVMe Base 2.1 5.1.12): NUMD is the 0-based number of dwords, split into
/// NUMDL (CDW10 bits 31:16) and NUMDU (CDW11 bits 15:0); CDW10 bits 7:0 LID, bit 15 RAE
/// (retain asynchronous event). Same shifts as libnvme `NVME_LOG_CDW10_*`.
pub fn get_log_page(lid: u8, nsid: u32, len: u32, retain_async_event: bool) -> Result<AdminCommand, NvmeError> {
    if len == 0 || !len.is_multiple_of(4) {
        return Err(NvmeError::LogLength(len));
    }
    let numd = len / 4 - 1;
    let cdw10 = u32::from(lid) | (u32::from(retain_async_event) << 15) | ((numd & 0xFFFF) << 16);
    Ok(AdminCommand {
        nsid,
        cdw10,
        cdw11: numd >> 16,
        data_len: len,
        direction: Direction::FromDevice,
        ..AdminCommand::new(OPC_GET_LOG_PAGE)
    })
}

/// Get Log Page for the Sanitize Status log (LID 81h, 512 bytes, NSID FFFFFFFFh, RAE 0) as
/// libnvme `nvme_get_log_sanitize()` / `nvme sanitize-log` reads it: CDW10 = 007F0081h.
pub fn sanitize_status_log() -> AdminCommand {
    AdminCommand {
        nsid: NSID_ALL,
        cdw10: u32::from(LID_SANITIZE_STATUS) | ((SANITIZE_LOG_LEN / 4 - 1) << 16),
        data_len: SANITIZE_LOG_LEN,
        direction: Direction::FromDevice,
        ..AdminCommand::new(OPC_GET_LOG_PAGE)
    }
}

/// The Sanitize Action (SANACT) to perform (NVMe Base 2.1 Figure 372).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SanitizeAction {
    /// 001b Exit Failure Mode.
    ExitFailureMode,
    /// 010b Start a Block Erase sanitize operation.
    BlockErase,
    /// 011b Start an Overwrite sanitize operation.
    Overwrite {
        /// OVRPAT (CDW11): the 32-bit pattern.
        pattern: u32,
        /// Passes, 1 to 16 (OWPASS, CDW10 bits 7:4; 16 travels as 0h).
        passes: u8,
        /// OIPBP (CDW10 bit 8): invert the pattern between passes.
        invert_between_passes: bool,
    },
    /// 100b Start a Crypto Erase sanitize operation.
    CryptoErase,
}

/// A Sanitize command (NVMe Base 2.1 5.1.22).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sanitize {
    /// What to do.
    pub action: SanitizeAction,
    /// AUSE (CDW10 bit 3): unrestricted completion mode, so a failure can be left with
    /// Exit Failure Mode instead of only by a successful sanitize.
    pub allow_unrestricted_exit: bool,
    /// NDAS (CDW10 bit 9): do not deallocate user data after the operation (ignored by
    /// controllers with SANICAP.NDI set).
    pub no_deallocate: bool,
}

impl Sanitize {
    /// CDW10: SANACT bits 2:0, AUSE bit 3, OWPASS bits 7:4, OIPBP bit 8, NDAS bit 9
    /// (libnvme `NVME_SANITIZE_CDW10_*` shifts).
    pub fn cdw10(&self) -> Result<u32, NvmeError> {
        let (sanact, owpass, oipbp) = match self.action {
            SanitizeAction::ExitFailureMode => (1, 0, false),
            SanitizeAction::BlockErase => (2, 0, false),
            SanitizeAction::Overwrite { passes, invert_between_passes, .. } => {
                if !(1..=16).contains(&passes) {
                    return Err(NvmeError::OverwritePasses(passes));
                }
                (3, u32::from(passes) & 0x0F, invert_between_passes)
            }
            SanitizeAction::CryptoErase => (4, 0, false),
        };
        Ok(sanact
            | (u32::from(self.allow_unrestricted_exit) << 3)
            | (owpass << 4)
            | (u32::from(oipbp) << 8)
            | (u32::from(self.no_deallocate) << 9))
    }
}

/// The Sanitize admin command: opcode 84h, NSID 0 (sanitize acts on the whole NVM
/// subsystem), CDW10 from [`Sanitize::cdw10`], CDW11 the overwrite pattern. Completion only
/// means "started": poll [`sanitize_status_log`].
pub fn sanitize(s: &Sanitize) -> Result<AdminCommand, NvmeError> {
    let cdw11 = match s.action {
        SanitizeAction::Overwrite { pattern, .. } => pattern,
        _ => 0,
    };
    Ok(AdminCommand { cdw10: s.cdw10()?, cdw11, ..AdminCommand::new(OPC_SANITIZE) })
}

/// Secure Erase Settings (SES) of Format NVM (NVM Command Set Specification, Format NVM
/// Command Dword 10 bits 11:9).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecureErase {
    /// 000b: no secure erase requested.
    None,
    /// 001b: User Data Erase.
    UserData,
    /// 010b: Cryptographic Erase (needs FNA.CRYES).
    Cryptographic,
}

/// Format NVM: CDW10 LBAFL (bits 3:0), MSET (4) = 0, PI (7:5) = 0, PIL (8) = 0, SES
/// (11:9), LBAFU (13:12) (libnvme `NVME_FORMAT_CDW10_*`). `nsid` may be [`NSID_ALL`] to
/// format every namespace (needed when FNA says formats or secure erases are global).
pub fn format_nvm(nsid: u32, lbaf: u8, ses: SecureErase) -> Result<AdminCommand, NvmeError> {
    if nsid == 0 {
        return Err(NvmeError::NamespaceId(nsid));
    }
    if lbaf > 63 {
        return Err(NvmeError::LbaFormat(lbaf));
    }
    let ses_bits: u32 = match ses {
        SecureErase::None => 0,
        SecureErase::UserData => 1,
        SecureErase::Cryptographic => 2,
    };
    let lbaf = u32::from(lbaf);
    let cdw10 = (lbaf & 0x0F) | (ses_bits << 9) | ((lbaf >> 4) << 12);
    Ok(AdminCommand { nsid, cdw10, ..AdminCommand::new(OPC_FORMAT_NVM) })
}

/// Optional Admin Command Support (OACS, Identify Controller bytes 257:256).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Oacs {
    /// Bit 0: Security Send / Security Receive (TCG Opal, etc.).
    pub security_send_receive: bool,
    /// Bit 1: Format NVM.
    pub format_nvm: bool,
    /// Bit 2: Firmware Commit / Image Download.
    pub firmware: bool,
    /// Bit 3: Namespace Management.
    pub namespace_management: bool,
    /// The raw field.
    pub raw: u16,
}

/// Format NVM Attributes (FNA, Identify Controller byte 524; NVMe Base 2.1 Figure 312).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fna {
    /// Bit 0 (FNS): a format applies to all namespaces.
    pub format_all_namespaces: bool,
    /// Bit 1 (SENS): a secure erase applies to all namespaces.
    pub secure_erase_all_namespaces: bool,
    /// Bit 2 (CRYES): cryptographic erase supported as part of secure erase.
    pub crypto_erase_supported: bool,
    /// Bit 3 (FNVMBS): Format NVM does NOT support NSID FFFFFFFFh.
    pub broadcast_nsid_unsupported: bool,
    /// The raw field.
    pub raw: u8,
}

/// What the controller does to media after a sanitize with No-Deallocate (SANICAP bits
/// 31:30, NODMMAS).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoDeallocModifiesMedia {
    /// 00b: not reported.
    NotReported,
    /// 01b: media is not additionally modified.
    NotModified,
    /// 10b: media is additionally modified after sanitize completes.
    Modified,
    /// 11b: reserved.
    Reserved,
}

/// Sanitize Capabilities (SANICAP, Identify Controller bytes 331:328; NVMe Base 2.1
/// Figure 312).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sanicap {
    /// Bit 0 (CES): Crypto Erase sanitize supported.
    pub crypto_erase: bool,
    /// Bit 1 (BES): Block Erase sanitize supported.
    pub block_erase: bool,
    /// Bit 2 (OWS): Overwrite sanitize supported.
    pub overwrite: bool,
    /// Bit 3 (VERS, NVMe 2.1): Media Verification state supported.
    pub verification: bool,
    /// Bit 29 (NDI): No-Deallocate After Sanitize is inhibited (always deallocates).
    pub no_deallocate_inhibited: bool,
    /// Bits 31:30 (NODMMAS).
    pub nodmmas: NoDeallocModifiesMedia,
    /// The raw field.
    pub raw: u32,
}

impl Sanicap {
    /// Decodes the field.
    pub fn from_raw(raw: u32) -> Self {
        let nodmmas = match raw >> 30 {
            0 => NoDeallocModifiesMedia::NotReported,
            1 => NoDeallocModifiesMedia::NotModified,
            2 => NoDeallocModifiesMedia::Modified,
            _ => NoDeallocModifiesMedia::Reserved,
        };
        Self {
            crypto_erase: raw & 1 != 0,
            block_erase: raw & (1 << 1) != 0,
            overwrite: raw & (1 << 2) != 0,
            verification: raw & (1 << 3) != 0,
            no_deallocate_inhibited: raw & (1 << 29) != 0,
            nodmmas,
            raw,
        }
    }

    /// Whether any sanitize operation is supported (otherwise the Sanitize command is not).
    pub fn any(&self) -> bool {
        self.crypto_erase || self.block_erase || self.overwrite
    }
}

/// The fields of the Identify Controller data structure an erase needs (NVMe Base 2.1
/// Figure 312; same offsets as libnvme `struct nvme_id_ctrl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyController {
    /// PCI Vendor ID (bytes 1:0).
    pub vid: u16,
    /// PCI Subsystem Vendor ID (bytes 3:2).
    pub ssvid: u16,
    /// Serial Number (SN, bytes 23:4).
    pub serial: String,
    /// Model Number (MN, bytes 63:24).
    pub model: String,
    /// Firmware Revision (FR, bytes 71:64).
    pub firmware: String,
    /// Controller ID (bytes 79:78).
    pub cntlid: u16,
    /// Version (VER, bytes 83:80): major in 31:16, minor in 15:8, tertiary in 7:0.
    pub version: u32,
    /// Optional Admin Command Support (bytes 257:256).
    pub oacs: Oacs,
    /// Total NVM Capacity in bytes (TNVMCAP, bytes 295:280); 0 when not reported.
    pub tnvmcap: u128,
    /// Sanitize Capabilities (bytes 331:328).
    pub sanicap: Sanicap,
    /// Number of Namespaces (NN, bytes 519:516).
    pub nn: u32,
    /// Optional NVM Command Support (ONCS, bytes 521:520): bit 2 Dataset Management, bit 3
    /// Write Zeroes.
    pub oncs: u16,
    /// Format NVM Attributes (byte 524).
    pub fna: Fna,
    /// Volatile Write Cache (VWC, byte 525): bit 0 present.
    pub vwc: u8,
}

fn need(what: &'static str, buf: &[u8], len: usize) -> Result<(), NvmeError> {
    if buf.len() < len { Err(NvmeError::BufferTooShort { what, need: len, got: buf.len() }) } else { Ok(()) }
}

impl IdentifyController {
    /// Parses the 4096-byte Identify Controller data.
    pub fn parse(buf: &[u8]) -> Result<Self, NvmeError> {
        need("Identify Controller", buf, 4096)?;
        let oacs = le_u16(buf, 256);
        let fna = buf[524];
        let tnvmcap = u128::from(le_u64(buf, 280)) | (u128::from(le_u64(buf, 288)) << 64);
        Ok(Self {
            vid: le_u16(buf, 0),
            ssvid: le_u16(buf, 2),
            serial: trimmed_ascii(&buf[4..24]),
            model: trimmed_ascii(&buf[24..64]),
            firmware: trimmed_ascii(&buf[64..72]),
            cntlid: le_u16(buf, 78),
            version: le_u32(buf, 80),
            oacs: Oacs {
                security_send_receive: oacs & 1 != 0,
                format_nvm: oacs & (1 << 1) != 0,
                firmware: oacs & (1 << 2) != 0,
                namespace_management: oacs & (1 << 3) != 0,
                raw: oacs,
            },
            tnvmcap,
            sanicap: Sanicap::from_raw(le_u32(buf, 328)),
            nn: le_u32(buf, 516),
            oncs: le_u16(buf, 520),
            fna: Fna {
                format_all_namespaces: fna & 1 != 0,
                secure_erase_all_namespaces: fna & (1 << 1) != 0,
                crypto_erase_supported: fna & (1 << 2) != 0,
                broadcast_nsid_unsupported: fna & (1 << 3) != 0,
                raw: fna,
            },
            vwc: buf[525],
        })
    }

    /// ONCS bit 3: Write Zeroes supported.
    pub fn write_zeroes(&self) -> bool {
        self.oncs & (1 << 3) != 0
    }

    /// ONCS bit 2: Dataset Management (deallocate) supported.
    pub fn dataset_management(&self) -> bool {
        self.oncs & (1 << 2) != 0
    }
}

/// One LBA Format entry (Identify Namespace bytes 128 + 4n; NVM Command Set LBAF).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LbaFormat {
    /// Metadata Size (MS, bits 15:0) in bytes per block.
    pub metadata_size: u16,
    /// LBA Data Size (LBADS, bits 23:16) as a power of two; 0 = format not available.
    pub lbads: u8,
    /// Relative Performance (RP, bits 25:24): 0 best .. 3 degraded.
    pub relative_performance: u8,
}

impl LbaFormat {
    /// Decodes one 32-bit entry.
    pub fn from_raw(raw: u32) -> Self {
        let [ms_lo, ms_hi, lbads, rp] = raw.to_le_bytes();
        Self { metadata_size: u16::from_le_bytes([ms_lo, ms_hi]), lbads, relative_performance: rp & 0x03 }
    }

    /// Block size in bytes; `None` when the format is not available (LBADS below 9) or
    /// too large to represent.
    pub fn data_size(&self) -> Option<u32> {
        if self.lbads < 9 { None } else { 1u32.checked_shl(u32::from(self.lbads)) }
    }
}

/// What reading a deallocated block returns (DLFEAT bits 2:0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeallocatedRead {
    /// 000b: not reported.
    NotReported,
    /// 001b: all bytes 00h.
    Zeros,
    /// 010b: all bytes FFh.
    Ones,
    /// Anything else (reserved).
    Reserved(u8),
}

/// The fields of the Identify Namespace data structure an erase needs (NVM Command Set
/// Specification, Identify Namespace; libnvme `struct nvme_id_ns`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentifyNamespace {
    /// Namespace Size in blocks (NSZE, bytes 7:0).
    pub nsze: u64,
    /// Namespace Capacity in blocks (NCAP, bytes 15:8).
    pub ncap: u64,
    /// Namespace Utilization in blocks (NUSE, bytes 23:16).
    pub nuse: u64,
    /// Formatted LBA Size (FLBAS, byte 26), raw.
    pub flbas: u8,
    /// Index of the format in use: FLBAS bits 3:0, plus bits 6:5 as bits 5:4.
    pub current_format: u8,
    /// FLBAS bit 4: metadata transferred at the end of the data LBA.
    pub extended_metadata: bool,
    /// Deallocate Logical Block Features (DLFEAT, byte 33), decoded bits 2:0.
    pub deallocated_read: DeallocatedRead,
    /// The LBA formats listed (NLBAF + 1 entries from byte 128).
    pub formats: Vec<LbaFormat>,
}

impl IdentifyNamespace {
    /// Parses the 4096-byte Identify Namespace data. Fails when FLBAS points past the
    /// formats NLBAF (byte 25, 0-based) lists.
    pub fn parse(buf: &[u8]) -> Result<Self, NvmeError> {
        need("Identify Namespace", buf, 4096)?;
        let nlbaf = buf[25].min(63);
        let count = nlbaf + 1;
        let flbas = buf[26];
        let current_format = (flbas & 0x0F) | (((flbas >> 5) & 0x03) << 4);
        if current_format >= count {
            return Err(NvmeError::FormatIndex { index: current_format, count });
        }
        let formats = (0..usize::from(count)).map(|i| LbaFormat::from_raw(le_u32(buf, 128 + 4 * i))).collect();
        let deallocated_read = match buf[33] & 0x07 {
            0 => DeallocatedRead::NotReported,
            1 => DeallocatedRead::Zeros,
            2 => DeallocatedRead::Ones,
            other => DeallocatedRead::Reserved(other),
        };
        Ok(Self {
            nsze: le_u64(buf, 0),
            ncap: le_u64(buf, 8),
            nuse: le_u64(buf, 16),
            flbas,
            current_format,
            extended_metadata: flbas & 0x10 != 0,
            deallocated_read,
            formats,
        })
    }

    /// The LBA format in use (always present in parsed data).
    pub fn current(&self) -> Option<LbaFormat> {
        self.formats.get(usize::from(self.current_format)).copied()
    }

    /// Block size in bytes of the format in use.
    pub fn block_size(&self) -> Option<u32> {
        self.current().and_then(|f| f.data_size())
    }
}

/// Sanitize Operation Status (SSTAT bits 2:0; NVMe Base 2.1 Figure 291).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SanitizeState {
    /// 000b: the NVM subsystem has never been sanitized.
    NeverSanitized,
    /// 001b: the most recent sanitize operation completed successfully.
    Completed,
    /// 010b: a sanitize operation is in progress.
    InProgress,
    /// 011b: the most recent sanitize operation failed.
    Failed,
    /// 100b: the most recent sanitize operation, which asked for No-Deallocate After
    /// Sanitize, completed successfully but with all user data deallocated.
    CompletedWithDeallocation,
    /// 101b-111b: reserved.
    Reserved(u8),
}

/// The Sanitize Status log page (LID 81h; NVMe Base 2.1 Figure 291; libnvme
/// `struct nvme_sanitize_log_page`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SanitizeStatusLog {
    /// SPROG (bytes 1:0): progress numerator over 65536 while in progress, FFFFh otherwise.
    pub sprog: u16,
    /// SSTAT (bytes 3:2), raw.
    pub sstat: u16,
    /// SSTAT bits 2:0.
    pub state: SanitizeState,
    /// SSTAT bits 7:3: overwrite passes completed by the most recent overwrite.
    pub overwrite_passes_completed: u8,
    /// SSTAT bit 8 (GDE): no user data has been written since the last successful sanitize
    /// (nor since manufacture) — the media holds no user data.
    pub global_data_erased: bool,
    /// SCDW10 (bytes 7:4): CDW10 of the Sanitize command that started the operation.
    pub scdw10: u32,
    /// Estimated seconds for Overwrite (ETO, bytes 11:8); `None` = FFFFFFFFh, not reported.
    pub est_overwrite_secs: Option<u32>,
    /// Estimated seconds for Block Erase (ETBE, bytes 15:12).
    pub est_block_erase_secs: Option<u32>,
    /// Estimated seconds for Crypto Erase (ETCE, bytes 19:16).
    pub est_crypto_erase_secs: Option<u32>,
    /// Estimated seconds for Overwrite with No-Deallocate media modification (bytes 23:20).
    pub est_overwrite_no_dealloc_secs: Option<u32>,
    /// Estimated seconds for Block Erase with No-Deallocate media modification (27:24).
    pub est_block_erase_no_dealloc_secs: Option<u32>,
    /// Estimated seconds for Crypto Erase with No-Deallocate media modification (31:28).
    pub est_crypto_erase_no_dealloc_secs: Option<u32>,
}

impl SanitizeStatusLog {
    /// Parses the log page (the first 32 bytes are read; the page is 512).
    pub fn parse(buf: &[u8]) -> Result<Self, NvmeError> {
        need("Sanitize Status log", buf, 32)?;
        let sstat = le_u16(buf, 2);
        let [sstat_lo, sstat_hi] = sstat.to_le_bytes();
        let state = match sstat_lo & 0x07 {
            0 => SanitizeState::NeverSanitized,
            1 => SanitizeState::Completed,
            2 => SanitizeState::InProgress,
            3 => SanitizeState::Failed,
            4 => SanitizeState::CompletedWithDeallocation,
            other => SanitizeState::Reserved(other),
        };
        let est = |off: usize| Some(le_u32(buf, off)).filter(|v| *v != u32::MAX);
        Ok(Self {
            sprog: le_u16(buf, 0),
            sstat,
            state,
            overwrite_passes_completed: sstat_lo >> 3,
            global_data_erased: sstat_hi & 0x01 != 0,
            scdw10: le_u32(buf, 4),
            est_overwrite_secs: est(8),
            est_block_erase_secs: est(12),
            est_crypto_erase_secs: est(16),
            est_overwrite_no_dealloc_secs: est(20),
            est_block_erase_no_dealloc_secs: est(24),
            est_crypto_erase_no_dealloc_secs: est(28),
        })
    }

    /// Percent complete while in progress (SPROG / 65536, as nvme-cli prints it).
    pub fn percent(&self) -> Option<f64> {
        (self.state == SanitizeState::InProgress).then(|| f64::from(self.sprog) * 100.0 / 65536.0)
    }
}

/// The 15-bit Status Field of a completion (NVMe Base 2.1 4.2.3, Figure 101): SC bits 7:0,
/// SCT bits 10:8, CRD bits 12:11, M bit 13, DNR bit 14. This is the positive value the
/// Linux `NVME_IOCTL_ADMIN_CMD` returns (the kernel stores `le16_to_cpu(cqe->status) >> 1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NvmeStatus(u16);

impl NvmeStatus {
    /// From the positive return value of the passthru ioctl.
    pub fn from_ioctl(ret: u16) -> Self {
        Self(ret & 0x7FFF)
    }

    /// From completion queue entry dword 3 (status in bits 31:17, phase tag in bit 16).
    pub fn from_cqe_dw3(dw3: u32) -> Self {
        let [_, _, lo, hi] = dw3.to_le_bytes();
        Self(u16::from_le_bytes([lo, hi]) >> 1)
    }

    /// The raw 15-bit status.
    pub fn raw(self) -> u16 {
        self.0
    }

    /// Status Code.
    pub fn sc(self) -> u8 {
        self.0.to_le_bytes()[0]
    }

    /// Status Code Type: 0 generic, 1 command specific, 2 media and data integrity,
    /// 3 path related, 7 vendor specific.
    pub fn sct(self) -> u8 {
        self.0.to_le_bytes()[1] & 0x07
    }

    /// Command Retry Delay index.
    pub fn crd(self) -> u8 {
        (self.0.to_le_bytes()[1] >> 3) & 0x03
    }

    /// More: the Error Information log has more detail.
    pub fn more(self) -> bool {
        self.0 & 0x2000 != 0
    }

    /// Do Not Retry: the same command would fail again.
    pub fn dnr(self) -> bool {
        self.0 & 0x4000 != 0
    }

    /// Successful Completion (SCT 0, SC 0).
    pub fn is_success(self) -> bool {
        self.sct() == 0 && self.sc() == 0
    }

    /// `Ok` on success, else the status as an error.
    pub fn check(self) -> Result<(), NvmeError> {
        if self.is_success() { Ok(()) } else { Err(NvmeError::Status(self)) }
    }

    /// The spec's name for the status code (NVMe Base 2.1 Figures 102-106; the
    /// NVM-command-set codes of the NVM Command Set spec), as nvme-cli/libnvme
    /// `nvme_status_to_string()` names them.
    pub fn name(self) -> &'static str {
        status_name(self.sct(), self.sc())
    }
}

fn status_name(sct: u8, sc: u8) -> &'static str {
    match (sct, sc) {
        (0, 0x00) => "Successful Completion",
        (0, 0x01) => "Invalid Command Opcode",
        (0, 0x02) => "Invalid Field in Command",
        (0, 0x03) => "Command ID Conflict",
        (0, 0x04) => "Data Transfer Error",
        (0, 0x05) => "Commands Aborted due to Power Loss Notification",
        (0, 0x06) => "Internal Error",
        (0, 0x07) => "Command Abort Requested",
        (0, 0x08) => "Command Aborted due to SQ Deletion",
        (0, 0x09) => "Command Aborted due to Failed Fused Command",
        (0, 0x0A) => "Command Aborted due to Missing Fused Command",
        (0, 0x0B) => "Invalid Namespace or Format",
        (0, 0x0C) => "Command Sequence Error",
        (0, 0x0D) => "Invalid SGL Segment Descriptor",
        (0, 0x0E) => "Invalid Number of SGL Descriptors",
        (0, 0x0F) => "Data SGL Length Invalid",
        (0, 0x10) => "Metadata SGL Length Invalid",
        (0, 0x11) => "SGL Descriptor Type Invalid",
        (0, 0x12) => "Invalid Use of Controller Memory Buffer",
        (0, 0x13) => "PRP Offset Invalid",
        (0, 0x14) => "Atomic Write Unit Exceeded",
        (0, 0x15) => "Operation Denied",
        (0, 0x16) => "SGL Offset Invalid",
        (0, 0x18) => "Host Identifier Inconsistent Format",
        (0, 0x19) => "Keep Alive Timer Expired",
        (0, 0x1A) => "Keep Alive Timeout Invalid",
        (0, 0x1B) => "Command Aborted due to Preempt and Abort",
        (0, 0x1C) => "Sanitize Failed",
        (0, 0x1D) => "Sanitize In Progress",
        (0, 0x1E) => "SGL Data Block Granularity Invalid",
        (0, 0x1F) => "Command Not Supported for Queue in CMB",
        (0, 0x20) => "Namespace is Write Protected",
        (0, 0x21) => "Command Interrupted",
        (0, 0x22) => "Transient Transport Error",
        (0, 0x23) => "Command Prohibited by Command and Feature Lockdown",
        (0, 0x24) => "Admin Command Media Not Ready",
        (0, 0x80) => "LBA Out of Range",
        (0, 0x81) => "Capacity Exceeded",
        (0, 0x82) => "Namespace Not Ready",
        (0, 0x83) => "Reservation Conflict",
        (0, 0x84) => "Format In Progress",
        (1, 0x00) => "Completion Queue Invalid",
        (1, 0x01) => "Invalid Queue Identifier",
        (1, 0x02) => "Invalid Queue Size",
        (1, 0x03) => "Abort Command Limit Exceeded",
        (1, 0x05) => "Asynchronous Event Request Limit Exceeded",
        (1, 0x06) => "Invalid Firmware Slot",
        (1, 0x07) => "Invalid Firmware Image",
        (1, 0x08) => "Invalid Interrupt Vector",
        (1, 0x09) => "Invalid Log Page",
        (1, 0x0A) => "Invalid Format",
        (1, 0x0B) => "Firmware Activation Requires Conventional Reset",
        (1, 0x0C) => "Invalid Queue Deletion",
        (1, 0x0D) => "Feature Identifier Not Saveable",
        (1, 0x0E) => "Feature Not Changeable",
        (1, 0x0F) => "Feature Not Namespace Specific",
        (1, 0x10) => "Firmware Activation Requires NVM Subsystem Reset",
        (1, 0x11) => "Firmware Activation Requires Controller Level Reset",
        (1, 0x12) => "Firmware Activation Requires Maximum Time Violation",
        (1, 0x13) => "Firmware Activation Prohibited",
        (1, 0x14) => "Overlapping Range",
        (1, 0x15) => "Namespace Insufficient Capacity",
        (1, 0x16) => "Namespace Identifier Unavailable",
        (1, 0x18) => "Namespace Already Attached",
        (1, 0x19) => "Namespace Is Private",
        (1, 0x1A) => "Namespace Not Attached",
        (1, 0x1B) => "Thin Provisioning Not Supported",
        (1, 0x1C) => "Controller List Invalid",
        (1, 0x1D) => "Device Self-test In Progress",
        (1, 0x1E) => "Boot Partition Write Prohibited",
        (1, 0x1F) => "Invalid Controller Identifier",
        (1, 0x20) => "Invalid Secondary Controller State",
        (1, 0x21) => "Invalid Number of Controller Resources",
        (1, 0x22) => "Invalid Resource Identifier",
        (1, 0x23) => "Sanitize Prohibited While Persistent Memory Region is Enabled",
        (1, 0x24) => "ANA Group Identifier Invalid",
        (1, 0x25) => "ANA Attach Failed",
        (1, 0x80) => "Conflicting Attributes",
        (1, 0x81) => "Invalid Protection Information",
        (1, 0x82) => "Attempted Write to Read Only Range",
        (2, 0x80) => "Write Fault",
        (2, 0x81) => "Unrecovered Read Error",
        (2, 0x82) => "End-to-end Guard Check Error",
        (2, 0x83) => "End-to-end Application Tag Check Error",
        (2, 0x84) => "End-to-end Reference Tag Check Error",
        (2, 0x85) => "Compare Failure",
        (2, 0x86) => "Access Denied",
        (2, 0x87) => "Deallocated or Unwritten Logical Block",
        (3, 0x00) => "Internal Path Error",
        (3, 0x01) => "Asymmetric Access Persistent Loss",
        (3, 0x02) => "Asymmetric Access Inaccessible",
        (3, 0x03) => "Asymmetric Access Transition",
        (3, 0x60) => "Controller Pathing Error",
        (3, 0x70) => "Host Pathing Error",
        (3, 0x71) => "Command Aborted By Host",
        (7, _) => "Vendor Specific",
        _ => "Unknown Status",
    }
}

impl fmt::Display for NvmeStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SCT {:#x}, SC {:#04x}", self.name(), self.sct(), self.sc())?;
        if self.more() {
            f.write_str(", MORE")?;
        }
        if self.dnr() {
            f.write_str(", DNR")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // include/uapi/linux/nvme_ioctl.h struct nvme_passthru_cmd: 72 bytes, offsets as listed.
    #[test]
    fn passthru_layout() {
        let cmd = AdminCommand {
            flags: 0x01,
            rsvd1: 0x0302,
            nsid: 0x0706_0504,
            cdw2: 0x0B0A_0908,
            cdw3: 0x0F0E_0D0C,
            metadata_len: 0x2322_2120,
            data_len: 0x2726_2524,
            cdw10: 0x2B2A_2928,
            cdw11: 0x2F2E_2D2C,
            cdw12: 0x3332_3130,
            cdw13: 0x3736_3534,
            cdw14: 0x3B3A_3938,
            cdw15: 0x3F3E_3D3C,
            timeout_ms: 0x4342_4140,
            ..AdminCommand::new(0x00)
        };
        let b = cmd.to_passthru_bytes(0x1F1E_1D1C_1B1A_1918);
        // Every byte holds its own offset, except metadata (16..24) and result (68..72).
        let expected: Vec<u8> = (0u8..72).map(|i| if (16..24).contains(&i) || i >= 68 { 0 } else { i }).collect();
        assert_eq!(b.as_slice(), expected.as_slice());
    }

    // NVMe Base 2.1 5.1.13 / libnvme nvme_identify_ctrl(): opcode 06h, CNS 1, NSID 0,
    // 4096 bytes in.
    #[test]
    fn identify_controller_command() {
        let cmd = identify_controller();
        assert_eq!((cmd.opcode, cmd.nsid, cmd.cdw10, cmd.cdw11), (0x06, 0, 1, 0));
        assert_eq!((cmd.data_len, cmd.direction), (4096, Direction::FromDevice));
        let b = cmd.to_passthru_bytes(0xDEAD_0000);
        assert_eq!(&b[0..8], &[0x06, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(&b[24..32], &[0x00, 0x00, 0xAD, 0xDE, 0, 0, 0, 0]);
        assert_eq!(&b[36..44], &[0x00, 0x10, 0, 0, 0x01, 0, 0, 0]);
    }

    // NVMe Base 2.1 5.1.13 / libnvme nvme_identify_ns(): CNS 0 with the namespace's NSID.
    #[test]
    fn identify_namespace_command() {
        let cmd = identify_namespace(1).unwrap();
        assert_eq!((cmd.opcode, cmd.nsid, cmd.cdw10, cmd.data_len), (0x06, 1, 0, 4096));
        assert_eq!(identify_namespace(0), Err(NvmeError::NamespaceId(0)));
    }

    // libnvme nvme_get_log(): numd = (len >> 2) - 1; cdw10 = lid | rae << 15 |
    // (numd & 0xffff) << 16; cdw11 = numd >> 16. 512 bytes -> NUMD 127 -> 007F0081h.
    #[test]
    fn sanitize_log_command() {
        let cmd = sanitize_status_log();
        assert_eq!((cmd.opcode, cmd.nsid, cmd.cdw10, cmd.cdw11), (0x02, 0xFFFF_FFFF, 0x007F_0081, 0));
        assert_eq!((cmd.data_len, cmd.direction), (512, Direction::FromDevice));
        assert_eq!(get_log_page(LID_SANITIZE_STATUS, NSID_ALL, 512, false).unwrap(), cmd);
    }

    // NVMe Base 2.1 5.1.12: NUMD is 0-based dwords; NUMDL in CDW10 31:16, NUMDU in CDW11
    // 15:0; RAE is CDW10 bit 15.
    #[test]
    fn get_log_numd_split() {
        let c = get_log_page(0x02, NSID_ALL, 4096, true).unwrap();
        assert_eq!((c.cdw10, c.cdw11), (0x03FF_8002, 0));
        let c = get_log_page(0x07, 1, 256 * 1024, false).unwrap();
        assert_eq!((c.cdw10, c.cdw11), (0xFFFF_0007, 0));
        let c = get_log_page(0x07, 1, 256 * 1024 + 4, false).unwrap();
        assert_eq!((c.cdw10, c.cdw11), (0x0000_0007, 1));
        assert_eq!(get_log_page(0x81, 0, 0, false), Err(NvmeError::LogLength(0)));
        assert_eq!(get_log_page(0x81, 0, 510, false), Err(NvmeError::LogLength(510)));
    }

    // NVMe Base 2.1 Figure 372 (SANACT 2:0, AUSE 3, OWPASS 7:4, OIPBP 8, NDAS 9) and
    // Figure 373 (OVRPAT in CDW11); `nvme sanitize -a 4` sends CDW10 = 4.
    #[test]
    fn sanitize_commands() {
        let crypto =
            Sanitize { action: SanitizeAction::CryptoErase, allow_unrestricted_exit: false, no_deallocate: false };
        let cmd = sanitize(&crypto).unwrap();
        assert_eq!((cmd.opcode, cmd.nsid, cmd.cdw10, cmd.cdw11), (0x84, 0, 0x04, 0));
        assert_eq!((cmd.data_len, cmd.direction), (0, Direction::None));

        let ause = Sanitize { allow_unrestricted_exit: true, ..crypto };
        assert_eq!(sanitize(&ause).unwrap().cdw10, 0x0C);

        let block =
            Sanitize { action: SanitizeAction::BlockErase, allow_unrestricted_exit: false, no_deallocate: true };
        assert_eq!(sanitize(&block).unwrap().cdw10, 0x202);

        let exit = Sanitize { action: SanitizeAction::ExitFailureMode, ..crypto };
        assert_eq!(sanitize(&exit).unwrap().cdw10, 0x01);

        let ow = Sanitize {
            action: SanitizeAction::Overwrite { pattern: 0xA5A5_5A5A, passes: 3, invert_between_passes: true },
            allow_unrestricted_exit: false,
            no_deallocate: false,
        };
        let cmd = sanitize(&ow).unwrap();
        assert_eq!((cmd.cdw10, cmd.cdw11), (0x133, 0xA5A5_5A5A));

        let sixteen = Sanitize {
            action: SanitizeAction::Overwrite { pattern: 0, passes: 16, invert_between_passes: false },
            ..ow
        };
        assert_eq!(sanitize(&sixteen).unwrap().cdw10, 0x03, "16 passes travel as OWPASS 0");
        for bad in [0, 17] {
            let s = Sanitize {
                action: SanitizeAction::Overwrite { pattern: 0, passes: bad, invert_between_passes: false },
                ..ow
            };
            assert_eq!(sanitize(&s), Err(NvmeError::OverwritePasses(bad)));
        }
    }

    // libnvme nvme_format_nvm(): cdw10 = lbafl | mset<<4 | pi<<5 | pil<<8 | ses<<9 | lbafu<<12.
    #[test]
    fn format_commands() {
        let cmd = format_nvm(1, 0, SecureErase::Cryptographic).unwrap();
        assert_eq!((cmd.opcode, cmd.nsid, cmd.cdw10), (0x80, 1, 0x400));
        assert_eq!((cmd.data_len, cmd.direction), (0, Direction::None));
        assert_eq!(format_nvm(NSID_ALL, 1, SecureErase::UserData).unwrap().cdw10, 0x201);
        assert_eq!(format_nvm(1, 17, SecureErase::UserData).unwrap().cdw10, 0x1201);
        assert_eq!(format_nvm(1, 63, SecureErase::None).unwrap().cdw10, 0x300F);
        assert_eq!(format_nvm(1, 64, SecureErase::None), Err(NvmeError::LbaFormat(64)));
        assert_eq!(format_nvm(0, 0, SecureErase::None), Err(NvmeError::NamespaceId(0)));
        assert_eq!(format_nvm(1, 0, SecureErase::None).unwrap().with_timeout_ms(600_000).timeout_ms, 600_000);
    }

    // NVMe opcode bits 1:0 give the data transfer direction (NVMe Base 2.1 Figure 28).
    #[test]
    fn directions_match_opcodes() {
        let cmds = [
            identify_controller(),
            identify_namespace(1).unwrap(),
            sanitize_status_log(),
            sanitize(&Sanitize {
                action: SanitizeAction::BlockErase,
                allow_unrestricted_exit: false,
                no_deallocate: false,
            })
            .unwrap(),
            format_nvm(1, 0, SecureErase::UserData).unwrap(),
        ];
        for c in cmds {
            let want = match c.opcode & 0x03 {
                0b10 => Direction::FromDevice,
                0b01 => Direction::ToDevice,
                _ => Direction::None,
            };
            assert_eq!(c.direction, want, "opcode {:#04x}", c.opcode);
        }
    }

    fn put(buf: &mut [u8], off: usize, bytes: &[u8]) {
        buf[off..off + bytes.len()].copy_from_slice(bytes);
    }

    fn padded(s: &str, len: usize) -> Vec<u8> {
        let mut v = s.as_bytes().to_vec();
        v.resize(len, b' ');
        v
    }

    // NVMe Base 2.1 Figure 312 offsets.
    #[test]
    fn parse_identify_controller() {
        let mut buf = vec![0u8; 4096];
        put(&mut buf, 0, &0x144Du16.to_le_bytes());
        put(&mut buf, 2, &0x144Du16.to_le_bytes());
        put(&mut buf, 4, &padded("S4EWNX0R123456", 20));
        put(&mut buf, 24, &padded("Samsung SSD 980 PRO 1TB", 40));
        put(&mut buf, 64, &padded("5B2QGXA7", 8));
        put(&mut buf, 78, &6u16.to_le_bytes());
        put(&mut buf, 80, &0x0001_0300u32.to_le_bytes());
        put(&mut buf, 256, &0x0017u16.to_le_bytes());
        put(&mut buf, 280, &1_000_204_886_016u64.to_le_bytes());
        put(&mut buf, 328, &0x6000_0003u32.to_le_bytes());
        put(&mut buf, 516, &1u32.to_le_bytes());
        put(&mut buf, 520, &0x005Fu16.to_le_bytes());
        buf[524] = 0x05;
        buf[525] = 0x07;
        let id = IdentifyController::parse(&buf).unwrap();
        assert_eq!((id.vid, id.ssvid, id.cntlid, id.version), (0x144D, 0x144D, 6, 0x0001_0300));
        assert_eq!(id.serial, "S4EWNX0R123456");
        assert_eq!(id.model, "Samsung SSD 980 PRO 1TB");
        assert_eq!(id.firmware, "5B2QGXA7");
        assert_eq!(
            id.oacs,
            Oacs {
                security_send_receive: true,
                format_nvm: true,
                firmware: true,
                namespace_management: false,
                raw: 0x17
            }
        );
        assert_eq!(id.tnvmcap, 1_000_204_886_016);
        assert_eq!(
            id.sanicap,
            Sanicap {
                crypto_erase: true,
                block_erase: true,
                overwrite: false,
                verification: false,
                no_deallocate_inhibited: true,
                nodmmas: NoDeallocModifiesMedia::NotModified,
                raw: 0x6000_0003,
            }
        );
        assert!(id.sanicap.any());
        assert_eq!(id.nn, 1);
        assert!(id.write_zeroes() && id.dataset_management());
        assert_eq!(
            id.fna,
            Fna {
                format_all_namespaces: true,
                secure_erase_all_namespaces: false,
                crypto_erase_supported: true,
                broadcast_nsid_unsupported: false,
                raw: 0x05,
            }
        );
        assert_eq!(id.vwc, 0x07);
        assert_eq!(
            IdentifyController::parse(&buf[..4095]),
            Err(NvmeError::BufferTooShort { what: "Identify Controller", need: 4096, got: 4095 })
        );
    }

    // NVMe Base 2.1 Figure 312 SANICAP: CES 0, BES 1, OWS 2, VERS 3, NDI 29, NODMMAS 31:30.
    #[test]
    fn sanicap_nodmmas_values() {
        assert_eq!(Sanicap::from_raw(0).nodmmas, NoDeallocModifiesMedia::NotReported);
        assert_eq!(Sanicap::from_raw(0x8000_0004).nodmmas, NoDeallocModifiesMedia::Modified);
        assert_eq!(Sanicap::from_raw(0xC000_0000).nodmmas, NoDeallocModifiesMedia::Reserved);
        assert!(Sanicap::from_raw(0x4).overwrite);
        assert!(Sanicap::from_raw(0x8).verification);
        assert!(!Sanicap::from_raw(0x2000_0000).any());
    }

    // NVM Command Set Identify Namespace: NSZE 0, NCAP 8, NUSE 16, NLBAF 25, FLBAS 26,
    // DLFEAT 33, LBAF[n] at 128 + 4n (MS 15:0, LBADS 23:16, RP 25:24).
    #[test]
    fn parse_identify_namespace() {
        let mut buf = vec![0u8; 4096];
        put(&mut buf, 0, &1_953_525_168u64.to_le_bytes());
        put(&mut buf, 8, &1_953_525_168u64.to_le_bytes());
        put(&mut buf, 16, &12_345u64.to_le_bytes());
        buf[25] = 1; // two formats
        buf[26] = 0x01; // format 1
        buf[33] = 0x09; // deallocated reads zeros, Write Zeroes deallocate
        put(&mut buf, 128, &0x0209_0000u32.to_le_bytes()); // 512 B, RP 2
        put(&mut buf, 132, &0x000C_0008u32.to_le_bytes()); // 4096 B, 8 B metadata
        let ns = IdentifyNamespace::parse(&buf).unwrap();
        assert_eq!((ns.nsze, ns.ncap, ns.nuse), (1_953_525_168, 1_953_525_168, 12_345));
        assert_eq!(ns.current_format, 1);
        assert!(!ns.extended_metadata);
        assert_eq!(ns.deallocated_read, DeallocatedRead::Zeros);
        assert_eq!(ns.formats.len(), 2);
        assert_eq!(ns.formats[0], LbaFormat { metadata_size: 0, lbads: 9, relative_performance: 2 });
        assert_eq!(ns.current(), Some(LbaFormat { metadata_size: 8, lbads: 12, relative_performance: 0 }));
        assert_eq!(ns.block_size(), Some(4096));

        // FLBAS bits 6:5 extend the index beyond 15.
        buf[25] = 63;
        buf[26] = 0x31; // bits 6:5 = 01b, bit 4 extended metadata, bits 3:0 = 1 -> index 17
        put(&mut buf, 128 + 4 * 17, &0x0009_0000u32.to_le_bytes());
        let ns = IdentifyNamespace::parse(&buf).unwrap();
        assert_eq!((ns.current_format, ns.formats.len()), (17, 64));
        assert!(ns.extended_metadata);
        assert_eq!(ns.block_size(), Some(512));

        buf[25] = 0;
        buf[26] = 0x02;
        assert_eq!(IdentifyNamespace::parse(&buf), Err(NvmeError::FormatIndex { index: 2, count: 1 }));
        assert_eq!(LbaFormat::from_raw(0).data_size(), None);
        assert_eq!(LbaFormat::from_raw(0x0020_0000).data_size(), None, "2^32 does not fit");
    }

    // NVMe Base 2.1 Figure 291; nvme-cli prints FFFFFFFFh as "No time period reported".
    #[test]
    fn parse_sanitize_log() {
        let mut buf = vec![0u8; 512];
        put(&mut buf, 0, &0x8000u16.to_le_bytes());
        put(&mut buf, 2, &0x0012u16.to_le_bytes()); // in progress, 2 passes done
        put(&mut buf, 4, &0x0000_0133u32.to_le_bytes());
        put(&mut buf, 8, &3600u32.to_le_bytes());
        for off in [12, 16, 20, 24, 28] {
            put(&mut buf, off, &u32::MAX.to_le_bytes());
        }
        put(&mut buf, 16, &0u32.to_le_bytes());
        let log = SanitizeStatusLog::parse(&buf).unwrap();
        assert_eq!(log.state, SanitizeState::InProgress);
        assert_eq!(log.overwrite_passes_completed, 2);
        assert!(!log.global_data_erased);
        assert_eq!(log.scdw10, 0x133);
        assert_eq!(log.percent(), Some(50.0));
        assert_eq!(log.est_overwrite_secs, Some(3600));
        assert_eq!(log.est_block_erase_secs, None);
        assert_eq!(log.est_crypto_erase_secs, Some(0));
        assert_eq!(
            (
                log.est_overwrite_no_dealloc_secs,
                log.est_block_erase_no_dealloc_secs,
                log.est_crypto_erase_no_dealloc_secs
            ),
            (None, None, None)
        );

        // "0x101": completed successfully, Global Data Erased (a real nvme sanitize-log).
        put(&mut buf, 0, &0xFFFFu16.to_le_bytes());
        put(&mut buf, 2, &0x0101u16.to_le_bytes());
        let log = SanitizeStatusLog::parse(&buf).unwrap();
        assert_eq!(log.state, SanitizeState::Completed);
        assert!(log.global_data_erased);
        assert_eq!(log.percent(), None);

        for (raw, state) in [
            (0u16, SanitizeState::NeverSanitized),
            (3, SanitizeState::Failed),
            (4, SanitizeState::CompletedWithDeallocation),
            (7, SanitizeState::Reserved(7)),
        ] {
            put(&mut buf, 2, &raw.to_le_bytes());
            assert_eq!(SanitizeStatusLog::parse(&buf).unwrap().state, state);
        }
        assert!(SanitizeStatusLog::parse(&buf[..31]).is_err());
    }

    // NVMe Base 2.1 Figure 101: DNR bit 14, M bit 13, CRD 12:11, SCT 10:8, SC 7:0.
    #[test]
    fn status_words() {
        let ok = NvmeStatus::from_ioctl(0);
        assert!(ok.is_success());
        assert_eq!(ok.check(), Ok(()));

        let invalid_field = NvmeStatus::from_ioctl(0x4002);
        assert_eq!((invalid_field.sct(), invalid_field.sc(), invalid_field.dnr()), (0, 0x02, true));
        assert_eq!(invalid_field.to_string(), "Invalid Field in Command (SCT 0x0, SC 0x02, DNR)");
        assert_eq!(invalid_field.check(), Err(NvmeError::Status(invalid_field)));
        assert_eq!(
            NvmeError::Status(invalid_field).to_string(),
            "NVMe command failed: Invalid Field in Command (SCT 0x0, SC 0x02, DNR)"
        );

        assert_eq!(NvmeStatus::from_ioctl(0x4001).name(), "Invalid Command Opcode");
        assert_eq!(NvmeStatus::from_ioctl(0x001D).name(), "Sanitize In Progress");
        assert_eq!(NvmeStatus::from_ioctl(0x001C).name(), "Sanitize Failed");
        assert_eq!(NvmeStatus::from_ioctl(0x010A).name(), "Invalid Format");
        assert_eq!(
            NvmeStatus::from_ioctl(0x0123).name(),
            "Sanitize Prohibited While Persistent Memory Region is Enabled"
        );
        assert_eq!(NvmeStatus::from_ioctl(0x0286).name(), "Access Denied");
        assert_eq!(NvmeStatus::from_ioctl(0x07AB).name(), "Vendor Specific");
        assert_eq!(NvmeStatus::from_ioctl(0x0499).name(), "Unknown Status");

        // nvme-cli prints "NS_WRITE_PROTECTED ... (0x2020)": SC 20h with MORE.
        let wp = NvmeStatus::from_ioctl(0x2020);
        assert!(wp.more() && !wp.dnr());
        assert_eq!(wp.to_string(), "Namespace is Write Protected (SCT 0x0, SC 0x20, MORE)");

        let crd = NvmeStatus::from_ioctl(0x1802);
        assert_eq!(crd.crd(), 3);

        // CQE DW3: status field in bits 31:17, phase tag bit 16.
        let from_cqe = NvmeStatus::from_cqe_dw3((0x4002u32 << 17) | (1 << 16) | 0x1234);
        assert_eq!(from_cqe, invalid_field);
        assert_eq!(from_cqe.raw(), 0x4002);
    }
}
