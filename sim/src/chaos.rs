//! Rounds of dedicated-root leases with faults drawn from a seed, and the invariants that
//! must hold whatever the faults did: no node booked twice in overlapping windows, no meter
//! window missing or doubled, no node `ready` after a lease without a complete teardown
//! record and an accepted wipe report, every teardown step with a deadline; on a site with a
//! switch, as the switch has it: every live lease's machine on a tenant VLAN of its own and
//! every ready machine on the provisioning VLAN. Quarantined
//! nodes have their faults cleared, are recovered and taken out of maintenance before the
//! next round. The counts say what was run and checked.
//!
//! With kills, the scheduler runs as replicas in processes of their own (one on SQLite, two
//! at once on PostgreSQL), and a monkey `kill -9`s one at random moments and starts it again:
//! whatever the scheduler was doing (a teardown step, a ramdisk's report, a billing pass),
//! the invariants hold, and every write the API acknowledged is still there after each kill.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail, ensure};
use rand::{Rng as _, SeedableRng as _};
use serde_json::Value;
use time::OffsetDateTime;

use crate::clock::at;
use crate::fault::Fault;
use crate::lease::{bound, reaches, recover, reserve};
use crate::site::Site;

/// Faults a round draws from: each ends in a quarantine the operator can recover from (and,
/// on a site whose machines have TPMs, tampered firmware too).
const DRAWN: [Fault; 6] = [
    Fault::RefuseRotation,
    Fault::FirmwareDrift,
    Fault::IgnoreDiscard,
    Fault::ReadErrors,
    Fault::SwitchRefuses,
    Fault::BiosReverts,
];

/// What a chaos run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counts {
    /// Rounds run.
    pub rounds: usize,
    /// Leases run from reservation to their end.
    pub leases: usize,
    /// Faults injected.
    pub faults: usize,
    /// Nodes quarantined (and recovered).
    pub quarantined: usize,
    /// Invariant checks that held.
    pub invariants_checked: usize,
    /// Scheduler replicas killed with SIGKILL (and started again).
    pub kills: usize,
    /// Acknowledged writes found again after a kill.
    pub writes_survived: usize,
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} rounds, {} leases, {} faults injected, {} nodes quarantined and recovered, {} invariant checks held, \
             {} kills -9 ({} acknowledged writes found after them)",
            self.rounds,
            self.leases,
            self.faults,
            self.quarantined,
            self.invariants_checked,
            self.kills,
            self.writes_survived
        )
    }
}

/// What a chaos run does.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Rounds.
    pub rounds: usize,
    /// One-day leases per round.
    pub per_round: usize,
    /// The chance a leased machine gets one of the drawn faults.
    pub fault_rate: f64,
    /// The mean real time between kills of a replica (none when `None`, or when the
    /// scheduler runs in this process).
    pub kill_every: Option<Duration>,
    /// Seeds the faults and the kills.
    pub seed: u64,
}

/// Runs the plan's rounds on a site whose machines are commissioned and whose tenant is
/// prepared (`lease::prepare`), with the monkey killing replicas meanwhile.
pub async fn run(site: &Site, plan: &Plan) -> anyhow::Result<Counts> {
    let acknowledged = Mutex::new(Vec::new());
    let (kills, survived) = (AtomicUsize::new(0), AtomicUsize::new(0));
    let rounds = rounds(site, plan, &acknowledged);
    let mut counts = match plan.kill_every {
        Some(every) if !site.replicas().is_empty() => tokio::select! {
            counts = rounds => counts?,
            failed = monkey(site, every, plan.seed, &acknowledged, &kills, &survived) => return Err(failed.unwrap_err()),
        },
        _ => rounds.await?,
    };
    counts.kills = kills.load(Ordering::SeqCst);
    counts.writes_survived = survived.load(Ordering::SeqCst);
    Ok(counts)
}

/// Kills a random replica at random moments (`every` on average) between the client's
/// writes and starts it again; then every reservation the API acknowledged must still be
/// there. Returns only when something failed.
async fn monkey(
    site: &Site,
    every: Duration,
    seed: u64,
    acknowledged: &Mutex<Vec<String>>,
    kills: &AtomicUsize,
    survived: &AtomicUsize,
) -> anyhow::Result<std::convert::Infallible> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed.wrapping_add(0x6b69_6c6c));
    let replicas = site.replicas();
    loop {
        tokio::time::sleep(every.mul_f64(rng.gen_range(0.2..1.8))).await;
        let replica = &replicas[rng.gen_range(0..replicas.len())];
        {
            let _held = site.admin.hold_writes().await;
            tracing::info!(replica = %replica.name, "kill -9");
            replica.kill();
            replica.start().await.with_context(|| format!("starting {} again after its kill", replica.name))?;
        }
        kills.fetch_add(1, Ordering::SeqCst);
        let written = acknowledged.lock().unwrap_or_else(|p| p.into_inner()).clone();
        survived.fetch_add(find_acknowledged(site, &written).await?, Ordering::SeqCst);
    }
}

