//! A dedicated-root lease end to end on loopback, with no hand on the node: a node binding
//! reserved -> capacity asks metal for the lease -> the node is handed to the tenant under a
//! new identity generation and network-boots the lessee's profile (an installer deploy; the
//! installer's "done" is what a real installed system posts) -> bound, billed -> released ->
//! the whole teardown driven from the control plane against ipmi_sim (power off read back,
//! fenced by ClusterLabs' fence_ipmilan, the BMC password rotated, media and overrides, the
//! firmware baseline out of band, then in band and the erase by metal-boot's own controller
//! client as the ramdisk) -> ready two identity generations later, with the evidence record
//! and the meter rows. Also: a lease without a profile version is refused and the node stays
//! ready; a BMC that refuses the rotation quarantines the node, and recover runs the
//! teardown again; a teardown waits for an operator's rotation in flight. In a pool that
//! isolates tenants on the switch (a real Open vSwitch), the lease's ports move to its
//! tenant VLAN before the OS boots and the teardown moves them to cleaning and back; hosts
//! cabled to the switch show what that does on the wire: the leased machine's port reaches
//! neither the provisioning network's service nor another machine (ping, arping and curl
//! fail, and a capture on their ports sees none of its frames) while the other machine
//! does, and once ready it reaches them again. A switch that is unreachable, refuses, or
//! reads back another tag quarantines.

use std::time::Duration;

use metal_boot::controller::{self, Retry};
use metal_machines::metal;
use metal_protocol::measurement::AttestationReport;
use metal_protocol::{InventoryReport, Role, WipeReport};
use metal_tests::emulators::{IpmiSim, SUSHY_PASSWORD, Sushy};
use metal_tests::leases::{
    MAC, installer_done, inventory, ipmi, later, leased_and_deployed, ok, reserve, site, wipe_report,
};
use metal_tests::scheduler::{Admin as _, INTRUDER, TestScheduler, intruder_script};
use serde_json::{Value, json};

/// n1's teardown run, once it handed n1 back ready two identity generations after
/// commissioning.
fn ready_two_generations_later(s: &TestScheduler) -> Value {
    let node = s.node("n1");
    let run = teardowns(s).swap_remove(0);
    let ready = (node["state"].as_str(), node["identityGeneration"].as_i64());
    assert_eq!(ready, (Some("ready"), Some(3)), "{node}\n{run}");
    run
}

fn teardowns(s: &TestScheduler) -> Vec<Value> {
    ok(s, "GET", "/v1/nodes/n1/teardowns", Value::Null).as_array().unwrap().clone()
}

/// The simulated ramdisk: boots through the node's iPXE script and joins.
fn ramdisk(s: &TestScheduler, task: &str) -> controller::Joined {
    ramdisk_asking(s, &format!("mac={MAC}"), task)
}

/// The simulated ramdisk, its script asked for with `query`.
fn ramdisk_asking(s: &TestScheduler, query: &str, task: &str) -> controller::Joined {
    let (status, script) = s.get_text(&format!("/boot/ipxe?{query}"));
    assert_eq!(status, 200, "{script}");
    let (token, found) = TestScheduler::script_token(&script).unwrap_or_else(|| panic!("no ramdisk boot: {script}"));
    assert_eq!(found, task, "{script}");
    controller::join(&s.boot_url, &s.fingerprint, &token, Retry { attempts: 1, backoff: Duration::from_millis(1) })
        .unwrap()
}

/// The ramdisk's part of the teardown: the in-band firmware check, then the erase and its
/// wipe report (accepted).
fn erase_by_ramdisk(s: &TestScheduler, version: &str) {
    erase_reporting(s, &[("bmc", version)]);
}

/// [`erase_by_ramdisk`] with the in-band firmware `{component, version}` it reports.
fn erase_reporting(s: &TestScheduler, firmware: &[(&str, &str)]) {
    let joined = ramdisk(s, "firmware");
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory(firmware)).unwrap();
    assert!(receipt.accepted && receipt.reason.is_none(), "{receipt:?}");
    let joined = ramdisk(s, "erase");
    let receipt = joined.post_report(WipeReport::PAYLOAD_TYPE, &wipe_report()).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
}

#[test]
fn a_lease_runs_from_reservation_to_a_clean_ready_node_two_generations_later() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), json!({"fencing": {"driver": "fence-agents"}}));
    let reservation = reserve(&s, json!({"profileId": "acme-os", "profileVersion": 1}));

    // Lease start: handed to the tenant under a new identity generation, deploying.
    s.passes();
    let node = s.node("n1");
    assert_eq!(node["state"], "deploying", "{node}");
    assert_eq!((node["tenantRoot"].as_bool(), node["trust"].as_str()), (Some(true), Some("tenant-controlled")));
    assert_eq!(node["identityGeneration"], 2, "the lease starts a new identity generation");
    assert_eq!(node["releaseWipe"], "secure-erase");
    assert_eq!(node["heldBy"], reservation.as_str(), "the lease holds the node while it deploys: {node}");
    let leased = s.events("node.tenant-root.leased");
    assert_eq!(leased[0]["data"]["profile"], "acme-os", "{leased:?}");
    assert!(sim.chassis_log().contains("power"), "network-boot powered the machine through its BMC");
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(r["state"], "pending", "not bound before the deploy: {r}");

    // The installed system reports done: bound, active, billing starts.
    installer_done(&s.url);
    later(&s);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["labels"]["role"].as_str()), (Some("deployed"), Some("lessee")), "{node}");
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(r["state"], "active", "{r}");
    assert_eq!(s.events("node.tenant-root.bound").len(), 1);
    // Under the tenant's control the node is still the pool's: leased, not gone.
    let pool = ok(&s, "GET", "/v1/pools/p1", Value::Null);
    assert_eq!(pool["capacity"], json!({"capacity": 1, "free": 0, "leased": 1}), "{pool}");

    // While the tenant has root, what the node reports is advisory: kept, changing nothing.
    let platform = ok(&s, "GET", "/v1/nodes/n1/inventory", Value::Null);
    let mut claimed = inventory(&[("bmc", "0.0-tenant")]);
    claimed.disks.truncate(1);
    let receipt = s.post_report_as(metal_protocol::Role::NodeTenant, "n1", 2, InventoryReport::PAYLOAD_TYPE, &claimed);
    assert_eq!(receipt["accepted"], true, "{receipt}");
    assert!(receipt["reason"].as_str().unwrap().starts_with("advisory"), "{receipt}");
    let changed = s.events("node.inventory.changed");
    assert_eq!((changed.len(), &changed[0]["data"]["advisory"]), (1, &json!(true)), "{changed:?}");
    assert_eq!(ok(&s, "GET", "/v1/nodes/n1/inventory", Value::Null), platform, "the platform inventory stands");
    let after = s.node("n1");
    assert_eq!((&after["devices"], &after["labels"]), (&node["devices"], &node["labels"]), "{after}");

    // Four minutes on the bill (the simulated ramdisk's certificates are checked against
    // the real clock, which the service's may not run far ahead of), then the release.
    s.clock.advance(Duration::from_secs(240));
    ok(&s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    s.passes();
    assert_eq!(s.events("node.tenant-root.ending").len(), 1);
    let node = s.node("n1");
    assert_eq!(node["state"], "releasing", "{node}");
    assert_eq!(node["heldBy"], reservation.as_str(), "the ended lease holds the node until its teardown ends");
    let run = &teardowns(&s)[0];
    assert_eq!(run["definition"], "metal-tenant-root-release@1");
    assert_eq!(run["lastError"], "booted the ramdisk to erase every disk (boot 1, from network)", "{run}");
    let done: Vec<&str> = run["history"].as_array().unwrap().iter().map(|h| h["step"].as_str().unwrap()).collect();
    assert_eq!(
        done,
        ["power-off", "network-cleaning", "fence", "rotate-credential", "eject-media", "firmware", "bios-reset"],
        "{run}"
    );
    let history = &run["history"];
    assert_eq!(history[2]["detail"]["driver"], "fence-agents", "{run}");
    assert!(history[2]["detail"]["status"]["output"].as_str().unwrap().contains("Status: OFF"), "{run}");
    assert_eq!(history[3]["detail"]["rotated"], true, "{run}");
    assert_eq!(history[5]["detail"]["code"], "COMPLIANT", "{run}");
    let bmc = ok(&s, "GET", "/v1/nodes/n1/bmc", Value::Null);
    assert_eq!(bmc["generation"], 2, "the rotated credential is stored: {bmc}");
    let (status, power) = s.call("GET", "/v1/nodes/n1/power", None);
    assert_eq!((status, power["power"].as_str()), (200, Some("on")), "the new credential logs in: {power}");

    // The ramdisk checks firmware in band, then erases; its report lets the run go on.
    erase_by_ramdisk(&s, &version);
    assert_eq!(s.node("n1")["state"], "releasing", "the workflow, not the report, returns the node");
    later(&s);

    let node = s.node("n1");
    assert_eq!(node["state"], "ready", "{node}");
    assert_eq!((node["tenantRoot"].as_bool(), node["trust"].as_str()), (Some(false), Some("platform")), "{node}");
    assert_eq!(node["identityGeneration"], 3, "a lease and its release yield a new identity generation");
    assert!(node.get("leaseId").is_none() && node.get("heldBy").is_none(), "{node}");
    let run = &teardowns(&s)[0];
    assert_eq!(run["status"], "succeeded", "{run}");
    let steps = metal_tests::leases::history_steps(run);
    assert_eq!(steps, metal_tests::leases::TEARDOWN_STEPS);
    assert!(run["history"].as_array().unwrap().iter().all(|h| h["result"] == "done"), "{run}");
    let ready = s.events("node.ready");
    assert_eq!(ready.last().unwrap()["data"]["evidence"], run["id"], "{ready:?}");

    // The meter rows: the four bound minutes, billed to acme.
    assert!(s.block_on(metal_capacity::billing::bill_once(&s.app.store, &*s.app.clock)).unwrap() > 0);
    let (_, usage) = s.call("GET", "/v1/usage?tenantId=acme", None);
    let hours = usage["totals"]["node.metal.hours"].as_f64().unwrap();
    assert!((hours - 240.0 / 3600.0).abs() < 1e-9, "bound at the deploy's end, released 240 s later: {usage}");
}

