//! LLDP (IEEE 802.1AB): the neighbour a switch announces on a link, parsed from the raw
//! Ethernet frame the ramdisk reads during commissioning. It tells the scheduler which switch
//! port each NIC is cabled to (chassis id or system name, and port id). Pure and bounded:
//! a frame is at most a few hundred bytes, every length is checked, and anything malformed
//! is an error, never a panic (the fuzz target feeds it arbitrary bytes).

use serde::{Deserialize, Serialize};

/// The LLDP EtherType.
pub const ETHERTYPE: u16 = 0x88cc;

/// What the switch said about the link's other end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LldpNeighbor {
    /// The chassis id, rendered (a MAC as `aa:bb:..`, an address as text, else the bytes as text).
    pub chassis_id: String,
    /// The port id, rendered the same way.
    pub port_id: String,
    /// Its subtype: `interface-name`, `local`, `mac`, ... (an interface name or local id names
    /// the port as the switch does; a MAC does not).
    pub port_id_subtype: String,
    /// The port description TLV, when sent (often the interface name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port_description: Option<String>,
    /// The system name TLV, when sent (the switch's host name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_name: Option<String>,
}

impl LldpNeighbor {
    /// The port as the switch names it: the port id when it is a name (interface name,
    /// alias, local), else the port description.
    pub fn port_name(&self) -> Option<&str> {
        match self.port_id_subtype.as_str() {
            "interface-name" | "interface-alias" | "local" => Some(&self.port_id),
            _ => self.port_description.as_deref(),
        }
    }
}

/// Why a frame is not an LLDPDU metal can read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LldpError {
    /// Shorter than an Ethernet header, or a TLV runs past the end.
    #[error("truncated at byte {0}")]
    Truncated(usize),
    /// Not EtherType 0x88cc.
    #[error("EtherType {0:#06x} is not LLDP")]
    NotLldp(u16),
    /// The first three TLVs are not chassis id, port id and TTL.
    #[error("TLV {0} missing or out of order (chassis id, port id, TTL come first)")]
    Mandatory(&'static str),
    /// A chassis or port id with no subtype or no value.
    #[error("an empty {0}")]
    Empty(&'static str),
    /// TTL 0: the sender is shutting LLDP down on the link ("forget me"), not a neighbour.
    #[error("a shutdown LLDPDU (TTL 0)")]
    Shutdown,
}

fn mac(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).trim_matches(char::from(0)).trim().to_owned()
}

fn address(bytes: &[u8]) -> String {
    match bytes {
        [1, a, b, c, d] => std::net::Ipv4Addr::new(*a, *b, *c, *d).to_string(),
        [2, rest @ ..] if rest.len() == 16 => {
            std::net::Ipv6Addr::from(<[u8; 16]>::try_from(rest).unwrap_or([0; 16])).to_string()
        }
        _ => mac(bytes),
    }
}

/// An id TLV's value: its subtype's name and the rendered value.
fn id(value: &[u8], what: &'static str, mac_subtype: u8, address_subtype: u8) -> Result<(String, String), LldpError> {
    let (&subtype, rest) = value.split_first().ok_or(LldpError::Empty(what))?;
    if rest.is_empty() {
        return Err(LldpError::Empty(what));
    }
    let rendered = if subtype == mac_subtype && rest.len() == 6 {
        mac(rest)
    } else if subtype == address_subtype {
        address(rest)
    } else {
        text(rest)
    };
    // Chassis ids number their subtypes differently from port ids (802.1AB tables 8-2, 8-3).
    let name = match (what, subtype) {
        ("chassis id", 1) => "chassis-component",
        ("chassis id", 2) | ("port id", 1) => "interface-alias",
        ("chassis id", 3) | ("port id", 2) => "port-component",
        ("chassis id", 4) | ("port id", 3) => "mac",
        ("chassis id", 5) | ("port id", 4) => "network-address",
        ("chassis id", 6) | ("port id", 5) => "interface-name",
        ("port id", 6) => "agent-circuit-id",
        (_, 7) => "local",
        _ => "reserved",
    };
    Ok((name.to_owned(), rendered))
}

