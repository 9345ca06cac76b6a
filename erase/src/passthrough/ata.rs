//! ATA commands for erase (IDENTIFY DEVICE, SANITIZE DEVICE, the Security feature set),
//! carried in SCSI ATA PASS-THROUGH(16) CDBs, and the parsers for IDENTIFY data and for the
//! ATA registers the SCSI/ATA translation layer (SATL) returns in sense data.
//!
//! Design decision: the CDB flags follow hdparm's `sg16()` exactly rather than one reading of
//! SAT: data commands ask for no CHECK CONDITION (libata/AHCI misreport sense on IDENTIFY)
//! and give the transfer length in sectors from the COUNT field; non-data commands set
//! CK_COND so the result registers (e.g. SANITIZE STATUS EXT's) always come back. hdparm is
//! the tool these drives and kernels have been exercised with for years.

use std::fmt;

use super::Direction;
use super::scsi::{ScsiCommand, Sense, SenseFormat, SenseKey};

/// ATA PASS-THROUGH(16) operation code (SAT-3 12.2.2).
pub const ATA_PASS_THROUGH_16: u8 = 0x85;
/// IDENTIFY DEVICE (ACS-3), PIO data-in, 512 bytes.
pub const IDENTIFY_DEVICE: u8 = 0xEC;
/// SANITIZE DEVICE (ACS-3), non-data; the FEATURE field selects the subcommand.
pub const SANITIZE_DEVICE: u8 = 0xB4;
/// SECURITY SET PASSWORD (ACS-3), PIO data-out, 512 bytes.
pub const SECURITY_SET_PASSWORD: u8 = 0xF1;
/// SECURITY UNLOCK (ACS-3), PIO data-out, 512 bytes.
pub const SECURITY_UNLOCK: u8 = 0xF2;
/// SECURITY ERASE PREPARE (ACS-3), non-data; must immediately precede SECURITY ERASE UNIT.
pub const SECURITY_ERASE_PREPARE: u8 = 0xF3;
/// SECURITY ERASE UNIT (ACS-3), PIO data-out, 512 bytes.
pub const SECURITY_ERASE_UNIT: u8 = 0xF4;
/// SECURITY DISABLE PASSWORD (ACS-3), PIO data-out, 512 bytes.
pub const SECURITY_DISABLE_PASSWORD: u8 = 0xF6;

/// SANITIZE STATUS EXT feature code.
pub const SANITIZE_STATUS_EXT: u16 = 0x0000;
/// CRYPTO SCRAMBLE EXT feature code.
pub const CRYPTO_SCRAMBLE_EXT: u16 = 0x0011;
/// BLOCK ERASE EXT feature code.
pub const BLOCK_ERASE_EXT: u16 = 0x0012;
/// OVERWRITE EXT feature code.
pub const OVERWRITE_EXT: u16 = 0x0014;
/// CRYPTO SCRAMBLE EXT key in LBA(31:0): ASCII "Cryp".
pub const CRYPTO_SCRAMBLE_KEY: u32 = 0x4372_7970;
/// BLOCK ERASE EXT key in LBA(31:0): ASCII "BkEr".
pub const BLOCK_ERASE_KEY: u32 = 0x426B_4572;
/// OVERWRITE EXT key in LBA(47:32): ASCII "OW".
pub const OVERWRITE_KEY: u16 = 0x4F57;

/// DEVICE field value hdparm's `tf_init()` uses: bit 6 (LBA) set, the rest zero.
pub const DEVICE_LBA: u8 = 0x40;
/// Bytes in one ATA data block (the unit of the COUNT field for PIO transfers).
pub const BLOCK_LEN: usize = 512;

/// ATA status register bits (ACS-3 6.2).
pub mod status {
    /// ERR: an error occurred; the ERROR register says which.
    pub const ERR: u8 = 0x01;
    /// DRQ: the device still expects a data transfer (a protocol error at completion).
    pub const DRQ: u8 = 0x08;
    /// DF: device fault.
    pub const DF: u8 = 0x20;
    /// DRDY: device ready.
    pub const DRDY: u8 = 0x40;
    /// BSY: device busy.
    pub const BSY: u8 = 0x80;
}

/// ATA error register bits (ACS-3 6.3).
pub mod error {
    /// ABRT: command aborted (unsupported, wrong password, frozen, ...).
    pub const ABRT: u8 = 0x04;
    /// IDNF: address not found.
    pub const IDNF: u8 = 0x10;
    /// UNC: uncorrectable data error.
    pub const UNC: u8 = 0x40;
    /// ICRC: interface CRC error.
    pub const ICRC: u8 = 0x80;
}

/// Errors building ATA commands or parsing what an ATA device returned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AtaError {
    /// A buffer is shorter than the structure it must hold.
    #[error("buffer too short: need {need} bytes, got {got}")]
    BufferTooShort {
        /// Bytes required.
        need: usize,
        /// Bytes given.
        got: usize,
    },
    /// IDENTIFY data carries the A5h signature but its checksum does not add up.
    #[error("IDENTIFY DEVICE data fails its checksum (sum {sum:#04x}, expected 0)")]
    IdentifyChecksum {
        /// Sum of all 512 bytes modulo 256.
        sum: u8,
    },
    /// A taskfile field does not fit a 28-bit (non-EXTEND) command.
    #[error("{field} value {value:#x} does not fit a 28-bit ATA command")]
    FieldTooWide {
        /// The field name.
        field: &'static str,
        /// The value given.
        value: u64,
    },
    /// An LBA beyond 48 bits.
    #[error("LBA {0:#x} does not fit 48 bits")]
    LbaTooWide(u64),
    /// The data-out buffer length disagrees with the COUNT field.
    #[error("data-out buffer is {got} bytes, COUNT says {expected}")]
    DataLength {
        /// Bytes the COUNT field implies.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// SANITIZE OVERWRITE EXT runs 1 to 16 passes.
    #[error("overwrite pass count {0} outside 1..=16")]
    OverwritePasses(u8),
    /// ATA security passwords are at most 32 bytes.
    #[error("security password of {0} bytes exceeds 32")]
    PasswordTooLong(usize),
    /// The device completed the command with ERR, DF, DRQ or BSY set.
    #[error("ATA command failed: {0}")]
    Device(AtaReturn),
    /// The SCSI/ATA translation layer reported an error without ATA registers (for
    /// example ILLEGAL REQUEST when it does not pass the command through).
    #[error("SCSI/ATA translation layer reported {0}")]
    Sense(Sense),
    /// The sense data could not be parsed.
    #[error("bad sense data: {0}")]
    BadSense(#[from] super::scsi::ScsiError),
    /// The result needs registers the device did not return (no ATA Return descriptor).
    #[error("no ATA result registers were returned")]
    NoRegisters,
    /// Fixed-format sense flags nonzero upper register bytes without giving them, so a
    /// result that lives there (SANITIZE STATUS EXT) cannot be read.
    #[error("fixed-format sense data omits the upper ATA register bytes")]
    RegistersIncomplete,
}

/// The ATA registers of a command (SAT-3 12.2.2: FEATURE, COUNT, LBA, DEVICE, COMMAND).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskFile {
    /// FEATURE(15:0); bits 15:8 only with EXTEND.
    pub features: u16,
    /// COUNT(15:0); bits 15:8 only with EXTEND.
    pub count: u16,
    /// LBA(47:0); 28 bits without EXTEND (bits 27:24 then travel in DEVICE(3:0)).
    pub lba: u64,
    /// DEVICE.
    pub device: u8,
    /// COMMAND.
    pub command: u8,
}

/// ATA PASS-THROUGH PROTOCOL field values used here (SAT-3 Table 140).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// 3: Non-data.
    NonData = 3,
    /// 4: PIO Data-In.
    PioDataIn = 4,
    /// 5: PIO Data-Out.
    PioDataOut = 5,
}

impl Protocol {
    /// The 4-bit PROTOCOL field value.
    pub fn field(self) -> u8 {
        match self {
            Self::NonData => 3,
            Self::PioDataIn => 4,
            Self::PioDataOut => 5,
        }
    }

