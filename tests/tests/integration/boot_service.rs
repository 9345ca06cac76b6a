//! The scheduler's boot service end to end on loopback, with metal-boot's own controller
//! client as the ramdisk: iPXE scripts per MAC, token-gated files, the one-time join,
//! commissioning and wipe report intake (every refusal stored and raised), task reports,
//! deploy plans, rate limits and auto-enrolment.

use std::path::{Path, PathBuf};
use std::time::Duration;

use metal_boot::controller::{self, ControllerError, Joined, Retry};
use metal_protocol::{InventoryReport, Role, WipeReport};
use metal_tests::scheduler::{Admin as _, INTRUDER, TestScheduler, intruder_join, intruder_script, join_from};
use metal_types::config::Config;
use serde_json::{Value, json};

const MAC: &str = "52:54:00:12:34:56";

fn start() -> TestScheduler {
    TestScheduler::start(|_| {})
}

fn no_retry() -> Retry {
    Retry { attempts: 1, backoff: Duration::from_millis(1) }
}

/// Starts a boot of n1 by hand and boots it through `/boot/ipxe`; returns the script's
/// token, checking its task.
fn boot(s: &TestScheduler, task: &str) -> String {
    s.arm_boot("n1");
    first_boot(s, task)
}

/// A network boot of the machine with MAC that nobody started (a new node's first), with
/// the script's token, checking its task.
fn first_boot(s: &TestScheduler, task: &str) -> String {
    let (status, script) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert_eq!(status, 200, "{script}");
    let (token, found) = TestScheduler::script_token(&script).unwrap_or_else(|| panic!("no kernel line: {script}"));
    assert_eq!(found, task, "{script}");
    token
}

fn join(s: &TestScheduler, token: &str) -> Result<Joined, ControllerError> {
    controller::join(&s.boot_url, &s.fingerprint, token, no_retry())
}

fn inventory(node: &str) -> InventoryReport {
    let mut report: InventoryReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/inventory-report.json")).unwrap();
    report.node_id = node.into();
    report
}

fn wipe(node: &str) -> WipeReport {
    let mut report: WipeReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/wipe-report.json")).unwrap();
    report.node_id = node.into();
    report
}

/// A node that has been commissioned through the boot service (state ready).
fn commissioned(s: &TestScheduler) {
    s.enrol("n1", MAC);
    let joined = join(s, &boot(s, "commission")).unwrap();
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory("n1")).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    assert_eq!(s.node("n1")["state"], "ready");
}

#[test]
fn a_new_node_is_commissioned_through_the_script_the_files_and_the_join() {
    let s = start();
    std::fs::create_dir_all(s.files_dir()).unwrap();
    std::fs::write(s.files_dir().join("vmlinuz"), b"kernel bytes").unwrap();
    std::fs::write(s.files_dir().join("initrd"), b"initrd bytes").unwrap();

    let (status, body) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert_eq!(status, 404, "an unknown MAC is not enrolled by default: {body}");
    assert!(body.contains(MAC), "{body}");
    let (status, body) = s.get_text("/boot/ipxe?mac=nonsense");
    assert_eq!(status, 422, "{body}");

    s.enrol("n1", MAC);
    let (status, script) = s.get_text(&format!("/boot/ipxe?mac={}", MAC.to_uppercase()));
    assert_eq!(status, 200, "{script}");
    assert!(script.starts_with("#!ipxe\n"), "{script}");
    for needle in [
        format!("metal.controller={}", s.boot_url),
        format!("metal.ca={}", s.fingerprint),
        "metal.task=commission".into(),
        "metal.node=n1".into(),
        format!("metal.bootif={MAC}"),
        "initrd=initrd".into(),
        "initrd --name initrd /boot/files/initrd?token=".into(),
    ] {
        assert!(script.contains(&needle), "{needle} missing from:\n{script}");
    }
    let (token, _) = TestScheduler::script_token(&script).unwrap();
    assert_eq!(s.node("n1")["state"], "commissioning", "a new node that boots is commissioned");
    assert_eq!(s.node("n1")["owner"], "boot-service");

    // The files are served to a live token only.
    assert_eq!(s.get_text(&format!("/boot/files/vmlinuz?token={token}")), (200, "kernel bytes".into()));
    assert_eq!(s.get_text(&format!("/boot/files/initrd?token={token}")), (200, "initrd bytes".into()));
    assert_eq!(s.get_text("/boot/files/vmlinuz?token=guess").0, 403);
    assert_eq!(s.get_text(&format!("/boot/files/passwd?token={token}")).0, 404);

    // The token is traded once for a ramdisk certificate of the node's identity generation.
    let joined = join(&s, &token).unwrap();
    let identity = joined.identity().identity();
    assert_eq!((identity.node.as_str(), identity.generation, identity.role), ("n1", 1, Role::Ramdisk));
    assert_eq!(s.get_text(&format!("/boot/files/initrd?token={token}")).0, 403, "a used token fetches nothing");

    // A report about another node is refused; the commissioning report moves the node to
    // ready and is stored as its inventory.
    match joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory("n2")) {
        Err(ControllerError::Refused { status: 403, message, .. }) => {
            assert!(message.contains("names node n2"), "{message}")
        }
        other => panic!("a report about another node must be refused: {other:?}"),
    }
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory("n1")).unwrap();
    assert!(receipt.accepted);
    let node = s.node("n1");
    assert_eq!(node["state"], "ready", "{node}");
    let (status, stored) = s.call("GET", "/v1/nodes/n1/inventory", None);
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored["passed"], true);
    assert_eq!(stored["inventory"]["disks"][0]["identity"]["serial"], "NVME0001");
    assert_eq!(s.events("node.ramdisk.joined").len(), 1);
    // Its boot ended with the commissioning: the token joins nothing any more.
    match join(&s, &token) {
        Err(ControllerError::Refused { status: 403, message, .. }) => {
            assert!(message.contains("is over: node moved to ready"), "{message}")
        }
        other => panic!("a used token must be refused: {other:?}"),
    }

    // Ready: the script sends the machine to its next boot device, in either language.
    let (_, script) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert!(script.contains("\nexit\n") && !script.contains("metal.token"), "{script}");
    let (_, script) = s.get_text(&format!("/boot/grub?mac={MAC}"));
    assert!(script.contains("nothing to run") && script.ends_with("\nexit\n"), "{script}");
}

