//! The TCG2 event log a UEFI machine's firmware keeps of what it measured into the TPM:
//! parsing (the crypto-agile format of the TCG PC Client Platform Firmware Profile, as Linux
//! exposes it in `/sys/kernel/security/tpm0/binary_bios_measurements`) and replaying one hash
//! bank to the PCR values it must produce.
//!
//! A quote signs PCR values; the log says what went into them. Replaying the log and finding
//! the quoted values is what lets the scheduler judge a machine event by event ("PCR 0: event
//! 12, EV_EFI_PLATFORM_FIRMWARE_BLOB2, differs") instead of by opaque digests. The log comes
//! from a machine a tenant held as root, so every length is checked against what is left and
//! nothing is allocated before it is known to fit.

use std::collections::BTreeMap;
use std::fmt;

/// A TPM 2.0 hash algorithm (`TPM_ALG_ID`) as the log names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HashAlgorithm(pub u16);

impl HashAlgorithm {
    /// `TPM_ALG_SHA1`.
    pub const SHA1: HashAlgorithm = HashAlgorithm(0x0004);
    /// `TPM_ALG_SHA256`: the bank metal replays and quotes.
    pub const SHA256: HashAlgorithm = HashAlgorithm(0x000b);
    /// `TPM_ALG_SHA384`.
    pub const SHA384: HashAlgorithm = HashAlgorithm(0x000c);
    /// `TPM_ALG_SHA512`.
    pub const SHA512: HashAlgorithm = HashAlgorithm(0x000d);
    /// `TPM_ALG_SM3_256`.
    pub const SM3_256: HashAlgorithm = HashAlgorithm(0x0012);

    /// `H(a ‖ b)` in this algorithm: what a PCR extend computes. `None` for an algorithm the
    /// scheduler does not replay (SHA-1, SM3).
    fn extend(self, a: &[u8], b: &[u8]) -> Option<Vec<u8>> {
        fn hash<D: sha2::Digest>(a: &[u8], b: &[u8]) -> Vec<u8> {
            D::new().chain_update(a).chain_update(b).finalize().to_vec()
        }
        match self {
            HashAlgorithm::SHA256 => Some(hash::<sha2::Sha256>(a, b)),
            HashAlgorithm::SHA384 => Some(hash::<sha2::Sha384>(a, b)),
            HashAlgorithm::SHA512 => Some(hash::<sha2::Sha512>(a, b)),
            _ => None,
        }
    }
}

impl fmt::Display for HashAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            HashAlgorithm::SHA1 => f.write_str("sha1"),
            HashAlgorithm::SHA256 => f.write_str("sha256"),
            HashAlgorithm::SHA384 => f.write_str("sha384"),
            HashAlgorithm::SHA512 => f.write_str("sha512"),
            HashAlgorithm::SM3_256 => f.write_str("sm3_256"),
            HashAlgorithm(other) => write!(f, "alg-{other:#06x}"),
        }
    }
}

/// `EV_NO_ACTION`: informational, never extended into a PCR.
pub const EV_NO_ACTION: u32 = 0x3;

/// One measurement: what was extended into which PCR, with one digest per bank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Its position in the log, the Spec ID header being 0 (as `tpm2_eventlog` numbers).
    pub number: usize,
    /// The PCR it was extended into.
    pub pcr: u32,
    /// Its `EV_*` type (see [`event_type_name`]).
    pub event_type: u32,
    /// One digest per algorithm the header lists, in the log's order.
    pub digests: Vec<(HashAlgorithm, Vec<u8>)>,
    /// The event data (what was measured, or a description of it).
    pub data: Vec<u8>,
}

impl Event {
    /// This event's digest in `algorithm`'s bank.
    pub fn digest(&self, algorithm: HashAlgorithm) -> Option<&[u8]> {
        self.digests.iter().find(|(a, _)| *a == algorithm).map(|(_, d)| d.as_slice())
    }

    /// The TCG name of its type (`EV_EFI_PLATFORM_FIRMWARE_BLOB2`).
    pub fn type_name(&self) -> String {
        event_type_name(self.event_type)
    }
}