#[test]
fn a_lease_without_a_profile_version_is_refused_and_the_node_stays_ready() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    site(&s, ipmi(&sim), json!({"fencing": {"driver": "none"}}));
    let reservation = reserve(&s, json!({"profileId": "acme-os"}));
    s.passes();
    let refused = s.events("node.tenant-root.refused");
    assert!(refused[0]["data"]["reason"].as_str().unwrap().contains("without a profileVersion"), "{refused:?}");
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["identityGeneration"].as_i64()), (Some("ready"), Some(1)), "{node}");
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(r["state"], "failed", "{r}");
    assert!(r["stateReason"].as_str().unwrap().starts_with("lease refused"), "{r}");
}

#[test]
fn firmware_drift_quarantines_the_node_and_recover_runs_the_teardown_again() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    site(&s, ipmi(&sim), json!({"firmwareBaseline": {"bmc": "99.0"}}));
    let reservation = leased_and_deployed(&s);
    let (status, refused) =
        s.call("POST", "/v1/nodes/n1/transitions", Some(json!({"from": "deployed", "to": "releasing", "owner": "me"})));
    assert_eq!(status, 409, "a tenant-root node leaves only through its teardown: {refused}");
    ok(&s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    s.passes();

    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["failedFrom"].as_str()), (Some("failed"), Some("releasing")), "{node}");
    assert_eq!(node["maintenance"], true, "{node}");
    assert_eq!((node["tenantRoot"].as_bool(), node["trust"].as_str()), (Some(true), Some("tenant-controlled")));
    let reason = node["stateReason"].as_str().unwrap();
    assert!(reason.starts_with("firmware: FIRMWARE_DRIFT") && reason.contains("bmc: expected 99.0, found"), "{reason}");
    let quarantined = s.events("node.tenant-root.quarantined");
    assert_eq!(quarantined.len(), 1, "{quarantined:?}");
    let run = &teardowns(&s)[0];
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(run["history"].as_array().unwrap().last().unwrap()["step"], "firmware", "{run}");
    assert_eq!(step_record(run, "fence")["detail"]["driver"], "none", "no fencing is recorded as such: {run}");

    // recover: back to releasing, a new run from the first step; maintenance stays on.
    let (status, refused) =
        s.call("POST", "/v1/nodes/n1/transitions", Some(json!({"from": "failed", "to": "releasing", "owner": "me"})));
    assert_eq!(status, 409, "{refused}");
    let recovered = ok(&s, "POST", "/v1/nodes/n1/recover", Value::Null);
    assert_eq!((recovered["state"].as_str(), recovered["maintenance"].as_bool()), (Some("releasing"), Some(true)));
    s.passes();
    let runs = teardowns(&s);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[1]["history"][0]["step"], "power-off", "the teardown runs again from the start");
    assert_eq!(s.node("n1")["state"], "failed", "the drift is still there");
    let (status, body) = s.call("POST", "/v1/nodes/n1/recover", None);
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.call("POST", "/v1/nodes/n1/recover", None);
    assert_eq!(status, 409, "only a failed node recovers: {body}");
}

/// Releases n1's lease and runs both sides until the teardown waits or ends.
fn release(s: &TestScheduler, reservation: &str) {
    ok(s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    s.passes();
}

#[test]
fn a_bmc_that_refuses_the_rotation_quarantines_the_node_and_the_old_credential_stays() {
    // sushy-tools has no AccountService: a Redfish BMC that cannot take a new password.
    let sushy = Sushy::start();
    let s = TestScheduler::start(|_| {});
    let bmc = json!({"protocol": "redfish", "address": sushy.endpoint, "username": "admin", "password": SUSHY_PASSWORD,
                     "tls": {"mode": "fingerprint", "value": sushy.pki.fingerprint}});
    site(&s, bmc, json!({}));
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["maintenance"].as_bool()), (Some("failed"), Some(true)), "{node}");
    let reason = node["stateReason"].as_str().unwrap();
    assert!(reason.starts_with("rotate-credential: the BMC refused the new credential"), "{reason}");
    assert!(reason.ends_with("the old credential stays current"), "{reason}");
    assert!(!reason.contains(SUSHY_PASSWORD));
    let (status, power) = s.call("GET", "/v1/nodes/n1/power", None);
    assert_eq!((status, power["power"].as_str()), (200, Some("off")), "the old credential still logs in: {power}");
    assert_eq!(ok(&s, "GET", "/v1/nodes/n1/bmc", Value::Null)["generation"], 1, "nothing was stored");
}

#[test]
fn a_teardown_waits_for_an_operators_rotation_in_flight_and_settles_one_that_died() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    site(&s, ipmi(&sim), json!({}));
    let reservation = leased_and_deployed(&s);
    // An operator's rotation claimed the BMC's pending slot just now, and then died before
    // it reached the BMC.
    let sealed =
        metal_types::secrets::seal(s.app.config.master_key.as_ref(), "n1", &metal_bmc::Secret::new("Operator-1"));
    let now = s.app.clock.now();
    let claim = s.app.store.write(move |tx| metal_store::bmcs::claim_pending(tx, "n1", &sealed, now));
    assert!(s.block_on(claim).unwrap());
    release(&s, &reservation);
    let run = &teardowns(&s)[0];
    let steps = metal_tests::leases::history_steps(run);
    assert_eq!(steps, ["power-off", "network-cleaning", "fence"], "{run}");
    let waiting = run["lastError"].as_str().unwrap();
    assert!(waiting.starts_with("an operator's rotation of the BMC credential is in flight (since "), "{run}");
    later(&s);
    assert_eq!(teardowns(&s)[0]["history"].as_array().unwrap().len(), 3, "still waiting within the lease");

    // Past the lease: the pending password never reached the BMC, so it is dropped, and the
    // teardown rotates (not waiting for an operator's rotation that will never end).
    s.clock.advance(Duration::from_secs(5 * 60));
    s.passes();
    let run = &teardowns(&s)[0];
    assert_eq!(run["history"][3]["step"], "rotate-credential", "{run}");
    assert_eq!(run["history"][3]["detail"]["rotated"], true, "{run}");
    assert_eq!(ok(&s, "GET", "/v1/nodes/n1/bmc", Value::Null)["generation"], 2, "one rotation stored");
    let (status, power) = s.call("GET", "/v1/nodes/n1/power", None);
    assert_eq!(status, 200, "the stored credential is the BMC's: {power}");
}

#[test]
fn a_wipe_report_signed_by_a_tenant_identity_is_refused_and_quarantines() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), json!({}));
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);
    assert_eq!(teardowns(&s)[0]["lastError"], "booted the ramdisk to erase every disk (boot 1, from network)");
    let joined = ramdisk(&s, "firmware");
    joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory(&[("bmc", &version)])).unwrap();
    // The tenant's OS forges a wipe report with a node-tenant certificate of this generation.
    let receipt = s.post_report_as(metal_protocol::Role::NodeTenant, "n1", 2, WipeReport::PAYLOAD_TYPE, &wipe_report());
    assert_eq!(receipt["accepted"], false, "{receipt}");
    later(&s);
    let node = s.node("n1");
    assert_eq!(node["state"], "failed", "{node}");
    let reason = node["stateReason"].as_str().unwrap();
    assert!(reason.starts_with("erase: wipe report") && reason.contains("role-not-allowed"), "{reason}");
}

#[test]
fn an_agentless_pool_returns_nodes_only_with_allow_unverified_release() {
    for allow in [false, true] {
        let sim = IpmiSim::start();
        let s = TestScheduler::start(|_| {});
        site(&s, ipmi(&sim), json!({"agent": "none", "allowUnverifiedRelease": allow}));
        let reservation = leased_and_deployed(&s);
        release(&s, &reservation);
        let run = &teardowns(&s)[0];
        assert_eq!(run["definition"], "metal-tenant-root-release-oob@1", "{run}");
        let steps = metal_tests::leases::history_steps(run);
        assert_eq!(steps, metal_tests::leases::AGENTLESS_TEARDOWN_STEPS);
        let node = s.node("n1");
        if allow {
            assert_eq!(
                (node["state"].as_str(), node["identityGeneration"].as_i64()),
                (Some("ready"), Some(3)),
                "{node}"
            );
            assert_eq!(s.events("node.ready").last().unwrap()["data"]["unverified"], true);
        } else {
            assert_eq!((node["state"].as_str(), node["maintenance"].as_bool()), (Some("failed"), Some(true)), "{node}");
            assert!(node["stateReason"].as_str().unwrap().contains("allowUnverifiedRelease"), "{node}");
        }
    }
}

#[test]
fn deleting_a_tenant_tears_its_lease_down_and_retires_only_its_own_machines() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), json!({}));
    let reservation = leased_and_deployed(&s);
    ok(&s, "POST", "/v1/pools", json!({"id": "acme-own", "tenantId": "acme", "siteId": "site-a", "class": "own"}));
    ok(&s, "POST", "/v1/nodes", json!({"id": "n2", "poolId": "acme-own"}));
    s.walk("n2", &["new", "commissioning", "ready"]);
    let token = ok(&s, "POST", "/v1/credentials", json!({"role": "tenant-member", "tenantId": "acme", "name": "ci"}));
    let token = token["token"].as_str().unwrap().to_owned();
    assert_eq!(s.call_as(&token, "GET", "/v1/reservations", None).0, 200);

    let (status, root) = s.call("DELETE", "/v1/tenants/root", None);
    assert_eq!(status, 409, "{root}");
    let deleted = ok(&s, "DELETE", "/v1/tenants/acme", Value::Null);
    assert_eq!(deleted, json!({"tenantId": "acme", "reservations": [reservation], "pools": ["acme-own"]}));
    s.passes();
    assert_eq!(s.node("n2")["state"], "retired", "the tenant's own machine is retired");
    assert_eq!(s.node("n1")["state"], "releasing", "the leased platform machine is torn down");
    erase_by_ramdisk(&s, &version);
    later(&s);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["identityGeneration"].as_i64()), (Some("ready"), Some(3)), "{node}");
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!((r["state"].as_str(), r["stateReason"].as_str()), (Some("ended"), Some("tenant acme deleted")), "{r}");
    assert_eq!(s.call_as(&token, "GET", "/v1/reservations", None).0, 401, "its credentials are revoked");
    assert_eq!(s.call("GET", "/v1/tenants/acme", None).0, 404);
    assert_eq!(s.call("DELETE", "/v1/tenants/acme", None).0, 404);
}

