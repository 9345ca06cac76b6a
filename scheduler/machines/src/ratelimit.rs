//! Token buckets per key: per client address for the unauthenticated boot endpoints, per
//! lease for what a lessee does to its machine. Each key may burst `per_minute` requests
//! and earns them back at `per_minute` a minute.

use std::collections::HashMap;
use std::fmt::Display;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::Instant;

use metal_types::error::ApiError;

/// Buckets above this many keys are pruned of the full ones.
const MAX_TRACKED: usize = 65_536;

/// Token buckets per key (a client address by default).
#[derive(Debug)]
pub struct RateLimiter<K = IpAddr> {
    per_minute: f64,
    /// What is limited, for the refusal: `boot requests from`, `lessee actions on lease`.
    what: &'static str,
    buckets: Mutex<HashMap<K, (f64, Instant)>>,
}

impl<K: Hash + Eq + Display> RateLimiter<K> {
    /// `per_minute` requests a minute per key, with a burst of as many; `what` names them
    /// in the refusal ("too many {what} {key}").
    pub fn new(per_minute: u32, what: &'static str) -> Self {
        Self { per_minute: f64::from(per_minute.max(1)), what, buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one request from `key`'s bucket, or says when to come back.
    pub fn check(&self, key: K) -> Result<(), ApiError> {
        self.check_at(key, Instant::now())
    }

    fn check_at(&self, key: K, now: Instant) -> Result<(), ApiError> {
        let rate = self.per_minute / 60.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if buckets.len() >= MAX_TRACKED {
            let full = self.per_minute;
            buckets.retain(|_, (tokens, at)| *tokens + now.duration_since(*at).as_secs_f64() * rate < full);
        }
        let named = format!("too many {} {key}: {} a minute are allowed", self.what, self.per_minute);
        let (tokens, at) = buckets.entry(key).or_insert((self.per_minute, now));
        let available = (*tokens + now.duration_since(*at).as_secs_f64() * rate).min(self.per_minute);
        *at = now;
        if available >= 1.0 {
            *tokens = available - 1.0;
            Ok(())
        } else {
            *tokens = available;
            let wait = ((1.0 - available) / rate).ceil();
            Err(ApiError::RateLimited(format!("{named}; retry in {wait} s")))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn bursts_then_refills_per_address() {
        let limiter = RateLimiter::new(3, "boot requests from");
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let t0 = Instant::now();
        for _ in 0..3 {
            limiter.check_at(a, t0).unwrap();
        }
        let err = limiter.check_at(a, t0).unwrap_err();
        assert!(
            matches!(err, ApiError::RateLimited(_))
                && err
                    .to_string()
                    .contains("too many boot requests from 10.0.0.1: 3 a minute are allowed; retry in 20 s"),
            "{err}"
        );
        limiter.check_at(b, t0).unwrap();
        assert!(limiter.check_at(a, t0 + Duration::from_secs(19)).is_err());
        limiter.check_at(a, t0 + Duration::from_secs(40)).unwrap();
    }
}
