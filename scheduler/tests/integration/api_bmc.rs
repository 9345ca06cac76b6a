//! BMC control through the API against real emulators: credentials sealed at rest and
//! write-only, power/boot/media/readings through sushy-tools (Redfish), power and password
//! rotation through ipmi_sim (IPMI), one rotation at a time, and discovery bounded to
//! three credentials.

use crate::common;

use common::{Site, error};
use metal_tests::emulators::{Files, IpmiSim, SUSHY_PASSWORD, Sushy};
use metal_types::secrets::MasterKey;
use serde_json::{Value, json};

async fn site_with_node(key: bool) -> Site {
    let site = Site::start_with(|c| {
        if key {
            c.master_key = Some(MasterKey::from_hex(&"5a".repeat(32)).unwrap());
        }
    })
    .await;
    let (s, body) = site.admin("POST", "/v1/nodes", Some(json!({"id": "n1"}))).await;
    assert_eq!(s, 201, "{body}");
    site
}

fn redfish_spec(sushy: &Sushy) -> Value {
    json!({"protocol": "redfish", "address": sushy.endpoint, "username": "admin", "password": SUSHY_PASSWORD,
           "tls": {"mode": "fingerprint", "value": sushy.pki.fingerprint}})
}

/// Every byte the service stored (the SQLite file and its WAL).
fn stored_bytes(site: &Site) -> Vec<u8> {
    let dir = &site.app.config.data_dir;
    let mut all = Vec::new();
    for f in ["metal.db", "metal.db-wal"] {
        all.extend(std::fs::read(dir.join(f)).unwrap_or_default());
    }
    all
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[tokio::test]
async fn a_redfish_bmc_is_driven_through_the_api_with_its_password_sealed() {
    let sushy = Sushy::start();
    let files = Files::start();
    std::fs::write(files.dir.path().join("rescue.iso"), vec![1u8; 4096]).unwrap();
    let site = site_with_node(true).await;
    let (s, info) = site.admin("PUT", "/v1/nodes/n1/bmc", Some(redfish_spec(&sushy))).await;
    assert_eq!(s, 200, "{info}");
    assert_eq!(info["credentialSealed"], true);
    assert!(!info.to_string().contains(SUSHY_PASSWORD));
    let (_, got) = site.admin("GET", "/v1/nodes/n1/bmc", None).await;
    assert_eq!(got, info);
    if site.app.store.backend() == metal_store::Backend::Sqlite {
        assert!(!contains(&stored_bytes(&site), SUSHY_PASSWORD), "the password is stored in clear");
    }

    let (s, result) = site.admin("POST", "/v1/nodes/n1/power", Some(json!({"action": "on"}))).await;
    assert_eq!(s, 200, "{result}");
    assert_eq!(result, json!({"before": "off", "after": "on", "sent": ["On"]}));
    let (_, node) = site.admin("GET", "/v1/nodes/n1", None).await;
    assert_eq!(node["power"], "on");
    let (_, status) = site.admin("GET", "/v1/nodes/n1/power", None).await;
    assert_eq!(status["power"], "on");
    let (s, body) = site.admin("POST", "/v1/nodes/n1/boot", Some(json!({"target": "pxe"}))).await;
    assert_eq!(s, 204, "{body}");
    let (s, body) = site.admin("POST", "/v1/nodes/n1/boot", Some(json!({"target": "bios"}))).await;
    assert_eq!(s, 422, "what the BMC does not offer is the caller's to change: {body}");
    assert!(error(&body, "INVALID_INPUT").contains("BiosSetup is not allowed"));

    let url = format!("{}/rescue.iso", files.url);
    let (s, media) = site.admin("POST", "/v1/nodes/n1/media", Some(json!({"url": url}))).await;
    assert_eq!((s, &media), (200, &json!({"inserted": true, "image": url})));
    let (_, media) = site.admin("DELETE", "/v1/nodes/n1/media", None).await;
    assert_eq!(media["inserted"], false);
    let (s, body) = site.admin("POST", "/v1/nodes/n1/media", Some(json!({"url": "file:///etc/passwd"}))).await;
    assert_eq!(s, 422);
    assert_eq!(body["error"]["field"], "url");

    let (s, readings) = site.admin("GET", "/v1/nodes/n1/bmc/readings", None).await;
    assert_eq!(s, 200, "{readings}");
    assert_eq!(readings["health"], json!({"status": "present", "value": "OK"}));
    assert_eq!(readings["firmware"]["status"], "absent");
    let (_, events) = site.admin("GET", "/v1/events?after=0", None).await;
    let kinds: Vec<&str> = events["events"].as_array().unwrap().iter().filter_map(|e| e["kind"].as_str()).collect();
    assert!(
        kinds.contains(&"node.bmc.set") && kinds.contains(&"node.power.changed") && kinds.contains(&"node.health.ok"),
        "{kinds:?}"
    );
    assert!(!events.to_string().contains(SUSHY_PASSWORD));
}

#[tokio::test]
async fn bmc_settings_are_validated_and_absent_bmcs_are_not_found() {
    let site = site_with_node(false).await;
    let (s, body) = site.admin("POST", "/v1/nodes/n1/power", Some(json!({"action": "on"}))).await;
    assert_eq!((s, &body["error"]["code"]), (422, &json!("INVALID_CONFIG")), "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("metalctl bmc set n1"), "says how to set one: {body}");
    let (s, body) = site.admin("POST", "/v1/nodes/nope/power", Some(json!({"action": "on"}))).await;
    assert_eq!(s, 404, "{body}");
    for (spec, field) in [
        (json!({"protocol": "redfish", "address": "https://10.0.0.5", "username": "a", "password": "p"}), "tls"),
        (json!({"protocol": "redfish", "address": "http://10.0.0.5", "username": "a", "password": "p"}), "address"),
        (json!({"protocol": "ipmi", "address": "10.0.0.5:x", "username": "a", "password": "p"}), "address"),
        (
            json!({"protocol": "ipmi", "address": "10.0.0.5", "username": "a", "password": "p", "tls": {"mode": "insecure"}}),
            "tls",
        ),
        (json!({"protocol": "ipmi", "address": "10.0.0.5", "username": "", "password": "p"}), "username"),
        (
            json!({"protocol": "redfish", "address": "https://10.0.0.5", "username": "a", "password": "p",
                "tls": {"mode": "fingerprint", "value": "abc"}}),
            "tls.value",
        ),
    ] {
        let (s, body) = site.admin("PUT", "/v1/nodes/n1/bmc", Some(spec.clone())).await;
        assert_eq!(s, 422, "{spec}: {body}");
        assert_eq!(body["error"]["field"], field, "{spec}: {body}");
    }
    let spec = json!({"protocol": "ipmi", "address": "10.0.0.5", "username": "a", "password": "plain-pw"});
    let (s, body) = site.admin("PUT", "/v1/nodes/nope/bmc", Some(spec.clone())).await;
    assert_eq!(s, 404, "{body}");
    // Without METAL_MASTER_KEY the password is stored as is, and the API says so.
    let (s, info) = site.admin("PUT", "/v1/nodes/n1/bmc", Some(spec)).await;
    assert_eq!((s, &info["credentialSealed"]), (200, &json!(false)), "{info}");
    assert!(info.get("password").is_none());
}

/// Sets n1's BMC to ipmi_sim's admin account.
async fn set_ipmi(site: &Site, sim: &IpmiSim) {
    let spec = json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", sim.port), "username": "admin", "password": "password"});
    let (s, body) = site.admin("PUT", "/v1/nodes/n1/bmc", Some(spec)).await;
    assert_eq!(s, 200, "{body}");
}

#[tokio::test]
async fn an_ipmi_bmc_powers_the_node_and_rotations_are_stored_only_when_proved() {
    let sim = IpmiSim::start();
    let site = site_with_node(true).await;
    set_ipmi(&site, &sim).await;
    let (s, result) = site.admin("POST", "/v1/nodes/n1/power", Some(json!({"action": "cycle"}))).await;
    assert_eq!((s, &result), (200, &json!({"before": "off", "after": "on", "sent": ["on"]})), "{result}");
    let (s, info) = site.admin("POST", "/v1/nodes/n1/bmc/rotate", Some(json!({"password": "Rotated-9"}))).await;
    assert_eq!(s, 200, "{info}");
    assert_eq!(info["generation"], 2);
    // The service now logs in with the new password.
    let (s, status) = site.admin("GET", "/v1/nodes/n1/power", None).await;
    assert_eq!((s, &status["power"]), (200, &json!("on")), "{status}");
    // A user-privilege account: the BMC refuses the rotation, the stored password stays.
    let viewer = json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", sim.port), "username": "viewer",
                        "password": "viewpass", "privilege": "user"});
    site.admin("PUT", "/v1/nodes/n1/bmc", Some(viewer)).await;
    let (s, body) = site.admin("POST", "/v1/nodes/n1/bmc/rotate", Some(json!({"password": "Nope-123"}))).await;
    assert_eq!(s, 422, "the BMC refused: the caller's to change: {body}");
    assert!(error(&body, "INVALID_INPUT").contains("refused"), "{body}");
    let (s, info) = site.admin("GET", "/v1/nodes/n1/bmc", None).await;
    assert_eq!((s, &info["generation"]), (200, &json!(3)), "{info}");
}

