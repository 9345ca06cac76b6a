//! The seed's rule, kept by the layout: the capacity side (`metal-service`'s `capacity`:
//! pools, reservations, placement, billing) and the metal side (its `metal`: nodes' workflows, the
//! boot service, BMCs, images, provisioning) never import each other; they talk only through
//! work rows (`store::work`). The types (`metal-types`: model, error, clock, duration, config,
//! secrets) and the store (`metal-store`, on the types alone) are crates below the service,
//! so the compiler keeps them from importing it; the API (`metal-api`) sits above the service.
//! Inside `metal-service` this test reads every source file of each side and fails on a path
//! that runs the wrong way; across crates it reads `cargo metadata` and fails on a dependency
//! that points up the table of layers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The first path segment after every `crate::` (each item of a `crate::{...}` group too),
/// outside line comments.
fn crate_paths(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let mut found = Vec::new();
    let ident = |s: &str| s.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect::<String>();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && !c.is_whitespace() => {
                        found.push(ident(&group[j..]));
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            found.push(ident(rest));
        }
    }
    found
}

/// Files under `service/src/` at `places` (folders or files) with a `crate::` path whose first
/// segment `allowed` rejects.
fn violations(places: &[&str], allowed: impl Fn(&str) -> bool) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("service/src");
    let mut files = Vec::new();
    for place in places {
        let path = src.join(place);
        if path.is_dir() {
            sources(&path, &mut files);
        } else {
            assert!(path.is_file(), "no source {}", path.display());
            files.push(path);
        }
    }
    let mut bad = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let relative = file.strip_prefix(&src).unwrap().display().to_string();
        let mut wrong: Vec<String> = crate_paths(&text).into_iter().filter(|p| !allowed(p)).collect();
        wrong.extend(super_paths(&text).into_iter().filter(|p| !allowed(p)));
        wrong.sort();
        wrong.dedup();
        if !wrong.is_empty() {
            bad.push(format!("{relative} ({})", wrong.join(", ")));
        }
    }
    bad
}

/// The module named after every `super::super::` (from a file one folder down, a module at
/// the crate root).
fn super_paths(text: &str) -> Vec<String> {
    text.match_indices("super::super::")
        .map(|(i, _)| {
            text[i + "super::super::".len()..].chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
        })
        .collect()
}

#[test]
fn the_capacity_side_never_imports_the_metal_side() {
    let bad = violations(&["capacity"], |p| p != "metal");
    assert!(bad.is_empty(), "capacity files that import metal: {bad:?}");
}

#[test]
fn the_metal_side_never_imports_the_capacity_side() {
    let bad = violations(&["metal"], |p| p != "capacity");
    assert!(bad.is_empty(), "metal files that import capacity: {bad:?}");
}

/// The workspace's crates by layer, lowest first: a crate may depend (normal or build
/// dependencies) only on crates of lower layers; dev-dependencies are free.
const LAYERS: [&[&str]; 11] = [
    &["metal-clock", "metal-protocol", "metal-switch"],
    &["metal-bmc", "metal-image", "metal-erase"],
    &["metal-firmware"],
    &["metal-boot"],
    &["metal-agent", "metal-types"],
    &["metal-store", "metalctl"],
    &["metal-service"],
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

#[test]
fn metalctl_builds_without_the_service_or_its_server_stack() {
    // `cargo tree -p` resolves features as `cargo build -p metalctl` does (cargo metadata
    // unifies the workspace's: there metal-types' `axum` feature, which only the service
    // turns on, would look like metalctl's).
    let platform = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let out = std::process::Command::new(env!("CARGO"))
        .args(["tree", "-p", "metalctl", "-e", "normal,build", "--prefix", "none", "-f", "{p}"])
        .args(["--locked", "--offline", "--target", &platform])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(out.status.success(), "cargo tree: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let closure: Vec<&str> = text.lines().filter_map(|l| l.split_whitespace().next()).collect();
    for server in ["metal-scheduler", "axum", "rusqlite", "postgres", "tokio-tungstenite"] {
        assert!(!closure.contains(&server), "metalctl depends on {server}:\n{text}");
    }
    assert!(closure.contains(&"metal-types") && closure.contains(&"reqwest"), "{text}");
}

#[test]
fn the_scan_finds_paths_in_use_groups_and_expressions() {
    let text = "use crate::{model::x, metal::y};\n// crate::capacity in a comment\nlet z = crate::capacity::f();";
    assert_eq!(crate_paths(text), ["model", "metal", "capacity"]);
    assert_eq!(super_paths("use super::super::app::App;"), ["app"]);
}
