//! Binaries of other packages for the tests that run them (a package's tests get
//! `CARGO_BIN_EXE_*` only for its own): `metalctl`, the one the workspace's test build
//! linked (the `metalctl` package's own tests make cargo build it), built again here when it
//! is missing or older than its sources (a test run of one package after an edit).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::SystemTime;

/// `target/<profile>/metalctl`, current with its sources.
pub fn metalctl() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        // A test runs as target/<profile>/deps/<name>-<hash>.
        let exe = std::env::current_exe().expect("the test's own path");
        let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
        let bin = profile_dir.join("metalctl");
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let sources = ["scheduler/metalctl", "scheduler/types"].map(|d| workspace.join(d));
        let built = modified(&bin);
        if built.is_none() || sources.iter().filter_map(|d| newest(d)).any(|t| Some(t) > built) {
            let mut cargo = Command::new("flock");
            cargo.arg(workspace.join("target/.metalctl.lock")).args([
                env!("CARGO"),
                "build",
                "--locked",
                "-p",
                "metalctl",
            ]);
            if profile_dir.ends_with("release") {
                cargo.arg("--release");
            }
            let status = cargo.current_dir(workspace).status().expect("flock and cargo build -p metalctl");
            assert!(status.success(), "cargo build -p metalctl failed");
        }
        bin
    })
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The newest modification time of any file under `dir`.
fn newest(dir: &Path) -> Option<SystemTime> {
    let mut latest = modified(dir);
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let time = if path.is_dir() { newest(&path) } else { modified(&path) };
        latest = latest.max(time);
    }
    latest
}
