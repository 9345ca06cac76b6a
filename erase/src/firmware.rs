//! Firmware erase: what each device really supports, read from its capability bits (never
//! from a command's success: QEMU accepts Format NVM with SES=2 although FNA says it cannot
//! crypto erase), and the NVMe, ATA and SCSI erase commands sent through passthrough and
//! followed to their end.
//!
//! NVMe: Identify Controller (OACS, SANICAP, FNA); Sanitize polled through the Sanitize
//! Status log; Format NVM with SES on the namespace's current LBA format. ATA (through SAT
//! ATA PASS-THROUGH(16)): IDENTIFY DEVICE (security and sanitize words, frozen state);
//! SANITIZE polled with SANITIZE STATUS EXT; SECURITY ERASE UNIT with the well-known
//! password `metal-erase` (a failed erase leaves a drive the operator can unlock, as
//! ironic-python-agent does with `NULL`). SCSI: REPORT SUPPORTED OPERATION CODES for
//! SANITIZE; SANITIZE with IMMED polled with REQUEST SENSE.

use std::io;
use std::time::{Duration, Instant};

use metal_protocol::Transport;
use metal_protocol::wipe::SanitizeMethod;
use time::OffsetDateTime;

use crate::io::Target;
use crate::ioctl::SgOutcome;
use crate::passthrough::ata::{
    self, AtaIdentify, AtaPassword, AtaSanitize, AtaSanitizeStatus, PasswordId, SecurityLevel,
};
use crate::passthrough::nvme::{
    self, IdentifyController, IdentifyNamespace, NvmeStatus, SanitizeState, SanitizeStatusLog,
};
use crate::passthrough::scsi::{self, OneCommandReply, ScsiCommand, Sense};
use crate::plan::Capabilities;

/// The password SECURITY ERASE UNIT sets (see the module comment).
const ATA_PASSWORD: &[u8] = b"metal-erase";
/// How often a running sanitize is polled.
const POLL: Duration = Duration::from_secs(1);
/// The longest any device erase may run before it is called failed.
const LONGEST: Duration = Duration::from_secs(48 * 3600);
/// Timeout of a short command (identify, status).
const SHORT: Duration = Duration::from_secs(30);

use SanitizeMethod as M;

const NVME_METHODS: [M; 5] =
    [M::NvmeSanitizeCrypto, M::NvmeSanitizeBlock, M::NvmeSanitizeOverwrite, M::NvmeFormatCrypto, M::NvmeFormatUserData];
const ATA_METHODS: [M; 5] = [
    M::AtaSanitizeCrypto,
    M::AtaSanitizeBlock,
    M::AtaSanitizeOverwrite,
    M::AtaSecurityEraseEnhanced,
    M::AtaSecurityErase,
];
const SCSI_METHODS: [M; 3] = [M::ScsiSanitizeCrypto, M::ScsiSanitizeBlock, M::ScsiSanitizeOverwrite];

/// One command sent (or polled to its end), for the report's command log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// What was sent.
    pub command: String,
    /// What the device answered.
    pub status: String,
    /// Whether that is success.
    pub ok: bool,
    /// When it was sent.
    pub started_at: OffsetDateTime,
}

impl Sent {
    fn new(command: &str, status: String, ok: bool, started_at: OffsetDateTime) -> Self {
        Self { command: command.to_owned(), status, ok, started_at }
    }
}

/// How a device erase ended when it did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EraseError {
    /// The device (or kernel) refused the command: try the next method.
    Refused(String),
    /// The erase started and failed: stop, the disk is in an unknown state.
    Failed(String),
}

fn bit(on: bool) -> u8 {
    u8::from(on)
}

/// Reads what the device's firmware can erase: the methods of its own command set, each
/// with the capability bits (or the probe failure) that decide it. Devices without a
/// firmware erase command set (virtio, USB, MMC, loop) have none.
pub fn probe(target: &dyn Target, transport: Transport) -> Capabilities {
    let mut caps = Capabilities::default();
    match transport {
        Transport::Nvme => probe_nvme(target, &mut caps),
        Transport::Sata => probe_ata(target, &mut caps),
        Transport::Sas | Transport::Scsi => probe_scsi(target, &mut caps),
        _ => {}
    }
    caps
}

