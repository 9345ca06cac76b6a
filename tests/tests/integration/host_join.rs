//! The join service end to end on loopback: a node provisioned by profile is deployed by
//! metal-boot's own controller client playing the ramdisk; the seed the plan carries is
//! written out as cloud-init would; metal-agent's library joins with it (its setup against
//! a fake `/sys` and networkd directory: the logic only, the real thing runs in
//! `hil_join`). Covered: the host record (site, rack, tags, profile), the join log, a reused
//! token, renewal and its refusal once the identity generation moves on, a refused setup
//! that leaves the host out, the same OS under tenant-controlled trust (a `node-tenant`
//! certificate, advisory inventory, its wipe report refused), and the first-boot bootstrap
//! itself (Debian's sh, curl and openssl) refusing a script whose digest is not the seed's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use metal_agent::state::ConfigDir;
use metal_agent::{Joined, setup};
use metal_boot::controller::{self, ControllerError, Retry};
use metal_protocol::join::{HostSetup, JoinFailure};
use metal_protocol::{InventoryReport, WipeReport};
use metal_store as store;
use metal_tests::images::Mirror;
use metal_tests::scheduler::{Admin as _, TestScheduler};
use serde_json::{Value, json};
use sha2::Digest as _;

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops";
const GIB: u64 = 1 << 30;

fn retry() -> Retry {
    Retry { attempts: 1, backoff: Duration::from_millis(1) }
}

/// A scheduler with an image `os` from a mirror, and a `metal-agent` file in its boot files.
struct Site {
    s: TestScheduler,
    _mirror: Mirror,
    dir: tempfile::TempDir,
}

fn site() -> Site {
    let _ = tracing_subscriber::fmt().with_test_writer().try_init();
    let dir = tempfile::tempdir().unwrap();
    let image = metal_tests::images::gpt_image(dir.path());
    let mirror = Mirror::start(HashMap::from([("os.img".to_owned(), image.clone())]), Default::default());
    let ca_file = mirror.ca_file.clone();
    let s = TestScheduler::start(move |c| c.images.ca_file = Some(ca_file));
    std::fs::create_dir_all(s.files_dir()).unwrap();
    std::fs::write(s.files_dir().join("metal-agent"), b"\x7fELF the agent the join script pins").unwrap();
    mirror.import(&s, "os.img", &image, "os", Duration::from_secs(60));
    Site { s, _mirror: mirror, dir }
}

fn inventory(node: &str) -> InventoryReport {
    let mut report: InventoryReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/inventory-report.json")).unwrap();
    report.node_id = node.into();
    report.disks.truncate(1);
    report.disks[0].identity.size_bytes = 100 * GIB;
    report.disks[0].removable = false;
    report.disks[0].read_only = false;
    report
}

impl Site {
    /// Enrols and commissions `id` (boot MAC `mac`, rack r7) and provisions it with a new
    /// profile `profile` whose host setup is `host`; returns the ramdisk's boot token.
    fn provisioned(&self, id: &str, mac: &str, profile: &str, host: Value) {
        let s = &self.s;
        let body = json!({"id": id, "bootMac": mac, "labels": {"rack": "r7", "zone": "z1"}});
        assert_eq!(s.call("POST", "/v1/nodes", Some(body)).0, 201);
        s.walk(id, &["new", "commissioning"]);
        let generation = s.node(id)["identityGeneration"].as_u64().unwrap();
        let receipt = s.post_report_as(
            metal_protocol::Role::Ramdisk,
            id,
            generation,
            InventoryReport::PAYLOAD_TYPE,
            &inventory(id),
        );
        assert_eq!(receipt["accepted"], true, "{receipt}");
        let spec = json!({"id": profile, "image": "os", "adminUser": "ops", "sshAuthorizedKeys": [KEY], "host": host});
        let (status, body) = s.call("POST", "/v1/profiles", Some(spec));
        assert_eq!(status, 201, "{body}");
        let (status, body) =
            s.call("POST", "/v1/provision", Some(json!({"profileId": profile, "profileVersion": 1, "count": 1})));
        assert_eq!((status, &body["nodes"]), (200, &json!([id])), "{body}");
    }