async fn rotate_on(replica: &Site, password: &str) -> (u16, Value) {
    replica.admin("POST", "/v1/nodes/n1/bmc/rotate", Some(json!({"password": password}))).await
}

/// Puts `password` in n1's pending slot as an operator's rotation begun `ago`.
async fn pending(site: &Site, password: &str, ago: time::Duration) {
    let key = site.app.config.master_key.clone();
    let sealed = metal_types::secrets::seal(key.as_ref(), "n1", &metal_bmc::Secret::new(password));
    let began = site.app.clock.now() - ago;
    let claimed =
        site.app.store.write(move |tx| metal_store::bmcs::claim_pending(tx, "n1", &sealed, began)).await.unwrap();
    assert!(claimed, "the slot was free");
}

/// The BMC's password, changed behind the service's back (what a rotation that died after
/// the BMC took it leaves).
async fn set_on_bmc(sim: &IpmiSim, current: &str, new: &str) {
    use metal_bmc::Bmc as _;
    let config = metal_bmc::ipmi::IpmiConfig::new("127.0.0.1", sim.port, metal_bmc::Credential::new("admin", current));
    metal_bmc::ipmi::IpmiBmc::new(config).rotate_password("admin", &metal_bmc::Secret::new(new)).await.unwrap();
}

async fn generation(site: &Site) -> i64 {
    let (s, info) = site.admin("GET", "/v1/nodes/n1/bmc", None).await;
    assert_eq!(s, 200, "{info}");
    info["generation"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotations_of_one_bmc_run_one_at_a_time_and_one_that_died_is_settled() {
    let sim = IpmiSim::start();
    // No master key: the second replica (same database) reads the stored passwords too.
    let site = site_with_node(false).await;
    let other = site.replica().await;
    set_ipmi(&site, &sim).await;
    let rotate = |password: &'static str| rotate_on(&site, password);
    let power_reads = async || {
        let (s, power) = site.admin("GET", "/v1/nodes/n1/power", None).await;
        assert_eq!(s, 200, "the store's password is the BMC's: {power}");
    };

    // A rotation in flight holds the slot: a second one is refused and changes nothing.
    pending(&site, "InFlight-1", time::Duration::seconds(5)).await;
    let (s, body) = rotate("Second-2").await;
    assert_eq!(s, 409, "{body}");
    assert!(error(&body, "CONFLICT").contains("another rotation of its BMC credential is in flight"), "{body}");
    assert_eq!(generation(&site).await, 1);

    // Re-setting the BMC clears the slot; then two rotations at once, one on each replica:
    // whichever claims the slot first runs, and however they interleave the BMC and the
    // store agree afterwards.
    set_ipmi(&site, &sim).await;
    let before = generation(&site).await;
    let ((a, body_a), (b, body_b)) = tokio::join!(rotate("Together-A1"), rotate_on(&other, "Together-B2"));
    for (status, body) in [(a, &body_a), (b, &body_b)] {
        assert!(status == 200 || (status == 409 && error(body, "CONFLICT").contains("in flight")), "{status} {body}");
    }
    let succeeded = i64::from(a == 200) + i64::from(b == 200);
    assert!(succeeded >= 1, "{body_a} {body_b}");
    assert_eq!(generation(&site).await, before + succeeded);
    power_reads().await;

    // A rotation that died after the BMC took its password: past the lease, the next
    // rotation promotes it first (power reads meanwhile try it), then rotates.
    let current = if b == 200 && (a != 200 || body_b["generation"].as_i64() > body_a["generation"].as_i64()) {
        "Together-B2"
    } else {
        "Together-A1"
    };
    pending(&site, "Died-Took-3", time::Duration::minutes(6)).await;
    set_on_bmc(&sim, current, "Died-Took-3").await;
    power_reads().await;
    let before = generation(&site).await;
    let (s, body) = rotate("After-4").await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(generation(&site).await, before + 2, "promoted, then rotated");
    power_reads().await;

    // One that died before the BMC took it: dropped, then the rotation runs.
    pending(&site, "Died-Lost-5", time::Duration::minutes(6)).await;
    let before = generation(&site).await;
    let (s, body) = rotate("After-6").await;
    assert_eq!(s, 200, "{body}");
    assert_eq!(generation(&site).await, before + 1, "dropped, then rotated");
    power_reads().await;
}

#[tokio::test]
async fn discovery_tries_at_most_three_credentials_and_registers_what_opened() {
    let sushy = Sushy::start();
    let site = Site::start().await;
    let port: u16 = sushy.endpoint.rsplit(':').next().unwrap().parse().unwrap();
    let tls = json!({"mode": "fingerprint", "value": sushy.pki.fingerprint});
    let creds =
        |list: &[(&str, &str)]| -> Value { list.iter().map(|(u, p)| json!({"username": u, "password": p})).collect() };
    let four = creds(&[("a", "1"), ("b", "2"), ("c", "3"), ("admin", SUSHY_PASSWORD)]);
    let (s, body) = site
        .admin(
            "POST",
            "/v1/bmcs/discover",
            Some(json!({"range": "127.0.0.1/32", "port": port, "credentials": four, "tls": tls})),
        )
        .await;
    assert_eq!((s, &body["error"]["field"]), (422, &json!("credentials")), "{body}");
    let (s, body) = site
        .admin(
            "POST",
            "/v1/bmcs/discover",
            Some(json!({"range": "8.8.8.8/32", "credentials": creds(&[("a", "1")]), "tls": tls})),
        )
        .await;
    assert_eq!((s, &body["error"]["field"]), (422, &json!("range")), "{body}");

    let three = creds(&[("admin", "wrong-1"), ("root", "wrong-2"), ("admin", SUSHY_PASSWORD)]);
    let request = json!({"range": "127.0.0.1/32", "port": port, "credentials": three, "tls": tls, "register": true});
    let (s, result) = site.admin("POST", "/v1/bmcs/discover", Some(request.clone())).await;
    assert_eq!(s, 200, "{result}");
    assert_eq!(result["scanned"], 1);
    let found = &result["found"][0];
    assert_eq!(found["authenticatedAs"], "admin");
    assert_eq!(found["manufacturer"], "Sushy Emulator");
    let node = found["registeredNode"].as_str().unwrap().to_owned();
    assert!(node.starts_with("node-"), "{node}");
    assert!(!result.to_string().contains(SUSHY_PASSWORD));
    let (s, bmc) = site.admin("GET", &format!("/v1/nodes/{node}/bmc"), None).await;
    assert_eq!((s, &bmc["address"]), (200, &json!(sushy.endpoint)), "{bmc}");
    let (s, power) = site.admin("GET", &format!("/v1/nodes/{node}/power"), None).await;
    assert_eq!((s, &power["power"]), (200, &json!("off")), "{power}");
    // Scanning again finds it enrolled already.
    let (_, again) = site.admin("POST", "/v1/bmcs/discover", Some(request)).await;
    assert!(again["found"][0]["note"].as_str().unwrap().contains("already enrolled"), "{again}");
}

#[tokio::test]
async fn imports_carry_bmcs_in_csv_and_json() {
    let site = site_with_node(true).await;
    let csv = "id,bmcProtocol,bmcAddress,bmcUsername,bmcPassword,bmcTls\n\
               n2,ipmi,10.0.0.2,admin,csv-secret-1,\n\
               n3,redfish,https://10.0.0.3,root,csv-secret-2,fingerprint=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n\
               n4,,,,,\n";
    let response = site.admin_csv("/v1/nodes/import", csv.to_owned()).await;
    let text = response.text().await.unwrap();
    assert!(text.contains("\"created\":[\"n2\",\"n3\",\"n4\"]") && !text.contains("csv-secret"), "{text}");
    let (_, n2) = site.admin("GET", "/v1/nodes/n2/bmc", None).await;
    assert_eq!(
        (&n2["protocol"], &n2["address"], &n2["credentialSealed"]),
        (&json!("ipmi"), &json!("10.0.0.2"), &json!(true))
    );
    let (_, n3) = site.admin("GET", "/v1/nodes/n3/bmc", None).await;
    assert_eq!(n3["tls"]["mode"], "fingerprint");
    let (s, _) = site.admin("GET", "/v1/nodes/n4/bmc", None).await;
    assert_eq!(s, 404);

    // JSON: a node that exists is skipped and its BMC left alone; a bad BMC rejects it all.
    let import = json!([{"id": "n1", "bmc": {"protocol": "ipmi", "address": "10.9.9.9", "username": "x", "password": "y"}},
                        {"id": "n5", "bmc": {"protocol": "ipmi", "address": "10.0.0.5", "username": "admin", "password": "json-secret"}}]);
    let (s, result) = site.admin("POST", "/v1/nodes/import", Some(import)).await;
    assert_eq!((s, &result["created"], &result["skipped"][0]["id"]), (200, &json!(["n5"]), &json!("n1")), "{result}");
    let (s, _) = site.admin("GET", "/v1/nodes/n1/bmc", None).await;
    assert_eq!(s, 404, "a skipped node's BMC is not set");
    let bad = json!([{"id": "n6"}, {"id": "n7", "bmc": {"protocol": "redfish", "address": "https://10.0.0.7", "username": "a", "password": "b"}}]);
    let (s, body) = site.admin("POST", "/v1/nodes/import", Some(bad)).await;
    assert_eq!((s, &body["error"]["field"]), (422, &json!("nodes[1].bmc.tls")), "{body}");
    let (s, _) = site.admin("GET", "/v1/nodes/n6", None).await;
    assert_eq!(s, 404, "nothing of a rejected import is enrolled");
}
