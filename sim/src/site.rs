//! The simulated site: the real scheduler (the `metal_machines` and `metal_api` libraries, the same code
//! `metal-scheduler serve` runs: store, HTTP API, boot service, workflows) in this process,
//! a Redfish BMC per machine on its own loopback address, machines that boot the real
//! ramdisk code, a file server for OS and firmware images, and (when asked) the top-of-rack
//! switch every machine is cabled to, with the pool isolating tenants on it. The clock is installed for
//! the whole process before anything reads it.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context as _, bail};
use rand::{Rng as _, SeedableRng as _};
use serde_json::{Value, json};

use crate::api::Api;
use crate::clock::SimClock;
use crate::fault::Fault;
use crate::machine::Machine;
use crate::switch::SimSwitch;
use crate::tree::Hardware;

/// The first octets of every simulated BMC's address: 127.77.X.Y.
const BMC_NET: [u8; 2] = [127, 77];
/// The pool every simulated machine joins.
pub const POOL: &str = "gpu";
/// The BIOS version of every simulated machine (the pool's baseline).
pub const BIOS_VERSION: &str = "2.1.0";
/// GPUs per machine.
pub const GPUS: usize = 8;

/// How to start a site.
#[derive(Debug, Clone)]
pub struct Options {
    /// Machines.
    pub nodes: usize,
    /// Simulated seconds per real second.
    pub speed: f64,
    /// Seeds every random choice but secrets (machine sizes; chaos draws its own).
    pub seed: u64,
    /// Where the scheduler keeps its data (a temporary directory when absent).
    pub data_dir: Option<PathBuf>,
    /// Where the machines' trees and disk files go (`DATA_DIR/machines` when absent).
    pub machines_dir: Option<PathBuf>,
    /// A PostgreSQL database instead of SQLite in the data directory.
    pub database_url: Option<String>,
    /// The scheduler's API address (port 0: any free port).
    pub listen: SocketAddr,
    /// Faults the machines have from the start.
    pub faults: Vec<(String, Fault)>,
    /// The scheduler as replicas in processes of their own, which chaos can kill; `None`:
    /// in this process.
    pub replicas: Option<Replicas>,
    /// Every how many machines one has a BMC with sushy-tools' quirks (0: none).
    pub sushy_every: usize,
    /// Every how many machines one is an arm64 (Grace-class) machine (0: none).
    pub arm64_every: usize,
    /// The `metal-sim` executable, for a site with a switch: the scheduler manages the
    /// simulated switch by running it as `ovs-vsctl`, and the pool isolates its tenants on
    /// the switch (see [`crate::switch`]). `None`: no switch, no isolation.
    pub switch_program: Option<PathBuf>,
    /// Each machine has a TPM 2.0 (a swtpm of its own, see [`crate::tpm`]) and the pool
    /// enforces measured boot.
    pub tpm: bool,
}

/// Scheduler replicas in processes of their own (`metal-sim scheduler`).
#[derive(Debug, Clone)]
pub struct Replicas {
    /// How many (more than one takes PostgreSQL).
    pub count: usize,
    /// The `metal-sim` executable.
    pub program: PathBuf,
    /// How long, in real time, a killed replica's workflow claims hold the runs it had.
    pub claim: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 4,
            speed: 60.0,
            seed: 1,
            data_dir: None,
            machines_dir: None,
            database_url: None,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            faults: Vec::new(),
            replicas: None,
            sushy_every: 0,
            arm64_every: 0,
            switch_program: None,
            tpm: false,
        }
    }
}

/// Where the site's scheduler runs.
#[derive(Debug)]
pub enum Scheduler {
    /// In this process.
    InProcess(metal_api::AppState),
    /// In processes of their own; the machines and the site's client use the first.
    Replicas(Vec<Arc<crate::replica::Replica>>),
}

/// A running simulated site.
#[derive(Debug)]
pub struct Site {
    /// The clock everything reads.
    pub clock: Arc<SimClock>,
    /// The scheduler.
    pub scheduler: Scheduler,
    /// The platform admin's API client.
    pub admin: Api,
    /// The machines, in node id order.
    pub machines: Vec<Arc<Machine>>,
    /// The simulator's control endpoint (`/files/NAME` serves `DATA_DIR/sim-files/NAME`;
    /// `/sim/...` controls machines, faults and the clock).
    pub control_url: String,
    /// The scheduler's data directory.
    pub data_dir: PathBuf,
    /// The switch every machine is cabled to, when the site has one.
    pub switch: Option<Arc<SimSwitch>>,
    _temporary: Option<tempfile::TempDir>,
}

