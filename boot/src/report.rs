//! The commissioning report: the inventory, the in-band firmware versions and, when asked
//! for, the four basic tests.

use metal_protocol::inventory::{Cpu, InventoryReport};
use metal_protocol::tool::Tool;

use crate::checks;
use crate::inventory::{self, SystemPaths};

/// Collects everything; `tests` = (memory fraction, disk samples) runs the tests.
pub fn collect(roots: &SystemPaths, node_id: &str, tests: Option<(f64, u64)>) -> InventoryReport {
    let cpuinfo = std::fs::read_to_string(roots.proc.join("cpuinfo")).unwrap_or_default();
    let nics = inventory::nics(roots);
    let mut results = Vec::new();
    if let Some((fraction, samples)) = tests {
        let devices = metal_erase::device::discover(roots).unwrap_or_default();
        results.push(checks::memory(roots, fraction));
        results.push(checks::disks(&devices, samples));
        results.push(checks::nics(&nics));
        results.push(checks::cpus(roots));
    }
    // The kernel's own answer (`kernel.arch`, as `uname -m` gives it); a kernel without that
    // sysctl runs the ramdisk natively, so the binary's own architecture is the machine's.
    let arch = std::fs::read_to_string(roots.proc.join("sys/kernel/arch")).unwrap_or_default();
    let arch = Some(arch.trim()).filter(|a| !a.is_empty()).unwrap_or(std::env::consts::ARCH);
    let cpu: Cpu = inventory::cpu(&cpuinfo, arch);
    InventoryReport {
        node_id: node_id.to_owned(),
        collected_at: metal_clock::now_utc(),
        cpu,
        memory: inventory::memory(roots),
        disks: inventory::disks(roots),
        nics,
        dmi: inventory::dmi(roots),
        firmware: metal_firmware::inband::read(roots),
        tests: results,
        tool: Tool { name: "metal-boot".into(), version: env!("CARGO_PKG_VERSION").into() },
    }
}