    /// Plays the deploy's ramdisk for the node with boot MAC `mac`: joins, fetches the plan,
    /// writes the seed's files as cloud-init would (under `root`, for `/`), reports the
    /// deploy done. Returns the configuration directory.
    fn deployed(&self, mac: &str, root: &Path) -> ConfigDir {
        let s = &self.s;
        let (status, script) = s.get_text(&format!("/boot/ipxe?mac={mac}"));
        assert_eq!(status, 200, "{script}");
        let (token, task) = TestScheduler::script_token(&script).unwrap();
        assert_eq!(task, "deploy");
        let joined = controller::join(&s.boot_url, &s.fingerprint, &token, retry()).unwrap();
        let plan = joined.fetch_plan().unwrap();
        let seed = plan.cloud_init.expect("an image deploy carries a seed");
        let config: Value = serde_json::from_str(seed.user_data.trim_start_matches("#cloud-config\n")).unwrap();
        for file in config["write_files"].as_array().unwrap() {
            let path = root.join(file["path"].as_str().unwrap().trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(&path, file["content"].as_str().unwrap()).unwrap();
        }
        assert_eq!(config["runcmd"], json!([["/bin/sh", "/etc/metal/bootstrap"]]));
        assert!(joined.report_task("deploy", true, "written".into()).unwrap().accepted);
        ConfigDir(root.join("etc/metal"))
    }

    fn host_env(&self, name: &str) -> setup::Host {
        let dir = self.dir.path().join(name);
        let net = dir.join("sys/class/net/ens3");
        std::fs::create_dir_all(&net).unwrap();
        std::fs::write(net.join("address"), "52:54:00:00:00:01\n").unwrap();
        std::fs::create_dir_all(dir.join("proc/net")).unwrap();
        std::fs::write(dir.join("proc/net/route"), "Iface\tDestination\tGateway\nens3\t00000000\t0202000A\n").unwrap();
        setup::Host {
            network_dir: dir.join("network"),
            sys_class_net: dir.join("sys/class/net"),
            sys_class_block: dir.join("sys/class/block"),
            proc_net_route: dir.join("proc/net/route"),
            proc_mounts: dir.join("proc/mounts"),
            run_commands: false,
            settle: Duration::from_secs(1),
        }
    }

    fn log(&self, id: &str) -> Vec<Value> {
        let (status, log) = self.s.call("GET", &format!("/v1/hosts/{id}/join-log"), None);
        assert_eq!(status, 200, "{log}");
        log.as_array().unwrap().clone()
    }
}

/// An operator's enrolment token request for `node` at `generation`, with no setup.
fn operator_token(node: &str, generation: i64) -> store::hosts::TokenRequest<'_> {
    static EMPTY: std::sync::OnceLock<HostSetup> = std::sync::OnceLock::new();
    store::hosts::TokenRequest {
        node_id: node,
        identity_generation: generation,
        profile: None,
        setup: EMPTY.get_or_init(HostSetup::default),
        origin: store::hosts::TokenOrigin::Operator,
    }
}

/// The message of a 403 refusal, or a panic saying what went through instead.
fn forbidden<T: std::fmt::Debug>(result: Result<T, ControllerError>, what: &str) -> String {
    match result {
        Err(ControllerError::Refused { status: 403, message, .. }) => message,
        other => panic!("{what}: {other:?}"),
    }
}

/// The controller's error inside an agent's.
fn controller_error(e: metal_agent::AgentError) -> ControllerError {
    match e {
        metal_agent::AgentError::Controller(e) => e,
        other => panic!("not the controller's refusal: {other}"),
    }
}

fn steps(log: &[Value]) -> Vec<(String, bool)> {
    log.iter().map(|e| (e["step"].as_str().unwrap().to_owned(), e["ok"].as_bool().unwrap())).collect()
}

fn step(name: &str, ok: bool) -> (String, bool) {
    (name.to_owned(), ok)
}

