//! SCSI commands for erase (SBC SANITIZE, SPC REPORT SUPPORTED OPERATION CODES, REQUEST SENSE)
//! and the parser for SCSI sense data, which the ATA pass-through in `ata` shares.
//!
//! Design decision: a [`ScsiCommand`] is the whole SG_IO request minus pointers and timeout
//! (CDB, direction, transfer length, data-out bytes); ATA PASS-THROUGH(16) commands are
//! built as `ScsiCommand`s too, so the ioctl layer has one SCSI path. Sense parsing keeps the
//! raw bytes alongside the decoded key/ASC/ASCQ so transport-specific fields (the ATA Status
//! Return descriptor) are decoded where they belong, in `ata`.

use std::fmt;

use super::{Direction, be_u16};

/// SANITIZE operation code (SBC-4 5.30).
pub const SANITIZE: u8 = 0x48;
/// MAINTENANCE IN operation code, which carries REPORT SUPPORTED OPERATION CODES (SPC-4 6.35).
pub const MAINTENANCE_IN: u8 = 0xA3;
/// REPORT SUPPORTED OPERATION CODES service action of MAINTENANCE IN (SPC-4 6.35).
pub const REPORT_SUPPORTED_OPERATION_CODES: u8 = 0x0C;
/// REQUEST SENSE operation code (SPC-4 6.39).
pub const REQUEST_SENSE: u8 = 0x03;
/// Largest initialization pattern sg_sanitize accepts (the parameter list length is 16 bits
/// and includes the 4-byte header).
pub const MAX_OVERWRITE_PATTERN_LEN: usize = 65_535 - 4;

/// Errors building SCSI commands or parsing SCSI replies.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScsiError {
    /// The sense buffer is too short to hold the fields its response code promises.
    #[error("sense data too short: {0} bytes")]
    SenseTooShort(usize),
    /// The sense response code is neither fixed (70h/71h) nor descriptor (72h/73h) format.
    #[error("unknown sense data response code {0:#04x}")]
    UnknownSenseFormat(u8),
    /// A command reply is shorter than its own header says.
    #[error("reply too short: need {need} bytes, got {got}")]
    ReplyTooShort {
        /// Bytes the reply must have.
        need: usize,
        /// Bytes received.
        got: usize,
    },
    /// The overwrite initialization pattern is empty or too long for the parameter list.
    #[error("overwrite pattern length {0} outside 1..={MAX_OVERWRITE_PATTERN_LEN}")]
    PatternLength(usize),
    /// The OVERWRITE COUNT field holds 1 to 31 passes.
    #[error("overwrite count {0} outside 1..=31")]
    OverwriteCount(u8),
    /// A data-out buffer does not fit SG_IO's 32-bit transfer length.
    #[error("data-out buffer of {0} bytes is too long")]
    DataTooLong(usize),
}

/// One SCSI command ready for SG_IO: everything but the buffer pointers and the timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiCommand {
    /// The command descriptor block, exactly as sent.
    pub cdb: Vec<u8>,
    /// Direction of the data phase (`dxfer_direction`).
    pub direction: Direction,
    /// Bytes transferred in the data phase (`dxfer_len`); 0 when there is none.
    pub data_len: u32,
    /// Bytes to send when `direction` is [`Direction::ToDevice`]; empty otherwise.
    pub data_out: Vec<u8>,
}

impl ScsiCommand {
    /// A command without a data phase.
    pub fn no_data(cdb: Vec<u8>) -> Self {
        Self { cdb, direction: Direction::None, data_len: 0, data_out: Vec::new() }
    }

    /// A command that reads `len` bytes from the device.
    pub fn data_in(cdb: Vec<u8>, len: u32) -> Self {
        Self { cdb, direction: Direction::FromDevice, data_len: len, data_out: Vec::new() }
    }

    /// A command that sends `data` to the device.
    pub fn data_out(cdb: Vec<u8>, data: Vec<u8>) -> Result<Self, ScsiError> {
        let data_len = u32::try_from(data.len()).map_err(|_| ScsiError::DataTooLong(data.len()))?;
        Ok(Self { cdb, direction: Direction::ToDevice, data_len, data_out: data })
    }
}

