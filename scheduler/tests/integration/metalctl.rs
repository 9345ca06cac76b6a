//! metalctl against a real scheduler: tables for people, JSON for scripts, API errors as
//! their messages, token from the environment or a file.

use crate::common;

use std::io::Write as _;
use std::process::{Command, Output, Stdio};

use metal_tests::scheduler::Admin as _;

fn metalctl(url: &str, token: &str, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(metal_tests::bins::metalctl())
        .args(args)
        .env("METAL_URL", url)
        .env("METAL_TOKEN", token)
        .env("METALCTL_CONFIG", "/nonexistent")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    child.wait_with_output().unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn metalctl_drives_nodes_tenants_and_events() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let site = runtime.block_on(common::Site::start());
    let (url, admin) = (site.url.clone(), site.admin.clone());
    let run = |args: &[&str]| metalctl(&url, &admin, args, None);

    let o =
        run(&["node", "enrol", "n1", "--boot-mac", "52:54:00:00:00:01", "--label", "rack=r1", "--devices", "gpu=2"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = metalctl(&url, &admin, &["node", "import", "-"], Some("id,labels\nn2,rack=r2\nn1,\n"));
    assert!(o.status.success() && text(&o).contains("created: 1") && text(&o).contains("skipped n1"), "{}", text(&o));

    let o = run(&["node", "list"]);
    let listing = text(&o);
    assert!(listing.starts_with("ID  STATE  POWER"), "{listing}");
    let n1 = listing.lines().find(|l| l.starts_with("n1 ")).unwrap();
    assert_eq!(
        n1.split_whitespace().collect::<Vec<_>>(),
        ["n1", "new", "unknown", "false", "false", "platform", "-", "gpu=2", "-", "-", "rack=r1"],
        "{listing}"
    );
    assert!(listing.lines().next().unwrap().contains("POOL") && listing.contains("DEVICES"), "{listing}");
    let o = run(&["node", "show", "n1"]);
    assert!(
        text(&o).contains("devices              gpu=2") && text(&o).contains("gpu1    gpu    true"),
        "{}",
        text(&o)
    );

    let o = run(&["-o", "json", "node", "show", "n1"]);
    let node: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(node["devices"].as_array().unwrap().len(), 2);

    let o = run(&["node", "move", "n1", "--from", "new", "--to", "ready"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("metalctl: CONFLICT: a node cannot move from new to ready"), "{}", text(&o));
    let o = run(&["node", "move", "n1", "--from", "new", "--to", "commissioning", "--owner", "me"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["node", "set", "n1", "--label", "rack=r9", "--taint", "dedicated=acme:NoSchedule"]);
    assert!(o.status.success() && text(&o).contains("rack=r9"), "{}", text(&o));
    let o = run(&["-o", "json", "node", "show", "n1"]);
    let node: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(node["taints"][0]["value"], "acme");
    let o = run(&["node", "maintenance", "n1", "on"]);
    assert!(o.status.success() && text(&o).contains("true"), "{}", text(&o));

    let o = run(&["tenant", "create", "acme"]);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["-o", "json", "credential", "create", "--role", "tenant-member", "--tenant", "acme", "--name", "ci"]);
    let created: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let tenant_token = created["token"].as_str().unwrap().to_owned();
    let o = metalctl(&url, &tenant_token, &["node", "list"], None);
    assert!(!o.status.success() && text(&o).contains("NOT_FOUND"), "{}", text(&o));
    let o = run(&["-o", "json", "credential", "list"]);
    let listed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(!String::from_utf8_lossy(&o.stdout).contains(&tenant_token));
    let member = listed.as_array().unwrap().iter().find(|c| c["role"] == "tenant-member").unwrap();
    let o = run(&["credential", "revoke", member["id"].as_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let o = metalctl(&url, &tenant_token, &["tenant", "list"], None);
    assert!(!o.status.success() && text(&o).contains("UNAUTHENTICATED"), "{}", text(&o));

    let o = run(&["events", "--after", "0"]);
    let events = text(&o);
    assert!(
        events.contains("node.created") && events.contains("node.state.changed") && events.contains("tenant.created"),
        "{events}"
    );

    // Missing configuration is named.
    let o = Command::new(metal_tests::bins::metalctl())
        .args(["node", "list"])
        .env_remove("METAL_URL")
        .env("METALCTL_CONFIG", "/nonexistent")
        .output()
        .unwrap();
    assert!(!o.status.success() && text(&o).contains("--url"), "{}", text(&o));
    drop(site);
}

#[test]
fn metalctl_places_reservations_and_shows_usage() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let site = runtime.block_on(common::Site::start());
    let (url, admin) = (site.url.clone(), site.admin.clone());
    let run = |args: &[&str], stdin: Option<&str>| metalctl(&url, &admin, args, stdin);
    let pool = r#"{"id": "p1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated", "policy": {"tenantRoot": true}}"#;
    let o = run(&["pool", "create", "-"], Some(pool));
    assert!(o.status.success(), "{}", text(&o));
    assert!(run(&["tenant", "create", "acme"], None).status.success());
    let o = run(&["pool", "offer", "p1", "--tenant", "acme"], None);
    assert!(o.status.success() && text(&o).contains("acme"), "{}", text(&o));
    runtime.block_on(site.profile("acme", "acme-root-os"));
    for args in [
        vec!["node", "import", "-"],
        vec!["node", "move", "n1", "--from", "new", "--to", "commissioning", "--owner", "t"],
        vec!["node", "move", "n1", "--from", "commissioning", "--to", "ready"],
    ] {
        let o = run(&args, Some("id,poolId,devices\nn1,p1,gpu=8\n"));
        assert!(o.status.success(), "{args:?}: {}", text(&o));
    }
    let o = run(
        &[
            "reservation",
            "create",
            "--tenant",
            "acme",
            "--pool",
            "p1",
            "--devices",
            "gpu=8",
            "--duration",
            "7d",
            "--node-profile",
            "acme-root-os:1",
        ],
        None,
    );
    assert!(o.status.success() && text(&o).contains("pending") && text(&o).contains("n1"), "{}", text(&o));
    let reserve = |profile: &str| {
        run(
            &[
                "reservation",
                "create",
                "--tenant",
                "acme",
                "--pool",
                "p1",
                "--duration",
                "7d",
                "--node-profile",
                profile,
            ],
            None,
        )
    };
    let o = reserve("nobody-os:1");
    assert!(text(&o).contains("no profile nobody-os of tenant acme or public (field node.profileId)"), "{}", text(&o));
    let o = reserve("acme-root-os:7");
    assert!(text(&o).contains("profile acme-root-os has no version 7 (its latest is 1)"), "{}", text(&o));
    let o = run(
        &["reservation", "create", "--tenant", "acme", "--pool", "p1", "--devices", "gpu=8", "--duration", "7d"],
        None,
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("CONFLICT: no placement: 1 node in the pool: 1 booked in the window"), "{}", text(&o));
    let o = run(&["-o", "json", "pool", "list"], None);
    let pools: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(pools[0]["capacity"]["leased"], 1);
    // A plain lease starts at once; `node list` names the reservation holding its node.
    let plain = r#"{"id": "p2", "tenantId": "root", "siteId": "site-a", "class": "metal-shared"}"#;
    assert!(run(&["pool", "create", "-"], Some(plain)).status.success());
    assert!(run(&["pool", "offer", "p2", "--tenant", "acme"], None).status.success());
    let o = run(&["node", "import", "-"], Some("id,poolId,devices\nn2,p2,gpu=8\n"));
    assert!(o.status.success(), "{}", text(&o));
    for args in [
        ["node", "move", "n2", "--from", "new", "--to", "commissioning", "--owner", "t"].as_slice(),
        &["node", "move", "n2", "--from", "commissioning", "--to", "ready"],
    ] {
        assert!(run(args, None).status.success(), "{args:?}");
    }
    // An architecture asked for: n2 recorded none (commissioned by hand), so it counts as x86_64.
    let create = ["reservation", "create", "--tenant", "acme", "--pool", "p2", "--duration", "1d"];
    let o = run(&[&create[..], &["--arch", "aarch64"]].concat(), None);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("1 of another architecture"), "{}", text(&o));
    let o = run(&[&create[..], &["--arch", "sparc"]].concat(), None);
    assert!(!o.status.success() && text(&o).contains("x86_64, aarch64"), "{}", text(&o));
    let o = run(&[&["-o", "json"][..], &create[..], &["--arch", "x86_64"]].concat(), None);
    let lease: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_else(|_| panic!("{}", text(&o)));
    assert_eq!(lease["state"], "active", "{lease}");
    let o = run(&["node", "list"], None);
    let listing = text(&o);
    let header = listing.lines().next().unwrap();
    let n2 = listing.lines().find(|l| l.starts_with("n2 ")).unwrap_or_else(|| panic!("{listing}"));
    let column = header.find("RESERVATION").unwrap_or_else(|| panic!("{listing}"));
    assert!(n2[column..].starts_with(lease["id"].as_str().unwrap()), "{listing}");
    let o = run(&["usage", "--tenant", "acme"], None);
    assert!(o.status.success() && text(&o).starts_with("WINDOW"), "{}", text(&o));
    let o = run(&["usage", "--help"], None);
    let help = text(&o).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(help.contains("platform admins must name one"), "{help}");
    drop(site);
}

#[test]
fn metalctl_drives_a_bmc_with_passwords_off_the_command_line() {
    let sim = metal_tests::emulators::IpmiSim::start();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let site = runtime.block_on(common::Site::start());
    let (url, admin) = (site.url.clone(), site.admin.clone());
    let run = |args: &[&str], stdin: Option<&str>| metalctl(&url, &admin, args, stdin);
    assert!(run(&["node", "enrol", "n1"], None).status.success());
    let address = format!("127.0.0.1:{}", sim.port);
    // The password comes on stdin.
    let o = run(
        &["bmc", "set", "n1", "--protocol", "ipmi", "--address", &address, "--username", "admin"],
        Some("password\n"),
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("ipmi") && !text(&o).contains("password\n"), "{}", text(&o));
    let o = run(&["bmc", "power", "n1", "on"], None);
    assert!(o.status.success() && text(&o).contains("on"), "{}", text(&o));
    let o = run(&["-o", "json", "bmc", "power", "n1", "status"], None);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["power"], "on", "{}", text(&o));
    // Readings: a table for people (a row per reading), the read model whole as JSON.
    let o = run(&["bmc", "readings", "n1"], None);
    let table = text(&o);
    assert!(o.status.success() && table.starts_with("SECTION"), "{table}");
    let power = table.lines().find(|l| l.starts_with("power ")).unwrap_or_default();
    assert_eq!(power.split_whitespace().collect::<Vec<_>>(), ["power", "on"], "{table}");
    let o = run(&["-o", "json", "bmc", "readings", "n1"], None);
    let model: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(model["power"], serde_json::json!({"status": "present", "value": "on"}), "{model}");
    let o = run(&["bmc", "boot", "n1", "pxe"], None);
    assert!(text(&o).contains("n1 boots from pxe next time"), "{}", text(&o));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("new-password");
    std::fs::write(&file, "Rotated-77\n").unwrap();
    let o = run(&["bmc", "rotate", "n1", "--password-file", file.to_str().unwrap()], None);
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["-o", "json", "bmc", "show", "n1"], None);
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["generation"], 2, "{shown}");
    assert!(!text(&o).contains("Rotated-77"));
    // IPMI has no virtual media: the BMC's refusal is the message.
    let o = run(&["bmc", "media", "n1", "status"], None);
    assert!(!o.status.success() && text(&o).contains("IPMI has no virtual media"), "{}", text(&o));
    let o = run(&["bmc", "set", "n1", "--protocol", "ipmi", "--address", &address, "--username", "admin"], Some(""));
    assert!(!o.status.success() && text(&o).contains("no BMC password"), "{}", text(&o));
}

