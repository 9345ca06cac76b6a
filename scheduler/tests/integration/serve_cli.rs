//! The main job as a user runs it: `metal-scheduler serve` on a fresh data directory starts,
//! answers, writes the first admin token (0600, never logged) and stops cleanly on SIGTERM.
//! With debug logging on, driving a BMC logs neither its password nor the master key.

use std::os::unix::fs::PermissionsExt as _;
use std::process::Command;
use std::time::Duration;

use metal_tests::served::Served;

#[test]
fn serve_starts_answers_and_shuts_down_cleanly() {
    const BMC_PASSWORD: &str = "viewpass"; // ipmi_sim's viewer
    let master_key = "c0ffee".repeat(10) + "c0ff";
    let sim = metal_tests::emulators::IpmiSim::start();
    let dir = tempfile::tempdir().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"));
    command
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("METAL_LOG", "debug")
        .env("METAL_MASTER_KEY", &master_key);
    let served = Served::spawn(command);
    let address = served.address.clone();
    let log = served.log();
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
    served.terminate();
    let (status, all) = served.wait();
    assert!(status.success(), "{status:?}");
    assert!(all.iter().any(|l| l.contains("shut down cleanly")), "{all:?}");
    assert!(all.iter().any(|l| l.contains("\"power\"")), "the power request was logged: {all:?}");
    for secret in [BMC_PASSWORD, master_key.as_str(), token.as_str()] {
        assert!(!all.iter().any(|l| l.contains(secret)), "{secret:?} was logged");
    }
}

#[test]
fn serve_runs_the_boot_service_when_configured_and_names_a_bad_setting() {
    let dir = tempfile::tempdir().unwrap();
    // An address ramdisks cannot be sent to: refused at start, naming the setting.
    let out = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path())
        .env("METAL_BOOT_LISTEN", "0.0.0.0:0")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("boot-controller-url"), "{err}");

    let boot_port = std::cell::Cell::new(0);
    let served = Served::spawn_on_free_ports(|| {
        boot_port.set(metal_tests::emulators::free_tcp_port());
        let mut command = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path())
            .env("METAL_BOOT_LISTEN", format!("127.0.0.1:{}", boot_port.get()))
            .env("METAL_BOOT_TOKEN_TTL", "10m");
        command
    });
    let boot_port = boot_port.get();
    served.until_logged("boot listener (TLS) up", Duration::from_secs(30));
    let address = served.address.clone();
    let ca = std::fs::read_to_string(dir.path().join("ca/ca.crt")).unwrap();
    let http = reqwest::blocking::Client::new();
    let script = http.get(format!("http://{address}/boot/ipxe?mac=52:54:00:00:00:09")).send().unwrap();
    assert_eq!(script.status(), 404, "unknown MACs are not enrolled by default");
    // The TLS listener presents a certificate of the site CA for 127.0.0.1.
    let tls = reqwest::blocking::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .build()
        .unwrap();
    let join = tls
        .post(format!("https://127.0.0.1:{boot_port}/v1/boot/join"))
        .json(&serde_json::json!({"token": "guess", "publicKey": "AAAA"}))
        .send()
        .unwrap();
    assert_eq!(join.status(), 422, "{}", join.text().unwrap());
    served.terminate();
    assert!(served.wait().0.success());
}

#[test]
fn serve_help_names_every_setting_and_the_environment_only_ones() {
    let out = Command::new(env!("CARGO_BIN_EXE_metal-scheduler")).args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for setting in [
        "METAL_MASTER_KEY",
        "METAL_LOG",
        "database-url",
        "boot-listen",
        "image-catalog",
        "image-ca-file",
        "tls-names",
        "tls-cert-file",
        "tls-key-file",
        "allow-plain-http",
        "boot-http-listen",
    ] {
        assert!(help.contains(setting), "serve --help does not mention {setting}:\n{help}");
    }
}
