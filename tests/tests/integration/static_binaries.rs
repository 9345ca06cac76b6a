//! The ramdisk binaries are fully static: no program interpreter, and they run inside an
//! empty root that holds nothing but the binary. Built by `scripts/build-static`, for the
//! default target (musl) and for the forced gnu + crt-static fallback.

use std::path::{Path, PathBuf};
use std::process::Command;

use metal_tests::elf;

const BINARIES: [&str; 3] = ["metal-boot", "metal-erase", "metal-firmware"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn build(out: &Path, target: Option<&str>) -> String {
    let mut cmd = Command::new(workspace().join("scripts/build-static"));
    cmd.arg(out);
    match target {
        Some(t) => cmd.env("METAL_STATIC_TARGET", t),
        None => cmd.env_remove("METAL_STATIC_TARGET"),
    };
    let output = cmd.output().expect("run scripts/build-static");
    assert!(output.status.success(), "build-static failed:\n{}", String::from_utf8_lossy(&output.stderr));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let used = std::fs::read_to_string(out.join("TARGET")).unwrap().trim().to_owned();
    assert!(stdout.contains(&format!("build-static: target {used}")), "the target used is not printed:\n{stdout}");
    used
}

fn check_static_and_runs_in_empty_root(dir: &Path) {
    for name in BINARIES {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).unwrap();
        let info = elf::inspect(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(info.machine, elf::EM_X86_64, "{name} is not x86_64");
        assert!(!info.has_interpreter, "{name} has a program interpreter (PT_INTERP): not static");
        assert!(!info.needs_libraries, "{name} names shared libraries (DT_NEEDED): not static");

        let root = tempfile::tempdir().unwrap();
        std::fs::copy(&path, root.path().join(name)).unwrap();
        let output = Command::new("chroot")
            .arg(root.path())
            .arg(format!("/{name}"))
            .arg("--version")
            .output()
            .expect("chroot (the tests run as root)");
        assert!(
            output.status.success(),
            "{name} --version in an empty root failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let version = String::from_utf8_lossy(&output.stdout);
        assert_eq!(version.trim(), format!("{name} {}", env!("CARGO_PKG_VERSION")));
    }
}

#[test]
fn ramdisk_binaries_are_static_for_the_default_target() {
    let out = tempfile::tempdir().unwrap();
    let target = build(out.path(), None);
    assert_eq!(target, "x86_64-unknown-linux-musl", "this machine can fetch musl; the fallback should not be needed");
    check_static_and_runs_in_empty_root(out.path());
}

#[test]
fn ramdisk_binaries_are_static_with_the_gnu_fallback() {
    let out = tempfile::tempdir().unwrap();
    assert_eq!(build(out.path(), Some("x86_64-unknown-linux-gnu")), "x86_64-unknown-linux-gnu");
    check_static_and_runs_in_empty_root(out.path());
}
