//! Faults a simulated machine can be told to have, by flag (`--fault n3=refuse-rotation`) or
//! over the simulator's API, each on or off at any moment: a BMC that times out, answers 5xx,
//! lies about power or refuses a password rotation; firmware that drifted from the baseline;
//! a disk that ignores discards (and sanitize commands) or fails reads; a network that loses
//! the ramdisk's reports; a switch that refuses to move the machine's port; BIOS settings
//! that are locked or do not hold; firmware with an implant a TPM measures.

use std::sync::atomic::{AtomicBool, Ordering};

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// The BMC accepts connections and never answers.
    BmcTimeout,
    /// The BMC answers every request with 503.
    BmcUnavailable,
    /// The BMC reports the opposite power state.
    BmcLiesAboutPower,
    /// The BMC refuses a password change.
    RefuseRotation,
    /// The BIOS reports a version other than the pool's baseline, in band and out of band.
    FirmwareDrift,
    /// Discards and sanitize commands are acknowledged and not done.
    IgnoreDiscard,
    /// Every disk read fails with EIO.
    ReadErrors,
    /// The ramdisk joins, and every report it sends after is lost on the network.
    ReportLost,
    /// The switch refuses to move the machine's port to another VLAN.
    SwitchRefuses,
    /// The BIOS settings are locked (a setup password the tenant set): the BMC refuses to
    /// write them or reset them to defaults.
    BiosLocked,
    /// Something below the OS (a tenant's firmware hook) turns turbo off again at every boot,
    /// whatever the BMC wrote for it.
    BiosReverts,
    /// The firmware carries an implant its version string hides: a machine with a TPM
    /// (`--tpm`) measures a firmware volume its baseline does not have into PCR 0.
    FirmwareTampered,
}

impl Fault {
    /// Every fault, in a fixed order.
    pub const ALL: [Fault; 12] = [
        Fault::BmcTimeout,
        Fault::BmcUnavailable,
        Fault::BmcLiesAboutPower,
        Fault::RefuseRotation,
        Fault::FirmwareDrift,
        Fault::IgnoreDiscard,
        Fault::ReadErrors,
        Fault::ReportLost,
        Fault::SwitchRefuses,
        Fault::BiosLocked,
        Fault::BiosReverts,
        Fault::FirmwareTampered,
    ];

    /// The fault's name on the command line and in the API.
    pub fn name(self) -> &'static str {
        match self {
            Fault::BmcTimeout => "bmc-timeout",
            Fault::BmcUnavailable => "bmc-unavailable",
            Fault::BmcLiesAboutPower => "bmc-lies-about-power",
            Fault::RefuseRotation => "refuse-rotation",
            Fault::FirmwareDrift => "firmware-drift",
            Fault::IgnoreDiscard => "ignore-discard",
            Fault::ReadErrors => "read-errors",
            Fault::ReportLost => "report-lost",
            Fault::SwitchRefuses => "switch-refuses",
            Fault::BiosLocked => "bios-locked",
            Fault::BiosReverts => "bios-reverts",
            Fault::FirmwareTampered => "firmware-tampered",
        }
    }

    fn index(self) -> usize {
        Fault::ALL.iter().position(|f| *f == self).unwrap_or(0)
    }
}

impl std::str::FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Fault, String> {
        Fault::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown fault {s:?}; known: {}", Fault::ALL.map(Fault::name).join(", ")))
    }
}

/// The faults one machine has now.
#[derive(Debug, Default)]
pub struct Faults {
    on: [AtomicBool; Fault::ALL.len()],
}

impl Faults {
    /// Turns `fault` on or off.
    pub fn set(&self, fault: Fault, on: bool) {
        self.on[fault.index()].store(on, Ordering::SeqCst);
    }

    /// Whether `fault` is on.
    pub fn has(&self, fault: Fault) -> bool {
        self.on[fault.index()].load(Ordering::SeqCst)
    }

    /// The faults that are on.
    pub fn active(&self) -> Vec<Fault> {
        Fault::ALL.into_iter().filter(|f| self.has(*f)).collect()
    }

    /// Discards and sanitize commands are ignored.
    pub fn disk_ignores_erase(&self) -> bool {
        self.has(Fault::IgnoreDiscard)
    }

    /// Reads fail.
    pub fn disk_read_errors(&self) -> bool {
        self.has(Fault::ReadErrors)
    }
}

/// `NODE=FAULT` from the command line.
pub fn parse_assignment(s: &str) -> Result<(String, Fault), String> {
    let (node, fault) =
        s.split_once('=').ok_or_else(|| format!("{s:?}: expected NODE=FAULT, e.g. n2=refuse-rotation"))?;
    Ok((node.to_owned(), fault.parse()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_by_name_and_switch_on_and_off() {
        for fault in Fault::ALL {
            assert_eq!(fault.name().parse::<Fault>(), Ok(fault));
            assert_eq!(serde_json::to_value(fault).unwrap(), fault.name());
        }
        assert!("melt".parse::<Fault>().unwrap_err().contains("refuse-rotation"));
        assert_eq!(parse_assignment("n2=ignore-discard"), Ok(("n2".into(), Fault::IgnoreDiscard)));
        assert!(parse_assignment("n2").unwrap_err().contains("NODE=FAULT"));
        let faults = Faults::default();
        faults.set(Fault::RefuseRotation, true);
        assert_eq!(faults.active(), [Fault::RefuseRotation]);
        faults.set(Fault::RefuseRotation, false);
        assert!(faults.active().is_empty());
    }
}
