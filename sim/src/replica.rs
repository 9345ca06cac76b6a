//! The site's scheduler as replicas in processes of their own (`metal-sim scheduler`), so that
//! chaos can `kill -9` one at any moment and start it again: the same scheduler code
//! the in-process site runs, on the same store (one SQLite file, or one PostgreSQL database
//! for two replicas at once) and on the site's clock, which each replica maps from the data
//! directory. The BMC master key reaches a replica in its environment, never on its command
//! line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::clock::SimClock;

/// The file in the data directory every process of a site maps its clock from.
pub const CLOCK_FILE: &str = "sim-clock";

/// How long a replica has to answer `/healthz` after it starts.
const READY: Duration = Duration::from_secs(30);

/// One scheduler replica: its addresses, and its process while it runs.
#[derive(Debug)]
pub struct Replica {
    /// Its name in logs (`replica-1`).
    pub name: String,
    /// The API's address.
    pub api: SocketAddr,
    /// The boot service's address.
    pub boot: SocketAddr,
    program: PathBuf,
    data_dir: PathBuf,
    database_url: Option<String>,
    master_key: String,
    claim: Duration,
    controller: String,
    child: Mutex<Option<Child>>,
}

/// Two distinct loopback ports free now, from below the system's ephemeral range. The
/// replica binds them, and binds them again after a kill; a port from the ephemeral range
/// (what binding port 0 gives) may meanwhile be handed out for one of the many outgoing
/// connections the site makes, and that restart would fail. Below the range, only a
/// program that asks for the very port could take it.
fn free_ports() -> anyhow::Result<(SocketAddr, SocketAddr)> {
    use rand::Rng as _;
    let end = ephemeral_start().unwrap_or(32768);
    let start = 10_000.min(end / 2).max(1024);
    let mut rng = rand::thread_rng();
    let mut found: Vec<SocketAddr> = Vec::new();
    for _ in 0..1000 {
        let port = rng.gen_range(start..end);
        if found.iter().any(|a| a.port() == port) {
            continue;
        }
        if let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) {
            found.push(listener.local_addr()?);
        }
        if let [api, boot] = found[..] {
            return Ok((api, boot));
        }
    }
    bail!("found no two free loopback ports in {start}..{end}")
}

/// The first port of the system's ephemeral range (`ip_local_port_range`).
fn ephemeral_start() -> Option<u16> {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    range.split_whitespace().next()?.parse().ok()
}

impl Replica {
    /// A replica that runs `program scheduler` on free ports (not started yet), telling
    /// ramdisks to reach the boot service at `controller` (`None`: its own).
    pub fn new(
        index: usize,
        program: &Path,
        data_dir: &Path,
        database_url: Option<String>,
        master_key: &str,
        claim: Duration,
        controller: Option<&str>,
    ) -> anyhow::Result<Replica> {
        let (api, boot) = free_ports()?;
        Ok(Replica {
            name: format!("replica-{index}"),
            api,
            boot,
            controller: controller.map_or_else(|| format!("https://{boot}"), str::to_owned),
            program: program.to_owned(),
            data_dir: data_dir.to_owned(),
            database_url,
            master_key: master_key.to_owned(),
            claim,
            child: Mutex::new(None),
        })
    }

    /// The API's base URL.
    pub fn url(&self) -> String {
        format!("http://{}", self.api)
    }