/// The node id of the `index`th machine (from 1).
pub fn node_id(index: usize) -> String {
    format!("n{index:03}")
}

fn hardware(index: usize, arm64: bool, rng: &mut rand_chacha::ChaCha8Rng) -> Hardware {
    let cores = [32, 64, 96][rng.gen_range(0..3)];
    let memory_gib: u64 = [256, 512, 1024][rng.gen_range(0..3)];
    // Small disks: an erase reads back 1% of each disk twice (before and after), so a
    // fleet's teardowns verify in seconds; the files are sparse either way.
    let disk_gib: u64 = [2, 4, 8][rng.gen_range(0..3)];
    let disks = if rng.gen_bool(0.5) { vec![disk_gib << 30] } else { vec![disk_gib << 30; 2] };
    let low = u8::try_from(index % 256).unwrap_or(0);
    let high = u8::try_from((index / 256) % 256).unwrap_or(0);
    Hardware {
        cores,
        memory_bytes: memory_gib << 30,
        disks,
        mac: format!("52:54:00:5e:{high:02x}:{low:02x}"),
        serial: format!("SIM{index:05}"),
        uuid: format!("5e5e5e5e-0000-4000-8000-{index:012}"),
        bios_version: BIOS_VERSION.into(),
        architecture: if arm64 { "aarch64" } else { "x86_64" },
    }
}

/// The loopback address of the `index`th BMC.
fn bmc_address(index: usize) -> Ipv4Addr {
    let third = u8::try_from(index / 250).unwrap_or(u8::MAX);
    let fourth = u8::try_from(index % 250 + 1).unwrap_or(1);
    Ipv4Addr::new(BMC_NET[0], BMC_NET[1], third, fourth)
}

/// Binds one listener per BMC on the same port of consecutive 127.77.x.y addresses.
async fn bmc_listeners(count: usize) -> anyhow::Result<Vec<tokio::net::TcpListener>> {
    'port: for _ in 0..20 {
        let first = tokio::net::TcpListener::bind((bmc_address(1), 0)).await.context("binding the first BMC")?;
        let port = first.local_addr()?.port();
        let mut listeners = vec![first];
        for index in 2..=count {
            match tokio::net::TcpListener::bind((bmc_address(index), port)).await {
                Ok(l) => listeners.push(l),
                Err(_) => continue 'port,
            }
        }
        return Ok(listeners);
    }
    bail!("could not find one port free on {count} BMC addresses")
}

/// A raw OS image of `size` bytes: an MBR with one Linux partition and the boot signature,
/// a few MiB of content, and zeros.
pub fn os_image(size: u64) -> Vec<u8> {
    let mut image = vec![0u8; usize::try_from(size).unwrap_or(0)];
    let sectors = u32::try_from(size / 512).unwrap_or(u32::MAX);
    let entry = &mut image[446..462];
    entry[4] = 0x83;
    entry[8..12].copy_from_slice(&2048u32.to_le_bytes());
    entry[12..16].copy_from_slice(&(sectors - 2048).to_le_bytes());
    image[510] = 0x55;
    image[511] = 0xaa;
    let content = (1usize << 20)..(5usize << 20).min(image.len());
    for (i, byte) in image[content].iter_mut().enumerate() {
        *byte = u8::try_from((i * 31 + i / 4096) % 251).unwrap_or(0);
    }
    image
}

