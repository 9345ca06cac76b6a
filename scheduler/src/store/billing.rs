//! Billing rows: device health history, the meter emission pass, and usage queries.
//!
//! A meter record's id is `reservation/node/meter/windowStart`, so emitting a window twice
//! never bills twice; each reservation also keeps a `billed_until` watermark so a pass only
//! looks at new windows.

use serde_json::json;
use sqlx::{AnyConnection, Row as _};
use time::OffsetDateTime;

use crate::billing::{GPU_HOURS, NODE_HOURS, due_windows};
use crate::clock::{from_millis, to_millis};
use crate::model::node::Device;
use crate::model::reservation::ReservationCreate;
use crate::model::usage::UsageRecord;
use crate::store::events;

/// Records the node's platform-trusted healthy GPU count as of `at`.
pub async fn record_health(
    conn: &mut AnyConnection,
    node: &str,
    generation: i64,
    devices: &[Device],
    at: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    let gpus = devices.iter().filter(|d| d.class == "gpu" && d.healthy).count();
    sqlx::query("INSERT INTO device_health (node_id, generation, at, gpus_healthy) VALUES ($1, $2, $3, $4)")
        .bind(node)
        .bind(generation)
        .bind(to_millis(at))
        .bind(i64::try_from(gpus).unwrap_or(i64::MAX))
        .execute(conn)
        .await?;
    Ok(())
}

/// Healthy GPUs of a node at a time (0 before it was enrolled).
pub async fn healthy_gpus_at(conn: &mut AnyConnection, node: &str, at: i64) -> Result<i64, sqlx::Error> {
    let row = sqlx::query("SELECT gpus_healthy FROM device_health WHERE node_id = $1 AND at <= $2 ORDER BY at DESC, generation DESC LIMIT 1")
        .bind(node)
        .bind(at)
        .fetch_optional(conn)
        .await?;
    row.map_or(Ok(0), |r| r.try_get(0))
}

struct Billable {
    reservation: String,
    tenant: String,
    node: String,
    from: i64,
    to: i64,
    billed_until: Option<i64>,
}

/// Emits every meter record that is due at `now`. Returns how many records were written.
pub async fn emit(conn: &mut AnyConnection, now: OffsetDateTime) -> Result<usize, sqlx::Error> {
    let at = to_millis(now);
    let rows = sqlx::query(
        "SELECT r.id, r.tenant_id, r.request, r.start_at, r.bound_at, r.billed_until, a.node_id, a.end_at \
         FROM reservations r JOIN allocations a ON a.reservation_id = r.id \
         WHERE r.state IN ('active', 'ended', 'cancelled') AND (r.billed_until IS NULL OR r.billed_until < a.end_at) \
         ORDER BY r.id, a.node_id",
    )
    .fetch_all(&mut *conn)
    .await?;
    let mut billable = Vec::new();
    for row in rows {
        let request: String = row.try_get("request")?;
        let request: ReservationCreate = serde_json::from_str(&request).map_err(crate::store::decode_err)?;
        let bound_at: Option<i64> = row.try_get("bound_at")?;
        // Node bindings bill from the moment they were bound; others from their start.
        let from = if request.binding.is_some() { bound_at } else { Some(row.try_get("start_at")?) };
        let Some(from) = from else { continue };
        billable.push(Billable {
            reservation: row.try_get("id")?,
            tenant: row.try_get("tenant_id")?,
            node: row.try_get("node_id")?,
            from,
            to: row.try_get("end_at")?,
            billed_until: row.try_get("billed_until")?,
        });
    }
    let mut written = 0;
    let mut watermarks: Vec<(String, i64)> = Vec::new();
    for lease in &billable {
        for window in due_windows(lease.from, lease.to, lease.billed_until, at) {
            let hours = window.hours();
            let gpus = healthy_gpus_at(&mut *conn, &lease.node, window.from).await?;
            #[allow(clippy::cast_precision_loss)] // GPU counts are small
            let gpu_hours = gpus as f64 * hours;
            for (meter, quantity) in [(NODE_HOURS, hours), (GPU_HOURS, gpu_hours)] {
                if quantity > 0.0 {
                    written +=
                        insert_meter(&mut *conn, lease, meter, window.window_start, window.to, quantity, now).await?;
                }
            }
            match watermarks.iter_mut().find(|(r, _)| *r == lease.reservation) {
                Some((_, mark)) => *mark = (*mark).max(window.to),
                None => watermarks.push((lease.reservation.clone(), window.to)),
            }
        }
    }
    for (reservation, mark) in watermarks {
        sqlx::query("UPDATE reservations SET billed_until = $1 WHERE id = $2")
            .bind(mark)
            .bind(&reservation)
            .execute(&mut *conn)
            .await?;
    }
    Ok(written)
}

async fn insert_meter(
    conn: &mut AnyConnection,
    lease: &Billable,
    meter: &str,
    window_start: i64,
    window_end: i64,
    quantity: f64,
    now: OffsetDateTime,
) -> Result<usize, sqlx::Error> {
    let id = format!("{}/{}/{meter}/{window_start}", lease.reservation, lease.node);
    if sqlx::query("SELECT id FROM meters WHERE id = $1").bind(&id).fetch_optional(&mut *conn).await?.is_some() {
        return Ok(0);
    }
    sqlx::query(
        "INSERT INTO meters (id, tenant_id, reservation_id, meter, window_start, window_end, quantity, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
    )
    .bind(&id)
    .bind(&lease.tenant)
    .bind(&lease.reservation)
    .bind(meter)
    .bind(window_start)
    .bind(window_end)
    .bind(quantity)
    .bind(to_millis(now))
    .execute(&mut *conn)
    .await?;
    events::append(
        conn,
        "billing.metered",
        &format!("reservation/{}", lease.reservation),
        Some(&lease.tenant),
        &json!({"meter": meter, "node": lease.node, "windowStart": from_millis(window_start).unix_timestamp(), "quantity": quantity}),
        now,
    )
    .await?;
    Ok(1)
}

/// Meter records of a tenant whose window starts in `[from, to)`.
pub async fn usage(
    conn: &mut AnyConnection,
    tenant: &str,
    from: OffsetDateTime,
    to: OffsetDateTime,
) -> Result<Vec<UsageRecord>, sqlx::Error> {
    sqlx::query(
        "SELECT id, reservation_id, meter, window_start, window_end, quantity FROM meters \
         WHERE tenant_id = $1 AND window_start >= $2 AND window_start < $3 ORDER BY window_start, id",
    )
    .bind(tenant)
    .bind(to_millis(from))
    .bind(to_millis(to))
    .fetch_all(conn)
    .await?
    .iter()
    .map(|r| {
        Ok(UsageRecord {
            id: r.try_get("id")?,
            reservation_id: r.try_get("reservation_id")?,
            meter: r.try_get("meter")?,
            window_start: from_millis(r.try_get("window_start")?),
            window_end: from_millis(r.try_get("window_end")?),
            quantity: r.try_get("quantity")?,
        })
    })
    .collect()
}
