//! The teardown's firmware step: check the node's firmware against its pool's baseline and,
//! when the pool says `reflash` and has an image for every drifted component, write the
//! images through the BMC and check again. Every other path ends in quarantine with a
//! reason; the `quarantine` remediation (the default) never writes anything.
//!
//! Order matters: every image is downloaded and its SHA-256 checked before the first one is
//! handed to the BMC, so a bad image leaves the machine untouched.

use std::collections::BTreeMap;

use metal_bmc::{Bmc, FirmwareUpdate, PowerAction};
use metal_protocol::firmware::FirmwareReport;
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::baseline::{self, CheckError};
use crate::image::{self, FetchOptions, Image, ImageError};
use crate::inventory::{self, OutOfBand};

/// What a teardown does when firmware drifted from the baseline (`firmwareRemediation`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum FirmwareRemediation {
    /// Write the pool's images through the BMC, then check again.
    Reflash,
    /// Quarantine the node (never writes).
    #[default]
    Quarantine,
}

/// A firmware image for one component (`firmwareImages.<component>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FirmwareImage {
    /// https:// URL of the image.
    pub url: String,
    /// Lower-case hex SHA-256 of the image.
    pub sha256: String,
}

/// The firmware part of a pool's policy. Other policy fields are ignored, so a pool's
/// whole policy document can be given as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FirmwarePolicy {
    /// `{component: version}`.
    #[serde(default)]
    pub firmware_baseline: Option<BTreeMap<String, String>>,
    /// What to do about drift.
    #[serde(default)]
    pub firmware_remediation: FirmwareRemediation,
    /// Images by component.
    #[serde(default)]
    pub firmware_images: BTreeMap<String, FirmwareImage>,
}

/// How the firmware step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    /// No drift; nothing was written.
    Compliant,
    /// Drift was found, reflashed, and the second check passed.
    Reflashed,
    /// Drift, and the policy is `quarantine`: nothing was written.
    FirmwareDrift,
    /// A drifted component has no image in the policy: nothing was written.
    NoImage,
    /// The BMC names no place to update a drifted component: nothing was written.
    NoUpdateTarget,
    /// An image could not be downloaded: nothing was written.
    ImageDownloadFailed,
    /// An image's SHA-256 differs from the policy's: nothing was written.
    ImageChecksumMismatch,
    /// The BMC refused an update or its task failed.
    UpdateFailed,
    /// The BMC failed outside an update (reading the inventory again, power-cycling).
    BmcFailed,
    /// The check after the reflash still found drift.
    DriftSurvivedReflash,
}

impl Code {
    /// The code as written in outcomes and events.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Compliant => "COMPLIANT",
            Code::Reflashed => "REFLASHED",
            Code::FirmwareDrift => "FIRMWARE_DRIFT",
            Code::NoImage => "NO_IMAGE",
            Code::NoUpdateTarget => "NO_UPDATE_TARGET",
            Code::ImageDownloadFailed => "IMAGE_DOWNLOAD_FAILED",
            Code::ImageChecksumMismatch => "IMAGE_CHECKSUM_MISMATCH",
            Code::UpdateFailed => "UPDATE_FAILED",
            Code::BmcFailed => "BMC_FAILED",
            Code::DriftSurvivedReflash => "DRIFT_SURVIVED_REFLASH",
        }
    }

    /// Whether the node may go on (compliant, or made compliant).
    pub fn passed(self) -> bool {
        matches!(self, Code::Compliant | Code::Reflashed)
    }
}

/// One thing the step did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// When it finished.
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// `inventory`, `check`, `download`, `update`, `power-cycle`.
    pub action: String,
    /// The component it concerned, if one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<String>,
    /// Whether it succeeded.
    pub ok: bool,
    /// What happened.
    pub detail: String,
}

/// The outcome of the firmware step, with every step taken.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// The node.
    pub node_id: String,
    /// How it ended.
    pub code: Code,
    /// Why, for anything but compliant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The first check.
    pub before: FirmwareReport,
    /// The check after a reflash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<FirmwareReport>,
    /// Every step, in order.
    pub steps: Vec<Step>,
}

