//! The OpenAPI document is generated from the code; the checked-in copy must match it.
//! After an intended API change: `UPDATE_OPENAPI=1 cargo test -p metal-scheduler --test openapi`.

#[test]
fn checked_in_openapi_matches_the_code() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi.json");
    let generated = metal_scheduler::api::openapi_json();
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).unwrap();
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == generated,
        "scheduler/openapi.json is stale: run UPDATE_OPENAPI=1 cargo test -p metal-scheduler --test openapi"
    );
    let doc: serde_json::Value = serde_json::from_str(&generated).unwrap();
    for path in ["/v1/nodes", "/v1/nodes/{id}/transitions", "/v1/events", "/v1/credentials"] {
        assert!(doc["paths"].get(path).is_some(), "{path} missing from the document");
    }
    assert!(doc["components"]["schemas"].get("Node").is_some());
}
