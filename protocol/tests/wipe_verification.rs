//! `verify_wipe_report`: one test per refusal, and bit flips anywhere are refused.

mod common;

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use common::{identity, site, t0, wipe_report};
use metal_protocol::wipe::WipeResult;
use metal_protocol::{Envelope, Role, SiteCa, WipeExpectation, WipeRefusal, WipeReport, verify_wipe_report};
use proptest::prelude::*;

const NODE: &str = "node-1";
const GENERATION: u64 = 4;

fn signed(ca: &SiteCa, report: &WipeReport, node: &str, generation: u64, role: Role) -> Envelope {
    Envelope::sign_json(WipeReport::PAYLOAD_TYPE, report, &identity(ca, node, generation, role)).unwrap()
}

fn check(ca: &SiteCa, envelope: &Envelope) -> Result<WipeReport, WipeRefusal> {
    let disks = vec![common::nvme_disk(), common::sata_disk()];
    let expect =
        WipeExpectation { node_id: NODE, generation: GENERATION, disks: &disks, at: t0() + Duration::from_secs(60) };
    verify_wipe_report(envelope, ca.certificate(), &expect)
}

#[test]
fn a_good_report_from_the_ramdisk_or_a_node_is_accepted() {
    let ca = site("site-a");
    for role in [Role::Ramdisk, Role::Node] {
        let report = wipe_report(NODE);
        let env = signed(&ca, &report, NODE, GENERATION, role);
        assert_eq!(check(&ca, &env).unwrap(), report);
        // And survives a JSON round trip of the envelope.
        let again = Envelope::from_json(&serde_json::to_vec(&env).unwrap()).unwrap();
        assert_eq!(check(&ca, &again).unwrap(), report);
    }
}

#[test]
fn refusal_bad_signature() {
    let ca = site("site-a");
    let mut env = signed(&ca, &wipe_report(NODE), NODE, GENERATION, Role::Ramdisk);
    // Swap in another node's well-formed report: the signature no longer covers it.
    let mut other = wipe_report(NODE);
    other.disks[1].result = WipeResult::Pass;
    other.policy = metal_protocol::wipe::WipePolicy::Clear;
    env.payload = B64.encode(metal_protocol::canonical::to_canonical_vec(&other).unwrap());
    assert_eq!(check(&ca, &env).unwrap_err(), WipeRefusal::BadSignature);
}

#[test]
fn refusal_foreign_ca() {
    let ca = site("site-a");
    let impostor = site("site-a");
    let env = signed(&impostor, &wipe_report(NODE), NODE, GENERATION, Role::Ramdisk);
    let err = check(&ca, &env).unwrap_err();
    assert!(matches!(err, WipeRefusal::ForeignCa(_)), "{err}");
    assert_eq!(err.code(), "foreign-ca");
}

#[test]
fn refusal_certificate_expired() {
    let ca = site("site-a");
    let env = signed(&ca, &wipe_report(NODE), NODE, GENERATION, Role::Ramdisk);
    let disks = vec![common::nvme_disk(), common::sata_disk()];
    let expect =
        WipeExpectation { node_id: NODE, generation: GENERATION, disks: &disks, at: t0() + Duration::from_secs(7200) };
    let err = verify_wipe_report(&env, ca.certificate(), &expect).unwrap_err();
    assert!(matches!(err, WipeRefusal::CertificateExpired(_)), "{err}");
}

#[test]
fn refusal_node_tenant_even_for_the_same_node_and_generation() {
    let ca = site("site-a");
    let env = signed(&ca, &wipe_report(NODE), NODE, GENERATION, Role::NodeTenant);
    assert_eq!(check(&ca, &env).unwrap_err(), WipeRefusal::RoleNotAllowed(Role::NodeTenant));
    let env = signed(&ca, &wipe_report(NODE), NODE, GENERATION, Role::Agent);
    assert_eq!(check(&ca, &env).unwrap_err(), WipeRefusal::RoleNotAllowed(Role::Agent));
}

#[test]
fn refusal_another_node() {
    let ca = site("site-a");
    // The certificate is another node's.
    let env = signed(&ca, &wipe_report(NODE), "node-2", GENERATION, Role::Ramdisk);
    assert_eq!(check(&ca, &env).unwrap_err(), WipeRefusal::WrongNode { expected: NODE.into(), found: "node-2".into() });
    // The certificate is ours but the report speaks of another node.
    let env = signed(&ca, &wipe_report("node-2"), NODE, GENERATION, Role::Ramdisk);
    assert_eq!(check(&ca, &env).unwrap_err(), WipeRefusal::WrongNode { expected: NODE.into(), found: "node-2".into() });
}

#[test]
fn refusal_stale_generation() {
    let ca = site("site-a");
    let env = signed(&ca, &wipe_report(NODE), NODE, GENERATION - 1, Role::Ramdisk);
    assert_eq!(
        check(&ca, &env).unwrap_err(),
        WipeRefusal::StaleGeneration { current: GENERATION, found: GENERATION - 1 }
    );
}

#[test]
fn refusal_missing_disk() {
    let ca = site("site-a");
    let mut report = wipe_report(NODE);
    report.disks.remove(1);
    let env = signed(&ca, &report, NODE, GENERATION, Role::Ramdisk);
    let err = check(&ca, &env).unwrap_err();
    assert!(matches!(&err, WipeRefusal::MissingDisk(d) if d.contains("SATA0002")), "{err}");
}

