//! What this machine's firmware measured before the ramdisk ran: the TCG2 event log Linux
//! keeps in securityfs, the TPM's own PCR values in sysfs, and whether the one replays to the
//! other (`metal-boot measurements`).
//!
//! Only PCRs 0 to 9 are compared: those are the boot's (firmware, its configuration, option
//! ROMs, boot entries, Secure Boot, the boot loader, the kernel's command line and initrd);
//! later PCRs belong to the running OS (IMA, systemd) and are not in the firmware's log.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use metal_protocol::eventlog::{EventLog, HashAlgorithm, PcrDifference};
use std::io::{Read, Write};

use metal_protocol::boot::ReportReceipt;
use metal_protocol::measurement::{AttestationReport, BootEvidence, TpmKeys, binding};
use metal_protocol::tpm::{ak_template, ek_rsa_template};

use crate::controller::Joined;
use crate::tpm::{CommandError, EK_CERT_RSA_INDEX, Loaded, RH_ENDORSEMENT, Tpm};

pub use metal_protocol::measurement::BOOT_PCRS;

/// The PCRs a machine's firmware and its configuration own (8 and 9 carry each boot's own
/// command line and initrd): what a baseline from a known-good boot is compared on.
pub const FIRMWARE_PCRS: [u32; 8] = [0, 1, 2, 3, 4, 5, 6, 7];

/// Where the kernel shows the TPM.
#[derive(Debug, Clone)]
pub struct Paths {
    /// securityfs's mount point (holds `tpm0/binary_bios_measurements`).
    pub security: PathBuf,
    /// The TPM's sysfs directory (holds `pcr-sha256/N`).
    pub tpm: PathBuf,
    /// The resource-managed TPM device commands go to.
    pub device: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Paths::of(&metal_protocol::inventory::SystemPaths::default())
    }
}

impl Paths {
    /// Where the TPM is under a machine's system trees (the real ones, or a simulated
    /// machine's).
    pub fn of(system: &metal_protocol::inventory::SystemPaths) -> Paths {
        Paths {
            security: system.sys.join("kernel/security"),
            tpm: system.sys.join("class/tpm/tpm0"),
            device: system.dev.join("tpmrm0"),
        }
    }
}

/// One boot PCR: what the TPM holds and what the log replays to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcrCheck {
    /// The PCR's index.
    pub pcr: u32,
    /// The TPM's value.
    pub tpm: Vec<u8>,
    /// What the log's events replay to (the reset value when the log has none for it).
    pub replayed: Vec<u8>,
    /// How many events the log extended into it.
    pub events: usize,
}

impl PcrCheck {
    /// The log accounts for the TPM's value.
    pub fn replays(&self) -> bool {
        self.tpm == self.replayed
    }
}

/// The firmware's event log, mounting securityfs first when the ramdisk has not.
pub fn event_log(paths: &Paths) -> Result<Vec<u8>, String> {
    let log = paths.security.join("tpm0/binary_bios_measurements");
    if !log.exists() && !paths.security.join("tpm0").exists() {
        // Not mounted yet (metal-boot as PID 1 mounts only what every task needs); a
        // machine without a TPM still has no log afterwards.
        let _ = crate::sys::mount("securityfs", &paths.security.to_string_lossy(), "securityfs");
    }
    std::fs::read(&log)
        .map_err(|e| format!("no TPM event log at {} ({e}): no TPM 2.0, or not a UEFI boot", log.display()))
}

/// This machine's TPM (the kernel's resource manager) and its firmware's event log: what a
/// quote and its evidence are made of.
pub fn this_machine(paths: &Paths) -> Result<(Tpm<crate::tpm::Device>, Vec<u8>), String> {
    let log = event_log(paths)?;
    Ok((Tpm::open(&paths.device).map_err(|e| e.to_string())?, log))
}

/// The TPM's SHA-256 values of the boot PCRs.
pub fn pcrs(paths: &Paths) -> Result<BTreeMap<u32, Vec<u8>>, String> {
    BOOT_PCRS
        .map(|pcr| {
            let file = paths.tpm.join(format!("pcr-sha256/{pcr}"));
            let text =
                std::fs::read_to_string(&file).map_err(|e| format!("{}: {e} (no SHA-256 bank?)", file.display()))?;
            let value = hex::decode(text.trim()).map_err(|e| format!("{}: {e}", file.display()))?;
            Ok((pcr, value))
        })
        .collect()
}

