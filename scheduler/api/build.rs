//! Embeds the operator console: the files `npm run build` leaves in console/dist (scripts/setup
//! runs it) become `ASSETS` in `$OUT_DIR/console_assets.rs`, which `api::console` serves. A
//! tree where the console was never built still compiles, and /console says how to build it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let console = manifest.join("../../console");
    let dist = console.join("dist");
    // Watch dist once it exists; until then the console directory, whose time changes when
    // dist appears (watching a missing path would rebuild the scheduler every time).
    let watched = if dist.is_dir() { &dist } else { &console };
    println!("cargo::rerun-if-changed={}", watched.display());
    let mut files = Vec::new();
    if dist.is_dir() {
        collect(&dist, &dist, &mut files);
    }
    files.sort();
    let mut source = String::from("/// The console's files: (path under /console/, contents).\n");
    source.push_str("pub const ASSETS: &[(&str, &[u8])] = &[\n");
    for (name, path) in &files {
        let _ = writeln!(source, "    ({name:?}, include_bytes!({:?})),", path.display().to_string());
    }
    source.push_str("];\n");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("console_assets.rs"), source).expect("writing console_assets.rs");
}

fn collect(root: &Path, dir: &Path, files: &mut Vec<(String, PathBuf)>) {
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect(root, &path, files);
        } else if let Ok(relative) = path.strip_prefix(root) {
            let name = relative.to_string_lossy().replace('\\', "/");
            let absolute = path.canonicalize().unwrap_or(path);
            files.push((name, absolute));
        }
    }
}
