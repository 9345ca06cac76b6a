//! The scheduler's Redfish sessions against a BMC with few session slots (the simulated
//! BMC keeps eight, as small BMCs do): every call on a node's BMC shares one kept session,
//! a rotated password opens one new session and gives the old one back, a session the BMC
//! forgot (it restarted) is opened again on the next call, a call that fails drops the
//! kept connection (its logout, sent to a BMC that is still failing, may be lost: a real
//! BMC's session timeout ends such a session), and a BMC row set anew is never read
//! through the old connection.

use std::time::Duration;

use metal_sim::fault::Fault;
use metal_sim::redfish::SESSION_SLOTS;
use metal_sim::site::{Options, Site};

#[test]
fn every_call_on_a_bmc_shares_one_session_and_a_dropped_one_is_given_back() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let site = Site::start(&Options { nodes: 2, speed: 60.0, ..Options::default() }).await.unwrap();
        assert_eq!(site.commission().await.unwrap(), Vec::<String>::new());
        let node = metal_sim::site::node_id(1);
        let machine = site.machine(&node).unwrap().clone();
        let open = || machine.state().sessions.len();
        let opened = || machine.state().sessions_opened;
        // Commissioning's calls left at most the kept session open (its proofs logged out).
        site.until("the commission's sessions given back", Duration::from_secs(10), || async { Ok(open() <= 1) })
            .await
            .unwrap();

        let readings = format!("/v1/nodes/{node}/bmc/readings");
        let before = opened();
        for _ in 0..3 * SESSION_SLOTS {
            site.admin.get(&readings).await.unwrap();
            site.admin.get(&format!("/v1/nodes/{node}/power")).await.unwrap();
        }
        assert!(opened() - before <= 1, "{} sessions for one BMC's calls", opened() - before);
        assert_eq!(open(), 1, "one session kept open");

        // A rotation proves the new password with a session of its own and logs it out; the
        // next call opens one with the new password and the old kept one is given back.
        let password = "rotated-by-the-session-test-4f1c9e";
        site.admin
            .post(&format!("/v1/nodes/{node}/bmc/rotate"), serde_json::json!({"password": password}))
            .await
            .unwrap();
        assert_eq!(machine.state().bmc_password, password);
        let before = opened();
        site.admin.get(&readings).await.unwrap();
        assert_eq!(opened() - before, 1, "a new session for the new password");
        site.until("the old session given back", Duration::from_secs(10), || async { Ok(open() == 1) }).await.unwrap();

        // The BMC restarts and forgets its sessions: the next call logs in again by itself.
        machine.state().sessions.clear();
        site.admin.get(&readings).await.unwrap();
        assert_eq!(open(), 1, "the kept connection opened a new session");

        // A call that fails drops the kept connection; the next one connects again.
        machine.faults.set(Fault::BmcUnavailable, true);
        site.admin.get(&readings).await.unwrap_err();
        machine.faults.set(Fault::BmcUnavailable, false);
        let before = opened();
        site.admin.get(&readings).await.unwrap();
        assert_eq!(opened() - before, 1, "the failed connection was dropped and a new one opened");

        // The node's BMC row is set to another machine's BMC: the kept connection is not
        // used for it (its address, like its TLS trust and user, is part of what it was
        // opened with), and the reading is the other machine's.
        let other = metal_sim::site::node_id(2);
        let other_bmc = site.admin.get(&format!("/v1/nodes/{other}/bmc")).await.unwrap();
        let serial = |id: &str| site.machine(id).unwrap().hardware.serial.clone();
        let reads = async || site.admin.get(&readings).await.unwrap()["identity"].to_string();
        assert!(reads().await.contains(&serial(&node)), "the node's own machine first");
        // The same password on both, so the address alone tells the connections apart.
        let password = machine.state().bmc_password.clone();
        site.machine(&other).unwrap().state().bmc_password = password.clone();
        let spec = serde_json::json!({"protocol": "redfish", "address": other_bmc["address"], "username": other_bmc["username"], "password": password});
        site.admin.call("PUT", &format!("/v1/nodes/{node}/bmc"), &spec).await.unwrap();
        let read = reads().await;
        assert!(read.contains(&serial(&other)) && !read.contains(&serial(&node)), "read through the new row's BMC: {read}");
    });
}
