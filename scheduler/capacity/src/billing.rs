//! Billing: the windows (pure arithmetic over a lease's billable interval) and the meter
//! pass that writes them as meter records.
//!
//! Windows sit on hour boundaries (UTC). A lease is billable from the moment it counts
//! (bound, for node bindings; its start otherwise) until its allocation ends. Partial hours
//! are billed pro rata to the millisecond: a lease bound at 10:30 and released at 13:15 bills
//! 0.5 + 1 + 1 + 0.25 node-hours. The GPU meter multiplies the same fraction by the GPUs
//! healthy (platform-trusted health) at the start of the window, or at the start of billing
//! for the first, partial window.

use time::OffsetDateTime;

use metal_store::{Conn, DbResult, Store, billing};
use metal_types::clock::{Clock, to_millis};
use metal_types::error::ApiError;

/// One hour in milliseconds.
pub const HOUR_MS: i64 = 3_600_000;

/// Writes every meter record that is due. Returns how many were written.
pub async fn bill_once(store: &Store, clock: &dyn Clock) -> Result<usize, ApiError> {
    let now = clock.now();
    let written = store.write(move |tx| emit(tx, now)).await?;
    if written > 0 {
        store.events_committed();
    }
    Ok(written)
}

/// Node-hours per node of a lease.
pub const NODE_HOURS: &str = "node.metal.hours";
/// GPU-hours of healthy GPUs.
pub const GPU_HOURS: &str = "gpu.hours";

/// The part of one hourly window a lease covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowShare {
    /// The window's start (an hour boundary).
    pub window_start: i64,
    /// Where billing in this window starts (window start, or the lease's start).
    pub from: i64,
    /// Where billing in this window ends (window end, or the lease's end).
    pub to: i64,
}

impl WindowShare {
    /// Billed fraction of an hour.
    pub fn hours(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // at most one hour of milliseconds: exact in f64
        let fraction = (self.to - self.from) as f64 / HOUR_MS as f64;
        fraction
    }
}

/// Windows of `[billable_from, billable_to)` that are complete by `now` (the window has
/// ended, or the lease has), starting after `billed_until` (exclusive watermark).
pub fn due_windows(billable_from: i64, billable_to: i64, billed_until: Option<i64>, now: i64) -> Vec<WindowShare> {
    let mut windows = Vec::new();
    let mut window_start = billable_from.div_euclid(HOUR_MS) * HOUR_MS;
    while window_start < billable_to {
        let window_end = window_start + HOUR_MS;
        let share =
            WindowShare { window_start, from: billable_from.max(window_start), to: billable_to.min(window_end) };
        if share.to > now {
            break;
        }
        if billed_until.is_none_or(|done| share.to > done) && share.to > share.from {
            windows.push(share);
        }
        window_start = window_end;
    }
    windows
}

/// Emits every meter record that is due at `now`. Returns how many records were written.
pub fn emit(conn: &mut dyn Conn, now: OffsetDateTime) -> DbResult<usize> {
    let at = to_millis(now);
    let billable = billing::billable(conn)?;
    let mut written = 0;
    let mut watermarks: Vec<(String, i64)> = Vec::new();
    for lease in &billable {
        for window in due_windows(lease.from, lease.to, lease.billed_until, at) {
            let hours = window.hours();
            let gpus = billing::healthy_gpus_at(conn, &lease.node, window.from)?;
            #[allow(clippy::cast_precision_loss)] // GPU counts are small
            let gpu_hours = gpus as f64 * hours;
            for (meter, quantity) in [(NODE_HOURS, hours), (GPU_HOURS, gpu_hours)] {
                if quantity > 0.0 {
                    written +=
                        billing::insert_meter(conn, lease, meter, window.window_start, window.to, quantity, now)?;
                }
            }
            match watermarks.iter_mut().find(|(r, _)| *r == lease.reservation) {
                Some((_, mark)) => *mark = (*mark).max(window.to),
                None => watermarks.push((lease.reservation.clone(), window.to)),
            }
        }
    }
    for (reservation, mark) in watermarks {
        billing::set_billed_until(conn, &reservation, mark)?;
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T10: i64 = 1_796_119_200_000; // 2026-12-01 10:00:00 UTC

    #[test]
    fn a_lease_starting_and_ending_mid_hour_bills_pro_rata() {
        let from = T10 + 30 * 60_000; // 10:30
        let to = T10 + 3 * HOUR_MS + 15 * 60_000; // 13:15
        let windows = due_windows(from, to, None, to + 1);
        let hours: Vec<f64> = windows.iter().map(WindowShare::hours).collect();
        assert_eq!(hours, [0.5, 1.0, 1.0, 0.25]);
        assert_eq!(windows[0].window_start, T10);
        assert_eq!(windows[0].from, from);
    }

    #[test]
    fn only_complete_windows_are_due_and_the_watermark_skips_billed_ones() {
        let from = T10 + 30 * 60_000;
        let to = T10 + 10 * HOUR_MS;
        let now = T10 + 2 * HOUR_MS + 5 * 60_000; // 12:05: windows ending 11:00 and 12:00 are done
        let due = due_windows(from, to, None, now);
        assert_eq!(due.len(), 2);
        let again = due_windows(from, to, Some(due[1].to), now);
        assert!(again.is_empty(), "nothing is due twice");
        let later = due_windows(from, to, Some(due[1].to), T10 + 4 * HOUR_MS);
        assert_eq!(later.iter().map(|w| w.window_start).collect::<Vec<_>>(), [T10 + 2 * HOUR_MS, T10 + 3 * HOUR_MS]);
    }
}
