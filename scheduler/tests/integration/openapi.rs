//! The OpenAPI document is generated from the code; the checked-in copy must match it.
//! After an intended API change: `UPDATE_OPENAPI=1 cargo test -p metal-scheduler --test integration openapi`.

#[test]
fn checked_in_openapi_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let generated = metal_api::openapi_json();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "scheduler/openapi.json is stale: run UPDATE_OPENAPI=1 cargo test -p metal-scheduler --test integration openapi"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    for path in ["/v1/nodes", "/v1/nodes/{id}/transitions", "/v1/events", "/v1/credentials"] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing from the document");
    }
    assert!(doc["components"]["schemas"].get("Node").is_some());
}

/// The document passes openapi-spec-validator (PyPI, installed by scripts/setup), and a BMC
/// body the server accepts validates against its `BmcSpec` schema under jsonschema (an
/// `allOf` of closed objects would refuse every body), while one with an unknown field does
/// not; the golden deploy plan validates against `DeployPlan`, a malformed one does not.
#[test]
fn the_document_passes_openapi_spec_validator_and_accepted_bodies_match_their_schemas() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let script = r##"
import json, sys
import jsonschema
from openapi_spec_validator import validate
from openapi_spec_validator.readers import read_from_filename
document, _ = read_from_filename(sys.argv[1])
validate(document)
schema = {"$ref": "#/components/schemas/BmcSpec", "components": document["components"]}
accepted = {"protocol": "redfish", "address": "https://10.0.0.5", "username": "root", "password": "p",
            "tls": {"mode": "fingerprint", "value": "ab" * 32}}
jsonschema.validate(accepted, schema)
try:
    jsonschema.validate(dict(accepted, surprise=1), schema)
    sys.exit("an unknown field passed the schema")
except jsonschema.ValidationError:
    pass
plan = json.load(open(sys.argv[2]))
jsonschema.validate(plan, {"$ref": "#/components/schemas/DeployPlan", "components": document["components"]})
try:
    jsonschema.validate(dict(plan, chunks=dict(plan["chunks"], sha256="abc")),
                        {"$ref": "#/components/schemas/DeployPlan", "components": document["components"]})
    sys.exit("a plan whose chunk digests are not a list passed the schema")
except jsonschema.ValidationError:
    pass
print("ok")
"##;
    let out = std::process::Command::new("/opt/metal-venv/bin/python3")
        .args(["-c", script])
        .arg(&path)
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../protocol/tests/golden/deploy-plan.json"))
        .output()
        .expect("scripts/setup installs openapi-spec-validator into /opt/metal-venv");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && text.contains("ok"), "{text}");
}