/// Replays `log`'s SHA-256 bank and sets it beside the TPM's values, PCR by PCR.
pub fn compare(log: &EventLog, tpm: &BTreeMap<u32, Vec<u8>>) -> Result<Vec<PcrCheck>, String> {
    let replayed = log.replay(HashAlgorithm::SHA256).map_err(|e| e.to_string())?;
    Ok(tpm
        .iter()
        .map(|(pcr, value)| PcrCheck {
            pcr: *pcr,
            tpm: value.clone(),
            replayed: replayed.get(pcr).cloned().unwrap_or_else(|| vec![0; value.len()]),
            events: log
                .events
                .iter()
                .filter(|e| e.pcr == *pcr && e.event_type != metal_protocol::eventlog::EV_NO_ACTION)
                .count(),
        })
        .collect())
}

/// Reads the log and the PCRs and compares them; `save` keeps a copy of the raw log.
pub fn check(paths: &Paths, save: Option<&Path>) -> Result<(EventLog, Vec<PcrCheck>), String> {
    let bytes = event_log(paths)?;
    if let Some(save) = save {
        std::fs::write(save, &bytes).map_err(|e| format!("{}: {e}", save.display()))?;
    }
    let log = EventLog::parse(&bytes).map_err(|e| e.to_string())?;
    let checks = compare(&log, &pcrs(paths)?)?;
    Ok((log, checks))
}

/// Compares `log` with the log of a known-good boot (`metal-boot measurements --save-log`
/// there) on `pcrs`: the first that differs, with its first differing event.
pub fn against_baseline(log: &EventLog, baseline: &Path, pcrs: &[u32]) -> Result<Option<PcrDifference>, String> {
    let bytes = std::fs::read(baseline).map_err(|e| format!("{}: {e}", baseline.display()))?;
    let baseline = EventLog::parse(&bytes).map_err(|e| format!("{}: {e}", baseline.display()))?;
    log.first_difference(&baseline, pcrs).map_err(|e| e.to_string())
}

/// The TPM's keys for one attestation, loaded: the EK (with its certificate when the TPM
/// has one) and the attestation key.
#[derive(Debug)]
pub struct Keys {
    ek: Loaded,
    ek_certificate: Option<Vec<u8>>,
    ak: Loaded,
}

impl Keys {
    /// Reads the EK certificate and recreates the EK and the attestation key.
    pub fn load<T: Read + Write>(tpm: &mut Tpm<T>) -> Result<Keys, CommandError> {
        let ek_certificate = match tpm.nv_read(EK_CERT_RSA_INDEX) {
            Ok(der) => Some(der),
            // No certificate (a TPM its maker did not provision, or a firmware TPM): the EK
            // is then trusted on first use only.
            Err(CommandError::Tpm { .. }) => None,
            Err(other) => return Err(other),
        };
        let ek = tpm.create_primary(RH_ENDORSEMENT, &ek_rsa_template())?;
        match tpm.create_primary(RH_ENDORSEMENT, &ak_template()) {
            Ok(ak) => Ok(Keys { ek, ek_certificate, ak }),
            Err(e) => {
                let _ = tpm.flush(ek.handle);
                Err(e)
            }
        }
    }

    /// The keys as a challenge is asked with and evidence names them.
    pub fn names(&self) -> TpmKeys {
        TpmKeys {
            ek_public: self.ek.public.bytes.clone(),
            ek_certificate: self.ek_certificate.clone(),
            ak_public: self.ak.public.bytes.clone(),
        }
    }

    /// The attestation key's handle.
    pub fn ak(&self) -> u32 {
        self.ak.handle
    }

    /// The EK's handle.
    pub fn ek(&self) -> u32 {
        self.ek.handle
    }

    /// Quotes the boot PCRs binding `extra_data`, then unloads both keys.
    pub fn quote<T: Read + Write>(
        self,
        tpm: &mut Tpm<T>,
        extra_data: &[u8],
        event_log: Vec<u8>,
    ) -> Result<BootEvidence, CommandError> {
        let quoted = tpm.quote(self.ak.handle, extra_data, &BOOT_PCRS.collect::<Vec<_>>());
        self.unload(tpm);
        let (attest, signature) = quoted?;
        Ok(BootEvidence { keys: self.names(), attest, signature, event_log })
    }

    fn unload<T: Read + Write>(&self, tpm: &mut Tpm<T>) {
        let _ = tpm.flush(self.ak.handle);
        let _ = tpm.flush(self.ek.handle);
    }
}

/// Quotes the boot PCRs with the attestation key, binding `extra_data`, and gathers the
/// evidence (`metal-boot quote`).
pub fn evidence<T: Read + Write>(
    tpm: &mut Tpm<T>,
    extra_data: &[u8],
    event_log: Vec<u8>,
) -> Result<BootEvidence, CommandError> {
    Keys::load(tpm)?.quote(tpm, extra_data, event_log)
}

