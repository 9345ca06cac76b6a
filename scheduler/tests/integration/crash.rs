//! Crash safety of the tenant-root workflows with the real service process: a lease on an
//! agentless pool (every step driven through ipmi_sim) is run by `metal-scheduler serve`
//! started with `METAL_TEST_CRASH_AT`, which aborts the process (as `kill -9` would) at
//! every step boundary in turn and inside the BMC rotation, after the BMC took the new
//! password and before it was stored. Each time the service is started again on the same
//! data and picks up where the dead one was. The run ends as it would have: one teardown,
//! every step done once, the rotation recovered (not repeated), no meter lost or doubled.
//! Then the same with two replicas at once, one of them dying mid-run; and the agent
//! variant killed (SIGKILL, then the hook) around its erase while the ramdisk reports. And in
//! a pool that isolates tenants on a real Open vSwitch, killed between each port move and its
//! record, in both directions.

use std::os::unix::process::ExitStatusExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use metal_tests::emulators::IpmiSim;
use metal_tests::leases::{ipmi, reserve, site};
use metal_tests::scheduler::{Admin as _, TestScheduler};
use metal_tests::served::ServedAdmin;
use serde_json::{Value, json};

/// `metal-scheduler serve` on `dir` (and `database`), polling its workflows every
/// `interval`, aborting at `crash_at` when given.
fn start(dir: &Path, database: Option<&str>, crash_at: Option<&str>, interval: &str) -> ServedAdmin {
    start_claiming(dir, database, crash_at, interval, "2s")
}

/// [`start`], its workflow claims lasting `claim`.
fn start_claiming(
    dir: &Path,
    database: Option<&str>,
    crash_at: Option<&str>,
    interval: &str,
    claim: &str,
) -> ServedAdmin {
    let make = |boot: u16| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir)
            .env("METAL_LOG", "info")
            .env("METAL_WORKFLOW_INTERVAL", interval)
            .env("METAL_WORKFLOW_CLAIM", claim)
            .env("METAL_REAPER_INTERVAL", "200ms")
            .env("METAL_BOOT_LISTEN", format!("127.0.0.1:{boot}"))
            .env("METAL_BOOT_CONTROLLER_URL", format!("https://127.0.0.1:{boot}"))
            .env_remove("METAL_TEST_CRASH_AT");
        if let Some(url) = database {
            command.env("METAL_DATABASE_URL", url);
        }
        if let Some(point) = crash_at {
            command.env("METAL_TEST_CRASH_AT", point);
        }
        command
    };
    ServedAdmin::start(make, dir)
}

