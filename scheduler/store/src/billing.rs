//! Billing rows: device health history, billable allocations, meter records, and usage
//! queries (the meter pass that writes them is `capacity::billing::emit`).
//!
//! A meter record's id is `reservation/node/meter/windowStart`, so emitting a window twice
//! never bills twice; each reservation also keeps a `billed_until` watermark so a pass only
//! looks at new windows.

use std::collections::BTreeMap;

use serde_json::json;
use time::OffsetDateTime;

use crate::page::{Keyset, Order};
use crate::{Conn, DbResult, events};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::node::Device;
use metal_types::model::reservation::ReservationCreate;
use metal_types::model::usage::UsageRecord;
use metal_types::page::{Page, Paged};

/// Records the node's platform-trusted healthy GPU count as of `at`.
pub fn record_health(
    conn: &mut dyn Conn,
    node: &str,
    generation: i64,
    devices: &[Device],
    at: OffsetDateTime,
) -> DbResult<()> {
    let gpus = devices.iter().filter(|d| d.class == "gpu" && d.healthy).count();
    conn.execute(
        "INSERT INTO device_health (node_id, generation, at, gpus_healthy) VALUES ($1, $2, $3, $4)",
        &[&node, &generation, &to_millis(at), &i64::try_from(gpus).unwrap_or(i64::MAX)],
    )?;
    Ok(())
}

/// Healthy GPUs of a node at a time (0 before it was enrolled).
pub fn healthy_gpus_at(conn: &mut dyn Conn, node: &str, at: i64) -> DbResult<i64> {
    let row = conn.query_opt(
        "SELECT gpus_healthy FROM device_health WHERE node_id = $1 AND at <= $2 ORDER BY at DESC, generation DESC LIMIT 1",
        &[&node, &at],
    )?;
    row.map_or(Ok(0), |r| r.get("gpus_healthy"))
}

/// A reservation's allocation on one node with billable time not yet metered.
#[derive(Debug)]
pub struct Billable {
    /// The reservation.
    pub reservation: String,
    /// Its tenant.
    pub tenant: String,
    /// The node.
    pub node: String,
    /// Billable from (milliseconds): its binding for a node binding, its start otherwise.
    pub from: i64,
    /// Billable to: the allocation's end.
    pub to: i64,
    /// The reservation's watermark: meters were emitted up to here.
    pub billed_until: Option<i64>,
}

/// Allocations of active, ended or cancelled reservations that are not billed to their end.
pub fn billable(conn: &mut dyn Conn) -> DbResult<Vec<Billable>> {
    let rows = conn.query(
        "SELECT r.id, r.tenant_id, r.request, r.start_at, r.bound_at, r.billed_until, a.node_id, a.end_at \
         FROM reservations r JOIN allocations a ON a.reservation_id = r.id \
         WHERE r.state IN ('active', 'ended', 'cancelled') AND (r.billed_until IS NULL OR r.billed_until < a.end_at) \
         ORDER BY r.id, a.node_id",
        &[],
    )?;
    let mut billable = Vec::new();
    for row in rows {
        let request: ReservationCreate = row.json("request")?;
        let bound_at: Option<i64> = row.get("bound_at")?;
        // Node bindings bill from the moment they were bound; others from their start.
        let from = if request.binding.is_some() { bound_at } else { Some(row.get("start_at")?) };
        let Some(from) = from else { continue };
        billable.push(Billable {
            reservation: row.get("id")?,
            tenant: row.get("tenant_id")?,
            node: row.get("node_id")?,
            from,
            to: row.get("end_at")?,
            billed_until: row.get("billed_until")?,
        });
    }
    Ok(billable)
}

/// Moves a reservation's billing watermark.
pub fn set_billed_until(conn: &mut dyn Conn, reservation: &str, mark: i64) -> DbResult<()> {
    conn.execute("UPDATE reservations SET billed_until = $1 WHERE id = $2", &[&mark, &reservation])?;
    Ok(())
}

/// Writes one meter record (and its event) unless a record with its id exists: 1 when written.
pub fn insert_meter(
    conn: &mut dyn Conn,
    lease: &Billable,
    meter: &str,
    window_start: i64,
    window_end: i64,
    quantity: f64,
    now: OffsetDateTime,
) -> DbResult<usize> {
    let id = format!("{}/{}/{meter}/{window_start}", lease.reservation, lease.node);
    if conn.query_opt("SELECT id FROM meters WHERE id = $1", &[&id])?.is_some() {
        return Ok(0);
    }
    conn.execute(
        "INSERT INTO meters (id, tenant_id, reservation_id, meter, window_start, window_end, quantity, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[&id, &lease.tenant, &lease.reservation, &meter, &window_start, &window_end, &quantity, &to_millis(now)],
    )?;
    events::append(
        conn,
        "billing.metered",
        &format!("reservation/{}", lease.reservation),
        Some(&lease.tenant),
        &json!({"meter": meter, "node": lease.node, "windowStart": metal_types::clock::to_rfc3339(from_millis(window_start)), "quantity": quantity}),
        now,
    )?;
    Ok(1)
}

/// A page of the tenant's meter records whose window starts in `[from, to)`, oldest
/// window first.
pub fn usage(
    conn: &mut dyn Conn,
    tenant: &str,
    (from, to): (OffsetDateTime, OffsetDateTime),
    page: &Page,
) -> Result<Paged<UsageRecord>, ApiError> {
    let mut select = Keyset::new("id, reservation_id, meter, window_start, window_end, quantity", "meters");
    select
        .and("tenant_id = {}", &tenant)
        .and("window_start >= {}", &to_millis(from))
        .and("window_start < {}", &to_millis(to));
    select.read(conn, &[("window_start", Order::Asc), ("id", Order::Asc)], page, |_, r| {
        Ok(UsageRecord {
            id: r.get("id")?,
            reservation_id: r.get("reservation_id")?,
            meter: r.get("meter")?,
            window_start: from_millis(r.get("window_start")?),
            window_end: from_millis(r.get("window_end")?),
            quantity: r.get("quantity")?,
        })
    })
}

/// The sum per meter of the tenant's records whose window starts in `[from, to)`.
pub fn usage_totals(
    conn: &mut dyn Conn,
    tenant: &str,
    (from, to): (OffsetDateTime, OffsetDateTime),
) -> DbResult<BTreeMap<String, f64>> {
    conn.query(
        "SELECT meter, SUM(quantity) AS total FROM meters \
         WHERE tenant_id = $1 AND window_start >= $2 AND window_start < $3 GROUP BY meter",
        &[&tenant, &to_millis(from), &to_millis(to)],
    )?
    .iter()
    .map(|r| Ok((r.get("meter")?, r.get("total")?)))
    .collect()
}