fn all(caps: &mut Capabilities, methods: &[M], why: &str) {
    caps.unsupported.extend(methods.iter().map(|m| (*m, why.to_owned())));
}

fn offer(caps: &mut Capabilities, method: M, supported: bool, why: String) {
    if supported { caps.supported.push((method, why)) } else { caps.unsupported.push((method, why)) }
}

fn identify_controller(target: &dyn Target) -> Result<IdentifyController, String> {
    let mut data = vec![0u8; 4096];
    let done = target.nvme_admin(&nvme::identify_controller(), &mut data).map_err(|e| e.to_string())?;
    NvmeStatus::from_ioctl(done.status).check().map_err(|e| e.to_string())?;
    IdentifyController::parse(&data).map_err(|e| e.to_string())
}

fn probe_nvme(target: &dyn Target, caps: &mut Capabilities) {
    let id = match identify_controller(target) {
        Ok(id) => id,
        Err(e) => return all(caps, &NVME_METHODS, &format!("Identify Controller failed: {e}")),
    };
    let s = id.sanicap;
    offer(caps, M::NvmeSanitizeCrypto, s.crypto_erase, format!("SANICAP.CES={}", bit(s.crypto_erase)));
    offer(caps, M::NvmeSanitizeBlock, s.block_erase, format!("SANICAP.BES={}", bit(s.block_erase)));
    offer(caps, M::NvmeSanitizeOverwrite, s.overwrite, format!("SANICAP.OWS={}", bit(s.overwrite)));
    let format = id.oacs.format_nvm;
    let all_namespaces =
        if id.fna.secure_erase_all_namespaces { "; secure erase covers every namespace (FNA.SEA=1)" } else { "" };
    offer(
        caps,
        M::NvmeFormatCrypto,
        format && id.fna.crypto_erase_supported,
        format!("OACS.FORMAT={}, FNA.CRYPTO={}{all_namespaces}", bit(format), bit(id.fna.crypto_erase_supported)),
    );
    offer(caps, M::NvmeFormatUserData, format, format!("OACS.FORMAT={}{all_namespaces}", bit(format)));
}

/// Sends an ATA command through SAT and checks its completion.
fn ata_command(
    target: &dyn Target,
    command: &ScsiCommand,
    data: &mut [u8],
    timeout: Duration,
) -> Result<Option<ata::AtaReturn>, EraseError> {
    let outcome = target.sg_io(command, data, timeout).map_err(refusal_or_failure)?;
    if outcome.host_status != 0 {
        return Err(EraseError::Failed(format!("SG_IO host status {:#x}", outcome.host_status)));
    }
    match ata::check_completion(&outcome.sense) {
        Ok(regs) => Ok(regs),
        Err(ata::AtaError::Device(regs)) if regs.aborted() => {
            Err(EraseError::Refused(format!("ATA command aborted ({regs})")))
        }
        Err(ata::AtaError::Sense(sense)) if sense.unsupported() => {
            Err(EraseError::Refused(format!("ATA PASS-THROUGH refused: {sense}")))
        }
        Err(e) => Err(EraseError::Failed(e.to_string())),
    }
}

fn ata_identify(target: &dyn Target) -> Result<AtaIdentify, String> {
    let mut data = vec![0u8; 512];
    ata_command(target, &ata::identify_device(), &mut data, SHORT).map_err(|e| match e {
        EraseError::Refused(s) | EraseError::Failed(s) => s,
    })?;
    AtaIdentify::parse(&data).map_err(|e| e.to_string())
}

