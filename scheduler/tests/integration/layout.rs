//! The seed's rule, kept by the compiler: the capacity side (`metal-capacity`: placement,
//! reservations, billing) and the metal side (`metal-machines`: nodes' workflows, the boot
//! service, BMCs, images, provisioning) are crates in one layer, so neither can import the
//! other; they talk only through work rows (`store::work`). The types (`metal-types`) and the
//! store (`metal-store`) sit below both; the API (`metal-api`), the one crate that composes
//! the two sides, sits above. This test reads `cargo metadata` and fails on a dependency that
//! does not point down the table of layers.

use std::collections::HashMap;

/// The workspace's crates by layer, lowest first: a crate may depend (normal or build
/// dependencies) only on crates of lower layers; dev-dependencies are free.
const LAYERS: [&[&str]; 11] = [
    &["metal-clock", "metal-protocol", "metal-switch"],
    &["metal-bmc", "metal-image", "metal-erase"],
    &["metal-firmware"],
    &["metal-boot"],
    &["metal-agent", "metal-types"],
    &["metal-store", "metalctl"],
    // The two sides: one layer, so neither may depend on the other.
    &["metal-capacity", "metal-machines"],
    &["metal-api"],
    &["metal-scheduler"],
    &["metal-tests"],
    &["metal-sim", "metal-fuzz"],
];

/// The resolved graph for this machine's platform (all platforms would need every
/// platform's crates downloaded).
fn metadata() -> serde_json::Value {
    let platform = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline", "--filter-platform", &platform])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo metadata: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn the_crates_depend_one_way() {
    let meta = metadata();
    let names: HashMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    let layer = |crate_name: &str| LAYERS.iter().position(|l| l.contains(&crate_name));
    let mut bad = Vec::new();
    for node in meta["resolve"]["nodes"].as_array().unwrap() {
        let member = names[node["id"].as_str().unwrap()];
        if !meta["workspace_members"].as_array().unwrap().contains(&node["id"]) {
            continue;
        }
        let Some(own) = layer(member) else {
            bad.push(format!("{member} is in no layer: add it to LAYERS"));
            continue;
        };
        for dep in node["deps"].as_array().unwrap() {
            let kinds = dep["dep_kinds"].as_array().unwrap();
            let dep_name = names[dep["pkg"].as_str().unwrap()];
            if kinds.iter().any(|k| k["kind"] != "dev") && layer(dep_name).is_some_and(|l| l >= own) {
                bad.push(format!("{member} depends on {dep_name}, which is not below it"));
            }
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
}

/// The crates `package` builds with as `cargo build -p PACKAGE` resolves them (normal and
/// build dependencies, its own features): `cargo metadata` unifies the workspace's features,
/// where metal-types' `axum` feature, which only metal-api turns on, would look like
/// everybody's.
fn closure(package: &str) -> (Vec<String>, String) {
    let platform = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "-p", package, "-e", "normal,build", "--prefix", "none", "-f", "{p}"])
        .args(["--locked", "--offline", "--target", &platform])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    (text.lines().filter_map(|l| l.split_whitespace().next()).map(str::to_owned).collect(), text)
}

#[test]
fn metalctl_builds_without_the_service_or_its_server_stack() {
    let (closure, text) = closure("metalctl");
    for server in ["metal-scheduler", "axum", "rusqlite", "postgres", "tokio-tungstenite"] {
        assert!(!closure.iter().any(|c| c == server), "metalctl depends on {server}:\n{text}");
    }
    assert!(closure.iter().any(|c| c == "metal-types") && closure.iter().any(|c| c == "reqwest"), "{text}");
}

#[test]
fn only_the_api_crate_serves_http() {
    // Every handler, the boot protocol's included, and the HTTP server live in metal-api; the
    // two sides and the crates below them build without axum. (tower-http and hyper-util come
    // with reqwest, the BMC client's HTTP, so they say nothing.)
    for package in ["metal-types", "metal-store", "metal-capacity", "metal-machines"] {
        let (closure, text) = closure(package);
        assert!(!closure.iter().any(|c| c == "axum"), "{package} depends on axum:\n{text}");
    }
    assert!(closure("metal-api").0.iter().any(|c| c == "axum"));
}