/// A parsed crypto-agile event log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventLog {
    /// The banks the log carries digests for, with each digest's size (from the Spec ID header).
    pub algorithms: Vec<(HashAlgorithm, u16)>,
    /// The locality the firmware started the TPM from (the `StartupLocality` event): PCR 0
    /// starts at this value in its last byte instead of all zero.
    pub startup_locality: u8,
    /// Every event after the header, `EV_NO_ACTION` ones included.
    pub events: Vec<Event>,
}

/// Why a log could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EventLogError {
    /// The log ends inside a record.
    #[error("the event log is truncated at byte {0}")]
    Truncated(usize),
    /// The first record is not the Spec ID event of a crypto-agile (TPM 2.0) log.
    #[error("not a crypto-agile TCG2 event log: {0}")]
    NotCryptoAgile(String),
    /// An event's digest list does not match the banks the header declared.
    #[error("event {number}: {reason}")]
    BadEvent {
        /// The event's position in the log.
        number: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A replay was asked of a bank the log has no digests for.
    #[error("the event log has no {0} digests")]
    NoSuchBank(HashAlgorithm),
    /// A replay was asked of a bank the scheduler cannot compute.
    #[error("replaying the {0} bank is not supported")]
    UnsupportedAlgorithm(HashAlgorithm),
}

/// The signature opening the Spec ID event.
const SPEC_ID_SIGNATURE: &[u8; 16] = b"Spec ID Event03\0";
/// The signature of the `EV_NO_ACTION` event naming the startup locality.
const STARTUP_LOCALITY_SIGNATURE: &[u8; 16] = b"StartupLocality\0";
/// More digest algorithms than any TPM has banks: a header naming more is not a real log.
const MAX_ALGORITHMS: u32 = 16;

/// A cursor over little-endian fields that reports where it ran out.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], EventLogError> {
        let end =
            self.at.checked_add(n).filter(|end| *end <= self.bytes.len()).ok_or(EventLogError::Truncated(self.at))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }

    fn u8(&mut self) -> Result<u8, EventLogError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, EventLogError> {
        Ok(u16::from_le_bytes(self.take(2)?.try_into().expect("2 bytes")))
    }

    fn u32(&mut self) -> Result<u32, EventLogError> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn sized(&mut self) -> Result<&'a [u8], EventLogError> {
        let size = self.u32()?;
        self.take(usize::try_from(size).map_err(|_| EventLogError::Truncated(self.at))?)
    }

    fn done(&self) -> bool {
        self.at >= self.bytes.len()
    }
}

impl EventLog {
    /// Parses a crypto-agile log. Trailing zero bytes (a firmware's unused log area) end it.
    pub fn parse(bytes: &[u8]) -> Result<EventLog, EventLogError> {
        let mut reader = Reader { bytes, at: 0 };
        let algorithms = spec_id(&mut reader)?;
        let mut log = EventLog { algorithms, startup_locality: 0, events: Vec::new() };
        while !reader.done() {
            if bytes[reader.at..].iter().all(|b| *b == 0) {
                break;
            }
            let number = log.events.len() + 1;
            let pcr = reader.u32()?;
            let event_type = reader.u32()?;
            let count = reader.u32()?;
            if usize::try_from(count).ok() != Some(log.algorithms.len()) {
                return Err(EventLogError::BadEvent {
                    number,
                    reason: format!("{count} digests where the header declares {}", log.algorithms.len()),
                });
            }
            let mut digests = Vec::with_capacity(log.algorithms.len());
            for _ in 0..count {
                let algorithm = HashAlgorithm(reader.u16()?);
                let size =
                    log.algorithms.iter().find(|(a, _)| *a == algorithm).map(|(_, size)| *size).ok_or_else(|| {
                        EventLogError::BadEvent {
                            number,
                            reason: format!("a {algorithm} digest the header does not declare"),
                        }
                    })?;
                digests.push((algorithm, reader.take(usize::from(size))?.to_vec()));
            }
            let data = reader.sized()?.to_vec();
            if event_type == EV_NO_ACTION
                && pcr == 0
                && data.len() == 17
                && data.starts_with(STARTUP_LOCALITY_SIGNATURE)
            {
                log.startup_locality = data[16];
            }
            log.events.push(Event { number, pcr, event_type, digests, data });
        }
        Ok(log)
    }

