//! schemathesis (PyPI, installed by scripts/setup) against a running `metal-scheduler
//! serve`, with every check it has (`--checks all`) but ST302 (below), every operation but the console's
//! WebSocket (tested by api_console and lessee), a bounded number of examples from a fixed seed, and a
//! Redfish BMC emulator (sushy-tools with an AccountService) behind node n1, so the BMC
//! routes are exercised against a BMC. `tests/data/schemathesis.toml` says what is
//! configured and why. The routes that answer a lessee run again with a tenant member's
//! token. No failure is allowed.

use std::process::Command;

use metal_tests::emulators::{SUSHY_PASSWORD, Sushy};
use metal_tests::scheduler::Admin as _;
use metal_tests::served::ServedAdmin;
use serde_json::json;

const SCHEMATHESIS: &str = "/opt/metal-venv/bin/schemathesis";

#[test]
fn schemathesis_finds_nothing_with_every_check_on_every_operation() {
    let sushy = Sushy::start_with_accounts();
    let data = tempfile::tempdir().unwrap();
    let make = |boot: u16| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_metal-scheduler"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.path())
            .env("METAL_BOOT_LISTEN", format!("127.0.0.1:{boot}"));
        command
    };
    let s = ServedAdmin::start(make, data.path());
    for (id, mac) in [("n1", "52:54:00:00:0b:01"), ("n2", "52:54:00:00:0b:02")] {
        let (status, body) = s.call("POST", "/v1/nodes", Some(json!({"id": id, "bootMac": mac})));
        assert_eq!(status, 201, "{body}");
    }
    let bmc = json!({"protocol": "redfish", "address": sushy.endpoint, "username": "admin", "password": SUSHY_PASSWORD,
                     "tls": {"mode": "fingerprint", "value": sushy.pki.fingerprint}});
    let (status, body) = s.call("PUT", "/v1/nodes/n1/bmc", Some(bmc));
    assert_eq!(status, 200, "{body}");
    // A tenant, a pool and a profile named n1 too, so their {id} routes reach them; and a
    // tenant `doomed` for DELETE /v1/tenants/{id} (n1 must stay).
    let profile = json!({"id": "n1", "tenantId": "n1", "deployMode": "installer", "adminUser": "ops",
        "sshAuthorizedKeys": ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"],
        "installer": {"kind": "kickstart", "kernelUrl": "http://mirror.site-a/os/vmlinuz",
                      "initrdUrl": "http://mirror.site-a/os/initrd", "sourceUrl": "http://mirror.site-a/os/tree"}});
    for (path, body) in [
        ("/v1/tenants", json!({"id": "n1"})),
        ("/v1/tenants", json!({"id": "doomed"})),
        ("/v1/pools", json!({"id": "n1", "tenantId": "root", "siteId": "site-a", "class": "metal-dedicated"})),
        ("/v1/pools/n1/offers", json!({"tenantId": "n1"})),
        ("/v1/profiles", profile),
    ] {
        let (status, answer) = s.call("POST", path, Some(body));
        assert!((200..300).contains(&status), "{path}: {answer}");
    }

    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let summary = schemathesis(&s, &s.token, &[]);
    // Every operation of the document but the console (a WebSocket) was tested.
    let document: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(here.join("openapi.json")).unwrap()).unwrap();
    let operations: usize = document["paths"]
        .as_object()
        .unwrap()
        .iter()
        .filter(|(path, _)| *path != "/v1/nodes/{id}/console")
        .map(|(_, item)| item.as_object().unwrap().keys().filter(|k| *k != "parameters").count())
        .sum();
    assert!(
        summary.contains(&format!("Tested: {operations}")),
        "every operation but the console was tested:\n{summary}"
    );
    eprintln!("schemathesis:{summary}");

    // The routes that answer a lessee too, with a tenant member's token (n1 is not leased
    // to it: each answers its documented refusal, or an empty list).
    let (status, member) =
        s.call("POST", "/v1/credentials", Some(json!({"role": "tenant-member", "tenantId": "n1", "name": "lessee"})));
    assert_eq!(status, 201, "{member}");
    let lessee_routes = r"^/v1/(leases|nodes/\{id\}(/power|/reinstall|/rescue|/unrescue|/console/sessions)?)$";
    let summary = schemathesis(&s, member["token"].as_str().unwrap(), &["--include-path-regex", lessee_routes]);
    assert!(
        summary.contains("Tested: 9"),
        "GET /v1/leases, GET and PATCH /v1/nodes/{{id}}, GET and POST its power, POST its reinstall, rescue and \
         unrescue, its console sessions:\n{summary}"
    );
    eprintln!("schemathesis with a tenant token:{summary}");
}

/// Runs schemathesis with every check against `s` as `token`'s caller, with `filters`;
/// asserts it found nothing and returns its summary.
fn schemathesis(s: &ServedAdmin, token: &str, filters: &[&str]) -> String {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let report = tempfile::tempdir().unwrap();
    let out = Command::new(SCHEMATHESIS)
        .arg("--config-file")
        .arg(here.join("tests/data/schemathesis.toml"))
        .arg("run")
        .arg(here.join("openapi.json"))
        .args(["--url", &s.url, "--checks", "all", "--max-examples", "10", "--seed", "1", "--workers", "1"])
        // Every {id} is pinned (tests/data/schemathesis.toml), so the stateful phase's "created
        // resource not found" (ST302) looks a resource the server named (a credential, a
        // reservation) up under n1 or doomed by construction: a 404 there says nothing of the
        // API. Every other check, the stateful phase's too, still runs.
        .args(["--exclude-checks", "ensure_resource_availability"])
        .args(["--exclude-path", "/v1/nodes/{id}/console", "--request-timeout", "30", "--max-response-time", "30"])
        .args(filters)
        .args(["--warnings", "off", "--report-dir"])
        .arg(report.path())
        .current_dir(report.path())
        .env("NO_COLOR", "1")
        // The configuration's Authorization header reads the token from here, not from a
        // command line.
        .env("METAL_TOKEN", token)
        .output()
        .expect("schemathesis (scripts/setup installs it into /opt/metal-venv)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{text}\n{}\nthe service's log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.served.tail(60)
    );
    text.rsplit_once("SUMMARY").map_or(text.as_ref(), |(_, tail)| tail).to_owned()
}
