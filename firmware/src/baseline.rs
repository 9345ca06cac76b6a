//! The baseline check: a node's firmware inventory against its pool's `firmwareBaseline`
//! (`{component: version}`), exact string match. The result is a `FirmwareReport` with one
//! entry per baseline component; a component reported by several sources (in band and out
//! of band) complies only when every source reports the expected version.

use std::collections::BTreeMap;

use metal_protocol::firmware::{Comparison, ComponentCheck, FirmwareReport, FirmwareVersion};
use metal_protocol::tool::Tool;
use time::OffsetDateTime;

/// Why there is nothing to check against.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CheckError {
    /// The pool has no firmware baseline (or an empty one).
    #[error("INVALID_CONFIG: the pool has no firmware baseline to check against")]
    NoBaseline,
}

/// The stable code of a report: `COMPLIANT` or `FIRMWARE_DRIFT`.
pub fn code(report: &FirmwareReport) -> &'static str {
    if report.compliant { "COMPLIANT" } else { "FIRMWARE_DRIFT" }
}

/// One line per drifted or missing component, e.g. `bios: expected 2.1, found 2.0`.
pub fn drift_lines(report: &FirmwareReport) -> Vec<String> {
    report
        .components
        .iter()
        .filter(|c| c.drift)
        .map(|c| match &c.found {
            Some(found) => format!("{}: expected {}, found {found}", c.component, c.expected),
            None => format!("{}: expected {}, not found in the inventory", c.component, c.expected),
        })
        .collect()
}

/// Compares `inventory` with `baseline`.
pub fn check(
    node_id: &str,
    inventory: &[FirmwareVersion],
    baseline: Option<&BTreeMap<String, String>>,
    checked_at: OffsetDateTime,
) -> Result<FirmwareReport, CheckError> {
    let baseline = baseline.filter(|b| !b.is_empty()).ok_or(CheckError::NoBaseline)?;
    let components: Vec<ComponentCheck> = baseline
        .iter()
        .map(|(component, expected)| {
            let reported: Vec<&str> =
                inventory.iter().filter(|v| &v.component == component).map(|v| v.version.as_str()).collect();
            // The first version that differs is the finding; else the (matching) version.
            let found = reported.iter().find(|v| *v != expected).or(reported.first()).map(|v| (*v).to_owned());
            let drift = found.as_deref() != Some(expected.as_str());
            ComponentCheck { component: component.clone(), found, expected: expected.clone(), drift }
        })
        .collect();
    Ok(FirmwareReport {
        node_id: node_id.to_owned(),
        baseline: baseline.clone(),
        comparison: Comparison::Exact,
        compliant: components.iter().all(|c| !c.drift),
        components,
        checked_at,
        tool: Tool { name: "metal-firmware".into(), version: env!("CARGO_PKG_VERSION").into() },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(component: &str, version: &str, source: &str) -> FirmwareVersion {
        FirmwareVersion { component: component.into(), version: version.into(), source: source.into() }
    }

    fn baseline(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    const AT: OffsetDateTime = time::macros::datetime!(2026-12-01 10:00 UTC);

    #[test]
    fn compliant_drifted_missing_and_no_baseline() {
        let inventory = [v("bios", "2.1", "dmi"), v("bmc", "1.5", "redfish"), v("nic:0000:01:00.0", "22.1", "ethtool")];
        let ok = check("n1", &inventory, Some(&baseline(&[("bios", "2.1"), ("bmc", "1.5")])), AT).unwrap();
        assert!(ok.compliant);
        assert_eq!(code(&ok), "COMPLIANT");
        assert!(drift_lines(&ok).is_empty());

        let want = baseline(&[("bios", "2.2"), ("bmc", "1.5"), ("gpu-vbios", "96.00")]);
        let drift = check("n1", &inventory, Some(&want), AT).unwrap();
        assert_eq!(code(&drift), "FIRMWARE_DRIFT");
        assert_eq!(
            drift_lines(&drift),
            ["bios: expected 2.2, found 2.1", "gpu-vbios: expected 96.00, not found in the inventory"]
        );
        assert_eq!(drift.comparison, Comparison::Exact);
        assert_eq!(drift.components.len(), 3, "one entry per baseline component");

        assert_eq!(check("n1", &inventory, None, AT).unwrap_err(), CheckError::NoBaseline);
        assert_eq!(check("n1", &inventory, Some(&BTreeMap::new()), AT).unwrap_err(), CheckError::NoBaseline);
        assert!(CheckError::NoBaseline.to_string().starts_with("INVALID_CONFIG"));
    }

    #[test]
    fn every_source_must_agree_and_comparison_is_exact() {
        let inventory = [v("bios", "2.1", "dmi"), v("bios", "2.0", "redfish")];
        let report = check("n1", &inventory, Some(&baseline(&[("bios", "2.1")])), AT).unwrap();
        assert_eq!(drift_lines(&report), ["bios: expected 2.1, found 2.0"]);
        let spaced = [v("bmc", "1.5 ", "ipmi")];
        assert!(!check("n1", &spaced, Some(&baseline(&[("bmc", "1.5")])), AT).unwrap().compliant);
    }
}
