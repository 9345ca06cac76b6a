//! The wall clock every metal crate reads: the system's, unless a simulation installed its
//! own for the whole process. metal-sim runs the scheduler and hundreds of simulated
//! machines (the real ramdisk, erase and firmware code) in one process under a clock that
//! runs faster than real time; certificates the scheduler issues at "sim now" must be valid
//! to the ramdisk code that checks them, and that code cannot be handed a clock through every
//! call. So there is one source per process, installed at most once, before anything reads
//! it; production binaries never install one and read the system clock.
//!
//! With the `rustls` feature, [`RustlsTime`] makes TLS certificate checks use it too.

use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use time::OffsetDateTime;

/// A source of wall-clock time for the whole process.
pub trait Source: Send + Sync + std::fmt::Debug {
    /// The current time.
    fn now(&self) -> SystemTime;
}

static SOURCE: OnceLock<Arc<dyn Source>> = OnceLock::new();

/// A clock was already installed in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AlreadyInstalled;

impl std::fmt::Display for AlreadyInstalled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a clock is already installed in this process")
    }
}

impl std::error::Error for AlreadyInstalled {}

/// Makes `source` the clock of this process, for good.
pub fn install(source: Arc<dyn Source>) -> Result<(), AlreadyInstalled> {
    SOURCE.set(source).map_err(|_| AlreadyInstalled)
}

/// The current time: the installed source's, else the system's.
pub fn now() -> SystemTime {
    SOURCE.get().map_or_else(SystemTime::now, |source| source.now())
}

/// [`now`] as a UTC date-time.
pub fn now_utc() -> OffsetDateTime {
    OffsetDateTime::from(now())
}

/// The process clock as rustls' time provider: certificate validity in TLS handshakes is
/// checked against [`now`].
#[cfg(feature = "rustls")]
#[derive(Debug, Clone, Copy, Default)]
pub struct RustlsTime;

#[cfg(feature = "rustls")]
impl rustls::time_provider::TimeProvider for RustlsTime {
    fn current_time(&self) -> Option<rustls::pki_types::UnixTime> {
        Some(rustls::pki_types::UnixTime::since_unix_epoch(now().duration_since(SystemTime::UNIX_EPOCH).ok()?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[derive(Debug)]
    struct Fixed(SystemTime);

    impl Source for Fixed {
        fn now(&self) -> SystemTime {
            self.0
        }
    }

    #[test]
    fn the_system_clock_until_a_source_is_installed_then_that_source_for_good() {
        let system = now();
        let drift = SystemTime::now().duration_since(system).unwrap();
        assert!(drift < Duration::from_secs(5), "the system clock before any install: {drift:?}");
        let later = SystemTime::now() + Duration::from_secs(86_400 * 30);
        install(Arc::new(Fixed(later))).unwrap();
        assert_eq!(now(), later);
        assert_eq!(now_utc(), OffsetDateTime::from(later));
        assert_eq!(install(Arc::new(Fixed(system))), Err(AlreadyInstalled));
        assert_eq!(now(), later, "the first source stays");
    }
}