#[test]
fn grub_gets_the_same_decision_in_its_own_language() {
    let s = start();
    s.enrol("n1", MAC);
    let (status, script) = s.get_text(&format!("/boot/grub?mac={MAC}"));
    assert_eq!(status, 200, "{script}");
    assert!(!script.contains("#!ipxe") && !script.contains("initrd=initrd"), "{script}");
    let kernel = script.lines().find(|l| l.starts_with("linux ")).unwrap_or_else(|| panic!("{script}"));
    assert!(kernel.starts_with("linux \"${metal}/boot/files/vmlinuz?token="), "{kernel}");
    assert!(kernel.contains("metal.task=commission") && kernel.contains(&format!("metal.ca={}", s.fingerprint)));
    assert!(script.contains("initrd \"${metal}/boot/files/initrd?token="), "{script}");
    let token = kernel.split_whitespace().find_map(|w| w.strip_prefix("metal.token=")).unwrap();
    assert!(join(&s, token).is_ok(), "the GRUB script's token joins");
}

#[test]
fn an_arm64_machine_gets_the_arm64_ramdisk_by_its_loaders_cpu_and_then_by_its_inventory() {
    let s = TestScheduler::start(|c: &mut Config| {
        c.boot.kernel_args = "console=ttyS0 x86-only".into();
        c.boot.kernel_args_aarch64 = "console=ttyAMA0 arm64-only".into();
    });
    let files = s.files_dir();
    std::fs::create_dir_all(files.join("aarch64")).unwrap();
    std::fs::write(files.join("vmlinuz"), b"x86 kernel").unwrap();
    std::fs::write(files.join("aarch64/vmlinuz"), b"arm64 kernel").unwrap();
    s.enrol("n1", MAC);
    let (status, body) = s.get_text(&format!("/boot/grub?mac={MAC}&arch=riscv64"));
    assert_eq!(status, 422, "a CPU no ramdisk is built for: {body}");
    assert!(body.contains("riscv64") && body.contains("arm64"), "{body}");
    assert_eq!(s.node("n1")["state"], "new", "a refused request changes nothing");

    // Before commissioning, the loader's CPU decides (GRUB names arm64).
    let (status, script) = s.get_text(&format!("/boot/grub?mac={MAC}&arch=arm64"));
    assert_eq!(status, 200, "{script}");
    let kernel = script.lines().find(|l| l.starts_with("linux ")).unwrap_or_else(|| panic!("{script}"));
    assert!(kernel.contains("&arch=aarch64\" ") && kernel.contains("arm64-only"), "{kernel}");
    assert!(!kernel.contains("x86-only"), "{kernel}");
    assert!(script.contains("/boot/files/initrd?token=") && script.contains("&arch=aarch64\"\n"), "{script}");
    assert_eq!(s.events("node.boot.ramdisk")[0]["data"]["arch"], "aarch64");
    let token = kernel.split_whitespace().find_map(|w| w.strip_prefix("metal.token=")).unwrap();
    assert_eq!(s.get_text(&format!("/boot/files/vmlinuz?token={token}&arch=aarch64")), (200, "arm64 kernel".into()));
    assert_eq!(s.get_text(&format!("/boot/files/vmlinuz?token={token}")), (200, "x86 kernel".into()));
    let (status, body) = s.get_text(&format!("/boot/files/initrd?token={token}&arch=aarch64"));
    assert!(status == 422 && body.contains("build-ramdisk --arch aarch64"), "a missing arm64 initrd: {status} {body}");
    let (status, body) = s.get_text(&format!("/boot/files/vmlinuz?token={token}&arch=mips"));
    assert_eq!(status, 422, "{body}");
    // Naming the arm64 ramdisk gets no host past the token.
    assert_eq!(s.get_text("/boot/files/vmlinuz?token=guess&arch=aarch64").0, 403);

    // Commissioned as arm64, the node gets arm64's ramdisk from a loader that names no CPU.
    let mut report = inventory("n1");
    report.cpu.architecture = "aarch64".into();
    let receipt = join(&s, token).unwrap().post_report(InventoryReport::PAYLOAD_TYPE, &report).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    assert_eq!(s.get_text(&format!("/boot/files/vmlinuz?token={token}&arch=aarch64")).0, 403, "a used token");
    assert_eq!(s.node("n1")["architecture"], "aarch64");
    s.walk("n1", &["ready", "allocated", "deploying", "deployed", "releasing"]);
    s.arm_boot("n1");
    let (_, script) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert!(
        script.contains("metal.task=erase") && script.contains("?token=") && script.contains("arm64-only"),
        "{script}"
    );
    assert!(script.contains("/boot/files/vmlinuz?token=") && script.contains("&arch=aarch64 "), "{script}");
}

#[test]
fn a_failed_commissioning_test_fails_the_node() {
    let s = start();
    s.enrol("n1", MAC);
    let joined = join(&s, &boot(&s, "commission")).unwrap();
    let mut report = inventory("n1");
    report.tests[0].passed = false;
    report.tests[0].details = "pattern mismatch at 0x1000".into();
    assert!(joined.post_report(InventoryReport::PAYLOAD_TYPE, &report).unwrap().accepted);
    let node = s.node("n1");
    assert_eq!(node["state"], "failed", "{node}");
    assert!(node["stateReason"].as_str().unwrap().contains("pattern mismatch"), "{node}");
}

#[test]
fn expired_tokens_and_stale_identities_do_not_join() {
    let s = start();
    s.enrol("n1", MAC);
    let token = boot(&s, "commission");
    s.clock.advance(Duration::from_secs(31 * 60));
    match join(&s, &token) {
        Err(ControllerError::Refused { status: 403, message, .. }) => assert!(message.contains("expired"), "{message}"),
        other => panic!("an expired token must be refused: {other:?}"),
    }
    // A token for commissioning is no good once the node moved on: its boot ended.
    let token = boot(&s, "commission");
    s.walk("n1", &["commissioning", "failed"]);
    match join(&s, &token) {
        Err(ControllerError::Refused { status: 403, message, .. }) => {
            assert!(message.contains("is over: node moved to failed"), "{message}")
        }
        other => panic!("a token for another step must be refused: {other:?}"),
    }
}

