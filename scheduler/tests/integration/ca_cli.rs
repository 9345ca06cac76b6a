//! `metal-scheduler ca init | issue`, run as a user would: the real binary on real files.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use metal_protocol::identity::{certificates_from_pem, signing_key_from_pem};
use metal_protocol::{CaCertificate, Identity, Role};

fn scheduler(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_metal-scheduler")).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = scheduler(args);
    assert!(out.status.success(), "{args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn fails(args: &[&str]) -> String {
    let out = scheduler(args);
    assert!(!out.status.success(), "{args:?} should have failed");
    String::from_utf8(out.stderr).unwrap()
}

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn init_then_issue_gives_a_certificate_the_ca_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("ca");
    let d = dir.to_str().unwrap();
    let printed = ok(&["ca", "init", "--dir", d, "--site", "site-a"]);
    let ca = CaCertificate::from_pem(&std::fs::read_to_string(dir.join("ca.crt")).unwrap()).unwrap();
    assert!(printed.contains(&ca.fingerprint_sha256()), "fingerprint not printed: {printed}");
    assert_eq!(mode(&dir.join("ca.key")), 0o600);
    assert!(!printed.contains("PRIVATE KEY"));

    let prefix = tmp.path().join("n7");
    ok(&[
        "ca",
        "issue",
        "--dir",
        d,
        "--role",
        "ramdisk",
        "--node",
        "n7",
        "--generation",
        "3",
        "--out",
        prefix.to_str().unwrap(),
        "--valid-for",
        "1h",
    ]);
    let key_path = tmp.path().join("n7.key");
    assert_eq!(mode(&key_path), 0o600);
    let key = signing_key_from_pem(&std::fs::read_to_string(&key_path).unwrap()).unwrap();
    let chain = certificates_from_pem(&std::fs::read_to_string(tmp.path().join("n7.crt")).unwrap()).unwrap();
    assert_eq!(chain.len(), 2, "chain is the role certificate then the CA");
    assert_eq!(chain[1], ca.der());
    let verified = ca.verify(&chain[0], SystemTime::now()).unwrap();
    assert_eq!(
        verified.identity,
        Identity { site: "site-a".into(), node: "n7".into(), generation: 3, role: Role::Ramdisk }
    );
    assert_eq!(verified.public_key, key.verifying_key());
    // Short-lived as asked: invalid after an hour and a minute.
    assert!(ca.verify(&chain[0], SystemTime::now() + Duration::from_secs(3660)).is_err());
}

#[test]
fn an_existing_ca_or_identity_is_never_overwritten() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    ok(&["ca", "init", "--dir", d]);
    let before = std::fs::read(tmp.path().join("ca.key")).unwrap();
    assert!(fails(&["ca", "init", "--dir", d]).contains("already exists"));
    assert_eq!(std::fs::read(tmp.path().join("ca.key")).unwrap(), before);

    let prefix = tmp.path().join("id");
    let p = prefix.to_str().unwrap();
    ok(&["ca", "issue", "--dir", d, "--role", "node", "--node", "n1", "--generation", "1", "--out", p]);
    let err = fails(&["ca", "issue", "--dir", d, "--role", "node", "--node", "n1", "--generation", "1", "--out", p]);
    assert!(err.contains("refusing to overwrite"), "{err}");
}

#[test]
fn bad_arguments_get_errors_that_name_the_problem() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path().to_str().unwrap();
    let err = fails(&["ca", "issue", "--dir", d, "--role", "node", "--node", "n1", "--generation", "1", "--out", "x"]);
    assert!(err.contains("no site CA") && err.contains("ca init"), "{err}");
    ok(&["ca", "init", "--dir", d]);
    let err = fails(&["ca", "issue", "--dir", d, "--role", "root", "--node", "n1", "--generation", "1", "--out", "x"]);
    assert!(err.contains("unknown role") && err.contains("node-tenant"), "{err}");
    let err =
        fails(&["ca", "issue", "--dir", d, "--role", "node", "--node", "../etc", "--generation", "1", "--out", "x"]);
    assert!(err.contains("node id"), "{err}");
    let err = fails(&[
        "ca",
        "issue",
        "--dir",
        d,
        "--role",
        "node",
        "--node",
        "n1",
        "--generation",
        "1",
        "--out",
        "x",
        "--valid-for",
        "1w",
    ]);
    assert!(err.contains("use s, m, h or d"), "{err}");
    let err = fails(&["ca", "init", "--dir", tmp.path().join("other").to_str().unwrap(), "--site", "a/b"]);
    assert!(err.contains("site"), "{err}");
}
