//! The scheduler's configuration on a simulated site, in this process or in replicas of
//! their own (`site` and `replica` both start schedulers with it).

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// How often the scheduler's periodic pass (reaper, reservations, billing) runs, in real time.
pub const REAPER: Duration = Duration::from_millis(200);

/// The scheduler's configuration on a simulated site: `listen` and `boot` its addresses, the
/// store in `data_dir` (SQLite, unless a database URL is set after), its periodic passes
/// frequent in real time, so simulated time is not wasted.
pub fn scheduler_config(
    data_dir: &Path,
    listen: SocketAddr,
    boot: SocketAddr,
    speed: f64,
) -> metal_types::config::Config {
    let defaults = metal_types::config::Config::default();
    let mut config = metal_types::config::Config {
        listen,
        data_dir: data_dir.to_owned(),
        reaper_interval: REAPER,
        workflow_interval: Duration::from_millis(100),
        // A workflow step's claim lapses on the simulated clock and is renewed on the real
        // one: it lasts as long in real time as in production and is renewed every third of
        // that, so no step runs twice. (An image import's lease is stretched the same way
        // but renewed only every third of its stretched length: imports here take seconds,
        // well inside one lease.)
        workflow_claim: lasting(defaults.workflow_claim, speed),
        workflow_renew: Some(defaults.workflow_claim / 3),
        ..Default::default()
    };
    config.images.lease = lasting(defaults.images.lease, speed);
    config.boot.listen = Some(boot);
    config.boot.site = "sim".into();
    // Every simulated machine talks from 127.0.0.1: one address for the whole fleet.
    config.boot.rate_per_minute = 1_000_000;
    config
}

/// A lease of `real` real time as the simulated clock running at `speed` counts it.
fn lasting(real: Duration, speed: f64) -> Duration {
    real.mul_f64(speed.max(1.0))
}