fn probe_ata(target: &dyn Target, caps: &mut Capabilities) {
    let id = match ata_identify(target) {
        Ok(id) => id,
        Err(e) => return all(caps, &ATA_METHODS, &format!("IDENTIFY DEVICE failed: {e}")),
    };
    let s = id.sanitize;
    if s.supported {
        offer(
            caps,
            M::AtaSanitizeCrypto,
            s.crypto_scramble,
            format!("SANITIZE feature set, CRYPTO SCRAMBLE={}", bit(s.crypto_scramble)),
        );
        offer(
            caps,
            M::AtaSanitizeBlock,
            s.block_erase,
            format!("SANITIZE feature set, BLOCK ERASE={}", bit(s.block_erase)),
        );
        offer(
            caps,
            M::AtaSanitizeOverwrite,
            s.overwrite,
            format!("SANITIZE feature set, OVERWRITE={}", bit(s.overwrite)),
        );
    } else {
        all(caps, &ATA_METHODS[..3], "SANITIZE feature set not supported (IDENTIFY word 59 bit 12 = 0)");
    }
    let sec = id.security;
    let blocked = if !sec.supported {
        Some("Security feature set not supported (IDENTIFY word 82 bit 1 = 0)".to_owned())
    } else if sec.frozen {
        Some("security frozen (IDENTIFY word 128 bit 3): the firmware froze it at boot; a suspend/resume or hot-plug unfreezes it".to_owned())
    } else if sec.locked {
        Some("security locked: a password someone else set must unlock it first".to_owned())
    } else if sec.enabled {
        Some("security enabled: a user password is already set".to_owned())
    } else if sec.count_expired {
        Some("security password attempts expired (IDENTIFY word 128 bit 4): power-cycle the drive".to_owned())
    } else {
        None
    };
    match blocked {
        Some(why) => all(caps, &ATA_METHODS[3..], &why),
        None => {
            offer(
                caps,
                M::AtaSecurityEraseEnhanced,
                sec.enhanced_erase_supported,
                format!("security supported, not frozen; enhanced erase={}", bit(sec.enhanced_erase_supported)),
            );
            offer(caps, M::AtaSecurityErase, true, "security supported, not frozen".to_owned());
        }
    }
}

fn scsi_action(method: M) -> Option<scsi::SanitizeAction> {
    Some(match method {
        M::ScsiSanitizeCrypto => scsi::SanitizeAction::CryptographicErase,
        M::ScsiSanitizeBlock => scsi::SanitizeAction::BlockErase,
        M::ScsiSanitizeOverwrite => {
            scsi::SanitizeAction::Overwrite(scsi::OverwriteParameters { invert: false, count: 1, pattern: vec![0; 4] })
        }
        _ => return None,
    })
}

fn probe_scsi(target: &dyn Target, caps: &mut Capabilities) {
    for method in SCSI_METHODS {
        let Some(action) = scsi_action(method) else { continue };
        let command = scsi::report_sanitize_support(&action);
        let mut data = vec![0u8; command.data_len as usize];
        let support = match target.sg_io(&command, &mut data, SHORT) {
            Err(e) => Err(format!("REPORT SUPPORTED OPERATION CODES: {e}")),
            Ok(outcome) => match scsi_check(&outcome) {
                Ok(()) => OneCommandReply::parse(&data).map(|r| r.support).map_err(|e| e.to_string()),
                Err(e) => Err(format!("REPORT SUPPORTED OPERATION CODES: {e}")),
            },
        };
        match support {
            Ok(support) => offer(
                caps,
                method,
                support.is_supported(),
                format!("SANITIZE service action {:#04x}: {support:?}", action.service_action()),
            ),
            Err(e) => caps.unsupported.push((method, format!("SANITIZE support unknown ({e})"))),
        }
    }
}

/// GOOD, or what the sense data says.
fn scsi_check(outcome: &SgOutcome) -> Result<(), String> {
    if outcome.host_status != 0 {
        return Err(format!("host status {:#x}", outcome.host_status));
    }
    if outcome.status == 0 {
        return Ok(());
    }
    match Sense::parse(&outcome.sense) {
        Ok(Some(sense)) => Err(sense.to_string()),
        _ => Err(format!("SCSI status {:#04x}", outcome.status)),
    }
}

fn refusal_or_failure(e: io::Error) -> EraseError {
    if matches!(e.raw_os_error(), Some(libc::EOPNOTSUPP | libc::ENOTTY | libc::EINVAL)) {
        EraseError::Refused(e.to_string())
    } else {
        EraseError::Failed(e.to_string())
    }
}