    /// CDB byte 2 as hdparm's `sg16()` sets it: data transfers give T_LENGTH=10b (length in
    /// COUNT), BYT_BLOK=1 (in 512-byte blocks) and T_DIR (1 = from device), without CK_COND;
    /// non-data commands set only CK_COND (bit 5) so the result registers are returned.
    pub fn cdb_byte2(self) -> u8 {
        const T_LENGTH_COUNT: u8 = 0x02;
        const BYT_BLOK: u8 = 0x04;
        const T_DIR_FROM_DEVICE: u8 = 0x08;
        const CK_COND: u8 = 0x20;
        match self {
            Self::NonData => CK_COND,
            Self::PioDataIn => T_DIR_FROM_DEVICE | BYT_BLOK | T_LENGTH_COUNT,
            Self::PioDataOut => BYT_BLOK | T_LENGTH_COUNT,
        }
    }
}

/// The 16-byte ATA PASS-THROUGH(16) CDB (SAT-3 12.2.2.1, Table 139): byte 1 PROTOCOL (bits
/// 4:1) and EXTEND (bit 0); byte 2 flags ([`Protocol::cdb_byte2`]); bytes 3/4 FEATURE(15:8/
/// 7:0); 5/6 COUNT(15:8/7:0); 7/8 LBA(31:24/7:0); 9/10 LBA(39:32/15:8); 11/12 LBA(47:40/
/// 23:16); 13 DEVICE; 14 COMMAND; 15 CONTROL. The high bytes are sent only with EXTEND;
/// without it LBA(27:24) goes into DEVICE(3:0), as hdparm's `tf_init()` does.
pub fn cdb16(tf: &TaskFile, protocol: Protocol, extend: bool) -> Result<[u8; 16], AtaError> {
    let mut device = tf.device;
    if extend {
        if tf.lba >> 48 != 0 {
            return Err(AtaError::LbaTooWide(tf.lba));
        }
    } else {
        if tf.features > 0xFF {
            return Err(AtaError::FieldTooWide { field: "FEATURE", value: u64::from(tf.features) });
        }
        if tf.count > 0xFF {
            return Err(AtaError::FieldTooWide { field: "COUNT", value: u64::from(tf.count) });
        }
        if tf.lba >> 28 != 0 {
            return Err(AtaError::FieldTooWide { field: "LBA", value: tf.lba });
        }
        device |= tf.lba.to_le_bytes()[3] & 0x0F;
    }
    let [feat_lo, feat_hi] = tf.features.to_le_bytes();
    let [count_lo, count_hi] = tf.count.to_le_bytes();
    let lba = tf.lba.to_le_bytes();
    let mut cdb = [0u8; 16];
    cdb[0] = ATA_PASS_THROUGH_16;
    cdb[1] = (protocol.field() << 1) | u8::from(extend);
    cdb[2] = protocol.cdb_byte2();
    cdb[4] = feat_lo;
    cdb[6] = count_lo;
    cdb[8] = lba[0];
    cdb[10] = lba[1];
    cdb[12] = lba[2];
    cdb[13] = device;
    cdb[14] = tf.command;
    if extend {
        cdb[3] = feat_hi;
        cdb[5] = count_hi;
        cdb[7] = lba[3];
        cdb[9] = lba[4];
        cdb[11] = lba[5];
    }
    Ok(cdb)
}

/// A non-data ATA command as a SCSI command.
pub fn non_data(tf: &TaskFile, extend: bool) -> Result<ScsiCommand, AtaError> {
    Ok(ScsiCommand::no_data(cdb16(tf, Protocol::NonData, extend)?.to_vec()))
}

/// SMART RETURN STATUS (ACS-3 7.48.8): SMART (B0h), FEATURE DAh, LBA mid/high the 4Fh/C2h
/// key; the device answers in LBA mid/high (4Fh/C2h fine, F4h/2Ch threshold exceeded).
pub fn smart_return_status() -> ScsiCommand {
    let tf = TaskFile { features: 0xDA, count: 0, lba: 0x00C2_4F00, device: 0, command: 0xB0 };
    ScsiCommand::no_data(cdb16(&tf, Protocol::NonData, false).map(|c| c.to_vec()).unwrap_or_default())
}

/// The verdict of SMART RETURN STATUS from its returned registers: `Some(true)` no threshold
/// exceeded, `Some(false)` a threshold exceeded (the drive predicts its failure), `None`
/// an answer that is neither.
pub fn smart_status(regs: &AtaReturn) -> Option<bool> {
    match ((regs.lba >> 8) & 0xff, (regs.lba >> 16) & 0xff) {
        (0x4f, 0xc2) => Some(true),
        (0xf4, 0x2c) => Some(false),
        _ => None,
    }
}

/// A PIO data-in ATA command reading COUNT blocks of 512 bytes.
pub fn pio_data_in(tf: &TaskFile, extend: bool) -> Result<ScsiCommand, AtaError> {
    let cdb = cdb16(tf, Protocol::PioDataIn, extend)?;
    Ok(ScsiCommand::data_in(cdb.to_vec(), u32::from(tf.count) * 512))
}

/// A PIO data-out ATA command sending `data`, which must be COUNT blocks of 512 bytes.
pub fn pio_data_out(tf: &TaskFile, extend: bool, data: Vec<u8>) -> Result<ScsiCommand, AtaError> {
    let expected = usize::from(tf.count) * BLOCK_LEN;
    if data.len() != expected {
        return Err(AtaError::DataLength { expected, got: data.len() });
    }
    let cdb = cdb16(tf, Protocol::PioDataOut, extend)?;
    Ok(ScsiCommand {
        cdb: cdb.to_vec(),
        direction: Direction::ToDevice,
        data_len: u32::from(tf.count) * 512,
        data_out: data,
    })
}

/// IDENTIFY DEVICE: one 512-byte block in. hdparm's `get_identify_data()` sends exactly
/// `85 08 0e 00 00 00 01 00 00 00 00 00 00 40 ec 00` (its `--verbose` "outgoing cdb").
pub fn identify_device() -> ScsiCommand {
    let tf = TaskFile { count: 1, device: DEVICE_LBA, command: IDENTIFY_DEVICE, ..TaskFile::default() };
    let cdb = cdb16(&tf, Protocol::PioDataIn, false).expect("a constant 28-bit taskfile fits");
    ScsiCommand::data_in(cdb.to_vec(), 512)
}

/// A SANITIZE DEVICE subcommand (ACS-3 SANITIZE DEVICE feature set; field layouts as in
/// ACS-4 7.32.2 BLOCK ERASE EXT, 7.32.3 CRYPTO SCRAMBLE EXT, 7.32.4 OVERWRITE EXT, 7.32.7
/// SANITIZE STATUS EXT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtaSanitize {
    /// CRYPTO SCRAMBLE EXT (0011h): change the internal encryption keys.
    CryptoScramble {
        /// FAILURE MODE (COUNT bit 4): on failure, allow leaving the failed state with
        /// SANITIZE STATUS EXT + CLEAR SANITIZE OPERATION FAILED.
        failure_mode: bool,
    },
    /// BLOCK ERASE EXT (0012h): erase every user-data block.
    BlockErase {
        /// FAILURE MODE (COUNT bit 4), as for crypto scramble.
        failure_mode: bool,
    },
    /// OVERWRITE EXT (0014h): overwrite every user-data block with a 32-bit pattern.
    Overwrite {
        /// The pattern, LBA(31:0).
        pattern: u32,
        /// Passes, 1 to 16 (16 travels as 0 in OVERWRITE PASS COUNT, COUNT bits 3:0).
        passes: u8,
        /// INVERT PATTERN BETWEEN OVERWRITE PASSES (COUNT bit 7).
        invert_between_passes: bool,
        /// FAILURE MODE (COUNT bit 4).
        failure_mode: bool,
    },
    /// SANITIZE STATUS EXT (0000h): report state and progress.
    Status {
        /// CLEAR SANITIZE OPERATION FAILED (COUNT bit 0).
        clear_failure: bool,
    },
}