/// A libvirt machine with a NIC (the lease's network boot names it) and an empty disk of
/// this serial, and the directory that holds them.
fn libvirt_machine(serial: &str) -> (tempfile::TempDir, metal_tests::emulators::LibvirtDomain) {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let disk = dir.path().join("disk.img");
    std::fs::write(&disk, vec![0u8; 1 << 20]).unwrap();
    let tftp = metal_tests::hil::tftp_dir(dir.path(), "http://10.0.2.2:9");
    let domain = metal_tests::emulators::LibvirtDomain::machine(&metal_tests::emulators::LibvirtMachine {
        disk: &disk,
        serial,
        mac: MAC,
        tftp: &tftp,
    });
    (dir, domain)
}

#[test]
fn a_redfish_teardown_fences_rotates_through_the_account_service_and_reflashes_drift() {
    use sha2::Digest as _;
    let (_dir, domain) = libvirt_machine("RF01");
    let sushy = Sushy::start_libvirt_with_accounts(&domain.uuid);
    let system = |password: &str| {
        reqwest::blocking::Client::builder()
            .danger_accept_invalid_certs(true)
            .build()
            .unwrap()
            .get(format!("{}/redfish/v1/Systems/{}", sushy.endpoint, domain.uuid))
            .basic_auth("admin", Some(password))
            .send()
            .unwrap()
    };
    let bios = system(SUSHY_PASSWORD).json::<Value>().unwrap()["BiosVersion"].as_str().unwrap().to_owned();
    // sushy's SimpleUpdate bumps the minor version: the baseline wants the next one.
    let mut parts: Vec<u32> = bios.split('.').map(|p| p.parse().unwrap()).collect();
    parts[1] += 1;
    let next = parts.iter().map(u32::to_string).collect::<Vec<_>>().join(".");
    let ca = metal_protocol::SiteCa::create(
        "firmware",
        std::time::SystemTime::now() - Duration::from_secs(600),
        Duration::from_secs(86400),
    )
    .unwrap();
    let blob = vec![0x42u8; 1 << 20];
    let files = metal_tests::controller::ImageServer::start(&ca, &[], [("bios.bin".to_owned(), blob.clone())].into());
    let s = TestScheduler::start(|_| {});
    let bmc = json!({"protocol": "redfish", "address": sushy.endpoint, "username": "admin", "password": SUSHY_PASSWORD,
                     "tls": {"mode": "fingerprint", "value": sushy.pki.fingerprint}});
    site(
        &s,
        bmc,
        json!({"agent": "none", "allowUnverifiedRelease": true, "fencing": {"driver": "fence-agents"},
               "firmwareBaseline": {"bios": next}, "firmwareRemediation": "reflash",
               "firmwareImages": {"bios": {"url": files.url("bios.bin"), "sha256": hex::encode(sha2::Sha256::digest(&blob))}}}),
    );
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);

    let run = &ready_two_generations_later(&s);
    let history = run["history"].as_array().unwrap();
    assert!(history[2]["detail"]["status"]["output"].as_str().unwrap().contains("Status: OFF"), "fence_redfish: {run}");
    assert_eq!(history[3]["detail"]["rotated"], true, "{run}");
    assert_eq!(history[5]["detail"]["code"], "REFLASHED", "{run}");
    assert_eq!(history[5]["detail"]["after"]["compliant"], true, "{run}");
    assert_eq!(domain.state(), "shut off", "powered off and fenced");
    assert_eq!(system(SUSHY_PASSWORD).status(), 401, "the tenant-era password no longer logs in");
    let (status, power) = s.call("GET", "/v1/nodes/n1/power", None);
    assert_eq!((status, power["power"].as_str()), (200, Some("off")), "the rotated one does: {power}");
}

#[test]
fn bios_settings_a_lessee_chose_or_changed_are_written_back_and_drift_that_survives_quarantines() {
    let (_dir, domain) = libvirt_machine("RF02");
    let sushy = Sushy::start_libvirt_with_accounts(&domain.uuid);
    // What the tenant's root reaches besides the platform: vendor tools write the settings
    // the BMC shows (a second account here, which the teardown's rotation leaves alone).
    sushy.add_account("vendor-tool", "vendor-Secret-7");
    let http = reqwest::blocking::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let bios_url = format!("{}/redfish/v1/Systems/{}/BIOS", sushy.endpoint, domain.uuid);
    let turbo = || {
        let bios: Value =
            http.get(&bios_url).basic_auth("vendor-tool", Some("vendor-Secret-7")).send().unwrap().json().unwrap();
        bios["Attributes"]["ProcTurboMode"].as_str().unwrap().to_owned()
    };
    let set_turbo = |value: &str| {
        let answer = http
            .patch(format!("{bios_url}/Settings"))
            .basic_auth("vendor-tool", Some("vendor-Secret-7"))
            .json(&json!({"Attributes": {"ProcTurboMode": value}}))
            .send()
            .unwrap();
        assert!(answer.status().is_success(), "{answer:?}");
    };
    let system: Value = http
        .get(format!("{}/redfish/v1/Systems/{}", sushy.endpoint, domain.uuid))
        .basic_auth("admin", Some(SUSHY_PASSWORD))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let bios_version = system["BiosVersion"].as_str().unwrap().to_owned();
    let s = TestScheduler::start(|_| {});
    let bmc = json!({"protocol": "redfish", "address": sushy.endpoint, "username": "admin", "password": SUSHY_PASSWORD,
                     "tls": {"mode": "fingerprint", "value": sushy.pki.fingerprint}});
    // QuietBoot is the lessee's to choose (its profile's bios), and reset after the lease.
    let baseline = json!({"attributes": {"ProcTurboMode": "Enabled", "BootMode": "Uefi", "QuietBoot": "true"},
                          "tenantSettable": ["QuietBoot"]});
    site(&s, bmc, json!({"firmwareBaseline": {"bios": bios_version}, "biosBaseline": baseline}));
    let profile_version = |bios: Value| {
        let mut spec = ok(&s, "GET", "/v1/profiles/acme-os", Value::Null)["versions"][0]["spec"].clone();
        spec["bios"] = bios;
        ok(&s, "POST", "/v1/profiles/acme-os/versions", spec)["latestVersion"].as_i64().unwrap()
    };
    let (status, body) = s.call("POST", "/v1/profiles/acme-os/versions", Some(json!({"bios": {"A": [1]}})));
    assert_eq!(status, 422, "{body}");
    let turbo_too = profile_version(json!({"ProcTurboMode": "Disabled"}));
    let reservation = reserve(&s, json!({"profileId": "acme-os", "profileVersion": turbo_too}));
    s.passes();
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    let why = r["stateReason"].as_str().unwrap();
    assert!(
        why.contains(&format!(
            "profile acme-os version {turbo_too} sets BIOS attribute ProcTurboMode, which pool p1 \
                               does not let tenants set (policy.biosBaseline.tenantSettable: QuietBoot)"
        )),
        "{r}"
    );
    let quiet = profile_version(json!({"QuietBoot": "false"}));
    let reservation = metal_tests::leases::leased_and_deployed_with(&s, u32::try_from(quiet).unwrap());
    let lease_run = lease_run(&s);
    assert_eq!(step_record(&lease_run, "bios-tenant")["detail"]["set"], json!({"QuietBoot": "false"}), "{lease_run}");
    let quiet_boot = || {
        let bios: Value =
            http.get(&bios_url).basic_auth("vendor-tool", Some("vendor-Secret-7")).send().unwrap().json().unwrap();
        bios["Attributes"]["QuietBoot"].as_str().unwrap().to_owned()
    };
    assert_eq!(quiet_boot(), "false", "the lessee's setting, before its deploy boot");
    set_turbo("Disabled");

    // Before the erase boot: the drifted attributes found and written back, the other left.
    release(&s, &reservation);
    let run = teardowns(&s).pop().unwrap();
    let written = &step_record(&run, "bios-reset")["detail"];
    assert_eq!(
        written["found"],
        json!({"BootMode": "Uefi", "ProcTurboMode": "Disabled", "QuietBoot": "false"}),
        "{run}"
    );
    assert_eq!(written["set"], json!({"ProcTurboMode": "Enabled", "QuietBoot": "true"}), "{run}");
    assert_eq!(written["drifted"][0]["found"], "Disabled", "{run}");
    assert_eq!((turbo(), quiet_boot()), ("Enabled".into(), "true".into()), "sushy applies a write at once");
    // The drift survives the boot meant to apply the baseline (firmware that re-asserts it).
    set_turbo("Disabled");
    erase_reporting(&s, &[("bios", &bios_version)]);
    later(&s);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["failedFrom"].as_str()), (Some("failed"), Some("releasing")), "{node}");
    let reason = node["stateReason"].as_str().unwrap();
    assert_eq!(
        reason,
        r#"bios-verify: BIOS_DRIFT: after the boot that applies them, ProcTurboMode is "Disabled", the baseline wants "Enabled""#
    );
    let run = teardowns(&s).pop().unwrap();
    assert_eq!(step_record(&run, "bios-verify")["detail"]["found"]["ProcTurboMode"], "Disabled", "{run}");

    // Recovered: the teardown writes it back again, and this time it holds.
    recover(&s);
    assert_eq!(turbo(), "Enabled");
    erase_reporting(&s, &[("bios", &bios_version)]);
    later(&s);
    let run = teardowns(&s).pop().unwrap();
    assert_eq!(s.node("n1")["state"], "ready", "{run}");
    let verified = &step_record(&run, "bios-verify")["detail"];
    assert_eq!(
        verified["found"],
        json!({"BootMode": "Uefi", "ProcTurboMode": "Enabled", "QuietBoot": "true"}),
        "{run}"
    );
    assert_eq!((verified["drifted"].as_array().unwrap().len(), verified["pending"].as_object().unwrap().len()), (0, 0));
}