#[test]
fn wipe_reports_pass_only_through_verify_wipe_report_and_refusals_are_stored() {
    let s = start();
    commissioned(&s);
    s.walk("n1", &["ready", "allocated", "deploying", "deployed", "releasing"]);
    let token = boot(&s, "erase");
    let joined = join(&s, &token).unwrap();

    // A node-tenant certificate of the same node cannot vouch for a wipe.
    let receipt = s.post_report_as(Role::NodeTenant, "n1", 1, WipeReport::PAYLOAD_TYPE, &wipe("n1"));
    assert_eq!(receipt["accepted"], false, "{receipt}");
    assert!(receipt["reason"].as_str().unwrap().starts_with("role-not-allowed"), "{receipt}");

    // A report that leaves out an inventoried disk (a second later: records list by time).
    s.clock.advance(Duration::from_secs(1));
    let mut partial = wipe("n1");
    partial.disks.retain(|d| d.identity.serial.as_deref() != Some("NVME0001"));
    let receipt = joined.post_report(WipeReport::PAYLOAD_TYPE, &partial).unwrap();
    assert!(!receipt.accepted && receipt.reason.as_deref().unwrap().contains("missing-disk"), "{receipt:?}");
    assert_eq!(s.node("n1")["state"], "releasing", "a refused report changes nothing");

    let (status, records) = s.call("GET", "/v1/nodes/n1/wipe-reports", None);
    assert_eq!(status, 200, "{records}");
    let codes: Vec<&str> = records.as_array().unwrap().iter().map(|r| r["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["role-not-allowed", "missing-disk"]);
    assert!(records[0]["signer"].as_str().unwrap().ends_with("/node/n1/gen/1/node-tenant"), "{records}");
    let refused = s.events("node.wipe.refused");
    assert_eq!(refused.len(), 2);
    assert_eq!(refused[1]["data"]["code"], "missing-disk");

    // The whole, passing report from the ramdisk returns the node to ready.
    s.clock.advance(Duration::from_secs(1));
    let receipt = joined.post_report(WipeReport::PAYLOAD_TYPE, &wipe("n1")).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    assert_eq!(s.node("n1")["state"], "ready");
    let (_, records) = s.call("GET", "/v1/nodes/n1/wipe-reports", None);
    assert_eq!(records[2]["accepted"], true, "{records}");

    // One report opened up: the verdict, the signed payload, and the signing certificate,
    // whose fingerprint OpenSSL computes the same; the envelope downloads as it was posted.
    let id = records[2]["id"].as_str().unwrap();
    let (status, detail) = s.call("GET", &format!("/v1/nodes/n1/wipe-reports/{id}"), None);
    assert_eq!(status, 200, "{detail}");
    assert_eq!(detail["record"], records[2]);
    assert_eq!(detail["payloadType"], WipeReport::PAYLOAD_TYPE);
    assert_eq!(detail["report"]["nodeId"], "n1");
    assert_eq!(detail["report"]["disks"].as_array().unwrap().len(), wipe("n1").disks.len());
    let pem = detail["signerCertificate"].as_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("signer.pem"), pem).unwrap();
    let openssl = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
        .arg(dir.path().join("signer.pem"))
        .output()
        .unwrap();
    assert!(openssl.status.success(), "{}", String::from_utf8_lossy(&openssl.stderr));
    let fingerprint = String::from_utf8_lossy(&openssl.stdout).split('=').nth(1).unwrap().trim().replace(':', "");
    assert_eq!(fingerprint.to_lowercase(), detail["signerFingerprint"].as_str().unwrap());
    let response = reqwest::blocking::Client::new()
        .get(format!("{}/v1/nodes/n1/wipe-reports/{id}/envelope", s.url))
        .bearer_auth(&s.admin)
        .send()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-disposition"], format!("attachment; filename=\"{id}.dsse.json\""));
    let envelope = metal_protocol::dsse::Envelope::from_json(&response.bytes().unwrap()).unwrap();
    let payload: serde_json::Value = serde_json::from_slice(&envelope.payload_bytes().unwrap()).unwrap();
    assert_eq!(payload, detail["report"]);
    // A refused report opens up too, with its reason; unknown ids and other nodes' are 404.
    let refused = records[1]["id"].as_str().unwrap();
    let (_, detail) = s.call("GET", &format!("/v1/nodes/n1/wipe-reports/{refused}"), None);
    assert_eq!(detail["record"]["code"], "missing-disk", "{detail}");
    for path in ["/v1/nodes/n1/wipe-reports/wipe-nope", "/v1/nodes/n1/wipe-reports/wipe-nope/envelope"] {
        assert_eq!(s.call("GET", path, None).0, 404, "{path}");
    }
    s.call("POST", "/v1/nodes", Some(json!({"id": "n2"})));
    assert_eq!(s.call("GET", &format!("/v1/nodes/n2/wipe-reports/{id}"), None).0, 404, "another node's report");
    // Admin only, like the list: a tenant member cannot tell that it exists.
    s.call("POST", "/v1/tenants", Some(json!({"id": "acme"})));
    let (_, created) =
        s.call("POST", "/v1/credentials", Some(json!({"role": "tenant-member", "tenantId": "acme", "name": "acme"})));
    let tenant = created["token"].as_str().unwrap();
    for path in [format!("/v1/nodes/n1/wipe-reports/{id}"), format!("/v1/nodes/n1/wipe-reports/{id}/envelope")] {
        assert_eq!(s.call_as(tenant, "GET", &path, None).0, 404, "{path}");
    }
    let (_, session) = s.call_as(tenant, "GET", "/v1/session", None);
    assert_eq!(session["role"], "tenant-member", "{session}");
    assert_eq!(session["tenantId"], "acme", "{session}");
}

#[test]
fn a_report_of_a_failed_erase_quarantines_the_node() {
    let s = start();
    commissioned(&s);
    s.walk("n1", &["ready", "allocated", "deploying", "deployed", "releasing"]);
    let joined = join(&s, &boot(&s, "erase")).unwrap();
    let mut failed = wipe("n1");
    failed.disks[0].result = metal_protocol::wipe::WipeResult::Fail;
    failed.disks[0].first_bad_offset = Some(4096);
    let receipt = joined.post_report(WipeReport::PAYLOAD_TYPE, &failed).unwrap();
    assert!(!receipt.accepted && receipt.reason.as_deref().unwrap().starts_with("disk-failed"), "{receipt:?}");
    let node = s.node("n1");
    assert_eq!(node["state"], "failed", "{node}");
    assert_eq!(node["failedFrom"], "releasing");
}