    /// The PCR values the log produces in `algorithm`'s bank, for every PCR it extends.
    pub fn replay(&self, algorithm: HashAlgorithm) -> Result<BTreeMap<u32, Vec<u8>>, EventLogError> {
        let size = self
            .algorithms
            .iter()
            .find(|(a, _)| *a == algorithm)
            .map(|(_, size)| usize::from(*size))
            .ok_or(EventLogError::NoSuchBank(algorithm))?;
        algorithm.extend(&[], &[]).ok_or(EventLogError::UnsupportedAlgorithm(algorithm))?;
        let mut pcrs: BTreeMap<u32, Vec<u8>> = BTreeMap::new();
        for event in self.events.iter().filter(|e| e.event_type != EV_NO_ACTION) {
            let digest = event.digest(algorithm).expect("every event carries every declared bank");
            let pcr = pcrs.entry(event.pcr).or_insert_with(|| self.initial_value(event.pcr, size));
            *pcr = algorithm.extend(pcr, digest).expect("checked above");
        }
        Ok(pcrs)
    }

    /// A PCR's value after reset: zero, except PCR 0 started from locality 3 or 4.
    fn initial_value(&self, pcr: u32, size: usize) -> Vec<u8> {
        let mut value = vec![0; size];
        if pcr == 0
            && let Some(last) = value.last_mut()
        {
            *last = self.startup_locality;
        }
        value
    }
}

/// Where a log departs from a baseline's log: the first compared PCR whose value differs,
/// and the first of its events that differs (the one to look at).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcrDifference {
    /// The PCR.
    pub pcr: u32,
    /// The first of its events, in the observed log, that is not the baseline's (by type
    /// and digest, in order): its number and type name. `None` when the observed log ends
    /// where the baseline goes on.
    pub event: Option<(usize, String)>,
}

impl fmt::Display for PcrDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.event {
            Some((number, name)) => write!(f, "PCR {} differs (event {number}, {name})", self.pcr),
            None => write!(f, "PCR {} differs (events the baseline has are missing)", self.pcr),
        }
    }
}

impl EventLog {
    /// The first of `pcrs` (ascending) whose SHA-256 value differs between `baseline` and
    /// this log, with the first differing event; `None` when they agree on all of them.
    pub fn first_difference(&self, baseline: &EventLog, pcrs: &[u32]) -> Result<Option<PcrDifference>, EventLogError> {
        let (ours, theirs) = (self.replay(HashAlgorithm::SHA256)?, baseline.replay(HashAlgorithm::SHA256)?);
        let mut pcrs = pcrs.to_vec();
        pcrs.sort_unstable();
        let Some(pcr) = pcrs.into_iter().find(|pcr| ours.get(pcr) != theirs.get(pcr)) else { return Ok(None) };
        let measured = |log: &EventLog| -> Vec<Event> {
            log.events.iter().filter(|e| e.pcr == pcr && e.event_type != EV_NO_ACTION).cloned().collect()
        };
        let (ours, theirs) = (measured(self), measured(baseline));
        let same = |a: &Event, b: &Event| {
            a.event_type == b.event_type && a.digest(HashAlgorithm::SHA256) == b.digest(HashAlgorithm::SHA256)
        };
        let event = ours
            .iter()
            .enumerate()
            .find(|(i, event)| theirs.get(*i).is_none_or(|base| !same(event, base)))
            .map(|(_, event)| (event.number, event.type_name()));
        Ok(Some(PcrDifference { pcr, event }))
    }
}