#[test]
fn a_disk_that_fails_its_read_back_quarantines_the_node() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), json!({}));
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);
    let joined = ramdisk(&s, "firmware");
    joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory(&[("bmc", &version)])).unwrap();
    // The erase ran, but a disk that ignored its discards still reads back old data.
    let joined = ramdisk(&s, "erase");
    let mut lied = wipe_report();
    lied.disks[0].result = metal_protocol::wipe::WipeResult::Fail;
    lied.disks[0].first_bad_offset = Some(4096);
    let receipt = joined.post_report(WipeReport::PAYLOAD_TYPE, &lied).unwrap();
    assert!(!receipt.accepted && receipt.reason.as_deref().unwrap().starts_with("disk-failed"), "{receipt:?}");
    // Then the ramdisk says its task failed, as the real one does. The teardown owns the
    // verdict: the node stays releasing until the run fails and quarantines it in one
    // transaction (failed first here, it was `failed` while its run still ran, and `recover`
    // was refused: metal-sim's chaos found it).
    joined.report_task("erase", false, "0 of 1 disks erased and verified".into()).unwrap();
    assert_eq!(s.node("n1")["state"], "releasing");
    // The reports woke the waiting erase step: the next pass reads them, with no poll to wait out.
    s.passes();
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["failedFrom"].as_str()), (Some("failed"), Some("releasing")), "{node}");
    assert_eq!((node["maintenance"].as_bool(), node["tenantRoot"].as_bool()), (Some(true), Some(true)), "{node}");
    let run = &teardowns(&s)[0];
    assert_eq!(run["status"], "failed", "{run}");
    assert!(run["lastError"].as_str().unwrap().contains("disk-failed"), "{run}");
    assert_eq!(s.events("node.tenant-root.quarantined").len(), 1);
    ok(&s, "POST", "/v1/nodes/n1/recover", Value::Null);
}

#[test]
fn a_wipe_report_from_before_the_erase_step_neither_counts_nor_stops_the_erase_being_served() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), json!({}));
    let reservation = leased_and_deployed(&s);
    ok(&s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    // The teardown is created (the node releasing), not yet run.
    s.block_on(metal_capacity::leases::tick(&s.app.store, &*s.app.clock)).unwrap();
    s.block_on(metal::work::drain_once(&s.app.machines)).unwrap();
    // Before its first step nobody booted the node: a network boot gets nothing to run.
    let (_, script) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert!(script.contains("nothing to run (no boot was started for it)"), "{script}");
    // A ramdisk still running from an earlier boot of this generation (as metal-sim's chaos
    // met it) checks the firmware and reports a wipe before the erase step began: the wipe
    // is refused, for no ramdisk joined the node's current boot with that key.
    let generation = s.node("n1")["identityGeneration"].as_u64().unwrap();
    let firmware = inventory(&[("bmc", &version)]);
    s.post_report_as(Role::Ramdisk, "n1", generation, InventoryReport::PAYLOAD_TYPE, &firmware);
    let early = s.post_report_as(Role::Ramdisk, "n1", generation, WipeReport::PAYLOAD_TYPE, &wipe_report());
    assert_eq!(early["accepted"], false, "{early}");
    assert!(
        early["reason"].as_str().unwrap().starts_with("not-this-boot: the report is signed by a ramdisk"),
        "{early}"
    );
    s.clock.advance(Duration::from_secs(1));
    s.passes();
    assert_eq!(s.node("n1")["state"], "releasing", "the early report is not the erase step's");
    // The erase step booted the ramdisk, and the boot service serves it the erase.
    let joined = ramdisk(&s, "erase");
    let receipt = joined.post_report(WipeReport::PAYLOAD_TYPE, &wipe_report()).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    later(&s);
    later(&s);
    let node = s.node("n1");
    assert_eq!(node["state"], "ready", "{node}");
    let (_, reports) = s.call("GET", "/v1/nodes/n1/wipe-reports", None);
    let run = &teardowns(&s)[0];
    let erase = run["history"].as_array().unwrap().iter().find(|h| h["step"] == "erase" && h["result"] == "done");
    let counted = &erase.unwrap_or_else(|| panic!("{run}"))["detail"]["wipeReport"];
    assert_eq!(counted, &reports.as_array().unwrap().last().unwrap()["id"], "the step's own report: {reports}");
}

#[test]
fn drift_found_in_band_by_the_teardowns_ramdisk_quarantines_with_the_drift() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    site(&s, ipmi(&sim), json!({}));
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);
    // Out of band the BMC reads the baseline; in band the machine says otherwise.
    let joined = ramdisk(&s, "firmware");
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory(&[("bmc", "9.07")])).unwrap();
    assert_eq!(receipt.reason.as_deref(), Some("FIRMWARE_DRIFT: bmc: expected 9.08, found 9.07"), "{receipt:?}");
    // The teardown owns the verdict: the node stays releasing until its erase step reads the
    // check and the run quarantines it, in one transaction.
    assert_eq!(s.node("n1")["state"], "releasing");
    later(&s);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["maintenance"].as_bool()), (Some("failed"), Some(true)), "{node}");
    assert_eq!(node["stateReason"], "erase: FIRMWARE_DRIFT: bmc: expected 9.08, found 9.07", "{node}");
    let run = &teardowns(&s)[0];
    assert_eq!(
        (run["status"].as_str(), run["lastError"].as_str()),
        (Some("failed"), Some("FIRMWARE_DRIFT: bmc: expected 9.08, found 9.07")),
        "{run}"
    );
    assert_eq!(s.events("node.tenant-root.quarantined").len(), 1);
    ok(&s, "POST", "/v1/nodes/n1/recover", Value::Null);
}

#[test]
fn a_site_fencing_command_gets_the_node_its_macs_and_its_bmc_and_a_pool_without_baseline_quarantines() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("fenced");
    let command = format!("echo \"$METAL_NODE $METAL_MACS $METAL_BMC_ADDRESS $METAL_ACTION\" > {}", out.display());
    site(&s, ipmi(&sim), json!({"fencing": {"driver": "command", "command": command}, "firmwareBaseline": null}));
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);
    let fenced = std::fs::read_to_string(&out).unwrap();
    let macs: Vec<String> = inventory(&[]).nics.iter().map(|n| n.mac.clone()).collect();
    assert_eq!(fenced.trim(), format!("n1 {} 127.0.0.1:{} fence", macs.join(","), sim.port), "{fenced}");
    let run = &teardowns(&s)[0];
    assert_eq!(
        (step_record(run, "fence")["detail"]["driver"].as_str(), step_record(run, "fence")["detail"]["exit"].as_i64()),
        (Some("command"), Some(0))
    );
    // No baseline to check the machine against: INVALID_CONFIG, quarantined.
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["maintenance"].as_bool()), (Some("failed"), Some(true)), "{node}");
    assert!(
        node["stateReason"].as_str().unwrap().starts_with("firmware: INVALID_CONFIG: pool p1 has no firmwareBaseline"),
        "{node}"
    );
}

#[test]
fn a_failed_lessee_deploy_quarantines_and_recover_runs_the_tenant_root_teardown() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), json!({}));
    let reservation = reserve(&s, json!({"profileId": "acme-os", "profileVersion": 1}));
    s.passes();
    // The deploy fails (the ramdisk says so): the lease fails, the node is quarantined.
    let receipt = metal_tests::leases::deploy_fails(&s, 2);
    assert_eq!(receipt["accepted"], true, "{receipt}");
    later(&s);
    let node = s.node("n1");
    assert_eq!(
        (node["state"].as_str(), node["failedFrom"].as_str(), node["maintenance"].as_bool()),
        (Some("failed"), Some("deploying"), Some(true)),
        "{node}"
    );
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(r["state"], "failed", "{r}");
    assert!(r["stateReason"].as_str().unwrap().starts_with("lease failed: await-deploy"), "{r}");
    assert!(teardowns(&s).is_empty(), "a quarantined node waits for recover");

    // recover: the tenant-root teardown, not the ordinary release.
    ok(&s, "POST", "/v1/nodes/n1/recover", Value::Null);
    s.passes();
    erase_by_ramdisk(&s, &version);
    later(&s);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["identityGeneration"].as_i64()), (Some("ready"), Some(3)), "{node}");
    assert_eq!(teardowns(&s)[0]["definition"], "metal-tenant-root-release@1");
}

/// The last `node.boot.contested` event's data.
fn contest(s: &TestScheduler) -> Value {
    s.events("node.boot.contested").last().unwrap_or_else(|| panic!("no node.boot.contested event"))["data"].clone()
}

#[test]
fn a_host_that_is_not_the_machine_gets_no_token_and_a_second_claim_on_a_deploy_or_an_erase_quarantines() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), json!({}));
    let nothing = |why: &str| {
        let script = intruder_script(&s.url, MAC);
        assert!(!script.contains("token="), "{script}");
        assert!(script.contains(why), "{why}: {script}");
    };

    // The lease start's deploy: before its network boot nobody gets a token (the node is
    // not deploying yet, and once it is, nothing is handed until its boot starts); the machine's
    // installer takes the boot's one token; the other host asking then contests the boot.
    let reservation = reserve(&s, json!({"profileId": "acme-os", "profileVersion": 1}));
    nothing("nothing to run");
    s.passes();
    let (_, script) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    let marker = format!("inst.ks={}/boot/installer/", s.url);
    let at = script.find(&marker).unwrap_or_else(|| panic!("no installer boot: {script}")) + marker.len();
    let install = script[at..].split('/').next().unwrap().to_owned();
    nothing("two ramdisks claimed node n1");
    let event = contest(&s);
    assert_eq!((event["first"].as_str(), event["second"].as_str()), (Some("127.0.0.1"), Some(INTRUDER)), "{event}");
    // Neither gets the seed: the installer's token went with the boot.
    let (status, _) = s.get_text(&format!("/boot/installer/{install}/ks.cfg"));
    assert_eq!(status, 403, "a contested boot's installer token fetches nothing");
    later(&s);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["maintenance"].as_bool()), (Some("failed"), Some(true)), "{node}");
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert!(r["stateReason"].as_str().unwrap().contains("two ramdisks claimed node n1"), "{r}");

    // recover runs the teardown: nothing for anybody until its erase step boots the node;
    // the machine's ramdisk takes that boot, and the other host's request contests it.
    ok(&s, "POST", "/v1/nodes/n1/recover", Value::Null);
    nothing("nothing to run");
    s.passes();
    let joined = ramdisk(&s, "firmware");
    nothing("two ramdisks claimed node n1");
    assert_eq!(s.events("node.boot.contested").len(), 2);
    // The ramdisk's own work still lands; the run fails for the contest and quarantines.
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory(&[("bmc", &version)])).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    later(&s);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["failedFrom"].as_str()), (Some("failed"), Some("releasing")), "{node}");
    let reason = node["stateReason"].as_str().unwrap();
    assert!(reason.starts_with("erase: two ramdisks claimed node n1"), "{reason}");
    assert!(reason.contains(INTRUDER), "{reason}");
    let runs = teardowns(&s);
    assert_eq!(runs[0]["status"], "failed", "{runs:?}");

    // Without the other host the recovered teardown runs clean: one boot for the firmware
    // check, the next armed by its report for the erase, then ready.
    ok(&s, "POST", "/v1/nodes/n1/recover", Value::Null);
    s.passes();
    erase_by_ramdisk(&s, &version);
    later(&s);
    assert_eq!(s.node("n1")["state"], "ready");
    nothing("nothing to run");
    let (_, boots) = s.call("GET", "/v1/nodes/n1/boots", Value::Null.into());
    let ended: Vec<&str> = boots.as_array().unwrap().iter().filter_map(|b| b["ended"].as_str()).collect();
    assert_eq!(ended.iter().filter(|e| **e == "contested").count(), 2, "{boots}");
    assert_eq!(ended[..2], ["its erase is over", "its firmware is over"], "{boots}");
    assert_eq!(boots[0]["armedBy"], format!("erase after the firmware of {}", boots[1]["id"].as_str().unwrap()));
}