impl Site {
    /// Installs the clock, starts the scheduler, the BMCs and the machines, and enrols every
    /// machine into the pool (not commissioned yet: see [`Site::commission`]).
    pub async fn start(options: &Options) -> anyhow::Result<Site> {
        let (data_dir, temporary) = match &options.data_dir {
            Some(dir) => (dir.clone(), None),
            None => {
                let t = tempfile::Builder::new().prefix("metal-sim.").tempdir()?;
                (t.path().to_owned(), Some(t))
            }
        };
        std::fs::create_dir_all(&data_dir).with_context(|| format!("creating {}", data_dir.display()))?;
        let clock_file = data_dir.join(crate::replica::CLOCK_FILE);
        let clock = Arc::new(SimClock::create(&clock_file, SystemTime::now(), options.speed)?);
        metal_clock::install(clock.clone()).context("the simulation needs the process clock")?;
        // A lessee's rescue needs the rescue ramdisk served; machines here never load it.
        let boot_files = data_dir.join("boot");
        std::fs::create_dir_all(&boot_files)?;
        std::fs::write(boot_files.join("rescue"), b"the simulated site's rescue ramdisk (never loaded)\n")?;
        let (scheduler, api_url) = match &options.replicas {
            None => {
                let api_listener = tokio::net::TcpListener::bind(options.listen)
                    .await
                    .with_context(|| format!("binding {}", options.listen))?;
                let boot_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let ssh_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                let api_address = api_listener.local_addr()?;
                let mut config =
                    crate::config::scheduler_config(&data_dir, api_address, boot_listener.local_addr()?, options.speed);
                config.console_ssh_listen = Some(ssh_listener.local_addr()?);
                config.database_url.clone_from(&options.database_url);
                // BMC passwords sealed at rest under a key of this run (and no warning per node).
                let master_key = hex::encode(rand::random::<[u8; 32]>());
                config.master_key =
                    Some(metal_types::secrets::MasterKey::from_hex(&master_key).map_err(anyhow::Error::msg)?);
                let app = metal_api::start(config, Arc::new(metal_types::clock::SystemClock))
                    .await
                    .context("starting the scheduler")?;
                let listeners = metal_api::Listeners {
                    api: api_listener,
                    boot: Some(boot_listener),
                    firmware: None,
                    console_ssh: Some(ssh_listener),
                };
                tokio::spawn(metal_api::serve(app.clone(), listeners));
                (Scheduler::InProcess(app), format!("http://{api_address}"))
            }
            Some(replicas) => {
                let database_url = options.database_url.as_deref();
                let started = crate::replica::start_all(
                    replicas.count,
                    &replicas.program,
                    &data_dir,
                    database_url,
                    replicas.claim,
                )
                .await?;
                let url = started.first().context("no replica")?.url();
                (Scheduler::Replicas(started), url)
            }
        };
        let token = std::fs::read_to_string(data_dir.join(metal_machines::app::ADMIN_TOKEN_FILE))?.trim().to_owned();
        let admin = Api::new(&api_url, &token);

        let files = data_dir.join("sim-files");
        std::fs::create_dir_all(&files)?;
        let control_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let control_url = format!("http://{}", control_listener.local_addr()?);
        let cabling = match &options.switch_program {
            Some(program) => {
                Some(cabling(&data_dir, program, &control_listener.local_addr()?.to_string(), options.nodes)?)
            }
            None => None,
        };

        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(options.seed);
        let listeners = bmc_listeners(options.nodes).await?;
        let machines_dir = options.machines_dir.clone().unwrap_or_else(|| data_dir.join("machines"));
        let mut machines = Vec::new();
        for (index, listener) in (1..=options.nodes).zip(listeners) {
            let id = node_id(index);
            let arm64 = options.arm64_every > 0 && index % options.arm64_every == 0;
            let hardware = hardware(index, arm64, &mut rng);
            let dir = machines_dir.join(&id);
            std::fs::create_dir_all(dir.join("disks"))?;
            let mut disk_files = Vec::new();
            for (n, size) in hardware.disks.iter().enumerate() {
                let file = dir.join("disks").join(format!("{}.img", crate::tree::disk_name(n)));
                crate::disk::FileDisk::create(&file, *size)?;
                disk_files.push(file);
            }
            let paths = crate::tree::write(&dir.join("root"), &hardware, &disk_files)?;
            // Not from the seed: a BMC password nobody can work out from the command line.
            let password = format!("sim-{}", hex::encode(rand::random::<[u8; 16]>()));
            let bmc_url = format!("http://{}", listener.local_addr()?);
            let mut machine = Machine::new(id.clone(), hardware, paths, disk_files, api_url.clone(), password.clone());
            if options.sushy_every > 0 && index % options.sushy_every == 0 {
                machine.flavor = crate::machine::Flavor::SushyTools;
            }
            machine.switch = cabling.as_ref().map(|c| c.switch.clone());
            if options.tpm {
                machine.tpm = Some(crate::tpm::SimTpm::manufacture(&dir, &machine.paths.dev, &machine.paths.sys)?);
            }
            let machine = Arc::new(machine);
            for (_, fault) in options.faults.iter().filter(|(node, _)| *node == id) {
                machine.faults.set(*fault, true);
            }
            tokio::spawn(crate::redfish::serve(machine.clone(), listener));
            enrol(&admin, &machine, index, &bmc_url, &password, cabling.as_ref(), options.tpm).await?;
            machines.push(machine);
        }
        for (node, _) in &options.faults {
            if !machines.iter().any(|m| &m.id == node) {
                bail!("--fault names {node}, which is not a machine of this site (n001 to {})", node_id(options.nodes));
            }
        }
        let switch = cabling.map(|c| c.switch);
        let control =
            crate::control::Control { files, machines: machines.clone(), clock: clock.clone(), switch: switch.clone() };
        tokio::spawn(crate::control::serve(Arc::new(control), control_listener));
        Ok(Site { clock, scheduler, admin, machines, control_url, data_dir, switch, _temporary: temporary })
    }

