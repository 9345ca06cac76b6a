//! Work rows, the only contract between the capacity side and the metal side: each side
//! inserts a row for the other inside the transaction that made the change (capacity asks
//! metal to start or end a lease; metal tells capacity a lease bound, was refused or
//! failed), typed by `metal_types::work`. A row's id is the request's unique key, so asking twice is asking once, and a
//! row is taken by the compare-and-set that marks it done, inside the transaction that
//! handles it: handled exactly once, whichever replica gets there first.

use serde_json::Value;
use time::OffsetDateTime;

use tracing::{info, warn};

use crate::db::to_json;
use crate::{Conn, DbResult, Store};
use metal_types::clock::{Clock, from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::work::{CapacityNotice, MetalWork};

/// Whose queue a row is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Work for the metal side (nodes, workflows, BMCs).
    Metal,
    /// Notices for the capacity side (reservations, allocations, billing).
    Capacity,
}

impl Side {
    fn table(self) -> &'static str {
        match self {
            Side::Metal => "metal_work",
            Side::Capacity => "capacity_work",
        }
    }
}

/// One queued row.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkItem {
    /// The request's unique key.
    pub id: String,
    /// What is asked, e.g. `lease.start`.
    pub kind: String,
    /// Its parameters.
    pub payload: Value,
    /// When it was asked.
    pub created_at: OffsetDateTime,
}

/// Asks the metal side for `work`; false when its key was queued before (by this or another
/// replica).
pub fn ask_metal(conn: &mut dyn Conn, work: &MetalWork, now: OffsetDateTime) -> DbResult<bool> {
    enqueue(conn, Side::Metal, &work.key(), work.kind(), &work.payload(), now)
}

/// Tells the capacity side `notice`; false when its key was queued before.
pub fn notify_capacity(conn: &mut dyn Conn, notice: &CapacityNotice, now: OffsetDateTime) -> DbResult<bool> {
    enqueue(conn, Side::Capacity, &notice.key(), notice.kind(), &notice.payload(), now)
}

fn enqueue(
    conn: &mut dyn Conn,
    side: Side,
    id: &str,
    kind: &str,
    payload: &Value,
    now: OffsetDateTime,
) -> DbResult<bool> {
    crate::db::insert_unique(
        conn,
        &format!(
            "INSERT INTO {} (id, kind, payload, state, created_at) VALUES ($1, $2, $3, 'queued', $4)",
            side.table()
        ),
        &[&id, &kind, &to_json(payload)?, &to_millis(now)],
    )
}

/// The oldest queued rows of a side.
pub fn queued(conn: &mut dyn Conn, side: Side, limit: i64) -> DbResult<Vec<WorkItem>> {
    conn.query(
        &format!(
            "SELECT id, kind, payload, created_at FROM {} WHERE state = 'queued' ORDER BY created_at, id LIMIT $1",
            side.table()
        ),
        &[&limit],
    )?
    .iter()
    .map(|row| {
        Ok(WorkItem {
            id: row.get("id")?,
            kind: row.get("kind")?,
            payload: row.json("payload")?,
            created_at: from_millis(row.get("created_at")?),
        })
    })
    .collect()
}

/// Takes a queued row: marks it done, before anything acts on it. False when someone took it
/// first: the caller must then do nothing with it. On PostgreSQL the row stays locked by the
/// caller's transaction until it commits (another replica's take waits, then finds it done),
/// and a transaction that fails after the take leaves it queued.
pub fn take(conn: &mut dyn Conn, side: Side, id: &str, now: OffsetDateTime) -> DbResult<bool> {
    let n = conn.execute(
        &format!("UPDATE {} SET state = 'done', done_at = $1 WHERE id = $2 AND state = 'queued'", side.table()),
        &[&to_millis(now), &id],
    )?;
    Ok(n == 1)
}

/// Records what handling a taken row did.
pub fn set_result(conn: &mut dyn Conn, side: Side, id: &str, result: &str) -> DbResult<()> {
    conn.execute(&format!("UPDATE {} SET result = $1 WHERE id = $2", side.table()), &[&result, &id])?;
    Ok(())
}

/// Handles every queued work row of `side`, each in the one change that takes it and acts on
/// it (`handle` says what it did); a row whose handling fails stays queued. Returns how many
/// were handled.
pub async fn drain<H>(store: &Store, clock: &dyn Clock, side: Side, handle: H) -> Result<usize, ApiError>
where
    H: Fn(&mut dyn Conn, &WorkItem, OffsetDateTime) -> Result<String, ApiError> + Clone + Send + 'static,
{
    let items = store.read(move |tx| queued(tx, side, 64)).await?;
    let mut handled = 0;
    for item in items {
        let (id, now, handle) = (item.id.clone(), clock.now(), handle.clone());
        let outcome = store
            .change(move |tx| {
                // Taken first: a row another replica took meanwhile is left alone. (Handled
                // first, a replica that lost the take still committed what it did: on
                // PostgreSQL a lease start another replica had begun was refused, and its
                // reservation failed. metal-sim's chaos with two replicas found it.)
                if !take(tx, side, &item.id, now)? {
                    return Ok(None);
                }
                let result = handle(tx, &item, now)?;
                set_result(tx, side, &item.id, &result)?;
                Ok(Some(result))
            })
            .await;
        match outcome {
            Ok(Some(result)) => {
                info!(work = %id, ?side, %result, "work handled");
                handled += 1;
            }
            Ok(None) => {}
            Err(e) => warn!(work = %id, ?side, error = %e, "work failed; it stays queued"),
        }
    }
    Ok(handled)
}