/// The network policy of the isolating pool p1: provisioning 10, cleaning 20, tenants 100-101.
fn isolating() -> Value {
    json!({"network": {"provisioningVlan": 10, "cleaningVlan": 20, "tenantVlans": {"first": 100, "last": 101}}})
}

/// Switch tor1 (this Open vSwitch, through `command` when given) with n1's NICs on `ports`,
/// each on the provisioning VLAN as a ready node is.
fn cabled(s: &TestScheduler, ovs: &metal_tests::ovs::Ovs, command: Option<&std::path::Path>, ports: &[(&str, &str)]) {
    let mut switch = json!({"id": "tor1", "driver": "ovs", "address": format!("ovsdb:{}", ovs.db)});
    if let Some(command) = command {
        switch["command"] = json!(command);
    }
    let answer = ok(s, "POST", "/v1/switches", switch);
    assert_eq!(answer["hasSshKey"], false, "{answer}");
    let ports: Vec<Value> =
        ports.iter().map(|(mac, port)| json!({"mac": mac, "switchId": "tor1", "port": port})).collect();
    for port in &ports {
        let name = port["port"].as_str().unwrap();
        if ovs.vsctl(&["--if-exists", "get", "port", name, "name"]).trim().is_empty() {
            continue;
        }
        ovs.vsctl(&["set", "port", name, "tag=10"]);
    }
    let set = ok(s, "PUT", "/v1/nodes/n1/ports", json!({"ports": ports}));
    assert_eq!(set[0]["source"], "operator", "{set}");
}

/// The history record of `step` in `run`.
fn step_record<'a>(run: &'a Value, step: &str) -> &'a Value {
    run["history"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|h| h["step"] == step)
        .unwrap_or_else(|| panic!("no {step}: {run}"))
}

/// The lease-start run of n1.
fn lease_run(s: &TestScheduler) -> Value {
    let runs = s
        .block_on(s.app.store.read(|tx| metal_store::workflows::for_node(tx, "n1", "metal-tenant-root-lease")))
        .unwrap();
    serde_json::to_value(runs.last().unwrap()).unwrap()
}

#[test]
fn an_isolated_lease_moves_its_ports_to_a_tenant_vlan_before_the_os_boots_and_the_teardown_moves_them_back() {
    let sim = IpmiSim::start();
    let ovs = metal_tests::ovs::Ovs::start();
    // Hosts on the switch: n1's NIC (what its OS sends from), the provisioning network's
    // service (an HTTP server standing for the boot service and the API), another machine.
    let machine = ovs.wire("n1-p0", "10.88.0.11/24", 10);
    let service = ovs.wire("svc-p0", "10.88.0.1/24", 10);
    let other = ovs.wire("n2-p0", "10.88.0.12/24", 10);
    let _http = service.serve_http(8080);
    let url = "http://10.88.0.1:8080/";
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), isolating());
    cabled(&s, &ovs, None, &[(MAC, "n1-p0")]);
    assert_eq!(ovs.tag("n1-p0"), Some(10));
    assert!(machine.pings(&service.address) && machine.fetches(url), "a ready machine reaches provisioning");

    // The deploy runs on the provisioning VLAN; then the ports move, then the OS boots.
    let reservation = reserve(&s, json!({"profileId": "acme-os", "profileVersion": 1}));
    s.passes();
    assert_eq!(ovs.tag("n1-p0"), Some(10), "deploying: still on provisioning");
    installer_done(&s.url);
    later(&s);
    assert_eq!(ovs.tag("n1-p0"), Some(100), "the lease's tenant VLAN, read back from OVS");
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(r["state"], "active", "{r}");
    let run = lease_run(&s);
    let moved = &step_record(&run, "network-tenant")["detail"];
    assert_eq!((moved["network"].as_str(), moved["vlan"].as_u64()), (Some("tenant"), Some(100)), "{run}");
    assert_eq!(moved["ports"][0]["before"]["vlan"], 10, "{run}");
    assert_eq!(
        (moved["ports"][0]["after"]["vlan"].as_u64(), moved["ports"][0]["moved"].as_bool()),
        (Some(100), Some(true))
    );
    assert_eq!(step_record(&run, "boot-disk")["detail"]["bootOverride"], "disk (once)", "{run}");
    let ports = ok(&s, "GET", "/v1/nodes/n1/ports", Value::Null);
    assert_eq!((ports[0]["network"].as_str(), ports[0]["vlan"].as_u64()), (Some("tenant"), Some(100)), "{ports}");

    // Leased, the machine reaches nothing on provisioning, and no frame of its crosses.
    let captures = [service.capture_from(&machine.mac), other.capture_from(&machine.mac)];
    for (address, what) in [(&service.address, "the service"), (&other.address, "the other machine")] {
        assert!(!machine.pings(address), "the lessee pinged {what}");
        assert!(!machine.arpings(address), "the lessee's ARP reached {what}");
    }
    assert!(!machine.fetches(url), "the lessee reached the service over HTTP");
    for capture in captures {
        let frames = capture.frames();
        assert!(frames.is_empty(), "frames from the lessee crossed: {frames:?}");
    }
    // ... while the other machine still does, and a capture does see frames that cross.
    let seen = service.capture_from(&other.mac);
    assert!(other.pings(&service.address) && other.arpings(&service.address) && other.fetches(url));
    assert!(!seen.frames().is_empty(), "the capture saw the other machine's frames");

    // The teardown: cleaning right after power-off, before the ramdisk boots.
    ok(&s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    s.passes();
    assert_eq!(ovs.tag("n1-p0"), Some(20), "on the cleaning VLAN while the ramdisk erases");
    let run = &teardowns(&s)[0];
    let cleaning = &step_record(run, "network-cleaning")["detail"];
    assert_eq!((cleaning["vlan"].as_u64(), cleaning["ports"][0]["before"]["vlan"].as_u64()), (Some(20), Some(100)));
    erase_by_ramdisk(&s, &version);
    later(&s);
    later(&s);
    let node = s.node("n1");
    assert_eq!(node["state"], "ready", "{node}");
    assert_eq!(ovs.tag("n1-p0"), Some(10), "back on provisioning before ready");
    assert!(machine.pings(&service.address) && machine.fetches(url), "ready again: it reaches provisioning");
    assert!(machine.pings(&other.address), "and the other machine");
    let run = &teardowns(&s)[0];
    let back = &step_record(run, "network-provisioning")["detail"];
    assert_eq!(
        (back["network"].as_str(), back["ports"][0]["after"]["vlan"].as_u64()),
        (Some("provisioning"), Some(10))
    );
    // The tenant VLAN is free again: the next lease gets it.
    let held = s.block_on(s.app.store.read(|tx| tx.query("SELECT vlan FROM tenant_vlans", &[]))).unwrap();
    assert!(held.is_empty(), "{held:?}");
}

#[test]
fn a_node_without_a_known_port_is_refused_a_lease_in_a_pool_that_isolates() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    site(&s, ipmi(&sim), isolating());
    reserve(&s, json!({"profileId": "acme-os", "profileVersion": 1}));
    s.passes();
    let refused = s.events("node.tenant-root.refused");
    let reason = refused[0]["data"]["reason"].as_str().unwrap();
    assert!(reason.contains("node n1 has no known switch port, and pool p1 isolates its tenants"), "{reason}");
    assert_eq!(s.node("n1")["state"], "ready");
}

/// Runs the passes a failing switch step takes to use up its attempts.
fn until_failed(s: &TestScheduler) {
    for _ in 0..6 {
        later(s);
    }
}

/// A lease on an isolating site whose switch (this OVS, through `command`) fails the port
/// move: the deploy done, the lease-start run failed (the lessee's OS is on the disk, so the
/// node is quarantined and the lease's end runs the teardown). The reservation and the run.
fn lease_start_fails(
    s: &TestScheduler,
    sim: &IpmiSim,
    ovs: &metal_tests::ovs::Ovs,
    command: Option<&std::path::Path>,
    ports: &[(&str, &str)],
) -> (String, Value) {
    site(s, ipmi(sim), isolating());
    cabled(s, ovs, command, ports);
    let reservation = reserve(s, json!({"profileId": "acme-os", "profileVersion": 1}));
    s.passes();
    installer_done(&s.url);
    until_failed(s);
    let run = lease_run(s);
    assert_eq!(run["status"], "failed", "{run}");
    assert_eq!(s.node("n1")["maintenance"], true);
    (reservation, run)
}