#[test]
fn metalctl_shows_what_the_boot_service_stored_and_sets_deploy_plans() {
    use metal_protocol::{InventoryReport, Role, WipeReport};
    let s = metal_tests::scheduler::TestScheduler::start(|_| {});
    let run = |args: &[&str], stdin: Option<&str>| metalctl(&s.url, &s.admin, args, stdin);
    s.enrol("n1", "52:54:00:00:00:01");
    s.walk("n1", &["new", "commissioning"]);
    let mut inventory: InventoryReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/inventory-report.json")).unwrap();
    inventory.node_id = "n1".into();
    let receipt = s.post_report_as(Role::Ramdisk, "n1", 1, InventoryReport::PAYLOAD_TYPE, &inventory);
    assert_eq!(receipt["accepted"], true, "{receipt}");

    let o = run(&["node", "inventory", "n1"], None);
    assert!(o.status.success(), "{}", text(&o));
    let shown = text(&o);
    assert!(shown.contains("tests passed: true") && shown.contains("NAME     SERIAL    MODEL"), "{shown}");
    assert!(shown.contains("nvme0n1  NVME0001  QEMU NVMe Ctrl  1073741824  nvme"), "{shown}");

    let mut wipe: WipeReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/wipe-report.json")).unwrap();
    wipe.node_id = "n1".into();
    s.post_report_as(Role::NodeTenant, "n1", 1, WipeReport::PAYLOAD_TYPE, &wipe);
    let o = run(&["node", "wipe-reports", "n1"], None);
    let shown = text(&o);
    assert!(shown.starts_with("RECEIVED") && shown.contains("false     role-not-allowed"), "{shown}");

    let plan = include_str!("../../../protocol/tests/golden/deploy-plan.json");
    let o = run(&["node", "deploy-plan", "n1", "-"], Some(plan));
    assert!(o.status.success() && text(&o).contains("deploy plan of n1 set"), "{}", text(&o));
    let o = run(&["node", "deploy-plan", "n1", "-"], Some("{\"image\": 1}"));
    assert!(!o.status.success() && text(&o).contains("INVALID_INPUT"), "{}", text(&o));
    let o = run(&["node", "inventory", "nope"], None);
    assert!(!o.status.success() && text(&o).contains("NOT_FOUND"), "{}", text(&o));
}