/// Attests to the joined controller: asks for a challenge for this TPM's keys, opens its
/// credential (only this TPM can), quotes binding the nonce, the secret and this ramdisk's
/// key, and posts the evidence signed.
pub fn attest<T: Read + Write>(
    tpm: &mut Tpm<T>,
    controller: &Joined,
    event_log: Vec<u8>,
) -> Result<ReportReceipt, String> {
    let keys = Keys::load(tpm).map_err(|e| e.to_string())?;
    let opened = controller.challenge(&keys.names()).map_err(|e| e.to_string()).and_then(|challenge| {
        let secret = tpm
            .activate_credential(keys.ak(), keys.ek(), &challenge.credential_blob, &challenge.encrypted_seed)
            .map_err(|e| e.to_string())?;
        let ramdisk_key = controller.identity().signer().verifying_key();
        Ok((challenge.challenge_id, binding(&challenge.nonce, &secret, ramdisk_key.as_bytes())))
    });
    let (challenge_id, extra_data) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            keys.unload(tpm);
            return Err(e);
        }
    };
    let evidence = keys.quote(tpm, &extra_data, event_log).map_err(|e| e.to_string())?;
    let report = AttestationReport { node_id: controller.identity().identity().node.clone(), challenge_id, evidence };
    controller.post_report(AttestationReport::PAYLOAD_TYPE, &report).map_err(|e| e.to_string())
}

/// One line per PCR, for a person at the console.
pub fn render(checks: &[PcrCheck]) -> String {
    let mut out = String::new();
    for check in checks {
        let verdict = if !check.replays() {
            format!("DIFFERS: the log replays to {}", hex::encode(&check.replayed))
        } else if check.events == 0 {
            "no events (reset value)".to_owned()
        } else {
            format!("replays from {} events", check.events)
        };
        out.push_str(&format!("PCR {:>2} sha256 {}  {verdict}\n", check.pcr, hex::encode(&check.tpm)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const OVMF: &[u8] = include_bytes!("../../protocol/testdata/ovmf-2022.11-swtpm.eventlog");

    /// A securityfs and a sysfs TPM directory holding `log` and the values it replays to,
    /// with `change` applied to the TPM's values.
    fn machine(dir: &Path, change: impl FnOnce(&mut BTreeMap<u32, Vec<u8>>)) -> Paths {
        let paths = Paths { security: dir.join("security"), tpm: dir.join("tpm0"), device: dir.join("tpmrm0") };
        std::fs::create_dir_all(paths.security.join("tpm0")).unwrap();
        std::fs::create_dir_all(paths.tpm.join("pcr-sha256")).unwrap();
        std::fs::write(paths.security.join("tpm0/binary_bios_measurements"), OVMF).unwrap();
        let mut values = EventLog::parse(OVMF).unwrap().replay(HashAlgorithm::SHA256).unwrap();
        for pcr in BOOT_PCRS {
            values.entry(pcr).or_insert_with(|| vec![0; 32]);
        }
        change(&mut values);
        for (pcr, value) in values {
            // The kernel writes upper-case hex and a newline.
            std::fs::write(paths.tpm.join(format!("pcr-sha256/{pcr}")), format!("{}\n", hex::encode_upper(value)))
                .unwrap();
        }
        paths
    }

    #[test]
    fn a_log_that_accounts_for_every_boot_pcr_replays() {
        let dir = tempfile::tempdir().unwrap();
        let saved = dir.path().join("saved.log");
        let (log, checks) = check(&machine(dir.path(), |_| {}), Some(&saved)).unwrap();
        assert_eq!(checks.len(), 10);
        assert!(checks.iter().all(PcrCheck::replays));
        assert_eq!(std::fs::read(&saved).unwrap(), OVMF);
        // Against its own log as a baseline: no difference.
        assert_eq!(against_baseline(&log, &saved, &FIRMWARE_PCRS).unwrap(), None);
        let text = render(&checks);
        assert!(text.contains("PCR  8 sha256 0000") && text.contains("no events"), "{text}");
        assert!(text.contains("PCR  0 sha256 b44d5dc8") && text.contains("replays from"), "{text}");
    }

    #[test]
    fn a_tpm_value_the_log_does_not_account_for_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let (_, checks) = check(&machine(dir.path(), |values| values.get_mut(&4).unwrap()[0] ^= 1), None).unwrap();
        let differing: Vec<u32> = checks.iter().filter(|c| !c.replays()).map(|c| c.pcr).collect();
        assert_eq!(differing, vec![4]);
        assert!(render(&checks).contains("PCR  4 sha256") && render(&checks).contains("DIFFERS"));
    }

    #[test]
    fn a_machine_without_a_tpm_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let paths =
            Paths { security: dir.path().join("none"), tpm: dir.path().join("none"), device: dir.path().join("none") };
        let error = check(&paths, None).unwrap_err();
        assert!(error.contains("no TPM event log"), "{error}");
    }
}