/// Why the step could not even start.
#[derive(Debug, thiserror::Error)]
pub enum RemediationError {
    /// The pool has no baseline (`INVALID_CONFIG`).
    #[error(transparent)]
    Config(#[from] CheckError),
    /// The BMC's inventory could not be read.
    #[error("reading the firmware inventory: {0}")]
    Bmc(#[from] metal_bmc::BmcError),
}

struct Run<'a> {
    bmc: &'a dyn Bmc,
    node_id: &'a str,
    steps: Vec<Step>,
}

impl Run<'_> {
    fn step(&mut self, action: &str, component: Option<&str>, ok: bool, detail: String) {
        if ok {
            info!(node = self.node_id, action, component, "{detail}");
        } else {
            warn!(node = self.node_id, action, component, "{detail}");
        }
        let at = metal_clock::now_utc();
        self.steps.push(Step { at, action: action.into(), component: component.map(Into::into), ok, detail });
    }

    async fn check(&mut self, policy: &FirmwarePolicy) -> Result<(OutOfBand, FirmwareReport), RemediationError> {
        let found = match inventory::out_of_band(self.bmc).await {
            Ok(found) => found,
            Err(e) => {
                self.step("inventory", None, false, e.to_string());
                return Err(e.into());
            }
        };
        self.step(
            "inventory",
            None,
            true,
            format!("{} versions read through {}", found.versions.len(), self.bmc.protocol()),
        );
        let report =
            baseline::check(self.node_id, &found.versions, policy.firmware_baseline.as_ref(), metal_clock::now_utc())?;
        let lines = baseline::drift_lines(&report);
        let detail = if lines.is_empty() { "compliant".to_owned() } else { lines.join("; ") };
        self.step("check", None, report.compliant, format!("{}: {detail}", baseline::code(&report)));
        Ok((found, report))
    }

    fn end(self, code: Code, reason: Option<String>, before: FirmwareReport, after: Option<FirmwareReport>) -> Outcome {
        Outcome { node_id: self.node_id.to_owned(), code, reason, before, after, steps: self.steps }
    }
}

