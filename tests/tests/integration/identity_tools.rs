//! metal's identity material checked with OpenSSL, not only with metal's own code: every key
//! file metal writes loads with `openssl pkey`; a certificate never outlives its CA (and
//! OpenSSL agrees about the dates); a report signed after the site CA expired is refused,
//! as `openssl verify -attime` refuses the chain; a tampered payload is a bad signature,
//! never "malformed" (the signature is checked before the payload is parsed).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, SystemTime};

use metal_machines::ca_files::{self, IssueRequest};
use metal_protocol::identity::signing_key_pem;
use metal_protocol::{Envelope, Role, Signer, SigningKey, WipeReport};

const DAY: Duration = Duration::from_secs(86400);

fn openssl(args: &[&str]) -> (bool, String) {
    let out = Command::new("openssl").args(args).output().expect("openssl");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `openssl x509 -enddate` of a PEM file, as OpenSSL prints it.
fn end_date(file: &Path) -> String {
    let (ok, out) = openssl(&["x509", "-noout", "-enddate", "-in", path(file)]);
    assert!(ok, "{out}");
    out.trim().trim_start_matches("notAfter=").to_owned()
}

#[test]
fn every_key_file_metal_writes_loads_with_openssl_and_a_certificate_never_outlives_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let ca_dir = dir.path().join("ca");
    let ca = ca_files::init(&ca_dir, "site-a", DAY).unwrap();
    let request = IssueRequest { role: Role::Ramdisk, node: "n1", generation: 1, validity: 30 * DAY };
    let issued = ca_files::issue(&ca, &request, &dir.path().join("n1")).unwrap();
    for key in [ca_dir.join("ca.key"), issued.key.clone()] {
        let (ok, out) = openssl(&["pkey", "-in", path(&key), "-noout", "-text"]);
        assert!(ok && out.contains("ED25519 Private-Key"), "openssl cannot read {}: {out}", key.display());
    }
    // The 30-day request ends with the 1-day CA, to the second, by OpenSSL's reading.
    let leaf = dir.path().join("leaf.pem");
    std::fs::write(&leaf, std::fs::read_to_string(&issued.cert).unwrap()).unwrap();
    assert_eq!(end_date(&leaf), end_date(&ca_dir.join("ca.crt")));
    let (ok, out) = openssl(&["verify", "-CAfile", path(&ca_dir.join("ca.crt")), path(&leaf)]);
    assert!(ok, "{out}");
    // Keys written before (PKCS#8 v2, with the public key) still load.
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let v2 = ed25519_dalek::pkcs8::EncodePrivateKey::to_pkcs8_pem(&key, Default::default()).unwrap();
    let back = metal_protocol::identity::signing_key_from_pem(&v2).unwrap();
    assert_eq!(back.verifying_key(), key.verifying_key());
    let v1 = signing_key_pem(&key).unwrap();
    assert_eq!(metal_protocol::identity::signing_key_from_pem(&v1).unwrap().verifying_key(), key.verifying_key());
    // A CA that has expired issues nothing.
    let expired = metal_protocol::SiteCa::create("site-a", SystemTime::now() - 2 * DAY, DAY).unwrap();
    let refused = expired.issue(&key.verifying_key(), "n1", 1, Role::Node, SystemTime::now(), DAY).unwrap_err();
    assert!(refused.to_string().contains("the site CA expired"), "{refused}");
}

/// A golden wipe report about `node`, finished at `finished`, signed by `key` with `chain`.
fn signed_report(key: SigningKey, chain: Vec<Vec<u8>>, finished: SystemTime) -> (Envelope, WipeReport) {
    let mut report: WipeReport =
        serde_json::from_str(include_str!("../../../protocol/tests/golden/wipe-report.json")).unwrap();
    report.node_id = "n1".into();
    report.finished_at = finished.into();
    let envelope = Envelope::sign_json(WipeReport::PAYLOAD_TYPE, &report, &Signer::new(key, chain)).unwrap();
    (envelope, report)
}

#[test]
fn a_report_signed_after_the_site_ca_expired_is_refused_as_openssl_refuses_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let ca_dir = dir.path().join("ca");
    let ca = ca_files::init(&ca_dir, "site-a", DAY).unwrap();
    // A leaf that outlives its CA, made by OpenSSL from metal's CA key (metal's own issuer
    // never makes one).
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let key_file = dir.path().join("leaf.key");
    std::fs::write(&key_file, signing_key_pem(&key).unwrap().as_bytes()).unwrap();
    let ext = dir.path().join("ext.cnf");
    std::fs::write(
        &ext,
        "[v3]\nsubjectAltName=URI:spiffe://site-a/node/n1/gen/1/ramdisk\nbasicConstraints=critical,CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n",
    )
    .unwrap();
    let (csr, leaf) = (dir.path().join("leaf.csr"), dir.path().join("leaf.crt"));
    let (ok, out) =
        openssl(&["req", "-new", "-key", path(&key_file), "-subj", "/O=metal/CN=ramdisk n1", "-out", path(&csr)]);
    assert!(ok, "{out}");
    let (ok, out) = openssl(&[
        "x509",
        "-req",
        "-in",
        path(&csr),
        "-CA",
        path(&ca_dir.join("ca.crt")),
        "-CAkey",
        path(&ca_dir.join("ca.key")),
        "-days",
        "30",
        "-extfile",
        path(&ext),
        "-extensions",
        "v3",
        "-out",
        path(&leaf),
    ]);
    assert!(ok, "{out}");
    let leaf_der = metal_protocol::identity::certificates_from_pem(&std::fs::read_to_string(&leaf).unwrap()).unwrap();
    let chain = vec![leaf_der[0].clone(), ca.certificate().der().to_vec()];
    let three_days_on = SystemTime::now() + 3 * DAY;

    let (ok, out) = openssl(&[
        "verify",
        "-attime",
        &three_days_on.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs().to_string(),
        "-CAfile",
        path(&ca_dir.join("ca.crt")),
        path(&leaf),
    ]);
    assert!(!ok && out.contains("expired"), "OpenSSL refuses the chain three days on: {out}");
    let (envelope, _) = signed_report(key.clone(), chain.clone(), three_days_on);
    match metal_erase::report::verify_offline(&envelope, ca.certificate(), None) {
        Err(refusal) => {
            assert_eq!(refusal.code(), "certificate-expired", "{refusal}");
            assert!(refusal.to_string().contains("site CA"), "{refusal}");
        }
        Ok(_) => panic!("a report signed after the CA expired verified as valid"),
    }
    // Within the CA's life the same chain verifies.
    let (envelope, _) = signed_report(key.clone(), chain.clone(), SystemTime::now());
    metal_erase::report::verify_offline(&envelope, ca.certificate(), None).unwrap();

    // A tampered payload is a bad signature, whatever it now holds.
    let mut tampered = envelope.clone();
    use base64::Engine as _;
    tampered.payload = base64::engine::general_purpose::STANDARD.encode(b"{ not json");
    let refusal = metal_erase::report::verify_offline(&tampered, ca.certificate(), None).unwrap_err();
    assert_eq!(refusal.code(), "bad-signature", "{refusal}");
}
