//! Firmware inventory out of band, through the BMC, with components named the way the
//! in-band inventory names them (`bmc`, `bios`, ...) so one baseline serves both. Items the
//! naming does not recognise keep the BMC's id as `redfish:<Id>`.

use metal_bmc::Bmc;
use metal_bmc::model::FirmwareComponent;
use metal_protocol::firmware::FirmwareVersion;

/// The common name of a BMC firmware inventory item.
pub fn component_name(item: &FirmwareComponent) -> String {
    let text = format!("{} {}", item.id, item.name).to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| text.contains(w));
    if has(&["bmc", "idrac", "ilo", "manager"]) {
        "bmc".into()
    } else if has(&["bios", "system rom", "uefi"]) {
        "bios".into()
    } else {
        format!("redfish:{}", item.id)
    }
}

/// Everything the BMC reports: its firmware inventory, plus the BIOS version from the
/// system and the BMC's own version from its manager when the inventory lacks them.
pub async fn out_of_band(bmc: &dyn Bmc) -> metal_bmc::BmcResult<Vec<FirmwareVersion>> {
    let model = bmc.read_model().await?;
    let source = bmc.protocol();
    let version = |component: String, version: String| FirmwareVersion { component, version, source: source.into() };
    let mut out: Vec<FirmwareVersion> = model
        .firmware
        .present()
        .into_iter()
        .flatten()
        .filter(|c| !c.version.is_empty())
        .map(|c| version(component_name(c), c.version.clone()))
        .collect();
    if let Some(identity) = model.identity.present() {
        for (component, found) in [("bios", &identity.bios_version), ("bmc", &identity.bmc_version)] {
            if let Some(found) = found
                && !out.iter().any(|v| v.component == component)
            {
                out.push(version(component.into(), found.clone()));
            }
        }
    }
    out.sort_by(|a, b| a.component.cmp(&b.component));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(id: &str, name: &str) -> FirmwareComponent {
        FirmwareComponent { id: id.into(), name: name.into(), version: "1".into(), updateable: None }
    }

    #[test]
    fn inventory_items_get_common_names() {
        assert_eq!(component_name(&item("BMC", "Manager firmware")), "bmc");
        assert_eq!(component_name(&item("iDRAC.Embedded.1", "Integrated Dell Remote Access Controller")), "bmc");
        assert_eq!(component_name(&item("BIOS", "System BIOS")), "bios");
        assert_eq!(component_name(&item("Installed-0-2.10.2", "BIOS")), "bios");
        assert_eq!(component_name(&item("NIC.Slot.1-1", "Mellanox ConnectX-6")), "redfish:NIC.Slot.1-1");
    }
}