impl AtaSanitize {
    /// The taskfile: FEATURE selects the subcommand, LBA carries the key (and the pattern),
    /// COUNT the options, DEVICE 40h, COMMAND B4h. Same key/LBA layout as hdparm's
    /// `do_sanitize_cmd()` (`lba = ((__u64)SANITIZE_OVERWRITE_KEY << 32) | ow_pattern`).
    pub fn taskfile(&self) -> Result<TaskFile, AtaError> {
        const FAILURE_MODE: u16 = 0x0010;
        let fm = |on: bool| if on { FAILURE_MODE } else { 0 };
        let (features, count, lba) = match *self {
            Self::CryptoScramble { failure_mode } => {
                (CRYPTO_SCRAMBLE_EXT, fm(failure_mode), u64::from(CRYPTO_SCRAMBLE_KEY))
            }
            Self::BlockErase { failure_mode } => (BLOCK_ERASE_EXT, fm(failure_mode), u64::from(BLOCK_ERASE_KEY)),
            Self::Overwrite { pattern, passes, invert_between_passes, failure_mode } => {
                if !(1..=16).contains(&passes) {
                    return Err(AtaError::OverwritePasses(passes));
                }
                let pass_field = u16::from(passes) & 0x0F;
                let invert = if invert_between_passes { 0x0080 } else { 0 };
                (
                    OVERWRITE_EXT,
                    invert | fm(failure_mode) | pass_field,
                    (u64::from(OVERWRITE_KEY) << 32) | u64::from(pattern),
                )
            }
            Self::Status { clear_failure } => (SANITIZE_STATUS_EXT, u16::from(clear_failure), 0),
        };
        Ok(TaskFile { features, count, lba, device: DEVICE_LBA, command: SANITIZE_DEVICE })
    }
}

/// SANITIZE DEVICE as a non-data, 48-bit (EXTEND) pass-through command with CK_COND, so the
/// returned registers (status, progress, failure reason) come back in the sense data.
pub fn sanitize_device(op: &AtaSanitize) -> Result<ScsiCommand, AtaError> {
    non_data(&op.taskfile()?, true)
}

/// An ATA security password: 32 bytes, shorter ones zero-padded (as hdparm pads them).
/// Its `Debug` output never shows the bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct AtaPassword([u8; 32]);

impl AtaPassword {
    /// A password from up to 32 bytes.
    pub fn new(bytes: &[u8]) -> Result<Self, AtaError> {
        if bytes.len() > 32 {
            return Err(AtaError::PasswordTooLong(bytes.len()));
        }
        let mut pw = [0u8; 32];
        pw[..bytes.len()].copy_from_slice(bytes);
        Ok(Self(pw))
    }

    /// The 32 password bytes as sent.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
}

impl fmt::Debug for AtaPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AtaPassword(<redacted>)")
    }
}

/// Which password a security command uses (IDENTIFIER bit, word 0 bit 0 of the data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordId {
    /// The user password (0).
    User,
    /// The master password (1).
    Master,
}

/// Security level set with the user password (byte 1 bit 0 of the SET PASSWORD data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityLevel {
    /// High (0): the master password can unlock the device.
    High,
    /// Maximum (1): the master password can only erase it.
    Maximum,
}

/// The 512-byte security data block: byte 0 control bits, byte 1 (SET PASSWORD only) the
/// level, bytes 2-33 the password (ACS-3 SECURITY SET PASSWORD / UNLOCK / ERASE UNIT /
/// DISABLE PASSWORD data content; hdparm `do_set_security()`: `data[0]`, `data[1]`,
/// `memcpy(data+2, password, 32)`).
fn security_block(control: u8, byte1: u8, pw: &AtaPassword) -> Vec<u8> {
    let mut data = vec![0u8; BLOCK_LEN];
    data[0] = control;
    data[1] = byte1;
    data[2..34].copy_from_slice(pw.as_bytes());
    data
}

/// A PIO data-out security command with COUNT 1 and DEVICE 40h (hdparm: `nsect = 1`,
/// device left at `tf_init()`'s 40h, 28-bit).
fn security_command(command: u8, data: Vec<u8>) -> ScsiCommand {
    let tf = TaskFile { count: 1, device: DEVICE_LBA, command, ..TaskFile::default() };
    let cdb = cdb16(&tf, Protocol::PioDataOut, false).expect("COUNT 1, LBA 0 fits a 28-bit taskfile");
    ScsiCommand { cdb: cdb.to_vec(), direction: Direction::ToDevice, data_len: 512, data_out: data }
}

/// SECURITY SET PASSWORD with the user password at the given level (IDENTIFIER 0).
pub fn security_set_user_password(pw: &AtaPassword, level: SecurityLevel) -> ScsiCommand {
    let level_bit = match level {
        SecurityLevel::High => 0,
        SecurityLevel::Maximum => 1,
    };
    security_command(SECURITY_SET_PASSWORD, security_block(0, level_bit, pw))
}

fn identifier_bit(id: PasswordId) -> u8 {
    match id {
        PasswordId::User => 0,
        PasswordId::Master => 1,
    }
}

/// SECURITY UNLOCK (hdparm sends it before SECURITY DISABLE PASSWORD).
pub fn security_unlock(pw: &AtaPassword, id: PasswordId) -> ScsiCommand {
    security_command(SECURITY_UNLOCK, security_block(identifier_bit(id), 0, pw))
}

/// SECURITY ERASE PREPARE: non-data, must be the command right before SECURITY ERASE UNIT.
/// hdparm sends `85 06 20 00 00 00 00 00 00 00 00 00 00 40 f3 00`.
pub fn security_erase_prepare() -> ScsiCommand {
    let tf = TaskFile { device: DEVICE_LBA, command: SECURITY_ERASE_PREPARE, ..TaskFile::default() };
    ScsiCommand::no_data(cdb16(&tf, Protocol::NonData, false).expect("a constant 28-bit taskfile fits").to_vec())
}

/// SECURITY ERASE UNIT; `enhanced` sets the ENHANCED bit (byte 0 bit 1), hdparm's
/// `data[0] |= enhanced_erase ? 0x02 : 0`.
pub fn security_erase_unit(pw: &AtaPassword, id: PasswordId, enhanced: bool) -> ScsiCommand {
    let control = identifier_bit(id) | if enhanced { 0x02 } else { 0 };
    security_command(SECURITY_ERASE_UNIT, security_block(control, 0, pw))
}

/// SECURITY DISABLE PASSWORD.
pub fn security_disable_password(pw: &AtaPassword, id: PasswordId) -> ScsiCommand {
    security_command(SECURITY_DISABLE_PASSWORD, security_block(identifier_bit(id), 0, pw))
}

/// The ATA result registers returned in sense data (SAT-3 12.2.2.6 ATA Status Return
/// descriptor; SAT-5 12.2.2.8 fixed format).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtaReturn {
    /// EXTEND: the registers are those of a 48-bit command.
    pub extend: bool,
    /// ERROR.
    pub error: u8,
    /// COUNT(15:0); bits 15:8 are zero when `upper_valid` is false.
    pub count: u16,
    /// LBA(47:0); bits 47:24 are zero when `upper_valid` is false.
    pub lba: u64,
    /// DEVICE.
    pub device: u8,
    /// STATUS.
    pub status: u8,
    /// False when fixed-format sense flagged nonzero upper bytes it cannot carry.
    pub upper_valid: bool,
}

impl AtaReturn {
    /// Reads the registers from sense data. Descriptor format: the ATA Status Return
    /// descriptor (type 09h, additional length 0Ch): byte 2 EXTEND, 3 ERROR, 4/5 COUNT(15:8/
    /// 7:0), 6/7 LBA(31:24/7:0), 8/9 LBA(39:32/15:8), 10/11 LBA(47:40/23:16), 12 DEVICE,
    /// 13 STATUS (hdparm `sg16()` reads the same offsets). Fixed format (used when the
    /// SATL's D_SENSE is off; libata `ata_scsi_set_passthru_sense_fields()`): INFORMATION
    /// bytes 3-6 = ERROR, STATUS, DEVICE, COUNT(7:0); byte 8 EXTEND (bit 7), COUNT UPPER
    /// NONZERO (bit 6), LBA UPPER NONZERO (bit 5); bytes 9-11 LBA(7:0/15:8/23:16). Fixed
    /// format is taken as ATA registers only when VALID is set or the ASC/ASCQ is 00h/1Dh.
    pub fn from_sense(sense: &Sense) -> Option<Self> {
        match sense.format {
            SenseFormat::Descriptor => {
                let d = sense.descriptor(0x09)?;
                if d.len() < 14 {
                    return None;
                }
                let extend = d[2] & 0x01 != 0;
                let lba = u64::from_le_bytes([d[7], d[9], d[11], d[6], d[8], d[10], 0, 0]);
                Some(Self {
                    extend,
                    error: d[3],
                    count: u16::from_le_bytes([d[5], d[4]]),
                    lba,
                    device: d[12],
                    status: d[13],
                    upper_valid: true,
                })
            }
            SenseFormat::Fixed => {
                let r = &sense.raw;
                if r.len() < 12 {
                    return None;
                }
                let valid = r[0] & 0x80 != 0;
                if !valid && (sense.asc, sense.ascq) != (0x00, 0x1D) {
                    return None;
                }
                let extend = r[8] & 0x80 != 0;
                let upper_nonzero = r[8] & 0x60 != 0;
                Some(Self {
                    extend,
                    error: r[3],
                    count: u16::from(r[6]),
                    lba: u64::from_le_bytes([r[9], r[10], r[11], 0, 0, 0, 0, 0]),
                    device: r[5],
                    status: r[4],
                    upper_valid: !upper_nonzero,
                })
            }
        }
    }

