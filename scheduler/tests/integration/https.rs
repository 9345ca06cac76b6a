//! The API over HTTPS, checked with OpenSSL as well as with `metalctl`: a certificate the
//! site CA issues for the configured names, or an operator's own chain and key; `metalctl`
//! trusting a CA file or the site CA's fingerprint and nothing else; plain HTTP refused
//! beyond loopback on both sides unless said on purpose; and the firmware's routes alone on
//! a plain-HTTP listener for PXE.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use metal_tests::served::Served;

fn serve(data: &Path, env: &[(&str, &str)]) -> Served {
    let mut command = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"));
    command.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data);
    command.envs(env.iter().copied());
    Served::spawn(command)
}

fn metalctl(home: &Path, args: &[&str]) -> Output {
    Command::new(metal_tests::bins::metalctl())
        .args(args)
        .env("HOME", home)
        .env_remove("METAL_URL")
        .env_remove("METAL_TOKEN")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

/// `openssl s_client` against `address`, verifying the chain against `ca_file` and the IP
/// 127.0.0.1: what it says about the verification.
fn openssl_verdict(address: &str, ca_file: &Path) -> String {
    let out = Command::new("openssl")
        .args(["s_client", "-connect", address, "-verify_return_error", "-verify_ip", "127.0.0.1", "-CAfile"])
        .arg(ca_file)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    text(&out)
}

#[test]
fn the_site_ca_certifies_the_api_and_metalctl_trusts_only_what_it_is_told() {
    let (data, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let served = serve(data.path(), &[("METAL_TLS_NAMES", "127.0.0.1, localhost")]);
    assert!(served.log().iter().any(|l| l.contains("\"scheme\":\"https\"")), "{}", served.tail(5));
    let ca = data.path().join("ca/ca.crt");
    let verdict = openssl_verdict(&served.address, &ca);
    assert!(verdict.contains("Verify return code: 0 (ok)"), "OpenSSL does not verify the API: {verdict}");

    let token_file = data.path().join("admin.token");
    let https = format!("https://{}", served.address);
    let base = ["--url", https.as_str(), "--token-file", token_file.to_str().unwrap()];
    let run = |extra: &[&str]| metalctl(home.path(), &[&base[..], extra].concat());
    let o = run(&["--ca-file", ca.to_str().unwrap(), "node", "list"]);
    assert!(o.status.success() && text(&o).starts_with("ID"), "{}", text(&o));
    let fingerprint =
        metal_machines::ca_files::load(&data.path().join("ca")).unwrap().certificate().fingerprint_sha256();
    let o = run(&["--ca-fingerprint", &fingerprint, "node", "list"]);
    assert!(o.status.success(), "{}", text(&o));
    // The serial console's WebSocket goes over the same TLS, trusting the same CA: the
    // handshake completes and the API's own refusal comes back (no node n9 here).
    let o = run(&["--ca-fingerprint", &fingerprint, "lease", "console", "n9"]);
    assert!(!o.status.success() && text(&o).contains("NOT_FOUND: node n9"), "{}", text(&o));
    let o = run(&["--ca-fingerprint", &"ab".repeat(32), "lease", "console", "n9"]);
    assert!(!o.status.success() && text(&o).contains("does not include the pinned CA"), "{}", text(&o));

    // Trust nothing it was not told to: neither the public roots nor another CA.
    let o = run(&["node", "list"]);
    assert!(!o.status.success() && text(&o).contains("UnknownIssuer"), "{}", text(&o));
    let o = run(&["--ca-fingerprint", &"ab".repeat(32), "node", "list"]);
    assert!(!o.status.success() && text(&o).contains("does not include the pinned CA"), "{}", text(&o));
    // The token is not sent in clear to the HTTPS port.
    let plain = reqwest::blocking::Client::new().get(format!("http://{}/healthz", served.address)).send();
    assert!(plain.is_err() || !plain.unwrap().status().is_success(), "plain HTTP answered on the HTTPS port");
}

#[test]
fn an_operators_certificate_files_are_served_and_a_key_of_another_is_refused() {
    let (data, home, pki_dir) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let pki = metal_tests::emulators::pki(pki_dir.path(), "api");
    let other = metal_tests::emulators::pki(pki_dir.path(), "other");
    let mismatched = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .env("METAL_TLS_CERT_FILE", &pki.cert)
        .env("METAL_TLS_KEY_FILE", &other.key)
        .output()
        .unwrap();
    let err = text(&mismatched);
    assert!(!mismatched.status.success() && err.contains("is not the key of tls-cert-file"), "{err}");

    let (cert, key) = (pki.cert.to_str().unwrap(), pki.key.to_str().unwrap());
    let served = serve(data.path(), &[("METAL_TLS_CERT_FILE", cert), ("METAL_TLS_KEY_FILE", key)]);
    let ca = pki_dir.path().join("api-ca.pem");
    let verdict = openssl_verdict(&served.address, &ca);
    assert!(verdict.contains("Verify return code: 0 (ok)"), "{verdict}");
    std::fs::create_dir_all(home.path().join(".config/metal")).unwrap();
    let config = format!(
        "url = \"https://{}\"\ntoken-file = \"{}\"\nca-file = \"{}\"\n",
        served.address,
        data.path().join("admin.token").display(),
        ca.display()
    );
    std::fs::write(home.path().join(".config/metal/metalctl.toml"), config).unwrap();
    let o = metalctl(home.path(), &["node", "enrol", "n1"]);
    assert!(o.status.success(), "{}", text(&o));
    let wrong = pki_dir.path().join("other-ca.pem");
    let o = metalctl(home.path(), &["--ca-file", wrong.to_str().unwrap(), "node", "list"]);
    assert!(!o.status.success() && text(&o).contains("UnknownIssuer"), "{}", text(&o));
}

#[test]
fn plain_http_beyond_loopback_is_refused_on_both_sides_unless_said_on_purpose() {
    let (data, home) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let refused = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"))
        .args(["serve", "--listen", "0.0.0.0:0", "--data-dir"])
        .arg(data.path())
        .output()
        .unwrap();
    let err = text(&refused);
    assert!(!refused.status.success(), "{err}");
    assert!(err.contains("0.0.0.0:0 is not a loopback address") && err.contains("allow-plain-http"), "{err}");
    assert!(!data.path().join("admin.token").exists(), "refused before anything was created");

    let mut command = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"));
    command.args(["serve", "--listen", "0.0.0.0:0", "--data-dir"]).arg(data.path());
    command.env("METAL_ALLOW_PLAIN_HTTP", "true");
    let served = Served::spawn(command);
    served.terminate();
    assert!(served.wait().0.success());

    std::fs::write(home.path().join("token"), "secret-token").unwrap();
    let token = home.path().join("token");
    let o = metalctl(
        home.path(),
        &["--url", "http://10.255.0.1:7450", "--token-file", token.to_str().unwrap(), "node", "list"],
    );
    let err = text(&o);
    assert!(
        !o.status.success() && err.contains("refusing to send the bearer token") && err.contains("allow-plain-http"),
        "{err}"
    );
}

#[test]
fn the_firmware_listener_serves_only_the_boot_routes_in_plain_http() {
    let data = tempfile::tempdir().unwrap();
    let firmware = std::cell::Cell::new(0);
    let served = Served::spawn_on_free_ports(|| {
        let (boot, plain) = (metal_tests::emulators::free_tcp_port(), metal_tests::emulators::free_tcp_port());
        firmware.set(plain);
        let mut command = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"));
        command.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"]).arg(data.path());
        command.env("METAL_TLS_NAMES", "127.0.0.1").env("METAL_BOOT_AUTO_ENROL", "true");
        command.env("METAL_BOOT_LISTEN", format!("127.0.0.1:{boot}"));
        command.env("METAL_BOOT_HTTP_LISTEN", format!("127.0.0.1:{plain}"));
        command
    });
    let firmware = firmware.get();
    served.until_logged("firmware routes (plain HTTP) up", Duration::from_secs(30));
    let http = reqwest::blocking::Client::new();
    let base = format!("http://127.0.0.1:{firmware}");
    let script = http.get(format!("{base}/boot/ipxe?mac=52:54:00:00:00:42")).send().unwrap();
    assert_eq!(script.status(), 200);
    let script = script.text().unwrap();
    assert!(
        script.starts_with("#!ipxe") && script.contains("kernel --name vmlinuz /boot/files/vmlinuz?token="),
        "{script}"
    );
    let token = std::fs::read_to_string(data.path().join("admin.token")).unwrap();
    let api = http.get(format!("{base}/v1/nodes")).bearer_auth(token.trim()).send().unwrap();
    assert_eq!(api.status(), 404, "the API is not on the firmware listener");
    assert_eq!(http.get(format!("{base}/healthz")).send().unwrap().text().unwrap(), "ok\n");
}