#[test]
fn a_switch_that_refuses_a_port_fails_the_lease_with_its_message_and_the_port_it_did_move_is_on_record() {
    let sim = IpmiSim::start();
    let ovs = metal_tests::ovs::Ovs::start();
    ovs.add_port("n1-p0");
    let s = TestScheduler::start(|_| {});
    // The second NIC's port is not on the switch: OVS refuses it.
    let (reservation, run) = lease_start_fails(&s, &sim, &ovs, None, &[(MAC, "n1-p0"), ("52:54:00:00:0a:02", "n1-p1")]);
    let reason = run["lastError"].as_str().unwrap();
    assert!(reason.starts_with("switch tor1 refused: ovs-vsctl: no row \"n1-p1\" in table Port"), "{reason}");
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(r["state"], "failed", "{r}");
    assert!(r["stateReason"].as_str().unwrap().contains("network-tenant: switch tor1 refused"), "{r}");
    // Nothing half-moved without a record: the intent is in the run, and each attempt says
    // which port it had moved (the first) before the switch refused the second.
    assert_eq!(run["context"]["portMove"], json!({"network": "tenant", "vlan": 100}), "{run}");
    let attempt = step_record(&run, "network-tenant");
    assert_eq!(attempt["result"], "failed", "{run}");
    assert_eq!(attempt["detail"]["ports"][0]["port"], "n1-p0", "{run}");
    assert_eq!(attempt["detail"]["ports"][0]["after"]["vlan"], 100, "{run}");
}

#[test]
fn a_switch_that_reads_back_another_tag_fails_the_lease() {
    let sim = IpmiSim::start();
    let ovs = metal_tests::ovs::Ovs::start();
    ovs.add_port("n1-p0");
    let s = TestScheduler::start(|_| {});
    let (_, run) = lease_start_fails(&s, &sim, &ovs, Some(&ovs.lying_vsctl(7)), &[(MAC, "n1-p0")]);
    let reason = run["lastError"].as_str().unwrap();
    assert!(
        reason.starts_with("switch tor1 reads port n1-p0 back on VLAN 7 (access) after it was set to access VLAN 100"),
        "{reason}"
    );
    let attempt = step_record(&run, "network-tenant");
    assert_eq!(attempt["detail"]["ports"][0]["after"], json!({"vlan": 7, "mode": "access"}), "{run}");
    assert_ne!(ovs.tag("n1-p0"), Some(10), "the switch took the commands; its answers are what failed");
}

#[test]
fn an_unreachable_switch_quarantines_the_teardown_with_the_switchs_own_message() {
    let sim = IpmiSim::start();
    let mut ovs = metal_tests::ovs::Ovs::start();
    ovs.add_port("n1-p0");
    let s = TestScheduler::start(|_| {});
    site(&s, ipmi(&sim), isolating());
    cabled(&s, &ovs, None, &[(MAC, "n1-p0")]);
    let reservation = leased_and_deployed(&s);
    ovs.stop_database();
    release(&s, &reservation);
    until_failed(&s);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["failedFrom"].as_str()), (Some("failed"), Some("releasing")), "{node}");
    let reason = node["stateReason"].as_str().unwrap();
    assert!(reason.starts_with("network-cleaning: switch tor1 is unreachable: ovs-vsctl:"), "{reason}");
    assert!(reason.contains("database connection failed"), "{reason}");
    let run = &teardowns(&s)[0];
    assert_eq!(run["context"]["portMove"], json!({"network": "cleaning", "vlan": 20}), "{run}");
    let (status, power) = s.call("GET", "/v1/nodes/n1/power", None);
    assert_eq!((status, power["power"].as_str()), (200, Some("off")), "powered off, and no ramdisk booted: {power}");
}

/// The ramdisk of a virtual-media boot: it asks by the claim its ISO carries, and joins.
fn ramdisk_by_claim(s: &TestScheduler, claim: &str, task: &str) -> controller::Joined {
    ramdisk_asking(s, &format!("claim={claim}&mac={MAC}"), task)
}

#[test]
fn a_teardown_boots_its_ramdisk_from_a_per_boot_iso_that_a_host_naming_the_mac_cannot_take() {
    let sushy = Sushy::start_with_accounts();
    let s = TestScheduler::start(|c| metal_tests::scheduler::with_media(c, &format!("http://{}", c.listen)));
    let bmc = json!({"protocol": "redfish", "address": sushy.endpoint, "username": "admin", "password": SUSHY_PASSWORD,
                     "tls": {"mode": "fingerprint", "value": sushy.pki.fingerprint}});
    // sushy's manager reports its firmware as 1.00 (its readings, before the first, none).
    site(&s, bmc, json!({"firmwareBaseline": {"bmc": "1.00"}}));
    let version = "1.00";
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);

    // The erase step mounted a per-boot ISO: the BMC fetched it from the service, and its
    // script carries the claim (the answers show the URL without it).
    let run = &teardowns(&s)[0];
    assert_eq!(
        run["lastError"],
        "booted the ramdisk to erase every disk (boot 1, from virtual media (a per-boot ISO mounted))"
    );
    assert_eq!(run["context"]["eraseBootPath"], "virtual media (a per-boot ISO mounted)", "{run}");
    let isos = sushy.downloaded("metal.iso");
    assert_eq!(isos.len(), 1, "the BMC downloaded one ISO: {isos:?}");
    let claim = metal_tests::scheduler::claim_in_iso(&std::fs::read(&isos[0]).unwrap()).unwrap();
    assert_eq!(claim.len(), 64, "{claim}");
    let media = ok(&s, "GET", "/v1/nodes/n1/media", Value::Null);
    assert_eq!(media["inserted"], true, "{media}");
    assert!(media["image"].as_str().unwrap().ends_with("/boot/media/(claim)/metal.iso"), "{media}");
    assert!(!media.to_string().contains(&claim), "{media}");
    // The ISO as served is the one the BMC has, and only while its boot is open.
    let iso = format!("/boot/media/{claim}/metal.iso");
    assert_eq!(s.get_bytes(&iso, None), (200, std::fs::read(&isos[0]).unwrap()));
    let descriptor = s.get_bytes(&iso, Some("bytes=32768-32773"));
    assert_eq!(descriptor, (206, b"\x01CD001".to_vec()), "the primary volume descriptor");

    // A host naming the machine's MAC gets nothing, and contests nothing.
    let script = intruder_script(&s.url, MAC);
    assert!(!script.contains("token="), "{script}");
    assert!(script.contains("its boot is from virtual media"), "{script}");
    let guessed = "0".repeat(64);
    let (status, script) = s.get_text(&format!("/boot/ipxe?claim={guessed}&mac={MAC}"));
    assert_eq!(status, 200);
    assert!(script.contains("is over, booting the next device") && !script.contains("token="), "{script}");
    assert_eq!(s.get_bytes(&format!("/boot/media/{guessed}/metal.iso"), None).0, 404);

    // The machine's ramdisk takes the boot by its ISO's claim, checks the firmware in band;
    // its report arms the erase with the same claim (the ISO stays mounted), so its reboot
    // takes that boot from the same ISO.
    let joined = ramdisk_by_claim(&s, &claim, "firmware");
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory(&[("bmc", version)])).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    // Its reboot powers the machine off (as a machine whose reboot ends in the firmware
    // would): the step boots it again from the ISO still mounted, not a new one.
    ok(&s, "POST", "/v1/nodes/n1/power", json!({"action": "off"}));
    later(&s);
    let run = &teardowns(&s)[0];
    let again = "booted the ramdisk to erase every disk (boot 2, from virtual media (the per-boot ISO still mounted))";
    assert_eq!(run["lastError"], again, "{run}");
    assert_eq!(sushy.downloaded("metal.iso").len(), 1, "no second ISO");
    let joined = ramdisk_by_claim(&s, &claim, "erase");
    let receipt = joined.post_report(WipeReport::PAYLOAD_TYPE, &wipe_report()).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    later(&s);
    later(&s);
    let run = &ready_two_generations_later(&s);
    assert!(s.events("node.boot.contested").is_empty(), "a request by MAC contests no media boot");
    let ramdisk_boots = s.events("node.boot.ramdisk");
    let by_media: Vec<_> = ramdisk_boots.iter().rev().take(2).map(|e| e["data"]["byMedia"].clone()).collect();
    assert_eq!(by_media, [json!(true), json!(true)], "{ramdisk_boots:?}");
    let path = &step_record(run, "erase")["detail"]["bootPath"];
    assert_eq!(path, "virtual media (the per-boot ISO still mounted)", "the last boot's: {run}");
    assert_eq!(step_record(run, "clean-up")["detail"]["bootMediaEjected"], true, "{run}");
    assert_eq!(ok(&s, "GET", "/v1/nodes/n1/media", Value::Null)["inserted"], false);
    // Its boot over, the ISO's URL serves nothing and its claim takes nothing.
    assert_eq!(s.get_bytes(&iso, None).0, 404);
    let (_, script) = s.get_text(&format!("/boot/ipxe?claim={claim}&mac={MAC}"));
    assert!(!script.contains("token="), "{script}");
}

/// What the erase boot's ramdisk sends before its wipe report: nothing, or a quote of the
/// machine's TPM (a bare swtpm whose PCRs `log` replays to).
enum Quote<'a> {
    None,
    Of(&'a metal_tests::tpm::Swtpm, &'a [u8]),
}

/// The ramdisk's part of the teardown, the erase boot quoting the TPM first (as metal-boot's
/// init does right after it joins); the wipe report is accepted either way. The quote's
/// refusal, if the scheduler refused it, is returned.
fn attest_and_erase(s: &TestScheduler, version: &str, quote: Quote<'_>) -> Option<String> {
    let joined = ramdisk(s, "firmware");
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory(&[("bmc", version)])).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    let joined = ramdisk(s, "erase");
    let refused = match quote {
        Quote::None => None,
        Quote::Of(swtpm, log) => {
            let mut tpm = metal_boot::tpm::Tpm::new(swtpm.connect());
            match metal_boot::measured::attest(&mut tpm, &joined, log.to_vec()) {
                Ok(receipt) => receipt.reason,
                Err(e) => Some(e),
            }
        }
    };
    let receipt = joined.post_report(WipeReport::PAYLOAD_TYPE, &wipe_report()).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    later(s);
    refused
}