    /// Starts the process (its log appended to `DATA_DIR/<name>.log`) and waits until its API
    /// answers.
    pub async fn start(&self) -> anyhow::Result<()> {
        let log_path = self.data_dir.join(format!("{}.log", self.name));
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
        let mut command = Command::new(&self.program);
        command
            .arg("scheduler")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--listen")
            .arg(self.api.to_string())
            .arg("--boot-listen")
            .arg(self.boot.to_string())
            .arg("--controller-url")
            .arg(&self.controller)
            .arg("--workflow-claim-ms")
            .arg(self.claim.as_millis().to_string())
            .env("METAL_MASTER_KEY", &self.master_key)
            .env("METAL_LOG", std::env::var("METAL_LOG").unwrap_or_else(|_| "warn".into()))
            .env_remove("METAL_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some(url) = &self.database_url {
            command.env("METAL_DATABASE_URL", url);
        }
        let child = command.spawn().with_context(|| format!("starting {}", self.program.display()))?;
        *self.child.lock().unwrap_or_else(|p| p.into_inner()) = Some(child);
        let client = reqwest::Client::new();
        let started = Instant::now();
        loop {
            if client.get(format!("{}/healthz", self.url())).send().await.is_ok_and(|a| a.status().is_success()) {
                return Ok(());
            }
            if let Some(status) =
                self.child.lock().unwrap_or_else(|p| p.into_inner()).as_mut().and_then(|c| c.try_wait().ok().flatten())
            {
                bail!("{} exited ({status}) before it answered; see {}", self.name, log_path.display());
            }
            if started.elapsed() > READY {
                bail!("{} did not answer in {} s; see {}", self.name, READY.as_secs(), log_path.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// `kill -9`, and reaps it.
    pub fn kill(&self) {
        if let Some(mut child) = self.child.lock().unwrap_or_else(|p| p.into_inner()).take() {
            // Child::kill is SIGKILL: no shutdown of any kind runs.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Starts `count` replicas of the scheduler in processes of their own, one after the other
/// (the first bootstraps the admin credential, the others find it). Ramdisks reach the first
/// one's boot service whichever replica wrote their plan, as they would reach a site's one
/// controller address in front of several replicas.
pub async fn start_all(
    count: usize,
    program: &Path,
    data_dir: &Path,
    database_url: Option<&str>,
    claim: Duration,
) -> anyhow::Result<Vec<Arc<Replica>>> {
    if count > 1 && database_url.is_none() {
        bail!("{count} replicas share one store: that takes PostgreSQL (METAL_DATABASE_URL)");
    }
    let master_key = hex::encode(rand::random::<[u8; 32]>());
    let mut replicas = Vec::new();
    let mut controller = None;
    for index in 1..=count {
        let url = database_url.map(str::to_owned);
        let replica = Replica::new(index, program, data_dir, url, &master_key, claim, controller.as_deref())?;
        controller.get_or_insert_with(|| replica.controller.clone());
        replica.start().await?;
        replicas.push(Arc::new(replica));
    }
    Ok(replicas)
}

/// `metal-sim scheduler`: one replica, on the clock in `data_dir`, until SIGINT or SIGTERM
/// (or SIGKILL).
pub async fn serve(
    data_dir: &Path,
    listen: SocketAddr,
    boot_listen: SocketAddr,
    controller_url: Option<String>,
    claim: Duration,
) -> anyhow::Result<()> {
    let clock = Arc::new(SimClock::open(&data_dir.join(CLOCK_FILE))?);
    metal_clock::install(clock.clone()).context("the replica needs the process clock")?;
    let mut config = crate::config::scheduler_config(data_dir, listen, boot_listen, clock.speed());
    // A claim lapses on the simulated clock: `claim` of real time, renewed every third of it.
    config.workflow_claim = claim.mul_f64(clock.speed().max(1.0));
    config.workflow_renew = Some(claim / 3);
    config.boot.controller_url = controller_url;
    config.database_url = std::env::var("METAL_DATABASE_URL").ok().filter(|u| !u.is_empty());
    let key = std::env::var("METAL_MASTER_KEY").context("METAL_MASTER_KEY (the site's BMC master key) is not set")?;
    config.master_key = Some(metal_types::secrets::MasterKey::from_hex(&key).map_err(anyhow::Error::msg)?);
    let api = tokio::net::TcpListener::bind(listen).await.with_context(|| format!("binding {listen}"))?;
    let boot = tokio::net::TcpListener::bind(boot_listen).await.with_context(|| format!("binding {boot_listen}"))?;
    let app =
        metal_api::start(config, Arc::new(metal_types::clock::SystemClock)).await.context("starting the scheduler")?;
    let listeners = metal_api::Listeners { api, boot: Some(boot), firmware: None, console_ssh: None };
    metal_api::serve(app, listeners).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn replica_ports_are_distinct_free_and_below_the_ephemeral_range() {
        let end = super::ephemeral_start().expect("Linux says its ephemeral range");
        for _ in 0..20 {
            let (api, boot) = super::free_ports().unwrap();
            assert_ne!(api.port(), boot.port());
            assert!(api.port() < end && boot.port() < end, "{api} {boot} (the range starts at {end})");
            let _held = (std::net::TcpListener::bind(api).unwrap(), std::net::TcpListener::bind(boot).unwrap());
        }
    }
}