/// Finds every reservation in `ids` through the API (each one it acknowledged); how many.
pub async fn find_acknowledged(site: &Site, ids: &[String]) -> anyhow::Result<usize> {
    for id in ids {
        site.admin
            .get(&format!("/v1/reservations/{id}"))
            .await
            .with_context(|| format!("reservation {id} was acknowledged, and is gone after a kill -9"))?;
    }
    Ok(ids.len())
}

async fn rounds(site: &Site, plan: &Plan, acknowledged: &Mutex<Vec<String>>) -> anyhow::Result<Counts> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(plan.seed);
    let mut counts = Counts::default();
    let mut drawn = DRAWN.to_vec();
    if site.machines.iter().all(|m| m.tpm.is_some()) {
        drawn.push(Fault::FirmwareTampered);
    }
    for _ in 0..plan.rounds {
        let reserved = reserve(site, plan.per_round, "1d").await?;
        acknowledged.lock().unwrap_or_else(|p| p.into_inner()).extend(reserved.iter().cloned());
        let leased = bound(site, reserved).await?;
        counts.leases += leased.len();
        for (_, node) in &leased {
            if rng.gen_bool(plan.fault_rate.clamp(0.0, 1.0)) {
                let fault = drawn[rng.gen_range(0..drawn.len())];
                site.machine(node).context("a node without a machine")?.faults.set(fault, true);
                counts.faults += 1;
            }
        }
        site.clock.advance(Duration::from_secs(86_400));
        for (_, node) in &leased {
            let machine = site.machine(node).context("a node without a machine")?;
            if machine.faults.active().is_empty() {
                reaches(site, node, "ready").await?;
            } else {
                reaches(site, node, "failed").await?;
                for fault in machine.faults.active() {
                    machine.faults.set(fault, false);
                }
                recover(site, node).await?;
                counts.quarantined += 1;
            }
        }
        counts.invariants_checked += check(site).await?;
        counts.rounds += 1;
    }
    Ok(counts)
}

