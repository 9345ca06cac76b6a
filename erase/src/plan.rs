//! Which method erases a disk: the strongest the device really supports under a policy,
//! then step by step weaker ones, ending with a software overwrite that always works.
//!
//! Capabilities come from probing the device (capability bits read by `probe`, never the
//! device's word that a command succeeded: emulators accept commands they do not perform).
//! Every method considered and not chosen is kept with the capability that ruled it out, so
//! the report shows the whole decision.

use metal_protocol::wipe::{NistCategory, RejectedMethod, SanitizeMethod, WipePolicy};

/// What a probe learned about a device's firmware erase support. Only the methods of the
/// device's own command set (NVMe, ATA or SCSI) appear; a method in neither list is not a
/// command the device has at all (an ATA command for an NVMe disk, anything for virtio).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// Firmware methods the device advertises, each with the capability that says so.
    pub supported: Vec<(SanitizeMethod, String)>,
    /// Firmware methods ruled out, each with the capability (or probe failure) that rules it out.
    pub unsupported: Vec<(SanitizeMethod, String)>,
}

impl Capabilities {
    /// `Some(Ok(why))` advertised, `Some(Err(why))` ruled out, `None` not a command of this device.
    fn lookup(&self, method: SanitizeMethod) -> Option<Result<&str, &str>> {
        fn find(list: &[(SanitizeMethod, String)], method: SanitizeMethod) -> Option<&str> {
            list.iter().find(|(m, _)| *m == method).map(|(_, why)| why.as_str())
        }
        find(&self.supported, method).map(Ok).or_else(|| find(&self.unsupported, method).map(Err))
    }
}

/// The software overwrite pattern to end the chain with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SoftwarePattern {
    /// Zeros.
    Zeros,
    /// A keyed pseudo-random stream.
    Random,
}

/// Methods to try, in order, and those ruled out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodPlan {
    /// Candidates, strongest first; each one's reason for being a candidate.
    pub candidates: Vec<(SanitizeMethod, String)>,
    /// Methods ruled out before anything ran.
    pub rejected: Vec<RejectedMethod>,
}

/// Purge-class firmware methods, strongest first.
const PURGE_ORDER: [SanitizeMethod; 8] = [
    SanitizeMethod::NvmeSanitizeCrypto,
    SanitizeMethod::NvmeSanitizeBlock,
    SanitizeMethod::NvmeFormatCrypto,
    SanitizeMethod::AtaSanitizeCrypto,
    SanitizeMethod::AtaSanitizeBlock,
    SanitizeMethod::AtaSecurityEraseEnhanced,
    SanitizeMethod::ScsiSanitizeCrypto,
    SanitizeMethod::ScsiSanitizeBlock,
];

/// Clear-class firmware methods (device-side overwrite), strongest first.
const CLEAR_ORDER: [SanitizeMethod; 5] = [
    SanitizeMethod::NvmeSanitizeOverwrite,
    SanitizeMethod::AtaSanitizeOverwrite,
    SanitizeMethod::ScsiSanitizeOverwrite,
    SanitizeMethod::NvmeFormatUserData,
    SanitizeMethod::AtaSecurityErase,
];

/// The NIST SP 800-88 category a method achieves. Conservative: a method counts as Purge
/// only where 800-88 lists it as Purge for the media class; software overwrite, Format NVM
/// user-data erase, normal ATA security erase and discard count as Clear.
pub fn nist_category(method: SanitizeMethod) -> NistCategory {
    use SanitizeMethod::*;
    match method {
        NvmeSanitizeCrypto
        | NvmeSanitizeBlock
        | NvmeSanitizeOverwrite
        | NvmeFormatCrypto
        | AtaSanitizeCrypto
        | AtaSanitizeBlock
        | AtaSanitizeOverwrite
        | AtaSecurityEraseEnhanced
        | ScsiSanitizeCrypto
        | ScsiSanitizeBlock
        | ScsiSanitizeOverwrite => NistCategory::Purge,
        NvmeFormatUserData | AtaSecurityErase | SecureDiscard | Discard | OverwriteZeros | OverwriteRandom => {
            NistCategory::Clear
        }
    }
}

/// A method by its name (`secure-discard`, `discard`, `overwrite-zeros`, `nvme-format-crypto`, ...).
pub fn parse_method(s: &str) -> Result<SanitizeMethod, String> {
    serde_json::from_value(serde_json::Value::String(s.to_owned())).map_err(|_| {
        format!(
            "unknown erase method {s:?} (for example secure-discard, discard, overwrite-zeros, overwrite-random, \
             nvme-format-crypto)"
        )
    })
}

/// Whether a method is carried out by the device (and so needs markers to be verified).
pub fn is_device_method(method: SanitizeMethod) -> bool {
    !matches!(method, SanitizeMethod::OverwriteZeros | SanitizeMethod::OverwriteRandom)
}

