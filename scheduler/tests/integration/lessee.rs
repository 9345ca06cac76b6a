//! The lessee's hands on loopback: a tenant member's token sees the node of its live
//! dedicated-root lease (and nothing of the platform), power-cycles it through ipmi_sim,
//! opens its serial console over the WebSocket and over the SSH gateway (OpenSSH's own
//! `ssh`, with a key of the lease's profile) and reads the machine's answer, and is held to
//! one writer at a time and to the per-lease rate limit; a key the tenant registers reaches
//! the console too. Another tenant's token, an
//! admin-only route, a key that is not the lease's, an ended lease and a deleted tenant are
//! each refused with their documented answer, nothing changes, and the refusals are
//! audited. The lease ending closes the open console with a last line that says why.

use std::time::{Duration, Instant};

use metal_tests::console::{Ssh, open_console, read_console, ssh_key};
use metal_tests::emulators::{IpmiSim, answer_on_serial_line};
use metal_tests::leases::{ipmi, leased_and_deployed_with, ok, site};
use metal_tests::scheduler::{Admin as _, TestScheduler};
use metal_types::model::workflow::RunStatus;
use serde_json::{Value, json};

/// A tenant member's token and its credential id.
fn member(s: &TestScheduler, tenant: &str) -> (String, String) {
    let created = ok(s, "POST", "/v1/credentials", json!({"role": "tenant-member", "tenantId": tenant, "name": "ops"}));
    (created["token"].as_str().unwrap().to_owned(), created["id"].as_str().unwrap().to_owned())
}