    /// The scheduler, when it runs in this process.
    pub fn app(&self) -> anyhow::Result<&metal_api::AppState> {
        match &self.scheduler {
            Scheduler::InProcess(app) => Ok(app),
            Scheduler::Replicas(_) => bail!("the site's scheduler runs in processes of its own"),
        }
    }

    /// The scheduler's replicas in processes of their own (none when it runs in this one).
    pub fn replicas(&self) -> &[Arc<crate::replica::Replica>] {
        match &self.scheduler {
            Scheduler::InProcess(_) => &[],
            Scheduler::Replicas(replicas) => replicas,
        }
    }

    /// Every meter record due is written; the time they are written up to. In this process
    /// a billing pass runs now; replicas bill on their own pass (every 200 ms of real time),
    /// so this waits for a few of them.
    pub async fn bill(&self) -> anyhow::Result<time::OffsetDateTime> {
        let now = crate::clock::now();
        match &self.scheduler {
            Scheduler::InProcess(app) => {
                metal_capacity::billing::bill_once(&app.store, &*app.clock)
                    .await
                    .map_err(|e| anyhow::anyhow!("billing: {e}"))?;
            }
            Scheduler::Replicas(_) => tokio::time::sleep(crate::config::REAPER * 5).await,
        }
        Ok(now)
    }

    /// The machine with node id `id`.
    pub fn machine(&self, id: &str) -> Option<&Arc<Machine>> {
        self.machines.iter().find(|m| m.id == id)
    }

    /// Writes `bytes` as a file the site serves; its URL.
    pub fn publish(&self, name: &str, bytes: &[u8]) -> anyhow::Result<String> {
        std::fs::write(self.data_dir.join("sim-files").join(name), bytes)?;
        Ok(format!("{}/files/{name}", self.control_url))
    }

    /// Boots every machine into commissioning through its BMC and waits until every node is
    /// ready (or failed); the nodes that did not end ready.
    pub async fn commission(&self) -> anyhow::Result<Vec<String>> {
        for machine in &self.machines {
            let path = format!("/v1/nodes/{}", machine.id);
            self.admin.post(&format!("{path}/boot"), json!({"target": "pxe"})).await?;
            self.admin.post(&format!("{path}/power"), json!({"action": "on"})).await?;
        }
        let ids: std::collections::BTreeSet<String> = self.machines.iter().map(|m| m.id.clone()).collect();
        // Two minutes, and a tenth of a second more per machine (a big fleet on two cores).
        let limit =
            Duration::from_secs(120) + Duration::from_millis(100) * u32::try_from(ids.len()).unwrap_or(u32::MAX);
        self.until("every node commissioned", limit, || async {
            Ok(self.node_states(&ids).await?.values().all(|state| state == "ready" || state == "failed"))
        })
        .await?;
        Ok(self.node_states(&ids).await?.into_iter().filter(|(_, state)| state != "ready").map(|(id, _)| id).collect())
    }