/// Which sanitize operation a SCSI SANITIZE command starts (SBC-4 5.30, Table 104).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SanitizeAction {
    /// OVERWRITE (service action 01h), with its parameter list.
    Overwrite(OverwriteParameters),
    /// BLOCK ERASE (service action 02h).
    BlockErase,
    /// CRYPTOGRAPHIC ERASE (service action 03h).
    CryptographicErase,
    /// EXIT FAILURE MODE (service action 1Fh): leave the failed-sanitize state.
    ExitFailureMode,
}

impl SanitizeAction {
    /// The SERVICE ACTION field value.
    pub fn service_action(&self) -> u8 {
        match self {
            Self::Overwrite(_) => 0x01,
            Self::BlockErase => 0x02,
            Self::CryptographicErase => 0x03,
            Self::ExitFailureMode => 0x1F,
        }
    }
}

/// The OVERWRITE parameter list (SBC-4 5.30.3, Table 106). The TEST field is always 00b
/// (normal operation); it exists for the device vendor's testing only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverwriteParameters {
    /// INVERT: invert the pattern between passes.
    pub invert: bool,
    /// OVERWRITE COUNT: number of passes, 1 to 31.
    pub count: u8,
    /// The initialization pattern written to every logical block (repeated as needed); at
    /// most one logical block long (the device rejects a longer one).
    pub pattern: Vec<u8>,
}

impl OverwriteParameters {
    /// The parameter list bytes: INVERT/TEST/OVERWRITE COUNT, reserved, INITIALIZATION
    /// PATTERN LENGTH (big-endian), then the pattern. Same layout as sg_sanitize.c builds.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ScsiError> {
        if !(1..=31).contains(&self.count) {
            return Err(ScsiError::OverwriteCount(self.count));
        }
        let len = self.pattern.len();
        let ipl = u16::try_from(len)
            .ok()
            .filter(|_| (1..=MAX_OVERWRITE_PATTERN_LEN).contains(&len))
            .ok_or(ScsiError::PatternLength(len))?;
        let mut list = Vec::with_capacity(4 + len);
        list.push(if self.invert { 0x80 } else { 0x00 } | self.count);
        list.push(0);
        list.extend_from_slice(&ipl.to_be_bytes());
        list.extend_from_slice(&self.pattern);
        Ok(list)
    }
}

/// SANITIZE (10-byte CDB, SBC-4 5.30.1, Table 103): byte 1 holds IMMED (bit 7), AUSE (bit 5)
/// and the service action (bits 4:0); bytes 7-8 the parameter list length. Cross-checked with
/// sg3_utils `sg_sanitize.c` `do_sanitize()`.
///
/// `immed` returns as soon as the operation has started (poll with [`request_sense`]);
/// `ause` allows an unrestricted exit from a failed sanitize.
pub fn sanitize(action: &SanitizeAction, immed: bool, ause: bool) -> Result<ScsiCommand, ScsiError> {
    let params = match action {
        SanitizeAction::Overwrite(p) => p.to_bytes()?,
        _ => Vec::new(),
    };
    let list_len = u16::try_from(params.len()).map_err(|_| ScsiError::PatternLength(params.len()))?;
    let mut byte1 = action.service_action();
    if immed {
        byte1 |= 0x80;
    }
    if ause {
        byte1 |= 0x20;
    }
    let [len_hi, len_lo] = list_len.to_be_bytes();
    let cdb = vec![SANITIZE, byte1, 0, 0, 0, 0, 0, len_hi, len_lo, 0];
    if params.is_empty() { Ok(ScsiCommand::no_data(cdb)) } else { ScsiCommand::data_out(cdb, params) }
}

/// REPORT SUPPORTED OPERATION CODES asking about one command (SPC-4 6.35.1, Table 247): the
/// REPORTING OPTIONS field is 001b for an operation code alone and 010b for an operation code
/// with a service action (e.g. SANITIZE 48h / 01h..03h). Same CDB as sg3_utils `sg_opcodes`.
pub fn report_supported_operation_code(opcode: u8, service_action: Option<u16>, alloc_len: u32) -> ScsiCommand {
    let (options, sa) = match service_action {
        Some(sa) => (0x02, sa),
        None => (0x01, 0),
    };
    let [sa_hi, sa_lo] = sa.to_be_bytes();
    let [a0, a1, a2, a3] = alloc_len.to_be_bytes();
    let cdb =
        vec![MAINTENANCE_IN, REPORT_SUPPORTED_OPERATION_CODES, options, opcode, sa_hi, sa_lo, a0, a1, a2, a3, 0, 0];
    ScsiCommand::data_in(cdb, alloc_len)
}

