//! The wipe report: assembling it from per-disk results, signing it, and the offline check.
//!
//! The signer's identity (node id) comes from its own certificate
//! ([`SigningIdentity`]), so a report can only speak for the node its key was issued to; the
//! key must match the certificate before any disk is touched.

use std::time::SystemTime;

pub use metal_protocol::identity::SigningIdentity;
use metal_protocol::tool::Tool;
use metal_protocol::wipe::{DiskWipe, WipePolicy, WipeResult};
use metal_protocol::{CaCertificate, DiskIdentity, Envelope, Identity, WipeExpectation, WipeRefusal, WipeReport};
use time::OffsetDateTime;

/// Why a report could not be signed.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The report could not be signed.
    #[error("signing the report: {0}")]
    Sign(String),
}

/// Builds the report for the node the signing identity names.
pub fn build(
    identity: &SigningIdentity,
    inventory_disks: Vec<DiskIdentity>,
    policy: WipePolicy,
    disks: Vec<DiskWipe>,
    started_at: OffsetDateTime,
) -> WipeReport {
    WipeReport {
        node_id: identity.identity().node.clone(),
        inventory_disks,
        policy,
        disks,
        started_at,
        finished_at: metal_clock::now_utc(),
        tool: Tool { name: "metal-erase".into(), version: env!("CARGO_PKG_VERSION").into() },
    }
}

/// Signs the report as a DSSE envelope.
pub fn sign(identity: &SigningIdentity, report: &WipeReport) -> Result<Envelope, ReportError> {
    Envelope::sign_json(WipeReport::PAYLOAD_TYPE, report, identity.signer())
        .map_err(|e| ReportError::Sign(e.to_string()))
}

/// Verifies a report offline: the signer's certificate must chain to `ca` and be valid when
/// the report says it finished; node and generation are the certificate's own, and the disk
/// list is the report's `inventoryDisks` unless `inventory` names the platform's list.
pub fn verify_offline(
    envelope: &Envelope,
    ca: &CaCertificate,
    inventory: Option<&[DiskIdentity]>,
) -> Result<WipeReport, WipeRefusal> {
    // DSSE order: the signature is checked before a byte of the payload is parsed (the time the
    // chain is checked at comes from the payload, so the chain itself is checked after).
    let signature = envelope.single_signature()?;
    let leaf = signature
        .certificate_ders()?
        .into_iter()
        .next()
        .ok_or_else(|| WipeRefusal::Malformed("signature carries no certificate".into()))?;
    let (identity, key) = metal_protocol::identity::read_unverified(&leaf).map_err(WipeRefusal::from)?;
    envelope.verify_signature(signature, &key)?;
    let claimed: WipeReport = serde_json::from_slice(&envelope.payload_bytes()?)
        .map_err(|e| WipeRefusal::Malformed(format!("payload is not a wipe report: {e}")))?;
    let disks = inventory.map(<[DiskIdentity]>::to_vec).unwrap_or_else(|| claimed.inventory_disks.clone());
    let expect = WipeExpectation {
        node_id: &identity.node,
        generation: identity.generation,
        disks: &disks,
        at: SystemTime::from(claimed.finished_at),
    };
    metal_protocol::verify_wipe_report(envelope, ca, &expect)
}

/// A human summary mapped to the NIST SP 800-88 certificate of sanitization fields.
pub fn summary(report: &WipeReport, signer: Option<&Identity>) -> String {
    let mut out = String::new();
    let rfc3339 = |t: OffsetDateTime| t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default();
    out.push_str("Certificate of sanitization (NIST SP 800-88)\n");
    out.push_str(&format!("  node:         {}\n", report.node_id));
    if let Some(id) = signer {
        out.push_str(&format!("  signed by:    {} (identity generation {})\n", id.to_uri(), id.generation));
    }
    out.push_str(&format!("  tool:         {} {}\n", report.tool.name, report.tool.version));
    out.push_str(&format!("  policy:       {:?}\n", report.policy));
    out.push_str(&format!("  completed:    {}\n", rfc3339(report.finished_at)));
    for d in &report.disks {
        out.push_str(&format!("  - device:       {}\n", d.device));
        out.push_str(&format!(
            "    model/serial: {} / {}\n",
            d.identity.model.as_deref().unwrap_or("-"),
            d.identity.serial.as_deref().unwrap_or("-")
        ));
        out.push_str(&format!("    size:         {} bytes\n", d.identity.size_bytes));
        let method = d
            .method
            .map(|m| serde_json::to_value(m).ok().and_then(|v| v.as_str().map(str::to_owned)).unwrap_or_default());
        out.push_str(&format!("    method:       {}\n", method.as_deref().unwrap_or("none")));
        out.push_str(&format!(
            "    category:     {}\n",
            d.nist_category.map(|c| format!("{c:?}")).unwrap_or_else(|| "-".into())
        ));
        match &d.verification {
            Some(v) => out.push_str(&format!(
                "    verification: {:?}, {:.2}% of the disk read back ({} bytes), expected {}{}\n",
                v.mode,
                v.coverage_percent,
                v.bytes_read,
                v.expected,
                v.sample_seed.as_ref().map(|s| format!(", seed {s}")).unwrap_or_default()
            )),
            None => out.push_str("    verification: none\n"),
        }
        let result = match d.result {
            WipeResult::Pass => "PASS".to_owned(),
            WipeResult::Fail => format!(
                "FAIL{}{}",
                d.first_bad_offset.map(|o| format!(" (first bad byte at offset {o})")).unwrap_or_default(),
                d.failure.as_ref().map(|f| format!(": {f}")).unwrap_or_default()
            ),
        };
        out.push_str(&format!("    result:       {result}\n"));
        out.push_str(&format!("    date:         {} .. {}\n", rfc3339(d.started_at), rfc3339(d.finished_at)));
    }
    out
}
