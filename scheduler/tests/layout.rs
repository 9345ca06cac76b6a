//! The seed's rule, kept by the layout: the capacity side (`src/capacity`: pools,
//! reservations, placement, billing) and the metal side (`src/metal`: nodes' workflows, the
//! boot service, BMCs, images, provisioning) never import each other; they talk only through
//! work rows (`store::work`). Shared model types, the store and the service shell sit below
//! or above both. This test reads every source file of each side and fails on a path into
//! the other.

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

fn violations(side: &str, forbidden: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(side);
    let mut files = Vec::new();
    sources(&root, &mut files);
    assert!(!files.is_empty(), "no sources under {}", root.display());
    let mut bad = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let relative = file.strip_prefix(root.parent().unwrap()).unwrap().display().to_string();
        if crate_paths(&text).iter().any(|p| p == forbidden) || text.contains(&format!("super::super::{forbidden}")) {
            bad.push(relative);
        }
    }
    bad
}

#[test]
fn the_capacity_side_never_imports_the_metal_side() {
    let bad = violations("capacity", "metal");
    assert!(bad.is_empty(), "capacity files that import metal: {bad:?}");
}

#[test]
fn the_metal_side_never_imports_the_capacity_side() {
    let bad = violations("metal", "capacity");
    assert!(bad.is_empty(), "metal files that import capacity: {bad:?}");
}

#[test]
fn the_scan_finds_paths_in_use_groups_and_expressions() {
    let text = "use crate::{model::x, metal::y};\n// crate::capacity in a comment\nlet z = crate::capacity::f();";
    assert_eq!(crate_paths(text), ["model", "metal", "capacity"]);
}