#[test]
fn reports_need_the_sites_client_certificate_and_the_current_generation() {
    let s = start();
    s.enrol("n1", MAC);
    let client = reqwest::blocking::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let response = client
        .post(format!("{}{}", s.boot_url, metal_protocol::boot::REPORTS_PATH))
        .json(&json!({"payloadType": "x", "payload": "", "signatures": []}))
        .send()
        .unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(client.get(format!("{}{}", s.boot_url, metal_protocol::boot::PLAN_PATH)).send().unwrap().status(), 401);
}

#[test]
fn a_deploying_node_fetches_its_plan_and_its_task_report_ends_the_deploy() {
    let s = start();
    commissioned(&s);
    // With an agent to serve, a seed metal rendered gains the join; this one was written by
    // hand (YAML), so it is served as it was set.
    std::fs::create_dir_all(s.files_dir()).unwrap();
    std::fs::write(s.files_dir().join("metal-agent"), b"agent").unwrap();
    let plan: Value = serde_json::from_str(include_str!("../../../protocol/tests/golden/deploy-plan.json")).unwrap();
    let (status, body) = s.call("PUT", "/v1/nodes/n1/deploy-plan", Some(json!({"image": "nonsense"})));
    assert_eq!(status, 422, "{body}");
    let (status, body) = s.call("PUT", "/v1/nodes/n1/deploy-plan", Some(plan.clone()));
    assert_eq!(status, 204, "{body}");
    s.walk("n1", &["ready", "allocated", "deploying"]);
    let joined = join(&s, &boot(&s, "deploy")).unwrap();
    let fetched = joined.fetch_plan().unwrap();
    assert_eq!(serde_json::to_value(&fetched).unwrap(), plan);
    assert!(joined.report_task("deploy", true, "written".into()).unwrap().accepted);
    assert_eq!(s.node("n1")["state"], "deployed");
    match joined.fetch_plan() {
        Err(ControllerError::Refused { status: 409, .. }) => {}
        other => panic!("a deployed node has no plan to fetch: {other:?}"),
    }
}

#[test]
fn unknown_macs_enrol_themselves_when_auto_enrol_is_on() {
    let s = TestScheduler::start(|c: &mut Config| c.boot.auto_enrol = true);
    let token = first_boot(&s, "commission");
    let node = s.node("node-525400123456");
    assert_eq!((node["state"].as_str(), node["bootMac"].as_str()), (Some("commissioning"), Some(MAC)));
    assert_eq!(s.events("node.enrolled").len(), 1);
    assert_eq!(join(&s, &token).unwrap().identity().identity().node, "node-525400123456");
}

#[test]
fn boot_endpoints_are_rate_limited_per_client() {
    let s = TestScheduler::start(|c: &mut Config| c.boot.rate_per_minute = 3);
    s.enrol("n1", MAC);
    for _ in 0..3 {
        assert_eq!(s.get_text(&format!("/boot/ipxe?mac={MAC}")).0, 200);
    }
    let (status, body) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert_eq!(status, 429, "{body}");
    assert!(body.contains("RATE_LIMITED") && body.contains("retry in"), "{body}");
    assert_eq!(s.get_text("/boot/files/vmlinuz?token=x").0, 429, "the files share the client's bucket");
    assert_eq!(s.call("GET", "/v1/nodes/n1", None).0, 200, "the authenticated API is not limited");
}

/// Puts node n1 in a pool whose firmware baseline wants this BIOS version.
fn pool_with_bios(s: &TestScheduler, bios: &str) {
    let pool = json!({"id": "p1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated",
        "policy": {"tenantRoot": true, "firmwareBaseline": {"bios": bios}}});
    let (status, body) = s.call("POST", "/v1/pools", Some(pool));
    assert_eq!(status, 201, "{body}");
    let (status, body) = s.call("PATCH", "/v1/nodes/n1", Some(json!({"poolId": "p1"})));
    assert_eq!(status, 200, "{body}");
}

#[test]
fn a_releasing_node_in_a_pool_with_a_baseline_has_its_firmware_checked_before_the_erase() {
    let s = start();
    commissioned(&s);
    pool_with_bios(&s, "1.16.3");
    s.walk("n1", &["ready", "allocated", "deploying", "deployed", "releasing"]);
    let token = boot(&s, "firmware");
    let joined = join(&s, &token).unwrap();
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory("n1")).unwrap();
    assert!(receipt.accepted && receipt.reason.is_none(), "{receipt:?}");
    let checked = s.events("node.firmware.checked");
    assert_eq!(checked[0]["data"]["compliant"], true, "{checked:?}");
    assert_eq!(s.node("n1")["state"], "releasing");
    // Compliant at this generation: the next boot erases.
    boot(&s, "erase");
}

#[test]
fn firmware_drift_found_in_band_fails_the_releasing_node() {
    let s = start();
    commissioned(&s);
    pool_with_bios(&s, "2.0");
    s.walk("n1", &["ready", "allocated", "deploying", "deployed", "releasing"]);
    let joined = join(&s, &boot(&s, "firmware")).unwrap();
    let receipt = joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory("n1")).unwrap();
    assert_eq!(receipt.reason.as_deref(), Some("FIRMWARE_DRIFT: bios: expected 2.0, found 1.16.3"), "{receipt:?}");
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["failedFrom"].as_str()), (Some("failed"), Some("releasing")), "{node}");
    assert!(node["stateReason"].as_str().unwrap().starts_with("FIRMWARE_DRIFT"), "{node}");
    // The check is kept as evidence: the verdict and the comparison, per component.
    let (status, checks) = s.call("GET", "/v1/nodes/n1/firmware-checks", None);
    assert_eq!(status, 200, "{checks}");
    assert_eq!(checks.as_array().unwrap().len(), 1, "{checks}");
    assert_eq!(checks[0]["compliant"], false);
    assert_eq!(checks[0]["nodeGeneration"], node["generation"].as_i64().unwrap() - 1, "checked while releasing");
    let bios = &checks[0]["report"]["components"][0];
    assert_eq!(
        (&bios["component"], &bios["expected"], &bios["found"]),
        (&json!("bios"), &json!("2.0"), &json!("1.16.3"))
    );
    assert_eq!(s.call("GET", "/v1/nodes/nope/firmware-checks", None).0, 404);
}

