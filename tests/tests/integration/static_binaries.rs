//! The ramdisk binaries are fully static: no program interpreter, and they run inside an
//! empty root that holds nothing but the binary. Built by `scripts/build-static`, for the
//! default target (musl), for the forced gnu + crt-static fallback, and for arm64
//! (`--arch aarch64`, run under qemu-aarch64's user mode, itself static, in that root).

use std::path::{Path, PathBuf};
use std::process::Command;

use metal_tests::elf;

const BINARIES: [&str; 3] = ["metal-boot", "metal-erase", "metal-firmware"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn build(out: &Path, arch: &str, target: Option<&str>) -> String {
    let mut cmd = Command::new(workspace().join("scripts/build-static"));
    cmd.args(["--arch", arch]).arg(out);
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

/// Where an executable of another architecture runs: QEMU's user mode, static itself.
const QEMU_AARCH64: &str = "/usr/bin/qemu-aarch64-static";

/// Checks each binary is static for `machine` and answers `--version` in an empty root (with
/// only QEMU's user mode beside it, for arm64).
fn check_static_and_runs_in_empty_root(dir: &Path, machine: u16) {
    for name in BINARIES {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).unwrap();
        let info = elf::inspect(&bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(info.machine, machine, "{name} is for machine {}, not {machine}", info.machine);
        assert!(!info.has_interpreter, "{name} has a program interpreter (PT_INTERP): not static");
        assert!(!info.needs_libraries, "{name} names shared libraries (DT_NEEDED): not static");

        let root = tempfile::tempdir().unwrap();
        std::fs::copy(&path, root.path().join(name)).unwrap();
        let mut command = Command::new("chroot");
        command.arg(root.path());
        if machine == elf::EM_AARCH64 {
            let qemu = elf::inspect(&std::fs::read(QEMU_AARCH64).expect("qemu-user-static (scripts/setup)")).unwrap();
            assert!(!qemu.has_interpreter && !qemu.needs_libraries, "{QEMU_AARCH64} is not static");
            std::fs::copy(QEMU_AARCH64, root.path().join("qemu-aarch64")).unwrap();
            command.arg("/qemu-aarch64");
        }
        let output = command.arg(format!("/{name}")).arg("--version").output().expect("chroot (the tests run as root)");
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
    let target = build(out.path(), "x86_64", None);
    assert_eq!(target, "x86_64-unknown-linux-musl", "this machine can fetch musl; the fallback should not be needed");
    check_static_and_runs_in_empty_root(out.path(), elf::EM_X86_64);
}

#[test]
fn ramdisk_binaries_are_static_for_arm64() {
    let out = tempfile::tempdir().unwrap();
    assert_eq!(build(out.path(), "aarch64", None), "aarch64-unknown-linux-musl");
    check_static_and_runs_in_empty_root(out.path(), elf::EM_AARCH64);
}

#[test]
fn ramdisk_binaries_are_static_with_the_gnu_fallback() {
    let out = tempfile::tempdir().unwrap();
    assert_eq!(build(out.path(), "x86_64", Some("x86_64-unknown-linux-gnu")), "x86_64-unknown-linux-gnu");
    check_static_and_runs_in_empty_root(out.path(), elf::EM_X86_64);
}