#[test]
fn a_deployed_os_joins_as_a_host_renews_and_loses_its_authority_when_the_identity_moves_on() {
    let site = site();
    let s = &site.s;
    let pool = site.dir.path().join("srv/pool");
    let host_setup = json!({
        "networks": [{"name": "br-lab", "kind": "bridge", "addresses": ["192.168.77.1/24"]},
                     {"name": "vlan42", "kind": "vlan", "parent": "boot", "vlanId": 42}],
        "storagePools": [{"name": "scratch", "kind": "directory", "path": pool.display().to_string()}]});
    site.provisioned("n1", "52:54:00:00:00:01", "web", host_setup);
    let root = site.dir.path().join("root");
    let config = site.deployed("52:54:00:00:00:01", &root);
    assert_eq!(s.node("n1")["state"], "deployed");

    // The seed pins this site's CA and the script the join service serves, which pins the agent.
    let http = reqwest::blocking::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let script = http.get(format!("{}/v1/hosts/install.sh", s.boot_url)).send().unwrap().text().unwrap();
    let digest = std::fs::read_to_string(root.join("etc/metal/install.sha256")).unwrap();
    assert_eq!(digest.trim(), hex::encode(sha2::Sha256::digest(script.as_bytes())));
    let agent = std::fs::read(s.files_dir().join("metal-agent")).unwrap();
    assert!(script.contains(&hex::encode(sha2::Sha256::digest(&agent))), "{script}");
    let token = std::fs::read_to_string(root.join("etc/metal/enrolment-token")).unwrap();
    assert_eq!(std::fs::read_to_string(root.join("etc/metal/ca.sha256")).unwrap().trim(), s.fingerprint);

    // The join: a node certificate, the setup applied, the host joined with its site and rack.
    let env = site.host_env("n1");
    let Joined::Now { identity, outcomes, .. } = metal_agent::join(&config, "n1", &env, retry()).unwrap() else {
        panic!("a first join joins")
    };
    assert_eq!(identity, format!("spiffe://{}/node/n1/gen/1/node", s.ca().certificate().site()));
    assert!(outcomes.iter().all(|o| o.applied), "{outcomes:?}");
    assert!(pool.is_dir() && env.network_dir.join("60-metal-br-lab.netdev").exists());
    assert!(!root.join("etc/metal/enrolment-token").exists(), "the used token is removed");
    let (status, host) = s.call("GET", "/v1/hosts/n1", None);
    assert_eq!(status, 200, "{host}");
    assert_eq!(
        (&host["state"], &host["role"], &host["rack"], &host["tags"]["zone"], &host["profileId"]),
        (&json!("joined"), &json!("node"), &json!("r7"), &json!("z1"), &json!("web")),
        "{host}"
    );
    assert_eq!(host["setup"]["storagePools"][0]["name"], "scratch");
    assert!(!host.to_string().contains(token.trim()), "the token never appears: {host}");
    let log = site.log("n1");
    assert_eq!(
        steps(&log),
        [
            step("token", true),
            step("certificate", true),
            step("network/br-lab", true),
            step("network/vlan42", true),
            step("pool/scratch", true),
            step("joined", true)
        ]
    );
    assert!(log[3]["detail"].as_str().unwrap().contains("VLAN 42 on ens3"), "{log:?}");
    assert_eq!(s.events("host.joined").len(), 1);
    // A setup report the join could not deliver is sent again by the service; one the
    // controller already has is done with.
    let pending = config.0.join(metal_agent::state::PENDING_REPORT_FILE);
    let report = metal_protocol::join::HostSetupReport {
        node_id: "n1".into(),
        outcomes: outcomes.clone(),
        finished_at: time::OffsetDateTime::now_utc(),
    };
    std::fs::write(&pending, serde_json::to_vec(&report).unwrap()).unwrap();
    let (client_for_pending, ca_for_pending) = metal_agent::controller(&config, retry()).unwrap();
    let held = metal_agent::load_identity(&config, &ca_for_pending).unwrap().unwrap();
    metal_agent::send_pending_report(&config, &client_for_pending, &held).unwrap();
    assert!(!pending.exists(), "the pending report is gone once the controller has it");
    assert_eq!(s.events("host.joined").len(), 1, "and it changed nothing");

    // A reboot keeps the identity; the token cannot be used again.
    assert!(matches!(metal_agent::join(&config, "n1", &env, retry()).unwrap(), Joined::Already(_)));
    let (ca, pin) = config.site_ca().unwrap();
    let client = metal_agent::client::Controller::new(&s.boot_url, pin, retry()).unwrap();
    let key = metal_protocol::SigningKey::generate(&mut rand::rngs::OsRng);
    let message = forbidden(client.join(token.trim(), &key, "n1"), "a used token joined again");
    assert!(message.contains("already used"), "{message}");
    assert_eq!(steps(&site.log("n1")).last(), Some(&step("token", false)));
    assert_eq!(s.events("host.join.refused").len(), 1);

    // Its reports apply: the inventory becomes the platform's (this machine's, read by the agent).
    let (accepted, reason) = metal_agent::report(&config, retry()).unwrap();
    assert!(accepted && reason.is_none(), "{reason:?}");
    let changed = s.events("node.inventory.changed");
    assert_eq!(changed.last().unwrap()["data"]["advisory"], false, "{changed:?}");
    assert!(changed.last().unwrap()["data"]["passed"].is_boolean(), "{changed:?}");
    // ...as a platform-trusted snapshot: the commissioning's inventory, which wipes are
    // checked against, is not the OS's to replace.
    let (_, stored) = s.call("GET", "/v1/nodes/n1/inventory", None);
    assert_ne!(stored["inventory"]["tool"]["name"], "metal-agent", "{stored}");

    // Renewal over mutual TLS.
    let before = metal_agent::load_identity(&config, &ca).unwrap().unwrap().chain;
    metal_agent::renew(&config, retry()).unwrap();
    let after = metal_agent::load_identity(&config, &ca).unwrap().unwrap();
    assert_ne!(after.chain[0], before[0], "a new certificate");
    assert_eq!(after.certificate.identity.to_uri(), identity, "of the same identity");
    assert!(s.call("GET", "/v1/hosts/n1", None).1["renewedAt"].is_string());
    assert_eq!(steps(&site.log("n1")).last(), Some(&step("renewal", true)));

    // A re-join (an operator's token, a new key) leaves the old certificate speaking for nothing.
    let (status, enrolment) = s.call("POST", "/v1/hosts/enrolments", Some(json!({"nodeId": "n1"})));
    assert_eq!(status, 201, "{enrolment}");
    let second = metal_protocol::SigningKey::generate(&mut rand::rngs::OsRng);
    client.join(enrolment["token"].as_str().unwrap(), &second, "n1").unwrap();
    let message = forbidden(metal_agent::renew(&config, retry()).map_err(controller_error), "an old key renewed");
    assert!(message.contains("not host n1's current one"), "{message}");
    let message = forbidden(
        metal_agent::report(&config, retry()).map(|_| ()).map_err(controller_error),
        "an old key's inventory applied",
    );
    assert!(message.contains("not host n1's current one"), "{message}");

    // The identity moves on (a tenant-root lease starts): the old certificate renews no more.
    let node = s.block_on(s.app.store.read(|tx| store::nodes::get(tx, "n1"))).unwrap().unwrap();
    let tenancy = store::nodes::Tenancy { lease: Some("alloc-1".into()), release_wipe: Some("secure-erase".into()) };
    let now = s.app.clock.now();
    s.block_on(s.app.store.change(move |tx| store::nodes::set_tenancy(tx, &node, &tenancy, now))).unwrap();
    let message = forbidden(
        metal_agent::renew(&config, retry()).map_err(controller_error),
        "a certificate of an older generation renewed",
    );
    assert!(message.contains("generation 1") && message.contains("revoked"), "{message}");
    assert_eq!(steps(&site.log("n1")).last(), Some(&step("renewal", false)));

    // The same OS joins again under tenant-controlled trust: node-tenant, advisory, and the
    // wipe report it signs is refused.
    let tenant_config = ConfigDir(site.dir.path().join("tenant/etc/metal"));
    std::fs::create_dir_all(&tenant_config.0).unwrap();
    for file in ["controller-url", "ca.pem", "ca.sha256"] {
        std::fs::copy(config.0.join(file), tenant_config.0.join(file)).unwrap();
    }
    let now = s.app.clock.now();
    let (tenant_token, _) = s
        .block_on(s.app.store.change(move |tx| {
            Ok(store::hosts::issue_token(tx, operator_token("n1", 2), now, Duration::from_secs(600))?)
        }))
        .unwrap();
    std::fs::write(tenant_config.0.join("enrolment-token"), &tenant_token).unwrap();
    let Joined::Now { identity, outcomes, .. } =
        metal_agent::join(&tenant_config, "n1", &site.host_env("n1-tenant"), retry()).unwrap()
    else {
        panic!("the tenant's OS joins")
    };
    assert!(identity.ends_with("/node/n1/gen/2/node-tenant") && outcomes.is_empty(), "{identity}");
    let (accepted, reason) = metal_agent::report(&tenant_config, retry()).unwrap();
    assert!(accepted && reason.as_deref().unwrap_or_default().starts_with("advisory"), "{reason:?}");
    let (ca, _) = tenant_config.site_ca().unwrap();
    let tenant = metal_agent::load_identity(&tenant_config, &ca).unwrap().unwrap();
    let mut wipe: WipeReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/wipe-report.json")).unwrap();
    wipe.node_id = "n1".into();
    let receipt = client.post_report(&tenant.key, &tenant.chain, WipeReport::PAYLOAD_TYPE, &wipe).unwrap();
    assert!(!receipt.accepted && receipt.reason.as_deref().unwrap().starts_with("role-not-allowed"), "{receipt:?}");
    let (_, host) = s.call("GET", "/v1/hosts/n1", None);
    assert_eq!((&host["role"], &host["identityGeneration"]), (&json!("node-tenant"), &json!(2)), "{host}");
}

