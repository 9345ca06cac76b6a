//! The README's demo on a simulated site of three machines: two week-long dedicated-root
//! leases run from reservation to a clean return under new identity generations, one BMC's
//! refused rotation quarantines its machine and recover brings it back, the meter bills the
//! bound hours, and the wipe report verifies offline. Then the disks themselves are read:
//! what the tenant's deploy wrote is gone.
//!
//! The simulation installs the process clock, so each test of this crate runs in its own
//! process (cargo nextest does; `cargo test` would need `--test-threads 1` and one test at a time).

use metal_sim::machine::Activity;
use metal_sim::site::{Options, Site};
use metal_tests::scheduler::postgres_database;

#[test]
fn two_week_long_leases_end_clean_and_a_quarantined_machine_recovers() {
    // The synchronous PostgreSQL client makes the database before the runtime runs.
    let database_url = postgres_database();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let options = Options { nodes: 3, speed: 120.0, seed: 7, database_url, ..Options::default() };
        let site = Site::start(&options).await.unwrap();
        let failed = site.commission().await.unwrap();
        assert!(failed.is_empty(), "commissioning failed on {failed:?}");
        for machine in &site.machines {
            let inventory = site.admin.get(&format!("/v1/nodes/{}/inventory", machine.id)).await.unwrap();
            let disks = inventory["inventory"]["disks"].as_array().map_or(0, Vec::len);
            assert_eq!(disks, machine.hardware.disks.len(), "the ramdisk inventoried the machine's disks: {inventory}");
            assert_eq!(inventory["inventory"]["cpu"]["threads"], machine.hardware.cores, "{inventory}");
        }

        let outcome = metal_sim::demo::run(&site).await.unwrap();
        assert_ne!(outcome.clean, outcome.recovered);
        assert_eq!(outcome.generations, [1, 2, 3], "leased under a new generation, returned under another");

        // Two leases of 7 days, billed from the end of their deploys.
        assert!(outcome.metal_hours > 2.0 * 160.0 && outcome.metal_hours <= 2.0 * 168.0, "{}", outcome.metal_hours);

        // The evidence: every step done, and a wipe report that names every disk.
        for node in [&outcome.clean, &outcome.recovered] {
            let machine = site.machine(node).unwrap();
            let runs = site.admin.get(&format!("/v1/nodes/{node}/teardowns")).await.unwrap();
            let runs = runs.as_array().unwrap();
            let last = runs.last().unwrap();
            assert_eq!(last["status"], "succeeded", "{last}");
            assert!(last["history"].as_array().unwrap().iter().any(|h| h["step"] == "erase" && h["result"] == "done"));
            // The tenant's image is gone from every disk: its first MiB was written by the
            // deploy (boot signature, partition table), and the erase left zeros.
            for (index, file) in machine.disk_files.iter().enumerate() {
                let head = machine.disk_head(index, 1 << 20).unwrap();
                assert!(head.iter().all(|b| *b == 0), "{} still holds data after the teardown", file.display());
            }
            assert_ne!(machine.state().activity, Activity::Os, "nothing left to boot on {node}");
        }
        let clean = site.machine(&outcome.clean).unwrap();
        assert_eq!(outcome.wiped_disks, clean.hardware.disks.len(), "{}", outcome.text);
        let runs = site.admin.get(&format!("/v1/nodes/{}/teardowns", outcome.recovered)).await.unwrap();
        let statuses: Vec<&str> = runs.as_array().unwrap().iter().map(|r| r["status"].as_str().unwrap()).collect();
        assert_eq!(statuses.len(), 2, "the quarantining run and the recovery: {runs}");
        assert!(statuses.contains(&"failed") && statuses.contains(&"succeeded"), "{statuses:?}");
        assert!(outcome.text.contains("Certificate of sanitization"), "{}", outcome.text);
    });
}
