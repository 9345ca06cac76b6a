//! The image store and profiles end to end on loopback: imports from an HTTPS mirror that
//! drops connections, ignores Range, serves a wrong checksum or a qcow2; a catalog import
//! from a site catalog file; a restart mid-import; profiles and their versions; provision
//! (the smallest qualifying node, a refusal that counts each constraint) and the image as the
//! boot listener serves it to that node's ramdisk, with Range.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use metal_protocol::{InventoryReport, Role};
use metal_tests::controller::Misbehaviour;
use metal_tests::images::{Mirror, zstd_cli};
use metal_tests::scheduler::{Admin as _, TestScheduler};
use metal_types::config::Config;
use serde_json::{Value, json};
use sha2::Digest as _;

const MIB: usize = 1 << 20;

/// A 12 MiB raw disk image: a DOS partition table, then pseudo-random (incompressible) data
/// with an all-zero 4 MiB chunk in the middle.
fn raw_image() -> Vec<u8> {
    let mut raw = Vec::with_capacity(12 * MIB);
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for i in 0..12 * MIB {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        raw.push(if (4 * MIB..8 * MIB).contains(&i) { 0 } else { x.to_le_bytes()[0] });
    }
    metal_tests::images::with_mbr(raw)
}

fn sha256(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

fn mirror(files: HashMap<String, Vec<u8>>, misbehaviour: Misbehaviour) -> Mirror {
    Mirror::start(files, misbehaviour)
}

fn scheduler(mirror: &Mirror, configure: impl FnOnce(&mut Config)) -> TestScheduler {
    let ca_file = mirror.ca_file.clone();
    TestScheduler::start(move |config| {
        config.images.ca_file = Some(ca_file);
        config.images.backoff = Duration::from_millis(50);
        configure(config);
    })
}

/// Waits for the import to end; returns the image.
fn wait(s: &TestScheduler, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let (status, image) = s.call("GET", &format!("/v1/images/{id}"), None);
        assert_eq!(status, 200, "{image}");
        if image["state"] != "importing" {
            return image;
        }
        assert!(Instant::now() < deadline, "the import never ended: {image}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn import(s: &TestScheduler, body: Value) -> Value {
    let (status, image) = s.call("POST", "/v1/images", Some(body));
    assert_eq!(status, 202, "{image}");
    assert_eq!(image["state"], "importing");
    image
}

fn images_dir(s: &TestScheduler) -> std::path::PathBuf {
    s.data_dir().join("images")
}

/// The served file decompresses with the zstd tool to exactly the raw image.
fn assert_served_is(s: &TestScheduler, id: &str, raw: &[u8]) {
    let served = images_dir(s).join(format!("{id}.zst"));
    let out = std::process::Command::new("zstd").arg("-dc").arg(&served).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stdout == raw, "zstd -dc of the served file is not the raw image");
}

fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd_cli(bytes, &["-q", "-3", "-c"])
}

#[test]
fn a_dropped_transfer_resumes_with_range_and_the_image_is_stored_seekable() {
    let raw = raw_image();
    let file = zstd(&raw);
    let mirror = mirror(
        HashMap::from([("disk.raw.zst".to_owned(), file.clone())]),
        Misbehaviour { drops: 2, drop_after: 64 * 1024, ..Default::default() },
    );
    let s = scheduler(&mirror, |_| {});
    let started = import(&s, json!({"url": mirror.server.url("disk.raw.zst"), "checksum": sha256(&file)}));
    let image = wait(&s, started["id"].as_str().unwrap());
    assert_eq!(image["state"], "ready", "{image}");
    assert_eq!(image["name"], "disk.raw.zst");
    assert_eq!(image["sourceFormat"], "zstd");
    assert_eq!(image["rawSizeBytes"], 12 * MIB);
    assert_eq!(image["progress"]["bytesDone"], file.len());
    let requests = mirror.server.log.lock().unwrap().requests.clone();
    assert!(requests.len() >= 3, "{requests:?}");
    assert_eq!(requests[0].1, None);
    for (_, range) in &requests[1..] {
        let offset: u64 = range.as_deref().unwrap().trim_start_matches("bytes=").trim_end_matches('-').parse().unwrap();
        assert!(offset > 0, "a resumed request asks from where it was: {requests:?}");
    }
    let id = image["id"].as_str().unwrap();
    assert_served_is(&s, id, &raw);
    // The stored plan: one frame per 4 MiB chunk, chunk digests of the raw image, the zero
    // chunk marked.
    let plan = {
        let id = id.to_owned();
        s.block_on(s.app.store.read(move |tx| metal_store::images::plan(tx, &id))).unwrap().unwrap()
    };
    assert_eq!(plan.chunks.sha256.len(), 3);
    assert_eq!(plan.chunks.sha256[0], sha256(&raw[..4 * MIB]));
    assert_eq!(plan.chunks.zero_chunks, vec![1]);
    assert_eq!(plan.image.frames.len(), 3);
    let served = std::fs::read(images_dir(&s).join(format!("{id}.zst"))).unwrap();
    assert_eq!(plan.image.size_bytes, served.len() as u64);
    assert_eq!(plan.image.digest.hex, sha256(&served));
    let kinds: Vec<Value> = s.events("image.import.progress");
    assert!(!kinds.is_empty(), "progress events");
    assert_eq!(s.events("image.imported").len(), 1);
    let leftovers: Vec<_> = std::fs::read_dir(images_dir(&s)).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers, vec![std::ffi::OsString::from(format!("{id}.zst"))], "only the served file remains");
}