/// Waits for the process to abort at its crash point.
fn crashed(mut service: ServedAdmin, point: &str) {
    let until = Instant::now() + Duration::from_secs(90);
    while Instant::now() < until {
        if let Some(status) = service.served.try_wait() {
            assert_eq!(status.signal(), Some(libc::SIGABRT), "{point}: {status:?}\n{}", service.context());
            let log = service.served.log();
            assert!(log.iter().any(|l| l.contains("test-crash-at: aborting")), "{point}: {}", log.join("\n"));
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the service never reached {point}:\n{}", service.context());
}

/// Every crash point of the lease start and the agentless teardown, in the order reached.
const POINTS: [&str; 17] = [
    "network-boot:before",
    "network-boot:after",
    "await-deploy:before",
    "await-deploy:after",
    "power-off:before",
    "power-off:after",
    "fence:before",
    "fence:after",
    "rotate-credential:before",
    "rotate-credential:acted",
    "rotate-credential:after",
    "eject-media:before",
    "eject-media:after",
    "firmware:before",
    "firmware:after",
    "exit-tenant-root:before",
    "exit-tenant-root:after",
];

/// An agentless pool's policy: its teardown has no erase.
fn agentless() -> Value {
    json!({"agent": "none", "allowUnverifiedRelease": true, "fencing": {"driver": "none"}})
}

/// A leased node's reservation in a pool with `policy`, prepared by an in-process service
/// that is then stopped: its data directory (and database), the reservation id and the
/// BMC's firmware version.
fn prepared(sim: &IpmiSim, policy: Value) -> (tempfile::TempDir, Option<String>, String, String) {
    prepared_with(sim, policy, |_| {})
}

/// [`prepared`], with `setup` run on the site before the reservation.
fn prepared_with(
    sim: &IpmiSim,
    policy: Value,
    setup: impl FnOnce(&TestScheduler),
) -> (tempfile::TempDir, Option<String>, String, String) {
    let s = TestScheduler::start(|_| {});
    let version = site(&s, ipmi(sim), policy);
    setup(&s);
    let reservation = reserve(&s, json!({"profileId": "acme-os", "profileVersion": 1}));
    let (dir, database) = s.kill();
    (dir, database, reservation, version)
}

/// What must hold once the lease and its teardown ended, however often the service died.
fn ended_as_it_would_have(service: &ServedAdmin, reservation: &str, expected: &[&str]) {
    let node = service.until("the node back in ready", "/v1/nodes/n1", |n| n["state"] == "ready");
    assert_eq!((node["identityGeneration"].as_i64(), node["trust"].as_str()), (Some(3), Some("platform")), "{node}");
    let (_, runs) = service.call("GET", "/v1/nodes/n1/teardowns", None);
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 1, "one teardown: {runs:?}");
    assert_eq!(runs[0]["status"], "succeeded", "{}", runs[0]);
    let history = runs[0]["history"].as_array().unwrap();
    let steps: Vec<&str> = history.iter().map(|h| h["step"].as_str().unwrap()).collect();
    assert_eq!(steps, expected, "every step done once");
    assert!(history.iter().all(|h| h["result"] == "done"), "{history:?}");
    let (_, bmc) = service.call("GET", "/v1/nodes/n1/bmc", None);
    assert_eq!(bmc["generation"], 2, "the credential was promoted once: {bmc}");
    let (status, power) = service.call("GET", "/v1/nodes/n1/power", None);
    assert_eq!(status, 200, "the stored credential logs in: {power}");

    // Billing: exactly the bound time, from the lease's bind to its release.
    let (_, events) = service.call("GET", "/v1/events?after=0", None);
    let at = |kind: &str| {
        let event = events["events"].as_array().unwrap().iter().find(|e| e["kind"] == kind).cloned();
        let text = event.unwrap_or_else(|| panic!("no {kind}"))["at"].as_str().unwrap().to_owned();
        time::OffsetDateTime::parse(&text, &time::format_description::well_known::Rfc3339).unwrap()
    };
    let bound = (at("reservation.ended") - at("reservation.active")).as_seconds_f64() / 3600.0;
    let usage = service.until("the meter rows", "/v1/usage?tenantId=acme", |u| {
        u["totals"]["node.metal.hours"].as_f64().is_some_and(|h| (h - bound).abs() < 1e-6)
    });
    let ids: Vec<&str> = usage["records"].as_array().unwrap().iter().map(|r| r["id"].as_str().unwrap()).collect();
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!(ids, unique, "no meter row twice");
    let (_, all) = service.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(all["state"], "ended", "{all}");
}

#[test]
fn killed_at_every_step_boundary_and_inside_the_rotation_the_lease_ends_as_it_would_have() {
    let sim = IpmiSim::start();
    let (dir, database, reservation, _) = prepared(&sim, agentless());
    for point in POINTS {
        let in_rotation = point == "rotate-credential:acted";
        // Inside the rotation the dead process's claim holds the run a while, long enough to
        // call the BMC in the window where it has the new password and the store the old.
        let claim = if in_rotation { "8s" } else { "2s" };
        let service = start_claiming(dir.path(), database.as_deref(), Some(point), "100ms", claim);
        match point {
            "await-deploy:after" => deploy(&service),
            "power-off:before" => release_when_bound(&service, &reservation),
            _ => {}
        }
        crashed(service, point);
        if in_rotation {
            a_call_in_the_rotation_window_logs_in_with_the_pending_secret(dir.path(), database.as_deref());
        }
    }
    let service = start(dir.path(), database.as_deref(), None, "100ms");
    ended_as_it_would_have(&service, &reservation, &metal_tests::leases::AGENTLESS_TEARDOWN_STEPS);
    let (_, runs) = service.call("GET", "/v1/nodes/n1/teardowns", None);
    let rotation = &runs[0]["history"][3]["detail"];
    assert_eq!(
        rotation["recovered"], "a rotation was in flight; the new credential logs in",
        "not rotated twice: {rotation}"
    );
}

/// While the BMC has the new password and the store still the old one as current (the new
/// one pending, the run held by a dead process's claim), an operator's power read still
/// logs in: it finds the pending secret when the BMC refuses the current one. An operator's
/// rotation is refused: the run's pending secret is the BMC's password, and a second rotation
/// would replace it in the store.
fn a_call_in_the_rotation_window_logs_in_with_the_pending_secret(dir: &Path, database: Option<&str>) {
    let service = start(dir, database, None, "1h");
    let (_, bmc) = service.call("GET", "/v1/nodes/n1/bmc", None);
    let (status, power) = service.call("GET", "/v1/nodes/n1/power", None);
    let rotate = json!({"password": "Operator-Rotated-1"});
    let (refused, why) = service.call("POST", "/v1/nodes/n1/bmc/rotate", Some(rotate));
    let (_, after) = service.call("GET", "/v1/nodes/n1/bmc", None);
    assert_eq!((&bmc["generation"], &after["generation"]), (&json!(1), &json!(1)), "still inside the window");
    assert_eq!(status, 200, "the pending secret logs in: {power}");
    assert_eq!(refused, 409, "{why}");
    assert!(why["error"]["message"].as_str().is_some_and(|m| m.contains("rotate it after the run ends")), "{why}");
    let (status, power) = service.call("GET", "/v1/nodes/n1/power", None);
    assert_eq!(status, 200, "the run's pending secret is still the one that logs in: {power}");
}

#[test]
fn a_replica_killed_mid_run_is_taken_over_by_the_other() {
    let sim = IpmiSim::start();
    let (dir, database, reservation, _) = prepared(&sim, agentless());
    // The second replica: its own data directory with the same CA and admin token.
    let other = tempfile::tempdir().unwrap();
    std::fs::copy(dir.path().join("admin.token"), other.path().join("admin.token")).unwrap();
    metal_tests::scheduler::copy_dir(&dir.path().join("ca"), &other.path().join("ca"));
    let database = database.unwrap_or_else(|| metal_store::Store::sqlite_url(dir.path()));
    // The first replica polls often and dies at the fence step; the second polls slower,
    // so the first one gets the run, and takes it over once the dead one's claim lapses.
    let first = start(dir.path(), Some(&database), Some("fence:before"), "100ms");
    let second = start(other.path(), Some(&database), None, "1s");
    deploy(&second);
    release_when_bound(&second, &reservation);
    crashed(first, "fence:before");
    ended_as_it_would_have(&second, &reservation, &metal_tests::leases::AGENTLESS_TEARDOWN_STEPS);
}

/// The installed system's "done", once the lessee's deploy is under way.
fn deploy(service: &ServedAdmin) {
    metal_tests::leases::deploy_done(service, &service.url);
}

/// Releases the lease once it is bound.
fn release_when_bound(service: &ServedAdmin, reservation: &str) {
    let path = format!("/v1/reservations/{reservation}");
    service.until("the lease bound", &path, |r| r["state"] == "active");
    let (status, body) = service.call("POST", &format!("{path}/release"), None);
    assert_eq!(status, 200, "{body}");
}

/// Deploys and releases the lease, and returns when the teardown's erase step has booted the
/// ramdisk.
fn released_until_the_erase(service: &ServedAdmin, reservation: &str) {
    deploy(service);
    release_when_bound(service, reservation);
    service.until("the ramdisk booted to erase", "/v1/nodes/n1/teardowns", |runs| {
        let index = runs[0]["stepIndex"].as_u64().and_then(|i| usize::try_from(i).ok());
        index.is_some_and(|i| runs[0]["steps"][i]["name"] == "erase")
            && runs[0]["lastError"].as_str().is_some_and(|e| e.starts_with("booted the ramdisk to erase every disk"))
    });
}

#[test]
fn killed_around_the_erase_the_agent_teardown_boots_the_ramdisk_once_and_ends_as_it_would_have() {
    let sim = IpmiSim::start();
    let (dir, database, reservation, version) = prepared(&sim, json!({"fencing": {"driver": "none"}}));
    // Up to the erase without a crash, then SIGKILL while the ramdisk erases.
    let service = start(dir.path(), database.as_deref(), None, "100ms");
    released_until_the_erase(&service, &reservation);
    drop(service);
    for point in [
        "erase:before",
        "erase:after",
        "clean-up:before",
        "clean-up:after",
        "exit-tenant-root:before",
        "exit-tenant-root:after",
    ] {
        let service = start(dir.path(), database.as_deref(), Some(point), "100ms");
        if point == "clean-up:before" {
            // The ramdisk's part, while the service polls: the in-band check in the boot the
            // erase step started, then the wipe report in the boot that check's report armed.
            let reporter = metal_tests::scheduler::Reporter::of(dir.path(), &service.boot_url);
            let found = metal_tests::leases::inventory(&[("bmc", &version)]);
            let firmware = reporter.ramdisk(&service.url, metal_tests::leases::MAC);
            let receipt = firmware.post(metal_protocol::InventoryReport::PAYLOAD_TYPE, &found);
            assert_eq!(receipt["accepted"], true, "{receipt}");
            let erase = reporter.ramdisk(&service.url, metal_tests::leases::MAC);
            let receipt = erase.post(metal_protocol::WipeReport::PAYLOAD_TYPE, &metal_tests::leases::wipe_report());
            assert_eq!(receipt["accepted"], true, "{receipt}");
        }
        crashed(service, point);
    }
    let service = start(dir.path(), database.as_deref(), None, "100ms");
    let steps = metal_tests::leases::TEARDOWN_STEPS;
    ended_as_it_would_have(&service, &reservation, &steps);
    let (_, runs) = service.call("GET", "/v1/nodes/n1/teardowns", None);
    assert_eq!(runs[0]["context"]["eraseBoots"], 1, "the ramdisk was booted once across the crashes: {}", runs[0]);
}

#[test]
fn killed_between_each_port_move_and_its_record_the_step_reads_the_ports_back_and_finishes() {
    let sim = IpmiSim::start();
    let ovs = metal_tests::ovs::Ovs::start();
    ovs.add_port("n1-p0");
    ovs.vsctl(&["set", "port", "n1-p0", "tag=10"]);
    let mut policy = agentless();
    policy["network"] = json!({"provisioningVlan": 10, "cleaningVlan": 20, "tenantVlans": {"first": 100, "last": 100}});
    let (dir, database, reservation, _) = prepared_with(&sim, policy, |s| {
        let switch = json!({"id": "tor1", "driver": "ovs", "address": format!("ovsdb:{}", ovs.db)});
        assert_eq!(s.call("POST", "/v1/switches", Some(switch)).0, 201);
        let ports = json!({"ports": [{"mac": metal_tests::leases::MAC, "switchId": "tor1", "port": "n1-p0"}]});
        assert_eq!(s.call("PUT", "/v1/nodes/n1/ports", Some(ports)).0, 200);
    });
    // Each time the switch has moved the port and the service dies before its verdict.
    for (point, vlan) in
        [("network-tenant:moved", 100), ("network-cleaning:moved", 20), ("network-provisioning:moved", 10)]
    {
        let service = start(dir.path(), database.as_deref(), Some(point), "100ms");
        match point {
            "network-tenant:moved" => deploy(&service),
            "network-cleaning:moved" => release_when_bound(&service, &reservation),
            _ => {}
        }
        crashed(service, point);
        assert_eq!(ovs.tag("n1-p0"), Some(vlan), "{point}: the switch moved the port");
    }
    let service = start(dir.path(), database.as_deref(), None, "100ms");
    ended_as_it_would_have(&service, &reservation, &metal_tests::leases::AGENTLESS_TEARDOWN_STEPS);
    assert_eq!(ovs.tag("n1-p0"), Some(10));
    // After each restart the step read the port back on its VLAN and recorded it, moving nothing.
    let (_, runs) = service.call("GET", "/v1/nodes/n1/teardowns", None);
    for (step, vlan) in [("network-cleaning", 20), ("network-provisioning", 10)] {
        let record = runs[0]["history"].as_array().unwrap().iter().find(|h| h["step"] == step).unwrap();
        let port = &record["detail"]["ports"][0];
        assert_eq!((port["after"]["vlan"].as_u64(), port["moved"].as_bool()), (Some(vlan), Some(false)), "{record}");
    }
    let (_, ports) = service.call("GET", "/v1/nodes/n1/ports", None);
    assert_eq!((ports[0]["network"].as_str(), ports[0]["vlan"].as_u64()), (Some("provisioning"), Some(10)), "{ports}");
}