/// Runs one firmware erase method to its end. `log` records each command sent.
pub fn run(target: &dyn Target, method: M, log: &mut dyn FnMut(Sent)) -> Result<(), EraseError> {
    match method {
        M::NvmeFormatCrypto => nvme_format(target, nvme::SecureErase::Cryptographic, log),
        M::NvmeFormatUserData => nvme_format(target, nvme::SecureErase::UserData, log),
        M::NvmeSanitizeCrypto => nvme_sanitize(target, nvme::SanitizeAction::CryptoErase, log),
        M::NvmeSanitizeBlock => nvme_sanitize(target, nvme::SanitizeAction::BlockErase, log),
        M::NvmeSanitizeOverwrite => nvme_sanitize(
            target,
            nvme::SanitizeAction::Overwrite { pattern: 0, passes: 1, invert_between_passes: false },
            log,
        ),
        M::AtaSanitizeCrypto => ata_sanitize(target, AtaSanitize::CryptoScramble { failure_mode: false }, log),
        M::AtaSanitizeBlock => ata_sanitize(target, AtaSanitize::BlockErase { failure_mode: false }, log),
        M::AtaSanitizeOverwrite => ata_sanitize(
            target,
            AtaSanitize::Overwrite { pattern: 0, passes: 1, invert_between_passes: false, failure_mode: false },
            log,
        ),
        M::AtaSecurityEraseEnhanced => ata_security_erase(target, true, log),
        M::AtaSecurityErase => ata_security_erase(target, false, log),
        M::ScsiSanitizeCrypto | M::ScsiSanitizeBlock | M::ScsiSanitizeOverwrite => {
            scsi_sanitize(target, scsi_action(method).unwrap_or(scsi::SanitizeAction::BlockErase), log)
        }
        M::SecureDiscard | M::Discard | M::OverwriteZeros | M::OverwriteRandom => {
            Err(EraseError::Refused(format!("{method:?} is not a firmware method")))
        }
    }
}

fn nvme_send(
    target: &dyn Target,
    name: &str,
    command: &nvme::AdminCommand,
    data: &mut [u8],
    log: &mut dyn FnMut(Sent),
) -> Result<(), EraseError> {
    let started = metal_clock::now_utc();
    let result = target.nvme_admin(command, data);
    let status = match &result {
        Ok(done) => NvmeStatus::from_ioctl(done.status),
        Err(e) => {
            log(Sent::new(name, e.to_string(), false, started));
            return Err(refusal_or_failure(io::Error::new(e.kind(), e.to_string())));
        }
    };
    log(Sent::new(name, format!("{:#06x} ({})", status.raw(), status.name()), status.is_success(), started));
    if status.is_success() {
        Ok(())
    } else if status.sct() == 0 && matches!(status.sc(), 0x01 | 0x02) {
        // Invalid Command Opcode / Invalid Field in Command: not supported after all.
        Err(EraseError::Refused(format!("{name}: {}", status.name())))
    } else {
        Err(EraseError::Failed(format!("{name}: {}", status.name())))
    }
}

fn nvme_format(target: &dyn Target, ses: nvme::SecureErase, log: &mut dyn FnMut(Sent)) -> Result<(), EraseError> {
    let nsid = target.nvme_namespace_id().map_err(refusal_or_failure)?;
    let mut data = vec![0u8; 4096];
    let identify = nvme::identify_namespace(nsid).map_err(|e| EraseError::Failed(e.to_string()))?;
    nvme_send(target, &format!("Identify Namespace {nsid}"), &identify, &mut data, log)?;
    let namespace = IdentifyNamespace::parse(&data).map_err(|e| EraseError::Failed(e.to_string()))?;
    let lbaf = namespace.current_format;
    let command = nvme::format_nvm(nsid, lbaf, ses)
        .map_err(|e| EraseError::Failed(e.to_string()))?
        .with_timeout_ms(u32::try_from(LONGEST.as_millis()).unwrap_or(u32::MAX));
    nvme_send(target, &format!("Format NVM nsid {nsid} lbaf {lbaf} {ses:?}"), &command, &mut [], log)
}