#[test]
fn a_server_without_range_support_restarts_from_zero() {
    let raw = raw_image();
    let file = zstd(&raw);
    let mirror = mirror(
        HashMap::from([("d.zst".to_owned(), file.clone())]),
        Misbehaviour { drops: 1, drop_after: 256 * 1024, ignore_range: true, ..Default::default() },
    );
    let s = scheduler(&mirror, |_| {});
    let started = import(&s, json!({"url": mirror.server.url("d.zst"), "checksum": sha256(&file), "name": "d"}));
    let image = wait(&s, started["id"].as_str().unwrap());
    assert_eq!(image["state"], "ready", "{image}");
    assert_served_is(&s, image["id"].as_str().unwrap(), &raw);
    let requests = mirror.server.log.lock().unwrap().requests.clone();
    assert_eq!(requests.len(), 2, "{requests:?}");
    assert!(requests[1].1.is_some(), "the second attempt asked for a range and got the whole file");
}

#[test]
fn a_wrong_checksum_fails_the_import_and_keeps_nothing() {
    let file = zstd(&raw_image());
    let mirror = mirror(HashMap::from([("d.zst".to_owned(), file.clone())]), Misbehaviour::default());
    let s = scheduler(&mirror, |_| {});
    let wrong = sha256(b"another image");
    let started = import(&s, json!({"url": mirror.server.url("d.zst"), "checksum": wrong}));
    let image = wait(&s, started["id"].as_str().unwrap());
    assert_eq!(image["state"], "failed");
    let error = image["error"].as_str().unwrap();
    assert!(error.contains(&wrong) && error.contains(&sha256(&file)), "names both digests: {error}");
    assert_eq!(std::fs::read_dir(images_dir(&s)).unwrap().count(), 0, "no file kept");
    assert_eq!(s.events("image.import.failed").len(), 1);
    // A missing file is a permanent failure, not retried forever.
    let started = import(&s, json!({"url": mirror.server.url("nope.zst"), "checksum": wrong, "name": "nope"}));
    let image = wait(&s, started["id"].as_str().unwrap());
    assert!(image["error"].as_str().unwrap().contains("404"), "{image}");
    // Bad requests name the field.
    for (body, field) in [
        (json!({"url": mirror.server.url("d.zst")}), "checksum"),
        (json!({"url": "ftp://x/y", "checksum": wrong}), "url"),
        (json!({"catalog": "windows-11"}), "catalog"),
    ] {
        let (status, answer) = s.call("POST", "/v1/images", Some(body));
        assert_eq!((status, answer["error"]["field"].as_str()), (422, Some(field)), "{answer}");
    }
    let (status, answer) =
        s.call("POST", "/v1/images", Some(json!({"url": mirror.server.url("d.zst"), "checksum": wrong})));
    assert_eq!(status, 409, "the name is taken: {answer}");
}

#[test]
fn an_image_without_a_partition_table_fails_its_import_with_why_and_keeps_nothing() {
    let mut raw = raw_image();
    raw[510..512].fill(0);
    let file = zstd(&raw);
    let mirror = mirror(HashMap::from([("bare.zst".to_owned(), file.clone())]), Misbehaviour::default());
    let s = scheduler(&mirror, |_| {});
    let started = import(&s, json!({"url": mirror.server.url("bare.zst"), "checksum": sha256(&file)}));
    let image = wait(&s, started["id"].as_str().unwrap());
    assert_eq!(image["state"], "failed", "{image}");
    let error = image["error"].as_str().unwrap();
    assert!(
        error.contains("no partition table (neither GPT nor MBR)") && error.contains("could never deploy"),
        "{error}"
    );
    assert_eq!(std::fs::read_dir(images_dir(&s)).unwrap().count(), 0, "no file kept");
}