#[test]
fn refusal_one_erased_disk_cannot_answer_for_two() {
    let ca = site("site-a");
    let mut report = wipe_report(NODE);
    report.disks[1] = report.disks[0].clone();
    let env = signed(&ca, &report, NODE, GENERATION, Role::Ramdisk);
    assert!(matches!(check(&ca, &env).unwrap_err(), WipeRefusal::MissingDisk(_)));
}

#[test]
fn refusal_disk_failed_read_back() {
    let ca = site("site-a");
    let mut report = wipe_report(NODE);
    report.disks[0].result = WipeResult::Fail;
    report.disks[0].first_bad_offset = Some(4096 * 3 + 17);
    let env = signed(&ca, &report, NODE, GENERATION, Role::Ramdisk);
    let err = check(&ca, &env).unwrap_err();
    let disk = common::nvme_disk().label();
    assert_eq!(err, WipeRefusal::DiskFailed { disk: disk.clone(), first_bad_offset: Some(12305), failure: None });
    assert_eq!(err.to_string(), format!("disk {disk} did not pass read-back (first bad byte at offset 12305)"));
}

#[test]
fn refusal_disk_failed_before_its_read_back_says_why() {
    let ca = site("site-a");
    let mut report = wipe_report(NODE);
    report.disks[0].result = WipeResult::Fail;
    report.disks[0].verification = None;
    report.disks[0].failure = Some("could not erase: planting markers: No space left on device".into());
    let env = signed(&ca, &report, NODE, GENERATION, Role::Ramdisk);
    let err = check(&ca, &env).unwrap_err();
    let disk = common::nvme_disk().label();
    assert_eq!(
        err.to_string(),
        format!("disk {disk} failed: could not erase: planting markers: No space left on device")
    );
}

#[test]
fn refusal_a_pass_without_verification_is_not_a_pass() {
    let ca = site("site-a");
    let mut report = wipe_report(NODE);
    report.disks[1].verification = None;
    let env = signed(&ca, &report, NODE, GENERATION, Role::Ramdisk);
    assert!(matches!(check(&ca, &env).unwrap_err(), WipeRefusal::DiskFailed { .. }));
}

#[test]
fn refusal_malformed_envelopes() {
    let ca = site("site-a");
    let good = signed(&ca, &wipe_report(NODE), NODE, GENERATION, Role::Ramdisk);
    let mut wrong_type = good.clone();
    wrong_type.payload_type = "application/json".into();
    let mut no_sig = good.clone();
    no_sig.signatures.clear();
    let mut two_sigs = good.clone();
    two_sigs.signatures.push(good.signatures[0].clone());
    let mut no_cert = good.clone();
    no_cert.signatures[0].certificates.clear();
    let not_a_report = Envelope::sign(WipeReport::PAYLOAD_TYPE, b"{}", &identity(&ca, NODE, GENERATION, Role::Ramdisk));
    for env in [wrong_type, no_sig, two_sigs, no_cert, not_a_report] {
        let err = check(&ca, &env).unwrap_err();
        assert!(matches!(err, WipeRefusal::Malformed(_)), "{err}");
    }
}

fn flip(bytes: &mut [u8], bit: usize) {
    let bit = bit % (bytes.len() * 8);
    bytes[bit / 8] ^= 1 << (bit % 8);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn any_bit_flipped_anywhere_is_refused(part in 0usize..3, bit in any::<usize>()) {
        // One CA and envelope per case keeps cases independent; Ed25519 is fast enough.
        let ca = site("site-a");
        let mut env = signed(&ca, &wipe_report(NODE), NODE, GENERATION, Role::Ramdisk);
        match part {
            0 => {
                let mut payload = B64.decode(&env.payload).unwrap();
                flip(&mut payload, bit);
                env.payload = B64.encode(payload);
            }
            1 => {
                let mut sig = B64.decode(&env.signatures[0].sig).unwrap();
                flip(&mut sig, bit);
                env.signatures[0].sig = B64.encode(sig);
            }
            _ => {
                let mut cert = B64.decode(&env.signatures[0].certificates[0]).unwrap();
                flip(&mut cert, bit);
                env.signatures[0].certificates[0] = B64.encode(cert);
            }
        }
        prop_assert!(check(&ca, &env).is_err());
    }
}

#[test]
fn every_single_bit_of_the_certificate_and_signature_matters() {
    let ca = site("site-a");
    let env = signed(&ca, &wipe_report(NODE), NODE, GENERATION, Role::Ramdisk);
    let cert = B64.decode(&env.signatures[0].certificates[0]).unwrap();
    for bit in 0..cert.len() * 8 {
        let mut flipped = cert.clone();
        flip(&mut flipped, bit);
        let mut bad = env.clone();
        bad.signatures[0].certificates[0] = B64.encode(flipped);
        assert!(check(&ca, &bad).is_err(), "certificate bit {bit} flipped was accepted");
    }
    let sig = B64.decode(&env.signatures[0].sig).unwrap();
    for bit in 0..sig.len() * 8 {
        let mut flipped = sig.clone();
        flip(&mut flipped, bit);
        let mut bad = env.clone();
        bad.signatures[0].sig = B64.encode(flipped);
        assert_eq!(check(&ca, &bad).unwrap_err(), WipeRefusal::BadSignature, "signature bit {bit}");
    }
}
