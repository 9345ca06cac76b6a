//! `metal-sim`: parses the command line and dispatches to the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use metal_sim::fault::{Fault, parse_assignment};
use metal_sim::site::{Options, Replicas, Site};

/// A simulated metal site: the real scheduler, Redfish BMCs and machines running the real
/// ramdisk code on sparse files, under a clock that runs as fast as you like.
///
/// Everything runs in this one process: the scheduler's HTTP API and boot service (SQLite in
/// the data directory), one BMC per machine on 127.77.X.Y, and the machines, which boot
/// through the scheduler's iPXE script into the same metal-boot code a real ramdisk runs.
/// METAL_DATABASE_URL (environment only, as for the scheduler) puts the store on PostgreSQL.
#[derive(Parser, Debug)]
#[command(name = "metal-sim", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Machines in the site (n001, n002, ...).
    #[arg(long, global = true, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..=5000))]
    nodes: u16,
    /// Simulated seconds per real second (above 0, at most 100000).
    #[arg(long, global = true, default_value_t = 60.0, value_parser = parse_speed)]
    speed: f64,
    /// Seed of the random choices: machine sizes, and the faults chaos draws (never secrets).
    #[arg(long, global = true, default_value_t = 1)]
    seed: u64,
    /// The scheduler's data directory [default: a temporary directory, removed at exit].
    #[arg(long, global = true)]
    data_dir: Option<PathBuf>,
    /// Where the machines' system trees and sparse disk files go [default: DATA_DIR/machines].
    /// A tmpfs (under /dev/shm) keeps a big site's disks off the host's filesystem, whose
    /// block allocator would otherwise set the pace of a thousand erases planting their
    /// markers at once. It is left in place at exit.
    #[arg(long, global = true)]
    machines_dir: Option<PathBuf>,
    /// A fault a machine has from the start, as NODE=FAULT (repeatable). Faults: bmc-timeout,
    /// bmc-unavailable, bmc-lies-about-power, refuse-rotation, firmware-drift, ignore-discard,
    /// read-errors, report-lost, switch-refuses, bios-locked, bios-reverts, firmware-tampered.
    #[arg(long = "fault", global = true, value_parser = parse_assignment)]
    faults: Vec<(String, Fault)>,
    /// Every Nth machine's BMC has the quirks sushy-tools showed: no PowerCycle, a Once boot
    /// override kept as Continuous, the virtual CD under the system, a power state that reads
    /// the old value for 1.5 s after a reset (0: none).
    #[arg(long, global = true, default_value_t = 0)]
    sushy_quirks_every: usize,
    /// Every Nth machine is an arm64 (Grace-class) machine: its kernel and cpuinfo say
    /// aarch64, so commissioning records it and placement keeps it apart (0: none).
    #[arg(long, global = true, default_value_t = 0)]
    arm64_every: usize,
    /// No switch. By default every machine is cabled to a simulated Open vSwitch-like switch
    /// that the scheduler drives through this program run as `ovs-vsctl`, and the pool
    /// isolates tenants on it: VLAN 10 provisioning, 20 cleaning, 100 to 4094 one per lease
    /// (so at most 3,995 leases at once).
    #[arg(long, global = true)]
    no_switch: bool,
    /// Give every machine a TPM 2.0 (a swtpm process of its own, so for small sites) and
    /// make the pool enforce measured boot: each teardown's erase boot quotes it, and a
    /// machine with the firmware-tampered fault is quarantined for its PCR 0.
    #[arg(long, global = true)]
    tpm: bool,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Start the site, commission every machine, and serve the scheduler's API until Ctrl-C.
    ///
    /// metalctl works against it as against any scheduler (the admin token is in
    /// DATA_DIR/admin.token); the simulator's own endpoint (printed) controls faults and the
    /// clock.
    Run {
        /// The scheduler's API address.
        #[arg(long, default_value = "127.0.0.1:7450")]
        listen: SocketAddr,
    },
    /// Run two dedicated-root leases of a week from reservation to a clean, re-identified
    /// return (one machine quarantined by a BMC fault and recovered), print the timeline,
    /// the meter records and the verified wipe certificate, and exit.
    Demo,
    /// Run rounds of one-day leases with faults drawn from --seed (refused rotations,
    /// firmware drift, disks that ignore their sanitize or fail reads), recover every
    /// quarantined node, check the invariants after each round, and print the counts.
    Chaos {
        /// Rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Leases per round (at most the machines).
        #[arg(long, default_value_t = 2)]
        per_round: usize,
        /// Chance that a leased machine gets a fault, 0 to 1.
        #[arg(long, default_value_t = 0.3, value_parser = parse_rate)]
        fault_rate: f64,
        /// Run the scheduler as replicas in processes of their own and `kill -9` one at
        /// random, this many seconds apart on average (real time), starting it again each
        /// time; every write the API acknowledged must survive.
        #[arg(long, value_parser = parse_seconds)]
        kill_every: Option<std::time::Duration>,
        /// Scheduler replicas with --kill-every (two or more need METAL_DATABASE_URL:
        /// PostgreSQL).
        #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=4))]
        replicas: u8,
    },
    /// The scale benchmark: commission the fleet, lease --teardowns machines, read every BMC
    /// once at rest, then end every lease at once and keep reading every BMC while the
    /// teardowns run; print how long the fleet took to come back, where the time went per
    /// teardown step, and the readings' latencies. Use a release build (scripts/bench-sim-scale).
    Scale {
        /// Leases that end at the same moment.
        #[arg(long, default_value_t = 100)]
        teardowns: usize,
        /// Clients reading BMCs at the same time.
        #[arg(long, default_value_t = 16)]
        pollers: usize,
    },
    /// Run one scheduler replica of a site whose data directory (--data-dir, required) holds
    /// the site's clock; what `chaos --kill-every` starts and kills. The BMC master key comes
    /// in METAL_MASTER_KEY, the store in METAL_DATABASE_URL (SQLite in the data directory
    /// when unset).
    Scheduler {
        /// The API's address.
        #[arg(long)]
        listen: SocketAddr,
        /// The boot service's address.
        #[arg(long)]
        boot_listen: SocketAddr,
        /// The URL ramdisks reach the boot service at [default: https://BOOT_LISTEN].
        #[arg(long)]
        controller_url: Option<String>,
        /// How long, in real milliseconds, a workflow claim of this replica holds its run
        /// after the replica dies.
        #[arg(long, default_value_t = 3000)]
        workflow_claim_ms: u64,
    },
}