fn nvme_sanitize(
    target: &dyn Target,
    action: nvme::SanitizeAction,
    log: &mut dyn FnMut(Sent),
) -> Result<(), EraseError> {
    let sanitize = nvme::Sanitize { action, allow_unrestricted_exit: false, no_deallocate: false };
    let command = nvme::sanitize(&sanitize).map_err(|e| EraseError::Failed(e.to_string()))?;
    let started = metal_clock::now_utc();
    nvme_send(target, &format!("Sanitize {action:?}"), &command, &mut [], log)?;
    let polling = Instant::now();
    loop {
        let mut data = vec![0u8; nvme::SANITIZE_LOG_LEN as usize];
        let read = target
            .nvme_admin(&nvme::sanitize_status_log(), &mut data)
            .map_err(|e| EraseError::Failed(format!("Sanitize Status log: {e}")))?;
        NvmeStatus::from_ioctl(read.status)
            .check()
            .map_err(|e| EraseError::Failed(format!("Sanitize Status log: {e}")))?;
        let status = SanitizeStatusLog::parse(&data).map_err(|e| EraseError::Failed(e.to_string()))?;
        match status.state {
            SanitizeState::InProgress if polling.elapsed() < LONGEST => std::thread::sleep(POLL),
            SanitizeState::Completed | SanitizeState::CompletedWithDeallocation => {
                log(Sent::new(
                    "Sanitize Status log (polled)",
                    format!("completed, SSTAT {:#06x}", status.sstat),
                    true,
                    started,
                ));
                return Ok(());
            }
            other => {
                log(Sent::new(
                    "Sanitize Status log (polled)",
                    format!("{other:?}, SSTAT {:#06x}", status.sstat),
                    false,
                    started,
                ));
                return Err(EraseError::Failed(format!("sanitize ended {other:?} (SSTAT {:#06x})", status.sstat)));
            }
        }
    }
}

fn ata_sanitize(target: &dyn Target, operation: AtaSanitize, log: &mut dyn FnMut(Sent)) -> Result<(), EraseError> {
    let command = ata::sanitize_device(&operation).map_err(|e| EraseError::Failed(e.to_string()))?;
    let started = metal_clock::now_utc();
    let sent = ata_command(target, &command, &mut [], SHORT);
    log(Sent::new(&format!("SANITIZE DEVICE {operation:?}"), describe(&sent), sent.is_ok(), started));
    sent?;
    let polling = Instant::now();
    loop {
        let status = ata::sanitize_device(&AtaSanitize::Status { clear_failure: false })
            .map_err(|e| EraseError::Failed(e.to_string()))?;
        let regs = ata_command(target, &status, &mut [], SHORT)?
            .ok_or_else(|| EraseError::Failed("SANITIZE STATUS EXT returned no registers".into()))?;
        let state = AtaSanitizeStatus::from_return(&regs).map_err(|e| EraseError::Failed(e.to_string()))?;
        if state.in_progress && polling.elapsed() < LONGEST {
            std::thread::sleep(POLL);
            continue;
        }
        log(Sent::new("SANITIZE STATUS EXT (polled)", format!("{state:?}"), state.completed_without_error, started));
        return if state.completed_without_error {
            Ok(())
        } else {
            Err(EraseError::Failed(format!("sanitize did not complete without error ({regs})")))
        };
    }
}

fn describe<T>(result: &Result<T, EraseError>) -> String {
    match result {
        Ok(_) => "ok".into(),
        Err(EraseError::Refused(s)) => format!("refused: {s}"),
        Err(EraseError::Failed(s)) => format!("failed: {s}"),
    }
}

fn ata_security_erase(target: &dyn Target, enhanced: bool, log: &mut dyn FnMut(Sent)) -> Result<(), EraseError> {
    let id = ata_identify(target).map_err(EraseError::Failed)?;
    let password = AtaPassword::new(ATA_PASSWORD).map_err(|e| EraseError::Failed(e.to_string()))?;
    let started = metal_clock::now_utc();
    let set = ata_command(target, &ata::security_set_user_password(&password, SecurityLevel::High), &mut [], SHORT);
    log(Sent::new("SECURITY SET PASSWORD (user, high)", describe(&set), set.is_ok(), started));
    set?;
    let timeout = Duration::from_secs(id.security_erase_timeout_secs(enhanced));
    let prepare = ata_command(target, &ata::security_erase_prepare(), &mut [], SHORT);
    let erased = prepare.and_then(|_| {
        ata_command(target, &ata::security_erase_unit(&password, PasswordId::User, enhanced), &mut [], timeout)
    });
    log(Sent::new(
        &format!("SECURITY ERASE PREPARE + ERASE UNIT (enhanced={enhanced}, timeout {} s)", timeout.as_secs()),
        describe(&erased),
        erased.is_ok(),
        started,
    ));
    if let Err(e) = erased {
        // Never leave a drive locked with our password: take it off again.
        let disabled =
            ata_command(target, &ata::security_disable_password(&password, PasswordId::User), &mut [], SHORT);
        log(Sent::new("SECURITY DISABLE PASSWORD", describe(&disabled), disabled.is_ok(), started));
        return Err(match e {
            EraseError::Refused(s) if disabled.is_ok() => EraseError::Refused(s),
            EraseError::Refused(s) | EraseError::Failed(s) => EraseError::Failed(s),
        });
    }
    Ok(())
}

