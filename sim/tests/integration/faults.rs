//! Faults at the end of a lease, one per machine, on one simulated site: firmware that
//! drifted from the pool's baseline, a disk that acknowledges its sanitize and keeps the
//! data, a disk whose reads fail, and a switch that refuses to move the machine's port off
//! its tenant VLAN (the machine stays cut off, on the lease's VLAN, until an operator
//! recovers it; then the switch has it on provisioning), BIOS settings locked by a setup
//! password and a BIOS setting that does not hold after the boot that applies it. Each machine is quarantined by the step that found
//! its fault, with that step's evidence, and keeps the tenant's data off the ready pool;
//! the machine without a fault comes back ready under a new identity generation. A BMC that
//! answers 503 while the machine is leased makes the API answer 502 with the BMC's word, and
//! answers again once it is back; at the end every site invariant holds (`chaos::check`).
//!
//! Machines with a TPM (swtpm each) in a pool that enforces measured boot: each teardown's
//! erase boot quotes it and passes; firmware with an implant behind the baseline's version
//! string is quarantined for its PCR 0, naming the event; reflashed clean, it recovers.
//!
//! The simulation installs the process clock: one test per process (nextest runs each test in
//! its own process anyway).

use std::time::Duration;

use metal_sim::fault::Fault;
use metal_sim::lease::{lease, reaches};
use metal_sim::site::{Options, Site};
use metal_tests::scheduler::postgres_database;

/// Whether the machine's first disk still holds the boot sector the deploy wrote.
fn tenant_data_left(site: &Site, node: &str) -> bool {
    site.machine(node).unwrap().disk_head(0, 512).unwrap()[510..512] == [0x55, 0xaa]
}

#[test]
fn each_fault_quarantines_its_machine_at_the_step_that_finds_it() {
    // The synchronous PostgreSQL client makes the database before the runtime runs.
    let database_url = postgres_database();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let site = metal_sim::lease::prepared(&Options {
            nodes: 8,
            speed: 120.0,
            seed: 3,
            database_url,
            switch_program: Some(env!("CARGO_BIN_EXE_metal-sim").into()),
            ..Options::default()
        })
        .await
        .unwrap();
        let leased: Vec<String> = lease(&site, 7, "2d").await.unwrap().into_iter().map(|(_, n)| n).collect();
        let mut distinct = leased.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 7, "seven leases, seven nodes: {leased:?}");
        for node in &leased {
            assert!(tenant_data_left(&site, node), "{node}: the deploy wrote the lessee's image");
        }
        let [clean, drifted, keeps_data, unreadable, stuck, locked, reverts] =
            [0, 1, 2, 3, 4, 5, 6].map(|i| leased[i].clone());
        let switch = site.switch.as_ref().unwrap();
        let vlan = |node: &str| switch.port(&metal_sim::switch::port_of(node)).unwrap().tag;
        let tenant_vlan = vlan(&stuck);
        assert!(tenant_vlan >= 100, "a lease's machine is on a tenant VLAN: {tenant_vlan}");
        site.machine(&stuck).unwrap().faults.set(Fault::SwitchRefuses, true);
        site.machine(&drifted).unwrap().faults.set(Fault::FirmwareDrift, true);
        site.machine(&keeps_data).unwrap().faults.set(Fault::IgnoreDiscard, true);
        site.machine(&unreadable).unwrap().faults.set(Fault::ReadErrors, true);
        // Tenants turned turbo off from their OS: the teardown writes it back for the erase
        // boot; one also set a BIOS setup password, and one's firmware hook turns it off again
        // at every boot.
        let turbo = |node: &str| site.machine(node).unwrap().state().bios["ProcTurboMode"].clone();
        for node in [&clean, &locked, &reverts] {
            site.machine(node).unwrap().state().bios.insert("ProcTurboMode".into(), "Disabled".into());
        }
        // And one turned Secure Boot off (a shim's MOK prompt answered at the console).
        site.machine(&clean).unwrap().state().secure_boot = false;
        site.machine(&locked).unwrap().faults.set(Fault::BiosLocked, true);
        site.machine(&reverts).unwrap().faults.set(Fault::BiosReverts, true);

        // A BMC that is busy for a while: reads through the API fail with the BMC's word,
        // and nothing is lost once it answers again.
        let busy = site.machine(&clean).unwrap();
        busy.faults.set(Fault::BmcUnavailable, true);
        let refused = site.admin.get(&format!("/v1/nodes/{clean}/power")).await.unwrap_err().to_string();
        assert!(refused.contains("502") && refused.contains("503"), "{refused}");
        busy.faults.set(Fault::BmcUnavailable, false);
        assert_eq!(site.admin.get(&format!("/v1/nodes/{clean}/power")).await.unwrap()["power"], "on");

        site.clock.advance(Duration::from_secs(2 * 86_400));
        reaches(&site, &clean, "ready").await.unwrap();
        for node in [&drifted, &keeps_data, &unreadable, &stuck, &locked, &reverts] {
            reaches(&site, node, "failed").await.unwrap();
        }

        let reason = |node: &str| {
            let site = &site;
            let node = node.to_owned();
            async move {
                let n = site.admin.get(&format!("/v1/nodes/{node}")).await.unwrap();
                assert_eq!(n["maintenance"], true, "a quarantined node is in maintenance: {n}");
                assert_eq!(n["tenantRoot"], true, "and still the tenant's until recovered: {n}");
                n["stateReason"].as_str().unwrap().to_owned()
            }
        };
        let drift = reason(&drifted).await;
        assert!(drift.starts_with("firmware") && drift.contains("bios"), "{drift}");
        let kept = reason(&keeps_data).await;
        assert!(kept.contains("disk-failed") && kept.contains("read-back"), "{kept}");
        assert!(tenant_data_left(&site, &keeps_data), "the sanitize was acknowledged and not done");
        let unread = reason(&unreadable).await;
        assert!(unread.contains("erase") && unread.contains("disk"), "{unread}");
        assert!(tenant_data_left(&site, &drifted), "quarantined before the erase: nothing was erased");

        let bios_locked = reason(&locked).await;
        assert!(
            bios_locked.starts_with("bios-reset: BIOS_RESET_REFUSED:") && bios_locked.contains("setup password"),
            "{bios_locked}"
        );
        assert!(tenant_data_left(&site, &locked), "quarantined before the erase");
        assert_eq!(turbo(&locked), "Disabled");
        let bios_reverted = reason(&reverts).await;
        assert_eq!(
            bios_reverted,
            r#"bios-verify: BIOS_DRIFT: after the boot that applies them, ProcTurboMode is "Disabled", the baseline wants "Enabled""#
        );
        assert!(!tenant_data_left(&site, &reverts), "the erase ran before the check");

        let refused = reason(&stuck).await;
        assert!(
            refused.starts_with("network-cleaning: switch tor1 refused: ovs-vsctl: transaction error: port")
                && refused.contains("locked"),
            "{refused}"
        );
        assert_eq!(vlan(&stuck), tenant_vlan, "the switch did not move it: still on the lease's VLAN");
        assert!(tenant_data_left(&site, &stuck), "no ramdisk booted: nothing was erased");
        site.machine(&stuck).unwrap().faults.set(Fault::SwitchRefuses, false);
        metal_sim::lease::recover(&site, &stuck).await.unwrap();
        assert_eq!(vlan(&stuck), metal_sim::switch::PROVISIONING_VLAN, "recovered: back on provisioning");
        assert!(!tenant_data_left(&site, &stuck));

        let n = site.admin.get(&format!("/v1/nodes/{clean}")).await.unwrap();
        assert_eq!((n["identityGeneration"].as_i64(), n["trust"].as_str()), (Some(3), Some("platform")), "{n}");
        assert!(!tenant_data_left(&site, &clean));
        assert_eq!(turbo(&clean), "Enabled", "the tenant's change did not outlive the lease");
        let secure = site.machine(&clean).map(|m| {
            let state = m.state();
            (state.secure_boot, state.secure_boot_booted)
        });
        assert_eq!(secure, Some((true, true)), "Secure Boot on again, and the erase boot ran with it");
        let spare = site.machines.iter().find(|m| !leased.contains(&m.id)).unwrap();
        assert_eq!(site.admin.get(&format!("/v1/nodes/{}", spare.id)).await.unwrap()["state"], "ready");
        assert!(metal_sim::chaos::check(&site).await.unwrap() > 0);
    });
}

