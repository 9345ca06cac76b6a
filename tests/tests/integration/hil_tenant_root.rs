//! A dedicated-root lease on a QEMU machine behind ipmi_sim, and on a libvirt machine behind
//! sushy-tools (with a Redfish AccountService), from reservation to a clean,
//! re-identified machine with no hand on the node: the machine commissions through PXE; a
//! node binding is reserved; the lease starts, the BMC network-boots the machine, the real
//! ramdisk deploys the lessee's profile (an imported image, served by the controller) and
//! the deployed disk boots (on the IPMI machine the test OS, Debian with cloud-init, which
//! joins as a `node-tenant` host whose inventory stays advisory, and which the teardown's
//! clean-up removes); the release runs the whole teardown through the BMC (power off,
//! fence_ipmilan, the password rotated, the firmware baseline out of band), the ramdisk
//! checks the firmware in band and erases the disk, and the node is `ready` one identity
//! generation after its lease's last, with its evidence record and the meter rows. While
//! leased, the lessee's token power-cycles the machine and its OS boots again; on the IPMI
//! machine the lessee reads that boot on the serial console over the WebSocket, reaches
//! the login prompt over the console SSH gateway with its profile's key, and reinstalls the
//! machine with version 2 of its profile: deployed again under the next identity
//! generation, the new OS joins as that generation's host.

use std::time::{Duration, Instant};

use metal_tests::emulators::{SUSHY_PASSWORD, Sushy};
use metal_tests::hil::{BootFrom, Bus, DISK_MARKER, Guest, MIB, filled, tftp_dir};
use metal_tests::scheduler::{Admin as _, TestScheduler};
use serde_json::{Value, json};

fn ok(s: &TestScheduler, method: &str, path: &str, body: Value) -> Value {
    let (status, answer) = s.call(method, path, Some(body));
    assert!((200..300).contains(&status), "{method} {path}: {status} {answer}");
    answer
}