fn parse_seconds(text: &str) -> Result<std::time::Duration, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds <= 3600.0 => Ok(std::time::Duration::from_secs_f64(seconds)),
        _ => Err(format!("{text:?}: seconds, above 0 and at most 3600")),
    }
}

fn parse_speed(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(speed) if speed > 0.0 && speed <= 100_000.0 => Ok(speed),
        _ => Err(format!("{text:?}: a number above 0 and at most 100000")),
    }
}

fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if (0.0..=1.0).contains(&rate) => Ok(rate),
        _ => Err(format!("{text:?}: a number from 0 to 1")),
    }
}

fn main() -> ExitCode {
    // Run as `ovs-vsctl` (the link a site with a switch makes): the simulated switch's.
    let mut args = std::env::args();
    let name = args.next().map(PathBuf::from);
    if name.as_deref().and_then(|n| n.file_name()) == Some(std::ffi::OsStr::new(metal_sim::switch::VSCTL)) {
        return metal_sim::switch::vsctl_main(&args.collect::<Vec<_>>());
    }
    let cli = Cli::parse();
    metal_sim::return_freed_buffers();
    let default_log = match cli.command {
        Command::Run { .. } => "info",
        Command::Demo | Command::Chaos { .. } | Command::Scheduler { .. } | Command::Scale { .. } => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("METAL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_log));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("metal-sim: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("metal-sim: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    if let Command::Scheduler { listen, boot_listen, controller_url, workflow_claim_ms } = cli.command {
        let data_dir = cli.data_dir.context("the scheduler replica needs --data-dir (the site's)")?;
        let claim = std::time::Duration::from_millis(workflow_claim_ms);
        return metal_sim::replica::serve(&data_dir, listen, boot_listen, controller_url, claim).await;
    }
    let listen = match cli.command {
        Command::Run { listen } => listen,
        _ => SocketAddr::from(([127, 0, 0, 1], 0)),
    };
    let database_url = std::env::var("METAL_DATABASE_URL").ok().filter(|u| !u.is_empty());
    let mut replicas = None;
    match cli.command {
        Command::Demo if cli.nodes < 2 => anyhow::bail!("the demo leases two machines: --nodes must be at least 2"),
        Command::Scale { teardowns, .. } if teardowns == 0 || teardowns > usize::from(cli.nodes) => {
            anyhow::bail!("--teardowns must be from 1 to --nodes ({})", cli.nodes)
        }
        Command::Chaos { per_round, .. } if per_round == 0 || per_round > usize::from(cli.nodes) => {
            anyhow::bail!("--per-round must be from 1 to --nodes ({})", cli.nodes)
        }
        Command::Chaos { kill_every: Some(_), replicas: count, .. } => {
            if count > 1 && database_url.is_none() {
                anyhow::bail!("--replicas {count} share one store: set METAL_DATABASE_URL to a PostgreSQL database");
            }
            let program = std::env::current_exe().context("finding this program to start the replicas")?;
            replicas = Some(Replicas { count: usize::from(count), program, claim: std::time::Duration::from_secs(3) });
        }
        _ => {}
    }
    let options = Options {
        nodes: usize::from(cli.nodes),
        speed: cli.speed,
        seed: cli.seed,
        data_dir: cli.data_dir,
        machines_dir: cli.machines_dir,
        database_url,
        listen,
        faults: cli.faults,
        replicas,
        sushy_every: cli.sushy_quirks_every,
        arm64_every: cli.arm64_every,
        tpm: cli.tpm,
        switch_program: if cli.no_switch {
            None
        } else {
            Some(std::env::current_exe().context("finding this program, the switch's ovs-vsctl")?)
        },
    };
    let started = std::time::Instant::now();
    let site = Site::start(&options).await?;
    println!(
        "metal-sim: {} machines, clock at {}x; scheduler API {}, simulator {}",
        site.machines.len(),
        options.speed,
        site.admin.base(),
        site.control_url
    );
    let enrolled = started.elapsed();
    let failed = site.commission().await?;
    println!(
        "metal-sim: {} machines enrolled in {:.1} s; commissioned {} of them in {:.1} s more{}",
        site.machines.len(),
        enrolled.as_secs_f64(),
        site.machines.len() - failed.len(),
        (started.elapsed() - enrolled).as_secs_f64(),
        if failed.is_empty() { String::new() } else { format!(" (failed: {})", failed.join(", ")) }
    );
    match cli.command {
        Command::Demo => {
            metal_sim::demo::run(&site).await?;
            println!("metal-sim: the demo took {:.1} s", started.elapsed().as_secs_f64());
        }
        Command::Chaos { rounds, per_round, fault_rate, kill_every, .. } => {
            metal_sim::lease::prepare(&site).await?;
            let plan = metal_sim::chaos::Plan { rounds, per_round, fault_rate, kill_every, seed: options.seed };
            let counts = metal_sim::chaos::run(&site, &plan).await?;
            println!("metal-sim: chaos: {counts} in {:.1} s", started.elapsed().as_secs_f64());
        }
        Command::Scale { teardowns, pollers } => {
            let plan = metal_sim::scale::Plan { teardowns, pollers };
            let report = metal_sim::scale::run(&site, &plan, &|line| println!("metal-sim: {line}")).await?;
            print!("{report}");
        }
        Command::Scheduler { .. } => {}
        Command::Run { .. } => {
            use tokio::signal::unix::{SignalKind, signal};
            let (mut interrupt, mut terminate) = (signal(SignalKind::interrupt())?, signal(SignalKind::terminate())?);
            println!(
                "metal-sim: admin token in {}; Ctrl-C (or SIGTERM) stops the site",
                site.data_dir().join(metal_machines::app::ADMIN_TOKEN_FILE).display()
            );
            tokio::select! {
                _ = interrupt.recv() => {},
                _ = terminate.recv() => {},
            }
        }
    }
    Ok(())
}
