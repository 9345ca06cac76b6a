//! The one clock the service reads. Real by default; tests (and the simulated site) use a
//! manual clock they advance, so billing windows and deadlines run in milliseconds.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use time::OffsetDateTime;

/// A source of "now".
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time (UTC).
    fn now(&self) -> OffsetDateTime;
}

/// The process's wall clock (`metal_clock`): the system's, or the one a simulation installed.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        metal_clock::now_utc()
    }
}

/// A clock that moves only when told to.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<OffsetDateTime>>,
}

impl ManualClock {
    /// A manual clock starting at `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        Self { now: Arc::new(Mutex::new(start)) }
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        let mut now = self.now.lock().unwrap_or_else(|p| p.into_inner());
        *now += by;
    }

    /// Sets the clock.
    pub fn set(&self, to: OffsetDateTime) {
        *self.now.lock().unwrap_or_else(|p| p.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.now.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Milliseconds since the Unix epoch: how times are stored.
pub fn to_millis(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(i64::MAX)
}

/// The inverse of [`to_millis`].
pub fn from_millis(ms: i64) -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).unwrap_or(OffsetDateTime::UNIX_EPOCH)
}

/// `t` as RFC 3339 text (what the API shows).
pub fn to_rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = OffsetDateTime::from_unix_timestamp(1_800_000_000).unwrap();
        let clock = ManualClock::new(start);
        assert_eq!(clock.now(), start);
        clock.advance(Duration::from_secs(7200));
        assert_eq!(clock.now() - start, time::Duration::hours(2));
        assert_eq!(from_millis(to_millis(clock.now())), clock.now());
    }
}
