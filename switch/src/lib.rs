//! Top-of-rack switches behind one [`Switch`] trait: put a port on an access VLAN, and read
//! back which VLAN it is on. The scheduler moves a leased node's ports between the
//! provisioning, cleaning and tenant VLANs with it, as networking-generic-switch does for
//! Ironic. [`ovs`] drives Open vSwitch with `ovs-vsctl`, here or over SSH; netmiko-style
//! drivers (Cisco, Arista, Juniper, SONiC, Cumulus) implement the same trait.
//!
//! The one design decision: a driver never trusts its own write. `set_access_vlan` says
//! only that the switch took the command; callers read the port back with `port` and
//! compare, so a switch that answers another tag is caught where the move is recorded.

pub mod ovs;

/// An 802.1Q VLAN id (1 to 4094).
pub type Vlan = u16;

/// The highest VLAN id a port can carry.
pub const MAX_VLAN: Vlan = 4094;

/// What a switch answered, or why it did not.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SwitchError {
    /// The switch could not be reached (no route, refused, timed out, its database is down).
    #[error("switch {switch} is unreachable: {message}")]
    Unreachable {
        /// The switch.
        switch: String,
        /// What the transport said.
        message: String,
    },
    /// The switch refused the command (an unknown port, a value it does not take).
    #[error("switch {switch} refused: {message}")]
    Refused {
        /// The switch.
        switch: String,
        /// What it said.
        message: String,
    },
    /// The switch answered something the driver cannot read.
    #[error("switch {switch} answered what metal cannot read: {message}")]
    Unreadable {
        /// The switch.
        switch: String,
        /// The answer, or what was wrong with it.
        message: String,
    },
    /// A port name or VLAN that no command is built from (checked before anything is sent).
    #[error("{0}")]
    Invalid(String),
}

/// A switch call's result.
pub type SwitchResult<T> = Result<T, SwitchError>;

/// A port as the switch reads it now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortState {
    /// Its access VLAN (`None`: untagged, no VLAN set).
    pub vlan: Option<Vlan>,
    /// Its VLAN mode as the switch names it (`access`, `trunk`, ...), when it has one.
    pub mode: Option<String>,
}

impl PortState {
    /// Whether the port carries exactly `vlan`, untagged to the machine (access mode).
    pub fn is_access(&self, vlan: Vlan) -> bool {
        self.vlan == Some(vlan) && self.mode.as_deref().is_none_or(|m| m == "access")
    }
}

/// One switch.
#[async_trait::async_trait]
pub trait Switch: Send + Sync {
    /// The driver's name (`ovs`), for logs and evidence.
    fn driver(&self) -> &'static str;

    /// The port as the switch has it now.
    async fn port(&self, port: &str) -> SwitchResult<PortState>;

    /// Puts the port on access VLAN `vlan`. Read it back with [`Switch::port`].
    async fn set_access_vlan(&self, port: &str, vlan: Vlan) -> SwitchResult<()>;
}

/// Checks a port name before it goes into a command (also over SSH, through a remote shell):
/// 1 to 64 of ASCII letters, digits and `._:/-`, not starting with `-`.
pub fn check_port(port: &str) -> SwitchResult<()> {
    let ok = !port.is_empty()
        && port.len() <= 64
        && !port.starts_with('-')
        && port.bytes().all(|b| b.is_ascii_alphanumeric() || b"._:/-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(SwitchError::Invalid(format!(
            "port name {port:?}: 1 to 64 of letters, digits and ._:/- (not starting with -)"
        )))
    }
}

/// Checks a VLAN id: 1 to 4094.
pub fn check_vlan(vlan: Vlan) -> SwitchResult<()> {
    if (1..=MAX_VLAN).contains(&vlan) {
        Ok(())
    } else {
        Err(SwitchError::Invalid(format!("VLAN {vlan}: a VLAN id is 1 to {MAX_VLAN}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_names_that_could_reach_a_shell_are_refused_before_anything_is_sent() {
        for good in ["tap0", "n1-p0", "Ethernet1/12", "swp3.100", "ge-0/0/1:2"] {
            assert_eq!(check_port(good), Ok(()), "{good}");
        }
        for bad in ["", "-tag=5", "p0; reboot", "p0 p1", "$(id)", "p'0", &"x".repeat(65)] {
            assert!(matches!(check_port(bad), Err(SwitchError::Invalid(_))), "{bad:?}");
        }
        assert!(check_vlan(0).is_err() && check_vlan(4095).is_err());
        assert!(check_vlan(1).is_ok() && check_vlan(4094).is_ok());
    }

    #[test]
    fn a_port_is_on_an_access_vlan_only_with_that_tag_and_no_other_mode() {
        let port = |vlan, mode: Option<&str>| PortState { vlan, mode: mode.map(str::to_owned) };
        assert!(port(Some(100), Some("access")).is_access(100));
        assert!(port(Some(100), None).is_access(100), "OVS leaves vlan_mode empty for a tagged access port");
        assert!(!port(Some(100), Some("trunk")).is_access(100));
        assert!(!port(Some(101), Some("access")).is_access(100));
        assert!(!port(None, None).is_access(100));
    }
}