/// Reads the Spec ID event (in the old SHA-1 record format, as the spec requires of the first
/// event) and returns the banks and digest sizes it declares.
fn spec_id(reader: &mut Reader<'_>) -> Result<Vec<(HashAlgorithm, u16)>, EventLogError> {
    let not_agile = |why: &str| EventLogError::NotCryptoAgile(why.to_owned());
    let (pcr, event_type) = (reader.u32()?, reader.u32()?);
    reader.take(20)?;
    let data = reader.sized()?;
    if pcr != 0 || event_type != EV_NO_ACTION || !data.starts_with(SPEC_ID_SIGNATURE) {
        return Err(not_agile("the first event is not the Spec ID event (a SHA-1-only log?)"));
    }
    let mut header = Reader { bytes: data, at: SPEC_ID_SIGNATURE.len() };
    let _platform_class = header.u32()?;
    let (_minor, major, _errata, _uintn_size) = (header.u8()?, header.u8()?, header.u8()?, header.u8()?);
    if major != 2 {
        return Err(not_agile(&format!("the Spec ID event declares spec version {major}, not 2")));
    }
    let count = header.u32()?;
    if count == 0 || count > MAX_ALGORITHMS {
        return Err(not_agile(&format!("the Spec ID event declares {count} digest algorithms")));
    }
    let mut algorithms = Vec::new();
    for _ in 0..count {
        let (algorithm, size) = (HashAlgorithm(header.u16()?), header.u16()?);
        if size == 0 || algorithms.iter().any(|(a, _)| *a == algorithm) {
            return Err(not_agile(&format!("the Spec ID event declares {algorithm} twice or with size 0")));
        }
        algorithms.push((algorithm, size));
    }
    Ok(algorithms)
}

/// An event log with nothing measured yet: its Spec ID header alone (`TCG_EfiSpecIdEvent`,
/// spec 2.0, the SHA-256 bank only), as a firmware that measured nothing writes it.
pub fn empty_sha256_log() -> Vec<u8> {
    let mut spec = Vec::new();
    spec.extend(b"Spec ID Event03\0");
    spec.extend(0u32.to_le_bytes()); // platformClass: client
    spec.extend([0, 2, 0, 2]); // specVersionMinor, specVersionMajor, specErrata, uintnSize (u64)
    spec.extend(1u32.to_le_bytes()); // numberOfAlgorithms
    spec.extend(0x000bu16.to_le_bytes());
    spec.extend(32u16.to_le_bytes());
    spec.push(0); // vendorInfoSize
    let mut log = Vec::new();
    log.extend(0u32.to_le_bytes()); // PCR 0
    log.extend(3u32.to_le_bytes()); // EV_NO_ACTION
    log.extend([0u8; 20]); // its SHA-1 digest field, zeros
    log.extend(u32::try_from(spec.len()).unwrap_or_default().to_le_bytes());
    log.extend(spec);
    log
}

/// Appends one event to a crypto-agile log whose Spec ID header declares SHA-256 alone (as
/// a firmware that measured `data` into `pcr` with its SHA-256 `digest` writes it).
pub fn append_sha256_event(log: &mut Vec<u8>, pcr: u32, event_type: u32, digest: &[u8; 32], data: &[u8]) {
    log.extend(pcr.to_le_bytes());
    log.extend(event_type.to_le_bytes());
    log.extend(1u32.to_le_bytes());
    log.extend(0x000bu16.to_le_bytes());
    log.extend(digest);
    log.extend(u32::try_from(data.len()).unwrap_or(u32::MAX).to_le_bytes());
    log.extend(data);
}