/// Runs both sides' passes, the service's clock following the real one, until `done` holds
/// for the node (or `timeout`); returns the node.
fn drive(s: &TestScheduler, what: &str, timeout: Duration, done: impl Fn(&TestScheduler, &Value) -> bool) -> Value {
    let deadline = Instant::now() + timeout;
    loop {
        s.passes_on_real_time();
        let node = s.node("hil-tr");
        if done(s, &node) {
            return node;
        }
        if Instant::now() > deadline {
            let runs = s.block_on(s.app.store.read(|tx| metal_store::workflows::for_node(tx, "hil-tr", "")));
            let last = runs.ok().and_then(|r| r.last().cloned());
            let step = last.as_ref().map(|r| (r.current().map(|c| c.name.clone()), r.last_error.clone()));
            panic!("{what}: the node is still {node}\nits workflow is at {step:?}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The lessee's OS boots from its disk and joins: a `node-tenant` host of identity
/// generation `generation` (the lease's, or its reinstall's), whose inventory reports are
/// kept as advisory.
fn tenant_os_joins(s: &TestScheduler, generation: i64, console: &dyn Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(600);
    let host = loop {
        let (status, host) = s.call("GET", "/v1/hosts/hil-tr", None);
        if status == 200 && host["state"] != "joining" {
            break host;
        }
        assert!(Instant::now() < deadline, "the lessee's OS did not join:\n{}", console());
        std::thread::sleep(Duration::from_secs(1));
    };
    assert_eq!(
        (&host["state"], &host["role"], &host["identityGeneration"]),
        (&json!("joined"), &json!("node-tenant"), &json!(generation)),
        "{host}"
    );
    let signer = format!("spiffe://{}/node/hil-tr/gen/{generation}/node-tenant", s.ca().certificate().site());
    let deadline = Instant::now() + Duration::from_secs(180);
    while !s.events("node.inventory.changed").iter().any(|e| e["data"]["signer"] == signer) {
        assert!(Instant::now() < deadline, "the lessee's agent reported nothing:\n{}", console());
        std::thread::sleep(Duration::from_secs(1));
    }
    let reports = s.events("node.inventory.changed");
    let report = reports.iter().rev().find(|e| e["data"]["signer"] == signer).unwrap();
    assert_eq!(report["data"]["advisory"], true, "{report}");
}

fn power(s: &TestScheduler) -> String {
    let (status, power) = s.call("GET", "/v1/nodes/hil-tr/power", None);
    assert_eq!(status, 200, "{power}");
    power["power"].as_str().unwrap().to_owned()
}

/// The machine under test and the BMC in front of it.
enum Machine {
    /// QEMU started and stopped by ipmi_sim's chassis program, with an in-band BMC whose
    /// firmware revision is ipmi_sim's (9.08).
    Ipmi { bmc: metal_tests::emulators::IpmiSim, console: std::path::PathBuf },
    /// A libvirt domain behind sushy-tools with an AccountService; its SMBIOS BIOS version is
    /// the one sushy reports.
    Redfish { domain: metal_tests::emulators::LibvirtDomain, sushy: Sushy },
}

impl Machine {
    fn console(&self) -> String {
        match self {
            Machine::Ipmi { console, .. } => std::fs::read_to_string(console).unwrap_or_default(),
            Machine::Redfish { domain, .. } => domain.console(),
        }
    }

    /// The BMC spec, the pool's baseline and what the chassis did.
    fn spec(&self) -> (Value, Value) {
        match self {
            Machine::Ipmi { bmc, .. } => (
                json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", bmc.port), "username": "admin", "password": "password"}),
                json!({"bmc": "9.08"}),
            ),
            Machine::Redfish { sushy, .. } => (
                json!({"protocol": "redfish", "address": sushy.endpoint, "username": "admin", "password": SUSHY_PASSWORD,
                       "tls": {"mode": "fingerprint", "value": sushy.pki.fingerprint}}),
                json!({"bios": "1.0.0"}),
            ),
        }
    }

    fn chassis(&self) -> String {
        match self {
            Machine::Ipmi { bmc, .. } => bmc.chassis_log(),
            Machine::Redfish { domain, .. } => domain.state(),
        }
    }
}

/// The lessee's hands on its running machine: its token power-cycles it through the BMC
/// and the OS boots again; on the IPMI machine the boot shows on the serial console the
/// lessee opened over the WebSocket, and its key lands on the login prompt over SSH.
/// Returns the lessee's token.
fn lessee_hands(s: &TestScheduler, machine: &Machine, reservation: &str, key: &std::path::Path) -> String {
    let member = ok(s, "POST", "/v1/credentials", json!({"role": "tenant-member", "tenantId": "acme", "name": "ops"}));
    let token = member["token"].as_str().unwrap();
    let (status, view) = s.call_as(token, "GET", "/v1/nodes/hil-tr", None);
    assert_eq!((status, view["state"].as_str()), (200, Some("deployed")), "{view}");
    // A boot after the cycle: on the IPMI machine one more "finished" in the console log
    // (QEMU appends to it); libvirt truncates its log on each start, so there the marker in a
    // log written since the cycle.
    let booted_at = || match machine {
        Machine::Ipmi { console, .. } => {
            let text = std::fs::read_to_string(console).unwrap_or_default();
            (text.matches("Cloud-init v. 22.4.2 finished at").count(), None)
        }
        Machine::Redfish { domain, .. } => (domain.console().matches(DISK_MARKER).count(), domain.console_written()),
    };
    let before = booted_at();
    let booted_again = || {
        let now = booted_at();
        match machine {
            Machine::Ipmi { .. } => now.0 > before.0,
            Machine::Redfish { .. } => now.0 > 0 && now.1 > before.1,
        }
    };
    let (status, cycled) = s.call_as(token, "POST", "/v1/nodes/hil-tr/power", Some(json!({"action": "cycle"})));
    assert_eq!((status, cycled["after"].as_str()), (200, Some("on")), "{cycled}");
    if let Machine::Ipmi { .. } = machine {
        let mut console = metal_tests::console::open_console(s, "hil-tr", token).unwrap();
        let seen = metal_tests::console::read_console(s, &mut console, None, "finished at", Duration::from_secs(300));
        assert!(seen.contains("Cloud-init v. 22.4.2 finished at"), "the boot on the lessee's console: {seen}");
        drop(console);
        let deadline = Instant::now() + Duration::from_secs(20);
        while s.call("GET", "/v1/nodes/hil-tr/console/sessions", None).1[0]["endedAt"].is_null() {
            assert!(Instant::now() < deadline, "the WebSocket's console session never ended");
            std::thread::sleep(Duration::from_millis(200));
        }
        let mut ssh = metal_tests::console::Ssh::start(s, reservation, key);
        let printed = ssh.until(Some("\r"), "login:", Duration::from_secs(60));
        assert!(printed.contains("login:"), "the login prompt over the SSH gateway: {printed:?}");
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    while !booted_again() {
        assert!(
            Instant::now() < deadline,
            "the lessee's power cycle did not boot the OS again:\n{}",
            machine.console()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (_, events) = s.call("GET", "/v1/events?subject=node/hil-tr", None);
    let kinds: Vec<&str> = events["events"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(kinds.contains(&"lessee.power"), "{kinds:?}");
    token.to_owned()
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Ipmi,
    Redfish,
}

#[test]
fn a_lease_on_a_qemu_machine_behind_ipmi_sim_deploys_boots_and_is_torn_down_to_a_clean_ready_node() {
    lease_end_to_end(Kind::Ipmi);
}

#[test]
fn a_lease_on_a_libvirt_machine_behind_sushy_tools_deploys_boots_and_is_torn_down_to_a_clean_ready_node() {
    lease_end_to_end(Kind::Redfish);
}

fn lease_end_to_end(kind: Kind) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    // libvirt runs QEMU as its own user: it must reach the disk and the TFTP directory.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // The lessee's OS: on the IPMI machine the test OS (cloud-init Debian, which joins as a
    // node-tenant host while leased), on the libvirt one the test's marker image.
    let debian = kind == Kind::Ipmi;
    let disk = dir.path().join("disk.img");
    let (site, image) = if debian {
        let raw = std::fs::read(metal_tests::hil::test_os().join("debian-12-metal.raw")).unwrap();
        let site = metal_tests::hil::DeploySite::serving(
            metal_tests::images::zstd_cli(&raw, &["-q", "-3", "-T0", "-c"]),
            |_| {},
        );
        let agent = metal_tests::hil::static_binaries().join("metal-agent");
        std::os::unix::fs::symlink(agent, site.scheduler.files_dir().join("metal-agent")).unwrap();
        std::fs::File::create(&disk).unwrap().set_len(1 << 30).unwrap();
        (site, raw)
    } else {
        filled(&disk, 64 * MIB);
        let site = metal_tests::hil::DeploySite::start();
        let image = site.image.clone();
        (site, image)
    };
    let s = &site.scheduler;
    let mac = "52:54:00:00:0a:21";
    let tftp = tftp_dir(dir.path(), &format!("http://10.0.2.2:{}", s.port));
    let machine = match kind {
        Kind::Ipmi => {
            let console = dir.path().join("console.log");
            let args = Guest::new()
                .boot(BootFrom::Network(tftp))
                .nic(mac)
                .disk(&Bus::Virtio { serial: "HILTR01".into() }, &disk, "unmap")
                .args(&["-m", "1024"])
                .args(&["-device", "ipmi-bmc-sim,id=bmc0,fwrev1=9,fwrev2=0x08", "-device", "isa-ipmi-kcs,bmc=bmc0"])
                .machine_args_on_sol(&console);
            Machine::Ipmi { bmc: metal_tests::emulators::IpmiSim::machine(&args), console }
        }
        Kind::Redfish => {
            let domain = metal_tests::emulators::LibvirtDomain::machine(&metal_tests::emulators::LibvirtMachine {
                disk: &disk,
                serial: "HILTR01",
                mac,
                tftp: &tftp,
            });
            let sushy = Sushy::start_libvirt_with_accounts(&domain.uuid);
            Machine::Redfish { domain, sushy }
        }
    };
    let text = || machine.console();
    let (bmc_spec, baseline) = machine.spec();
    ok(
        s,
        "POST",
        "/v1/nodes",
        json!({"id": "hil-tr", "bootMac": mac, "devices": [{"id": "gpu0", "class": "gpu", "healthy": true}]}),
    );
    ok(s, "PUT", "/v1/nodes/hil-tr/bmc", bmc_spec);

    // Commissioning, through the BMC and PXE.
    ok(s, "POST", "/v1/nodes/hil-tr/boot", json!({"target": "pxe"}));
    ok(s, "POST", "/v1/nodes/hil-tr/power", json!({"action": "on"}));
    let node = drive(s, "commissioning", Duration::from_secs(480), |_, n| {
        n["state"] != "new" && n["state"] != "commissioning"
    });
    assert_eq!(node["state"], "ready", "{node}\n{}", text());
    drive(s, "the ramdisk's power-off", Duration::from_secs(180), |s, _| power(s) == "off");
    let stored = ok(s, "GET", "/v1/nodes/hil-tr/inventory", Value::Null);
    let in_band = stored["inventory"]["firmware"].as_array().unwrap().clone();
    for (component, version) in baseline.as_object().unwrap() {
        let found = in_band.iter().any(|f| f["component"] == component.as_str() && f["version"] == *version);
        assert!(found, "the ramdisk reads {component} {version} in band: {in_band:?}");
    }

    // The pool, the lessee, the public image and the lessee's profile (with the lessee's key).
    let (lessee_key, lessee_public) = metal_tests::console::ssh_key(dir.path(), "lessee");
    ok(
        s,
        "POST",
        "/v1/pools",
        json!({"id": "p1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated",
        "policy": {"tenantRoot": true, "firmwareBaseline": baseline, "fencing": {"driver": "fence-agents"}}}),
    );
    ok(s, "PATCH", "/v1/nodes/hil-tr", json!({"poolId": "p1"}));
    ok(s, "POST", "/v1/tenants", json!({"id": "acme"}));
    ok(s, "POST", "/v1/pools/p1/offers", json!({"tenantId": "acme"}));
    let image_id = site.import("marker-os");
    ok(s, "POST", &format!("/v1/images/{image_id}/promote"), Value::Null);
    ok(
        s,
        "POST",
        "/v1/profiles",
        json!({
        "id": "acme-os", "tenantId": "acme", "image": image_id, "adminUser": "ops", "role": "lessee",
        "sshAuthorizedKeys": [lessee_public]}),
    );

    // Reserve: the lease starts, the BMC boots the machine into the deploy, it binds.
    let reservation = ok(
        s,
        "POST",
        "/v1/reservations",
        json!({"tenantId": "acme", "poolId": "p1",
        "devices": [{"class": "gpu", "count": 1}], "duration": "1d", "binding": "node",
        "node": {"profileId": "acme-os", "profileVersion": 1}}),
    )["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let node = drive(s, "the lessee's deploy", Duration::from_secs(480), |_, n| {
        n["state"] != "ready" && n["state"] != "deploying"
    });
    assert_eq!(node["state"], "deployed", "{node}\n{}", text());
    assert_eq!((node["identityGeneration"].as_i64(), node["trust"].as_str()), (Some(2), Some("tenant-controlled")));
    drive(s, "the lease bound", Duration::from_secs(60), |s, _| {
        s.call("GET", &format!("/v1/reservations/{reservation}"), None).1["state"] == "active"
    });
    let written = std::fs::read(&disk).unwrap();
    assert!(written[MIB..8 * MIB] == image[MIB..8 * MIB], "the image is not bit-exact");

    // The deployed disk boots (the tenant powers its machine on).
    drive(s, "the deploy's reboot", Duration::from_secs(180), |s, _| power(s) == "off");
    ok(s, "POST", "/v1/nodes/hil-tr/boot", json!({"target": "disk"}));
    ok(s, "POST", "/v1/nodes/hil-tr/power", json!({"action": "on"}));
    if debian {
        tenant_os_joins(s, 2, &text);
    } else {
        let deadline = Instant::now() + Duration::from_secs(240);
        while !text().contains(DISK_MARKER) {
            assert!(Instant::now() < deadline, "the deployed disk did not boot:\n{}", text());
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    let token = lessee_hands(s, &machine, &reservation, &lessee_key);
    // The lessee reinstalls its machine with version 2 of its profile: the deploy again,
    // under the next identity generation, and the new OS joins as that generation's host.
    let generation = if debian {
        let mut v2 = ok(s, "GET", "/v1/profiles/acme-os", Value::Null)["versions"][0]["spec"].clone();
        v2["adminUser"] = json!("ops2");
        ok(s, "POST", "/v1/profiles/acme-os/versions", v2);
        let body = json!({"profileId": "acme-os", "profileVersion": 2});
        let (status, started) = s.call_as(&token, "POST", "/v1/nodes/hil-tr/reinstall", Some(body));
        assert_eq!(status, 202, "{started}");
        let node = drive(s, "the reinstall", Duration::from_secs(480), |s, n| {
            n["state"] == "failed"
                || (n["state"] == "deployed"
                    && s.events("node.tenant-root.reinstalled")
                        .iter()
                        .any(|e| e["data"]["workflow"] == started["workflow"]))
        });
        assert_eq!(
            (node["state"].as_str(), node["identityGeneration"].as_i64()),
            (Some("deployed"), Some(3)),
            "{node}\n{}",
            text()
        );
        drive(s, "the reinstall's reboot", Duration::from_secs(180), |s, _| power(s) == "off");
        ok(s, "POST", "/v1/nodes/hil-tr/boot", json!({"target": "disk"}));
        let (status, on) = s.call_as(&token, "POST", "/v1/nodes/hil-tr/power", Some(json!({"action": "on"})));
        assert_eq!(status, 200, "{on}");
        tenant_os_joins(s, 3, &text);
        3
    } else {
        2
    };

    // Release: the whole teardown, driven from the control plane.
    std::thread::sleep(Duration::from_secs(5));
    ok(s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    let node = drive(s, "the teardown", Duration::from_secs(900), |_, n| {
        n["state"] != "deployed" && n["state"] != "releasing"
    });
    let (_, runs) = s.call("GET", "/v1/nodes/hil-tr/teardowns", None);
    assert_eq!(node["state"], "ready", "{node}\n{runs}\n{}\nchassis: {}", text(), machine.chassis());
    assert_eq!(
        (node["identityGeneration"].as_i64(), node["trust"].as_str()),
        (Some(generation + 1), Some("platform")),
        "{node}"
    );
    assert_eq!(node["tenantRoot"], false);
    let run = &runs[0];
    let done = metal_tests::leases::done_records(run);
    let steps: Vec<_> = done.iter().filter_map(|h| h["step"].as_str()).collect();
    assert_eq!(steps, metal_tests::leases::TEARDOWN_STEPS, "{run}");
    let detail = |step: &str| &done.iter().find(|h| h["step"] == step).unwrap()["detail"];
    assert!(detail("fence")["status"]["output"].as_str().unwrap().contains("Status: OFF"), "{run}");
    assert_eq!(detail("firmware")["code"], "COMPLIANT", "{run}");
    assert!(run["context"]["eraseBoots"].as_i64().unwrap() >= 2, "the firmware boot, then the erase: {run}");
    let (_, reports) = s.call("GET", "/v1/nodes/hil-tr/wipe-reports", None);
    let accepted = reports.as_array().unwrap().iter().find(|r| r["accepted"] == true).cloned().unwrap_or_default();
    let signer = format!("/node/hil-tr/gen/{generation}/ramdisk");
    assert!(accepted["signer"].as_str().unwrap_or_default().ends_with(&signer), "{reports}");
    assert_eq!(detail("erase")["wipeReport"], accepted["id"], "{run}");
    if debian {
        // The teardown's clean-up took the host away with the lessee's identity; its log stays.
        assert_eq!(s.call("GET", "/v1/hosts/hil-tr", None).0, 404);
        let (_, log) = s.call("GET", "/v1/hosts/hil-tr/join-log", None);
        assert!(log.as_array().unwrap().iter().any(|e| e["step"] == "joined" && e["ok"] == true), "{log}");
    }
    let erased = std::fs::read(&disk).unwrap();
    assert!(erased[MIB..8 * MIB] != image[MIB..8 * MIB], "the deployed image is still on the disk");
    match &machine {
        Machine::Ipmi { bmc, .. } => assert!(bmc.chassis_log().contains("power 0"), "{}", bmc.chassis_log()),
        Machine::Redfish { domain, .. } => {
            // The ramdisk powers the machine off once its report is in; QEMU may still be exiting.
            assert_eq!(domain.settle("shut off", Duration::from_secs(60)), "shut off")
        }
    }
    assert!(s.block_on(metal_capacity::billing::bill_once(&s.app.store, &*s.app.clock)).unwrap() > 0);
    let (_, usage) = s.call("GET", "/v1/usage?tenantId=acme", None);
    assert!(usage["totals"]["node.metal.hours"].as_f64().unwrap() > 0.0, "{usage}");
}
