//! A mixed fleet (issue 36): every second machine of the simulated site is arm64
//! (Grace-class; its kernel and cpuinfo say so). Commissioning records each machine's
//! architecture from the real inventory code; dedicated-root leases of the lessee's amd64
//! image land only on x86_64 machines and, those taken, are refused with the arm64 ones
//! counted; a profile on an arm64 image deploys on an arm64 machine, and a lease asking for
//! aarch64 by name takes only arm64 machines.
//!
//! The simulation installs the process clock: one test per process.

use std::collections::BTreeMap;

use metal_sim::lease::{TENANT, bound, image_profile, lease, prepared};
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

        // A profile on an arm64 image: its lease deploys on an arm64 machine.
        image_profile(&site, "sim-os-arm64", "acme-arm", 1 << 20, Some("arm64")).await.unwrap();
        let reservation = site
            .admin
            .post(
                "/v1/reservations",
                json!({"tenantId": TENANT, "poolId": POOL, "devices": [{"class": "gpu", "count": 1}], "duration": "1d",
                       "binding": "node", "node": {"profileId": "acme-arm", "profileVersion": 1}}),
            )
            .await
            .unwrap();
        let id = reservation["id"].as_str().unwrap().to_owned();
        let (_, grace) = bound(&site, vec![id]).await.unwrap().remove(0);
        assert_eq!(arch[&grace], "aarch64", "the arm64 image's lease: {grace}");

        // Asked for by name, aarch64 takes the other arm64 machine; x86_64 finds none left.
        let ask = |architecture: &str| {
            json!({"tenantId": TENANT, "poolId": POOL, "devices": [{"class": "gpu", "count": 1}], "duration": "1d",
                   "architecture": architecture})
        };
        let reservation = site.admin.post("/v1/reservations", ask("aarch64")).await.unwrap();
        let mut arm = vec![grace, reservation["nodes"][0].as_str().unwrap().to_owned()];
        arm.sort();
        assert_eq!(arm, ["n002", "n004"], "{arm:?}");
        let refused = site.admin.post("/v1/reservations", ask("x86_64")).await.unwrap_err().to_string();
        assert!(refused.contains("no placement"), "{refused}");
    });
}
