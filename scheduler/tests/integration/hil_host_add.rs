//! Machines that already run an OS join: the test OS (`scripts/build-test-os`) boots in QEMU
//! straight from its image, with a NoCloud seed that lets an `ops` user in with a key made
//! here. `metalctl host add ops@...` enrols the node, fetches and checks the join script and
//! metal-agent, and joins it over SSH; then the offline bundle (`metalctl host bundle`,
//! `metalctl host enrol --token-out`) is copied over with scp and run by hand, as on an
//! air-gapped machine, joining the same guest as a second node once its first identity is
//! wiped (a second machine would be a second boot of the same image).

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use metal_tests::hil::{BootFrom, Bus, Guest};
use metal_tests::scheduler::TestScheduler;
use serde_json::Value;

fn metalctl(s: &TestScheduler, args: &[&str]) -> Output {
    Command::new(metal_tests::bins::metalctl())
        .args(["--url", &s.url])
        .args(args)
        .env("METAL_TOKEN", &s.admin)
        .env("METALCTL_CONFIG", "/nonexistent")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `ssh`/`scp` options for the guest: its key, no host key checks (a fresh VM each run).
fn ssh_options(key: &Path) -> Vec<String> {
    [
        "-o",
        "StrictHostKeyChecking=no",
        "-o",
        "UserKnownHostsFile=/dev/null",
        "-o",
        "BatchMode=yes",
        "-o",
        "LogLevel=ERROR",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .chain(["-i".to_owned(), key.display().to_string()])
    .collect()
}

fn ssh(key: &Path, port: u16, command: &str) -> Output {
    Command::new("ssh")
        .args(ssh_options(key))
        .args(["-p", &port.to_string(), "ops@127.0.0.1", command])
        .output()
        .unwrap()
}

/// A `cidata` FAT image with the NoCloud seed metal renders for an `ops` user with `public_key`.
fn seed_disk(dir: &Path, public_key: &str) -> std::path::PathBuf {
    let seed = metal_protocol::cloudinit::render(&metal_protocol::cloudinit::SeedInput {
        instance_id: "hil-add-1".into(),
        hostname: "hil-add".into(),
        admin_user: "ops".into(),
        ssh_authorized_keys: vec![public_key.trim().to_owned()],
        join: None,
        network: vec![],
        volume: metal_protocol::deploy::SeedVolume::VfatPartition,
        extras: Default::default(),
    })
    .unwrap();
    std::fs::write(dir.join("meta-data"), &seed.meta_data).unwrap();
    std::fs::write(dir.join("user-data"), &seed.user_data).unwrap();
    let image = dir.join("seed.img");
    let status = Command::new("mkfs.vfat").args(["-n", "CIDATA", "-C"]).arg(&image).arg("4096").status().unwrap();
    assert!(status.success());
    let status = Command::new("mcopy")
        .arg("-i")
        .arg(&image)
        .arg(dir.join("meta-data"))
        .arg(dir.join("user-data"))
        .arg("::")
        .status();
    assert!(status.unwrap().success());
    image
}

fn host(s: &TestScheduler, id: &str) -> Value {
    let (status, host) = s.call("GET", &format!("/v1/hosts/{id}"), None);
    assert_eq!(status, 200, "{host}");
    host
}

#[test]
fn a_running_machine_joins_over_ssh_and_with_the_offline_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let s = TestScheduler::start(|c| {
        let port = c.boot.listen.unwrap().port();
        c.boot.controller_url = Some(format!("https://10.0.2.2:{port}"));
    });
    std::fs::create_dir_all(s.files_dir()).unwrap();
    let agent = metal_tests::hil::static_binaries().join("metal-agent");
    std::os::unix::fs::symlink(&agent, s.files_dir().join("metal-agent")).unwrap();

    let key = dir.path().join("id_ed25519");
    let keygen = Command::new("ssh-keygen").args(["-q", "-t", "ed25519", "-N", "", "-f"]).arg(&key).status().unwrap();
    assert!(keygen.success());
    let seed = seed_disk(dir.path(), &std::fs::read_to_string(key.with_extension("pub")).unwrap());
    let disk = dir.path().join("os.raw");
    let raw = metal_tests::hil::test_os().join("debian-12-metal.raw");
    assert!(Command::new("cp").arg("--sparse=always").arg(&raw).arg(&disk).status().unwrap().success());
    let port = free_port();
    let done = "METAL-HOST-ADD-TEST-DONE";
    let guest = Guest::new()
        .boot(BootFrom::Firmware)
        .args(&["-m", "1024"])
        .nic_forwarding("52:54:00:00:0b:01", &[(port, 22)])
        .disk(&Bus::Virtio { serial: "OS".into() }, &disk, "unmap")
        .disk(&Bus::Virtio { serial: "SEED".into() }, &seed, "unmap")
        .until(done)
        .timeout(Duration::from_secs(1200));
    let running = std::thread::spawn(move || guest.run());

    // sshd answers once cloud-init has put the key in place.
    let started = Instant::now();
    while !ssh(&key, port, "true").status.success() {
        assert!(started.elapsed() < Duration::from_secs(600), "the guest's sshd never let ops in");
        assert!(!running.is_finished(), "the guest stopped");
        std::thread::sleep(Duration::from_secs(5));
    }
    eprintln!("ssh into the guest after {:?}", started.elapsed());

    // metalctl host add: enrol, fetch, check, join over SSH.
    let boot_url = format!("https://127.0.0.1:{}", s.boot_port);
    let ssh_opts = ["--ssh-option", "StrictHostKeyChecking=no", "--ssh-option", "UserKnownHostsFile=/dev/null"];
    let target = format!("ops@127.0.0.1:{port}");
    let key_arg = key.display().to_string();
    let mut args = vec!["host", "add", &target, "--node", "hil-add", "--ssh-key", &key_arg, "--boot-url", &boot_url];
    args.extend(ssh_opts);
    let started = Instant::now();
    let o = metalctl(&s, &args);
    assert!(o.status.success(), "{}", text(&o));
    eprintln!("metalctl host add took {:?}", started.elapsed());
    assert!(text(&o).contains("hil-add: joined as spiffe://"), "{}", text(&o));
    let added = host(&s, "hil-add");
    assert_eq!(
        (&added["state"], &added["role"], &added["hostname"]),
        (&"joined".into(), &"node".into(), &"hil-add".into()),
        "{added}"
    );
    // A file of machines: one that cannot be reached fails alone, and the others go on (the
    // guest again, which has joined: left as it is, with no token issued for nothing).
    let listing = dir.path().join("hosts.txt");
    std::fs::write(&listing, format!("ops@127.0.0.1:{} unreachable\nops@127.0.0.1:{port} hil-add\n", free_port()))
        .unwrap();
    let listing_arg = listing.display().to_string();
    let mut args = vec!["host", "add", "--file", &listing_arg, "--ssh-key", &key_arg, "--boot-url", &boot_url];
    args.extend(ssh_opts);
    let o = metalctl(&s, &args);
    assert!(!o.status.success() && text(&o).contains("unreachable: the join on 127.0.0.1 failed"), "{}", text(&o));
    assert!(text(&o).contains("1 of 2 machines did not join"), "{}", text(&o));
    let skipped = format!(
        "hil-add: already joined (node, identity generation {}); no enrolment token",
        added["identityGeneration"]
    );
    assert!(text(&o).contains(&skipped), "{}", text(&o));
    assert_eq!(host(&s, "hil-add")["joinedAt"], added["joinedAt"], "the guest kept its join");
    let tokens = s.events("host.enrolment.created");
    assert_eq!(tokens.iter().filter(|e| e["data"]["node"] == "hil-add").count(), 1, "{tokens:?}");

    // The offline bundle, carried over by hand and run there.
    let bundle = dir.path().join("metal-join.tar.gz");
    let bundle_arg = bundle.display().to_string();
    let o = metalctl(&s, &["host", "bundle", "--out", &bundle_arg, "--boot-url", &boot_url]);
    assert!(o.status.success(), "{}", text(&o));
    let token = dir.path().join("token");
    let token_arg = token.display().to_string();
    let o = metalctl(&s, &["host", "enrol", "hil-bundle", "--token-out", &token_arg]);
    assert!(o.status.success() && !text(&o).contains(std::fs::read_to_string(&token).unwrap().trim()), "{}", text(&o));
    let scp = Command::new("scp")
        .args(ssh_options(&key))
        .args(["-P", &port.to_string()])
        .arg(&bundle)
        .arg(&token)
        .arg("ops@127.0.0.1:")
        .output()
        .unwrap();
    assert!(scp.status.success(), "{}", text(&scp));
    // The same guest plays a second machine: its first identity goes.
    let reset = "sudo systemctl stop metal-agent && sudo rm -rf /etc/metal && tar xzf metal-join.tar.gz";
    let o = ssh(&key, port, reset);
    assert!(o.status.success(), "{}", text(&o));
    let o = ssh(&key, port, "sudo metal-join/install --join https://10.0.2.2:0 --token secret");
    assert!(!o.status.success() && text(&o).contains("never goes on a command line"), "{}", text(&o));
    let install = format!("sudo metal-join/install --join https://10.0.2.2:{} --token-file token", s.boot_port);
    let o = ssh(&key, port, &install);
    assert!(o.status.success() && text(&o).contains("metal-join: joined"), "{}", text(&o));
    let bundled = host(&s, "hil-bundle");
    assert_eq!((&bundled["state"], &bundled["role"]), (&"joined".into(), &"node".into()), "{bundled}");

    let _ = ssh(&key, port, &format!("echo {done} | sudo tee /dev/ttyS0"));
    let console = running.join().unwrap();
    assert!(console.finished, "{}", console.text);
}
