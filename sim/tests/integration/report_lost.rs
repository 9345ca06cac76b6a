//! Reports lost on the network: two leased machines whose ramdisks join the boot service and
//! then lose every report they send (the `report-lost` fault: a relay that carries the join
//! and cuts every later connection). A ramdisk that cannot report gives up and powers off,
//! and the erase step boots it again (a new boot, with a new token): the machine whose
//! network heals after the first loss comes back ready with the one report that arrived; the
//! one whose network stays lossy erases again and again, never reaches `ready` without the
//! evidence, and is quarantined when the erase step's deadline (12 hours, jumped over here)
//! passes.
//!
//! The ramdisk's retries run in real time (about 30 s a boot): the slowest test of metal-sim,
//! mostly asleep. The simulation installs the process clock: one test per process.

use std::time::{Duration, Instant};

use metal_sim::fault::Fault;
use metal_sim::lease::{lease, reaches};
use metal_sim::site::Options;
use metal_tests::scheduler::postgres_database;

#[test]
fn a_lost_wipe_report_is_erased_again_and_a_network_that_stays_lossy_quarantines_at_the_deadline() {
    let database_url = postgres_database();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let site = metal_sim::lease::prepared(&Options {
            nodes: 2,
            speed: 120.0,
            seed: 5,
            database_url,
            ..Options::default()
        })
        .await
        .unwrap();
        let leased: Vec<String> = lease(&site, 2, "1d").await.unwrap().into_iter().map(|(_, n)| n).collect();
        let (heals, lossy) = (site.machine(&leased[0]).unwrap(), site.machine(&leased[1]).unwrap());
        heals.faults.set(Fault::ReportLost, true);
        lossy.faults.set(Fault::ReportLost, true);
        site.clock.advance(Duration::from_secs(86_400 + 60));

        // The first erase boot's reports are lost; the ramdisk gives up and powers off.
        let started = Instant::now();
        while !heals.console().iter().any(|l| l.starts_with("metal-boot: FATAL")) {
            assert!(
                started.elapsed() < Duration::from_secs(120),
                "the first boot never gave up: {:?}",
                heals.console()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(heals.console().iter().any(|l| l.contains("reports will be lost")), "{:?}", heals.console());
        heals.faults.set(Fault::ReportLost, false);

        reaches(&site, &heals.id, "ready").await.unwrap();
        assert!(heals.state().boots >= 3, "commissioning, the lost erase, the erase again: {:?}", heals.console());
        let reports = site.admin.get(&format!("/v1/nodes/{}/wipe-reports", heals.id)).await.unwrap();
        let accepted: Vec<_> = reports.as_array().unwrap().iter().filter(|r| r["accepted"] == true).collect();
        assert_eq!(accepted.len(), 1, "only the second erase's report arrived: {reports}");

        // Still erasing again and again, and not ready; the erase step's deadline passes.
        assert_eq!(site.admin.get(&format!("/v1/nodes/{}", lossy.id)).await.unwrap()["state"], "releasing");
        assert!(lossy.console().iter().filter(|l| l.starts_with("metal-boot: FATAL")).count() >= 1);
        site.clock.advance(Duration::from_secs(13 * 3600));
        reaches(&site, &lossy.id, "failed").await.unwrap();
        let node = site.admin.get(&format!("/v1/nodes/{}", lossy.id)).await.unwrap();
        let reason = node["stateReason"].as_str().unwrap();
        assert!(reason.starts_with("erase") && reason.contains("deadline"), "{reason}");
        assert_eq!(node["maintenance"], true, "{node}");
        let reports = site.admin.get(&format!("/v1/nodes/{}/wipe-reports", lossy.id)).await.unwrap();
        assert!(reports.as_array().unwrap().iter().all(|r| r["accepted"] != true), "{reports}");
        assert!(metal_sim::chaos::check(&site).await.unwrap() > 0);
    });
}
