//! The scale benchmark (`metal-sim scale`): one scheduler managing every simulated Redfish BMC
//! of a big site while readings are polled across all of them and a thousand dedicated-root
//! leases end at the same moment. It reports how long the fleet took to come back (every
//! teardown: fence, rotation, firmware, erase with its signed report, a new identity), where
//! that time went step by step, and how reading every BMC behaved at rest and under the
//! teardowns' load.

// Statistics of a benchmark: float conversions of counts and durations are intended.
#![allow(clippy::cast_possible_truncation, clippy::cast_sign_loss, clippy::cast_precision_loss)]

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;

use crate::clock::at;
use crate::lease::{bound, prepare_with, reserve};
use crate::site::Site;

/// The period of the timer that tells a stalled runtime.
const TICK: Duration = Duration::from_millis(10);

/// What the benchmark does.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// Leases that end at once (each a teardown).
    pub teardowns: usize,
    /// Clients reading BMCs at the same time.
    pub pollers: usize,
}

/// Latencies of one kind of call.
#[derive(Debug, Default, Clone)]
pub struct Latencies(Vec<Duration>);

impl Latencies {
    fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.0.clone();
        sorted.sort();
        sorted.get(((sorted.len().max(1) - 1) as f64 * p) as usize).copied().unwrap_or_default()
    }
}

impl std::fmt::Display for Latencies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        write!(
            f,
            "{} calls, p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            self.0.len(),
            ms(self.percentile(0.5)),
            ms(self.percentile(0.99)),
            ms(self.percentile(1.0))
        )
    }
}

/// Readings of BMCs through the API: the latencies of those that answered, and the failures.
#[derive(Debug, Default)]
pub struct Reads {
    /// Latencies of the reads that answered.
    pub answered: Latencies,
    /// Reads that failed, and the first failure's message.
    pub failed: usize,
    /// What the first failed read said.
    pub first_failure: Option<String>,
}

impl std::fmt::Display for Reads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.answered)?;
        if let Some(first) = &self.first_failure {
            write!(f, "; {} failed, the first: {first}", self.failed)?;
        }
        Ok(())
    }
}

/// What the benchmark measured.
#[derive(Debug, Default)]
pub struct Report {
    /// BMCs (nodes) in the site.
    pub bmcs: usize,
    /// Leases bound (deployed) before they ended, and how long that took.
    pub leases: usize,
    /// Real time from the first reservation to the last lease bound.
    pub deployed_in: Duration,
    /// One sweep reading every BMC, before the teardowns.
    pub sweep_at_rest: Duration,
    /// Its reads.
    pub reads_at_rest: Reads,
    /// Real time from the leases' end to the first node and the last node ready.
    pub first_back: Duration,
    /// As above, the last.
    pub all_back: Duration,
    /// Nodes that ended failed instead of ready.
    pub failed: Vec<String>,
    /// Why, for each: the node, its failed step and what the step saw.
    pub failures: Vec<String>,
    /// Reads while the teardowns ran, and the sweeps they completed.
    pub reads_under_load: Reads,
    /// Sweeps of every BMC completed while the teardowns ran.
    pub sweeps_under_load: usize,
    /// Per teardown step, in real time: how long the step took in each run.
    pub steps: BTreeMap<String, Latencies>,
    /// How long each run waited from its lease's end to its first step.
    pub queued: Latencies,
    /// While the teardowns ran: how late a 10 ms timer on the runtime woke, each time (a
    /// stalled runtime delays every answer at once).
    pub timer_lateness: Latencies,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "{} BMCs; {} leases deployed in {:.1} s", self.bmcs, self.leases, self.deployed_in.as_secs_f64())?;
        writeln!(
            f,
            "readings, one sweep of every BMC at rest: {:.1} s ({})",
            self.sweep_at_rest.as_secs_f64(),
            self.reads_at_rest
        )?;
        writeln!(
            f,
            "{} teardowns at once: first node ready after {:.1} s, all {} after {:.1} s{}",
            self.leases,
            self.first_back.as_secs_f64(),
            self.leases - self.failed.len(),
            self.all_back.as_secs_f64(),
            if self.failed.is_empty() { String::new() } else { format!(" (failed: {})", self.failed.join(", ")) }
        )?;
        writeln!(f, "readings meanwhile: {} full sweeps ({})", self.sweeps_under_load, self.reads_under_load)?;
        writeln!(f, "a 10 ms timer on the runtime meanwhile, late by: {}", self.timer_lateness)?;
        for failure in &self.failures {
            writeln!(f, "  failed: {failure}")?;
        }
        writeln!(f, "where the teardown time went (real time per run):")?;
        writeln!(f, "  {:<20} {}", "queued", self.queued)?;
        for (step, spans) in &self.steps {
            writeln!(f, "  {step:<20} {spans}")?;
        }
        Ok(())
    }
}

