//! Fixtures of the tenant-root lease tests (loopback and crash tests alike): node n1
//! behind a BMC emulator, commissioned into tenant-root pool p1, tenant acme with an
//! installer profile, a node binding's reservation, and the installed system's "done".

use metal_protocol::InventoryReport;
use serde_json::{Value, json};

use crate::emulators::IpmiSim;
use crate::scheduler::{Admin, TestScheduler};

/// n1's boot MAC.
pub const MAC: &str = "52:54:00:00:0a:01";

/// The golden inventory of n1 with these firmware versions (what its ramdisk reads).
pub fn inventory(firmware: &[(&str, &str)]) -> InventoryReport {
    let mut report: InventoryReport =
        serde_json::from_str(include_str!("../../protocol/tests/golden/inventory-report.json")).unwrap();
    report.node_id = "n1".into();
    for disk in &mut report.disks {
        (disk.removable, disk.read_only) = (false, false);
    }
    report.firmware = firmware
        .iter()
        .map(|(c, v)| metal_protocol::firmware::FirmwareVersion {
            component: (*c).into(),
            version: (*v).into(),
            source: "ipmi".into(),
        })
        .collect();
    report
}

/// An admin call that must succeed; its answer.
pub fn ok(s: &impl Admin, method: &str, path: &str, body: Value) -> Value {
    let (status, answer) = s.call(method, path, Some(body));
    assert!((200..300).contains(&status), "{method} {path}: {status} {answer}");
    answer
}

/// The BMC spec of an ipmi_sim.
pub fn ipmi(sim: &IpmiSim) -> Value {
    json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", sim.port), "username": "admin", "password": "password"})
}

/// Node n1 behind `bmc`, commissioned, in tenant-root pool p1 whose baseline is the BMC's
/// own firmware, with `policy` laid over that; tenant acme with an installer profile.
/// Returns the BMC's firmware version.
pub fn site(s: &impl Admin, bmc: Value, policy: Value) -> String {
    ok(
        s,
        "POST",
        "/v1/nodes",
        json!({"id": "n1", "bootMac": MAC, "devices": [{"id": "gpu0", "class": "gpu", "healthy": true}]}),
    );
    ok(s, "PUT", "/v1/nodes/n1/bmc", bmc);
    let readings = ok(s, "GET", "/v1/nodes/n1/bmc/readings", Value::Null);
    let version = readings["firmware"]["value"]
        .as_array()
        .and_then(|f| f.iter().find(|c| c["id"] == "bmc"))
        .and_then(|f| f["version"].as_str())
        .unwrap_or("none reported")
        .to_owned();
    let mut full = json!({"tenantRoot": true, "firmwareBaseline": {"bmc": version}});
    for (k, v) in policy.as_object().unwrap() {
        full[k] = v.clone();
    }
    ok(
        s,
        "POST",
        "/v1/pools",
        json!({"id": "p1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated", "policy": full}),
    );
    ok(s, "PATCH", "/v1/nodes/n1", json!({"poolId": "p1"}));
    s.walk("n1", &["new", "commissioning"]);
    let found = inventory(&[("bmc", &version)]);
    let receipt = s.reporter().post(metal_protocol::Role::Ramdisk, "n1", 1, InventoryReport::PAYLOAD_TYPE, &found);
    assert_eq!(receipt["accepted"], true, "{receipt}");
    assert_eq!(s.node("n1")["state"], "ready");
    ok(s, "POST", "/v1/tenants", json!({"id": "acme"}));
    ok(s, "POST", "/v1/pools/p1/offers", json!({"tenantId": "acme"}));
    ok(
        s,
        "POST",
        "/v1/profiles",
        json!({
        "id": "acme-os", "tenantId": "acme", "deployMode": "installer", "adminUser": "ops", "role": "lessee",
        "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"],
        "installer": {"kind": "kickstart", "kernelUrl": "http://mirror.site-a/os/vmlinuz",
                      "initrdUrl": "http://mirror.site-a/os/initrd", "sourceUrl": "http://mirror.site-a/os/tree"}}),
    );
    version
}

/// Reserves n1's pool for acme as a node binding with `node` (profile, version).
pub fn reserve(s: &impl Admin, node: Value) -> String {
    let body = json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 1}], "duration": "1d",
                      "binding": "node", "node": node});
    ok(s, "POST", "/v1/reservations", body)["id"].as_str().unwrap().to_owned()
}

