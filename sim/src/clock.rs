//! The simulation's clock: real time multiplied by a speed, plus jumps. It is installed as
//! the process clock (`metal_clock`), so the scheduler, the certificates it issues, the TLS
//! checks and the ramdisk code all read the same "now", however fast it runs.
//!
//! It lives in a small file that every process of a site maps shared (the site and, under
//! `chaos --kill`, the scheduler replicas it starts and kills): the start, the speed, the
//! moment it started on the machine's monotonic clock, and the jumps so far. A jump one
//! process makes is seen by the others at once, and a replica started again after a
//! `kill -9` reads the clock where the site has it.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use anyhow::{Context as _, ensure};

/// The file's fields, each a native-endian `u64` word (the file never leaves this machine).
const START_NANOS: usize = 0;
const SPEED_BITS: usize = 1;
const MONOTONIC_START: usize = 2;
const JUMPED_NANOS: usize = 3;
const WORDS: usize = 4;
const LEN: usize = WORDS * 8;

/// Real time times `speed`, from `start`, plus every jump; shared through a mapped file.
#[derive(Debug)]
pub struct SimClock {
    map: *mut AtomicU64,
    _file: File,
}

// SAFETY: the mapping is only read and written through atomics, and lives as long as the clock.
unsafe impl Send for SimClock {}
// SAFETY: as above: every access is an atomic load or add.
unsafe impl Sync for SimClock {}

impl Drop for SimClock {
    fn drop(&mut self) {
        // SAFETY: `map` is the LEN-byte mapping `open` made, not used after this.
        unsafe { libc::munmap(self.map.cast(), LEN) };
    }
}

/// The machine's monotonic clock (the same for every process on it), in nanoseconds.
fn monotonic_nanos() -> u64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec, which `now` is.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut now) };
    u64::try_from(now.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(now.tv_nsec).unwrap_or(0)
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

impl SimClock {
    /// A clock reading `start` now and running `speed` times as fast as real time, kept in
    /// `path` (created, or replaced).
    pub fn create(path: &Path, start: SystemTime, speed: f64) -> anyhow::Result<SimClock> {
        let since_epoch = start.duration_since(SystemTime::UNIX_EPOCH).context("a start before 1970")?;
        let mut words = [0u64; WORDS];
        words[START_NANOS] = nanos(since_epoch);
        words[SPEED_BITS] = speed.max(0.0).to_bits();
        words[MONOTONIC_START] = monotonic_nanos();
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
        std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))?;
        SimClock::open(path)
    }

    /// The clock another process of the site created in `path`.
    pub fn open(path: &Path) -> anyhow::Result<SimClock> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .with_context(|| format!("opening the site's clock {}", path.display()))?;
        let len = file.metadata()?.len();
        ensure!(len == LEN as u64, "{} is not a simulation clock ({len} bytes, not {LEN})", path.display());
        // SAFETY: a fresh shared mapping of the file's LEN bytes; the kernel picks the address.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                std::os::fd::AsRawFd::as_raw_fd(&file),
                0,
            )
        };
        ensure!(map != libc::MAP_FAILED, "mapping {}: {}", path.display(), std::io::Error::last_os_error());
        Ok(SimClock { map: map.cast(), _file: file })
    }

    fn word(&self, index: usize) -> &AtomicU64 {
        assert!(index < WORDS, "word {index} of a {WORDS}-word clock");
        // SAFETY: index < WORDS (asserted), the mapping is LEN bytes, page-aligned (so 8-byte aligned),
        // and lives as long as `self`.
        unsafe { &*self.map.add(index) }
    }

    /// How many simulated seconds pass per real second.
    pub fn speed(&self) -> f64 {
        f64::from_bits(self.word(SPEED_BITS).load(Ordering::Relaxed))
    }

    /// Moves the clock forward at once (a 7-day lease in an instant), for every process of
    /// the site.
    pub fn advance(&self, by: Duration) {
        self.word(JUMPED_NANOS).fetch_add(nanos(by), Ordering::SeqCst);
    }
}

impl metal_clock::Source for SimClock {
    fn now(&self) -> SystemTime {
        let real = monotonic_nanos().saturating_sub(self.word(MONOTONIC_START).load(Ordering::Relaxed));
        let elapsed = Duration::from_nanos(real).mul_f64(self.speed());
        let start = Duration::from_nanos(self.word(START_NANOS).load(Ordering::Relaxed));
        let jumped = Duration::from_nanos(self.word(JUMPED_NANOS).load(Ordering::SeqCst));
        SystemTime::UNIX_EPOCH + start + elapsed + jumped
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

/// A JSON value holding RFC 3339 text (as the API writes times) as a time.
pub fn at(value: &serde_json::Value) -> anyhow::Result<time::OffsetDateTime> {
    parse(value.as_str().with_context(|| format!("not a time: {value}"))?)
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
    fn runs_at_its_speed_jumps_forward_and_reads_the_same_through_a_second_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("clock");
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let clock = SimClock::create(&path, start, 1000.0).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let ran = clock.now().duration_since(start).unwrap();
        assert!(ran >= Duration::from_secs(20), "20 ms at 1000x is at least 20 s: {ran:?}");
        let other = SimClock::open(&path).unwrap();
        assert_eq!(other.speed(), 1000.0);
        clock.advance(Duration::from_secs(7 * 86_400));
        let seen = other.now().duration_since(start).unwrap();
        assert!(seen >= Duration::from_secs(7 * 86_400 + 20), "the jump shows in the other mapping: {seen:?}");
        let (first, second) = (clock.now(), other.now());
        assert!(second.duration_since(first).unwrap() < Duration::from_secs(1), "one clock: {first:?} {second:?}");

        std::fs::write(dir.path().join("short"), b"1234").unwrap();
        let refused = SimClock::open(&dir.path().join("short")).unwrap_err().to_string();
        assert!(refused.contains("not a simulation clock"), "{refused}");
    }
}
