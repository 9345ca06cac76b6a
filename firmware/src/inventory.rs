//! Firmware inventory out of band, through the BMC, with components named the way the
//! in-band inventory names them (`bmc`, `bios`, `gpu-vbios`, ...) so one baseline serves
//! both. Items the naming does not recognise keep the BMC's id as `redfish:<Id>`.

use std::collections::BTreeMap;

use metal_bmc::model::FirmwareComponent;
use metal_bmc::{Bmc, UpdateTarget};
use metal_protocol::firmware::FirmwareVersion;

/// The common name of a BMC firmware inventory item.
pub fn component_name(item: &FirmwareComponent) -> String {
    let text = format!("{} {}", item.id, item.name).to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    if has(&["bmc", "idrac", "ilo", "manager"]) {
        "bmc".into()
    } else if has(&["vbios", "gpu"]) {
        "gpu-vbios".into()
    } else if has(&["bios", "system rom", "uefi"]) {
        "bios".into()
    } else {
        format!("redfish:{}", item.id)
    }
}

/// What the BMC reports, and where each component would be updated.
#[derive(Debug, Clone, Default)]
pub struct OutOfBand {
    /// Every version read, sorted by component.
    pub versions: Vec<FirmwareVersion>,
    /// Component name -> the inventory resources that carry it.
    resources: BTreeMap<String, Vec<String>>,
}

impl OutOfBand {
    /// Where an update of `component` goes: the inventory items that carry it; else the
    /// system for `bios` and the manager for `bmc`; else nowhere known.
    pub fn update_target(&self, component: &str) -> Option<UpdateTarget> {
        match self.resources.get(component) {
            Some(paths) if !paths.is_empty() => Some(UpdateTarget::Resources(paths.clone())),
            _ if component == "bios" => Some(UpdateTarget::System),
            _ if component == "bmc" => Some(UpdateTarget::Manager),
            _ => None,
        }
    }
}

/// Everything the BMC reports: its firmware inventory, plus the BIOS version from the
/// system and the BMC's own version from its manager when the inventory lacks them.
pub async fn out_of_band(bmc: &dyn Bmc) -> metal_bmc::BmcResult<OutOfBand> {
    let model = bmc.read_model().await?;
    let source = bmc.protocol();
    let version = |component: String, version: String| FirmwareVersion { component, version, source: source.into() };
    let mut found = OutOfBand::default();
    for item in model.firmware.present().into_iter().flatten().filter(|c| !c.version.is_empty()) {
        let name = component_name(item);
        if let Some(resource) = &item.resource {
            found.resources.entry(name.clone()).or_default().push(resource.clone());
        }
        found.versions.push(version(name, item.version.clone()));
    }
    if let Some(identity) = model.identity.present() {
        for (component, reported) in [("bios", &identity.bios_version), ("bmc", &identity.bmc_version)] {
            if let Some(reported) = reported
                && !found.versions.iter().any(|v| v.component == component)
            {
                found.versions.push(version(component.into(), reported.clone()));
            }
        }
    }
    found.versions.sort_by(|a, b| a.component.cmp(&b.component));
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, name: &str) -> FirmwareComponent {
        FirmwareComponent {
            id: id.into(),
            name: name.into(),
            version: "1".into(),
            updateable: None,
            resource: Some(format!("/redfish/v1/UpdateService/FirmwareInventory/{id}")),
        }
    }

    #[test]
    fn inventory_items_get_common_names() {
        assert_eq!(component_name(&item("BMC", "Manager firmware")), "bmc");
        assert_eq!(component_name(&item("iDRAC.Embedded.1", "Integrated Dell Remote Access Controller")), "bmc");
        assert_eq!(component_name(&item("BIOS", "System BIOS")), "bios");
        assert_eq!(component_name(&item("Installed-0-2.10.2", "BIOS")), "bios");
        assert_eq!(component_name(&item("GPU0", "NVIDIA H100 VBIOS")), "gpu-vbios");
        assert_eq!(component_name(&item("NIC.Slot.1-1", "Mellanox ConnectX-6")), "redfish:NIC.Slot.1-1");
    }

    #[test]
    fn update_targets_prefer_inventory_items() {
        let mut found = OutOfBand::default();
        found.resources.insert("gpu-vbios".into(), vec!["/fw/GPU0".into(), "/fw/GPU1".into()]);
        found.resources.insert("bios".into(), vec!["/fw/BIOS".into()]);
        assert_eq!(
            found.update_target("gpu-vbios"),
            Some(UpdateTarget::Resources(vec!["/fw/GPU0".into(), "/fw/GPU1".into()]))
        );
        assert_eq!(found.update_target("bios"), Some(UpdateTarget::Resources(vec!["/fw/BIOS".into()])));
        assert_eq!(found.update_target("bmc"), Some(UpdateTarget::Manager));
        assert_eq!(OutOfBand::default().update_target("bios"), Some(UpdateTarget::System));
        assert_eq!(found.update_target("nic:0000:01:00.0"), None);
    }
}