/// The last `node.boot.contested` event's data.
fn contested(s: &TestScheduler) -> Value {
    s.events("node.boot.contested").last().unwrap_or_else(|| panic!("no node.boot.contested event"))["data"].clone()
}

#[test]
fn a_node_nobody_booted_gets_nothing_to_run_whoever_asks() {
    let s = start();
    commissioned(&s);
    s.walk("n1", &["ready", "allocated", "deploying"]);
    // Deploying, but nobody booted it: neither the machine nor another host gets a token.
    let (_, script) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert!(
        script.contains("nothing to run (no boot was started for it)") && !script.contains("metal.token"),
        "{script}"
    );
    let script = intruder_script(&s.url, MAC);
    assert!(!script.contains("metal.token"), "{script}");
    assert!(s.events("node.boot.contested").is_empty(), "asking for an unstarted boot is no claim on one");
    // Started by hand: the first request takes its token; the boot shows who took it.
    let armed = s.arm_boot("n1");
    let token = first_boot(&s, "deploy");
    let (status, boots) = s.call("GET", "/v1/nodes/n1/boots", None);
    assert_eq!(status, 200, "{boots}");
    assert_eq!(boots[0]["id"], armed["id"], "{boots}");
    assert_eq!((boots[0]["task"].as_str(), boots[0]["handedTo"].as_str()), (Some("deploy"), Some("127.0.0.1")));
    assert!(boots[0].get("tokenHash").is_none(), "no token digest in an answer: {boots}");
    assert!(!boots.to_string().contains(&token));
    let joined = join(&s, &token).unwrap();
    assert_eq!(s.call("GET", "/v1/nodes/n1/boots", None).1[0]["joinedFrom"], "127.0.0.1");
    assert!(joined.report_task("deploy", true, "written".into()).unwrap().accepted);
    // Its task is over with the deploy: the boot ended, and a later boot of the disk is no claim.
    let boots = s.call("GET", "/v1/nodes/n1/boots", None).1;
    assert_eq!(boots[0]["ended"], "node moved to deployed", "{boots}");
    assert!(intruder_script(&s.url, MAC).contains("nothing to run"));
    assert!(s.events("node.boot.contested").is_empty());
}

#[test]
fn a_second_script_request_for_one_boot_is_contested_and_quarantines_the_node() {
    let s = start();
    s.enrol("n1", MAC);
    // The machine's first network boot takes the commissioning boot; another host asking
    // for the same MAC during that boot gets no token and raises the alarm.
    let token = first_boot(&s, "commission");
    let script = intruder_script(&s.url, MAC);
    assert!(script.contains("two ramdisks claimed node n1") && !script.contains("metal.token"), "{script}");
    let event = contested(&s);
    assert_eq!((event["first"].as_str(), event["second"].as_str()), (Some("127.0.0.1"), Some(INTRUDER)), "{event}");
    assert_eq!(event["what"], "a second script request");
    let node = s.node("n1");
    assert_eq!((node["state"].as_str(), node["maintenance"].as_bool()), (Some("failed"), Some(true)), "{node}");
    assert!(node["stateReason"].as_str().unwrap().contains("two ramdisks claimed node n1"), "{node}");
    // Neither claim wins: the machine's token is revoked with the boot.
    match join(&s, &token) {
        Err(ControllerError::Refused { status: 403, message, .. }) => {
            assert!(message.contains("contested"), "{message}")
        }
        other => panic!("a contested boot's token must be refused: {other:?}"),
    }
    assert!(s.events("node.ramdisk.joined").is_empty());
}

#[test]
fn a_second_join_for_one_boot_is_contested_and_the_intruder_gets_no_certificate() {
    let s = start();
    s.enrol("n1", MAC);
    let token = first_boot(&s, "commission");
    join(&s, &token).unwrap();
    // The token went to the machine's ramdisk; a copy of it joins nothing and raises the alarm.
    let (status, body) = intruder_join(&s.boot_url, &token);
    assert_eq!(status, 403, "{body}");
    assert!(body.get("certificateChain").is_none(), "{body}");
    let event = contested(&s);
    assert_eq!((event["first"].as_str(), event["joinedFrom"].as_str()), (Some("127.0.0.1"), Some("127.0.0.1")));
    assert_eq!((event["second"].as_str(), event["what"].as_str()), (Some(INTRUDER), Some("a second join")), "{event}");
    assert_eq!(s.node("n1")["state"], "failed");
    assert_eq!(s.events("node.ramdisk.joined").len(), 1, "only the machine joined");
}

#[test]
fn a_deploys_plan_and_image_go_only_to_the_ramdisk_that_joined_its_boot() {
    let s = start();
    commissioned(&s);
    let plan: Value = serde_json::from_str(include_str!("../../../protocol/tests/golden/deploy-plan.json")).unwrap();
    assert_eq!(s.call("PUT", "/v1/nodes/n1/deploy-plan", Some(plan)).0, 204);
    s.walk("n1", &["ready", "allocated", "deploying"]);
    let joined = join(&s, &boot(&s, "deploy")).unwrap();
    // A ramdisk certificate of the node's generation whose key did not join this boot (an
    // earlier boot's, or one the site CA issued elsewhere) gets no plan and no image.
    let (client, _) = s.boot_client_as(Role::Ramdisk, "n1", 1);
    for path in [metal_protocol::boot::PLAN_PATH.to_owned(), format!("{}/any", metal_protocol::boot::IMAGES_PATH)] {
        let (status, body) = s.block_on(async {
            let answer = client.get(format!("{}{path}", s.boot_url)).send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        });
        assert_eq!(status, 403, "{path}: {body}");
        assert!(body.contains("did not join node n1's current boot"), "{path}: {body}");
    }
    assert!(joined.fetch_plan().is_ok(), "the boot's own ramdisk gets it");
}