    /// The command failed: ERR, DF, DRQ or BSY set at completion (libata's test in
    /// `ata_gen_passthru_sense()`; hdparm checks ERR and DRQ).
    pub fn failed(&self) -> bool {
        self.status & (status::ERR | status::DF | status::DRQ | status::BSY) != 0
    }

    /// The device aborted the command (ERR with ABRT): unsupported, wrong password,
    /// frozen, or a sanitize refused.
    pub fn aborted(&self) -> bool {
        self.status & status::ERR != 0 && self.error & error::ABRT != 0
    }
}

impl fmt::Display for AtaReturn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "status {:#04x}, error {:#04x}", self.status, self.error)?;
        let mut flags = Vec::new();
        if self.status & status::DF != 0 {
            flags.push("DF");
        }
        if self.status & status::ERR != 0 {
            for (bit, name) in
                [(error::ABRT, "ABRT"), (error::IDNF, "IDNF"), (error::UNC, "UNC"), (error::ICRC, "ICRC")]
            {
                if self.error & bit != 0 {
                    flags.push(name);
                }
            }
        }
        if !flags.is_empty() {
            write!(f, " ({})", flags.join(", "))?;
        }
        write!(f, ", count {:#06x}, lba {:#014x}", self.count, self.lba)
    }
}

/// Interprets the sense bytes SG_IO returned for an ATA PASS-THROUGH command:
/// - no sense: the command succeeded and no registers were asked for (data commands);
/// - ATA registers without ERR/DF/DRQ/BSY under NO SENSE or RECOVERED ERROR: success,
///   with the registers;
/// - ATA registers showing failure: [`AtaError::Device`] (check [`AtaReturn::aborted`]);
/// - any other sense (e.g. ILLEGAL REQUEST from a SATL that rejects the command):
///   [`AtaError::Sense`].
pub fn check_completion(sense: &[u8]) -> Result<Option<AtaReturn>, AtaError> {
    let Some(sense) = Sense::parse(sense)? else { return Ok(None) };
    let benign = matches!(sense.key, SenseKey::NoSense | SenseKey::RecoveredError);
    match AtaReturn::from_sense(&sense) {
        Some(regs) if regs.failed() => Err(AtaError::Device(regs)),
        Some(regs) if benign => Ok(Some(regs)),
        None if benign => Ok(None),
        _ => Err(AtaError::Sense(sense)),
    }
}

/// Decoded SANITIZE STATUS EXT result (COUNT(15:12) flags, LBA(15:0) progress; hdparm
/// `get_sanitize_state()` / `sanitize_normal_output()` read `hob.nsect` bits 7..4 and
/// `lbam:lbal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtaSanitizeStatus {
    /// SANITIZE OPERATION COMPLETED WITHOUT ERROR (COUNT bit 15).
    pub completed_without_error: bool,
    /// SANITIZE IN PROGRESS (COUNT bit 14).
    pub in_progress: bool,
    /// SANITIZE FROZEN (COUNT bit 13).
    pub frozen: bool,
    /// SANITIZE ANTIFREEZE (COUNT bit 12).
    pub antifreeze: bool,
    /// Progress numerator over 65536 (LBA(15:0)), meaningful while in progress.
    pub progress: Option<u16>,
}

impl AtaSanitizeStatus {
    /// Decodes the registers of a successful SANITIZE STATUS EXT. Needs COUNT(15:8), which
    /// only descriptor-format sense (or fixed format with all upper bytes zero) carries.
    pub fn from_return(regs: &AtaReturn) -> Result<Self, AtaError> {
        if !regs.upper_valid {
            return Err(AtaError::RegistersIncomplete);
        }
        let flags = regs.count.to_be_bytes()[0];
        let in_progress = flags & 0x40 != 0;
        let progress_bytes = regs.lba.to_le_bytes();
        Ok(Self {
            completed_without_error: flags & 0x80 != 0,
            in_progress,
            frozen: flags & 0x20 != 0,
            antifreeze: flags & 0x10 != 0,
            progress: in_progress.then(|| u16::from_le_bytes([progress_bytes[0], progress_bytes[1]])),
        })
    }

    /// Percent complete while in progress (hdparm prints the same ratio).
    pub fn percent(&self) -> Option<f64> {
        self.progress.map(|p| f64::from(p) * 100.0 / 65536.0)
    }
}

/// Why a SANITIZE DEVICE command was aborted: the SANITIZE DEVICE ERROR REASON in LBA(7:0)
/// of the error outputs (hdparm `sanitize_error_output()` / `sanitize_err_reason_str`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SanitizeFailureReason {
    /// 00h: no reason given.
    NoReason,
    /// 01h: the last sanitize operation was unsuccessful (device in the failed state).
    CommandUnsuccessful,
    /// 02h: unsupported SANITIZE DEVICE subcommand.
    UnsupportedCommand,
    /// 03h: the device is in the frozen state.
    DeviceFrozen,
    /// 04h: SANITIZE FREEZE LOCK refused because of antifreeze lock.
    AntifreezeLock,
    /// Any other value.
    Other(u8),
}

impl SanitizeFailureReason {
    /// Reads the reason from the error registers of an aborted SANITIZE DEVICE command.
    pub fn from_return(regs: &AtaReturn) -> Self {
        match regs.lba.to_le_bytes()[0] {
            0 => Self::NoReason,
            1 => Self::CommandUnsuccessful,
            2 => Self::UnsupportedCommand,
            3 => Self::DeviceFrozen,
            4 => Self::AntifreezeLock,
            other => Self::Other(other),
        }
    }
}

/// Time a SECURITY ERASE UNIT needs, from IDENTIFY word 89 (normal) or 90 (enhanced).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EraseTime {
    /// 0: not reported.
    NotReported,
    /// A value in minutes (the word holds it in 2-minute units).
    Minutes(u32),
    /// The maximum code: more than this many minutes (508 or 65532).
    MoreThanMinutes(u32),
}

impl EraseTime {
    /// Decodes word 89/90: bit 15 set = extended format with the time in bits 14:0 (7FFFh =
    /// more than 65532 minutes); clear = bits 7:0 (FFh = more than 508 minutes); both in
    /// 2-minute units (ACS-3 IDENTIFY DEVICE words 89-90; hdparm `get_erase_timeout_secs()`).
    pub fn from_word(word: u16) -> Self {
        let (value, max, max_minutes) =
            if word & 0x8000 != 0 { (word & 0x7FFF, 0x7FFF, 65_532) } else { (word & 0x00FF, 0x00FF, 508) };
        match value {
            0 => Self::NotReported,
            v if v == max => Self::MoreThanMinutes(max_minutes),
            v => Self::Minutes(u32::from(v) * 2),
        }
    }
}

/// Security feature set state (IDENTIFY words 82, 85, 128).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtaSecurity {
    /// Word 82 bit 1: Security feature set supported (when words 82-83 are valid).
    pub feature_set_supported: bool,
    /// Word 85 bit 1: Security feature set enabled, i.e. a user password is set (when
    /// words 85-87 are valid).
    pub feature_set_enabled: bool,
    /// Word 128 bit 0: SECURITY SUPPORTED.
    pub supported: bool,
    /// Word 128 bit 1: SECURITY ENABLED.
    pub enabled: bool,
    /// Word 128 bit 2: SECURITY LOCKED.
    pub locked: bool,
    /// Word 128 bit 3: SECURITY FROZEN (security commands abort until power cycle).
    pub frozen: bool,
    /// Word 128 bit 4: SECURITY COUNT EXPIRED (too many wrong passwords).
    pub count_expired: bool,
    /// Word 128 bit 5: ENHANCED SECURITY ERASE SUPPORTED.
    pub enhanced_erase_supported: bool,
    /// Word 128 bit 8: MASTER PASSWORD CAPABILITY is Maximum.
    pub master_capability_maximum: bool,
}