/// Reads the BMC of every node in `ids`, `pollers` at a time, until `stop` (after one sweep
/// when `stop` is `None`); the reads, and the sweeps completed.
async fn poll(site: &Site, ids: &[String], pollers: usize, stop: Option<&AtomicBool>) -> (Reads, usize) {
    let reads = Mutex::new(Reads::default());
    let sweeps = AtomicUsize::new(0);
    loop {
        let next = AtomicUsize::new(0);
        let worker = || async {
            while let Some(id) = ids.get(next.fetch_add(1, Ordering::Relaxed)) {
                let started = Instant::now();
                let read = site.admin.get(&format!("/v1/nodes/{id}/bmc/readings")).await;
                let mut reads = reads.lock().unwrap_or_else(|p| p.into_inner());
                match read {
                    Ok(_) => reads.answered.0.push(started.elapsed()),
                    Err(e) => {
                        reads.failed += 1;
                        reads.first_failure.get_or_insert_with(|| format!("{e:#}"));
                    }
                }
            }
        };
        futures::future::join_all((0..pollers.max(1)).map(|_| worker())).await;
        sweeps.fetch_add(1, Ordering::Relaxed);
        if stop.is_none_or(|s| s.load(Ordering::SeqCst)) {
            break;
        }
    }
    (reads.into_inner().unwrap_or_else(|p| p.into_inner()), sweeps.into_inner())
}