fn scsi_sanitize(
    target: &dyn Target,
    action: scsi::SanitizeAction,
    log: &mut dyn FnMut(Sent),
) -> Result<(), EraseError> {
    let command = scsi::sanitize(&action, true, false).map_err(|e| EraseError::Failed(e.to_string()))?;
    let started = metal_clock::now_utc();
    let outcome = target.sg_io(&command, &mut [], SHORT).map_err(refusal_or_failure)?;
    let checked = scsi_check(&outcome);
    log(Sent::new(
        &format!("SANITIZE service action {:#04x} (IMMED)", action.service_action()),
        checked.as_ref().err().map_or_else(|| "GOOD".to_owned(), Clone::clone),
        checked.is_ok(),
        started,
    ));
    if let Err(e) = checked {
        let unsupported = matches!(Sense::parse(&outcome.sense), Ok(Some(s)) if s.unsupported());
        return Err(if unsupported { EraseError::Refused(e) } else { EraseError::Failed(e) });
    }
    let polling = Instant::now();
    loop {
        let request = scsi::request_sense(64, false);
        let mut data = vec![0u8; 64];
        let outcome =
            target.sg_io(&request, &mut data, SHORT).map_err(|e| EraseError::Failed(format!("REQUEST SENSE: {e}")))?;
        scsi_check(&outcome).map_err(|e| EraseError::Failed(format!("REQUEST SENSE: {e}")))?;
        match Sense::parse(&data) {
            Ok(Some(sense)) if sense.sanitize_in_progress() && polling.elapsed() < LONGEST => std::thread::sleep(POLL),
            Ok(Some(sense)) if !matches!(sense.key, scsi::SenseKey::NoSense) => {
                log(Sent::new("REQUEST SENSE (polled)", sense.to_string(), false, started));
                return Err(EraseError::Failed(format!("sanitize ended with {sense}")));
            }
            _ => {
                log(Sent::new("REQUEST SENSE (polled)", "sanitize complete".into(), true, started));
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::ioctl::NvmeCompletion;

    /// A device that answers identify with canned data and records every CDB it is sent;
    /// ATA commands whose opcode is in `aborts` end with ABRT.
    #[derive(Default)]
    struct Canned {
        nvme_identify: Option<Vec<u8>>,
        ata_identify: Option<Vec<u8>>,
        aborts: Vec<u8>,
        sent: Mutex<Vec<u8>>,
    }

    impl Target for Canned {
        fn size(&self) -> u64 {
            1 << 20
        }
        fn block_size(&self) -> u32 {
            512
        }
        fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
            Ok(())
        }
        fn read_at(&self, _: &mut [u8], _: u64) -> io::Result<()> {
            Ok(())
        }
        fn sync(&self) -> io::Result<()> {
            Ok(())
        }
        fn discard_all(&self, _: bool) -> io::Result<()> {
            Ok(())
        }
        fn nvme_admin(&self, command: &nvme::AdminCommand, data: &mut [u8]) -> io::Result<NvmeCompletion> {
            match (&self.nvme_identify, command.opcode) {
                (Some(id), nvme::OPC_IDENTIFY) => {
                    data[..id.len()].copy_from_slice(id);
                    Ok(NvmeCompletion { status: 0, result: 0 })
                }
                (Some(_), _) => Ok(NvmeCompletion { status: 0x0001, result: 0 }), // Invalid Command Opcode
                (None, _) => Err(io::Error::from_raw_os_error(libc::ENOTTY)),
            }
        }
        fn sg_io(&self, command: &ScsiCommand, data_in: &mut [u8], _: Duration) -> io::Result<SgOutcome> {
            let opcode = command.cdb[14];
            self.sent.lock().unwrap().push(opcode);
            let ok = SgOutcome { status: 0, host_status: 0, driver_status: 0, sense: Vec::new() };
            match (&self.ata_identify, opcode) {
                (Some(id), 0xEC) => {
                    data_in[..512].copy_from_slice(id);
                    Ok(ok)
                }
                (Some(_), op) if self.aborts.contains(&op) => {
                    // Descriptor sense, ATA Status Return descriptor: error ABRT, status ERR|DRDY.
                    let mut sense = vec![0x72, 0x0B, 0x00, 0x00, 0, 0, 0, 14];
                    sense.extend([0x09, 0x0C, 0x00, 0x04, 0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0x41]);
                    Ok(SgOutcome { status: 2, host_status: 0, driver_status: 0x08, sense })
                }
                (Some(_), _) => Ok(ok),
                (None, _) => Err(io::Error::from_raw_os_error(libc::ENOTTY)),
            }
        }
    }

    fn nvme_identify(oacs: u16, sanicap: u32, fna: u8) -> Vec<u8> {
        let mut id = vec![0u8; 4096];
        id[256..258].copy_from_slice(&oacs.to_le_bytes());
        id[328..332].copy_from_slice(&sanicap.to_le_bytes());
        id[524] = fna;
        id
    }

    /// IDENTIFY DEVICE with these words set, signature and checksum in word 255.
    fn ata_identify(words: &[(usize, u16)]) -> Vec<u8> {
        let mut w = [0u16; 256];
        for &(i, v) in words {
            w[i] = v;
        }
        let mut buf: Vec<u8> = w.iter().flat_map(|v| v.to_le_bytes()).collect();
        buf[510] = 0xA5;
        let sum = buf.iter().fold(0u8, |a, b| a.wrapping_add(*b));
        buf[511] = 0u8.wrapping_sub(sum);
        buf
    }

    /// Methods with the capability that decided them.
    type Decided = Vec<(M, String)>;

    fn reasons(caps: Capabilities) -> (Decided, Decided) {
        (caps.supported, caps.unsupported)
    }

    fn has(list: &[(M, String)], method: M, test: impl Fn(&str) -> bool) -> bool {
        list.iter().any(|(m, w)| *m == method && test(w))
    }

    #[test]
    fn nvme_capabilities_come_from_oacs_sanicap_and_fna() {
        // QEMU 10: OACS 0x12a (Format), SANICAP 0, FNA 0.
        let qemu = Canned { nvme_identify: Some(nvme_identify(0x12a, 0, 0)), ..Canned::default() };
        let (supported, unsupported) = reasons(probe(&qemu, Transport::Nvme));
        assert_eq!(supported, [(M::NvmeFormatUserData, "OACS.FORMAT=1".to_owned())]);
        assert!(has(&unsupported, M::NvmeFormatCrypto, |w| w == "OACS.FORMAT=1, FNA.CRYPTO=0"));
        assert!(has(&unsupported, M::NvmeSanitizeCrypto, |w| w == "SANICAP.CES=0"));
        // A data-centre drive: crypto sanitize and block erase, crypto format on all namespaces.
        let dc = Canned { nvme_identify: Some(nvme_identify(0x0002, 0b011, 0b110)), ..Canned::default() };
        let (supported, _) = reasons(probe(&dc, Transport::Nvme));
        assert!(has(&supported, M::NvmeSanitizeCrypto, |w| w == "SANICAP.CES=1"));
        assert!(has(&supported, M::NvmeSanitizeBlock, |w| w == "SANICAP.BES=1"));
        assert!(has(&supported, M::NvmeFormatCrypto, |w| w.contains("every namespace")));
        // A device that is not NVMe after all: every NVMe method ruled out with the reason.
        let (_, unsupported) = reasons(probe(&Canned::default(), Transport::Nvme));
        assert_eq!(unsupported.len(), 5);
        assert!(unsupported[0].1.starts_with("Identify Controller failed"), "{unsupported:?}");
        // virtio has no firmware erase commands at all.
        assert_eq!(probe(&Canned::default(), Transport::Virtio), Capabilities::default());
    }

    #[test]
    fn ata_security_is_ruled_out_when_frozen_locked_or_already_enabled() {
        const SUPPORTED: u16 = 1 << 0;
        let probe_with = |word128: u16| {
            let id = ata_identify(&[(82, 1 << 1), (128, word128), (59, 0)]);
            probe(&Canned { ata_identify: Some(id), ..Canned::default() }, Transport::Sata)
        };
        let frozen = probe_with(SUPPORTED | 1 << 3);
        assert!(frozen.supported.is_empty());
        let (_, unsupported) = reasons(frozen.clone());
        assert!(
            unsupported.iter().any(|(m, w)| *m == M::AtaSecurityErase && w.starts_with("security frozen")),
            "{unsupported:?}"
        );
        assert!(
            unsupported
                .iter()
                .any(|(m, w)| *m == M::AtaSanitizeBlock && w.contains("SANITIZE feature set not supported"))
        );
        let (_, locked) = reasons(probe_with(SUPPORTED | 1 << 1 | 1 << 2));
        assert!(locked.iter().any(|(_, w)| w.starts_with("security locked")), "{locked:?}");
        let (_, enabled) = reasons(probe_with(SUPPORTED | 1 << 1));
        assert!(enabled.iter().any(|(_, w)| w.starts_with("security enabled")), "{enabled:?}");
        let (supported, _) = reasons(probe_with(SUPPORTED | 1 << 5));
        assert_eq!(
            supported.iter().map(|(m, _)| *m).collect::<Vec<_>>(),
            [M::AtaSecurityEraseEnhanced, M::AtaSecurityErase]
        );
        // Sanitize bits: crypto (13) and block (15) but not overwrite (14).
        let id = ata_identify(&[(59, 1 << 12 | 1 << 13 | 1 << 15)]);
        let (supported, unsupported) =
            reasons(probe(&Canned { ata_identify: Some(id), ..Canned::default() }, Transport::Sata));
        assert_eq!(supported.iter().map(|(m, _)| *m).collect::<Vec<_>>(), [M::AtaSanitizeCrypto, M::AtaSanitizeBlock]);
        assert!(unsupported.iter().any(|(m, w)| *m == M::AtaSanitizeOverwrite && w.ends_with("OVERWRITE=0")));
    }

    #[test]
    fn a_refused_security_erase_takes_its_password_off_again() {
        let device = Canned {
            ata_identify: Some(ata_identify(&[(82, 1 << 1), (128, 1)])),
            aborts: vec![0xF4],
            ..Canned::default()
        };
        let mut log = Vec::new();
        let result = run(&device, M::AtaSecurityErase, &mut |sent: Sent| log.push(sent));
        assert!(matches!(result, Err(EraseError::Refused(ref why)) if why.contains("ABRT")), "{result:?}");
        // IDENTIFY, SET PASSWORD, ERASE PREPARE, ERASE UNIT (aborted), DISABLE PASSWORD.
        assert_eq!(*device.sent.lock().unwrap(), [0xEC, 0xF1, 0xF3, 0xF4, 0xF6]);
        assert_eq!(log.iter().map(|s| s.ok).collect::<Vec<_>>(), [true, false, true]);
        // A disable that fails too leaves a drive with our (well-known) password: a failure.
        let stuck = Canned { aborts: vec![0xF4, 0xF6], ..device };
        stuck.sent.lock().unwrap().clear();
        let result = run(&stuck, M::AtaSecurityErase, &mut |_| {});
        assert!(matches!(result, Err(EraseError::Failed(_))), "{result:?}");
    }

    #[test]
    fn nvme_commands_the_controller_rejects_are_refusals() {
        let qemu = Canned { nvme_identify: Some(nvme_identify(0x12a, 0, 0)), ..Canned::default() };
        let mut log = Vec::new();
        let result = run(&qemu, M::NvmeSanitizeCrypto, &mut |sent: Sent| log.push(sent));
        assert_eq!(result, Err(EraseError::Refused("Sanitize CryptoErase: Invalid Command Opcode".into())));
        assert_eq!((log[0].status.as_str(), log[0].ok), ("0x0001 (Invalid Command Opcode)", false));
    }
}
