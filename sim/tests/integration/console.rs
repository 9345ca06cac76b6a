//! The operator console end to end, in headless Chromium (Debian's `chromium`, driven by
//! Playwright from console/e2e) against the real scheduler of a simulated site: sign-in, a
//! tenant seeing only its own, the live stream moving a node's state on the page, a power
//! action behind its confirmation reaching the Redfish BMC, wipe certificates accepted and
//! refused, a node's TPM quotes against its baseline (every machine has a TPM), the serial
//! console of a machine behind ipmi_sim in a terminal, accessibility
//! (axe-core) and narrow screens.
//!
//! The site is set up here: five machines, two leases of a day run to their end, one of
//! them on a disk that acknowledges its sanitize and keeps the data (a refused report, a
//! quarantined node), then a week-long lease left running, and one more node behind
//! ipmi_sim for the serial console. `METAL_SCREENSHOTS=DIR` also saves the main pages as PNGs there
//! (scripts/console-screenshots).

use std::path::Path;
use std::time::Duration;

use metal_sim::fault::Fault;
use metal_sim::lease::{TENANT, lease, reaches};
use metal_sim::site::Options;
use metal_tests::emulators::{IpmiSim, answer_on_serial_line};
use serde_json::json;

fn console_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../console")
}

#[test]
fn the_console_in_a_real_browser_against_a_simulated_site() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let options = Options { nodes: 5, speed: 120.0, seed: 11, tpm: true, ..Options::default() };
        let site = metal_sim::lease::prepared(&options).await.unwrap();
        let leased = lease(&site, 2, "1d").await.unwrap();
        let (clean, refused) = (leased[0].1.clone(), leased[1].1.clone());
        site.machine(&refused).unwrap().faults.set(Fault::IgnoreDiscard, true);
        site.clock.advance(Duration::from_secs(86_400));
        reaches(&site, &clean, "ready").await.unwrap();
        reaches(&site, &refused, "failed").await.unwrap();
        // A week-long lease that stays active: what the images page shows deployed.
        let active = lease(&site, 1, "7d").await.unwrap()[0].1.clone();
        let idle: Vec<String> = site
            .machines
            .iter()
            .map(|m| m.id.clone())
            .filter(|id| ![&clean, &refused, &active].contains(&id))
            .collect();

        let admin_token = std::fs::read_to_string(site.data_dir().join(metal_machines::app::ADMIN_TOKEN_FILE)).unwrap();
        let member = |tenant: &str| {
            let site = &site;
            let body = json!({"role": "tenant-member", "tenantId": tenant, "name": format!("{tenant} console test")});
            async move { site.admin.post("/v1/credentials", body).await.unwrap()["token"].as_str().unwrap().to_owned() }
        };
        let tenant_token = member(TENANT).await;
        site.admin.post("/v1/tenants", json!({"id": "globex"})).await.unwrap();
        let other_token = member("globex").await;

        // One machine behind ipmi_sim, whose Serial-over-LAN line this test plays.
        let ipmi = IpmiSim::start();
        answer_on_serial_line(ipmi.serial_port, b"hello", b"hi there\r\n").await;
        site.admin.post("/v1/nodes", json!({"id": "sol1"})).await.unwrap();
        let spec = json!({"protocol": "ipmi", "address": format!("127.0.0.1:{}", ipmi.port),
                          "username": "admin", "password": "password"});
        site.admin.call("PUT", "/v1/nodes/sol1/bmc", &spec).await.unwrap();

        let text = playwright(
            "console.spec.ts",
            &[
                ("METAL_URL", site.admin.base()),
                ("METAL_SIM_URL", &site.control_url),
                ("METAL_ADMIN_TOKEN", admin_token.trim()),
                ("METAL_TENANT_TOKEN", &tenant_token),
                ("METAL_OTHER_TOKEN", &other_token),
                ("METAL_TENANT", TENANT),
                ("METAL_CLEAN_NODE", &clean),
                ("METAL_REFUSED_NODE", &refused),
                ("METAL_LIVE_NODE", &idle[0]),
                ("METAL_POWER_NODE", &idle[1]),
                ("METAL_SOL_NODE", "sol1"),
                ("METAL_ACTIVE_NODE", &active),
            ],
        )
        .await;
        // Every test of the spec ran and passed: none skipped, none missing.
        assert!(spec_tests("console.spec.ts") >= 8, "{text}");
        // The browser never saw a secret in a URL: the tokens travel in headers only.
        for token in [admin_token.trim(), &tenant_token, &other_token] {
            assert!(!text.contains(token), "a token showed in the browser test's output");
        }
    });
}

/// The nodes page over a fleet of ten thousand (issue 35), driven by console/e2e/fleet.spec.ts:
/// interactive within 2 s of navigation, and a hundred node events refresh the rows they
/// name, one node each, with no fetch of the list. The simulated site runs two machines; the
/// other 9,998 nodes are imported records, which is all the page reads.
#[test]
fn the_nodes_page_stays_fast_over_ten_thousand_nodes() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let options = Options { nodes: 2, seed: 3, ..Options::default() };
        let site = metal_sim::site::Site::start(&options).await.unwrap();
        let records: Vec<serde_json::Value> = (0..9_998)
            .map(|i| json!({"id": format!("fleet-{i:05}"), "labels": {"rack": format!("r{:03}", i / 40)}}))
            .collect();
        site.admin.post("/v1/nodes/import", serde_json::Value::Array(records)).await.unwrap();
        assert_eq!(site.admin.list("/v1/nodes").await.unwrap().len(), 10_000);
        let admin_token = std::fs::read_to_string(site.data_dir().join(metal_machines::app::ADMIN_TOKEN_FILE)).unwrap();
        let text =
            playwright("fleet.spec.ts", &[("METAL_URL", site.admin.base()), ("METAL_ADMIN_TOKEN", admin_token.trim())])
                .await;
        assert!(spec_tests("fleet.spec.ts") >= 1, "{text}");
        assert!(!text.contains(admin_token.trim()), "the token showed in the browser test's output");
    });
}

/// Runs one spec of console/e2e in Playwright with `env`; its output, once every test of
/// the spec passed (none skipped, none missing).
async fn playwright(spec: &str, env: &[(&str, &str)]) -> String {
    let mut command = tokio::process::Command::new("npx");
    command.args(["--no-install", "playwright", "test", &format!("e2e/{spec}")]).current_dir(console_dir());
    for (name, value) in env {
        command.env(name, value);
    }
    command.kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(600), command.output())
        .await
        .expect("playwright ran past 10 minutes")
        .expect("npx playwright (scripts/setup installs it in console/)");
    let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(output.status.success(), "playwright failed:\n{text}");
    let tests = spec_tests(spec);
    assert!(text.contains(&format!("{tests} passed")) && !text.contains("skipped"), "{text}");
    text
}

/// How many tests a spec of console/e2e holds.
fn spec_tests(spec: &str) -> usize {
    std::fs::read_to_string(console_dir().join("e2e").join(spec)).unwrap().matches("\ntest(").count()
}
