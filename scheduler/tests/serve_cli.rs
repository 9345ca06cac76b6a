//! The main job as a user runs it: `metal-scheduler serve` on a fresh data directory starts,
//! answers, writes the first admin token (0600, never logged) and stops cleanly on SIGTERM.
//! With debug logging on, driving a BMC logs neither its password nor the master key.

use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Stdio};

#[test]
fn serve_starts_answers_and_shuts_down_cleanly() {
    const BMC_PASSWORD: &str = "viewpass"; // ipmi_sim's viewer
    let master_key = "c0ffee".repeat(10) + "c0ff";
    let sim = metal_tests::emulators::IpmiSim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("METAL_LOG", "debug")
        .env("METAL_MASTER_KEY", &master_key)
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
    let call = |method: reqwest::Method, path: &str, body: serde_json::Value| {
        let response =
            http.request(method, format!("http://{address}{path}")).bearer_auth(&token).json(&body).send().unwrap();
        assert!(response.status().is_success(), "{path}: {}", response.text().unwrap());
    };
    call(reqwest::Method::POST, "/v1/nodes", serde_json::json!({"id": "n1"}));
    let bmc = serde_json::json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", sim.port),
                                 "username": "viewer", "password": BMC_PASSWORD});
    call(reqwest::Method::PUT, "/v1/nodes/n1/bmc", bmc);
    call(reqwest::Method::POST, "/v1/nodes/n1/power", serde_json::json!({"action": "on"}));

    // SIGTERM: graceful shutdown.
    // SAFETY: kill(2) on our own child's pid with a valid signal number has no memory effects.
    let rc = unsafe { libc::kill(i32::try_from(child.id()).unwrap(), libc::SIGTERM) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    assert!(rest.iter().any(|l| l.contains("shut down cleanly")), "{rest:?}");
    let all: Vec<&String> = log.iter().chain(&rest).collect();
    assert!(all.iter().any(|l| l.contains("\"power\"")), "the power request was logged: {all:?}");
    for secret in [BMC_PASSWORD, master_key.as_str(), token.as_str()] {
        assert!(!all.iter().any(|l| l.contains(secret)), "{secret:?} was logged");
    }
}