#[test]
fn metalctl_imports_images_makes_profiles_and_says_why_provisioning_cannot_run() {
    use sha2::Digest as _;
    let ca = metal_protocol::SiteCa::create(
        "mirror",
        std::time::SystemTime::now() - std::time::Duration::from_secs(600),
        std::time::Duration::from_secs(86400),
    )
    .unwrap();
    let image = metal_tests::images::with_mbr((0..3u32 << 20).map(|i| u8::try_from(i % 251).unwrap()).collect());
    let mirror = metal_tests::controller::ImageServer::start(&ca, &[], [("os.img".to_owned(), image.clone())].into());
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.certificate().pem()).unwrap();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let site = runtime.block_on(common::Site::start_with(|c| c.images.ca_file = Some(ca_file.clone())));
    let (url, admin) = (site.url.clone(), site.admin.clone());
    let run = |args: &[&str]| metalctl(&url, &admin, args, None);
    let sha = hex::encode(sha2::Sha256::digest(&image));
    let image_url = mirror.url("os.img");

    // Waits for the import and shows where it is (a line per 10% off a terminal).
    let o = run(&["image", "import", "--image-url", &image_url, "--checksum", &sha, "--name", "os"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("ready") && text(&o).contains("3145728"), "{}", text(&o));
    let o = run(&["image", "import", "--image-url", &image_url, "--checksum", &"0".repeat(64), "--name", "bad"]);
    assert!(!o.status.success());
    assert!(text(&o).contains("checksum mismatch") && text(&o).contains(&sha), "{}", text(&o));
    let o = run(&["image", "import", "--image-url", &image_url]);
    assert!(!o.status.success() && text(&o).contains("needs checksum or checksumUrl"), "{}", text(&o));
    let o = run(&["image", "list"]);
    assert!(text(&o).starts_with("ID") && text(&o).contains(" os ") && text(&o).contains("failed"), "{}", text(&o));

    let profile = r#"{"id": "web", "image": "os", "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops"]}"#;
    let o = metalctl(&url, &admin, &["profile", "create", "-"], Some(profile));
    assert!(o.status.success() && text(&o).contains("web"), "{}", text(&o));
    let o = metalctl(&url, &admin, &["profile", "version", "web", "-"], Some(&profile.replace(r#""id": "web", "#, "")));
    assert!(o.status.success(), "{}", text(&o));
    let o = run(&["profile", "show", "web"]);
    assert!(
        text(&o).contains("VERSION") && text(&o).lines().filter(|l| l.contains("img-")).count() == 2,
        "{}",
        text(&o)
    );
    let o = run(&["provision", "web:1", "--count", "2"]);
    assert!(!o.status.success() && text(&o).contains("provisioning needs the boot service"), "{}", text(&o));
    let o = run(&["provision", "web"]);
    assert!(!o.status.success() && text(&o).contains("PROFILE:VERSION"), "{}", text(&o));
}

#[test]
fn metalctl_warns_when_a_bmc_password_is_stored_unsealed_and_says_how_to_set_a_bmc() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let site = runtime.block_on(common::Site::start());
    let (url, admin) = (site.url.clone(), site.admin.clone());
    assert!(metalctl(&url, &admin, &["node", "enrol", "n1"], None).status.success());
    let o = metalctl(&url, &admin, &["bmc", "power", "n1", "on"], None);
    assert!(!o.status.success() && text(&o).contains("metalctl bmc set n1"), "{}", text(&o));
    let set = [
        "bmc",
        "set",
        "n1",
        "--protocol",
        "ipmi",
        "--address",
        "10.0.0.5",
        "--username",
        "admin",
        "--password-file",
        "-",
    ];
    let o = metalctl(&url, &admin, &set, Some("secret\n"));
    assert!(o.status.success(), "{}", text(&o));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("unsealed") && stderr.contains("METAL_MASTER_KEY"), "{stderr}");
    assert!(!text(&o).contains("secret"), "the password never shows");
}

#[test]
fn node_moves_are_checked_by_the_command_line_and_the_api_says_what_is_wrong_without_parser_framing() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let site = runtime.block_on(common::Site::start());
    let (url, admin) = (site.url.clone(), site.admin.clone());
    assert!(metalctl(&url, &admin, &["node", "enrol", "n1"], None).status.success());
    let o = metalctl(&url, &admin, &["node", "move", "n1", "--from", "new", "--to", "Ready"], None);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("possible values: new, commissioning, ready"), "{}", text(&o));
    let o = metalctl(&url, &admin, &["node", "move", "--help"], None);
    let help = text(&o);
    assert!(help.contains("Allowed moves:") && help.contains("releasing      -> ready, failed"), "{help}");
    assert!(help.contains("The node id"), "{help}");
    let own = help.find("--from").unwrap();
    let global = help.find("Global options").expect("global options under their own heading");
    assert!(own < global, "the subcommand's own options come first: {help}");
    let o = metalctl(&url, &admin, &["node", "import", "--help"], None);
    assert!(text(&o).contains("bmcPrivilege") && text(&o).contains("double-quoted"), "{}", text(&o));
    let (status, body) = runtime.block_on(site.admin(
        "POST",
        "/v1/nodes/n1/transitions",
        Some(serde_json::json!({"from": "new", "to": "Ready"})),
    ));
    assert_eq!(status, 422, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("unknown variant `Ready`") && message.contains("`ready`"), "{message}");
    assert!(!message.contains("Failed to deserialize") && !message.contains("line 1 column"), "{message}");
    let (status, body) = runtime.block_on(site.admin(
        "POST",
        "/v1/reservations",
        Some(serde_json::json!({"tenantId": "root", "poolId": "p", "devices": [], "duration": "7days"})),
    ));
    assert_eq!(status, 422, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("unknown unit \"days\""), "{body}");
}

