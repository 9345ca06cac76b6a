//! The simulation's clock: real time multiplied by a speed, plus jumps. It is installed as
//! the process clock (`metal_clock`), so the scheduler, the certificates it issues, the TLS
//! checks and the ramdisk code all read the same "now", however fast it runs.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// Real time times `speed`, from `start`, plus every jump.
#[derive(Debug)]
pub struct SimClock {
    real_start: Instant,
    start: SystemTime,
    speed: f64,
    jumped: Mutex<Duration>,
}

impl SimClock {
    /// A clock reading `start` now and running `speed` times as fast as real time.
    pub fn new(start: SystemTime, speed: f64) -> SimClock {
        SimClock { real_start: Instant::now(), start, speed: speed.max(0.0), jumped: Mutex::new(Duration::ZERO) }
    }

    /// How many simulated seconds pass per real second.
    pub fn speed(&self) -> f64 {
        self.speed
    }

    /// Moves the clock forward at once (a 7-day lease in an instant).
    pub fn advance(&self, by: Duration) {
        *self.jumped.lock().unwrap_or_else(|p| p.into_inner()) += by;
    }
}

impl metal_clock::Source for SimClock {
    fn now(&self) -> SystemTime {
        let elapsed = self.real_start.elapsed().mul_f64(self.speed);
        self.start + elapsed + *self.jumped.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The process clock now (the simulation's, once installed).
pub fn now() -> time::OffsetDateTime {
    metal_clock::now_utc()
}

/// A time as RFC 3339 text, as the API writes it.
pub fn rfc3339(t: time::OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

/// RFC 3339 text as a time.
pub fn parse(text: &str) -> anyhow::Result<time::OffsetDateTime> {
    Ok(time::OffsetDateTime::parse(text, &time::format_description::well_known::Rfc3339)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use metal_clock::Source as _;

    #[test]
    fn runs_at_its_speed_and_jumps_forward() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let clock = SimClock::new(start, 1000.0);
        std::thread::sleep(Duration::from_millis(20));
        let ran = clock.now().duration_since(start).unwrap();
        assert!(ran >= Duration::from_secs(20), "20 ms at 1000x is at least 20 s: {ran:?}");
        clock.advance(Duration::from_secs(7 * 86_400));
        assert!(clock.now().duration_since(start).unwrap() >= Duration::from_secs(7 * 86_400 + 20));
    }
}
