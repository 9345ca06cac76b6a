//! `metal-boot verify-attestation`: an attestation envelope, as the scheduler keeps it
//! (`GET /v1/nodes/{id}/attestations/{attestation}/envelope`), checked offline against the
//! site CA: who signed it, that its quote is a TPM's and its event log replays to it, what
//! each PCR holds and, against a known-good boot (another envelope, or a raw event log),
//! the first PCR and event that differ. Optionally the EK certificate against TPM makers' CAs.

use std::fmt::Write as _;
use std::path::Path;

use metal_protocol::eventlog::{EventLog, PcrDifference};
use metal_protocol::measurement::{OfflineAttestation, verify_offline};
use metal_protocol::tpm::PublicKey;
use metal_protocol::{CaCertificate, Envelope};
use sha2::Digest as _;

/// Why the check did not pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// A file could not be read or is not what its option says.
    Arguments(String),
    /// The evidence does not verify.
    Refused(String),
}

/// What the check found: the summary to print, and the difference from the baseline (when
/// one was given and differs).
#[derive(Debug)]
pub struct Checked {
    /// Human-readable, one fact a line.
    pub summary: String,
    /// The first difference from the baseline.
    pub difference: Option<PcrDifference>,
}

/// Checks the envelope in `envelope` against the site CA in `ca` (PEM); with `tpm_cas` (a
/// PEM bundle), its EK certificate too; with `baseline`, compares `pcrs` with it.
pub fn verify(
    envelope: &Path,
    ca: &Path,
    tpm_cas: Option<&Path>,
    baseline: Option<&Path>,
    pcrs: &[u32],
) -> Result<Checked, Failure> {
    let ca = read(ca).and_then(|pem| {
        CaCertificate::from_pem(&String::from_utf8_lossy(&pem)).map_err(|e| Failure::Arguments(format!("--ca: {e}")))
    })?;
    let attestation = offline(envelope, &ca)?;
    let mut summary = String::new();
    let boot = &attestation.boot;
    let line = &mut summary;
    let _ = writeln!(line, "signed by:        {} (issued by the site CA {})", attestation.signer.to_uri(), ca.site());
    let _ = writeln!(line, "attestation key:  {}", hex::encode(boot.ak.name()));
    let _ = writeln!(line, "quote binds:      {}", hex::encode(&boot.quote.extra_data));
    let keys = &attestation.report.evidence.keys;
    let _ = writeln!(line, "EK:               sha256 {}", hex::encode(sha2::Sha256::digest(&keys.ek_public)));
    let certificate = match (&keys.ek_certificate, tpm_cas) {
        (None, _) => "none (the TPM holds no EK certificate)".to_owned(),
        (Some(_), None) => "present, not checked (give --tpm-ca)".to_owned(),
        (Some(der), Some(file)) => {
            let pem = read(file)?;
            let cas = metal_protocol::identity::certificates_from_pem(&String::from_utf8_lossy(&pem))
                .map_err(|e| Failure::Arguments(format!("--tpm-ca: {e}")))?;
            let ek = PublicKey::parse(&keys.ek_public).map_err(|e| Failure::Refused(format!("the EK: {e}")))?;
            let chain = metal_protocol::ekcert::verify(der, &ek, &cas)
                .map_err(|e| Failure::Refused(format!("the EK certificate: {e}")))?;
            format!("certifies this EK, chains to {}", chain.last().map(String::as_str).unwrap_or_default())
        }
    };
    let _ = writeln!(line, "EK certificate:   {certificate}");
    for (pcr, value) in &boot.pcrs {
        let events = boot.log.events.iter().filter(|e| e.pcr == *pcr).count();
        let _ = writeln!(line, "PCR {pcr:>2} sha256 {}  replays from {events} events", hex::encode(value));
    }
    let _ = writeln!(
        line,
        "not checkable offline: that the attestation key is in the TPM of the node's pinned EK (credential \
         activation) and that the quote bound its one-time challenge; the scheduler checked both on receipt"
    );
    let difference = match baseline {
        None => None,
        Some(file) => {
            let baseline = baseline_log(file, &ca)?;
            let found = boot.log.first_difference(&baseline, pcrs).map_err(|e| Failure::Refused(e.to_string()))?;
            if found.is_none() {
                let pcrs: Vec<String> = pcrs.iter().map(u32::to_string).collect();
                let _ = writeln!(line, "PCRs {} match the baseline", pcrs.join(","));
            }
            found
        }
    };
    Ok(Checked { summary, difference })
}

fn read(file: &Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(file).map_err(|e| Failure::Arguments(format!("{}: {e}", file.display())))
}

/// The envelope in `file`, checked against `ca`.
fn offline(file: &Path, ca: &CaCertificate) -> Result<OfflineAttestation, Failure> {
    let bytes = read(file)?;
    let envelope = Envelope::from_json(&bytes)
        .map_err(|e| Failure::Arguments(format!("{}: not a DSSE envelope: {e}", file.display())))?;
    verify_offline(&envelope, ca).map_err(|e| Failure::Refused(format!("{}: {e}", file.display())))
}

/// A baseline's event log: from an attestation envelope (checked like the evidence), or a raw
/// log (`metal-boot measurements --save-log`).
fn baseline_log(file: &Path, ca: &CaCertificate) -> Result<EventLog, Failure> {
    let bytes = read(file)?;
    if Envelope::from_json(&bytes).is_ok() {
        return Ok(offline(file, ca)?.boot.log);
    }
    EventLog::parse(&bytes)
        .map_err(|e| Failure::Arguments(format!("{}: neither an envelope nor an event log: {e}", file.display())))
}