#[test]
fn metalctl_shows_teardown_evidence_recovers_only_quarantined_leases_and_deletes_tenants() {
    use metal_store::workflows::{self, Verdict};
    use metal_types::clock::Clock as _;
    use metal_types::model::workflow::StepSpec;
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let site = runtime.block_on(common::Site::start());
    let (url, admin) = (site.url.clone(), site.admin.clone());
    let run = |args: &[&str]| metalctl(&url, &admin, args, None);
    assert!(run(&["node", "enrol", "n1"]).status.success());

    // A teardown run with its first step done, as the engine records it.
    let now = site.clock.now();
    runtime
        .block_on(site.app.store.write(move |tx| {
            let steps: Vec<StepSpec> = ["power-off", "fence"]
                .iter()
                .map(|n| StepSpec { name: (*n).into(), attempts: 3, deadline_ms: 60_000 })
                .collect();
            workflows::create(tx, "run-1", "n1", "metal-tenant-root-release@1", &steps, &serde_json::json!({}), now)?;
            let run = workflows::claim_due(tx, "w", now, now + std::time::Duration::from_secs(60), 1)?.remove(0);
            workflows::record(tx, &run, &Verdict::Done(serde_json::json!({"power": "off"})), now)?;
            Ok::<_, metal_types::error::ApiError>(())
        }))
        .unwrap();
    let o = run(&["node", "teardowns", "n1"]);
    let shown = text(&o);
    assert!(o.status.success(), "{shown}");
    let lines: Vec<&str> = shown.lines().collect();
    assert!(
        lines[0].starts_with("RUN") && lines[0].contains("DEFINITION") && lines[0].contains("LAST ERROR"),
        "{shown}"
    );
    let words = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(words(lines[1])[..4], ["run-1", "metal-tenant-root-release@1", "running", "1"], "{shown}");
    assert_eq!(words(lines[2])[..3], ["STEP", "RESULT", "ATTEMPT"], "{shown}");
    assert_eq!(words(lines[3])[..3], ["power-off", "done", "0"], "{shown}");
    let o = run(&["-o", "json", "node", "teardowns", "n1"]);
    let runs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(runs[0]["history"][0]["detail"]["power"], "off");

    let o = run(&["node", "recover", "n1"]);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("recover runs the teardown of a failed tenant-root node"), "{}", text(&o));
    let o = run(&["reservation", "bind", "r1"]);
    assert!(!o.status.success() && text(&o).contains("unrecognized subcommand"), "{}", text(&o));

    assert!(run(&["tenant", "create", "acme"]).status.success());
    let o = run(&["tenant", "delete", "acme"]);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).starts_with("TENANT  RESERVATIONS ENDED  POOLS RETIRED\nacme"), "{}", text(&o));
    let o = run(&["tenant", "delete", "root"]);
    assert!(!o.status.success() && text(&o).contains("root) cannot be deleted"), "{}", text(&o));
    let o = run(&["tenant", "delete", "--help"]);
    assert!(text(&o).contains("leased machines are torn down"), "{}", text(&o));
}