/// Allocation length that holds any one-command reply for a 10-byte CDB with its command
/// timeouts descriptor (4-byte header + 10 + 12), rounded up.
pub const ONE_COMMAND_REPLY_LEN: u32 = 32;

/// Whether the device supports SANITIZE with the given service action: the RSOC query.
pub fn report_sanitize_support(action: &SanitizeAction) -> ScsiCommand {
    report_supported_operation_code(SANITIZE, Some(u16::from(action.service_action())), ONE_COMMAND_REPLY_LEN)
}

/// The SUPPORT field of a one-command RSOC reply (SPC-4 6.35.3, Table 250).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandSupport {
    /// 000b: data about the command is not currently available.
    NotAvailable,
    /// 001b: the command is not supported.
    NotSupported,
    /// 011b: supported in conformance with a SCSI standard.
    Supported,
    /// 101b: supported in a vendor-specific manner.
    SupportedVendorSpecific,
    /// Any other value (reserved).
    Reserved(u8),
}

impl CommandSupport {
    /// Decodes the 3-bit SUPPORT field.
    pub fn from_bits(bits: u8) -> Self {
        match bits & 0x07 {
            0 => Self::NotAvailable,
            1 => Self::NotSupported,
            3 => Self::Supported,
            5 => Self::SupportedVendorSpecific,
            other => Self::Reserved(other),
        }
    }

    /// True for both "supported" values.
    pub fn is_supported(self) -> bool {
        matches!(self, Self::Supported | Self::SupportedVendorSpecific)
    }
}

/// A parsed one-command RSOC reply (SPC-4 6.35.3, Table 249).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OneCommandReply {
    /// The SUPPORT field.
    pub support: CommandSupport,
    /// CTDP: a command timeouts descriptor follows the usage data.
    pub timeouts_descriptor_present: bool,
    /// CDB USAGE DATA: which CDB bits the device looks at (byte 0 is the opcode).
    pub cdb_usage: Vec<u8>,
    /// Recommended command timeout in seconds, from the timeouts descriptor when present.
    pub recommended_timeout_secs: Option<u32>,
}

impl OneCommandReply {
    /// Parses the reply: byte 1 CTDP (bit 7) and SUPPORT (bits 2:0), bytes 2-3 CDB SIZE, then
    /// the usage data and, with CTDP, the 12-byte command timeouts descriptor (SPC-4 6.35.4,
    /// Table 251: nominal timeout at descriptor bytes 4-7, recommended at 8-11). Decoded like
    /// sg3_utils `sg_opcodes.c` `list_one()`.
    pub fn parse(buf: &[u8]) -> Result<Self, ScsiError> {
        if buf.len() < 4 {
            return Err(ScsiError::ReplyTooShort { need: 4, got: buf.len() });
        }
        let support = CommandSupport::from_bits(buf[1]);
        let ctdp = buf[1] & 0x80 != 0;
        let cdb_size = usize::from(be_u16(buf, 2));
        let usage_end = 4 + cdb_size;
        if buf.len() < usage_end {
            return Err(ScsiError::ReplyTooShort { need: usage_end, got: buf.len() });
        }
        let recommended_timeout_secs = if ctdp {
            let desc_end = usage_end + 12;
            if buf.len() < desc_end {
                return Err(ScsiError::ReplyTooShort { need: desc_end, got: buf.len() });
            }
            let d = &buf[usage_end..desc_end];
            Some(u32::from_be_bytes([d[8], d[9], d[10], d[11]]))
        } else {
            None
        };
        Ok(Self {
            support,
            timeouts_descriptor_present: ctdp,
            cdb_usage: buf[4..usage_end].to_vec(),
            recommended_timeout_secs,
        })
    }
}

/// REQUEST SENSE (6-byte CDB, SPC-4 6.39): polls a device that runs SANITIZE with IMMED set;
/// the reply is NOT READY / 04h 1Bh (sanitize in progress) with a progress indication while
/// it runs. `descriptor` asks for descriptor-format sense (DESC bit).
pub fn request_sense(alloc_len: u8, descriptor: bool) -> ScsiCommand {
    let cdb = vec![REQUEST_SENSE, u8::from(descriptor), 0, 0, alloc_len, 0];
    ScsiCommand::data_in(cdb, u32::from(alloc_len))
}