#[test]
fn commissioning_learns_the_ports_lldp_names_unless_an_operator_set_them() {
    let s = TestScheduler::start(|c: &mut Config| c.boot.lldp_wait = Duration::from_secs(35));
    let switch = json!({"id": "tor1", "driver": "ovs", "address": "local", "chassisId": "02:00:00:00:00:AA"});
    assert_eq!(s.call("POST", "/v1/switches", Some(switch)).0, 201);
    s.enrol("n1", MAC);
    let token = first_boot(&s, "commission");
    let mut report = inventory("n1");
    let neighbour = |chassis: &str, system: Option<&str>, port: &str| metal_protocol::lldp::LldpNeighbor {
        chassis_id: chassis.into(),
        port_id: port.into(),
        port_id_subtype: "interface-name".into(),
        port_description: None,
        system_name: system.map(str::to_owned),
    };
    report.nics[0].lldp = Some(neighbour("02:00:00:00:00:aa", None, "swp7"));
    let joined = join(&s, &token).unwrap();
    assert!(joined.post_report(InventoryReport::PAYLOAD_TYPE, &report).unwrap().accepted);
    let (status, ports) = s.call("GET", "/v1/nodes/n1/ports", None);
    assert_eq!(status, 200, "{ports}");
    assert_eq!(ports.as_array().unwrap().len(), 1, "{ports}");
    assert_eq!((ports[0]["switchId"].as_str(), ports[0]["port"].as_str()), (Some("tor1"), Some("swp7")), "{ports}");
    assert_eq!(
        (ports[0]["source"].as_str(), ports[0]["mac"].as_str()),
        (Some("lldp"), Some(report.nics[0].mac.as_str()))
    );
    assert_eq!(s.events("node.ports.learned")[0]["data"]["ports"][0]["port"], "swp7");

    // An operator's ports stand: a later commissioning that hears another port changes nothing.
    let set = json!({"ports": [{"mac": MAC, "switchId": "tor1", "port": "swp9"}]});
    assert_eq!(s.call("PUT", "/v1/nodes/n1/ports", Some(set)).0, 200);
    s.walk("n1", &["ready", "allocated", "deploying", "failed", "commissioning"]);
    let token = first_boot(&s, "commission");
    report.nics[0].lldp = Some(neighbour("02:00:00:00:00:bb", Some("tor1"), "swp8"));
    assert!(join(&s, &token).unwrap().post_report(InventoryReport::PAYLOAD_TYPE, &report).unwrap().accepted);
    let (_, ports) = s.call("GET", "/v1/nodes/n1/ports", None);
    assert_eq!((ports[0]["port"].as_str(), ports[0]["source"].as_str()), (Some("swp9"), Some("operator")), "{ports}");
}

#[test]
fn a_commissioning_ramdisk_is_told_to_listen_for_lldp_when_the_site_says_so() {
    let s = TestScheduler::start(|c: &mut Config| c.boot.lldp_wait = Duration::from_secs(35));
    s.enrol("n1", MAC);
    let (_, script) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert!(script.contains(" metal.lldp=35"), "{script}");
    let quiet = start();
    quiet.enrol("n1", MAC);
    let (_, script) = quiet.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert!(script.contains("metal.task=commission") && !script.contains("metal.lldp"), "{script}");
}

#[test]
fn the_machine_asking_again_before_it_joined_gets_a_new_token_and_a_join_again_with_its_key_is_no_claim() {
    let s = start();
    s.enrol("n1", MAC);
    // Its answer lost (a replica died before it answered): the same address asks again.
    let first = first_boot(&s, "commission");
    let second = first_boot(&s, "commission");
    assert_ne!(first, second);
    assert!(s.events("node.boot.contested").is_empty());
    assert_eq!(s.events("node.boot.ramdisk").last().unwrap()["data"]["again"], true);
    let (status, body) = join_from(&s.boot_url, &first, "127.0.0.1", 5);
    assert_eq!(status, 403, "the first token is revoked: {body}");
    // The ramdisk joins; its join's answer lost, it joins again with the same key and token.
    let (status, once) = join_from(&s.boot_url, &second, "127.0.0.1", 5);
    assert_eq!(status, 200, "{once}");
    let (status, again) = join_from(&s.boot_url, &second, "127.0.0.1", 5);
    assert_eq!((status, &again["nodeId"]), (200, &once["nodeId"]), "{again}");
    assert!(s.events("node.boot.contested").is_empty());
    // Joined: the same address asking for a script now is a second claim.
    let (_, script) = s.get_text(&format!("/boot/ipxe?mac={MAC}"));
    assert!(script.contains("two ramdisks claimed node n1") && !script.contains("metal.token"), "{script}");
    assert_eq!(contested(&s)["second"], "127.0.0.1");
}

/// A site that trusts swtpm's local CA (with the intermediate that signs its EK
/// certificates, or its root alone) with node n1 enrolled, and n1's TPM: a bare swtpm whose
/// state lives in `dir`. Returns the CA bundle too (for a restart's configuration).
fn tpm_site(dir: &Path, with_intermediate: bool) -> (TestScheduler, metal_tests::tpm::Swtpm, PathBuf) {
    use metal_tests::tpm::{Swtpm, local_ca_bundle};
    let bundle = local_ca_bundle(dir, with_intermediate);
    let trusted = bundle.clone();
    let s = TestScheduler::start(|c| c.boot.tpm_ca_file = Some(trusted));
    s.enrol("n1", MAC);
    (s, Swtpm::fresh(dir), bundle)
}

/// n1 in pool p1, which enforces measured boot.
fn enforcing(s: &TestScheduler) {
    let pool = json!({"id": "p1", "tenantId": "root", "siteId": "s", "class": "c",
                      "policy": {"measuredBoot": {"mode": "enforce"}}});
    assert_eq!(s.call("POST", "/v1/pools", Some(pool)).0, 201);
    assert_eq!(s.call("PATCH", "/v1/nodes/n1", Some(json!({"poolId": "p1"}))).0, 200);
}