/// Sanitize feature set support (IDENTIFY word 59).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtaSanitizeSupport {
    /// Bit 12: Sanitize feature set supported (hdparm tests `id[59] & 0x1000`).
    pub supported: bool,
    /// Bit 13: CRYPTO SCRAMBLE EXT supported.
    pub crypto_scramble: bool,
    /// Bit 14: OVERWRITE EXT supported.
    pub overwrite: bool,
    /// Bit 15: BLOCK ERASE EXT supported.
    pub block_erase: bool,
    /// Bit 10: SANITIZE ANTIFREEZE LOCK EXT supported.
    pub antifreeze_lock: bool,
}

/// Parsed IDENTIFY DEVICE data (ACS-3 7.12.7, Table 45), with the raw words kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AtaIdentify {
    /// MODEL NUMBER, words 27-46.
    pub model: String,
    /// SERIAL NUMBER, words 10-19.
    pub serial: String,
    /// FIRMWARE REVISION, words 23-26.
    pub firmware: String,
    /// Addressable logical sectors: words 230-233 when word 69 bit 3 says they are valid,
    /// else words 100-103 with the 48-bit feature set (word 83 bit 10), else words 60-61.
    pub sectors: u64,
    /// Word 83 bit 10: 48-bit Address feature set supported.
    pub lba48: bool,
    /// Logical sector size in bytes (word 106 bit 12 with words 117-118, else 512).
    pub logical_sector_size: u32,
    /// Physical sector size in bytes (word 106 bit 13 with bits 3:0 as a power of two).
    pub physical_sector_size: u32,
    /// World wide name, words 108-111 (when word 84 bit 8 says it is supported).
    pub wwn: Option<u64>,
    /// Word 217: nominal media rotation rate (1 = non-rotating, i.e. solid state).
    pub rotation_rate: u16,
    /// Word 169 bit 0: DATA SET MANAGEMENT TRIM supported.
    pub trim: bool,
    /// Word 69 bit 14: deterministic data after trim.
    pub deterministic_read_after_trim: bool,
    /// Word 69 bit 5: trimmed blocks read as zeros.
    pub zeros_after_trim: bool,
    /// Word 69 bit 4: the device encrypts all user data (crypto erase is meaningful).
    pub encrypts_all_user_data: bool,
    /// Security feature set state.
    pub security: AtaSecurity,
    /// Word 89: SECURITY ERASE UNIT time, normal mode.
    pub normal_erase_time: EraseTime,
    /// Word 90: SECURITY ERASE UNIT time, enhanced mode.
    pub enhanced_erase_time: EraseTime,
    /// Word 92: master password identifier.
    pub master_password_id: u16,
    /// Sanitize feature set support.
    pub sanitize: AtaSanitizeSupport,
    /// All 256 words, in host order.
    pub words: [u16; 256],
}

/// Characters of an ATA string field: each word holds two characters, the first in bits
/// 15:8 (ACS-3 3.3.10), so the bytes of each little-endian word are swapped.
fn ata_string(words: &[u16]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_be_bytes()).collect();
    super::trimmed_ascii(&bytes)
}

impl AtaIdentify {
    /// Parses the 512 bytes IDENTIFY DEVICE returned. When word 255 carries the A5h
    /// signature in bits 7:0, the checksum in bits 15:8 must make the byte sum zero.
    pub fn parse(buf: &[u8]) -> Result<Self, AtaError> {
        if buf.len() < 512 {
            return Err(AtaError::BufferTooShort { need: 512, got: buf.len() });
        }
        let buf = &buf[..512];
        let mut w = [0u16; 256];
        for (i, word) in w.iter_mut().enumerate() {
            *word = super::le_u16(buf, 2 * i);
        }
        if w[255] & 0x00FF == 0x00A5 {
            let sum = buf.iter().fold(0u8, |acc, b| acc.wrapping_add(*b));
            if sum != 0 {
                return Err(AtaError::IdentifyChecksum { sum });
            }
        }
        let bit = |word: usize, b: u32| w[word] & (1 << b) != 0;
        // Words 82-84 are valid when word 83 bits 15:14 = 01b; words 85-87 when word 87's are.
        let valid_82_84 = w[83] & 0xC000 == 0x4000;
        let valid_85_87 = w[87] & 0xC000 == 0x4000;
        let valid_106 = w[106] & 0xC000 == 0x4000;

        let lba48 = valid_82_84 && bit(83, 10);
        let sectors28 = u64::from(w[60]) | (u64::from(w[61]) << 16);
        let sectors48 =
            u64::from(w[100]) | (u64::from(w[101]) << 16) | (u64::from(w[102]) << 32) | (u64::from(w[103]) << 48);
        let extended =
            u64::from(w[230]) | (u64::from(w[231]) << 16) | (u64::from(w[232]) << 32) | (u64::from(w[233]) << 48);
        let sectors = if bit(69, 3) && extended != 0 {
            extended
        } else if lba48 {
            sectors48
        } else {
            sectors28
        };

        let logical_sector_size = if valid_106 && bit(106, 12) {
            (u32::from(w[117]) | (u32::from(w[118]) << 16)).saturating_mul(2)
        } else {
            512
        };
        let physical_sector_size =
            if valid_106 && bit(106, 13) { logical_sector_size << (w[106] & 0x000F) } else { logical_sector_size };

        let wwn_supported = w[84] & 0xC000 == 0x4000 && bit(84, 8);
        let wwn_value =
            (u64::from(w[108]) << 48) | (u64::from(w[109]) << 32) | (u64::from(w[110]) << 16) | u64::from(w[111]);
        let wwn = (wwn_supported && wwn_value != 0).then_some(wwn_value);

        Ok(Self {
            model: ata_string(&w[27..47]),
            serial: ata_string(&w[10..20]),
            firmware: ata_string(&w[23..27]),
            sectors,
            lba48,
            logical_sector_size,
            physical_sector_size,
            wwn,
            rotation_rate: w[217],
            trim: bit(169, 0),
            deterministic_read_after_trim: bit(69, 14),
            zeros_after_trim: bit(69, 5),
            encrypts_all_user_data: bit(69, 4),
            security: AtaSecurity {
                feature_set_supported: valid_82_84 && bit(82, 1),
                feature_set_enabled: valid_85_87 && bit(85, 1),
                supported: bit(128, 0),
                enabled: bit(128, 1),
                locked: bit(128, 2),
                frozen: bit(128, 3),
                count_expired: bit(128, 4),
                enhanced_erase_supported: bit(128, 5),
                master_capability_maximum: bit(128, 8),
            },
            normal_erase_time: EraseTime::from_word(w[89]),
            enhanced_erase_time: EraseTime::from_word(w[90]),
            master_password_id: w[92],
            sanitize: AtaSanitizeSupport {
                supported: bit(59, 12),
                crypto_scramble: bit(59, 13),
                overwrite: bit(59, 14),
                block_erase: bit(59, 15),
                antifreeze_lock: bit(59, 10),
            },
            words: w,
        })
    }

    /// Non-rotating media (word 217 = 0001h).
    pub fn is_solid_state(&self) -> bool {
        self.rotation_rate == 1
    }

