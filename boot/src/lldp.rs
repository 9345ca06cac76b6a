//! LLDP during commissioning: every NIC listens for the LLDPDUs its switch sends (lldpd,
//! a top-of-rack switch's agent), for at most `metal.lldp` seconds, while the rest of the
//! inventory is collected. The first frame a NIC hears names its neighbour (chassis, port,
//! system name); the scheduler maps it to a registered switch and records the node's ports.
//! A NIC that hears nothing, or cannot listen, simply has no neighbour.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use metal_protocol::lldp::LldpNeighbor;

/// Listens on every NIC of `nics` until each heard a neighbour or `wait` passed; the
/// neighbours by NIC name.
pub fn neighbours(nics: &[String], wait: Duration) -> BTreeMap<String, LldpNeighbor> {
    let threads: Vec<_> =
        nics.iter().cloned().map(|nic| std::thread::spawn(move || (neighbour(&nic, wait), nic))).collect();
    threads.into_iter().filter_map(|t| t.join().ok()).filter_map(|(found, nic)| found.map(|n| (nic, n))).collect()
}

/// The first neighbour `nic` hears within `wait`.
pub fn neighbour(nic: &str, wait: Duration) -> Option<LldpNeighbor> {
    let until = Instant::now() + wait;
    let socket = crate::sys::lldp_socket(nic, Duration::from_millis(250)).ok()?;
    let mut buffer = vec![0u8; 1600];
    while Instant::now() < until {
        let Ok(n) = crate::sys::receive(&socket, &mut buffer) else { continue };
        if let Ok(found) = metal_protocol::lldp::parse(&buffer[..n]) {
            return Some(found);
        }
    }
    None
}

/// Starts listening on the NICs of `paths` (every one but `lo`); joined, it gives their
/// neighbours.
pub fn start(
    paths: &metal_protocol::inventory::SystemPaths,
    wait: Duration,
) -> std::thread::JoinHandle<BTreeMap<String, LldpNeighbor>> {
    let nics: Vec<String> = std::fs::read_dir(paths.sys.join("class/net"))
        .map(|entries| entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| n != "lo").collect())
        .unwrap_or_default();
    std::thread::spawn(move || neighbours(&nics, wait))
}
