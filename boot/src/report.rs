//! The commissioning report: the inventory, the in-band firmware versions and, when asked
//! for, the four basic tests.

use metal_protocol::inventory::{Cpu, InventoryReport, Tool};

use crate::checks;
use crate::inventory::{self, Roots};

/// Collects everything; `tests` = (memory fraction, disk samples) runs the tests.
pub fn collect(roots: &Roots, node_id: &str, tests: Option<(f64, u64)>) -> InventoryReport {
    let cpuinfo = std::fs::read_to_string(roots.proc.join("cpuinfo")).unwrap_or_default();
    let nics = inventory::nics(roots);
    let firmware_roots =
        metal_firmware::inband::Roots { sys: roots.sys.clone(), proc: roots.proc.clone(), dev: roots.dev.clone() };
    let mut results = Vec::new();
    if let Some((fraction, samples)) = tests {
        let paths = metal_erase::device::SystemPaths {
            sys: roots.sys.clone(),
            dev: roots.dev.clone(),
            proc: roots.proc.clone(),
        };
        let devices = metal_erase::device::discover(&paths).unwrap_or_default();
        results.push(checks::memory(roots, fraction));
        results.push(checks::disks(&devices, samples));
        results.push(checks::nics(&nics));
        results.push(checks::cpus(roots));
    }
    let cpu: Cpu = inventory::cpu(&cpuinfo);
    InventoryReport {
        node_id: node_id.to_owned(),
        collected_at: time::OffsetDateTime::now_utc(),
        cpu,
        memory: inventory::memory(roots),
        disks: inventory::disks(roots),
        nics,
        dmi: inventory::dmi(roots),
        firmware: metal_firmware::inband::read(&firmware_roots),
        tests: results,
        tool: Tool { name: "metal-boot".into(), version: env!("CARGO_PKG_VERSION").into() },
    }
}
