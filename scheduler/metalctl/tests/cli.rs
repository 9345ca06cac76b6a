//! metalctl with no server behind it: what it says before any request succeeds (its help,
//! a missing token, a bad URL, a server that is not there). Against a real scheduler it is
//! tested in metal-scheduler's integration tests (`metalctl`, `https`, `secrets`, `readme`).

use std::process::{Command, Output};

fn metalctl(env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metalctl"));
    command.args(args).env_remove("METAL_URL").env_remove("METAL_TOKEN").env("METALCTL_CONFIG", "/nonexistent");
    command.envs(env.iter().copied()).output().unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_names_every_resource_and_says_tokens_never_go_on_the_command_line() {
    let out = metalctl(&[], &["--help"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let help = String::from_utf8_lossy(&out.stdout);
    for command in ["node", "bmc", "switch", "tenant", "pool", "reservation", "image", "profile", "host", "usage"] {
        assert!(help.lines().any(|l| l.trim_start().starts_with(command)), "no {command} in:\n{help}");
    }
    assert!(help.contains("Tokens never go on the command line"), "{help}");
}

#[test]
fn a_missing_token_a_bad_url_and_an_absent_server_are_each_named() {
    let out = metalctl(&[("METAL_URL", "http://127.0.0.1:1")], &["node", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("no token: pass --token-file or set METAL_TOKEN"), "{}", stderr(&out));

    let out = metalctl(&[("METAL_URL", "notaurl"), ("METAL_TOKEN", "t")], &["node", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("server URL \"notaurl\""), "{}", stderr(&out));

    let out = metalctl(&[("METAL_URL", "http://127.0.0.1:1"), ("METAL_TOKEN", "t")], &["node", "list"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("cannot reach http://127.0.0.1:1"), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains(": t\n") && !stderr(&out).contains("Bearer"),
        "the token stays out: {}",
        stderr(&out)
    );
}
