//! Rounds of leases with faults drawn from a seed on one simulated site (SQLite, and in CI's
//! second pass PostgreSQL): every quarantined node is recovered, and after every round the
//! invariants hold (no double booking, no meter window missing or doubled, no node ready
//! without a complete teardown and an accepted wipe report, deadlines on every step). Then a
//! forged gap (a ready node's wipe reports deleted behind the API's back) is caught, so the
//! check is not one that cannot fail. Every second machine's BMC has sushy-tools' quirks (no
//! PowerCycle, Once kept as Continuous, the virtual CD under the system, power read back
//! late): their leases and teardowns end as the others' do. Every machine is cabled to the
//! simulated switch and the pool isolates tenants on it; one of the faults drawn is a switch
//! that refuses to move a port, and a ready machine found on a tenant VLAN is caught too.
//! Every machine has a TPM and the pool enforces measured boot: each teardown's erase boot
//! quotes it, and tampered firmware is one of the faults drawn.

use metal_sim::chaos;
use metal_sim::site::Options;
use metal_tests::scheduler::postgres_database;

#[test]
fn leases_with_random_faults_keep_every_invariant() {
    let database_url = postgres_database();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let options = Options {
            nodes: 6,
            speed: 120.0,
            seed: 11,
            database_url,
            sushy_every: 2,
            switch_program: Some(env!("CARGO_BIN_EXE_metal-sim").into()),
            tpm: true,
            ..Options::default()
        };
        let site = metal_sim::lease::prepared(&options).await.unwrap();
        let plan = chaos::Plan { rounds: 3, per_round: 3, fault_rate: 0.5, kill_every: None, seed: 11 };
        let counts = chaos::run(&site, &plan).await.unwrap();
        println!("{counts}");
        assert_eq!((counts.rounds, counts.leases), (3, 9), "{counts}");
        assert!(counts.faults > 0 && counts.quarantined == counts.faults, "{counts}");
        assert!(counts.invariants_checked > 50, "{counts}");

        let ready = site.admin.list("/v1/nodes?state=ready").await.unwrap();
        let mut leased = None;
        for id in ready.iter().filter_map(|n| n["id"].as_str()) {
            let runs = site.admin.get(&format!("/v1/nodes/{id}/teardowns")).await.unwrap();
            if !runs.as_array().unwrap().is_empty() {
                leased = Some(id.to_owned());
                break;
            }
        }
        let leased = leased.expect("a ready node that was leased and torn down");
        let switch = site.switch.as_ref().unwrap();
        let port = metal_sim::switch::port_of(&leased);
        assert!(switch.set(&port, 100));
        let caught = chaos::check(&site).await.unwrap_err().to_string();
        assert!(caught.contains(&leased) && caught.contains("VLAN 100, not provisioning"), "{caught}");
        switch.set(&port, metal_sim::switch::PROVISIONING_VLAN);
        let node = leased.clone();
        site.app()
            .unwrap()
            .store
            .write(move |tx| tx.execute("DELETE FROM wipe_reports WHERE node_id = $1", &[&node]))
            .await
            .unwrap();
        let caught = chaos::check(&site).await.unwrap_err().to_string();
        assert!(caught.contains(&leased) && caught.contains("wipe report"), "{caught}");
    });
}
