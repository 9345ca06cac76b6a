//! A wipe report as a certificate of sanitization a person reads (NIST SP 800-88 Rev. 1,
//! appendix G: the device, the method and its category, the verification, who signed it,
//! the result), printed only after the envelope as it was posted verified offline against
//! the site CA and the platform inventory's disks: the check `metal-erase verify` makes, not
//! the scheduler's stored verdict.

use std::fmt::Write as _;

use anyhow::{Context as _, bail};
use metal_protocol::wipe::{NistCategory, WipeResult};

use crate::site::Site;

/// The certificate of the node's last accepted wipe report, and how many disks it covers.
pub async fn for_node(site: &Site, node: &str) -> anyhow::Result<(String, usize)> {
    let records = site.admin.get(&format!("/v1/nodes/{node}/wipe-reports")).await?;
    let record = records
        .as_array()
        .into_iter()
        .flatten()
        .rev()
        .find(|r| r["accepted"] == true)
        .with_context(|| format!("{node} has no accepted wipe report"))?;
    let id = record["id"].as_str().context("a wipe report without an id")?.to_owned();
    let (owner, report_id) = (node.to_owned(), id.clone());
    let app = site.app()?;
    let envelope = app
        .store
        .read(move |conn| metal_store::boot::wipe_envelope(conn, &owner, &report_id))
        .await
        .map_err(|e| anyhow::anyhow!("reading wipe report {id}: {e}"))?
        .with_context(|| format!("wipe report {id} has no envelope"))?;
    let envelope = metal_protocol::dsse::Envelope::from_json(envelope.as_bytes())?;
    let boot = app.boot.as_ref().context("the boot service is off")?;
    // Every disk the platform inventoried must be in the report, erased.
    let inventory = site.admin.get(&format!("/v1/nodes/{node}/inventory")).await?;
    let disks: Vec<metal_protocol::inventory::Disk> = serde_json::from_value(inventory["inventory"]["disks"].clone())
        .with_context(|| format!("the platform inventory of {node}"))?;
    let disks: Vec<_> = disks.into_iter().map(|d| d.identity).collect();
    let report = match metal_erase::report::verify_offline(&envelope, boot.ca.certificate(), Some(&disks)) {
        Ok(report) => report,
        Err(refusal) => bail!("wipe report {id} does not verify offline: {refusal}"),
    };
    let signer = record["signer"].as_str().unwrap_or("?");
    let mut text = String::new();
    let _ = writeln!(text, "  Certificate of sanitization (NIST SP 800-88 Rev. 1)");
    let _ = writeln!(text, "  report       {id}, verified offline against site CA {}", boot.ca_fingerprint);
    let _ = writeln!(text, "  signed by    {signer}");
    let _ = writeln!(text, "  node         {}   policy {:?}", report.node_id, report.policy);
    use crate::clock::rfc3339;
    let _ = writeln!(text, "  period       {} .. {}", rfc3339(report.started_at), rfc3339(report.finished_at));
    for disk in &report.disks {
        let identity = &disk.identity;
        let _ = writeln!(
            text,
            "  device       {} serial {} model {} {} bytes",
            disk.device,
            identity.serial.as_deref().unwrap_or("-"),
            identity.model.as_deref().unwrap_or("-"),
            identity.size_bytes
        );
        let method = disk.method.and_then(|m| serde_json::to_value(m).ok());
        let category = match disk.nist_category {
            Some(NistCategory::Purge) => "Purge",
            Some(NistCategory::Clear) => "Clear",
            None => "none",
        };
        let _ = writeln!(
            text,
            "    method     {} (category {category})",
            method.as_ref().and_then(|m| m.as_str()).unwrap_or("none")
        );
        if let Some(v) = &disk.verification {
            let _ = writeln!(
                text,
                "    verified   {:?}, {:.3}% coverage, {} bytes read back, expected {}",
                v.mode, v.coverage_percent, v.bytes_read, v.expected
            );
        }
        let result = match disk.result {
            WipeResult::Pass => "PASS".to_owned(),
            WipeResult::Fail => format!("FAIL: {}", disk.failure.as_deref().unwrap_or("?")),
        };
        let _ = writeln!(text, "    result     {result}");
    }
    Ok((text.trim_end().to_owned(), report.disks.len()))
}