/// The installed system's "done", once the lessee's deploy is under way on a service that
/// runs its own passes: n1 deploying and its network boot started (a boot armed for it; the
/// node moves to deploying a step before the boot is armed). Returns the installer's token.
pub fn deploy_done(s: &impl Admin, url: &str) -> String {
    s.until("the deploy under way", "/v1/nodes/n1", |n| n["state"] == "deploying");
    s.until("the deploy's boot started", "/v1/nodes/n1/boots", |boots| {
        boots[0]["id"].is_string() && boots[0]["ended"].is_null() && boots[0]["handedTo"].is_null()
    });
    installer_done(url)
}

/// The installed system's "done": the installer URL in n1's iPXE script, then its POST.
/// `url` is the service's API base. Returns the installer's token.
pub fn installer_done(url: &str) -> String {
    let http = reqwest::blocking::Client::new();
    let script = http.get(format!("{url}/boot/ipxe?mac={MAC}")).send().unwrap().text().unwrap();
    let marker = format!("inst.ks={url}/boot/installer/");
    let start = script.find(&marker).unwrap_or_else(|| panic!("no installer boot: {script}")) + marker.len();
    let token = script[start..].split('/').next().unwrap();
    let done = http.post(format!("{url}/boot/installer/{token}/done")).send().unwrap();
    assert_eq!(done.status(), 204);
    token.to_owned()
}

/// The ramdisk of n1's identity generation `generation` says its deploy failed; the
/// service's receipt.
pub fn deploy_fails(s: &TestScheduler, generation: u64) -> Value {
    let failed = metal_protocol::boot::TaskReport {
        node_id: "n1".into(),
        task: "deploy".into(),
        ok: false,
        detail: "the target disk is gone".into(),
        finished_at: time::OffsetDateTime::now_utc(),
    };
    let payload = metal_protocol::boot::TaskReport::PAYLOAD_TYPE;
    s.post_report_as(metal_protocol::Role::Ramdisk, "n1", generation, payload, &failed)
}

/// Advances the clock past a waiting step's poll and runs a pass.
pub fn later(s: &TestScheduler) {
    s.clock.advance(std::time::Duration::from_secs(11));
    s.passes();
}

/// Leases n1 (`site`'s) to acme and deploys it (the installer's done), bound and active;
/// returns the reservation.
pub fn leased_and_deployed(s: &TestScheduler) -> String {
    leased_and_deployed_with(s, 1)
}

/// [`leased_and_deployed`] with `version` of acme's profile.
pub fn leased_and_deployed_with(s: &TestScheduler, version: u32) -> String {
    let reservation = reserve(s, json!({"profileId": "acme-os", "profileVersion": version}));
    s.passes();
    installer_done(&s.url);
    later(s);
    let (_, r) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    let node = s.node("n1");
    let runs = s.block_on(s.app.store.read(|tx| metal_store::workflows::for_node(tx, "n1", ""))).unwrap();
    assert_eq!(r["state"], "active", "{r}\n{node}\n{runs:?}");
    reservation
}

/// The golden wipe report of n1 (every inventoried disk erased and verified).
pub fn wipe_report() -> metal_protocol::WipeReport {
    let mut wipe: metal_protocol::WipeReport =
        serde_json::from_str(include_str!("../../protocol/tests/golden/wipe-report.json")).unwrap();
    wipe.node_id = "n1".into();
    wipe
}

/// Every step of an agent pool's teardown, in order: what a clean run's history lists.
pub const TEARDOWN_STEPS: [&str; 13] = [
    "power-off",
    "network-cleaning",
    "fence",
    "rotate-credential",
    "eject-media",
    "firmware",
    "bios-reset",
    "erase",
    "attest",
    "bios-verify",
    "clean-up",
    "network-provisioning",
    "exit-tenant-root",
];

/// Every step of an agentless pool's teardown, in order.
pub const AGENTLESS_TEARDOWN_STEPS: [&str; 8] = [
    "power-off",
    "network-cleaning",
    "fence",
    "rotate-credential",
    "eject-media",
    "firmware",
    "network-provisioning",
    "exit-tenant-root",
];

/// The steps of a run's history (`GET .../teardowns`), in order.
pub fn history_steps(run: &Value) -> Vec<&str> {
    run["history"].as_array().map(|h| h.iter().filter_map(|h| h["step"].as_str()).collect()).unwrap_or_default()
}

/// The `done` records of a run's history, in order: against a real BMC a step may be
/// retried (an answer lost while the machine powers off), and each retry is on record with
/// its error, but every step is done exactly once.
pub fn done_records(run: &Value) -> Vec<&Value> {
    run["history"].as_array().map(|h| h.iter().filter(|h| h["result"] == "done").collect()).unwrap_or_default()
}
