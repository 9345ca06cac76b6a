//! BIOS settings custody (issue 32): a pool's `biosBaseline` names the attribute values its
//! machines run with. A tenant with root can change them from the running OS (vendor tools
//! write the same settings the BMC shows), and no firmware version says so. The teardown
//! writes back what drifted before the boot that applies it (`reset`) and reads them again
//! after that boot (`verify`): drift that survived quarantines. UEFI Secure Boot's switch
//! (the BMC's `SecureBoot` resource) is kept the same way; the keys it enforces are PCR 7 of
//! a measuring pool's quote.

use std::collections::BTreeMap;

use metal_bmc::{BiosValue, Bmc, BmcError};
use serde::{Deserialize, Serialize};

/// A pool's BIOS baseline (`policy.biosBaseline`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BiosBaseline {
    /// Attribute name to value, typed as the BMC's attribute registry types it (a string, a
    /// number or a boolean): `{"ProcTurboMode": "Enabled", "SriovGlobalEnable": "Enabled"}`.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub attributes: BTreeMap<String, BiosValue>,
    /// UEFI Secure Boot on (true) or off (false), through the BMC's `SecureBoot` resource;
    /// left as it is when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
    /// Attributes of `attributes` a lessee's profile may set (its `bios`), written at the
    /// lease start and reinstall, before the deploy boot; the teardown resets them to the
    /// baseline's values with the rest (NUMA per socket, SR-IOV: workload settings).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tenant_settable: Vec<String>,
    /// Reset every attribute to the vendor's defaults (`Bios.ResetBios`) at each teardown
    /// before writing the baseline's, so attributes the baseline does not name go back too.
    #[serde(default)]
    pub reset_to_defaults: bool,
}

impl BiosBaseline {
    /// The first problem with the baseline, as `(field under biosBaseline, message)`.
    pub fn problem(&self) -> Option<(String, String)> {
        if self.attributes.is_empty() && self.secure_boot.is_none() {
            return Some(("attributes".into(), "name at least one attribute, or secureBoot".into()));
        }
        for (name, value) in &self.attributes {
            if let Some(problem) = name_problem(name) {
                return Some(("attributes".into(), problem));
            }
            if let Some(problem) = value_problem(value) {
                return Some((format!("attributes.{name}"), problem.into()));
            }
        }
        self.tenant_settable.iter().find(|name| !self.attributes.contains_key(*name)).map(|name| {
            let why =
                format!("{name} is not in attributes: the teardown resets what a tenant set to the baseline's value");
            ("tenantSettable".into(), why)
        })
    }
}

/// What is wrong with an attribute's name (a profile's `bios` too), if anything.
pub fn name_problem(name: &str) -> Option<String> {
    let named = !name.is_empty()
        && name.len() <= 128
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    (!named).then(|| format!("attribute {name:?} must be 1 to 128 of A-Z a-z 0-9 _ - . :"))
}

/// What is wrong with an attribute's value, if anything: only scalars are set.
pub fn value_problem(value: &BiosValue) -> Option<&'static str> {
    let scalar = value.is_string() || value.is_number() || value.is_boolean();
    (!scalar).then_some("must be a string, a number or a boolean")
}

/// One attribute whose value is not the baseline's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AttributeDrift {
    /// The attribute.
    pub attribute: String,
    /// Its value now (none: the BMC does not show it).
    pub found: Option<BiosValue>,
    /// The baseline's.
    pub wanted: BiosValue,
}

impl std::fmt::Display for AttributeDrift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.found {
            Some(found) => write!(f, "{} is {found}, the baseline wants {}", self.attribute, self.wanted),
            None => write!(f, "{} is not shown by the BMC, the baseline wants {}", self.attribute, self.wanted),
        }
    }
}

/// The baseline's attributes whose current value differs, in name order.
pub fn drift(baseline: &BiosBaseline, current: &BTreeMap<String, BiosValue>) -> Vec<AttributeDrift> {
    baseline
        .attributes
        .iter()
        .filter(|(name, wanted)| current.get(*name) != Some(wanted))
        .map(|(name, wanted)| AttributeDrift {
            attribute: name.clone(),
            found: current.get(name).cloned(),
            wanted: wanted.clone(),
        })
        .collect()
}