#[test]
fn a_lessee_sees_powers_and_opens_the_console_of_its_leased_machine_and_of_nothing_else() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|config| config.lessee_rate_per_minute = 8);
    s.block_on(answer_on_serial_line(sim.serial_port, b"hello", b"hi there\r\n"));
    site(&s, ipmi(&sim), json!({}));
    let (acme, acme_id) = member(&s, "acme");
    ok(&s, "POST", "/v1/tenants", json!({"id": "globex"}));
    let (globex, globex_id) = member(&s, "globex");
    let (status, body) = s.call_as(&acme, "GET", "/v1/nodes/n1", None);
    assert_eq!(status, 404, "a ready node is nobody's: {body}");

    // The lease deploys a version of acme's profile that carries the lessee's own key.
    let keys = tempfile::tempdir().unwrap();
    let ((lessee_key, lessee_public), (stranger_key, stranger_public)) =
        (ssh_key(keys.path(), "lessee"), ssh_key(keys.path(), "stranger"));
    let (_, profile) = s.call("GET", "/v1/profiles/acme-os", None);
    let mut v2 = profile["versions"][0]["spec"].clone();
    v2["sshAuthorizedKeys"] = json!([lessee_public]);
    ok(&s, "POST", "/v1/profiles/acme-os/versions", v2);
    let reservation = leased_and_deployed_with(&s, 2);

    // The lessee's view: what is theirs, nothing of the platform.
    let (status, view) = s.call_as(&acme, "GET", "/v1/nodes/n1", None);
    assert_eq!(status, 200, "{view}");
    let mut fields: Vec<&str> = view.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "devices",
            "events",
            "id",
            "leaseEnd",
            "leaseStart",
            "leaseState",
            "power",
            "profileId",
            "profileVersion",
            "reservationId",
            "state"
        ],
        "{view}"
    );
    assert_eq!(
        (view["state"].as_str(), view["reservationId"].as_str()),
        (Some("deployed"), Some(reservation.as_str()))
    );
    assert_eq!((view["profileId"].as_str(), view["profileVersion"].as_i64()), (Some("acme-os"), Some(2)), "{view}");
    let text = view.to_string();
    assert!(!text.contains(&sim.port.to_string()) && !text.contains("password"), "no BMC in the view: {text}");
    let (_, admin_view) = s.call("GET", "/v1/nodes/n1", None);
    assert_eq!(admin_view["bootMac"], metal_tests::leases::MAC, "an admin keeps the whole record: {admin_view}");
    let (_, leases) = s.call_as(&acme, "GET", "/v1/leases", None);
    assert_eq!(leases.as_array().map(|l| l.iter().map(|n| n["id"].clone()).collect()), Some(vec![json!("n1")]));
    assert_eq!(s.call_as(&globex, "GET", "/v1/leases", None).1, json!([]));

    // Power through the platform's BMC session, recorded on the node and the lease.
    let (status, cycled) = s.call_as(&acme, "POST", "/v1/nodes/n1/power", Some(json!({"action": "off"})));
    assert_eq!((status, cycled["after"].as_str()), (200, Some("off")), "{cycled}");
    let (status, power) = s.call_as(&acme, "GET", "/v1/nodes/n1/power", None);
    assert_eq!((status, power["power"].as_str()), (200, Some("off")), "{power}");
    let (status, on) = s.call_as(&acme, "POST", "/v1/nodes/n1/power", Some(json!({"action": "on"})));
    assert_eq!((status, on["after"].as_str()), (200, Some("on")), "{on}");
    let powered = s.events("lessee.power");
    let subjects: Vec<&str> = powered.iter().filter_map(|e| e["subject"].as_str()).collect();
    let on_lease = format!("reservation/{reservation}");
    assert_eq!(subjects, ["node/n1", on_lease.as_str(), "node/n1", on_lease.as_str()], "{powered:?}");
    assert!(powered.iter().all(|e| e["data"]["credential"] == acme_id.as_str() && e["tenantId"] == "acme"));
    let (_, view) = s.call_as(&acme, "GET", "/v1/nodes/n1", None);
    assert_eq!(view["events"][0]["kind"], "lessee.power", "the lessee's own events: {view}");

    // Another tenant, and the admin-only routes: refused as if the node were not there,
    // nothing done, every refusal audited.
    for (token, method, path, body) in [
        (&globex, "GET", "/v1/nodes/n1", None),
        (&globex, "POST", "/v1/nodes/n1/power", Some(json!({"action": "off"}))),
        (&acme, "GET", "/v1/nodes/n1/bmc", None),
        (&acme, "GET", "/v1/nodes/n1/bmc/readings", None),
        (&acme, "POST", "/v1/nodes/n1/boot", Some(json!({"target": "pxe"}))),
        (&acme, "PATCH", "/v1/nodes/n1", Some(json!({"maintenance": true}))),
    ] {
        let (status, body) = s.call_as(token, method, path, body);
        assert_eq!(status, 404, "{method} {path}: {body}");
    }
    assert_eq!(s.call_as(&acme, "GET", "/v1/nodes/n1/power", None).1["power"], "on", "still on");
    let node = s.node("n1");
    assert_eq!((node["maintenance"].as_bool(), node["state"].as_str()), (Some(false), Some("deployed")), "{node}");
    let refused = s.events("lessee.refused");
    let audited: Vec<(&str, &str, i64)> = refused
        .iter()
        .map(|e| {
            (
                e["data"]["credential"].as_str().unwrap(),
                e["data"]["request"].as_str().unwrap(),
                e["data"]["status"].as_i64().unwrap(),
            )
        })
        .collect();
    assert!(audited.contains(&(globex_id.as_str(), "POST /v1/nodes/n1/power", 404)), "{audited:?}");
    assert!(audited.contains(&(acme_id.as_str(), "PATCH /v1/nodes/n1", 404)), "{audited:?}");
    assert!(refused.iter().all(|e| e["subject"] == "node/n1"), "{refused:?}");

    // The serial console: the machine answers through it; one writer at a time.
    let mut console = open_console(&s, "n1", &acme).unwrap();
    let seen = read_console(&s, &mut console, Some("hello\r"), "hi there", Duration::from_secs(20));
    assert!(seen.contains("hi there"), "no answer through the lessee's console: {seen:?}");
    let second = open_console(&s, "n1", &acme).unwrap_err();
    assert!(second.contains("409"), "{second}");
    let other = open_console(&s, "n1", &globex).unwrap_err();
    assert!(other.contains("404"), "{other}");

    // Over SSH: one writer at a time there too, a key that is not the lease's gets nothing,
    // and once the WebSocket closed the lessee's key lands on the console.
    let mut busy = Ssh::start(&s, &reservation, &lessee_key);
    let printed = busy.until(None, "one writer at a time", Duration::from_secs(15));
    assert!(printed.contains("metal: node n1's console is open"), "{printed:?}");
    assert!(busy.exits(Duration::from_secs(10)), "{printed:?}");
    let mut stranger = Ssh::start(&s, &reservation, &stranger_key);
    assert!(stranger.exits(Duration::from_secs(15)));
    assert!(stranger.printed().contains("Permission denied (publickey)"), "{}", stranger.printed());
    // A key the tenant registers (its member may, another tenant's may not) reaches it too.
    let register = json!({"keys": [stranger_public]});
    assert_eq!(s.call_as(&globex, "PUT", "/v1/tenants/acme/ssh-keys", Some(register.clone())).0, 404);
    let (status, bad) =
        s.call_as(&acme, "PUT", "/v1/tenants/acme/ssh-keys", Some(json!({"keys": ["ssh-ed25519 AAAA"]})));
    assert_eq!((status, bad["error"]["field"].as_str()), (422, Some("keys[0]")), "{bad}");
    let (status, registered) = s.call_as(&acme, "PUT", "/v1/tenants/acme/ssh-keys", Some(register));
    assert_eq!(status, 200, "{registered}");
    assert_eq!(s.call_as(&acme, "GET", "/v1/tenants/acme/ssh-keys", None).1, registered);
    let mut nobody = Ssh::start(&s, "r-nope", &lessee_key);
    assert!(nobody.exits(Duration::from_secs(15)));
    assert!(nobody.printed().contains("Permission denied (publickey)"), "{}", nobody.printed());
    s.block_on(console.close(None)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.call("GET", "/v1/nodes/n1/console/sessions", None).1[0]["endedAt"].is_null() {
        assert!(Instant::now() < deadline, "the WebSocket's session never ended");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut over_ssh = Ssh::start(&s, &reservation, &stranger_key);
    let printed = over_ssh.until(Some("hello\r"), "hi there", Duration::from_secs(20));
    assert!(printed.contains("hi there"), "no answer through the SSH gateway: {printed:?}");
    // The lessee reads its machine's console audit while its lease runs (the WebSocket's
    // session ended, the SSH one open); another tenant cannot.
    let (status, seen) = s.call_as(&acme, "GET", "/v1/nodes/n1/console/sessions", None);
    let open: Vec<bool> = seen.as_array().unwrap().iter().map(|x| x["endedAt"].is_null()).collect();
    assert_eq!((status, open.iter().filter(|o| **o).count(), open.len()), (200, 1, 2), "{seen}");
    assert_eq!(s.call_as(&globex, "GET", "/v1/nodes/n1/console/sessions", None).0, 404);

    // The per-lease rate limit: after a burst, 429 with when to come back.
    let limited = (0..12).find_map(|_| {
        let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/power", Some(json!({"action": "on"})));
        (status != 200).then_some((status, body))
    });
    let (status, body) = limited.expect("eight a minute are allowed, not twelve in a row");
    assert_eq!(status, 429, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.starts_with(&format!("too many lessee actions on lease {reservation}: 8 a minute")), "{message}");

    // The lease ends: the console closes with a last line that says why; the machine is no
    // longer the lessee's, and the refusal says so.
    ok(&s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    s.passes();
    let last = over_ssh.until(None, "console closed", Duration::from_secs(15));
    assert!(last.contains(&format!("[metal: console closed: lease {reservation} is ended")), "{last:?}");
    assert!(over_ssh.exits(Duration::from_secs(10)), "the gateway closes the session: {last:?}");
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/power", Some(json!({"action": "on"})));
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["message"], format!("lease {reservation} is ended: node n1 is no longer yours"));
    let mut late = Ssh::start(&s, &reservation, &lessee_key);
    assert!(late.exits(Duration::from_secs(15)));
    assert!(late.printed().contains("Permission denied (publickey)"), "{}", late.printed());

    // Two sessions, each audited with who opened it: the refused writers left none.
    let deadline = Instant::now() + Duration::from_secs(10);
    let sessions = loop {
        let (_, sessions) = s.call("GET", "/v1/nodes/n1/console/sessions", None);
        if !sessions[0]["endedAt"].is_null() || Instant::now() > deadline {
            break sessions;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let mut who: Vec<&str> = sessions.as_array().unwrap().iter().filter_map(|x| x["credentialId"].as_str()).collect();
    who.sort_unstable();
    assert_eq!(who.len(), 2, "{sessions}");
    assert!(who[0] == acme_id && who[1].starts_with("ssh-key SHA256:"), "{sessions}");
    assert!(sessions.as_array().unwrap().iter().all(|x| !x["endedAt"].is_null()), "{sessions}");
    let audited = s.events("lessee.refused");
    assert!(audited.iter().any(|e| e["data"]["status"] == 429) && audited.iter().any(|e| e["data"]["status"] == 409));
    assert_eq!(s.call_as(&acme, "GET", "/v1/nodes/n1/console/sessions", None).0, 409, "the lease is over");
    let consoles = s.events("lessee.console");
    assert_eq!(consoles.len(), 4, "each session on the node and the lease: {consoles:?}");

    // A deleted tenant's token is no token at all.
    ok(&s, "DELETE", "/v1/tenants/acme", Value::Null);
    assert_eq!(s.call_as(&acme, "GET", "/v1/nodes/n1", None).0, 401);
}

/// The ramdisk of n1's current identity says its deploy failed.
fn deploy_fails(s: &TestScheduler) {
    let generation = s.node("n1")["identityGeneration"].as_u64().unwrap();
    let receipt = metal_tests::leases::deploy_fails(s, generation);
    assert_eq!(receipt["accepted"], true, "{receipt}");
}

/// The newest reinstall run of n1.
fn last_reinstall(s: &TestScheduler) -> metal_types::model::workflow::WorkflowRun {
    let runs =
        s.block_on(s.app.store.read(|tx| metal_store::workflows::for_node(tx, "n1", "metal-tenant-root-reinstall")));
    runs.unwrap().pop().expect("a reinstall run")
}

#[test]
fn a_lessee_reinstalls_another_version_under_a_new_identity_and_tries_again_after_a_failed_one() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    site(&s, ipmi(&sim), json!({}));
    let (acme, acme_id) = member(&s, "acme");
    ok(&s, "POST", "/v1/tenants", json!({"id": "globex"}));
    let (globex, _) = member(&s, "globex");
    let (_, profile) = s.call("GET", "/v1/profiles/acme-os", None);
    let mut v2 = profile["versions"][0]["spec"].clone();
    v2["adminUser"] = json!("admin2");
    ok(&s, "POST", "/v1/profiles/acme-os/versions", v2);
    let reservation = leased_and_deployed_with(&s, 1);
    let (_, lease) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    let generation = s.node("n1")["identityGeneration"].as_i64().unwrap();
    let v2 = json!({"profileId": "acme-os", "profileVersion": 2});

    // Refusals: another tenant (404), a version that does not exist (409, says which), an
    // empty profile (422); nothing moves.
    let (status, body) = s.call_as(&globex, "POST", "/v1/nodes/n1/reinstall", Some(v2.clone()));
    assert_eq!(status, 404, "{body}");
    let missing = json!({"profileId": "acme-os", "profileVersion": 9});
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/reinstall", Some(missing));
    assert_eq!(
        (status, body["error"]["message"].as_str()),
        (409, Some("the reinstall cannot start: profile acme-os has no version 9")),
        "{body}"
    );
    let (status, body) =
        s.call_as(&acme, "POST", "/v1/nodes/n1/reinstall", Some(json!({"profileId": "", "profileVersion": 1})));
    assert_eq!(status, 422, "{body}");
    assert_eq!(s.node("n1")["state"], "deployed");

    // The reinstall: deploying at once under a new identity, the same lease; nothing else
    // acts on the node meanwhile.
    let (status, started) = s.call_as(&acme, "POST", "/v1/nodes/n1/reinstall", Some(v2.clone()));
    assert_eq!(status, 202, "{started}");
    assert_eq!(
        (started["reservationId"].as_str(), started["profileVersion"].as_u64()),
        (Some(reservation.as_str()), Some(2))
    );
    let node = s.node("n1");
    assert_eq!(
        (node["state"].as_str(), node["identityGeneration"].as_i64()),
        (Some("deploying"), Some(generation + 1)),
        "{node}"
    );
    for (path, body) in [("/v1/nodes/n1/reinstall", v2.clone()), ("/v1/nodes/n1/power", json!({"action": "cycle"}))] {
        let (status, answer) = s.call_as(&acme, "POST", path, Some(body));
        assert_eq!(status, 409, "{path} while the reinstall runs: {answer}");
    }
    // Off, the network boot, the installer's done: deployed with version 2.
    s.passes();
    metal_tests::leases::installer_done(&s.url);
    metal_tests::leases::later(&s);
    let run = last_reinstall(&s);
    assert_eq!(
        (run.definition.as_str(), run.status),
        ("metal-tenant-root-reinstall@1", RunStatus::Succeeded),
        "{run:?}"
    );
    let steps: Vec<&str> = run.steps.iter().map(|step| step.name.as_str()).collect();
    assert_eq!(
        steps,
        ["power-off", "network-cleaning", "bios-tenant", "network-boot", "await-deploy", "network-tenant", "boot-disk"]
    );
    let (_, view) = s.call_as(&acme, "GET", "/v1/nodes/n1", None);
    assert_eq!((view["state"].as_str(), view["profileVersion"].as_i64()), (Some("deployed"), Some(2)), "{view}");
    let events = view["events"].as_array().unwrap();
    let recorded = events.iter().find(|e| e["kind"] == "lessee.reinstall").expect("lessee.reinstall in the view");
    assert_eq!((&recorded["data"]["credential"], &recorded["data"]["version"]), (&json!(acme_id), &json!(2)));
    assert!(events.iter().any(|e| e["kind"] == "node.tenant-root.reinstalled"), "{view}");
    let (_, after) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(
        (after["state"].as_str(), &after["start"], &after["end"]),
        (Some("active"), &lease["start"], &lease["end"])
    );

    // A reinstall that fails leaves the lease active and the node failed, not quarantined;
    // the lessee tries again, from failed.
    let v1 = json!({"profileId": "acme-os", "profileVersion": 1});
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/reinstall", Some(v1.clone()));
    assert_eq!(status, 202, "{body}");
    s.passes();
    deploy_fails(&s);
    metal_tests::leases::later(&s);
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["maintenance"].as_bool()), (Some("failed"), Some(false)), "{node}");
    assert_eq!(last_reinstall(&s).status, RunStatus::Failed);
    let (_, after) = s.call("GET", &format!("/v1/reservations/{reservation}"), None);
    assert_eq!(after["state"], "active", "{after}");
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/power", Some(json!({"action": "on"})));
    assert_eq!(status, 409, "only a reinstall acts on a failed node: {body}");
    // The retry with metalctl, as a lessee runs it.
    let dir = tempfile::tempdir().unwrap();
    let home = metal_tests::metalctl::home(dir.path(), &s.url, &acme);
    let started = metal_tests::metalctl::run(&home, &["lease", "reinstall", "n1", "--profile", "acme-os:1"]);
    assert!(started.lines().nth(1).is_some_and(|l| l.starts_with("n1") && l.contains(&reservation)), "{started}");
    s.passes();
    metal_tests::leases::installer_done(&s.url);
    metal_tests::leases::later(&s);
    assert_eq!(s.node("n1")["state"], "deployed");

    // Failed again, the lease ends: the teardown runs as for any lease.
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/reinstall", Some(v1));
    assert_eq!(status, 202, "{body}");
    s.passes();
    deploy_fails(&s);
    metal_tests::leases::later(&s);
    ok(&s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    s.passes();
    let node = s.node("n1");
    assert_eq!(node["state"], "releasing", "{node}");
    let (_, teardowns) = s.call("GET", "/v1/nodes/n1/teardowns", None);
    assert_eq!(teardowns[0]["definition"], "metal-tenant-root-release@1", "{teardowns}");
}

/// The newest run of `definition` on n1.
fn last_run(s: &TestScheduler, definition: &'static str) -> metal_types::model::workflow::WorkflowRun {
    let runs = s.block_on(s.app.store.read(move |tx| metal_store::workflows::for_node(tx, "n1", definition)));
    runs.unwrap().pop().unwrap_or_else(|| panic!("a {definition} run"))
}

/// GET on the boot routes as the machine's firmware asks; the status and the body.
fn firmware_get(s: &TestScheduler, path: &str) -> (u16, Vec<u8>) {
    let answer = reqwest::blocking::Client::new().get(format!("{}{path}", s.url)).send().unwrap();
    (answer.status().as_u16(), answer.bytes().unwrap().to_vec())
}

#[test]
fn a_lessee_rescues_its_machine_with_its_keys_and_no_platform_secret_unrescues_it_and_the_lease_end_closes_a_rescue() {
    let sim = IpmiSim::start();
    let s = TestScheduler::start(|_| {});
    s.block_on(answer_on_serial_line(sim.serial_port, b"hello", b"hi there\r\n"));
    site(&s, ipmi(&sim), json!({}));
    let (acme, acme_id) = member(&s, "acme");
    ok(&s, "POST", "/v1/tenants", json!({"id": "globex"}));
    let (globex, _) = member(&s, "globex");
    let keys = tempfile::tempdir().unwrap();
    let (_, lessee_public) = ssh_key(keys.path(), "lessee");
    ok(&s, "PUT", "/v1/tenants/acme/ssh-keys", json!({"keys": [lessee_public]}));
    let reservation = leased_and_deployed_with(&s, 1);

    // Refusals: another tenant (404); a site that serves no rescue ramdisk (409, says what
    // is missing); nothing moves.
    let (status, body) = s.call_as(&globex, "POST", "/v1/nodes/n1/rescue", None);
    assert_eq!(status, 404, "{body}");
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/rescue", None);
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(status, 409, "{body}");
    assert!(message.contains("serves no rescue ramdisk") && message.contains("build-ramdisk"), "{body}");
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/unrescue", None);
    assert_eq!(status, 409, "nothing to unrescue on a deployed node: {body}");
    assert_eq!(s.node("n1")["state"], "deployed");

    // The rescue: the node is in a rescue at once; a second ask is refused.
    std::fs::create_dir_all(s.files_dir()).unwrap();
    std::fs::write(s.files_dir().join("rescue"), b"the rescue ramdisk").unwrap();
    // An arm64 machine has no rescue ramdisk yet: refused up front, naming why.
    let architecture = |arch: &'static str| {
        s.block_on(s.app.store.write(move |tx| metal_store::nodes::set_architecture(tx, "n1", arch))).unwrap()
    };
    architecture("aarch64");
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/rescue", None);
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap_or_default().contains("arm64 rescue ramdisk"), "{body}");
    assert_eq!(s.node("n1")["state"], "deployed");
    architecture("x86_64");
    let (status, started) = s.call_as(&acme, "POST", "/v1/nodes/n1/rescue", None);
    assert_eq!((status, started["action"].as_str()), (202, Some("rescue")), "{started}");
    assert_eq!(started["reservationId"], json!(reservation));
    assert_eq!(s.node("n1")["state"], "rescue");
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/rescue", None);
    assert_eq!(status, 409, "{body}");
    s.passes();

    // The firmware's script: kernel, the rescue ramdisk and the keys; no token, CA or
    // controller on the kernel command line, the ramdisk's own init.
    let (status, script) = firmware_get(&s, &format!("/boot/ipxe?mac={}", metal_tests::leases::MAC));
    let script = String::from_utf8(script).unwrap();
    assert_eq!(status, 200, "{script}");
    let kernel = script.lines().find(|l| l.starts_with("kernel ")).unwrap_or_else(|| panic!("{script}"));
    assert!(kernel.ends_with(&format!("rdinit=/init metal.bootif={}", metal_tests::leases::MAC)), "{script}");
    for secret in ["metal.token", "metal.ca", "metal.controller"] {
        assert!(!kernel.contains(secret), "{secret} on the rescue's command line: {kernel}");
    }
    let token = metal_tests::scheduler::TestScheduler::rescue_token(&script).unwrap();
    assert!(script.contains(&format!("initrd --name keys /boot/files/rescue-keys?token={token}")), "{script}");
    let (status, ramdisk) = firmware_get(&s, &format!("/boot/files/rescue?token={token}"));
    assert_eq!((status, ramdisk.as_slice()), (200, b"the rescue ramdisk".as_slice()));
    let (status, _) = firmware_get(&s, &format!("/boot/files/initrd?token={token}"));
    assert_eq!(status, 403, "a rescue token fetches the rescue's files only");
    let (status, body) = metal_tests::scheduler::join_from(&s.boot_url, &token, "127.0.0.1", 7);
    assert_eq!(status, 403, "a rescue token never joins: {body}");
    assert_eq!(last_run(&s, "metal-tenant-root-rescue").status, RunStatus::Running, "waits for the keys");
    let (status, archive) = firmware_get(&s, &format!("/boot/files/rescue-keys?token={token}"));
    assert_eq!(status, 200);
    let unpacked = tempfile::tempdir().unwrap();
    let mut cpio = std::process::Command::new("cpio")
        .args(["-i", "-d", "--quiet"])
        .current_dir(unpacked.path())
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut cpio.stdin.take().unwrap(), &archive).unwrap();
    assert!(cpio.wait().unwrap().success());
    let authorized = std::fs::read_to_string(unpacked.path().join("etc/metal-rescue/authorized_keys")).unwrap();
    assert!(authorized.contains(lessee_public.trim()), "{authorized}");
    let (status, _) = firmware_get(&s, &format!("/boot/files/rescue-keys?token={token}"));
    assert_eq!(status, 403, "the keys spend the token");
    metal_tests::leases::later(&s);
    let run = last_run(&s, "metal-tenant-root-rescue");
    assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
    let steps: Vec<&str> = run.steps.iter().map(|step| step.name.as_str()).collect();
    assert_eq!(steps, ["power-off", "network-cleaning", "network-boot", "await-rescue", "network-tenant"]);
    let (_, view) = s.call_as(&acme, "GET", "/v1/nodes/n1", None);
    assert_eq!(view["state"], "rescue", "{view}");
    let events = view["events"].as_array().unwrap();
    let recorded = events.iter().find(|e| e["kind"] == "lessee.rescue").expect("lessee.rescue in the view");
    assert_eq!(recorded["data"]["credential"], json!(acme_id));
    assert!(events.iter().any(|e| e["kind"] == "node.tenant-root.rescued"), "{view}");
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/power", Some(json!({"action": "cycle"})));
    assert_eq!(status, 200, "power stays the lessee's in a rescue: {body}");

    // The serial console stays the lessee's too: `metalctl lease console` from a pipe.
    let dir = tempfile::tempdir().unwrap();
    let home = metal_tests::metalctl::home(dir.path(), &s.url, &acme);
    let (printed, status) = console_through_metalctl(&home, "hello\r", "hi there");
    assert!(status.success() && printed.contains("hi there"), "{printed}");
    let (status, sessions) = s.call_as(&acme, "GET", "/v1/nodes/n1/console/sessions", None);
    assert_eq!((status, sessions[0]["credentialId"].as_str()), (200, Some(acme_id.as_str())), "{sessions}");

    // Unrescue with metalctl, as a lessee runs it: the disk boots, deployed again.
    let started = metal_tests::metalctl::run(&home, &["lease", "unrescue", "n1"]);
    assert!(started.lines().nth(1).is_some_and(|l| l.starts_with("n1") && l.contains("unrescue")), "{started}");
    s.passes();
    metal_tests::leases::later(&s);
    let run = last_run(&s, "metal-tenant-root-unrescue");
    assert_eq!(run.status, RunStatus::Succeeded, "{run:?}");
    assert_eq!(s.node("n1")["state"], "deployed");

    // A rescue open when the lease ends: its run is over and the teardown runs as usual.
    let started = metal_tests::metalctl::run(&home, &["lease", "rescue", "n1"]);
    assert!(started.contains("rescue"), "{started}");
    s.passes();
    ok(&s, "POST", &format!("/v1/reservations/{reservation}/release"), Value::Null);
    s.passes();
    assert_eq!(s.node("n1")["state"], "releasing");
    let run = last_run(&s, "metal-tenant-root-rescue");
    assert_eq!(
        (run.status, run.last_error.as_deref()),
        (RunStatus::Failed, Some("the lease ended")),
        "the rescue's run is over: {run:?}"
    );
    let (_, teardowns) = s.call("GET", "/v1/nodes/n1/teardowns", None);
    assert_eq!(teardowns[0]["definition"], "metal-tenant-root-release@1", "{teardowns}");
    let (status, body) = s.call_as(&acme, "POST", "/v1/nodes/n1/unrescue", None);
    assert_eq!(status, 409, "the lease is over: {body}");
}

