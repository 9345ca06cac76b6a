//! Golden JSON for every wire type: a format change shows up as a diff in review.
//! Set `UPDATE_GOLDEN=1` to rewrite the files after an intended change.

mod common;

use std::path::PathBuf;

use serde::Serialize;
use serde::de::DeserializeOwned;

fn check<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(name: &str, value: &T) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(format!("{name}.json"));
    let mut json = serde_json::to_string_pretty(value).unwrap();
    json.push('\n');
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &json).unwrap();
    }
    let golden =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1)", path.display()));
    assert_eq!(json, golden, "{name}: serialization differs from {}", path.display());
    let parsed: T = serde_json::from_str(&golden).unwrap();
    assert_eq!(&parsed, value, "{name}: golden file does not parse back to the same value");
}

#[test]
fn inventory_report() {
    check("inventory-report", &common::inventory_report());
}

#[test]
fn deploy_plan() {
    let plan = common::deploy_plan();
    plan.validate().unwrap();
    check("deploy-plan", &plan);
}

#[test]
fn wipe_report() {
    check("wipe-report", &common::wipe_report("node-1"));
}

#[test]
fn firmware_report() {
    check("firmware-report", &common::firmware_report());
}

#[test]
fn boot_protocol() {
    let join =
        metal_protocol::boot::JoinRequest { token: "tok_0123456789abcdef".into(), public_key: "A".repeat(43) + "=" };
    check("join-request", &join);
    assert!(!join.to_string().contains("tok_"), "the token never shows");
    check(
        "join-response",
        &metal_protocol::boot::JoinResponse {
            node_id: "node-1".into(),
            generation: 3,
            certificate_chain: "-----BEGIN CERTIFICATE-----\n...\n-----END CERTIFICATE-----\n".into(),
            expires_at: time::macros::datetime!(2026-12-01 10:00 UTC),
        },
    );
    check(
        "report-receipt",
        &metal_protocol::boot::ReportReceipt { accepted: false, reason: Some("WIPE_DISK_MISSING".into()) },
    );
    check(
        "task-report",
        &metal_protocol::boot::TaskReport {
            node_id: "node-1".into(),
            task: "deploy".into(),
            ok: false,
            detail: "chunk 4 (bytes 4194304..5242880) fails its SHA-256".into(),
            finished_at: time::macros::datetime!(2026-12-01 10:00 UTC),
        },
    );
}

#[test]
fn unknown_fields_are_refused() {
    let mut value = serde_json::to_value(common::wipe_report("node-1")).unwrap();
    value["disks"][0]["erasedByMagic"] = true.into();
    let err = serde_json::from_value::<metal_protocol::WipeReport>(value).unwrap_err();
    assert!(err.to_string().contains("erasedByMagic"), "{err}");
}

#[test]
fn envelope() {
    // Ed25519 is deterministic: a fixed key and payload give a fixed envelope, so this pins
    // the canonical payload bytes, the PAE and the envelope JSON together.
    let key = ed25519_dalek::SigningKey::from_bytes(&[42u8; 32]);
    let signer = metal_protocol::Signer::new(key, vec![b"certificate DER".to_vec()]);
    let report = common::wipe_report("node-1");
    let env = metal_protocol::Envelope::sign_json(metal_protocol::WipeReport::PAYLOAD_TYPE, &report, &signer).unwrap();
    check("envelope", &env);
}
