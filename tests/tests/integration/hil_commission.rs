//! metal-boot's commissioning inventory inside the test ramdisk on QEMU: CPUs, memory and
//! the DIMM QEMU describes in SMBIOS, DMI identity from `-smbios`, the disks by the serials
//! QEMU was given and their sizes, the NIC with its MAC and link, and the four basic tests
//! passing (memory pattern, sampled disk reads with the NVMe health log, NIC link, CPUs);
//! and metal-boot as PID 1 (`rdinit=`): mounts, modules, DHCP with route and resolver,
//! the commissioning report on the console and power off (offline: no controller named);
//! and as PID 1 joining a controller and posting the signed report, the token never printed.

use metal_protocol::InventoryReport;
use metal_protocol::inventory::TestKind;
use metal_tests::hil::{Bus, Guest};

#[test]
fn commissioning_inventory_in_the_ramdisk() {
    let dir = tempfile::tempdir().unwrap();
    let (nvme, sata) = (dir.path().join("nvme.img"), dir.path().join("sata.img"));
    std::fs::File::create(&nvme).unwrap().set_len(96 << 20).unwrap();
    std::fs::File::create(&sata).unwrap().set_len(48 << 20).unwrap();
    let console = Guest::new()
        .args(&["-smbios", "type=1,manufacturer=Metal Test,product=HIL-1,serial=HIL-SERIAL-1"])
        .args(&["-netdev", "user,id=n0,restrict=on", "-device", "e1000e,netdev=n0,mac=52:54:00:aa:bb:01"])
        .disk(&Bus::Nvme { serial: "HILNVME01".into() }, &nvme, "unmap")
        .disk(&Bus::Sata { model: "HILSATA".into(), serial: "HILSATA01".into() }, &sata, "unmap")
        .script(
            "ip link set eth0 up; for i in 1 2 3 4 5 6 7 8 9 10; do [ \"$(cat /sys/class/net/eth0/carrier 2>/dev/null)\" = 1 ] && break; sleep 0.5; done\n\
             echo BEGIN inventory; METAL_LOG=warn metal-boot inventory --tests --node hil-1 --memory-fraction 0.05; echo END inventory",
        )
        .run_again_if_stalled();
    assert!(console.finished, "the guest did not power off:\n{}", console.text);
    let json = console.section("inventory").unwrap_or_else(|| panic!("no inventory:\n{}", console.text));
    let report: InventoryReport = serde_json::from_str(&json).unwrap_or_else(|e| panic!("{e}:\n{json}"));
    assert_eq!(report.node_id, "hil-1");
    assert_eq!(report.cpu.threads, 2);
    assert!((400 << 20..=512 << 20).contains(&report.memory.total_bytes), "{:?}", report.memory);
    assert_eq!(report.memory.dimms.iter().map(|d| d.size_bytes).sum::<u64>(), 512 << 20, "{:?}", report.memory.dimms);
    assert_eq!(report.dmi.system_serial.as_deref(), Some("HIL-SERIAL-1"));
    assert_eq!(report.dmi.system_vendor.as_deref(), Some("Metal Test"));
    let disk = |serial: &str| {
        report
            .disks
            .iter()
            .find(|d| d.identity.serial.as_deref() == Some(serial))
            .unwrap_or_else(|| panic!("no {serial}: {:?}", report.disks))
    };
    assert_eq!(disk("HILNVME01").identity.size_bytes, 96 << 20);
    assert_eq!(disk("HILSATA01").identity.size_bytes, 48 << 20);
    assert_eq!(disk("HILSATA01").identity.model.as_deref(), Some("HILSATA"));
    let nic = report.nics.iter().find(|n| n.mac == "52:54:00:aa:bb:01").unwrap_or_else(|| panic!("{:?}", report.nics));
    assert_eq!((nic.driver.as_deref(), nic.link), (Some("e1000e"), true));
    for kind in [TestKind::Memory, TestKind::Disk, TestKind::Nic, TestKind::Cpu] {
        let test = report.tests.iter().find(|t| t.kind == kind).unwrap();
        assert!(test.passed, "{kind:?}: {}", test.details);
    }
    let disk_test = report.tests.iter().find(|t| t.kind == TestKind::Disk).unwrap();
    assert!(disk_test.details.contains("NVMe health: no critical warning"), "{}", disk_test.details);
    assert!(disk_test.details.contains("SMART: no threshold exceeded"), "{}", disk_test.details);
    assert!(report.passed());
}

#[test]
fn metal_boot_as_pid_1_commissions_over_dhcp() {
    let console = Guest::new()
        // Not restricted: slirp then offers a router and a DNS server with the lease.
        .args(&["-netdev", "user,id=n0", "-device", "e1000e,netdev=n0"])
        .append("rdinit=/bin/metal-boot metal.task=commission metal.end=poweroff metal.node=hil-2")
        .run_again_if_stalled();
    assert!(console.finished, "the guest did not power off:\n{}", console.text);
    let text = &console.text;
    assert!(text.contains("metal-boot: PID 1"), "{text}");
    assert!(text.contains("modules loaded"), "{text}");
    // QEMU's user network: DHCP lease, default route and resolver from the event script.
    assert!(text.contains("network up, eth0: address=10.0.2.15/24 router=10.0.2.2 dns=10.0.2.3"), "{text}");
    let json = console.section("inventory-report").unwrap_or_else(|| panic!("no report:\n{text}"));
    let report: InventoryReport = serde_json::from_str(&json).unwrap();
    assert_eq!(report.node_id, "hil-2");
    assert!(report.passed(), "{:?}", report.tests);
    assert!(text.contains("metal-boot: task done") && text.contains("metal-boot: powering off"), "{text}");
}

#[test]
fn metal_boot_joins_the_controller_and_reports_signed() {
    let token = "tok_hil_0123456789abcdef";
    // The guest reaches the host's loopback as 10.0.2.2. (A restricted network with
    // guestfwd would expose only the controller, but QEMU carries every guest connection to
    // a guestfwd address over one host connection, and the report needs a second one.)
    let controller = metal_tests::controller::TestController::start(&[token], 0, &["10.0.2.2"]);
    let netdev = "user,id=n0".to_owned();
    let console = Guest::new()
        .args(&["-netdev", &netdev, "-device", "e1000e,netdev=n0"])
        .append(&format!(
            "rdinit=/bin/metal-boot metal.task=commission metal.end=poweroff metal.controller=https://10.0.2.2:{} metal.token={token} metal.ca={}",
            controller.port,
            controller.fingerprint
        ))
        .run();
    assert!(console.finished, "the guest did not power off:\n{}", console.text);
    let text = &console.text;
    assert!(text.contains("joined the controller as spiffe://site-a/node/node-9/gen/2/ramdisk"), "{text}");
    assert!(text.contains("report sent; accepted: true"), "{text}");
    assert!(!text.contains(token), "the token leaked:\n{text}");
    let state = controller.state.lock().unwrap();
    let (signer, payload_type, payload) = &state.reports[0];
    assert_eq!(payload_type, InventoryReport::PAYLOAD_TYPE);
    assert_eq!((signer.node.as_str(), payload["nodeId"].as_str()), ("node-9", Some("node-9")));
    assert!(state.tokens.is_empty(), "the token was used");
}