/// n1 quarantined by its last teardown's attest step: the reason.
fn quarantined_by_attest(s: &TestScheduler) -> String {
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["failedFrom"].as_str()), (Some("failed"), Some("releasing")), "{node}");
    assert_eq!((node["tenantRoot"].as_bool(), node["maintenance"].as_bool()), (Some(true), Some(true)), "{node}");
    let run = teardowns(s).pop().unwrap();
    assert_eq!(run["status"], "failed", "{run}");
    let last = run["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!((last["step"].as_str(), last["result"].as_str()), (Some("attest"), Some("failed")), "{run}");
    let reason = node["stateReason"].as_str().unwrap().to_owned();
    assert!(reason.starts_with("attest: measured-boot: "), "{reason}");
    reason
}

/// Recover (a second later, so the new run sorts last): the teardown from its first step to
/// the erase boot.
fn recover(s: &TestScheduler) {
    s.clock.advance(Duration::from_secs(1));
    ok(s, "POST", "/v1/nodes/n1/recover", Value::Null);
    s.passes();
}

/// The id of n1's newest attestation.
fn newest_attestation(s: &TestScheduler) -> String {
    let list = ok(s, "GET", "/v1/nodes/n1/attestations", Value::Null);
    list.as_array().unwrap().last().unwrap()["id"].as_str().unwrap().to_owned()
}

#[test]
fn an_enforcing_pool_quarantines_a_teardown_whose_quote_differs_from_the_approved_baseline_or_is_missing() {
    use metal_tests::tpm::{EV_EFI_PLATFORM_FIRMWARE_BLOB2, Swtpm, empty_event_log, measure};
    let dir = tempfile::tempdir().unwrap();
    let swtpm = Swtpm::fresh(dir.path());
    let mut log = empty_event_log();
    measure(&swtpm, &mut log, 0, EV_EFI_PLATFORM_FIRMWARE_BLOB2, b"firmware volume 1.0");
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), json!({"measuredBoot": {"mode": "enforce"}}));
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);

    // Commissioned before its pool measured boots, the node has no baseline: fail closed.
    assert_eq!(attest_and_erase(&s, &version, Quote::Of(&swtpm, &log)), None);
    let reason = quarantined_by_attest(&s);
    let first = newest_attestation(&s);
    assert!(reason.contains(&format!("no baseline for node n1 to compare attestation {first} with")), "{reason}");
    assert_eq!(s.events("node.tenant-root.quarantined").len(), 1);

    // The operator knows the machine is good and approves its quote; the teardown passes.
    let home = metal_tests::metalctl::home(&dir.path().join("home"), &s.url, &s.admin);
    let table = metal_tests::metalctl::run(&home, &["attest", "approve", "n1", &first]);
    assert!(table.contains("active") && table.contains(&first), "{table}");
    let baseline = ok(&s, "GET", "/v1/nodes/n1/boot-baselines", Value::Null)[0].clone();
    assert!(baseline["learnedBy"].as_str().unwrap().starts_with("approved by credential "), "{baseline}");
    recover(&s);
    assert_eq!(attest_and_erase(&s, &version, Quote::Of(&swtpm, &log)), None);
    let node = s.node("n1");
    assert_eq!(node["state"], "ready", "{node}");
    let run = teardowns(&s).pop().unwrap();
    assert_eq!(metal_tests::leases::history_steps(&run), metal_tests::leases::TEARDOWN_STEPS, "{run}");
    let attested = &step_record(&run, "attest")["detail"];
    assert_eq!((&attested["mode"], &attested["baselines"]), (&json!("enforce"), &json!([baseline["id"]])), "{run}");
    assert_eq!(attested["attestation"], newest_attestation(&s).as_str(), "the erase boot's own quote: {run}");

    // The next tenant's firmware measures something else into PCR 0: quarantined, naming the
    // PCR, the event and the baseline.
    ok(&s, "PATCH", "/v1/nodes/n1", json!({"maintenance": false}));
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);
    measure(&swtpm, &mut log, 0, EV_EFI_PLATFORM_FIRMWARE_BLOB2, b"an implant");
    assert_eq!(attest_and_erase(&s, &version, Quote::Of(&swtpm, &log)), None);
    let reason = quarantined_by_attest(&s);
    let id = baseline["id"].as_str().unwrap();
    assert!(
        reason.ends_with(&format!("PCR 0 differs (event 2, EV_EFI_PLATFORM_FIRMWARE_BLOB2) from baseline {id}")),
        "{reason}"
    );
    // The attestation as an operator sees it: its events, the same comparison, the envelope.
    let differing = newest_attestation(&s);
    let detail = ok(&s, "GET", &format!("/v1/nodes/n1/attestations/{differing}"), Value::Null);
    let types: Vec<(u64, &str)> = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["pcr"].as_u64().unwrap(), e["eventType"].as_str().unwrap()))
        .collect();
    assert_eq!(types, [(0, "EV_EFI_PLATFORM_FIRMWARE_BLOB2"), (0, "EV_EFI_PLATFORM_FIRMWARE_BLOB2")], "{detail}");
    assert_eq!(detail["comparisons"][0]["baselineId"], baseline["id"], "{detail}");
    assert!(reason.ends_with(detail["comparisons"][0]["difference"].as_str().unwrap()), "{detail}");
    assert!(detail["signerCertificate"].as_str().unwrap().starts_with("-----BEGIN CERTIFICATE-----"), "{detail}");
    let (status, envelope) = s.call("GET", &format!("/v1/nodes/n1/attestations/{differing}/envelope"), None);
    assert_eq!((status, envelope["payloadType"].as_str()), (200, Some(AttestationReport::PAYLOAD_TYPE)), "{envelope}");
    // Checked offline with metal-boot, against the approved baseline's own envelope.
    let file = |name: &str, attestation: &str| {
        let file = dir.path().join(name);
        let args = ["attest", "show", "n1", attestation, "--envelope", file.to_str().unwrap()];
        (metal_tests::metalctl::run(&home, &args), file)
    };
    let ((shown, differing), (_, approved)) = (file("differing.json", &differing), file("approved.json", &first));
    assert!(shown.contains(&format!("against the node baseline {id} (PCRs 0,1,2,3,5,6,7): PCR 0 differs")), "{shown}");
    assert_eq!(shown.matches("EV_EFI_PLATFORM_FIRMWARE_BLOB2").count(), 3, "the comparison and two events: {shown}");
    let ca = dir.path().join("site-ca.pem");
    std::fs::write(&ca, s.ca().certificate().pem()).unwrap();
    let tpm_cas = metal_tests::tpm::local_ca_bundle(dir.path(), true);
    let pcrs = metal_boot::measured::FIRMWARE_PCRS;
    let checked = metal_boot::attestation::verify(&differing, &ca, Some(&tpm_cas), Some(&approved), &pcrs).unwrap();
    assert!(checked.summary.contains("signed by:        spiffe://"), "{}", checked.summary);
    assert!(checked.summary.contains("/node/n1/gen/4/ramdisk"), "{}", checked.summary);
    assert!(checked.summary.contains("certifies this EK, chains to CN=swtpm-localca-rootca"), "{}", checked.summary);
    let found = checked.difference.map(|d| d.to_string());
    assert_eq!(found.as_deref(), Some("PCR 0 differs (event 2, EV_EFI_PLATFORM_FIRMWARE_BLOB2)"));
    let cli = |envelope: &std::path::Path, baseline: &std::path::Path| {
        let args = ["metal-boot", "verify-attestation", "--ca", ca.to_str().unwrap(), envelope.to_str().unwrap()];
        let args = [&args[..], &["--baseline", baseline.to_str().unwrap()]].concat();
        metal_boot::cli::run(<metal_boot::cli::Cli as clap::Parser>::try_parse_from(args).unwrap())
    };
    assert_eq!((cli(&differing, &approved), cli(&approved, &approved)), (1, 0), "differs, then matches");
    // A payload changed after signing is refused.
    let mut tampered: Value = serde_json::from_slice(&std::fs::read(&approved).unwrap()).unwrap();
    let payload = tampered["payload"].as_str().unwrap().replacen('A', "B", 1);
    tampered["payload"] = json!(payload);
    std::fs::write(&approved, tampered.to_string()).unwrap();
    let refused = metal_boot::attestation::verify(&approved, &ca, None, None, &pcrs).unwrap_err();
    assert!(
        matches!(&refused, metal_boot::attestation::Failure::Refused(e) if e.contains("the envelope")),
        "{refused:?}"
    );

    // An erase boot that sends no quote is not vouched for by the verified quotes of earlier
    // boots of the same identity generation.
    recover(&s);
    assert_eq!(attest_and_erase(&s, &version, Quote::None), None);
    let reason = quarantined_by_attest(&s);
    assert!(reason.contains("the erase boot sent no attestation"), "{reason}");

    // Another TPM in the machine: its quote is refused, and so is the teardown.
    let other = Swtpm::fresh(&dir.path().join("other"));
    recover(&s);
    let refused = attest_and_erase(&s, &version, Quote::Of(&other, &empty_event_log())).unwrap();
    assert!(refused.contains("differs from the EK node n1 registered"), "{refused}");
    let reason = quarantined_by_attest(&s);
    assert!(reason.contains("refused: ek-differs: the TPM's EK"), "{reason}");
    assert_eq!(s.events("node.tenant-root.quarantined").len(), 4);
    assert_eq!(s.node("n1")["identityGeneration"], 4, "no quarantined teardown handed the node back");
}

