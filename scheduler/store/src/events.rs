//! The outbox: `append` inside the writing transaction, `after` to read in order,
//! `newest_of` for a lessee's view of its node, `prune` for retention (with the mark a
//! resuming reader is checked against, `pruned_through`).

use time::OffsetDateTime;

use crate::db::ToValue;
use crate::{Conn, DbResult};
use metal_types::clock::{from_millis, to_millis};
use metal_types::model::event::Event;

/// Appends an event in the caller's transaction and returns its sequence number. The
/// counter row's UPDATE serialises appenders, so sequence numbers have no gaps or reuse.
pub fn append(
    conn: &mut dyn Conn,
    kind: &str,
    subject: &str,
    tenant_id: Option<&str>,
    data: &serde_json::Value,
    at: OffsetDateTime,
) -> DbResult<i64> {
    let seq: i64 = conn
        .query_one("UPDATE counters SET value = value + 1 WHERE name = 'events' RETURNING value", &[])?
        .get("value")?;
    conn.execute(
        "INSERT INTO events (seq, kind, subject, tenant_id, data, at) VALUES ($1, $2, $3, $4, $5, $6)",
        &[&seq, &kind, &subject, &tenant_id, &data.to_string(), &to_millis(at)],
    )?;
    Ok(seq)
}

/// Events after `seq`, oldest first, at most `limit`; only `tenant`'s and only those about
/// `subject` when given.
pub fn after(
    conn: &mut dyn Conn,
    seq: i64,
    limit: i64,
    tenant: Option<&str>,
    subject: Option<&str>,
) -> DbResult<Vec<Event>> {
    let mut sql = String::from("SELECT seq, kind, subject, tenant_id, data, at FROM events WHERE seq > $1");
    let mut params: Vec<&dyn ToValue> = vec![&seq];
    for (column, value) in [("tenant_id", &tenant), ("subject", &subject)] {
        if let Some(value) = value {
            params.push(value);
            sql.push_str(&format!(" AND {column} = ${}", params.len()));
        }
    }
    params.push(&limit);
    sql.push_str(&format!(" ORDER BY seq LIMIT ${}", params.len()));
    conn.query(&sql, &params)?.iter().map(event_from_row).collect()
}

/// `tenant`'s events about `subject` since `since`, newest first, at most `limit`.
pub fn newest_of(
    conn: &mut dyn Conn,
    tenant: &str,
    subject: &str,
    since: OffsetDateTime,
    limit: i64,
) -> DbResult<Vec<Event>> {
    conn.query(
        "SELECT seq, kind, subject, tenant_id, data, at FROM events WHERE subject = $1 AND tenant_id = $2 AND at >= $3 \
         ORDER BY seq DESC LIMIT $4",
        &[&subject, &tenant, &to_millis(since), &limit],
    )?
    .iter()
    .map(event_from_row)
    .collect()
}

fn event_from_row(row: &crate::Row) -> DbResult<Event> {
    Ok(Event {
        seq: row.get("seq")?,
        kind: row.get("kind")?,
        subject: row.get("subject")?,
        tenant_id: row.get("tenant_id")?,
        data: row.json("data")?,
        at: from_millis(row.get("at")?),
    })
}

/// The newest sequence number.
pub fn last_seq(conn: &mut dyn Conn) -> DbResult<i64> {
    conn.query_one("SELECT value FROM counters WHERE name = 'events'", &[])?.get("value")
}

/// The sequence number of the last event pruned (0: none yet). A reader resuming after an
/// older one has missed events.
pub fn pruned_through(conn: &mut dyn Conn) -> DbResult<i64> {
    conn.query_one("SELECT value FROM counters WHERE name = 'events_pruned'", &[])?.get("value")
}

/// Deletes up to `batch` of the oldest events that happened before `before`, in sequence
/// order, and moves the pruned mark past them. Returns how many went.
pub fn prune(conn: &mut dyn Conn, before: OffsetDateTime, batch: i64) -> DbResult<u64> {
    let oldest = conn.query("SELECT seq, at FROM events ORDER BY seq LIMIT $1", &[&batch])?;
    let cutoff = to_millis(before);
    let mut through = None;
    for row in &oldest {
        if row.get::<i64>("at")? >= cutoff {
            break;
        }
        through = Some(row.get::<i64>("seq")?);
    }
    let Some(through) = through else { return Ok(0) };
    let pruned = conn.execute("DELETE FROM events WHERE seq <= $1", &[&through])?;
    conn.execute("UPDATE counters SET value = $1 WHERE name = 'events_pruned' AND value < $1", &[&through])?;
    Ok(pruned)
}