#[test]
fn metalctl_lists_hosts_shows_one_and_prints_its_join_log() {
    use metal_protocol::boot::TaskReport;
    use metal_protocol::{InventoryReport, Role};
    let s = metal_tests::scheduler::TestScheduler::start(|_| {});
    let run = |args: &[&str]| metalctl(&s.url, &s.admin, args, None);
    std::fs::create_dir_all(s.files_dir()).unwrap();
    std::fs::write(s.files_dir().join("metal-agent"), b"agent").unwrap();
    s.enrol("n1", "52:54:00:00:00:01");
    s.walk("n1", &["new", "commissioning"]);
    let mut inventory: InventoryReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/inventory-report.json")).unwrap();
    inventory.node_id = "n1".into();
    assert_eq!(s.post_report_as(Role::Ramdisk, "n1", 1, InventoryReport::PAYLOAD_TYPE, &inventory)["accepted"], true);
    let mut plan: metal_protocol::DeployPlan =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/deploy-plan.json")).unwrap();
    plan.cloud_init = Some(metal_tests::images::seed("n1-g1", "n1"));
    let plan = serde_json::to_string(&plan).unwrap();
    let o = metalctl(&s.url, &s.admin, &["node", "deploy-plan", "n1", "-"], Some(&plan));
    assert!(o.status.success(), "{}", text(&o));
    s.walk("n1", &["ready", "allocated", "deploying"]);
    // The ramdisk's plan carries the enrolment token; the deploy ends; the OS joins with it.
    let (client, _) = s.ramdisk_client("n1", "52:54:00:00:00:01");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let plan: serde_json::Value = runtime.block_on(async {
        client.get(format!("{}/v1/boot/plan", s.boot_url)).send().await.unwrap().json().await.unwrap()
    });
    let user_data: serde_json::Value =
        serde_json::from_str(plan["cloudInit"]["userData"].as_str().unwrap().trim_start_matches("#cloud-config\n"))
            .unwrap();
    let token = user_data["write_files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "/etc/metal/enrolment-token")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .trim()
        .to_owned();
    let done = TaskReport {
        node_id: "n1".into(),
        task: "deploy".into(),
        ok: true,
        detail: "written".into(),
        finished_at: time::OffsetDateTime::now_utc(),
    };
    assert_eq!(s.post_report_as(Role::Ramdisk, "n1", 1, TaskReport::PAYLOAD_TYPE, &done)["accepted"], true);
    let key = metal_protocol::SigningKey::generate(&mut rand::rngs::OsRng);
    let public_key = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, key.verifying_key().to_bytes());
    let body = serde_json::json!({"token": token, "publicKey": public_key, "hostname": "n1"});
    let status = runtime.block_on(async {
        client.post(format!("{}/v1/hosts/join", s.boot_url)).json(&body).send().await.unwrap().status()
    });
    assert_eq!(status, 200);

    let o = run(&["host", "list"]);
    let listing = text(&o);
    assert!(listing.starts_with("NODE  STATE    ROLE  GENERATION  HOSTNAME"), "{listing}");
    assert!(listing.lines().nth(1).unwrap().starts_with("n1    joining  node  1           n1"), "{listing}");
    let o = run(&["host", "show", "n1"]);
    assert!(text(&o).contains("enrolmentToken         enr-") && !text(&o).contains(&token), "{}", text(&o));
    let o = run(&["host", "log", "n1"]);
    let log = text(&o);
    assert!(
        log.starts_with("#  AT") && log.contains("token        true") && log.contains("certificate  true"),
        "{log}"
    );
    let o = run(&["host", "show", "nope"]);
    assert!(!o.status.success() && text(&o).contains("NOT_FOUND"), "{}", text(&o));
}