/// What `reset` found and wrote: the evidence of the teardown's `bios-reset` step.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BiosReset {
    /// Each baseline attribute as found (before anything was written).
    pub found: BTreeMap<String, BiosValue>,
    /// The attributes that differed.
    pub drifted: Vec<AttributeDrift>,
    /// Whether the vendor's defaults were asked for first.
    pub reset_to_defaults: bool,
    /// What was written for the next boot (none when nothing drifted and no reset was asked).
    pub set: BTreeMap<String, BiosValue>,
    /// The attribute registry the BMC names.
    pub registry: Option<String>,
    /// Secure Boot as found, when the baseline names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
    /// Secure Boot as written for the next boot, when it differed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure_boot_set: Option<bool>,
}

/// The drift entry of Secure Boot (named as Redfish names its switch).
fn secure_boot_drift(found: bool, wanted: bool) -> Option<AttributeDrift> {
    (found != wanted).then(|| AttributeDrift {
        attribute: SECURE_BOOT.into(),
        found: Some(found.into()),
        wanted: wanted.into(),
    })
}

/// How Secure Boot's switch is named in drift.
pub const SECURE_BOOT: &str = "SecureBootEnable";

/// Why BIOS custody could not go on.
#[derive(Debug, thiserror::Error)]
pub enum BiosError {
    /// The baseline names attributes the BMC does not have (a wrong name or another machine).
    #[error("the BMC has no BIOS attribute {} (registry {})", .names.join(", "), .registry.as_deref().unwrap_or("unnamed"))]
    Unknown {
        /// The attributes it lacks.
        names: Vec<String>,
        /// The registry it names.
        registry: Option<String>,
    },
    /// The BMC failed or refused.
    #[error(transparent)]
    Bmc(#[from] BmcError),
}

/// Reads the BIOS attributes and writes, for the next boot, those that drifted from the
/// baseline (every baseline attribute after the vendor's defaults, with
/// `resetToDefaults`). Writing what is already pending again is harmless, so a teardown that
/// crashed half-way runs this again.
pub async fn reset(bmc: &dyn Bmc, baseline: &BiosBaseline) -> Result<BiosReset, BiosError> {
    let mut reset = BiosReset {
        found: BTreeMap::new(),
        drifted: Vec::new(),
        reset_to_defaults: baseline.reset_to_defaults,
        set: BTreeMap::new(),
        registry: None,
        secure_boot: None,
        secure_boot_set: None,
    };
    if !baseline.attributes.is_empty() || baseline.reset_to_defaults {
        let settings = bmc.bios().await?;
        let unknown: Vec<String> =
            baseline.attributes.keys().filter(|name| !settings.current.contains_key(*name)).cloned().collect();
        if !unknown.is_empty() {
            return Err(BiosError::Unknown { names: unknown, registry: settings.registry });
        }
        reset.found = baseline.attributes.keys().map(|name| (name.clone(), settings.current[name].clone())).collect();
        reset.drifted = drift(baseline, &settings.current);
        reset.set = if baseline.reset_to_defaults {
            bmc.reset_bios().await?;
            baseline.attributes.clone()
        } else {
            reset.drifted.iter().map(|d| (d.attribute.clone(), d.wanted.clone())).collect()
        };
        if !reset.set.is_empty() {
            bmc.set_bios(&reset.set).await?;
        }
        reset.registry = settings.registry;
    }
    if let Some(wanted) = baseline.secure_boot {
        let found = bmc.secure_boot().await?.enabled;
        reset.secure_boot = Some(found);
        if let Some(drift) = secure_boot_drift(found, wanted) {
            bmc.set_secure_boot(wanted).await?;
            reset.secure_boot_set = Some(wanted);
            reset.drifted.push(drift);
        }
    }
    tracing::info!(
        drifted = reset.drifted.len(),
        written = reset.set.len(),
        reset = baseline.reset_to_defaults,
        secure_boot = ?reset.secure_boot_set,
        "BIOS baseline written"
    );
    Ok(reset)
}

/// The BIOS attributes after the boot that applied `reset`'s writes: the drift that is
/// left (empty when every baseline attribute holds) and what the BMC still holds pending.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BiosCheck {
    /// Each baseline attribute as it reads now.
    pub found: BTreeMap<String, BiosValue>,
    /// What still differs.
    pub drifted: Vec<AttributeDrift>,
    /// Writes of baseline attributes the BMC holds for a boot still to come (a BMC that did
    /// not apply them).
    pub pending: BTreeMap<String, BiosValue>,
    /// Secure Boot now, when the baseline names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<metal_bmc::SecureBootState>,
}