#[test]
fn a_learning_pool_relearns_a_differing_quote_refuses_a_revoked_one_and_learns_anew_after_a_retirement() {
    use metal_tests::tpm::{Swtpm, empty_event_log, measure};
    let dir = tempfile::tempdir().unwrap();
    let swtpm = Swtpm::fresh(dir.path());
    let mut log = empty_event_log();
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(&sim), json!({"measuredBoot": {"mode": "learn", "pcrs": [0, 7]}}));
    for round in 0..2 {
        if round == 1 {
            // A firmware update on vetted hardware, in PCR 7 (Secure Boot's databases).
            measure(&swtpm, &mut log, 7, 0x8000_0001, b"db: a new certificate");
        }
        let reservation = leased_and_deployed(&s);
        release(&s, &reservation);
        assert_eq!(attest_and_erase(&s, &version, Quote::Of(&swtpm, &log)), None);
        assert_eq!(s.node("n1")["state"], "ready", "round {round}");
    }
    let learned = s.events("node.boot-baseline.learned");
    assert_eq!(learned.len(), 2, "{learned:?}");
    assert_eq!((&learned[0]["data"]["learnedBy"], &learned[0]["data"]["why"]), (&json!("learn"), &Value::Null));
    let why = learned[1]["data"]["why"].as_str().unwrap();
    assert!(why.starts_with("PCR 7 differs (event 1, EV_EFI_VARIABLE_DRIVER_CONFIG) from baseline mbb-"), "{why}");
    let baselines = ok(&s, "GET", "/v1/nodes/n1/boot-baselines", Value::Null);
    let states: Vec<&str> = baselines.as_array().unwrap().iter().map(|b| b["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["active", "obsolete"], "{baselines}");
    assert_eq!(learned[1]["data"]["replaced"], baselines[1]["id"], "{learned:?}");
    let run = teardowns(&s).pop().unwrap();
    let learned = &step_record(&run, "attest")["detail"]["learned"];
    assert!(learned[0]["difference"].as_str().unwrap().starts_with("PCR 7 differs"), "{run}");

    // The new db certificate turns out to be bad: its baseline is revoked (only the active
    // one retires; a revoked one is not revoked twice).
    let (active, obsolete) = (baselines[0]["id"].as_str().unwrap(), baselines[1]["id"].as_str().unwrap());
    let end = |baseline: &str, verb: &str| {
        let body = json!({"reason": "db certificate withdrawn"});
        s.call("POST", &format!("/v1/nodes/n1/boot-baselines/{baseline}/{verb}"), Some(body))
    };
    let (status, body) = end(obsolete, "retire");
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (409, Some(format!("baseline {obsolete} is obsolete; only active can be retired").as_str())),
        "{body}"
    );
    let (status, body) =
        s.call("POST", &format!("/v1/nodes/n1/boot-baselines/{active}/revoke"), Some(json!({"reason": " "})));
    assert_eq!((status, body["error"]["field"].as_str()), (422, Some("reason")), "{body}");
    let home = metal_tests::metalctl::home(&dir.path().join("home"), &s.url, &s.admin);
    let table =
        metal_tests::metalctl::run(&home, &["attest", "revoke", "n1", active, "--reason", "db certificate withdrawn"]);
    assert!(table.contains("revoked"), "{table}");
    assert_eq!(end(active, "revoke").0, 409, "revoked once");
    let revoked = s.events("node.boot-baseline.revoked");
    assert_eq!((revoked.len(), &revoked[0]["data"]["was"]), (1, &json!("active")), "{revoked:?}");

    // The machine still boots it: even a learning pool refuses the revoked measurements, and
    // an operator cannot approve them back.
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);
    assert_eq!(attest_and_erase(&s, &version, Quote::Of(&swtpm, &log)), None);
    let reason = quarantined_by_attest(&s);
    let repeats = format!("repeats revoked baseline {active} on PCRs 0,7 (revoked by credential ");
    assert!(reason.contains(&repeats) && reason.ends_with(": db certificate withdrawn)"), "{reason}");
    let attestation = newest_attestation(&s);
    let (status, body) = s.call("POST", "/v1/nodes/n1/boot-baselines", Some(json!({"attestationId": attestation})));
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains(&repeats), "{body}");

    // Fixed (another certificate in db): learned again; retiring it leaves the part with
    // no baseline, so the next teardown of the learning pool learns one anew.
    measure(&swtpm, &mut log, 7, 0x8000_0001, b"db: the fixed certificate");
    recover(&s);
    assert_eq!(attest_and_erase(&s, &version, Quote::Of(&swtpm, &log)), None);
    assert_eq!(s.node("n1")["state"], "ready");
    let fixed = ok(&s, "GET", "/v1/nodes/n1/boot-baselines", Value::Null)[0]["id"].as_str().unwrap().to_owned();
    let (status, retired) = end(&fixed, "retire");
    assert_eq!((status, retired["state"].as_str()), (200, Some("retired")), "{retired}");
    assert!(retired["stateReason"].as_str().unwrap().starts_with("retired by credential "), "{retired}");
    ok(&s, "PATCH", "/v1/nodes/n1", json!({"maintenance": false}));
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);
    assert_eq!(attest_and_erase(&s, &version, Quote::Of(&swtpm, &log)), None);
    assert_eq!(s.node("n1")["state"], "ready");
    let baselines = ok(&s, "GET", "/v1/nodes/n1/boot-baselines", Value::Null);
    let states: Vec<&str> = baselines.as_array().unwrap().iter().map(|b| b["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["active", "retired", "revoked", "obsolete"], "{baselines}");
    assert_eq!(
        s.events("node.boot-baseline.learned").last().unwrap()["data"]["why"],
        Value::Null,
        "none to differ from"
    );
}

#[test]
fn a_firmware_no_machine_of_the_profile_was_qualified_on_fails_closed_until_approved_for_the_profile() {
    use metal_tests::tpm::{EV_EFI_PLATFORM_FIRMWARE_BLOB2, Swtpm, empty_event_log, measure};
    const EV_EFI_VARIABLE_BOOT: u32 = 0x8000_0002;
    let dir = tempfile::tempdir().unwrap();
    let swtpm = Swtpm::fresh(dir.path());
    let mut log = empty_event_log();
    measure(&swtpm, &mut log, 0, EV_EFI_PLATFORM_FIRMWARE_BLOB2, b"firmware 9.08");
    measure(&swtpm, &mut log, 1, EV_EFI_VARIABLE_BOOT, b"Boot0001: the NIC");
    let (sim, updated) = (IpmiSim::start(), IpmiSim::start_with_firmware(9, 9));
    let s = TestScheduler::start(|_| {});
    // A vetted pool learns: the node's own PCR 1, and its profile's firmware PCRs at 9.08.
    let policy = json!({"hardwareProfile": "q35", "measuredBoot": {"mode": "learn"}});
    let version = site(&s, ipmi(&sim), policy);
    let reservation = leased_and_deployed(&s);
    release(&s, &reservation);
    assert_eq!(attest_and_erase(&s, &version, Quote::Of(&swtpm, &log)), None);
    assert_eq!(s.node("n1")["state"], "ready");
    let baselines = ok(&s, "GET", "/v1/nodes/n1/boot-baselines", Value::Null);
    let mut scopes: Vec<(&str, Option<&str>)> =
        baselines.as_array().unwrap().iter().map(|b| (b["scope"].as_str().unwrap(), b["firmware"].as_str())).collect();
    scopes.sort_unstable();
    assert_eq!(scopes, [("node", None), ("profile", Some(format!("bmc={version}").as_str()))], "{baselines}");

    // The machine's firmware is updated (its BMC now reports 9.09, its PCR 0 measures the new
    // image) and it moves to an enforcing pool of the same profile that wants that firmware.
    let mut pool = json!({"id": "p2", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated",
                          "policy": {"tenantRoot": true, "hardwareProfile": "q35", "measuredBoot": {"mode": "enforce"}}});
    ok(&s, "PUT", "/v1/nodes/n1/bmc", ipmi(&updated));
    let readings = ok(&s, "GET", "/v1/nodes/n1/bmc/readings", Value::Null);
    let new_version = readings["firmware"]["value"][0]["version"].as_str().unwrap().to_owned();
    assert_ne!(new_version, version);
    pool["policy"]["firmwareBaseline"] = json!({"bmc": new_version});
    ok(&s, "POST", "/v1/pools", pool);
    ok(&s, "POST", "/v1/pools/p2/offers", json!({"tenantId": "acme"}));
    ok(&s, "PATCH", "/v1/nodes/n1", json!({"poolId": "p2"}));
    measure(&swtpm, &mut log, 0, EV_EFI_PLATFORM_FIRMWARE_BLOB2, b"firmware 9.09");
    let body = json!({"tenantId": "acme", "poolId": "p2", "devices": [{"class": "gpu", "count": 1}], "duration": "1d",
                      "binding": "node", "node": {"profileId": "acme-os", "profileVersion": 1}});
    let reservation = ok(&s, "POST", "/v1/reservations", body)["id"].as_str().unwrap().to_owned();
    s.passes();
    installer_done(&s.url);
    later(&s);
    release(&s, &reservation);
    assert_eq!(attest_and_erase(&s, &new_version, Quote::Of(&swtpm, &log)), None);
    let reason = quarantined_by_attest(&s);
    let attestation = newest_attestation(&s);
    assert!(
        reason.contains(&format!(
            "no baseline for hardware profile q35 with firmware bmc={new_version} to compare attestation {attestation} \
             with (qualify the firmware on a reference node)"
        )),
        "{reason}"
    );
    assert!(reason.ends_with("--scope profile"), "{reason}");

    // Qualified for the profile by an operator: the teardown runs again and passes, its node
    // PCR against the node's own baseline, its firmware PCRs against the profile's new one.
    let home = metal_tests::metalctl::home(&dir.path().join("home"), &s.url, &s.admin);
    let table = metal_tests::metalctl::run(&home, &["attest", "approve", "n1", &attestation, "--scope", "profile"]);
    assert!(table.contains("profile") && table.contains(&format!("bmc={new_version}")), "{table}");
    recover(&s);
    assert_eq!(attest_and_erase(&s, &new_version, Quote::Of(&swtpm, &log)), None);
    assert_eq!(s.node("n1")["state"], "ready", "{}", s.node("n1"));
    let run = teardowns(&s).pop().unwrap();
    let matched = step_record(&run, "attest")["detail"]["baselines"].as_array().unwrap().len();
    assert_eq!(matched, 2, "the node's own and the profile's: {run}");
    // The attestation's detail compares it with both, each on its own PCRs.
    let detail = ok(&s, "GET", &format!("/v1/nodes/n1/attestations/{attestation}"), Value::Null);
    let scopes: Vec<&str> =
        detail["comparisons"].as_array().unwrap().iter().map(|c| c["scope"].as_str().unwrap()).collect();
    assert_eq!(scopes, ["node", "profile"], "{detail}");
}