/// Sense key (SPC-4 4.5.6, Table 48).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SenseKey {
    /// 0h NO SENSE.
    NoSense,
    /// 1h RECOVERED ERROR (also: ATA PASS-THROUGH information available).
    RecoveredError,
    /// 2h NOT READY.
    NotReady,
    /// 3h MEDIUM ERROR.
    MediumError,
    /// 4h HARDWARE ERROR.
    HardwareError,
    /// 5h ILLEGAL REQUEST.
    IllegalRequest,
    /// 6h UNIT ATTENTION.
    UnitAttention,
    /// 7h DATA PROTECT.
    DataProtect,
    /// 8h BLANK CHECK.
    BlankCheck,
    /// 9h VENDOR SPECIFIC.
    VendorSpecific,
    /// Ah COPY ABORTED.
    CopyAborted,
    /// Bh ABORTED COMMAND.
    AbortedCommand,
    /// Ch (obsolete; formerly EQUAL).
    Obsolete,
    /// Dh VOLUME OVERFLOW.
    VolumeOverflow,
    /// Eh MISCOMPARE.
    Miscompare,
    /// Fh COMPLETED.
    Completed,
}

impl SenseKey {
    /// Decodes the low four bits of a sense key byte.
    pub fn from_bits(bits: u8) -> Self {
        match bits & 0x0F {
            0x0 => Self::NoSense,
            0x1 => Self::RecoveredError,
            0x2 => Self::NotReady,
            0x3 => Self::MediumError,
            0x4 => Self::HardwareError,
            0x5 => Self::IllegalRequest,
            0x6 => Self::UnitAttention,
            0x7 => Self::DataProtect,
            0x8 => Self::BlankCheck,
            0x9 => Self::VendorSpecific,
            0xA => Self::CopyAborted,
            0xB => Self::AbortedCommand,
            0xC => Self::Obsolete,
            0xD => Self::VolumeOverflow,
            0xE => Self::Miscompare,
            _ => Self::Completed,
        }
    }

    /// The name SPC uses.
    pub fn name(self) -> &'static str {
        match self {
            Self::NoSense => "NO SENSE",
            Self::RecoveredError => "RECOVERED ERROR",
            Self::NotReady => "NOT READY",
            Self::MediumError => "MEDIUM ERROR",
            Self::HardwareError => "HARDWARE ERROR",
            Self::IllegalRequest => "ILLEGAL REQUEST",
            Self::UnitAttention => "UNIT ATTENTION",
            Self::DataProtect => "DATA PROTECT",
            Self::BlankCheck => "BLANK CHECK",
            Self::VendorSpecific => "VENDOR SPECIFIC",
            Self::CopyAborted => "COPY ABORTED",
            Self::AbortedCommand => "ABORTED COMMAND",
            Self::Obsolete => "OBSOLETE (EQUAL)",
            Self::VolumeOverflow => "VOLUME OVERFLOW",
            Self::Miscompare => "MISCOMPARE",
            Self::Completed => "COMPLETED",
        }
    }
}