/// `metalctl lease console n1` with `home`, typing `typed` into its pipe every half second
/// until `want` shows (or 20 s), then ending its input: what it printed (stdout and stderr)
/// and how it exited.
fn console_through_metalctl(home: &std::path::Path, typed: &str, want: &str) -> (String, std::process::ExitStatus) {
    use std::io::{Read as _, Write as _};
    let mut child = std::process::Command::new(metal_tests::bins::metalctl())
        .args(["lease", "console", "n1", "--linger", "1"])
        .env("HOME", home)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let printed = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut stdout = child.stdout.take().unwrap();
    let sink = printed.clone();
    let reader = std::thread::spawn(move || {
        let mut buffer = [0u8; 256];
        while let Ok(n @ 1..) = stdout.read(&mut buffer) {
            sink.lock().unwrap().extend_from_slice(&buffer[..n]);
        }
    });
    let mut stdin = child.stdin.take().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !String::from_utf8_lossy(&printed.lock().unwrap()).contains(want) && Instant::now() < deadline {
        let _ = stdin.write_all(typed.as_bytes());
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(stdin);
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let mut errors = String::new();
    child.stderr.take().unwrap().read_to_string(&mut errors).unwrap();
    (format!("{}{errors}", String::from_utf8_lossy(&printed.lock().unwrap())), status)
}