/// A qcow2 of `raw` made by qemu-img.
fn qcow2(raw: &[u8], dir: &Path) -> Vec<u8> {
    let (raw_file, qcow) = (dir.join("in.raw"), dir.join("out.qcow2"));
    std::fs::write(&raw_file, raw).unwrap();
    let status = std::process::Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .arg(&raw_file)
        .arg(&qcow)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::read(qcow).unwrap()
}

#[test]
fn a_qcow2_from_a_site_catalog_is_converted_at_import() {
    let raw = raw_image();
    let dir = tempfile::tempdir().unwrap();
    let qcow = qcow2(&raw, dir.path());
    let bsd = format!("# Rocky-9\nSHA256 (rocky.qcow2) = {}\n", sha256(&qcow));
    let gnu = format!("{}  other.img\n{}  debian.qcow2\n", "0".repeat(64), hex::encode(sha2::Sha512::digest(&qcow)));
    let mirror = mirror(
        HashMap::from([
            ("rocky.qcow2".to_owned(), qcow.clone()),
            ("debian.qcow2".to_owned(), qcow.clone()),
            ("CHECKSUM".to_owned(), bsd.into_bytes()),
            ("SHA512SUMS".to_owned(), gnu.into_bytes()),
        ]),
        Misbehaviour::default(),
    );
    let catalog = dir.path().join("catalog.toml");
    std::fs::write(
        &catalog,
        format!(
            "[rocky-9.amd64]\nurl = \"{}\"\nchecksum-url = \"{}\"\n[debian-12.arm64]\nurl = \"{}\"\nchecksum-url = \"{}\"\n",
            mirror.server.url("rocky.qcow2"),
            mirror.server.url("CHECKSUM"),
            mirror.server.url("debian.qcow2"),
            mirror.server.url("SHA512SUMS"),
        ),
    )
    .unwrap();
    let s = scheduler(&mirror, |c| c.images.catalog = Some(catalog.clone()));
    let rocky = wait(&s, import(&s, json!({"catalog": "rocky-9"}))["id"].as_str().unwrap());
    assert_eq!(
        (&rocky["state"], &rocky["name"], &rocky["sourceFormat"]),
        (&json!("ready"), &json!("rocky-9"), &json!("qcow2")),
        "{rocky}"
    );
    assert_eq!(rocky["rawSizeBytes"], raw.len());
    assert_served_is(&s, rocky["id"].as_str().unwrap(), &raw);
    let debian = wait(&s, import(&s, json!({"catalog": "debian-12", "architecture": "arm64"}))["id"].as_str().unwrap());
    assert_eq!((&debian["state"], &debian["name"]), (&json!("ready"), &json!("debian-12-arm64")), "{debian}");
    let (status, body) = s.call("POST", "/v1/images", Some(json!({"catalog": "ubuntu-24.04"})));
    assert_eq!(status, 422, "the site catalog replaces the shipped one: {body}");
}