impl fmt::Display for SenseKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Names of the additional sense codes an erase run meets (SPC-4 Annex D, Table D.1).
pub fn asc_name(asc: u8, ascq: u8) -> Option<&'static str> {
    Some(match (asc, ascq) {
        (0x00, 0x00) => "No additional sense information",
        (0x00, 0x16) => "Operation in progress",
        (0x00, 0x1D) => "ATA pass through information available",
        (0x04, 0x00) => "Logical unit not ready, cause not reportable",
        (0x04, 0x01) => "Logical unit is in process of becoming ready",
        (0x04, 0x02) => "Logical unit not ready, initializing command required",
        (0x04, 0x04) => "Logical unit not ready, format in progress",
        (0x04, 0x09) => "Logical unit not ready, self-test in progress",
        (0x04, 0x1B) => "Logical unit not ready, sanitize in progress",
        (0x0C, 0x00) => "Write error",
        (0x11, 0x00) => "Unrecovered read error",
        (0x1A, 0x00) => "Parameter list length error",
        (0x20, 0x00) => "Invalid command operation code",
        (0x21, 0x00) => "Logical block address out of range",
        (0x24, 0x00) => "Invalid field in CDB",
        (0x25, 0x00) => "Logical unit not supported",
        (0x26, 0x00) => "Invalid field in parameter list",
        (0x27, 0x00) => "Write protected",
        (0x29, 0x00) => "Power on, reset, or bus device reset occurred",
        (0x2A, 0x01) => "Mode parameters changed",
        (0x2C, 0x00) => "Command sequence error",
        (0x31, 0x00) => "Medium format corrupted",
        (0x31, 0x01) => "Format command failed",
        (0x31, 0x03) => "Sanitize command failed",
        (0x3A, 0x00) => "Medium not present",
        (0x44, 0x00) => "Internal target failure",
        (0x5D, 0x00) => "Failure prediction threshold exceeded",
        (0x74, 0x71) => "Logical unit access not authorized",
        _ => return None,
    })
}

/// Layout of a sense buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenseFormat {
    /// Fixed format (response codes 70h current, 71h deferred).
    Fixed,
    /// Descriptor format (response codes 72h current, 73h deferred).
    Descriptor,
}

/// Decoded sense data (SPC-4 4.5), with the raw bytes kept for transport-specific fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sense {
    /// Fixed or descriptor format.
    pub format: SenseFormat,
    /// Deferred error (71h/73h) rather than current (70h/72h).
    pub deferred: bool,
    /// SENSE KEY.
    pub key: SenseKey,
    /// ADDITIONAL SENSE CODE.
    pub asc: u8,
    /// ADDITIONAL SENSE CODE QUALIFIER.
    pub ascq: u8,
    /// PROGRESS INDICATION (numerator over 65536) from the sense-key specific field, when
    /// SKSV is set and the key is NO SENSE or NOT READY (SPC-4 4.5.2.4.4).
    pub progress: Option<u16>,
    /// The sense bytes, cut to the length the sense data itself declares.
    pub raw: Vec<u8>,
}

impl Sense {
    /// Parses sense data as returned by SG_IO (`sbp`, `sb_len_wr` bytes). An empty buffer or
    /// a zero response code means "no sense data" and gives `Ok(None)`.
    ///
    /// Fixed format (SPC-4 4.5.3, Table 51): byte 2 bits 3:0 key, byte 7 additional length,
    /// bytes 12/13 ASC/ASCQ, bytes 15-17 sense-key specific. Descriptor format (SPC-4 4.5.2,
    /// Table 27): bytes 1/2/3 key/ASC/ASCQ, byte 7 additional length, descriptors from byte 8.
    pub fn parse(buf: &[u8]) -> Result<Option<Self>, ScsiError> {
        let Some(&first) = buf.first() else { return Ok(None) };
        let code = first & 0x7F;
        if code == 0 {
            return Ok(None);
        }
        let (format, deferred) = match code {
            0x70 => (SenseFormat::Fixed, false),
            0x71 => (SenseFormat::Fixed, true),
            0x72 => (SenseFormat::Descriptor, false),
            0x73 => (SenseFormat::Descriptor, true),
            other => return Err(ScsiError::UnknownSenseFormat(other)),
        };
        if buf.len() < 8 {
            return Err(ScsiError::SenseTooShort(buf.len()));
        }
        let declared = 8 + usize::from(buf[7]);
        let raw = buf[..declared.min(buf.len())].to_vec();
        let byte = |i: usize| raw.get(i).copied().unwrap_or(0);
        let (key, asc, ascq) = match format {
            SenseFormat::Fixed => (SenseKey::from_bits(byte(2)), byte(12), byte(13)),
            SenseFormat::Descriptor => (SenseKey::from_bits(byte(1)), byte(2), byte(3)),
        };
        let mut sense = Self { format, deferred, key, asc, ascq, progress: None, raw };
        let sks = match format {
            SenseFormat::Fixed => sense.raw.get(15..18).map(|s| [s[0], s[1], s[2]]),
            SenseFormat::Descriptor => sense.descriptor(0x02).and_then(|d| d.get(4..7)).map(|s| [s[0], s[1], s[2]]),
        };
        if let Some([flags, hi, lo]) = sks
            && flags & 0x80 != 0
            && matches!(key, SenseKey::NoSense | SenseKey::NotReady)
        {
            sense.progress = Some(u16::from_be_bytes([hi, lo]));
        }
        Ok(Some(sense))
    }

