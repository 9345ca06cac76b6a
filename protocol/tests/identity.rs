//! Site CA, role certificates and their verification.

mod common;

use std::time::Duration;

use common::{site, t0};
use ed25519_dalek::SigningKey;
use metal_protocol::identity::{certificates_from_pem, signing_key_pem};
use metal_protocol::{CaCertificate, Identity, IdentityError, Role, SiteCa};

fn key() -> SigningKey {
    SigningKey::generate(&mut rand::rngs::OsRng)
}

#[test]
fn every_role_round_trips_through_a_certificate() {
    let ca = site("site-a");
    for (generation, role) in Role::ALL.into_iter().enumerate() {
        let generation = generation as u64 + 7;
        let k = key();
        let der = ca.issue(&k.verifying_key(), "node-42", generation, role, t0(), Duration::from_secs(600)).unwrap();
        let v = ca.certificate().verify(&der, t0() + Duration::from_secs(60)).unwrap();
        assert_eq!(v.identity, Identity { site: "site-a".into(), node: "node-42".into(), generation, role });
        assert_eq!(v.public_key, k.verifying_key());
    }
}

#[test]
fn ca_survives_a_pem_round_trip_and_keeps_issuing() {
    let ca = site("site-a");
    let cert_pem = ca.certificate().pem();
    let key_pem = ca.key_pem().unwrap();
    let loaded = SiteCa::from_pem(&cert_pem, &key_pem).unwrap();
    assert_eq!(loaded.certificate(), ca.certificate());
    let der = loaded.issue(&key().verifying_key(), "n1", 1, Role::Node, t0(), Duration::from_secs(60)).unwrap();
    // Verified by the original CA certificate: the reloaded CA is the same CA.
    CaCertificate::from_pem(&cert_pem).unwrap().verify(&der, t0()).unwrap();
    assert_eq!(ca.certificate().fingerprint_sha256().len(), 64);
}

#[test]
fn a_key_that_does_not_match_the_certificate_is_refused() {
    let ca = site("site-a");
    let other = site("site-a");
    let err = SiteCa::from_pem(&ca.certificate().pem(), &other.key_pem().unwrap()).unwrap_err();
    assert_eq!(err, IdentityError::Malformed("CA key does not match the CA certificate".into()));
}

#[test]
fn expired_and_not_yet_valid_certificates_are_refused() {
    let ca = site("site-a");
    let der = ca.issue(&key().verifying_key(), "n1", 1, Role::Ramdisk, t0(), Duration::from_secs(600)).unwrap();
    let late = ca.certificate().verify(&der, t0() + Duration::from_secs(601)).unwrap_err();
    assert!(matches!(late, IdentityError::Expired { .. }), "{late}");
    let early = ca.certificate().verify(&der, t0() - Duration::from_secs(1)).unwrap_err();
    assert!(matches!(early, IdentityError::NotYetValid { .. }), "{early}");
}

#[test]
fn a_certificate_of_another_site_ca_is_foreign() {
    let ours = site("site-a");
    // Same site name, different key: still not ours.
    let theirs = site("site-a");
    let der = theirs.issue(&key().verifying_key(), "n1", 1, Role::Node, t0(), Duration::from_secs(60)).unwrap();
    let err = ours.certificate().verify(&der, t0()).unwrap_err();
    assert!(matches!(err, IdentityError::ForeignCa(_)), "{err}");
    // Different site name: the issuer name differs.
    let elsewhere = site("site-b");
    let der = elsewhere.issue(&key().verifying_key(), "n1", 1, Role::Node, t0(), Duration::from_secs(60)).unwrap();
    assert!(matches!(ours.certificate().verify(&der, t0()), Err(IdentityError::ForeignCa(_))));
}

#[test]
fn the_ca_certificate_itself_is_not_a_role_certificate() {
    let ca = site("site-a");
    let err = ca.certificate().verify(ca.certificate().der(), t0()).unwrap_err();
    assert!(matches!(err, IdentityError::Malformed(_) | IdentityError::ForeignCa(_)), "{err}");
}

#[test]
fn malformed_input_is_named() {
    let ca = site("site-a");
    assert!(matches!(ca.certificate().verify(b"not a certificate", t0()), Err(IdentityError::Malformed(_))));
    assert!(matches!(CaCertificate::from_pem("nothing here"), Err(IdentityError::Malformed(_))));
    let mut der = ca.issue(&key().verifying_key(), "n1", 1, Role::Node, t0(), Duration::from_secs(60)).unwrap();
    der.push(0);
    assert!(matches!(ca.certificate().verify(&der, t0()), Err(IdentityError::Malformed(_))));
}

#[test]
fn names_and_uris_are_validated() {
    let ca = site("site-a");
    for bad in ["", "a/b", "-x", ".x", "a b", &"n".repeat(65)] {
        let err = ca.issue(&key().verifying_key(), bad, 1, Role::Node, t0(), Duration::from_secs(60)).unwrap_err();
        assert!(matches!(err, IdentityError::InvalidName(_)), "{bad:?}: {err}");
    }
    assert!(SiteCa::create("bad/site", t0(), Duration::from_secs(60)).is_err());
    let id = Identity::parse_uri("spiffe://s/node/n-1/gen/3/node-tenant").unwrap();
    assert_eq!((id.node.as_str(), id.generation, id.role), ("n-1", 3, Role::NodeTenant));
    assert_eq!(id.to_uri(), "spiffe://s/node/n-1/gen/3/node-tenant");
    for bad in [
        "spiffe://s/node/n/gen/03/node",
        "spiffe://s/node/n/gen/-1/node",
        "spiffe://s/node/n/gen/1/root",
        "spiffe://s/node/n/gen/1/node/extra",
        "https://s/node/n/gen/1/node",
        "spiffe://s/host/n/gen/1/node",
    ] {
        assert!(Identity::parse_uri(bad).is_err(), "{bad}");
    }
}

#[test]
fn pem_helpers_round_trip_keys_and_chains() {
    let ca = site("site-a");
    let k = key();
    let pem = signing_key_pem(&k).unwrap();
    assert_eq!(metal_protocol::identity::signing_key_from_pem(&pem).unwrap().to_bytes(), k.to_bytes());
    let leaf = ca.issue(&k.verifying_key(), "n1", 1, Role::Node, t0(), Duration::from_secs(60)).unwrap();
    let chain = format!("{}{}", metal_protocol::identity::pem_encode("CERTIFICATE", &leaf), ca.certificate().pem());
    assert_eq!(certificates_from_pem(&chain).unwrap(), vec![leaf, ca.certificate().der().to_vec()]);
}

#[test]
fn server_certificates_name_hosts_and_are_never_role_certificates() {
    let ca = site("site-a");
    let k = key();
    let names = vec!["127.0.0.1".to_owned(), "metal.site-a".to_owned()];
    let der = ca.issue_server(&k.verifying_key(), &names, t0(), Duration::from_secs(600)).unwrap();
    let (_, parsed) = x509_parser::parse_x509_certificate(&der).unwrap();
    let san = parsed.subject_alternative_name().unwrap().unwrap().value;
    let shown: Vec<String> = san.general_names.iter().map(|n| format!("{n}")).collect();
    assert_eq!(shown, ["IPAddress(7f:00:00:01)", "DNSName(metal.site-a)"]);
    // A server certificate carries no role: it never passes as a node's identity.
    assert!(ca.certificate().verify(&der, t0() + Duration::from_secs(60)).is_err());
    assert!(ca.issue_server(&k.verifying_key(), &[], t0(), Duration::from_secs(600)).is_err());
}