/// Parses an Ethernet frame (an 802.1Q tag allowed) holding an LLDPDU.
pub fn parse(frame: &[u8]) -> Result<LldpNeighbor, LldpError> {
    let u16_at = |at: usize| -> Result<u16, LldpError> {
        frame.get(at..at + 2).map(|b| u16::from_be_bytes([b[0], b[1]])).ok_or(LldpError::Truncated(at))
    };
    let mut at = 12;
    let mut ethertype = u16_at(at)?;
    if ethertype == 0x8100 {
        at += 4;
        ethertype = u16_at(at)?;
    }
    if ethertype != ETHERTYPE {
        return Err(LldpError::NotLldp(ethertype));
    }
    at += 2;
    let (mut chassis, mut port, mut ttl) = (None, None, false);
    let (mut port_description, mut system_name) = (None, None);
    for index in 0.. {
        let header = u16_at(at)?;
        let (kind, len) = (header >> 9, usize::from(header & 0x1ff));
        let value = frame.get(at + 2..at + 2 + len).ok_or(LldpError::Truncated(at + 2))?;
        at += 2 + len;
        match (index, kind) {
            (0, 1) => chassis = Some(id(value, "chassis id", 4, 5)?),
            (0, _) => return Err(LldpError::Mandatory("chassis id")),
            (1, 2) => port = Some(id(value, "port id", 3, 4)?),
            (1, _) => return Err(LldpError::Mandatory("port id")),
            (2, 3) if value.len() >= 2 && value[..2] == [0, 0] => return Err(LldpError::Shutdown),
            (2, 3) => ttl = true,
            (2, _) => return Err(LldpError::Mandatory("TTL")),
            (_, 0) => break,
            (_, 4) => port_description = Some(text(value)).filter(|t| !t.is_empty()),
            (_, 5) => system_name = Some(text(value)).filter(|t| !t.is_empty()),
            _ => {}
        }
    }
    let ((_, chassis_id), (port_id_subtype, port_id)) = match (chassis, port, ttl) {
        (Some(chassis), Some(port), true) => (chassis, port),
        _ => return Err(LldpError::Mandatory("TTL")),
    };
    Ok(LldpNeighbor { chassis_id, port_id, port_id_subtype, port_description, system_name })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame lldpd 1.0.16 (Debian 12) sent on a veth (`lldp-sw`): chassis id a MAC, port
    /// id the interface's MAC (lldpd's default subtype), system name `vm`, port description
    /// `lldp-sw`, then the management address, capabilities and 802.3 TLVs.
    const LLDPD_FRAME: &str = "0180c200000e8e078bd9d86188cc0207048e078bd9d8610407038e078bd9d861060200780a02766d0c5644656269616e20474e552f4c696e75782031322028626f6f6b776f726d29204c696e757820362e31382e34342d66632d763131343720233120534d5020505245454d50545f44594e414d4943204030207838365f36340e04009c008010181102fe800000000000008c078bfffed9d86102000000090008076c6c64702d7377fe0900120f030100000000fe0900120f0100800000360000";

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn a_frame_lldpd_sent_names_its_chassis_port_and_system() {
        let neighbor = parse(&unhex(LLDPD_FRAME)).unwrap();
        assert_eq!(neighbor.chassis_id, "8e:07:8b:d9:d8:61");
        assert_eq!((neighbor.port_id.as_str(), neighbor.port_id_subtype.as_str()), ("8e:07:8b:d9:d8:61", "mac"));
        assert_eq!(neighbor.system_name.as_deref(), Some("vm"));
        assert_eq!(neighbor.port_description.as_deref(), Some("lldp-sw"));
        assert_eq!(neighbor.port_name(), Some("lldp-sw"), "a MAC port id: the description names the port");
    }

    #[test]
    fn every_cut_or_damaged_frame_is_an_error_not_a_panic() {
        let frame = unhex(LLDPD_FRAME);
        for len in 0..frame.len() {
            let _ = parse(&frame[..len]);
        }
        let mut other = frame.clone();
        other[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
        assert_eq!(parse(&other), Err(LldpError::NotLldp(0x0800)));
        let mut swapped = frame.clone();
        swapped[14] = 0x04; // the first TLV claims to be a port id
        assert_eq!(parse(&swapped), Err(LldpError::Mandatory("chassis id")));
        assert!(matches!(parse(&frame[..20]), Err(LldpError::Truncated(_))));
        let mut shutdown = frame.clone();
        shutdown[34..36].copy_from_slice(&[0, 0]); // the TTL's value
        assert_eq!(parse(&shutdown), Err(LldpError::Shutdown));
    }

    #[test]
    fn an_interface_name_port_id_is_the_port_and_a_tagged_frame_is_read() {
        let mut frame = unhex("0180c200000e020000000001");
        frame.extend([0x81, 0x00, 0x00, 0x0a, 0x88, 0xcc]);
        frame.extend([0x02, 0x07, 0x04, 0x02, 0, 0, 0, 0, 2]); // chassis: MAC
        frame.extend([0x04, 0x05, 0x05]);
        frame.extend(b"swp7"); // port: interface name
        frame.extend([0x06, 0x02, 0x00, 0x78, 0x0a, 0x04]);
        frame.extend(b"tor1");
        frame.extend([0x00, 0x00]);
        let neighbor = parse(&frame).unwrap();
        assert_eq!((neighbor.port_name(), neighbor.system_name.as_deref()), (Some("swp7"), Some("tor1")));
        assert_eq!(neighbor.chassis_id, "02:00:00:00:00:02");
    }
}
