//! A mixed fleet (issue 36): every second machine of the simulated site is arm64
//! (Grace-class; its kernel and cpuinfo say so). Commissioning records each machine's
//! architecture from the real inventory code; dedicated-root leases of the lessee's amd64
//! image land only on x86_64 machines and, those taken, are refused with the arm64 ones
//! counted; a lease asking for aarch64 takes only arm64 machines, and the reverse.
//!
//! The simulation installs the process clock: one test per process.

use std::collections::BTreeMap;

use metal_sim::lease::{TENANT, lease, prepared};
use metal_sim::site::{Options, POOL};
use serde_json::json;

#[test]
fn x86_and_arm64_reservations_land_only_on_machines_of_their_architecture() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let options = Options { nodes: 4, speed: 120.0, seed: 5, arm64_every: 2, ..Options::default() };
        let site = prepared(&options).await.unwrap();
        let nodes = site.admin.get("/v1/nodes").await.unwrap();
        let arch: BTreeMap<String, String> = nodes
            .as_array()
            .unwrap()
            .iter()
            .map(|n| (n["id"].as_str().unwrap().to_owned(), n["architecture"].as_str().unwrap_or("").to_owned()))
            .collect();
        let want: BTreeMap<String, String> =
            [("n001", "x86_64"), ("n002", "aarch64"), ("n003", "x86_64"), ("n004", "aarch64")]
                .map(|(n, a)| (n.to_owned(), a.to_owned()))
                .into();
        assert_eq!(arch, want, "commissioning records what each machine's kernel says");

        // The lessee's profile deploys an amd64 image: its leases take the x86_64 machines.
        let leased: Vec<String> = lease(&site, 2, "1d").await.unwrap().into_iter().map(|(_, n)| n).collect();
        assert!(leased.iter().all(|n| arch[n] == "x86_64"), "{leased:?} of {arch:?}");
        let refused = site
            .admin
            .post(
                "/v1/reservations",
                json!({"tenantId": TENANT, "poolId": POOL, "devices": [{"class": "gpu", "count": 1}], "duration": "1d",
                       "binding": "node", "node": {"profileId": metal_sim::lease::PROFILE, "profileVersion": 1}}),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(refused.contains("2 of another architecture"), "the arm64 machines are counted: {refused}");

        // Asked for by name, aarch64 takes the arm64 machines only, x86_64 none is left.
        let ask = |architecture: &str| {
            json!({"tenantId": TENANT, "poolId": POOL, "devices": [{"class": "gpu", "count": 1}], "duration": "1d",
                   "architecture": architecture})
        };
        let mut arm = Vec::new();
        for _ in 0..2 {
            let reservation = site.admin.post("/v1/reservations", ask("aarch64")).await.unwrap();
            arm.extend(reservation["nodes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_owned()));
        }
        arm.sort();
        assert_eq!(arm, ["n002", "n004"], "{arm:?}");
        let refused = site.admin.post("/v1/reservations", ask("x86_64")).await.unwrap_err().to_string();
        assert!(refused.contains("no placement"), "{refused}");
    });
}