    /// The sense descriptors of descriptor-format sense data, each as its full bytes
    /// (type, additional length, payload). Empty for fixed format.
    pub fn descriptors(&self) -> Vec<&[u8]> {
        let mut out = Vec::new();
        if self.format != SenseFormat::Descriptor {
            return out;
        }
        let mut off = 8;
        while off + 2 <= self.raw.len() {
            let end = off + 2 + usize::from(self.raw[off + 1]);
            if end > self.raw.len() {
                break;
            }
            out.push(&self.raw[off..end]);
            off = end;
        }
        out
    }

    /// The first descriptor of the given type (e.g. 09h ATA Status Return, 02h sense-key
    /// specific), if present.
    pub fn descriptor(&self, descriptor_type: u8) -> Option<&[u8]> {
        self.descriptors().into_iter().find(|d| d[0] == descriptor_type)
    }

    /// The name of the ASC/ASCQ pair, when it is one of the common ones.
    pub fn asc_name(&self) -> Option<&'static str> {
        asc_name(self.asc, self.ascq)
    }

    /// Sanitize still running: NOT READY, 04h 1Bh (SBC-4 4.11.3).
    pub fn sanitize_in_progress(&self) -> bool {
        self.key == SenseKey::NotReady && self.asc == 0x04 && self.ascq == 0x1B
    }

    /// The device rejected the operation code or a CDB field (ILLEGAL REQUEST with
    /// 20h/00h or 24h/00h): it does not support what was asked.
    pub fn unsupported(&self) -> bool {
        self.key == SenseKey::IllegalRequest && matches!((self.asc, self.ascq), (0x20, 0x00) | (0x24, 0x00))
    }
}