/// Reads the BIOS attributes against the baseline.
pub async fn verify(bmc: &dyn Bmc, baseline: &BiosBaseline) -> Result<BiosCheck, BmcError> {
    let mut check =
        BiosCheck { found: BTreeMap::new(), drifted: Vec::new(), pending: BTreeMap::new(), secure_boot: None };
    if !baseline.attributes.is_empty() {
        let settings = bmc.bios().await?;
        check.found =
            baseline.attributes.keys().filter_map(|n| Some((n.clone(), settings.current.get(n)?.clone()))).collect();
        check.drifted = drift(baseline, &settings.current);
        // Only the baseline's: another pending attribute may be a password a BMC echoes.
        check.pending =
            settings.pending.into_iter().filter(|(name, _)| baseline.attributes.contains_key(name)).collect();
    }
    if let Some(wanted) = baseline.secure_boot {
        let state = bmc.secure_boot().await?;
        check.drifted.extend(secure_boot_drift(state.enabled, wanted));
        // The switch says what the next boot does; the last boot's own state, where the BMC
        // shows it, says whether the firmware took it.
        let booted = state.current_boot.as_deref().map(|c| c == "Enabled");
        if state.enabled == wanted && booted.is_some_and(|b| b != wanted) {
            let shown = |on: bool| BiosValue::from(if on { "Enabled" } else { "Disabled" });
            check.drifted.push(AttributeDrift {
                attribute: "SecureBootCurrentBoot".into(),
                found: state.current_boot.clone().map(BiosValue::from),
                wanted: shown(wanted),
            });
        }
        check.secure_boot = Some(state);
    }
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn baseline(attributes: serde_json::Value) -> BiosBaseline {
        serde_json::from_value(json!({"attributes": attributes})).unwrap()
    }

    #[test]
    fn drift_names_each_attribute_that_differs_or_is_missing() {
        let b = baseline(json!({"ProcTurboMode": "Enabled", "ProcCoreDisable": 0, "SriovGlobalEnable": "Enabled"}));
        let current = [
            ("ProcTurboMode".to_owned(), json!("Disabled")),
            ("ProcCoreDisable".to_owned(), json!(0)),
            ("BootMode".to_owned(), json!("Uefi")),
        ]
        .into();
        let found: Vec<String> = drift(&b, &current).iter().map(ToString::to_string).collect();
        assert_eq!(
            found,
            [
                r#"ProcTurboMode is "Disabled", the baseline wants "Enabled""#,
                r#"SriovGlobalEnable is not shown by the BMC, the baseline wants "Enabled""#
            ]
        );
        // A number is not its string: the registry types each attribute.
        let typed = [("ProcCoreDisable".to_owned(), json!("0"))].into();
        assert_eq!(drift(&baseline(json!({"ProcCoreDisable": 0})), &typed).len(), 1);
    }

    #[test]
    fn a_baseline_names_scalar_attributes() {
        assert_eq!(baseline(json!({"ProcTurboMode": "Enabled", "Cores": 4, "Quiet": true})).problem(), None);
        let (field, message) = baseline(json!({})).problem().unwrap();
        assert_eq!((field.as_str(), message.as_str()), ("attributes", "name at least one attribute, or secureBoot"));
        let secure_only = serde_json::from_value::<BiosBaseline>(json!({"secureBoot": true})).unwrap();
        assert_eq!(secure_only.problem(), None);
        let (field, _) = baseline(json!({"Boot Order": "x"})).problem().unwrap();
        assert_eq!(field, "attributes");
        let (field, message) = baseline(json!({"BootOrder": ["Pxe"]})).problem().unwrap();
        assert_eq!(
            (field.as_str(), message.as_str()),
            ("attributes.BootOrder", "must be a string, a number or a boolean")
        );
        let settable = serde_json::from_value::<BiosBaseline>(json!({"attributes": {"A": 1}, "tenantSettable": ["B"]}));
        let (field, _) = settable.unwrap().problem().unwrap();
        assert_eq!(field, "tenantSettable");
        let unknown = serde_json::from_value::<BiosBaseline>(json!({"attributes": {"A": 1}, "reset": true}));
        assert!(unknown.unwrap_err().to_string().contains("unknown field `reset`"));
    }
}
