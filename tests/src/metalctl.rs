//! metalctl as its users run it: a home whose configuration names the API and a token
//! file, and the binary run with that home.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A home under `dir` whose metalctl configuration points at `url` with `token` (in a file
/// of its own, as an operator keeps it).
pub fn home(dir: &Path, url: &str, token: &str) -> PathBuf {
    std::fs::create_dir_all(dir.join(".config/metal")).unwrap();
    let token_file = dir.join("token");
    std::fs::write(&token_file, token).unwrap();
    std::fs::write(
        dir.join(".config/metal/metalctl.toml"),
        format!("url = \"{url}\"\ntoken-file = \"{}\"\n", token_file.display()),
    )
    .unwrap();
    dir.to_owned()
}

/// Runs metalctl with `home`; its output (stdout, then stderr), which must be a success.
pub fn run(home: &Path, args: &[&str]) -> String {
    let out = Command::new(crate::bins::metalctl()).args(args).env("HOME", home).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "metalctl {args:?}: {text}");
    text
}