#[test]
fn machines_with_a_tpm_prove_each_teardown_and_tampered_firmware_is_quarantined_for_its_pcr() {
    let database_url = postgres_database();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let site = metal_sim::lease::prepared(&Options {
            nodes: 2,
            speed: 120.0,
            seed: 5,
            database_url,
            tpm: true,
            ..Options::default()
        })
        .await
        .unwrap();
        // Commissioning attested each machine's TPM and learned its baseline.
        for machine in &site.machines {
            let baselines = site.admin.get(&format!("/v1/nodes/{}/boot-baselines", machine.id)).await.unwrap();
            assert_eq!(baselines.as_array().unwrap().len(), 1, "{baselines}");
            assert_eq!(baselines[0]["learnedBy"], "commissioning", "{baselines}");
        }
        let leased: Vec<String> = lease(&site, 2, "1d").await.unwrap().into_iter().map(|(_, n)| n).collect();
        let [clean, tampered] = [0, 1].map(|i| leased[i].clone());
        // A tenant flashes firmware whose version string is the baseline's, with an implant.
        site.machine(&tampered).unwrap().faults.set(Fault::FirmwareTampered, true);
        site.clock.advance(Duration::from_secs(86_400));
        reaches(&site, &clean, "ready").await.unwrap();
        reaches(&site, &tampered, "failed").await.unwrap();

        let runs = site.admin.get(&format!("/v1/nodes/{clean}/teardowns")).await.unwrap();
        let attest = runs[0]["history"].as_array().unwrap().iter().find(|h| h["step"] == "attest").unwrap().clone();
        assert_eq!((attest["result"].as_str(), attest["detail"]["mode"].as_str()), (Some("done"), Some("enforce")));
        assert_eq!(attest["detail"]["baselines"].as_array().unwrap().len(), 1, "{attest}");
        let quarantined = site.admin.get(&format!("/v1/nodes/{tampered}")).await.unwrap();
        let reason = quarantined["stateReason"].as_str().unwrap();
        assert!(
            reason.starts_with(
                "attest: measured-boot: PCR 0 differs (event 1, EV_EFI_PLATFORM_FIRMWARE_BLOB2) from baseline mbb-"
            ),
            "{reason}"
        );
        let attestations = site.admin.get(&format!("/v1/nodes/{tampered}/attestations")).await.unwrap();
        assert!(
            attestations.as_array().unwrap().iter().all(|a| a["verified"] == true),
            "quoted, not forged: {attestations}"
        );

        // The firmware reflashed clean: recovered, the teardown passes.
        site.machine(&tampered).unwrap().faults.set(Fault::FirmwareTampered, false);
        metal_sim::lease::recover(&site, &tampered).await.unwrap();
        assert!(metal_sim::chaos::check(&site).await.unwrap() > 0);
    });
}