#[test]
fn a_ramdisk_attests_with_its_tpm_and_a_replayed_answer_or_another_tpm_is_refused() {
    use metal_boot::measured::{Keys, attest};
    use metal_boot::tpm::Tpm;
    use metal_protocol::measurement::AttestationReport;
    use metal_tests::tpm::{Swtpm, empty_event_log};
    let dir = tempfile::tempdir().unwrap();
    let (s, swtpm, _) = tpm_site(dir.path(), true);
    // In a pool that enforces measured boot: the commissioning quote becomes the baseline.
    enforcing(&s);
    let joined = join(&s, &boot(&s, "commission")).unwrap();
    let mut tpm = Tpm::new(swtpm.connect());

    // The first attestation pins the TPM and verifies.
    let receipt = attest(&mut tpm, &joined, empty_event_log()).unwrap();
    assert!(receipt.accepted, "{receipt:?}");
    let (status, list) = s.call("GET", "/v1/nodes/n1/attestations", None);
    assert_eq!(status, 200, "{list}");
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["verified"], true, "{list}");
    assert_eq!(list[0]["pcrs"].as_object().unwrap().len(), 10);
    assert_eq!(list[0]["pcrs"]["0"], "0".repeat(64));
    let registered = s.events("node.tpm.registered");
    assert_eq!(registered.len(), 1);
    assert_eq!(registered[0]["data"]["certificate"], "verified", "{registered:?}");
    assert_eq!(s.events("node.attestation.verified").len(), 1);
    let (_, baselines) = s.call("GET", "/v1/nodes/n1/boot-baselines", None);
    assert_eq!(baselines.as_array().unwrap().len(), 1, "{baselines}");
    assert_eq!((&baselines[0]["learnedBy"], &baselines[0]["state"]), (&json!("commissioning"), &json!("active")));
    assert_eq!((&baselines[0]["attestationId"], &baselines[0]["pcrs"]), (&list[0]["id"], &list[0]["pcrs"]));

    // A quote that binds something other than the challenge, then the same answer again.
    let keys = Keys::load(&mut tpm).unwrap();
    let challenge = joined.challenge(&keys.names()).unwrap();
    let evidence = keys.quote(&mut tpm, &challenge.nonce, empty_event_log()).unwrap();
    let report = AttestationReport { node_id: "n1".into(), challenge_id: challenge.challenge_id, evidence };
    let refused = joined.post_report(AttestationReport::PAYLOAD_TYPE, &report).unwrap();
    assert!(!refused.accepted && refused.reason.as_deref().unwrap().starts_with("wrong-challenge"), "{refused:?}");
    let replayed = joined.post_report(AttestationReport::PAYLOAD_TYPE, &report).unwrap();
    assert!(replayed.reason.as_deref().unwrap().contains("already answered"), "{replayed:?}");

    // A genuine answer posted by another ramdisk certificate of the node than the one that
    // asked (its key is not the one the quote binds): refused.
    let keys = Keys::load(&mut tpm).unwrap();
    let challenge = joined.challenge(&keys.names()).unwrap();
    let secret =
        tpm.activate_credential(keys.ak(), keys.ek(), &challenge.credential_blob, &challenge.encrypted_seed).unwrap();
    let asker = joined.identity().signer().verifying_key();
    let bound = metal_protocol::measurement::binding(&challenge.nonce, &secret, asker.as_bytes());
    let evidence = keys.quote(&mut tpm, &bound, empty_event_log()).unwrap();
    let report = AttestationReport { node_id: "n1".into(), challenge_id: challenge.challenge_id, evidence };
    let relayed = s.post_report_as(metal_protocol::Role::Ramdisk, "n1", 1, AttestationReport::PAYLOAD_TYPE, &report);
    assert!(relayed["reason"].as_str().is_some_and(|r| r.contains("another ramdisk key")), "{relayed}");

    // Another TPM for the same node: refused before any credential is made for it.
    let other = Swtpm::fresh(&dir.path().join("other"));
    let error = attest(&mut Tpm::new(other.connect()), &joined, empty_event_log()).unwrap_err();
    assert!(error.contains("differs from the EK node n1 registered"), "{error}");
    let (_, list) = s.call("GET", "/v1/nodes/n1/attestations", None);
    let mut codes: Vec<&str> =
        list.as_array().unwrap().iter().map(|a| a["code"].as_str().unwrap_or("verified")).collect();
    codes.sort_unstable();
    assert_eq!(codes, ["challenge-refused", "ek-differs", "verified", "wrong-challenge", "wrong-challenge"]);
    assert_eq!(s.events("node.attestation.refused").len(), 4);
    assert_eq!(s.node("n1")["state"], "commissioning", "an attestation alone moves no node");
    // A tenant's certificate of the node (its deployed OS's) can neither ask for a challenge
    // nor answer one.
    let (tenant, signer) = s.boot_client_as(Role::NodeTenant, "n1", 1);
    let keys = Keys::load(&mut tpm).unwrap();
    let url = format!("{}{}", s.boot_url, metal_protocol::boot::ATTEST_CHALLENGE_PATH);
    let asked = s.block_on(async { tenant.post(url).json(&keys.names()).send().await.unwrap().status() });
    assert_eq!(asked, 403);
    let challenge = joined.challenge(&keys.names()).unwrap();
    let evidence = keys.quote(&mut tpm, &challenge.nonce, empty_event_log()).unwrap();
    let report = AttestationReport { node_id: "n1".into(), challenge_id: challenge.challenge_id, evidence };
    let envelope = metal_protocol::Envelope::sign_json(AttestationReport::PAYLOAD_TYPE, &report, &signer).unwrap();
    let url = format!("{}{}", s.boot_url, metal_protocol::boot::REPORTS_PATH);
    let answered = s.block_on(async { tenant.post(url).json(&envelope).send().await.unwrap().status() });
    assert_eq!(answered, 403);

    // metalctl shows them to an operator.
    let home = metal_tests::metalctl::home(&dir.path().join("home"), &s.url, &s.admin);
    let table = metal_tests::metalctl::run(&home, &["attest", "list", "n1"]);
    assert!(table.contains("VERIFIED") && table.contains("ek-differs") && table.contains("wrong-challenge"), "{table}");
    let table = metal_tests::metalctl::run(&home, &["attest", "baselines", "n1"]);
    assert!(table.contains("commissioning") && table.contains(baselines[0]["id"].as_str().unwrap()), "{table}");
    // A refused attestation cannot be approved as a baseline.
    let refused = list.as_array().unwrap().iter().find(|a| a["code"] == "ek-differs").unwrap();
    let (status, body) = s.call("POST", "/v1/nodes/n1/boot-baselines", Some(json!({"attestationId": refused["id"]})));
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("only a verified quote can be a baseline"), "{body}");
    let (status, _) = s.call("POST", "/v1/nodes/n1/boot-baselines", Some(json!({"attestationId": "att-none"})));
    assert_eq!(status, 404);
}