#[test]
fn a_restart_mid_import_resumes_the_download() {
    let raw = raw_image();
    let file = zstd_cli(&raw, &["-q", "-1", "-c", "--no-check"]);
    let mirror = mirror(
        HashMap::from([("slow.zst".to_owned(), file.clone())]),
        Misbehaviour { pace: Some(Duration::from_millis(40)), ..Default::default() },
    );
    let lease = |c: &mut Config| c.images.lease = Duration::from_millis(600);
    let s = scheduler(&mirror, lease);
    let id = import(&s, json!({"url": mirror.server.url("slow.zst"), "checksum": sha256(&file)}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    while s.call("GET", &format!("/v1/images/{id}"), None).1["progress"]["bytesDone"].as_u64().unwrap_or(0) < 128 * 1024
    {
        assert!(Instant::now() < deadline, "no progress");
        std::thread::sleep(Duration::from_millis(50));
    }
    let ca_file = mirror.ca_file.clone();
    let s = s.restart(move |c| {
        c.images.ca_file = Some(ca_file);
        lease(c);
    });
    assert_eq!(s.call("GET", &format!("/v1/images/{id}"), None).1["state"], "importing");
    std::thread::sleep(Duration::from_millis(700)); // the dead worker's lease lapses
    let resumed = s.block_on(metal_machines::metal::images::import::resume_orphans(&s.app.machines)).unwrap();
    assert_eq!(resumed, 1);
    let image = wait(&s, &id);
    assert_eq!(image["state"], "ready", "{image}");
    assert_served_is(&s, &id, &raw);
    let requests = mirror.server.log.lock().unwrap().requests.clone();
    let last = requests.last().unwrap().1.clone().expect("the resumed download asks for a range");
    assert_ne!(last, "bytes=0-", "{requests:?}");
}

fn inventory(node: &str, cores: u32, memory: u64, disks: &[(&str, u64)]) -> InventoryReport {
    let mut report: InventoryReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/inventory-report.json")).unwrap();
    report.node_id = node.into();
    report.cpu.cores = cores;
    report.memory.total_bytes = memory;
    let template = report.disks[0].clone();
    report.disks = disks
        .iter()
        .map(|(serial, size)| {
            let mut disk = template.clone();
            disk.identity.serial = Some((*serial).into());
            disk.identity.wwn = None;
            disk.identity.size_bytes = *size;
            disk.removable = false;
            disk.read_only = false;
            disk
        })
        .collect();
    report
}

/// The boot MAC `commissioned` gives node `id` (its network boot asks with it).
fn boot_mac(id: &str) -> String {
    let digest = <sha2::Sha256 as sha2::Digest>::digest(id.as_bytes());
    format!("52:54:00:{:02x}:{:02x}:{:02x}", digest[0], digest[1], digest[2])
}

/// Enrols and commissions `id` with this inventory (through the boot service's report intake).
fn commissioned(s: &TestScheduler, id: &str, zone: &str, report: &InventoryReport) {
    let mac = boot_mac(id);
    let (status, body) = s.call("POST", "/v1/nodes", Some(json!({"id": id, "labels": {"zone": zone}, "bootMac": mac})));
    assert_eq!(status, 201, "{body}");
    s.walk(id, &["new", "commissioning"]);
    let generation = s.node(id)["identityGeneration"].as_u64().unwrap();
    let receipt = s.post_report_as(Role::Ramdisk, id, generation, InventoryReport::PAYLOAD_TYPE, report);
    assert_eq!(receipt["accepted"], true, "{receipt}");
    assert_eq!(s.node(id)["state"], "ready");
}

const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl ops";
const GIB: u64 = 1 << 30;

#[test]
fn profiles_provision_the_smallest_fitting_nodes_and_the_boot_listener_serves_their_image() {
    let raw = raw_image();
    let file = zstd(&raw);
    let mirror = mirror(HashMap::from([("os.zst".to_owned(), file.clone())]), Misbehaviour::default());
    let s = scheduler(&mirror, |_| {});
    // No ready image yet: a profile cannot name it.
    let started = import(&s, json!({"url": mirror.server.url("os.zst"), "checksum": sha256(&file), "name": "os"}));
    let image_id = started["id"].as_str().unwrap().to_owned();
    let image = wait(&s, &image_id);
    assert_eq!(image["state"], "ready", "{image}");
    commissioned(&s, "big", "z1", &inventory("big", 64, 512 * GIB, &[("BIG0", 2000 * GIB)]));
    commissioned(&s, "small", "z1", &inventory("small", 16, 64 * GIB, &[("S0", 20 * MIB as u64), ("S1", 100 * GIB)]));
    commissioned(&s, "tiny", "z1", &inventory("tiny", 4, 8 * GIB, &[("T0", 100 * GIB)]));
    commissioned(&s, "far", "z2", &inventory("far", 16, 64 * GIB, &[("F0", 100 * GIB)]));
    // A Grace-class machine in z1 that would fit but for its architecture (the image is amd64).
    let mut grace = inventory("grace", 72, 480 * GIB, &[("G0", 1000 * GIB)]);
    grace.cpu.architecture = "aarch64".into();
    commissioned(&s, "grace", "z1", &grace);
    assert_eq!(
        (s.node("grace")["architecture"].as_str(), s.node("small")["architecture"].as_str()),
        (Some("aarch64"), Some("x86_64"))
    );
    let spec = json!({"image": "os", "sshAuthorizedKeys": [KEY], "adminUser": "ops", "zone": "z1", "minCores": 8,
                      "role": "dedicated", "cloudInit": {"packages": ["htop"]}});
    let mut create = spec.clone();
    create["id"] = json!("web");
    let (status, profile) = s.call("POST", "/v1/profiles", Some(create.clone()));
    assert_eq!(status, 201, "{profile}");
    assert_eq!((&profile["latestVersion"], &profile["versions"][0]["imageId"]), (&json!(1), &json!(image_id)));
    let (status, body) = s.call("POST", "/v1/profiles", Some(create.clone()));
    assert_eq!(status, 409, "{body}");
    let mut bad = create.clone();
    bad["sshAuthorizedKeys"] = json!(["ssh-rsa nope"]);
    bad["id"] = json!("bad");
    let (status, body) = s.call("POST", "/v1/profiles", Some(bad.clone()));
    assert_eq!((status, body["error"]["field"].as_str()), (422, Some("sshAuthorizedKeys[0]")), "{body}");
    for (key, value, field) in
        [("deployMode", json!("installer"), "image"), ("cloudInit", json!({"timezone": "../x"}), "cloudInit.timezone")]
    {
        let mut refused = create.clone();
        refused["id"] = json!("refused");
        refused[key] = value;
        let (status, body) = s.call("POST", "/v1/profiles", Some(refused));
        assert_eq!((status, body["error"]["field"].as_str()), (422, Some(field)), "{body}");
    }
    // Version 2 wants more cores; version 1 stays as it was.
    let mut v2 = spec.clone();
    v2["minCores"] = json!(32);
    let (status, profile) = s.call("POST", "/v1/profiles/web/versions", Some(v2));
    assert_eq!(status, 201, "{profile}");
    assert_eq!(profile["versions"][0]["spec"]["minCores"], 8);
    assert_eq!(profile["versions"][1]["spec"]["minCores"], 32);
    // An image a profile names cannot be deleted.
    let (status, body) = s.call("DELETE", &format!("/v1/images/{image_id}"), None);
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("web:1"), "{body}");

    // Two machines of version 1 are more than z1 has with 8 cores besides `big`... one is
    // `small` (16 cores; its 20 MiB disk is too small, its 100 GiB one fits), then `big`.
    let (status, refused) =
        s.call("POST", "/v1/provision", Some(json!({"profileId": "web", "profileVersion": 1, "count": 3})));
    assert_eq!(status, 409, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("3 nodes needed, 2 qualify")
            && message.contains("1 not x86_64, the image's architecture")
            && message.contains("1 in another zone")
            && message.contains("1 with too few cores"),
        "{message}"
    );
    assert_eq!(s.node("small")["state"], "ready", "all or nothing");
    let (status, outcome) =
        s.call("POST", "/v1/provision", Some(json!({"profileId": "web", "profileVersion": 1, "count": 1})));
    assert_eq!(status, 200, "{outcome}");
    assert_eq!(outcome["nodes"], json!(["small"]), "the smallest node that qualifies");
    assert_eq!(s.node("small")["state"], "deploying");
    assert_eq!(s.events("node.provisioned").len(), 1);

    // A profile that keeps two machines of zone z2 deployed: one node fits, so one is
    // started now, and the next pass finds nothing more to take.
    let batch = json!({"id": "batch", "image": image_id, "sshAuthorizedKeys": [KEY], "zone": "z2",
                       "autoDeploy": {"desired": 2}});
    let (status, body) = s.call("POST", "/v1/profiles", Some(batch));
    assert_eq!(status, 201, "{body}");
    let auto = || s.block_on(metal_machines::metal::provision::auto_deploy_once(&s.app.machines)).unwrap();
    assert_eq!(auto(), 1);
    assert_eq!(s.node("far")["state"], "deploying");
    assert_eq!(auto(), 0, "still one short, and no ready node of z2 left");
    assert_eq!(s.events("profile.auto-deployed").len(), 1);

    // The plan the ramdisk gets: this controller's URL for the image, the fitting disk
    // pinned, and the seed with the profile's user, key and packages.
    let (client, _) = s.ramdisk_client("small", &boot_mac("small"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let get = |url: String, range: Option<&str>| {
        runtime.block_on(async {
            let mut request = client.get(url);
            if let Some(range) = range {
                request = request.header("range", range);
            }
            let response = request.send().await.unwrap();
            (response.status().as_u16(), response.bytes().await.unwrap().to_vec())
        })
    };
    let (status, body) = get(format!("{}{}", s.boot_url, metal_protocol::boot::PLAN_PATH), None);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let plan: metal_protocol::DeployPlan = serde_json::from_slice(&body).unwrap();
    plan.validate().unwrap();
    assert_eq!(plan.image.url, format!("{}{}/{image_id}", s.boot_url, metal_protocol::boot::IMAGES_PATH));
    assert_eq!(plan.target.serial.as_deref(), Some("S1"));
    let seed = plan.cloud_init.as_ref().unwrap();
    assert!(seed.user_data.contains("\"ops\"") && seed.user_data.contains("htop") && seed.meta_data.contains("small"));
    let served = std::fs::read(images_dir(&s).join(format!("{image_id}.zst"))).unwrap();
    let (status, whole) = get(plan.image.url.clone(), None);
    assert_eq!(status, 200);
    assert!(whole == served, "the served file, whole");
    let (status, tail) = get(plan.image.url.clone(), Some("bytes=1000-"));
    assert_eq!(status, 206);
    assert!(tail == served[1000..], "a resumed download gets the rest");
    // Nobody else gets it: another node's ramdisk, a ramdisk of the node's generation that
    // did not join this boot, a stale generation, a node-tenant.
    let generation = s.node("small")["identityGeneration"].as_u64().unwrap();
    for (role, node, generation) in [
        (Role::Ramdisk, "big", s.node("big")["identityGeneration"].as_u64().unwrap()),
        (Role::Ramdisk, "small", generation),
        (Role::Ramdisk, "small", generation + 1),
        (Role::NodeTenant, "small", generation),
    ] {
        let (client, _) = s.boot_client_as(role, node, generation);
        let status =
            runtime.block_on(async { client.get(plan.image.url.clone()).send().await.unwrap().status().as_u16() });
        assert!(status == 403 || status == 409, "{role:?} {node} gen {generation}: {status}");
    }
}

#[test]
fn two_replicas_never_run_one_import_twice_and_the_survivor_takes_over() {
    let raw = raw_image();
    let file = zstd_cli(&raw, &["-q", "-1", "-c", "--no-check"]);
    let mirror = mirror(
        HashMap::from([("shared.zst".to_owned(), file.clone())]),
        Misbehaviour { pace: Some(Duration::from_millis(40)), ..Default::default() },
    );
    let lease = |c: &mut Config| c.images.lease = Duration::from_millis(600);
    let a = scheduler(&mirror, lease);
    let ca_file = mirror.ca_file.clone();
    let b = a.replica(move |c| {
        c.images.ca_file = Some(ca_file);
        c.images.backoff = Duration::from_millis(50);
        lease(c);
    });
    let id = import(&a, json!({"url": mirror.server.url("shared.zst"), "checksum": sha256(&file)}))["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // While A's worker holds the import, B's pass finds nothing to take: one download only.
    for _ in 0..5 {
        assert_eq!(b.block_on(metal_machines::metal::images::import::resume_orphans(&b.app.machines)).unwrap(), 0);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(mirror.server.log.lock().unwrap().requests.len(), 1, "only A downloads");
    // A dies mid-download; once its lease lapses B resumes the same file where A left it.
    let done_by_a = b.call("GET", &format!("/v1/images/{id}"), None).1["progress"]["bytesDone"].as_u64().unwrap();
    let _files = a.kill();
    b.clock.advance(Duration::from_secs(1));
    assert_eq!(b.block_on(metal_machines::metal::images::import::resume_orphans(&b.app.machines)).unwrap(), 1);
    let image = wait(&b, &id);
    assert_eq!(image["state"], "ready", "{image}");
    let requests = mirror.server.log.lock().unwrap().requests.clone();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let offset: u64 =
        requests[1].1.as_deref().unwrap().trim_start_matches("bytes=").trim_end_matches('-').parse().unwrap();
    assert!(offset > 0 && offset >= done_by_a, "B resumed A's file at {offset} (A had reported {done_by_a})");
    let served = std::fs::read(b.app.images.served(&id)).unwrap();
    assert_eq!(zstd_cli(&served, &["-q", "-d", "-c"]), raw);
}

#[test]
fn the_same_name_imported_on_two_replicas_at_once_is_one_image_and_one_clean_conflict() {
    let file = zstd(&raw_image());
    let mirror = mirror(HashMap::from([("same.zst".to_owned(), file.clone())]), Misbehaviour::default());
    let a = scheduler(&mirror, |_| {});
    let ca_file = mirror.ca_file.clone();
    let b = a.replica(move |c| c.images.ca_file = Some(ca_file));
    for round in 0..5 {
        let body =
            json!({"url": mirror.server.url("same.zst"), "checksum": sha256(&file), "name": format!("same-{round}")});
        let barrier = std::sync::Barrier::new(2);
        let (first, second) = std::thread::scope(|scope| {
            let one = scope.spawn(|| {
                barrier.wait();
                a.call("POST", "/v1/images", Some(body.clone()))
            });
            let two = scope.spawn(|| {
                barrier.wait();
                b.call("POST", "/v1/images", Some(body.clone()))
            });
            (one.join().unwrap(), two.join().unwrap())
        });
        let mut statuses = [first.0, second.0];
        statuses.sort_unstable();
        assert_eq!(statuses, [202, 409], "round {round}: {first:?} {second:?}");
    }
    let (_, images) = a.call("GET", "/v1/images", None);
    assert_eq!(images.as_array().unwrap().len(), 5);
}

#[test]
fn tenants_see_their_own_and_public_images_and_public_profiles_name_only_public_images() {
    let file = zstd(&raw_image());
    let mirror = mirror(HashMap::from([("t.zst".to_owned(), file.clone())]), Misbehaviour::default());
    let s = scheduler(&mirror, |_| {});
    for tenant in ["acme", "globex"] {
        let (status, body) = s.call("POST", "/v1/tenants", Some(json!({"id": tenant, "name": tenant})));
        assert_eq!(status, 201, "{body}");
    }
    let token = |tenant: &str| {
        let (status, body) =
            s.call("POST", "/v1/credentials", Some(json!({"role": "tenant-member", "tenantId": tenant, "name": "t"})));
        assert_eq!(status, 201, "{body}");
        body["token"].as_str().unwrap().to_owned()
    };
    let (acme, globex) = (token("acme"), token("globex"));
    let body = json!({"url": mirror.server.url("t.zst"), "checksum": sha256(&file), "name": "acme-os"});
    let (status, mine) = s.call_as(&acme, "POST", "/v1/images", Some(body.clone()));
    assert_eq!((status, &mine["tenantId"]), (202, &json!("acme")), "{mine}");
    let mine = wait(&s, mine["id"].as_str().unwrap());
    let mut other = body.clone();
    other["tenantId"] = json!("globex");
    assert_eq!(s.call_as(&acme, "POST", "/v1/images", Some(other)).0, 403, "a tenant imports into its own tenant");
    let root = wait(
        &s,
        import(&s, json!({"url": mirror.server.url("t.zst"), "checksum": sha256(&file), "name": "base"}))["id"]
            .as_str()
            .unwrap(),
    );
    let (root_id, mine_id) = (root["id"].as_str().unwrap(), mine["id"].as_str().unwrap());
    assert_eq!(s.call_as(&globex, "GET", &format!("/v1/images/{mine_id}"), None).0, 404);
    assert_eq!(s.call_as(&globex, "GET", &format!("/v1/images/{root_id}"), None).0, 404, "not public yet");
    let spec = |image: &str| json!({"image": image, "sshAuthorizedKeys": [KEY]});

    // A tenant's profile may name its own image, not another tenant's private one.
    let mut p = spec("acme-os");
    p["id"] = json!("acme-p");
    assert_eq!(s.call_as(&acme, "POST", "/v1/profiles", Some(p)).0, 201);
    let mut p = spec(root_id);
    p["id"] = json!("acme-q");
    let (status, body) = s.call_as(&acme, "POST", "/v1/profiles", Some(p.clone()));
    assert_eq!((status, body["error"]["field"].as_str()), (422, Some("image")), "{body}");
    // A public profile is the platform's, and names a public image.
    let mut public = spec("base");
    public["id"] = json!("base-p");
    public["public"] = json!(true);
    assert_eq!(s.call_as(&acme, "POST", "/v1/profiles", Some(public.clone())).0, 403);
    let (status, body) = s.call("POST", "/v1/profiles", Some(public.clone()));
    assert!(status == 422 && body["error"]["message"].as_str().unwrap().contains("promote it first"), "{body}");
    assert_eq!(s.call_as(&acme, "POST", &format!("/v1/images/{root_id}/promote"), None).0, 404, "platform only");
    let (status, promoted) = s.call("POST", &format!("/v1/images/{root_id}/promote"), None);
    assert_eq!((status, &promoted["public"]), (200, &json!(true)), "{promoted}");
    assert_eq!(s.call("POST", "/v1/profiles", Some(public)).0, 201);
    assert_eq!(s.call_as(&globex, "GET", &format!("/v1/images/{root_id}"), None).0, 200, "public now");
    assert_eq!(s.call_as(&globex, "GET", "/v1/profiles/base-p", None).0, 200);
    assert_eq!(s.call_as(&globex, "GET", "/v1/profiles/acme-p", None).0, 404);
    assert_eq!(s.call_as(&acme, "POST", "/v1/profiles", Some(p)).0, 201, "a public image by id");
    assert_eq!(s.call_as(&acme, "DELETE", &format!("/v1/images/{root_id}"), None).0, 403, "public is not theirs");
    let (_, listed) = s.call_as(&globex, "GET", "/v1/images", None);
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(
        s.call_as(&acme, "POST", "/v1/provision", Some(json!({"profileId": "acme-p", "profileVersion": 1}))).0,
        404
    );
}

#[test]
fn raw_gzip_and_xz_images_are_stored_in_the_same_served_form() {
    let raw = raw_image();
    let compress = |tool: &str| {
        let mut child = std::process::Command::new(tool)
            .args(["-1", "-c"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        let input = raw.clone();
        let writer = std::thread::spawn(move || stdin.write_all(&input).unwrap());
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap();
        out.stdout
    };
    let files =
        [("d.raw", raw.clone(), "raw"), ("d.raw.gz", compress("gzip"), "gzip"), ("d.raw.xz", compress("xz"), "xz")];
    let mirror = mirror(files.iter().map(|(n, b, _)| ((*n).to_owned(), b.clone())).collect(), Misbehaviour::default());
    let s = scheduler(&mirror, |_| {});
    let mut digests = Vec::new();
    for (name, bytes, format) in &files {
        let image = wait(
            &s,
            import(&s, json!({"url": mirror.server.url(name), "checksum": sha256(bytes)}))["id"].as_str().unwrap(),
        );
        assert_eq!((&image["state"], &image["sourceFormat"]), (&json!("ready"), &json!(format)), "{image}");
        assert_served_is(&s, image["id"].as_str().unwrap(), &raw);
        digests.push(image["servedSha256"].clone());
    }
    assert!(digests.windows(2).all(|w| w[0] == w[1]), "one raw image, one served form: {digests:?}");
}

/// Commissions n1 again (it is ready) as a machine of `architecture`.
fn recommission_n1(s: &TestScheduler, architecture: &str) {
    s.walk("n1", &["ready", "commissioning"]);
    let mut report = metal_tests::leases::inventory(&[]);
    report.cpu.architecture = architecture.into();
    let generation = s.node("n1")["identityGeneration"].as_u64().unwrap();
    let receipt = s.reporter().post(Role::Ramdisk, "n1", generation, InventoryReport::PAYLOAD_TYPE, &report);
    assert_eq!(receipt["accepted"], true, "{receipt}");
    assert_eq!(s.node("n1")["architecture"], architecture);
}

#[test]
fn an_arm64_image_is_placed_only_on_arm64_machines_and_a_lease_start_refuses_a_mismatch() {
    let raw = raw_image();
    let file = zstd(&raw);
    let mirror = mirror(HashMap::from([("arm.zst".to_owned(), file.clone())]), Misbehaviour::default());
    let s = scheduler(&mirror, |_| {});
    let sim = metal_tests::emulators::IpmiSim::start();
    metal_tests::leases::site(&s, metal_tests::leases::ipmi(&sim), json!({"fencing": {"driver": "none"}}));
    let body = json!({"url": mirror.server.url("arm.zst"), "checksum": sha256(&file), "name": "arm-os", "architecture": "arm64"});
    let id = import(&s, body)["id"].as_str().unwrap().to_owned();
    let image = wait(&s, &id);
    assert_eq!(
        (image["state"].as_str(), image["origin"]["architecture"].as_str()),
        (Some("ready"), Some("arm64")),
        "{image}"
    );
    let (status, body) = s.call("POST", &format!("/v1/images/{id}/promote"), None);
    assert_eq!(status, 200, "{body}");
    let profile =
        json!({"id": "arm-os", "tenantId": "acme", "image": id, "sshAuthorizedKeys": [KEY], "adminUser": "ops"});
    let (status, body) = s.call("POST", "/v1/profiles", Some(profile));
    assert_eq!(status, 201, "{body}");
    let lease = |extra: Value| {
        let mut body = json!({"tenantId": "acme", "poolId": "p1", "devices": [{"class": "gpu", "count": 1}],
                              "duration": "1d", "binding": "node", "node": {"profileId": "arm-os", "profileVersion": 1}});
        for (k, v) in extra.as_object().unwrap() {
            body[k] = v.clone();
        }
        s.call("POST", "/v1/reservations", Some(body))
    };

    // n1 is x86_64: placement passes it over, and says why; asking for x86_64 contradicts the image.
    let (status, body) = lease(json!({}));
    assert_eq!(status, 409, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("1 of another architecture"), "{body}");
    let (status, body) = lease(json!({"architecture": "x86_64"}));
    assert_eq!((status, body["error"]["field"].as_str()), (422, Some("architecture")), "{body}");

    // Commissioned as arm64 it is placed (the lease starts in an hour); commissioned again as
    // x86_64 before then, its lease start refuses the image and the node stays ready.
    recommission_n1(&s, "aarch64");
    let start = metal_types::clock::to_rfc3339(metal_types::clock::Clock::now(&s.clock) + time::Duration::hours(1));
    let (status, placed) = lease(json!({"start": start}));
    assert_eq!((status, placed["request"]["architecture"].as_str()), (201, Some("aarch64")), "{placed}");
    recommission_n1(&s, "x86_64");
    s.clock.advance(Duration::from_secs(3600));
    s.passes();
    let refused = s.events("node.tenant-root.refused");
    let reason = refused[0]["data"]["reason"].as_str().unwrap();
    assert_eq!(reason, format!("image {id} of profile arm-os is for aarch64 machines; node n1 is x86_64"));
    assert_eq!(s.node("n1")["state"], "ready");
    let (_, r) = s.call("GET", &format!("/v1/reservations/{}", placed["id"].as_str().unwrap()), None);
    assert_eq!(r["state"], "failed", "{r}");
}