impl fmt::Display for Sense {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.key)?;
        if let Some(name) = self.asc_name() {
            write!(f, ": {name}")?;
        }
        write!(f, " (ASC {:#04x}, ASCQ {:#04x})", self.asc, self.ascq)?;
        if self.deferred {
            f.write_str(" [deferred]")?;
        }
        if let Some(p) = self.progress {
            let percent = f64::from(p) * 100.0 / 65536.0;
            write!(f, " progress {percent:.1}%")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // SBC-4 5.30.1 / sg_sanitize.c do_sanitize(): `sg_sanitize --block --early` sends
    // 48 82 00 00 00 00 00 00 00 00 (IMMED | BLOCK ERASE), no parameter list.
    #[test]
    fn sanitize_block_erase_immed() {
        let cmd = sanitize(&SanitizeAction::BlockErase, true, false).unwrap();
        assert_eq!(cmd.cdb, [0x48, 0x82, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(cmd.direction, Direction::None);
        assert_eq!(cmd.data_len, 0);
        assert!(cmd.data_out.is_empty());
    }

    // SBC-4 Table 104: CRYPTOGRAPHIC ERASE is 03h; AUSE is byte 1 bit 5.
    #[test]
    fn sanitize_crypto_with_ause() {
        let cmd = sanitize(&SanitizeAction::CryptographicErase, true, true).unwrap();
        assert_eq!(cmd.cdb, [0x48, 0xA3, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    // SBC-4 Table 104: EXIT FAILURE MODE is 1Fh.
    #[test]
    fn sanitize_exit_failure_mode() {
        let cmd = sanitize(&SanitizeAction::ExitFailureMode, false, false).unwrap();
        assert_eq!(cmd.cdb, [0x48, 0x1F, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    // SBC-4 5.30.3 Table 106 / sg_sanitize.c main(): wBuff[0] = count | invert<<7,
    // wBuff[2..4] = IPL big-endian, pattern from byte 4; CDB bytes 7-8 = IPL + 4.
    #[test]
    fn sanitize_overwrite_parameter_list() {
        let params = OverwriteParameters { invert: true, count: 3, pattern: vec![0xAA, 0x55, 0xAA, 0x55] };
        let cmd = sanitize(&SanitizeAction::Overwrite(params), true, false).unwrap();
        assert_eq!(cmd.cdb, [0x48, 0x81, 0, 0, 0, 0, 0, 0x00, 0x08, 0]);
        assert_eq!(cmd.direction, Direction::ToDevice);
        assert_eq!(cmd.data_len, 8);
        assert_eq!(cmd.data_out, [0x83, 0x00, 0x00, 0x04, 0xAA, 0x55, 0xAA, 0x55]);
    }

    // SBC-4 Table 106: OVERWRITE COUNT 1..31 (sg_sanitize `--count` range), pattern length
    // 1..65531 so the parameter list length fits 16 bits.
    #[test]
    fn sanitize_overwrite_rejects_bad_fields() {
        let zero_count = OverwriteParameters { invert: false, count: 0, pattern: vec![0] };
        assert_eq!(zero_count.to_bytes(), Err(ScsiError::OverwriteCount(0)));
        let big_count = OverwriteParameters { invert: false, count: 32, pattern: vec![0] };
        assert_eq!(big_count.to_bytes(), Err(ScsiError::OverwriteCount(32)));
        let empty = OverwriteParameters { invert: false, count: 1, pattern: Vec::new() };
        assert_eq!(empty.to_bytes(), Err(ScsiError::PatternLength(0)));
        let long = OverwriteParameters { invert: false, count: 1, pattern: vec![0; 65_532] };
        assert_eq!(long.to_bytes(), Err(ScsiError::PatternLength(65_532)));
        let longest = OverwriteParameters { invert: false, count: 1, pattern: vec![0; 65_531] };
        assert_eq!(longest.to_bytes().unwrap()[2..4], [0xFF, 0xFB]);
    }

    // SPC-4 6.35.1 Table 247 / sg_cmds_extra.c do_rsoc(): A3 0C, REPORTING OPTIONS 010b,
    // opcode, service action (BE), allocation length (BE).
    #[test]
    fn rsoc_for_sanitize_block_erase() {
        let cmd = report_sanitize_support(&SanitizeAction::BlockErase);
        assert_eq!(cmd.cdb, [0xA3, 0x0C, 0x02, 0x48, 0x00, 0x02, 0x00, 0x00, 0x00, 0x20, 0x00, 0x00]);
        assert_eq!(cmd.direction, Direction::FromDevice);
        assert_eq!(cmd.data_len, 32);
    }

    // SPC-4 6.35.1: REPORTING OPTIONS 001b (opcode only), 32-bit allocation length.
    #[test]
    fn rsoc_without_service_action() {
        let cmd = report_supported_operation_code(0x85, None, 0x0102_0304);
        assert_eq!(cmd.cdb, [0xA3, 0x0C, 0x01, 0x85, 0, 0, 0x01, 0x02, 0x03, 0x04, 0, 0]);
    }

    // SPC-4 6.35.3 Table 249: SUPPORT 011b with a 10-byte usage map.
    #[test]
    fn one_command_reply_supported() {
        let reply = [0x00, 0x03, 0x00, 0x0A, 0x48, 0xA3, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0x07];
        let r = OneCommandReply::parse(&reply).unwrap();
        assert_eq!(r.support, CommandSupport::Supported);
        assert!(r.support.is_supported());
        assert!(!r.timeouts_descriptor_present);
        assert_eq!(r.cdb_usage, reply[4..]);
        assert_eq!(r.recommended_timeout_secs, None);
    }

    // SPC-4 6.35.3 (SUPPORT 001b, 101b) and 6.35.4 command timeouts descriptor (CTDP).
    #[test]
    fn one_command_reply_not_supported_and_with_timeouts() {
        let r = OneCommandReply::parse(&[0x00, 0x01, 0x00, 0x00]).unwrap();
        assert_eq!(r.support, CommandSupport::NotSupported);
        assert!(!r.support.is_supported());

        let mut reply = vec![0x00, 0x85, 0x00, 0x02, 0x48, 0xA3];
        reply.extend_from_slice(&[0x00, 0x0A, 0, 0, 0, 0, 0, 0x3C, 0x00, 0x00, 0x0E, 0x10]);
        let r = OneCommandReply::parse(&reply).unwrap();
        assert_eq!(r.support, CommandSupport::SupportedVendorSpecific);
        assert_eq!(r.recommended_timeout_secs, Some(3600));

        assert_eq!(OneCommandReply::parse(&[0, 3, 0, 10, 0x48]), Err(ScsiError::ReplyTooShort { need: 14, got: 5 }));
        assert_eq!(CommandSupport::from_bits(2), CommandSupport::Reserved(2));
    }

    // SPC-4 6.39: 03 DESC 00 00 LEN 00.
    #[test]
    fn request_sense_cdb() {
        let cmd = request_sense(252, true);
        assert_eq!(cmd.cdb, [0x03, 0x01, 0x00, 0x00, 0xFC, 0x00]);
        assert_eq!(cmd.data_len, 252);
    }

    // SPC-4 4.5.3 Table 51: NOT READY, 04h/1Bh, SKSV with progress 4000h (25%).
    #[test]
    fn fixed_sense_with_progress() {
        let sb = [0x70, 0, 0x02, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x04, 0x1B, 0, 0x80, 0x40, 0x00];
        let s = Sense::parse(&sb).unwrap().unwrap();
        assert_eq!(s.format, SenseFormat::Fixed);
        assert!(!s.deferred);
        assert_eq!(s.key, SenseKey::NotReady);
        assert!(s.sanitize_in_progress());
        assert_eq!(s.progress, Some(0x4000));
        assert_eq!(
            s.to_string(),
            "NOT READY: Logical unit not ready, sanitize in progress (ASC 0x04, ASCQ 0x1b) progress 25.0%"
        );
        assert!(s.descriptors().is_empty());
    }

    // SPC-4 4.5.2 Table 27 and 4.5.2.4: descriptor format, ILLEGAL REQUEST 24h/00h, with a
    // sense-key specific descriptor (02h) whose SKSV is clear.
    #[test]
    fn descriptor_sense_illegal_request() {
        let sb = [0x72, 0x05, 0x24, 0x00, 0, 0, 0, 8, 0x02, 0x06, 0, 0, 0x40, 0x00, 0x01, 0x00, 0xFF, 0xFF];
        let s = Sense::parse(&sb).unwrap().unwrap();
        assert_eq!(s.format, SenseFormat::Descriptor);
        assert_eq!(s.key, SenseKey::IllegalRequest);
        assert!(s.unsupported());
        assert_eq!(s.progress, None);
        assert_eq!(s.raw.len(), 16, "cut to 8 + additional length");
        assert_eq!(s.descriptor(0x02), Some(&sb[8..16]));
        assert_eq!(s.descriptor(0x09), None);
        assert_eq!(s.to_string(), "ILLEGAL REQUEST: Invalid field in CDB (ASC 0x24, ASCQ 0x00)");
    }

    // SPC-4 4.5.2.4.4: progress indication in the sense-key specific descriptor (02h);
    // response code 73h is a deferred error.
    #[test]
    fn descriptor_sense_progress_and_deferred() {
        let sb = [0x73, 0x02, 0x04, 0x1B, 0, 0, 0, 8, 0x02, 0x06, 0, 0, 0x80, 0x80, 0x00, 0x00];
        let s = Sense::parse(&sb).unwrap().unwrap();
        assert!(s.deferred);
        assert_eq!(s.progress, Some(0x8000));
    }

    // SPC-4 4.5.1: response codes 70h-73h only; a zero response code means no sense.
    #[test]
    fn sense_edge_cases() {
        assert_eq!(Sense::parse(&[]), Ok(None));
        assert_eq!(Sense::parse(&[0; 32]), Ok(None));
        assert_eq!(Sense::parse(&[0x7F, 0, 0, 0, 0, 0, 0, 0]), Err(ScsiError::UnknownSenseFormat(0x7F)));
        assert_eq!(Sense::parse(&[0x72, 0x05, 0x20]), Err(ScsiError::SenseTooShort(3)));
        // A truncated fixed buffer still yields the key; missing ASC/ASCQ read as zero.
        let s = Sense::parse(&[0xF0, 0, 0x06, 0, 0, 0, 0, 0]).unwrap().unwrap();
        assert_eq!(s.key, SenseKey::UnitAttention);
        assert_eq!((s.asc, s.ascq), (0, 0));
        assert_eq!(SenseKey::from_bits(0xFB), SenseKey::AbortedCommand);
        assert_eq!(asc_name(0x31, 0x03), Some("Sanitize command failed"));
        assert_eq!(asc_name(0x99, 0x99), None);
    }
}