/// The TCG name of an event type, or its number in hex when the spec has no name for it.
pub fn event_type_name(event_type: u32) -> String {
    const EFI: u32 = 0x8000_0000;
    let name = match event_type {
        0x0 => "EV_PREBOOT_CERT",
        0x1 => "EV_POST_CODE",
        0x2 => "EV_UNUSED",
        EV_NO_ACTION => "EV_NO_ACTION",
        0x4 => "EV_SEPARATOR",
        0x5 => "EV_ACTION",
        0x6 => "EV_EVENT_TAG",
        0x7 => "EV_S_CRTM_CONTENTS",
        0x8 => "EV_S_CRTM_VERSION",
        0x9 => "EV_CPU_MICROCODE",
        0xa => "EV_PLATFORM_CONFIG_FLAGS",
        0xb => "EV_TABLE_OF_DEVICES",
        0xc => "EV_COMPACT_HASH",
        0xd => "EV_IPL",
        0xe => "EV_IPL_PARTITION_DATA",
        0xf => "EV_NONHOST_CODE",
        0x10 => "EV_NONHOST_CONFIG",
        0x11 => "EV_NONHOST_INFO",
        0x12 => "EV_OMIT_BOOT_DEVICE_EVENTS",
        t if t == EFI + 0x1 => "EV_EFI_VARIABLE_DRIVER_CONFIG",
        t if t == EFI + 0x2 => "EV_EFI_VARIABLE_BOOT",
        t if t == EFI + 0x3 => "EV_EFI_BOOT_SERVICES_APPLICATION",
        t if t == EFI + 0x4 => "EV_EFI_BOOT_SERVICES_DRIVER",
        t if t == EFI + 0x5 => "EV_EFI_RUNTIME_SERVICES_DRIVER",
        t if t == EFI + 0x6 => "EV_EFI_GPT_EVENT",
        t if t == EFI + 0x7 => "EV_EFI_ACTION",
        t if t == EFI + 0x8 => "EV_EFI_PLATFORM_FIRMWARE_BLOB",
        t if t == EFI + 0x9 => "EV_EFI_HANDOFF_TABLES",
        t if t == EFI + 0xa => "EV_EFI_PLATFORM_FIRMWARE_BLOB2",
        t if t == EFI + 0xb => "EV_EFI_HANDOFF_TABLES2",
        t if t == EFI + 0xc => "EV_EFI_VARIABLE_BOOT2",
        t if t == EFI + 0x10 => "EV_EFI_HCRTM_EVENT",
        t if t == EFI + 0xe0 => "EV_EFI_VARIABLE_AUTHORITY",
        t if t == EFI + 0xe1 => "EV_EFI_SPDM_FIRMWARE_BLOB",
        t if t == EFI + 0xe2 => "EV_EFI_SPDM_FIRMWARE_CONFIG",
        other => return format!("EV_{other:#010x}"),
    };
    name.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// OVMF 2022.11 (Debian 12) into swtpm 0.7.1 (SHA-256 bank only), then Linux 6.1's EFI
    /// stub measuring its command line and initrd: read from the guest's securityfs.
    const OVMF: &[u8] = include_bytes!("../testdata/ovmf-2022.11-swtpm.eventlog");

    /// What that guest's TPM held (`/sys/class/tpm/tpm0/pcr-sha256/N`) and what
    /// `tpm2_eventlog` (tpm2-tools 5.4) computes from the same log.
    const OVMF_PCRS: &[(u32, &str)] = &[
        (0, "b44d5dc87c359b60c8df17ac97581dcac8aa81f40c6df06652ea2f27dea7c86a"),
        (1, "8e9d1fe23131f12d6a523e9c32eb3223d4dc25e14eb5fd60163e7ba8de0f248c"),
        (2, "3d458cfe55cc03ea1f443f1562beec8df51c75e14a9fcf9a7234a13f198e7969"),
        (3, "3d458cfe55cc03ea1f443f1562beec8df51c75e14a9fcf9a7234a13f198e7969"),
        (4, "f9e1fc4aecd7940dd98a79495af8b56a4b39814a9bce71aedcecf4171833b7d7"),
        (5, "a5ceb755d043f32431d63e39f5161464620a3437280494b5850dc1b47cc074e0"),
        (6, "3d458cfe55cc03ea1f443f1562beec8df51c75e14a9fcf9a7234a13f198e7969"),
        (7, "65caf8dd1e0ea7a6347b635d2b379c93b9a1351edc2afc3ecda700e534eb3068"),
        (9, "00c27e003b0873f34729315c85651dac0d2062b10dad7d8b617af46c5445930c"),
    ];

    #[test]
    fn an_ovmf_log_replays_to_what_its_tpm_held() {
        let log = EventLog::parse(OVMF).unwrap();
        assert_eq!(log.algorithms, vec![(HashAlgorithm::SHA256, 32)]);
        assert_eq!(log.events.len(), 24, "tpm2_eventlog counts 25 with the header");
        let replayed = log.replay(HashAlgorithm::SHA256).unwrap();
        let replayed: Vec<(u32, String)> = replayed.into_iter().map(|(pcr, value)| (pcr, hex::encode(value))).collect();
        let expected: Vec<(u32, String)> = OVMF_PCRS.iter().map(|(pcr, value)| (*pcr, (*value).to_owned())).collect();
        assert_eq!(replayed, expected);
        let first = &log.events[0];
        assert_eq!((first.number, first.pcr, first.type_name().as_str()), (1, 0, "EV_S_CRTM_VERSION"));
        assert!(log.events.iter().any(|e| e.pcr == 9 && e.data.windows(12).any(|w| w == b"Linux initrd")));
    }

    #[test]
    fn a_log_written_here_reads_as_ovmfs_does() {
        use sha2::Digest as _;
        // The same header as OVMF's (its header cut from the real log), and events appended
        // replay to what extending a TPM with them gives.
        let size = u32::from_le_bytes(OVMF[28..32].try_into().unwrap()) as usize;
        let ovmf_header = EventLog::parse(&OVMF[..32 + size]).unwrap();
        let mut written = empty_sha256_log();
        assert_eq!(EventLog::parse(&written).unwrap().algorithms, ovmf_header.algorithms);
        let digest: [u8; 32] = sha2::Sha256::digest(b"an implant").into();
        append_sha256_event(&mut written, 0, 0x8000_000a, &digest, b"an implant");
        let log = EventLog::parse(&written).unwrap();
        assert_eq!((log.events.len(), log.events[0].type_name().as_str()), (1, "EV_EFI_PLATFORM_FIRMWARE_BLOB2"));
        let extended: [u8; 32] = sha2::Sha256::new().chain_update([0u8; 32]).chain_update(digest).finalize().into();
        assert_eq!(log.replay(HashAlgorithm::SHA256).unwrap()[&0], extended.to_vec());
    }

    #[test]
    fn one_changed_digest_changes_only_its_pcr() {
        let mut log = EventLog::parse(OVMF).unwrap();
        let before = log.replay(HashAlgorithm::SHA256).unwrap();
        let event = log.events.iter_mut().find(|e| e.pcr == 7).unwrap();
        event.digests[0].1[0] ^= 1;
        let after = log.replay(HashAlgorithm::SHA256).unwrap();
        let changed: Vec<u32> = before.keys().filter(|pcr| before[pcr] != after[pcr]).copied().collect();
        assert_eq!(changed, vec![7]);
    }

    #[test]
    fn a_startup_locality_event_sets_pcr_0s_initial_value() {
        let mut bytes = OVMF.to_vec();
        let mut data = STARTUP_LOCALITY_SIGNATURE.to_vec();
        data.push(3);
        bytes.extend(record(0, EV_NO_ACTION, &[0; 32], &data));
        let log = EventLog::parse(&bytes).unwrap();
        assert_eq!(log.startup_locality, 3);
        let plain = EventLog::parse(OVMF).unwrap().replay(HashAlgorithm::SHA256).unwrap();
        let from_three = log.replay(HashAlgorithm::SHA256).unwrap();
        assert_ne!(plain[&0], from_three[&0]);
        assert_eq!(plain[&4], from_three[&4]);
    }

    #[test]
    fn a_log_cut_anywhere_is_refused_or_ends_at_a_record() {
        let whole = EventLog::parse(OVMF).unwrap();
        for cut in 0..OVMF.len() {
            match EventLog::parse(&OVMF[..cut]) {
                Ok(log) => assert!(whole.events.starts_with(&log.events)),
                Err(EventLogError::Truncated(at)) => assert!(at <= cut),
                Err(other) => panic!("cut at {cut}: {other}"),
            }
        }
        // Zero padding after the last record (a firmware's unused log area) ends the log.
        let mut padded = OVMF.to_vec();
        padded.extend([0; 64]);
        assert_eq!(EventLog::parse(&padded).unwrap(), whole);
    }

    #[test]
    fn logs_that_are_not_crypto_agile_or_lie_about_their_banks_are_refused() {
        let sha1_only = record_sha1(0, 0x8, b"firmware 1.0");
        assert!(matches!(EventLog::parse(&sha1_only), Err(EventLogError::NotCryptoAgile(_))));
        let mut extra = OVMF.to_vec();
        let mut event = Vec::new();
        event.extend(7u32.to_le_bytes());
        event.extend(4u32.to_le_bytes());
        event.extend(2u32.to_le_bytes()); // two digests where one bank is declared
        extra.extend(event);
        assert!(matches!(EventLog::parse(&extra), Err(EventLogError::BadEvent { number: 25, .. })), "{extra:?}");
        let log = EventLog::parse(OVMF).unwrap();
        assert_eq!(log.replay(HashAlgorithm::SHA384), Err(EventLogError::NoSuchBank(HashAlgorithm::SHA384)));
    }

    #[test]
    fn a_difference_names_the_first_differing_pcr_and_event() {
        let baseline = EventLog::parse(OVMF).unwrap();
        assert_eq!(baseline.first_difference(&baseline, &[0, 1, 2, 3, 4, 5, 6, 7]).unwrap(), None);
        // The second firmware blob of PCR 0 changed (another firmware build), and PCR 7.
        let mut changed = baseline.clone();
        let blob = changed.events.iter().filter(|e| e.pcr == 0).nth(1).unwrap().number;
        changed.events[blob - 1].digests[0].1[0] ^= 1;
        let seven = changed.events.iter().position(|e| e.pcr == 7).unwrap();
        changed.events[seven].digests[0].1[0] ^= 1;
        let difference = changed.first_difference(&baseline, &[7, 0]).unwrap().unwrap();
        assert_eq!(difference, PcrDifference { pcr: 0, event: Some((blob, "EV_EFI_PLATFORM_FIRMWARE_BLOB".into())) });
        assert_eq!(difference.to_string(), format!("PCR 0 differs (event {blob}, EV_EFI_PLATFORM_FIRMWARE_BLOB)"));
        // Not compared, not reported: only PCR 7 is asked for.
        assert_eq!(changed.first_difference(&baseline, &[7]).unwrap().unwrap().pcr, 7);
        // An event left out: the difference is the first event after the gap.
        let mut shorter = baseline.clone();
        let last_of_one = shorter.events.iter().rposition(|e| e.pcr == 1).unwrap();
        shorter.events.remove(last_of_one);
        assert_eq!(shorter.first_difference(&baseline, &[1]).unwrap().unwrap().event, None);
    }

    #[test]
    fn event_types_are_named_as_the_tcg_names_them() {
        assert_eq!(event_type_name(0x8000_000a), "EV_EFI_PLATFORM_FIRMWARE_BLOB2");
        assert_eq!(event_type_name(0x4), "EV_SEPARATOR");
        assert_eq!(event_type_name(0x8000_1234), "EV_0x80001234");
    }

    /// A crypto-agile record with one SHA-256 digest.
    fn record(pcr: u32, event_type: u32, digest: &[u8; 32], data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(pcr.to_le_bytes());
        out.extend(event_type.to_le_bytes());
        out.extend(1u32.to_le_bytes());
        out.extend(HashAlgorithm::SHA256.0.to_le_bytes());
        out.extend(digest);
        out.extend(u32::try_from(data.len()).unwrap().to_le_bytes());
        out.extend(data);
        out
    }

    /// A record in the old SHA-1 format (what a TPM 1.2 log holds throughout).
    fn record_sha1(pcr: u32, event_type: u32, data: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend(pcr.to_le_bytes());
        out.extend(event_type.to_le_bytes());
        out.extend([0; 20]);
        out.extend(u32::try_from(data.len()).unwrap().to_le_bytes());
        out.extend(data);
        out
    }
}
