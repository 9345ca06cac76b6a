//! Chaos with `kill -9`: the site's scheduler runs as replicas in processes of their own
//! (`metal-sim scheduler`: one on SQLite; in CI's PostgreSQL pass, two at once on one
//! database, racing each other for every workflow claim and every check-then-insert), and a
//! monkey kills one at random moments and starts it again while leases deploy, tear down,
//! quarantine and recover. Every write the API acknowledged is found after every kill, and
//! every site invariant holds after every round.
//!
//! The simulation installs the process clock: one test per process (nextest runs each alone).

use std::time::Duration;

use metal_sim::chaos;
use metal_sim::site::{Options, Replicas};
use metal_tests::scheduler::postgres_database;

#[test]
fn killed_scheduler_replicas_lose_no_acknowledged_write_and_keep_every_invariant() {
    let database_url = postgres_database();
    let count = if database_url.is_some() { 2 } else { 1 };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let replicas =
            Replicas { count, program: env!("CARGO_BIN_EXE_metal-sim").into(), claim: Duration::from_secs(3) };
        let options = Options {
            nodes: 5,
            speed: 120.0,
            seed: 21,
            database_url,
            replicas: Some(replicas),
            switch_program: Some(env!("CARGO_BIN_EXE_metal-sim").into()),
            ..Options::default()
        };
        let site = metal_sim::lease::prepared(&options).await.unwrap();
        assert_eq!(site.replicas().len(), count);
        assert!(site.app().is_err(), "the scheduler is not in this process");
        let plan = chaos::Plan {
            rounds: 3,
            per_round: 3,
            fault_rate: 0.5,
            kill_every: Some(Duration::from_millis(1500)),
            seed: 21,
        };
        let counts = chaos::run(&site, &plan).await.unwrap();
        println!("{count} replica(s): {counts}");
        assert_eq!((counts.rounds, counts.leases), (3, 9), "{counts}");
        assert!(counts.kills >= 3, "{counts}");
        assert!(counts.writes_survived > 0 && counts.invariants_checked > 50, "{counts}");
        assert_eq!(counts.quarantined, counts.faults, "{counts}");
        // The survival check finds what is there, and names what is not.
        let missing = chaos::find_acknowledged(&site, &["res-never-made".into()]).await.unwrap_err();
        assert!(format!("{missing:#}").contains("res-never-made"), "{missing:#}");
    });
}
