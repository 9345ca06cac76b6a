//! Progress of long erase work: bars per disk on a terminal, JSON lines otherwise.
//!
//! Workers call the sink from their own threads; JSON lines are rate-limited to one per
//! disk per second (plus every phase change and the verdict) so logs stay readable.

use std::collections::HashMap;
use std::io::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use metal_protocol::wipe::{DiskWipe, WipeResult};

/// Receives progress from disk workers.
pub trait ProgressSink: Sync {
    /// A disk starts a phase of `total` bytes (0 when unknown).
    fn phase(&self, disk: &str, phase: &str, total: u64);
    /// Bytes done so far in the current phase.
    fn advance(&self, disk: &str, done: u64);
    /// The disk's verdict.
    fn finish(&self, disk: &str, wipe: &DiskWipe);
}

/// Discards progress (library callers that only want the result).
#[derive(Debug, Default)]
pub struct NoProgress;

impl ProgressSink for NoProgress {
    fn phase(&self, _: &str, _: &str, _: u64) {}
    fn advance(&self, _: &str, _: u64) {}
    fn finish(&self, _: &str, _: &DiskWipe) {}
}

/// One progress bar per disk.
#[derive(Debug, Default)]
pub struct TerminalProgress {
    bars: MultiProgress,
    by_disk: Mutex<HashMap<String, ProgressBar>>,
}

impl TerminalProgress {
    fn bar(&self, disk: &str) -> ProgressBar {
        let mut bars = self.by_disk.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        bars.entry(disk.to_owned())
            .or_insert_with(|| {
                let bar = self.bars.add(ProgressBar::new(0));
                bar.set_style(
                    ProgressStyle::with_template(
                        "{prefix:>10} {msg:<12} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
                );
                bar.set_prefix(disk.to_owned());
                bar
            })
            .clone()
    }
}

impl ProgressSink for TerminalProgress {
    fn phase(&self, disk: &str, phase: &str, total: u64) {
        let bar = self.bar(disk);
        bar.set_message(phase.to_owned());
        bar.set_length(total);
        bar.reset();
    }

    fn advance(&self, disk: &str, done: u64) {
        self.bar(disk).set_position(done);
    }

    fn finish(&self, disk: &str, wipe: &DiskWipe) {
        let verdict = match wipe.result {
            WipeResult::Pass => "erased+verified".to_owned(),
            WipeResult::Fail => format!("FAILED: {}", wipe.failure.as_deref().unwrap_or("unknown")),
        };
        self.bar(disk).finish_with_message(verdict);
    }
}

/// JSON lines on stderr: `{"disk":..,"phase":..,"done":..,"total":..}`.
#[derive(Debug, Default)]
pub struct JsonProgress {
    state: Mutex<HashMap<String, (String, u64, Instant)>>,
}

impl JsonProgress {
    fn emit(value: serde_json::Value) {
        let mut err = std::io::stderr().lock();
        let _ = writeln!(err, "{value}");
    }
}

impl ProgressSink for JsonProgress {
    fn phase(&self, disk: &str, phase: &str, total: u64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.insert(disk.to_owned(), (phase.to_owned(), total, Instant::now()));
        Self::emit(serde_json::json!({"disk": disk, "phase": phase, "done": 0, "total": total}));
    }

    fn advance(&self, disk: &str, done: u64) {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((phase, total, last)) = state.get_mut(disk)
            && (last.elapsed() >= Duration::from_secs(1) || done == *total)
        {
            *last = Instant::now();
            Self::emit(serde_json::json!({"disk": disk, "phase": phase, "done": done, "total": total}));
        }
    }

    fn finish(&self, disk: &str, wipe: &DiskWipe) {
        Self::emit(serde_json::json!({
            "disk": disk,
            "phase": "done",
            "result": wipe.result,
            "method": wipe.method,
            "firstBadOffset": wipe.first_bad_offset,
            "failure": wipe.failure,
        }));
    }
}