#[test]
fn a_setup_that_cannot_be_applied_leaves_the_host_out_with_nothing_applied() {
    let site = site();
    let s = &site.s;
    let pool = site.dir.path().join("srv/never");
    let host_setup = json!({
        "networks": [{"name": "br0", "kind": "bridge", "parent": "eth9"}],
        "storagePools": [{"name": "p", "kind": "directory", "path": pool.display().to_string()}]});
    site.provisioned("n2", "52:54:00:00:00:02", "bad-net", host_setup);
    let config = site.deployed("52:54:00:00:00:02", &site.dir.path().join("root"));
    let env = site.host_env("n2");
    let Joined::Now { outcomes, receipt, .. } = metal_agent::join(&config, "n2", &env, retry()).unwrap() else {
        panic!("the certificate is issued before the setup")
    };
    assert!(outcomes.iter().all(|o| !o.applied), "{outcomes:?}");
    assert!(receipt.unwrap().contains("there is no interface eth9"));
    assert!(!pool.exists() && !env.network_dir.exists(), "nothing was applied");
    let (_, host) = s.call("GET", "/v1/hosts/n2", None);
    assert_eq!(host["state"], "failed", "{host}");
    let log = site.log("n2");
    assert_eq!(steps(&log)[2..], [step("network/br0", false), step("pool/p", false), step("joined", false)]);
    let failed = s.events("host.join.failed");
    assert!(failed[0]["data"]["reason"].as_str().unwrap().contains("eth9"), "{failed:?}");
    let message = forbidden(
        metal_agent::renew(&config, retry()).map_err(controller_error),
        "a host that failed its join renewed",
    );
    assert!(message.contains("left out"), "{message}");
}