#[test]
fn a_tpm_whose_ek_certificate_does_not_chain_to_the_sites_tpm_cas_is_not_registered() {
    use metal_boot::tpm::Tpm;
    use metal_tests::tpm::empty_event_log;
    let dir = tempfile::tempdir().unwrap();
    // The site trusts swtpm's root but not the intermediate that signed the EK certificate.
    let (s, swtpm, _) = tpm_site(dir.path(), false);
    let joined = join(&s, &boot(&s, "commission")).unwrap();
    let error = metal_boot::measured::attest(&mut Tpm::new(swtpm.connect()), &joined, empty_event_log()).unwrap_err();
    assert!(error.contains("the EK certificate is not trusted: no trusted TPM CA named CN=swtpm-localca"), "{error}");
    assert!(s.events("node.tpm.registered").is_empty());
    let (_, list) = s.call("GET", "/v1/nodes/n1/attestations", None);
    assert_eq!(list, serde_json::json!([]));
}

#[test]
fn a_challenge_issued_before_the_scheduler_restarts_is_answered_after_it_once() {
    // The scheduler keeps no secret of a challenge, only the digest its quote must bind: a
    // restart between the challenge and the answer loses nothing, and opens no replay.
    use metal_boot::measured::Keys;
    use metal_boot::tpm::Tpm;
    use metal_protocol::measurement::{AttestationReport, Challenge, binding};
    use metal_tests::tpm::empty_event_log;
    let dir = tempfile::tempdir().unwrap();
    let (s, swtpm, bundle) = tpm_site(dir.path(), true);
    let mut tpm = Tpm::new(swtpm.connect());
    let keys = Keys::load(&mut tpm).unwrap();
    let (ramdisk, signer) = s.boot_client_as(Role::Ramdisk, "n1", 1);
    let url = format!("{}{}", s.boot_url, metal_protocol::boot::ATTEST_CHALLENGE_PATH);
    let challenge: Challenge =
        s.block_on(async { ramdisk.post(url).json(&keys.names()).send().await.unwrap().json().await.unwrap() });

    let s = s.restart(|c| c.boot.tpm_ca_file = Some(bundle));
    let secret =
        tpm.activate_credential(keys.ak(), keys.ek(), &challenge.credential_blob, &challenge.encrypted_seed).unwrap();
    let bound = binding(&challenge.nonce, &secret, signer.verifying_key().as_bytes());
    let evidence = keys.quote(&mut tpm, &bound, empty_event_log()).unwrap();
    let report = AttestationReport { node_id: "n1".into(), challenge_id: challenge.challenge_id, evidence };
    let envelope = metal_protocol::Envelope::sign_json(AttestationReport::PAYLOAD_TYPE, &report, &signer).unwrap();
    let url = format!("{}{}", s.boot_url, metal_protocol::boot::REPORTS_PATH);
    let post = || -> Value {
        s.block_on(async { ramdisk.post(&url).json(&envelope).send().await.unwrap().json().await.unwrap() })
    };
    assert_eq!(post()["accepted"], true, "the answer verifies after the restart");
    let again = post();
    assert!(again["reason"].as_str().is_some_and(|r| r.contains("already answered")), "{again}");
    let (_, list) = s.call("GET", "/v1/nodes/n1/attestations", None);
    let verified: Vec<bool> = list.as_array().unwrap().iter().map(|a| a["verified"].as_bool().unwrap()).collect();
    assert_eq!(verified.iter().filter(|v| **v).count(), 1, "{list}");
}

#[test]
fn in_an_enforcing_pool_a_deploys_plan_and_image_go_only_to_a_ramdisk_that_quoted_the_nodes_tpm() {
    use metal_boot::measured::attest;
    use metal_boot::tpm::Tpm;
    use metal_tests::tpm::empty_event_log;
    let dir = tempfile::tempdir().unwrap();
    let (s, swtpm, _) = tpm_site(dir.path(), true);
    enforcing(&s);
    let joined = join(&s, &boot(&s, "commission")).unwrap();
    assert!(attest(&mut Tpm::new(swtpm.connect()), &joined, empty_event_log()).unwrap().accepted);
    assert!(joined.post_report(InventoryReport::PAYLOAD_TYPE, &inventory("n1")).unwrap().accepted);
    let plan: Value = serde_json::from_str(include_str!("../../../protocol/tests/golden/deploy-plan.json")).unwrap();
    assert_eq!(s.call("PUT", "/v1/nodes/n1/deploy-plan", Some(plan)).0, 204);
    s.walk("n1", &["ready", "allocated", "deploying"]);

    // The deploy boot's ramdisk, before it quotes the TPM: nothing of the tenant's, neither
    // the plan nor an image (whichever it names).
    let joined = join(&s, &boot(&s, "deploy")).unwrap();
    match joined.fetch_plan() {
        Err(ControllerError::Refused { status: 403, message, .. }) => {
            assert!(message.contains("sent no verified quote of the node's TPM"), "{message}")
        }
        other => panic!("a deploy's plan before a quote: {other:?}"),
    }
    let image = format!("{}{}/img-any", s.boot_url, metal_protocol::boot::IMAGES_PATH);
    let image_refusal = || {
        use std::io::Read as _;
        let fetched = metal_boot::source::HttpSource::open(&image, 1 << 20, &joined.image_fetch(&image))
            .and_then(|mut source| source.read(&mut [0u8; 4096]));
        fetched.err().map(|e| format!("{e:#}")).unwrap_or_default()
    };
    let refused = image_refusal();
    assert!(refused.contains("403") && refused.contains("sent no verified quote of the node's TPM"), "{refused}");
    // Another TPM's quote is refused, and serves nothing either.
    let other = metal_tests::tpm::Swtpm::fresh(&dir.path().join("other"));
    assert!(attest(&mut Tpm::new(other.connect()), &joined, empty_event_log()).is_err());
    assert!(joined.fetch_plan().is_err());
    // The machine's own TPM: served.
    assert!(attest(&mut Tpm::new(swtpm.connect()), &joined, empty_event_log()).unwrap().accepted);
    assert!(joined.fetch_plan().is_ok(), "the ramdisk that quoted the node's TPM gets its plan");
    // Past the quote gate, an image is served by what the plan names (this one names none).
    let refused = image_refusal();
    assert!(refused.contains("does not name image img-any"), "{refused}");
}
