//! The main job as a user runs it: `metal-scheduler serve` on a fresh data directory starts,
//! answers, writes the first admin token (0600, never logged) and stops cleanly on SIGTERM.

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Stdio};

#[test]
fn serve_starts_answers_and_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut log = Vec::new();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let address = loop {
        let line = lines.next().expect("the service exited before listening").unwrap();
        log.push(line.clone());
        let entry: serde_json::Value = serde_json::from_str(&line).expect("logs are JSON lines when not on a terminal");
        if entry["fields"]["message"] == "metal-scheduler listening" {
            break entry["fields"]["address"].as_str().unwrap().to_owned();
        }
    };
    let token_path = dir.path().join("admin.token");
    assert_eq!(std::fs::metadata(&token_path).unwrap().permissions().mode() & 0o777, 0o600);
    let token = std::fs::read_to_string(&token_path).unwrap().trim().to_owned();
    assert!(!log.iter().any(|l| l.contains(&token)), "the admin token was logged");

    let http = reqwest::blocking::Client::new();
    assert_eq!(http.get(format!("http://{address}/healthz")).send().unwrap().text().unwrap(), "ok\n");
    let nodes = http.get(format!("http://{address}/v1/nodes")).bearer_auth(&token).send().unwrap();
    assert_eq!(nodes.status(), 200);

    // SIGTERM: graceful shutdown.
    // SAFETY: kill(2) on our own child's pid with a valid signal number has no memory effects.
    let rc = unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("shut down cleanly")), "{rest:?}");
}