/// Runs the seed's bootstrap with its files in `dir` (Debian's sh, openssl, curl,
/// sha256sum); returns its exit status and output.
fn bootstrap(dir: &Path) -> (bool, String) {
    let out =
        std::process::Command::new("sh").arg(dir.join("bootstrap")).env("METAL_CONFIG_DIR", dir).output().unwrap();
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_bootstrap_never_runs_a_script_whose_digest_is_not_the_seeds_and_says_so() {
    let site = site();
    let s = &site.s;
    site.provisioned("n3", "52:54:00:00:00:03", "web", json!({}));
    let root = site.dir.path().join("root");
    let config = site.deployed("52:54:00:00:00:03", &root);
    let dir: PathBuf = config.0.clone();
    // The boot listener's certificate names 127.0.0.1, which is what curl checks.
    std::fs::write(dir.join("install.sha256"), format!("{}\n", "0".repeat(64))).unwrap();
    let (ok, output) = bootstrap(&dir);
    assert!(!ok, "{output}");
    assert!(output.contains("not the one in the seed; not running it"), "{output}");
    let log = site.log("n3");
    let last = log.last().unwrap();
    assert_eq!((&last["step"], &last["ok"]), (&json!("bootstrap/digest"), &json!(false)), "{log:?}");
    assert_eq!(s.events("host.join.failed").len(), 1);
    assert!(s.events("host.certificate.issued").is_empty(), "nothing the script does ran");
    // The report used the token up: the agent cannot join with it now.
    let env = site.host_env("n3");
    let message = forbidden(
        metal_agent::join(&config, "n3", &env, retry()).map_err(controller_error),
        "the token of a refused first boot joined",
    );
    assert!(message.contains("already used"), "{message}");
    // A CA that is not the pinned one stops it before anything is fetched.
    std::fs::write(dir.join("ca.sha256"), format!("{}\n", "ab".repeat(32))).unwrap();
    let (ok, output) = bootstrap(&dir);
    assert!(!ok && output.contains("not the pinned one"), "{output}");
    // Unknown tokens are refused outright.
    let failure = JoinFailure { token: "f".repeat(64), stage: "digest".into(), reason: "x".into() };
    let http = reqwest::blocking::Client::builder().danger_accept_invalid_certs(true).build().unwrap();
    let response = http.post(format!("{}/v1/hosts/join-failed", s.boot_url)).json(&failure).send().unwrap();
    assert_eq!(response.status(), 403);
}

#[test]
fn two_replicas_joining_with_one_token_at_once_issue_one_certificate() {
    let site = site();
    let s = &site.s;
    site.provisioned("n4", "52:54:00:00:00:04", "web", json!({}));
    site.deployed("52:54:00:00:00:04", &site.dir.path().join("root"));
    let b = s.replica(|_| {});
    let pin = metal_bmc::tls::parse_fingerprint(&s.fingerprint).unwrap();
    let replicas = [s.boot_url.clone(), b.boot_url.clone()];
    for round in 0..6 {
        let now = s.app.clock.now();
        let (token, _) = s
            .block_on(s.app.store.change(move |tx| {
                Ok(store::hosts::issue_token(tx, operator_token("n4", 1), now, Duration::from_secs(600))?)
            }))
            .unwrap();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let results: Vec<_> = replicas
            .iter()
            .map(|url| {
                let (url, token, barrier) = (url.clone(), token.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let client = metal_agent::client::Controller::new(&url, pin, retry()).unwrap();
                    let key = metal_protocol::SigningKey::generate(&mut rand::rngs::OsRng);
                    barrier.wait();
                    client.join(&token, &key, "n4").map(|_| ())
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "round {round}: {results:?}");
        let lost = results.iter().find_map(|r| r.as_ref().err()).unwrap();
        assert!(
            matches!(lost, ControllerError::Refused { status: 403, message, .. } if message.contains("already used")),
            "round {round}: {lost:?}"
        );
    }
    assert_eq!(s.events("host.certificate.issued").len(), 6);
    assert_eq!(s.events("host.join.refused").len(), 6);
    let log = site.log("n4");
    let seqs: Vec<i64> = log.iter().map(|e| e["seq"].as_i64().unwrap()).collect();
    assert_eq!(seqs, (1..=i64::try_from(seqs.len()).unwrap()).collect::<Vec<_>>(), "the log is numbered without gaps");
}

#[test]
fn an_enrolment_token_that_lapses_unused_is_reported_and_refused_afterwards() {
    let site = site();
    let s = &site.s;
    site.provisioned("n5", "52:54:00:00:00:05", "web", json!({}));
    let config = site.deployed("52:54:00:00:00:05", &site.dir.path().join("root"));
    s.clock.advance(s.app.config.boot.host_token_ttl + Duration::from_secs(1));
    // The lapse pass tells of a host that never came, once.
    let lapse = || s.block_on(metal_machines::metal::boot::hosts::lapse_once(&s.app.machines)).unwrap();
    assert_eq!((lapse(), lapse()), (1, 0));
    let missing = s.events("host.join.missing");
    assert!(missing[0]["data"]["reason"].as_str().unwrap().contains("never reached the join service"), "{missing:?}");
    let message = forbidden(
        metal_agent::join(&config, "n5", &site.host_env("n5"), retry()).map_err(controller_error),
        "an expired token joined",
    );
    assert!(message.contains("expired"), "{message}");
    let log = site.log("n5");
    assert_eq!(steps(&log), [step("token", true), step("token", false), step("token", false)], "{log:?}");
    assert!(log[2]["detail"].as_str().unwrap().contains("expired at"), "{log:?}");
    assert_eq!(s.call("GET", "/v1/hosts/n5", None).0, 404, "no host");
}

#[test]
fn an_operator_enrols_a_machine_that_already_runs_an_os_and_it_joins_while_new() {
    let site = site();
    let s = &site.s;
    assert_eq!(s.call("POST", "/v1/nodes", Some(json!({"id": "n6", "labels": {"rack": "r2"}}))).0, 201);
    let setup = json!({"storagePools": [{"name": "data", "kind": "directory", "path": "/srv/data"}]});
    let (status, enrolment) =
        s.call("POST", "/v1/hosts/enrolments", Some(json!({"nodeId": "n6", "setup": setup, "ttl": "30m"})));
    assert_eq!(status, 201, "{enrolment}");
    let (status, info) = s.call("GET", "/v1/hosts/join-info", None);
    assert_eq!(status, 200, "{info}");
    for key in ["controllerUrl", "caPem", "caFingerprint", "installSha256"] {
        assert_eq!(info[key], enrolment[key], "{key}");
    }
    assert!(info.get("token").is_none());
    let pin = metal_bmc::tls::parse_fingerprint(enrolment["caFingerprint"].as_str().unwrap()).unwrap();
    let client = metal_agent::client::Controller::new(&s.boot_url, pin, retry()).unwrap();
    let key = metal_protocol::SigningKey::generate(&mut rand::rngs::OsRng);
    let (answer, verified) = client.join(enrolment["token"].as_str().unwrap(), &key, "n6").unwrap();
    assert_eq!((verified.identity.node.as_str(), verified.identity.role), ("n6", metal_protocol::Role::Node));
    assert_eq!((answer.rack.as_deref(), answer.setup.storage_pools[0].name.as_str()), (Some("r2"), "data"));
    assert_eq!(s.node("n6")["state"], "new", "joining moves no node");

    // Only new or deployed nodes, valid setups and TTLs, and only for admins.
    s.walk("n6", &["new", "commissioning"]);
    let (status, body) = s.call("POST", "/v1/hosts/enrolments", Some(json!({"nodeId": "n6"})));
    assert_eq!(status, 409, "{body}");
    let bad = json!({"nodeId": "n6", "setup": {"networks": [{"name": "Bad!", "kind": "bridge"}]}});
    let (status, body) = s.call("POST", "/v1/hosts/enrolments", Some(bad));
    assert_eq!((status, body["error"]["field"].as_str()), (422, Some("setup.networks[0].name")), "{body}");
    let (status, body) = s.call("POST", "/v1/hosts/enrolments", Some(json!({"nodeId": "n6", "ttl": "30d"})));
    assert_eq!((status, body["error"]["field"].as_str()), (422, Some("ttl")), "{body}");
    assert_eq!(s.call("POST", "/v1/hosts/enrolments", Some(json!({"nodeId": "nope"}))).0, 404);
    assert_eq!(s.call("POST", "/v1/tenants", Some(json!({"id": "acme"}))).0, 201);
    let (_, credential) =
        s.call("POST", "/v1/credentials", Some(json!({"role": "tenant-member", "tenantId": "acme", "name": "a"})));
    let member = credential["token"].as_str().unwrap();
    assert_eq!(s.call_as(member, "POST", "/v1/hosts/enrolments", Some(json!({"nodeId": "n6"}))).0, 404);
    assert_eq!(s.call_as(member, "GET", "/v1/hosts", None).0, 404);
}