/// Runs the plan on a commissioned site: leases, a sweep at rest, then every lease ends at
/// once while the pollers keep reading. `say` hears each phase as it ends (a run cut short
/// keeps what it measured).
pub async fn run(site: &Site, plan: &Plan, say: &dyn Fn(String)) -> anyhow::Result<Report> {
    if plan.teardowns == 0 || plan.teardowns > site.machines.len() {
        bail!("--teardowns must be from 1 to the machines ({})", site.machines.len());
    }
    let all: Vec<String> = site.machines.iter().map(|m| m.id.clone()).collect();
    let mut report = Report { bmcs: all.len(), ..Report::default() };
    // A 2 MiB image: a thousand deploys of the usual 16 MiB fill too much of a test
    // machine's disk, and the deploy is not what is measured.
    prepare_with(site, 2 << 20).await?;
    let started = Instant::now();
    let reserved = reserve(site, plan.teardowns, "1d").await?;
    let leased: Vec<String> = bound(site, reserved).await?.into_iter().map(|(_, node)| node).collect();
    report.leases = leased.len();
    report.deployed_in = started.elapsed();
    say(format!("{} leases deployed in {:.1} s", report.leases, report.deployed_in.as_secs_f64()));

    let started = Instant::now();
    (report.reads_at_rest, _) = poll(site, &all, plan.pollers, None).await;
    report.sweep_at_rest = started.elapsed();
    say(format!(
        "one sweep of every BMC at rest: {:.1} s ({})",
        report.sweep_at_rest.as_secs_f64(),
        report.reads_at_rest
    ));

    // Every lease ends now (a day and a minute later).
    site.clock.advance(Duration::from_secs(86_400 + 60));
    let ended = crate::clock::now();
    let started = Instant::now();
    let leased_set: std::collections::BTreeSet<String> = leased.iter().cloned().collect();
    let stop = AtomicBool::new(false);
    let back = async {
        let (mut first, mut polls) = (None, 0u32);
        loop {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = site.node_states(&leased_set).await?;
            let settled = now.values().filter(|s| *s == "ready" || *s == "failed").count();
            if settled > 0 && first.is_none() {
                first = Some(started.elapsed());
            }
            polls += 1;
            if polls.is_multiple_of(60) {
                say(format!(
                    "{:.0} s after the leases ended: {settled} of {} back",
                    started.elapsed().as_secs_f64(),
                    leased.len()
                ));
            }
            if settled == leased.len() {
                stop.store(true, Ordering::SeqCst);
                let failed = now.into_iter().filter(|(_, s)| s == "failed").map(|(id, _)| id).collect();
                return Ok::<_, anyhow::Error>((first.unwrap_or_default(), started.elapsed(), failed));
            }
            if started.elapsed() > Duration::from_secs(3600) {
                stop.store(true, Ordering::SeqCst);
                bail!("the teardowns did not end within an hour: {now:?}");
            }
        }
    };
    // On the runtime's workers, where the scheduler's tasks run.
    let ticking = std::sync::Arc::new(AtomicBool::new(true));
    let ticks = tokio::spawn({
        let ticking = ticking.clone();
        async move {
            let mut late = Vec::new();
            while ticking.load(Ordering::SeqCst) {
                let started = Instant::now();
                tokio::time::sleep(TICK).await;
                late.push(started.elapsed().saturating_sub(TICK));
            }
            Latencies(late)
        }
    });
    let (returned, polled) = tokio::join!(back, poll(site, &all, plan.pollers, Some(&stop)));
    ticking.store(false, Ordering::SeqCst);
    report.timer_lateness = ticks.await?;
    (report.first_back, report.all_back, report.failed) = returned?;
    (report.reads_under_load, report.sweeps_under_load) = polled;

    let speed = site.clock.speed().max(f64::MIN_POSITIVE);
    let real = |span: time::Duration| Duration::from_secs_f64((span.as_seconds_f64() / speed).max(0.0));
    let mut steps: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
    let mut queued = Vec::new();
    for node in &leased {
        let runs = site.admin.get(&format!("/v1/nodes/{node}/teardowns")).await?;
        let Some(run) = runs.as_array().and_then(|r| r.last()) else { continue };
        let history = run["history"].as_array().cloned().unwrap_or_default();
        if let Some(failed) = history.iter().rev().find(|r| r["result"] == "failed") {
            let mut why = match run["lastError"].as_str() {
                Some(error) => format!("{error} ({})", failed["detail"]),
                None => failed["detail"].to_string(),
            };
            if let Some(wipe) = failed["detail"]["wipeReport"].as_str() {
                let wipe = site.admin.get(&format!("/v1/nodes/{node}/wipe-reports/{wipe}")).await?;
                let disks = wipe.pointer("/report/disks").and_then(|d| d.as_array());
                for disk in disks.into_iter().flatten().filter(|d| !d["failure"].is_null()) {
                    why.push_str(&format!("; {}: {}", disk["device"], disk["failure"]));
                }
            }
            report.failures.push(format!("{node} in {}: {why}", failed["step"]));
        }
        if let Some(first) = history.first() {
            queued.push(real(at(&first["startedAt"])? - ended));
        }
        let mut began: BTreeMap<String, time::OffsetDateTime> = BTreeMap::new();
        for record in &history {
            let step = record["step"].as_str().unwrap_or("?").to_owned();
            let start = *began.entry(step.clone()).or_insert(at(&record["startedAt"])?);
            if record["result"] == "done" {
                steps.entry(step).or_default().push(real(at(&record["finishedAt"])? - start));
            }
        }
    }
    report.steps = steps.into_iter().map(|(step, spans)| (step, Latencies(spans))).collect();
    report.queued = Latencies(queued);
    Ok(report)
}