    /// The state of each node in `ids`, as the API lists them.
    pub async fn node_states(
        &self,
        ids: &std::collections::BTreeSet<String>,
    ) -> anyhow::Result<std::collections::BTreeMap<String, String>> {
        Ok(self
            .admin
            .list("/v1/nodes")
            .await?
            .iter()
            .filter_map(|n| Some((n["id"].as_str()?.to_owned(), n["state"].as_str()?.to_owned())))
            .filter(|(id, _)| ids.contains(id))
            .collect())
    }

    /// Polls `done` every 50 ms of real time until it holds; fails after `limit` of real time.
    pub async fn until<F, Fut>(&self, what: &str, limit: Duration, done: F) -> anyhow::Result<()>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<bool>>,
    {
        let started = Instant::now();
        loop {
            if done().await? {
                return Ok(());
            }
            if started.elapsed() > limit {
                bail!("{what}: still not the case after {} s", limit.as_secs());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

/// The site's switch and how the scheduler reaches it.
struct Cabling {
    switch: Arc<SimSwitch>,
    /// The switch's registration (`POST /v1/switches`).
    registration: Value,
}

/// A switch with a port for each of `nodes` machines, managed through `DATA_DIR/bin/ovs-vsctl`
/// (a link to `program`) against the simulator's endpoint at `control`.
fn cabling(data_dir: &Path, program: &Path, control: &str, nodes: usize) -> anyhow::Result<Cabling> {
    let bin = data_dir.join("bin");
    std::fs::create_dir_all(&bin)?;
    let vsctl = bin.join(crate::switch::VSCTL);
    let _ = std::fs::remove_file(&vsctl);
    std::os::unix::fs::symlink(program, &vsctl)
        .with_context(|| format!("linking {} to {}", vsctl.display(), program.display()))?;
    let switch = Arc::new(SimSwitch::new((1..=nodes).map(|i| crate::switch::port_of(&node_id(i)))));
    let registration = json!({"id": crate::switch::SWITCH, "driver": "ovs", "address": format!("ovsdb:tcp:{control}"),
                              "command": vsctl.display().to_string()});
    Ok(Cabling { switch, registration })
}

/// Creates the node of `machine` in the pool, with its BMC (and the pool, and the switch
/// when there is one, with the first); its port on the switch when there is one.
async fn enrol(
    admin: &Api,
    machine: &Machine,
    index: usize,
    bmc_url: &str,
    password: &str,
    cabling: Option<&Cabling>,
    tpm: bool,
) -> anyhow::Result<()> {
    if index == 1 {
        // The BIOS baseline names two of the machines' defaults and Secure Boot on: a
        // tenant's change to any is written back by the teardown (`bios-reset`) and checked
        // after its erase boot.
        let bios =
            json!({"attributes": {"ProcTurboMode": "Enabled", "SriovGlobalEnable": "Enabled"}, "secureBoot": true});
        let mut policy = json!({"tenantRoot": true, "firmwareBaseline": {"bios": BIOS_VERSION}, "biosBaseline": bios});
        if tpm {
            policy["measuredBoot"] = json!({"mode": "enforce"});
        }
        if let Some(cabling) = cabling {
            admin.post("/v1/switches", cabling.registration.clone()).await?;
            policy["network"] = crate::switch::network_policy();
        }
        admin
            .post(
                "/v1/pools",
                json!({"id": POOL, "tenantId": "root", "siteId": "sim", "class": "metal-dedicated", "policy": policy}),
            )
            .await?;
    }
    let devices: Vec<Value> =
        (0..GPUS).map(|g| json!({"id": format!("gpu{g}"), "class": "gpu", "healthy": true})).collect();
    admin
        .post(
            "/v1/nodes",
            json!({"id": machine.id, "bootMac": machine.hardware.mac, "devices": devices, "poolId": POOL,
                   "labels": {"rack": format!("r{:02}", (index - 1) / 16 + 1)}}),
        )
        .await?;
    admin
        .call(
            "PUT",
            &format!("/v1/nodes/{}/bmc", machine.id),
            &json!({"protocol": "redfish", "address": bmc_url, "username": crate::redfish::USER, "password": password}),
        )
        .await?;
    if cabling.is_some() {
        let port = json!({"mac": machine.hardware.mac, "switchId": crate::switch::SWITCH,
                          "port": crate::switch::port_of(&machine.id)});
        admin.call("PUT", &format!("/v1/nodes/{}/ports", machine.id), &json!({"ports": [port]})).await?;
    }
    Ok(())
}