/// Runs the firmware step for `node_id` through `bmc` under `policy`.
pub async fn remediate(
    bmc: &dyn Bmc,
    node_id: &str,
    policy: &FirmwarePolicy,
    fetch: &FetchOptions,
) -> Result<Outcome, RemediationError> {
    let mut run = Run { bmc, node_id, steps: Vec::new() };
    let (found, before) = run.check(policy).await?;
    if before.compliant {
        return Ok(run.end(Code::Compliant, None, before, None));
    }
    let drifted: Vec<String> = before.components.iter().filter(|c| c.drift).map(|c| c.component.clone()).collect();
    if policy.firmware_remediation == FirmwareRemediation::Quarantine {
        let reason = format!(
            "firmware drift ({}) and the pool's firmwareRemediation is quarantine: nothing was written",
            baseline::drift_lines(&before).join("; ")
        );
        return Ok(run.end(Code::FirmwareDrift, Some(reason), before, None));
    }
    let missing: Vec<&str> =
        drifted.iter().filter(|c| !policy.firmware_images.contains_key(*c)).map(String::as_str).collect();
    if !missing.is_empty() {
        let reason = format!("no firmware image for {}: nothing was written", missing.join(", "));
        return Ok(run.end(Code::NoImage, Some(reason), before, None));
    }
    let mut plan = Vec::new();
    for component in &drifted {
        match found.update_target(component) {
            Some(target) => plan.push((component.as_str(), target, &policy.firmware_images[component])),
            None => {
                let reason = format!("the BMC lists nowhere to update {component}: nothing was written");
                return Ok(run.end(Code::NoUpdateTarget, Some(reason), before, None));
            }
        }
    }

    // Every image is fetched and checked before anything reaches the BMC.
    let mut images: Vec<Image> = Vec::new();
    for (component, _, source) in &plan {
        match image::fetch(&source.url, &source.sha256, fetch).await {
            Ok(image) => {
                let trust = if fetch.ca_pem.is_some() || source.url.starts_with("http:") {
                    ""
                } else {
                    "; TLS unverified, integrity from the pinned SHA-256"
                };
                let detail =
                    format!("{}: {} bytes, SHA-256 {} matches{trust}", source.url, image.bytes.len(), source.sha256);
                run.step("download", Some(component), true, detail);
                images.push(image);
            }
            Err(e) => {
                run.step("download", Some(component), false, e.to_string());
                let code = if matches!(e, ImageError::Checksum { .. }) {
                    Code::ImageChecksumMismatch
                } else {
                    Code::ImageDownloadFailed
                };
                return Ok(run.end(code, Some(format!("{component}: {e}; nothing was written")), before, None));
            }
        }
    }

    let mut reset_required = false;
    for ((component, target, source), image) in plan.into_iter().zip(images) {
        let update = FirmwareUpdate {
            target,
            image_url: source.url.clone(),
            image: Some(image.bytes),
            file_name: image.file_name,
        };
        match bmc.update_firmware(&update).await {
            Ok(outcome) => {
                reset_required |= outcome.reset_required;
                let state = outcome.task_state.as_deref().unwrap_or("accepted");
                let reset = if outcome.reset_required { "; the BMC wants a reset to apply it" } else { "" };
                run.step(
                    "update",
                    Some(component),
                    true,
                    format!("{} of {}: {state}{reset}", outcome.method, source.url),
                );
            }
            Err(e) => {
                run.step("update", Some(component), false, e.to_string());
                return Ok(run.end(Code::UpdateFailed, Some(format!("{component}: {e}")), before, None));
            }
        }
    }
    if reset_required {
        match bmc.power(PowerAction::Cycle).await {
            Ok(outcome) => run.step("power-cycle", None, true, format!("sent {}", outcome.sent.join(", "))),
            Err(e) => {
                run.step("power-cycle", None, false, e.to_string());
                return Ok(run.end(Code::BmcFailed, Some(format!("power cycle to apply firmware: {e}")), before, None));
            }
        }
    }

    let after = match run.check(policy).await {
        Ok((_, after)) => after,
        Err(e) => return Ok(run.end(Code::BmcFailed, Some(format!("check after the reflash: {e}")), before, None)),
    };
    if after.compliant {
        Ok(run.end(Code::Reflashed, None, before, Some(after)))
    } else {
        let reason = format!("drift survived the reflash: {}", baseline::drift_lines(&after).join("; "));
        Ok(run.end(Code::DriftSurvivedReflash, Some(reason), before, Some(after)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_serialize_as_written() {
        for code in [
            Code::Compliant,
            Code::Reflashed,
            Code::FirmwareDrift,
            Code::NoImage,
            Code::NoUpdateTarget,
            Code::ImageDownloadFailed,
            Code::ImageChecksumMismatch,
            Code::UpdateFailed,
            Code::BmcFailed,
            Code::DriftSurvivedReflash,
        ] {
            assert_eq!(serde_json::to_value(code).unwrap(), code.as_str());
            assert_eq!(code.passed(), matches!(code, Code::Compliant | Code::Reflashed));
        }
    }

    #[test]
    fn a_pool_policy_reads_as_a_firmware_policy() {
        let policy: FirmwarePolicy = serde_json::from_value(serde_json::json!({
            "tenantRoot": true,
            "firmwareBaseline": {"bios": "2.4.1"},
            "firmwareRemediation": "reflash",
            "firmwareImages": {"bios": {"url": "https://fw/bios.bin", "sha256": "ab"}}
        }))
        .unwrap();
        assert_eq!(policy.firmware_remediation, FirmwareRemediation::Reflash);
        assert_eq!(policy.firmware_images["bios"].url, "https://fw/bios.bin");
        let default: FirmwarePolicy = serde_json::from_value(serde_json::json!({})).unwrap();
        assert_eq!(default.firmware_remediation, FirmwareRemediation::Quarantine, "quarantine is the default");
    }
}