    /// Timeout for SECURITY ERASE UNIT in seconds, as hdparm's `get_erase_timeout_secs()`
    /// computes it: the reported time plus 60 minutes (or the maximum code plus 90), but
    /// never below an estimate of 1 s per 30 MiB of capacity plus 30 minutes.
    pub fn security_erase_timeout_secs(&self, enhanced: bool) -> u64 {
        let estimate = self.sectors / 2048 / 30 + 30 * 60;
        let time = if enhanced { self.enhanced_erase_time } else { self.normal_erase_time };
        let minutes = match time {
            EraseTime::NotReported => return estimate,
            EraseTime::Minutes(m) => u64::from(m) + 60,
            EraseTime::MoreThanMinutes(m) => u64::from(m) + 90,
        };
        (minutes * 60).max(estimate)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a 512-byte IDENTIFY buffer from (word, value) pairs and ATA strings.
    fn identify_buffer(words: &[(usize, u16)], strings: &[(usize, &str, usize)]) -> Vec<u8> {
        let mut w = [0u16; 256];
        for &(i, v) in words {
            w[i] = v;
        }
        for &(start, s, len_words) in strings {
            let mut bytes = s.as_bytes().to_vec();
            bytes.resize(len_words * 2, b' ');
            for k in 0..len_words {
                w[start + k] = u16::from_be_bytes([bytes[2 * k], bytes[2 * k + 1]]);
            }
        }
        w.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// Sets word 255 to A5h plus the checksum that makes the byte sum zero.
    fn seal(buf: &mut [u8]) {
        buf[510] = 0xA5;
        buf[511] = 0;
        let sum = buf.iter().fold(0u8, |a, b| a.wrapping_add(*b));
        buf[511] = 0u8.wrapping_sub(sum);
    }

    // hdparm `get_identify_data()` -> `do_drive_cmd()` -> `sg16()`: the `--verbose`
    // "outgoing cdb" for IDENTIFY (seen e.g. in martijnvanbrummelen/nwipe#444 and #547):
    // 85 08 0e 00 00 00 01 00 00 00 00 00 00 40 ec 00. Byte 13 is 40h: `tf_init()` sets
    // `tf->dev = ATA_USING_LBA`.
    #[test]
    fn identify_cdb_matches_hdparm() {
        let cmd = identify_device();
        assert_eq!(
            cmd.cdb,
            [0x85, 0x08, 0x0E, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x40, 0xEC, 0x00]
        );
        assert_eq!(cmd.direction, Direction::FromDevice);
        assert_eq!(cmd.data_len, 512);
    }

    // hdparm `do_set_security()`: `do_drive_cmd(fd, {ATA_OP_SECURITY_ERASE_PREPARE,0,0,0})`,
    // non-data -> cdb[1] = 3<<1, cdb[2] = SG_CDB2_CHECK_COND.
    #[test]
    fn erase_prepare_cdb_matches_hdparm() {
        let cmd = security_erase_prepare();
        assert_eq!(cmd.cdb, [0x85, 0x06, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0xF3, 0x00]);
        assert_eq!(cmd.direction, Direction::None);
        assert_eq!(cmd.data_len, 0);
    }

    // smartctl's SMART RETURN STATUS through SAT (scsiata.cpp): FEATURE DAh, LBA mid 4Fh,
    // LBA high C2h, COMMAND B0h, non-data with CK_COND so the registers come back.
    #[test]
    fn smart_return_status_cdb_and_verdicts() {
        let cmd = smart_return_status();
        assert_eq!(
            cmd.cdb,
            [0x85, 0x06, 0x20, 0x00, 0xDA, 0x00, 0x00, 0x00, 0x00, 0x00, 0x4F, 0x00, 0xC2, 0x00, 0xB0, 0x00]
        );
        let regs =
            |lba: u64| AtaReturn { extend: false, error: 0, count: 0, lba, device: 0, status: 0x50, upper_valid: true };
        assert_eq!(smart_status(&regs(0x00C2_4F00)), Some(true));
        assert_eq!(smart_status(&regs(0x002C_F400)), Some(false));
        assert_eq!(smart_status(&regs(0)), None);
    }

    // hdparm `do_set_security()` via `do_taskfile_cmd()`: PIO out, nsect 1, 28-bit:
    // cdb[1] = 5<<1, cdb[2] = TLEN_NSECT | TLEN_SECTORS | TDIR_TO_DEV = 06h; data[0] =
    // master bit | enhanced<<1, password at data[2..34].
    #[test]
    fn security_erase_unit_enhanced() {
        let pw = AtaPassword::new(b"metal").unwrap();
        let cmd = security_erase_unit(&pw, PasswordId::User, true);
        assert_eq!(cmd.cdb, [0x85, 0x0A, 0x06, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0x40, 0xF4, 0x00]);
        assert_eq!(cmd.direction, Direction::ToDevice);
        assert_eq!(cmd.data_len, 512);
        assert_eq!(cmd.data_out.len(), 512);
        assert_eq!(&cmd.data_out[..8], &[0x02, 0x00, b'm', b'e', b't', b'a', b'l', 0x00]);
        assert!(cmd.data_out[7..].iter().all(|b| *b == 0));

        let normal_master = security_erase_unit(&pw, PasswordId::Master, false);
        assert_eq!(normal_master.data_out[0], 0x01);
    }

    // hdparm `do_set_security()`: SET PASS data[1] = security_mode (1 = max); DISABLE and
    // UNLOCK carry data[0] = master bit; same PIO-out CDB as ERASE UNIT.
    #[test]
    fn security_set_password_and_disable() {
        let pw = AtaPassword::new(&[0x11; 32]).unwrap();
        let set = security_set_user_password(&pw, SecurityLevel::Maximum);
        assert_eq!(set.cdb, [0x85, 0x0A, 0x06, 0, 0, 0, 0x01, 0, 0, 0, 0, 0, 0, 0x40, 0xF1, 0x00]);
        assert_eq!(&set.data_out[..2], &[0x00, 0x01]);
        assert_eq!(&set.data_out[2..34], &[0x11; 32]);
        assert!(set.data_out[34..].iter().all(|b| *b == 0));
        let high = security_set_user_password(&pw, SecurityLevel::High);
        assert_eq!(high.data_out[1], 0x00);

        let disable = security_disable_password(&pw, PasswordId::User);
        assert_eq!(disable.cdb[14], 0xF6);
        assert_eq!(disable.data_out[0], 0x00);
        let unlock = security_unlock(&pw, PasswordId::Master);
        assert_eq!(unlock.cdb[14], 0xF2);
        assert_eq!(unlock.data_out[0], 0x01);
    }

    // ACS-3 security data: PASSWORD is words 1-16 (32 bytes); hdparm zero-pads it.
    #[test]
    fn passwords_are_bounded_and_redacted() {
        assert_eq!(AtaPassword::new(&[0; 33]), Err(AtaError::PasswordTooLong(33)));
        let pw = AtaPassword::new(b"secret").unwrap();
        assert_eq!(format!("{pw:?}"), "AtaPassword(<redacted>)");
    }

    // hdparm `do_sanitize_cmd()`: FEATURE 0011h, LBA = 43727970h, hob flags set so the
    // command is LBA48 (cdb[1] = 3<<1 | 1), CK_COND; SAT-3 byte order for LBA.
    #[test]
    fn sanitize_crypto_scramble_cdb() {
        let cmd = sanitize_device(&AtaSanitize::CryptoScramble { failure_mode: false }).unwrap();
        assert_eq!(
            cmd.cdb,
            [0x85, 0x07, 0x20, 0x00, 0x11, 0x00, 0x00, 0x43, 0x70, 0x00, 0x79, 0x00, 0x72, 0x40, 0xB4, 0x00]
        );
        assert_eq!(cmd.direction, Direction::None);
    }

    // hdparm `do_sanitize_cmd()`: FEATURE 0012h, LBA = 426B4572h ("BkEr"); FAILURE MODE
    // is COUNT bit 4 (ACS-4 7.32.2).
    #[test]
    fn sanitize_block_erase_cdb() {
        let cmd = sanitize_device(&AtaSanitize::BlockErase { failure_mode: true }).unwrap();
        assert_eq!(
            cmd.cdb,
            [0x85, 0x07, 0x20, 0x00, 0x12, 0x00, 0x10, 0x42, 0x72, 0x00, 0x45, 0x00, 0x6B, 0x40, 0xB4, 0x00]
        );
    }

    // OVERWRITE EXT: LBA(47:32) = 4F57h key, LBA(31:0) = pattern; COUNT bit 7 invert,
    // bits 3:0 passes with 16 encoded as 0.
    #[test]
    fn sanitize_overwrite_cdb() {
        let op = AtaSanitize::Overwrite {
            pattern: 0xDEAD_BEEF,
            passes: 1,
            invert_between_passes: false,
            failure_mode: false,
        };
        let cmd = sanitize_device(&op).unwrap();
        assert_eq!(
            cmd.cdb,
            [0x85, 0x07, 0x20, 0x00, 0x14, 0x00, 0x01, 0xDE, 0xEF, 0x57, 0xBE, 0x4F, 0xAD, 0x40, 0xB4, 0x00]
        );

        let op = AtaSanitize::Overwrite { pattern: 0, passes: 16, invert_between_passes: true, failure_mode: true };
        assert_eq!(op.taskfile().unwrap().count, 0x0090);
        for bad in [0, 17] {
            let op =
                AtaSanitize::Overwrite { pattern: 0, passes: bad, invert_between_passes: false, failure_mode: false };
            assert_eq!(sanitize_device(&op), Err(AtaError::OverwritePasses(bad)));
        }
    }

    // hdparm `--sanitize-status`: FEATURE 0000h, LBA 0; CLEAR SANITIZE OPERATION FAILED is
    // COUNT bit 0 (ACS-4 7.32.7).
    #[test]
    fn sanitize_status_cdb() {
        let cmd = sanitize_device(&AtaSanitize::Status { clear_failure: false }).unwrap();
        assert_eq!(cmd.cdb, [0x85, 0x07, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0xB4, 0]);
        let clear = sanitize_device(&AtaSanitize::Status { clear_failure: true }).unwrap();
        assert_eq!(clear.cdb[6], 0x01);
    }

    // SAT-3 Table 139 field placement for 48-bit and 28-bit taskfiles.
    #[test]
    fn cdb_field_placement() {
        let tf = TaskFile { features: 0xA1B2, count: 0xC3D4, lba: 0x1234_5678_9ABC, device: 0x40, command: 0x25 };
        let cdb = cdb16(&tf, Protocol::PioDataIn, true).unwrap();
        assert_eq!(
            cdb,
            [0x85, 0x09, 0x0E, 0xA1, 0xB2, 0xC3, 0xD4, 0x56, 0xBC, 0x34, 0x9A, 0x12, 0x78, 0x40, 0x25, 0x00]
        );

        let tf = TaskFile { features: 0x01, count: 0x02, lba: 0x0123_4567, device: 0x40, command: 0x20 };
        let cdb = cdb16(&tf, Protocol::PioDataIn, false).unwrap();
        assert_eq!(
            cdb,
            [0x85, 0x08, 0x0E, 0x00, 0x01, 0x00, 0x02, 0x00, 0x67, 0x00, 0x45, 0x00, 0x23, 0x41, 0x20, 0x00]
        );

        let wide = |tf: TaskFile| cdb16(&tf, Protocol::NonData, false);
        assert!(matches!(
            wide(TaskFile { features: 0x100, ..tf }),
            Err(AtaError::FieldTooWide { field: "FEATURE", .. })
        ));
        assert!(matches!(wide(TaskFile { count: 0x100, ..tf }), Err(AtaError::FieldTooWide { field: "COUNT", .. })));
        assert!(matches!(wide(TaskFile { lba: 1 << 28, ..tf }), Err(AtaError::FieldTooWide { field: "LBA", .. })));
        assert_eq!(
            cdb16(&TaskFile { lba: 1 << 48, ..tf }, Protocol::NonData, true),
            Err(AtaError::LbaTooWide(1 << 48))
        );
    }

    // SAT-3 Table 139/140: PIO data-in/out lengths come from COUNT in 512-byte blocks
    // (T_LENGTH 10b, BYT_BLOK 1), as hdparm `sg16()` sets them.
    #[test]
    fn pio_helpers_check_lengths() {
        let tf = TaskFile { count: 2, device: DEVICE_LBA, command: 0x30, ..TaskFile::default() };
        assert_eq!(pio_data_in(&tf, false).unwrap().data_len, 1024);
        assert_eq!(pio_data_out(&tf, false, vec![0; 512]), Err(AtaError::DataLength { expected: 1024, got: 512 }));
        let out = pio_data_out(&tf, false, vec![0; 1024]).unwrap();
        assert_eq!(out.cdb[1..3], [0x0A, 0x06]);
        assert_eq!(non_data(&tf, false).unwrap().cdb[1..3], [0x06, 0x20]);
    }

    /// Descriptor-format sense as libata builds it for ATA PASS-THROUGH with CK_COND
    /// (`ata_gen_passthru_sense()` + `ata_scsi_set_passthru_sense_fields()`).
    fn descriptor_sense(key: u8, asc: u8, ascq: u8, regs: [u8; 12]) -> Vec<u8> {
        let mut sb = vec![0x72, key, asc, ascq, 0, 0, 0, 14, 0x09, 0x0C];
        sb.extend_from_slice(&regs);
        sb
    }

    // SANITIZE STATUS EXT, completed without error: COUNT(15:8) = 80h, progress FFFFh.
    #[test]
    fn sanitize_status_from_descriptor_sense() {
        // EXTEND, ERROR, COUNT hi/lo, LBA 31:24/7:0, 39:32/15:8, 47:40/23:16, DEVICE, STATUS.
        let sb = descriptor_sense(
            0x01,
            0x00,
            0x1D,
            [0x01, 0x00, 0x80, 0x00, 0x00, 0xFF, 0x00, 0xFF, 0x00, 0x00, 0x40, 0x50],
        );
        let regs = check_completion(&sb).unwrap().unwrap();
        assert!(regs.extend);
        assert_eq!(regs.count, 0x8000);
        assert_eq!(regs.lba, 0xFFFF);
        assert_eq!(regs.status, 0x50);
        let st = AtaSanitizeStatus::from_return(&regs).unwrap();
        assert!(st.completed_without_error);
        assert!(!st.in_progress && !st.frozen && !st.antifreeze);
        assert_eq!(st.progress, None);

        let sb = descriptor_sense(
            0x01,
            0x00,
            0x1D,
            [0x01, 0x00, 0x40, 0x00, 0x00, 0x00, 0x00, 0x80, 0x00, 0x00, 0x40, 0x50],
        );
        let st = AtaSanitizeStatus::from_return(&check_completion(&sb).unwrap().unwrap()).unwrap();
        assert!(st.in_progress);
        assert_eq!(st.progress, Some(0x8000));
        assert_eq!(st.percent(), Some(50.0));
    }

    // libata maps ERR+ABRT to ABORTED COMMAND / 00h 00h and copies the registers.
    #[test]
    fn aborted_command_is_recognised() {
        let sb = descriptor_sense(
            0x0B,
            0x00,
            0x00,
            [0x01, 0x04, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x40, 0x51],
        );
        let Err(AtaError::Device(regs)) = check_completion(&sb) else { panic!("expected a device error") };
        assert!(regs.failed());
        assert!(regs.aborted());
        assert_eq!(SanitizeFailureReason::from_return(&regs), SanitizeFailureReason::DeviceFrozen);
        assert_eq!(
            AtaError::Device(regs).to_string(),
            "ATA command failed: status 0x51, error 0x04 (ABRT), count 0x0000, lba 0x000000000003"
        );
    }

    // SAT-5 12.2.2.8 / libata fixed format: byte 0 VALID, 3 ERROR, 4 STATUS, 5 DEVICE,
    // 6 COUNT(7:0), 8 EXTEND|COUNT UPPER NONZERO|LBA UPPER NONZERO, 9-11 LBA(23:0).
    #[test]
    fn fixed_format_registers() {
        let sb = [0xF0, 0, 0x01, 0x00, 0x50, 0x40, 0x00, 10, 0x80, 0x11, 0x22, 0x33, 0x00, 0x1D, 0, 0, 0, 0];
        let regs = check_completion(&sb).unwrap().unwrap();
        assert!(regs.extend && regs.upper_valid);
        assert_eq!((regs.error, regs.status, regs.device, regs.count, regs.lba), (0, 0x50, 0x40, 0, 0x33_2211));
        let st = AtaSanitizeStatus::from_return(&regs).unwrap();
        assert!(!st.completed_without_error);

        let mut upper = sb;
        upper[8] = 0xC0;
        let regs = check_completion(&upper).unwrap().unwrap();
        assert!(!regs.upper_valid);
        assert_eq!(AtaSanitizeStatus::from_return(&regs), Err(AtaError::RegistersIncomplete));
    }

    // SPC-4 4.5.2 / SAT-3 12.2.2.6: without an ATA Status Return descriptor only a benign
    // sense key (NO SENSE, RECOVERED ERROR) counts as success.
    #[test]
    fn completion_without_registers() {
        assert_eq!(check_completion(&[]), Ok(None));
        // ILLEGAL REQUEST, invalid opcode, no ATA descriptor: the SATL refused the command.
        let sb = [0x72, 0x05, 0x20, 0x00, 0, 0, 0, 0];
        assert!(matches!(check_completion(&sb), Err(AtaError::Sense(s)) if s.unsupported()));
        // RECOVERED ERROR without registers is not a failure.
        let sb = [0x72, 0x01, 0x00, 0x1D, 0, 0, 0, 0];
        assert_eq!(check_completion(&sb), Ok(None));
        assert!(matches!(check_completion(&[0x55; 8]), Err(AtaError::BadSense(_))));
    }

    // A real IDENTIFY prefix: Seagate ST4000NM0033 from hdparm --verbose in
    // martijnvanbrummelen/nwipe#444 (bytes 0-95 as printed, rest zero, no checksum).
    #[test]
    fn identify_strings_from_real_drive() {
        let prefix = "5a 0c ff 3f 37 c8 10 00 00 00 00 00 3f 00 00 00 00 00 00 00 \
                      20 20 20 20 20 20 20 20 20 20 20 20 31 5a 37 5a 56 4e 37 46 \
                      00 00 00 00 00 00 4e 53 34 30 20 20 20 20 \
                      54 53 30 34 30 30 4d 4e 30 30 33 33 39 2d 4d 5a 37 31 20 30 \
                      20 20 20 20 20 20 20 20 20 20 20 20 20 20 20 20 20 20 20 20 10 80";
        let mut buf: Vec<u8> = prefix.split_whitespace().map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
        assert_eq!(buf.len(), 96);
        buf.resize(512, 0);
        let id = AtaIdentify::parse(&buf).unwrap();
        assert_eq!(id.serial, "Z1Z7NVF7");
        assert_eq!(id.firmware, "SN04");
        assert_eq!(id.model, "ST4000NM0033-9ZM170");
        assert_eq!(id.words[47], 0x8010);
    }

    // ACS-3 IDENTIFY DEVICE (Table 45) words 59, 60-61, 69, 82-87, 89-90, 92, 100-103,
    // 106, 108-111, 128, 169, 217, 255 (checksum).
    #[test]
    fn identify_capabilities() {
        let mut buf = identify_buffer(
            &[
                (59, 0xF400), // sanitize supported + crypto + overwrite + block + antifreeze
                (60, 0xFFFF), // 28-bit capacity 0x0FFFFFFF
                (61, 0x0FFF),
                (69, 0x4030), // DRAT, RZAT, encrypts all user data
                (82, 0x0002), // security supported
                (83, 0x4400), // valid, 48-bit
                (84, 0x4100), // valid, WWN
                (85, 0x0002), // security enabled
                (87, 0x4000), // valid
                (89, 0x0005), // 10 minutes
                (90, 0x8010), // extended: 32 minutes
                (92, 0xFFFE),
                (100, 0xBEB0), // 48-bit capacity 0x1D1C0BEB0 = 7814037168
                (101, 0xD1C0),
                (102, 0x0001),
                (106, 0x6003), // valid, multiple logical per physical, 2^3
                (108, 0x5000),
                (109, 0xC500),
                (110, 0x1234),
                (111, 0x5678),
                (128, 0x0139), // supported, frozen, count expired, enhanced, master maximum
                (169, 0x0001),
                (217, 0x0001),
            ],
            &[(10, "S3Z9NB0K", 10), (23, "RVT04B6Q", 4), (27, "Samsung SSD 860 EVO 500GB", 20)],
        );
        seal(&mut buf);
        let id = AtaIdentify::parse(&buf).unwrap();
        assert_eq!(id.model, "Samsung SSD 860 EVO 500GB");
        assert_eq!(id.serial, "S3Z9NB0K");
        assert_eq!(id.firmware, "RVT04B6Q");
        assert!(id.lba48);
        assert_eq!(id.sectors, 7_814_037_168);
        assert_eq!(id.logical_sector_size, 512);
        assert_eq!(id.physical_sector_size, 4096);
        assert_eq!(id.wwn, Some(0x5000_C500_1234_5678));
        assert!(id.is_solid_state());
        assert!(id.trim && id.deterministic_read_after_trim && id.zeros_after_trim && id.encrypts_all_user_data);
        assert_eq!(
            id.security,
            AtaSecurity {
                feature_set_supported: true,
                feature_set_enabled: true,
                supported: true,
                enabled: false,
                locked: false,
                frozen: true,
                count_expired: true,
                enhanced_erase_supported: true,
                master_capability_maximum: true,
            }
        );
        assert_eq!(id.normal_erase_time, EraseTime::Minutes(10));
        assert_eq!(id.enhanced_erase_time, EraseTime::Minutes(32));
        assert_eq!(id.master_password_id, 0xFFFE);
        assert_eq!(
            id.sanitize,
            AtaSanitizeSupport {
                supported: true,
                crypto_scramble: true,
                overwrite: true,
                block_erase: true,
                antifreeze_lock: true
            }
        );
        // hdparm: max((t + 60) min, sectors/2048/30 s + 30 min).
        assert_eq!(id.security_erase_timeout_secs(false), 7_814_037_168 / 2048 / 30 + 1800);
        let small = AtaIdentify { sectors: 1_000_000, ..id.clone() };
        assert_eq!(small.security_erase_timeout_secs(false), 70 * 60);
        assert_eq!(small.security_erase_timeout_secs(true), 92 * 60);
    }

    // ACS-3 IDENTIFY DEVICE: words 82-84 valid only with word 83 bits 15:14 = 01b; word 106
    // bit 12 with words 117-118 (logical sector size in words); word 69 bit 3 -> 230-233.
    #[test]
    fn identify_capacity_and_sector_fallbacks() {
        // No valid word 83: 28-bit capacity even if words 100-103 are set.
        let buf = identify_buffer(&[(60, 0x1000), (61, 0x0001), (100, 0xFFFF), (106, 0x5000), (117, 0x0800)], &[]);
        let id = AtaIdentify::parse(&buf).unwrap();
        assert!(!id.lba48);
        assert_eq!(id.sectors, 0x0001_1000);
        assert_eq!(id.logical_sector_size, 4096, "words 117-118 count 16-bit words");
        assert_eq!(id.physical_sector_size, 4096);
        assert_eq!(id.wwn, None);
        assert!(!id.security.feature_set_supported);

        // Word 69 bit 3: extended number of user addressable sectors in words 230-233.
        let buf = identify_buffer(&[(69, 0x0008), (83, 0x4400), (100, 0x0010), (230, 0x0000), (231, 0x0001)], &[]);
        assert_eq!(AtaIdentify::parse(&buf).unwrap().sectors, 0x0001_0000);
    }

    // ACS-3 IDENTIFY DEVICE word 255: A5h signature, checksum makes the 512-byte sum 0.
    #[test]
    fn identify_rejects_short_and_corrupt_data() {
        assert_eq!(AtaIdentify::parse(&[0; 511]), Err(AtaError::BufferTooShort { need: 512, got: 511 }));
        let mut buf = identify_buffer(&[(0, 0x0040)], &[]);
        seal(&mut buf);
        assert!(AtaIdentify::parse(&buf).is_ok());
        buf[100] ^= 0x01;
        assert_eq!(AtaIdentify::parse(&buf), Err(AtaError::IdentifyChecksum { sum: 0x01 }));
    }

    // ACS-3 IDENTIFY DEVICE words 89-90; hdparm `get_erase_timeout_secs()` decoding.
    #[test]
    fn erase_time_codes() {
        assert_eq!(EraseTime::from_word(0), EraseTime::NotReported);
        assert_eq!(EraseTime::from_word(0x8000), EraseTime::NotReported);
        assert_eq!(EraseTime::from_word(0x0001), EraseTime::Minutes(2));
        assert_eq!(EraseTime::from_word(0x7B01), EraseTime::Minutes(2), "bits 14:8 reserved without bit 15");
        assert_eq!(EraseTime::from_word(0x00FF), EraseTime::MoreThanMinutes(508));
        assert_eq!(EraseTime::from_word(0xFFFF), EraseTime::MoreThanMinutes(65_532));
        assert_eq!(EraseTime::from_word(0x80FF), EraseTime::Minutes(510));
    }

    // hdparm `sanitize_err_reason_str[]`: SANITIZE DEVICE ERROR REASON in LBA(7:0).
    #[test]
    fn failure_reasons() {
        let regs = |lba: u64| AtaReturn {
            extend: true,
            error: 0x04,
            count: 0,
            lba,
            device: 0x40,
            status: 0x51,
            upper_valid: true,
        };
        assert_eq!(SanitizeFailureReason::from_return(&regs(0)), SanitizeFailureReason::NoReason);
        assert_eq!(SanitizeFailureReason::from_return(&regs(1)), SanitizeFailureReason::CommandUnsuccessful);
        assert_eq!(SanitizeFailureReason::from_return(&regs(2)), SanitizeFailureReason::UnsupportedCommand);
        assert_eq!(SanitizeFailureReason::from_return(&regs(4)), SanitizeFailureReason::AntifreezeLock);
        assert_eq!(SanitizeFailureReason::from_return(&regs(0x0109)), SanitizeFailureReason::Other(9));
    }
}