/// Checks every invariant over the whole site as the API shows it (after a billing pass);
/// how many checks held.
pub async fn check(site: &Site) -> anyhow::Result<usize> {
    // No kill while replicas bill on their own pass and the API is read.
    let _calm = site.admin.hold_off_kills().await;
    let now = site.bill().await?;
    let mut checked = 0;
    let reservations = site.admin.get("/v1/reservations").await?;
    let reservations = reservations.as_array().context("reservations: not a list")?;

    // No node booked twice in overlapping windows; and when each node was last bound.
    let mut windows: BTreeMap<String, Vec<(OffsetDateTime, OffsetDateTime, String)>> = BTreeMap::new();
    let mut bound: BTreeMap<(String, String), (OffsetDateTime, OffsetDateTime)> = BTreeMap::new();
    let mut last_bound: BTreeMap<String, OffsetDateTime> = BTreeMap::new();
    for r in reservations.iter().filter(|r| !r["boundAt"].is_null()) {
        let id = r["id"].as_str().unwrap_or("?").to_owned();
        let (bound_at, end) = (at(&r["boundAt"])?, at(&r["end"])?);
        for node in r["nodes"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            windows.entry(node.to_owned()).or_default().push((at(&r["start"])?, end, id.clone()));
            bound.insert((id.clone(), node.to_owned()), (bound_at, end));
            let last = last_bound.entry(node.to_owned()).or_insert(bound_at);
            *last = (*last).max(bound_at);
        }
    }
    for (node, mut booked) in windows {
        booked.sort();
        for pair in booked.windows(2) {
            ensure!(pair[0].1 <= pair[1].0, "{node} is booked twice: {} and {} overlap", pair[0].2, pair[1].2);
            checked += 1;
        }
    }

    // No meter window missing or doubled: per lease (reservation and node) and meter, the
    // hourly windows run from the hour of the bind to the lease's end, one after another;
    // per node and meter, no two leases bill the same time.
    let usage = site.admin.pages(&format!("/v1/usage?tenantId={}", crate::lease::TENANT)).await?;
    let mut series: BTreeMap<(String, String, String), Vec<(OffsetDateTime, OffsetDateTime)>> = BTreeMap::new();
    for record in usage.iter().flat_map(|page| page["records"].as_array().into_iter().flatten()) {
        let id = record["id"].as_str().context("a meter record without an id")?;
        let node = id.split('/').nth(1).unwrap_or_default().to_owned();
        let reservation = record["reservationId"].as_str().unwrap_or("?").to_owned();
        let meter = record["meter"].as_str().unwrap_or("?").to_owned();
        series
            .entry((reservation, node, meter))
            .or_default()
            .push((at(&record["windowStart"])?, at(&record["windowEnd"])?));
    }
    let mut per_node: BTreeMap<(String, String), Vec<(OffsetDateTime, OffsetDateTime)>> = BTreeMap::new();
    for ((reservation, node, meter), mut billed) in series {
        billed.sort();
        let lease = format!("{reservation} on {node} ({meter})");
        let (bound_at, end) = *bound
            .get(&(reservation.clone(), node.clone()))
            .with_context(|| format!("{lease}: billed, never bound"))?;
        let (first, last) = (billed[0], billed[billed.len() - 1]);
        ensure!(
            first.0 <= bound_at && bound_at < first.0 + time::Duration::hours(1),
            "{lease}: billing starts at {}, bound at {bound_at}",
            first.0
        );
        if end <= now {
            ensure!(last.1 == end, "{lease}: billed to {}, ended at {end}", last.1);
        }
        for pair in billed.windows(2) {
            ensure!(
                pair[1].0 - pair[0].0 == time::Duration::hours(1),
                "{lease}: windows {} and {} do not follow each other",
                pair[0].0,
                pair[1].0
            );
        }
        checked += 2;
        // A window's record starts at its hour; what it bills starts at the bind at the earliest.
        per_node.entry((node, meter)).or_default().extend(billed.iter().map(|(from, to)| ((*from).max(bound_at), *to)));
    }
    for ((node, meter), mut billed) in per_node {
        billed.sort();
        for pair in billed.windows(2) {
            ensure!(pair[0].1 <= pair[1].0, "{node} ({meter}): {} billed twice", pair[1].0);
        }
        checked += 1;
    }

    // No node ready after a lease without a teardown since, which succeeded with a done record
    // of every step and a wipe report accepted since it began; every run with a deadline for
    // the step it is on.
    let nodes = Value::Array(site.admin.list("/v1/nodes").await?);
    for node in nodes.as_array().into_iter().flatten() {
        let id = node["id"].as_str().unwrap_or("?");
        let runs = site.admin.get(&format!("/v1/nodes/{id}/teardowns")).await?;
        let runs = runs.as_array().cloned().unwrap_or_default();
        for run in &runs {
            let (started, deadline) = (at(&run["stepStarted"])?, at(&run["stepDeadline"])?);
            ensure!(deadline > started, "{id}: teardown {} has no deadline after its step began", run["id"]);
            checked += 1;
        }
        let Some(bound_at) = last_bound.get(id) else { continue };
        if node["state"] != "ready" {
            continue;
        }
        let last = runs.last().with_context(|| format!("{id} is ready after a lease without a teardown"))?;
        let began = at(&last["createdAt"])?;
        ensure!(began >= *bound_at, "{id} is ready after a lease bound at {bound_at} without a teardown since");
        ensure!(last["status"] == "succeeded", "{id} is ready, and its last teardown {}", last["status"]);
        let done: BTreeSet<&str> = last["history"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|h| h["result"] == "done")
            .filter_map(|h| h["step"].as_str())
            .collect();
        for step in last["steps"].as_array().into_iter().flatten().filter_map(|s| s["name"].as_str()) {
            ensure!(done.contains(step), "{id} is ready without a done record of {step}");
        }
        let reports = site.admin.get(&format!("/v1/nodes/{id}/wipe-reports")).await?;
        let accepted = reports
            .as_array()
            .into_iter()
            .flatten()
            .any(|r| r["accepted"] == true && at(&r["receivedAt"]).is_ok_and(|received| received >= began));
        if !accepted {
            bail!("{id} is ready without a wipe report accepted in its last teardown");
        }
        checked += 3;
    }
    checked += check_wire(site, reservations, &nodes)?;
    Ok(checked)
}

/// On a site with a switch, what the switch itself says (not the scheduler's records): each
/// live lease's machine on a tenant VLAN no other lease has, each ready machine on the
/// provisioning VLAN. How many checks held.
fn check_wire(site: &Site, reservations: &[Value], nodes: &Value) -> anyhow::Result<usize> {
    use crate::switch::{PROVISIONING_VLAN, TENANT_VLANS, port_of};
    let Some(switch) = &site.switch else { return Ok(0) };
    let ports = switch.ports();
    let vlan = |node: &str| ports.get(&port_of(node)).map(|p| p.tag).with_context(|| format!("{node}: no port"));
    let mut checked = 0;
    let mut tenants: BTreeMap<u16, String> = BTreeMap::new();
    for r in reservations.iter().filter(|r| r["state"] == "active") {
        for node in r["nodes"].as_array().into_iter().flatten().filter_map(Value::as_str) {
            let tag = vlan(node)?;
            ensure!((TENANT_VLANS.0..=TENANT_VLANS.1).contains(&tag), "{node} is leased and on VLAN {tag}");
            if let Some(other) = tenants.insert(tag, node.to_owned()) {
                bail!("{node} and {other} are leased and share VLAN {tag}");
            }
            checked += 1;
        }
    }
    for node in nodes.as_array().into_iter().flatten().filter(|n| n["state"] == "ready") {
        let id = node["id"].as_str().unwrap_or("?");
        let tag = vlan(id)?;
        ensure!(tag == PROVISIONING_VLAN, "{id} is ready and its port is on VLAN {tag}, not provisioning");
        checked += 1;
    }
    Ok(checked)
}
