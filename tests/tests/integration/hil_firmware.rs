//! metal-firmware's in-band inventory inside the test ramdisk on QEMU: the BIOS version
//! from DMI (QEMU's SMBIOS type 0), the BMC's firmware revision through /dev/ipmi0 (QEMU's
//! ipmi-bmc-sim on a KCS interface), and the NVMe controller's firmware revision, named as
//! the out-of-band path names them.

use metal_tests::hil::{Bus, Guest};
use serde_json::Value;

#[test]
fn in_band_inventory_in_the_ramdisk() {
    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("nvme.img");
    std::fs::File::create(&disk).unwrap().set_len(64 << 20).unwrap();
    let console = Guest::new()
        .args(&["-smbios", "type=0,version=METAL-BIOS-2.4.1"])
        .args(&["-device", "ipmi-bmc-sim,id=bmc0,fwrev1=1,fwrev2=0x12", "-device", "isa-ipmi-kcs,bmc=bmc0"])
        .args(&["-netdev", "user,id=n0,restrict=on", "-device", "e1000e,netdev=n0"])
        .disk(&Bus::Nvme { serial: "HILNVME01".into() }, &disk, "unmap")
        .script("echo BEGIN inventory; metal-firmware inventory --in-band; echo END inventory")
        .run_again_if_stalled();
    assert!(console.finished, "the guest did not power off:\n{}", console.text);
    let json = console.section("inventory").unwrap_or_else(|| panic!("no inventory:\n{}", console.text));
    let inventory: Value = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}:\n{json}"));
    let find = |component: &str| {
        inventory
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["component"] == component)
            .cloned()
            .unwrap_or_else(|| panic!("no {component} in {inventory:#}\nconsole:\n{}", console.text))
    };
    assert_eq!(
        (find("bios")["version"].as_str(), find("bios")["source"].as_str()),
        (Some("METAL-BIOS-2.4.1"), Some("dmi"))
    );
    assert_eq!((find("bmc")["version"].as_str(), find("bmc")["source"].as_str()), (Some("1.12"), Some("ipmi")));
    let nvme = find("nvme:HILNVME01");
    assert!(!nvme["version"].as_str().unwrap().is_empty(), "{nvme}");
    assert_eq!(console.test_exit(), Some(0));
}
