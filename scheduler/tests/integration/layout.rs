//! The seed's rule, kept by the layout: the capacity side (`src/capacity`: pools,
//! reservations, placement, billing) and the metal side (`src/metal`: nodes' workflows, the
//! boot service, BMCs, images, provisioning) never import each other; they talk only through
//! work rows (`store::work`). Shared model types, the store and the service shell sit below
//! or above both: the types (model/, error, clock, duration, config, secrets) import only
//! each other, and the store only the types. This test reads every source file of each place
//! and fails on a path that runs the wrong way.

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

/// Files under `src/` at `places` (folders or files) with a `crate::` path whose first
/// segment `allowed` rejects.
fn violations(places: &[&str], allowed: impl Fn(&str) -> bool) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
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

/// The types every layer may use: the domain model, the one error, clock, durations,
/// configuration and secrets.
const TYPES: [&str; 6] = ["model", "error", "clock", "duration", "config", "secrets"];

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

#[test]
fn the_types_import_only_the_types() {
    let places = ["model", "error.rs", "clock.rs", "duration.rs", "config.rs", "secrets.rs"];
    let bad = violations(&places, |p| TYPES.contains(&p));
    assert!(bad.is_empty(), "type files that import what sits above them: {bad:?}");
}

#[test]
fn the_store_imports_only_the_types_and_itself() {
    let bad = violations(&["store"], |p| p == "store" || TYPES.contains(&p));
    assert!(bad.is_empty(), "store files that import what sits above them: {bad:?}");
}

#[test]
fn the_scan_finds_paths_in_use_groups_and_expressions() {
    let text = "use crate::{model::x, metal::y};\n// crate::capacity in a comment\nlet z = crate::capacity::f();";
    assert_eq!(crate_paths(text), ["model", "metal", "capacity"]);
    assert_eq!(super_paths("use super::super::app::App;"), ["app"]);
}