fn software(pattern: SoftwarePattern) -> (SanitizeMethod, String) {
    match pattern {
        SoftwarePattern::Zeros => (SanitizeMethod::OverwriteZeros, "software overwrite with zeros (O_DIRECT)".into()),
        SoftwarePattern::Random => {
            (SanitizeMethod::OverwriteRandom, "software overwrite with a keyed pseudo-random stream (O_DIRECT)".into())
        }
    }
}

/// Orders the methods for `policy`, or takes exactly `forced` when the operator named one.
pub fn plan(
    caps: &Capabilities,
    policy: WipePolicy,
    pattern: SoftwarePattern,
    forced: Option<SanitizeMethod>,
) -> MethodPlan {
    if let Some(method) = forced {
        let reason = match method {
            SanitizeMethod::OverwriteZeros => software(SoftwarePattern::Zeros).1,
            SanitizeMethod::OverwriteRandom => software(SoftwarePattern::Random).1,
            _ => format!(
                "named by the operator ({})",
                match caps.lookup(method) {
                    Some(Ok(why)) => why.to_owned(),
                    Some(Err(why)) => format!("not advertised: {why}"),
                    None => "not a command of this device".to_owned(),
                }
            ),
        };
        return MethodPlan { candidates: vec![(method, reason)], rejected: Vec::new() };
    }
    let firmware: Vec<SanitizeMethod> = match policy {
        WipePolicy::Purge => PURGE_ORDER.iter().chain(CLEAR_ORDER.iter()).copied().collect(),
        WipePolicy::Clear => CLEAR_ORDER.to_vec(),
        WipePolicy::Overwrite => Vec::new(),
    };
    let mut candidates = Vec::new();
    let mut rejected = Vec::new();
    for method in firmware {
        match caps.lookup(method) {
            Some(Ok(why)) => {
                candidates.push((method, format!("strongest remaining method the device advertises ({why})")))
            }
            Some(Err(capability)) => rejected.push(RejectedMethod {
                method,
                reason: format!("the device does not support {method:?}"),
                capability: capability.to_owned(),
            }),
            None => {}
        }
    }
    candidates.push(software(pattern));
    MethodPlan { candidates, rejected }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn purge_prefers_crypto_and_falls_back_to_overwrite() {
        let caps = Capabilities {
            supported: vec![
                (SanitizeMethod::NvmeFormatUserData, "OACS.FORMAT=1".into()),
                (SanitizeMethod::NvmeFormatCrypto, "FNA.CRYPTO=1".into()),
            ],
            unsupported: vec![(SanitizeMethod::NvmeSanitizeCrypto, "SANICAP.CES=0".into())],
        };
        let p = plan(&caps, WipePolicy::Purge, SoftwarePattern::Zeros, None);
        let order: Vec<_> = p.candidates.iter().map(|(m, _)| *m).collect();
        assert_eq!(
            order,
            [SanitizeMethod::NvmeFormatCrypto, SanitizeMethod::NvmeFormatUserData, SanitizeMethod::OverwriteZeros]
        );
        let ces = p.rejected.iter().find(|r| r.method == SanitizeMethod::NvmeSanitizeCrypto).unwrap();
        assert_eq!(ces.capability, "SANICAP.CES=0");
        // Only what the probe listed is rejected; other command sets are not this device's.
        assert_eq!(p.rejected.len(), 1);
    }

    #[test]
    fn clear_never_uses_purge_only_methods_and_overwrite_uses_software_only() {
        let caps =
            Capabilities { supported: vec![(SanitizeMethod::NvmeFormatCrypto, "x".into())], unsupported: vec![] };
        let p = plan(&caps, WipePolicy::Clear, SoftwarePattern::Random, None);
        assert_eq!(p.candidates.iter().map(|(m, _)| *m).collect::<Vec<_>>(), [SanitizeMethod::OverwriteRandom]);
        let p = plan(&caps, WipePolicy::Overwrite, SoftwarePattern::Zeros, None);
        assert_eq!(p.candidates.len(), 1);
        assert!(p.rejected.is_empty());
    }

    #[test]
    fn a_forced_method_is_the_only_candidate() {
        let p = plan(
            &Capabilities::default(),
            WipePolicy::Purge,
            SoftwarePattern::Zeros,
            Some(SanitizeMethod::SecureDiscard),
        );
        assert_eq!(p.candidates.len(), 1);
        assert_eq!(p.candidates[0].0, SanitizeMethod::SecureDiscard);
    }

    #[test]
    fn categories_are_conservative() {
        assert_eq!(nist_category(SanitizeMethod::OverwriteZeros), NistCategory::Clear);
        assert_eq!(nist_category(SanitizeMethod::SecureDiscard), NistCategory::Clear);
        assert_eq!(nist_category(SanitizeMethod::NvmeSanitizeCrypto), NistCategory::Purge);
        assert!(!is_device_method(SanitizeMethod::OverwriteRandom));
        assert!(is_device_method(SanitizeMethod::SecureDiscard));
    }
}
