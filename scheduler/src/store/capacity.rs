//! Capacity rows: pools and offers, reservations and their allocations, idempotency
//! records, and the node snapshots placement works on.

use std::collections::HashMap;

use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row as _};
use time::OffsetDateTime;

use crate::clock::{from_millis, to_millis};
use crate::error::ApiError;
use crate::model::pool::{Pool, PoolCapacity, PoolCreate};
use crate::model::reservation::{Reservation, ReservationCreate, ReservationState};
use crate::placement::Candidate;
use crate::store::{decode_err, events, json_column};

fn to_json<T: serde::Serialize>(value: &T) -> Result<String, sqlx::Error> {
    serde_json::to_string(value).map_err(decode_err)
}

// ---- pools ----------------------------------------------------------------------------

/// Creates a pool; CONFLICT when the id exists, INVALID_INPUT when the tenant does not.
pub async fn insert_pool(
    conn: &mut AnyConnection,
    id: &str,
    create: &PoolCreate,
    now: OffsetDateTime,
) -> Result<Pool, ApiError> {
    if sqlx::query("SELECT id FROM tenants WHERE id = $1")
        .bind(&create.tenant_id)
        .fetch_optional(&mut *conn)
        .await?
        .is_none()
    {
        return Err(ApiError::invalid("tenantId", format!("no tenant {}", create.tenant_id)));
    }
    if get_pool(&mut *conn, id).await?.is_some() {
        return Err(ApiError::Conflict(format!("pool {id} already exists")));
    }
    sqlx::query("INSERT INTO pools (id, generation, tenant_id, site_id, class, policy, created_at) VALUES ($1, 1, $2, $3, $4, $5, $6)")
        .bind(id)
        .bind(&create.tenant_id)
        .bind(&create.site_id)
        .bind(&create.class)
        .bind(to_json(&create.policy)?)
        .bind(to_millis(now))
        .execute(&mut *conn)
        .await?;
    events::append(conn, "pool.created", &format!("pool/{id}"), Some(&create.tenant_id), &json!({"pool": id}), now)
        .await?;
    get_pool(conn, id).await?.ok_or_else(|| ApiError::Internal("pool vanished".into()))
}

/// One pool (without its capacity rollup).
pub async fn get_pool(conn: &mut AnyConnection, id: &str) -> Result<Option<Pool>, sqlx::Error> {
    let Some(row) = sqlx::query("SELECT id, generation, tenant_id, site_id, class, policy FROM pools WHERE id = $1")
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?
    else {
        return Ok(None);
    };
    let offered_to = sqlx::query("SELECT tenant_id FROM pool_offers WHERE pool_id = $1 ORDER BY tenant_id")
        .bind(id)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get::<String, _>("tenant_id"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Pool {
        id: row.try_get("id")?,
        generation: row.try_get("generation")?,
        tenant_id: row.try_get("tenant_id")?,
        site_id: row.try_get("site_id")?,
        class: row.try_get("class")?,
        policy: json_column(&row, "policy")?,
        offered_to,
        capacity: None,
    }))
}

/// Pool ids visible to a tenant (offered to it), or all for `None`.
pub async fn pool_ids(conn: &mut AnyConnection, tenant: Option<&str>) -> Result<Vec<String>, sqlx::Error> {
    let rows = match tenant {
        Some(t) => {
            sqlx::query("SELECT pool_id AS id FROM pool_offers WHERE tenant_id = $1 ORDER BY pool_id")
                .bind(t)
                .fetch_all(&mut *conn)
                .await?
        }
        None => sqlx::query("SELECT id FROM pools ORDER BY id").fetch_all(&mut *conn).await?,
    };
    rows.iter().map(|r| r.try_get("id")).collect()
}

/// Offers a pool to a tenant (idempotent).
pub async fn offer(conn: &mut AnyConnection, pool: &str, tenant: &str, now: OffsetDateTime) -> Result<(), sqlx::Error> {
    let exists = sqlx::query("SELECT pool_id FROM pool_offers WHERE pool_id = $1 AND tenant_id = $2")
        .bind(pool)
        .bind(tenant)
        .fetch_optional(&mut *conn)
        .await?;
    if exists.is_none() {
        sqlx::query("INSERT INTO pool_offers (pool_id, tenant_id) VALUES ($1, $2)")
            .bind(pool)
            .bind(tenant)
            .execute(&mut *conn)
            .await?;
        sqlx::query("UPDATE pools SET generation = generation + 1 WHERE id = $1")
            .bind(pool)
            .execute(&mut *conn)
            .await?;
        events::append(
            conn,
            "pool.offered",
            &format!("pool/{pool}"),
            Some(tenant),
            &json!({"pool": pool, "tenant": tenant}),
            now,
        )
        .await?;
    }
    Ok(())
}

/// The capacity rollup of a pool at `now`.
pub async fn capacity(conn: &mut AnyConnection, pool: &str, now: OffsetDateTime) -> Result<PoolCapacity, sqlx::Error> {
    let nodes = candidates(conn, pool).await?;
    let at = to_millis(now);
    let mut rollup = PoolCapacity::default();
    for n in nodes.iter().filter(|n| n.trust == crate::model::node::Trust::Platform) {
        rollup.capacity += 1;
        let leased = n.bookings.iter().any(|&(s, e)| s <= at && at < e);
        if leased {
            rollup.leased += 1;
        } else if n.state == crate::model::node::NodeState::Ready && !n.maintenance && !n.cordoned {
            rollup.free += 1;
        }
    }
    Ok(rollup)
}

// ---- placement snapshots -----------------------------------------------------------------

fn candidate_from_row(row: &AnyRow) -> Result<Candidate, sqlx::Error> {
    let state: String = row.try_get("state")?;
    let trust: String = row.try_get("trust")?;
    Ok(Candidate {
        id: row.try_get("id")?,
        state: state.parse().map_err(|e: String| decode_err(std::io::Error::other(e)))?,
        maintenance: row.try_get::<i64, _>("maintenance")? != 0,
        cordoned: row.try_get::<i64, _>("cordoned")? != 0,
        trust: serde_json::from_value(serde_json::Value::String(trust)).map_err(decode_err)?,
        taints: json_column(row, "taints")?,
        labels: json_column(row, "labels")?,
        devices: json_column(row, "devices")?,
        bookings: Vec::new(),
    })
}

const CANDIDATE_COLUMNS: &str = "id, state, maintenance, cordoned, trust, taints, labels, devices";

/// Snapshots of every node of a pool with their live bookings.
pub async fn candidates(conn: &mut AnyConnection, pool: &str) -> Result<Vec<Candidate>, sqlx::Error> {
    let mut nodes: Vec<Candidate> =
        sqlx::query(&format!("SELECT {CANDIDATE_COLUMNS} FROM nodes WHERE pool_id = $1 ORDER BY id"))
            .bind(pool)
            .fetch_all(&mut *conn)
            .await?
            .iter()
            .map(candidate_from_row)
            .collect::<Result<_, _>>()?;
    let index: HashMap<String, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id.clone(), i)).collect();
    let bookings = sqlx::query(
        "SELECT a.node_id, a.start_at, a.end_at FROM allocations a JOIN nodes n ON n.id = a.node_id WHERE n.pool_id = $1 AND a.live = 1",
    )
    .bind(pool)
    .fetch_all(&mut *conn)
    .await?;
    for row in bookings {
        let node: String = row.try_get("node_id")?;
        if let Some(&i) = index.get(&node) {
            nodes[i].bookings.push((row.try_get("start_at")?, row.try_get("end_at")?));
        }
    }
    Ok(nodes)
}

/// Locks one node for booking (the UPDATE takes the row lock on PostgreSQL; on SQLite the
/// write transaction is already exclusive) and returns its fresh snapshot.
pub async fn lock_candidate(conn: &mut AnyConnection, node: &str) -> Result<Option<Candidate>, sqlx::Error> {
    sqlx::query("UPDATE nodes SET booking_version = booking_version + 1 WHERE id = $1")
        .bind(node)
        .execute(&mut *conn)
        .await?;
    let rows = sqlx::query(
        "SELECT n.id, n.state, n.maintenance, n.cordoned, n.trust, n.taints, n.labels, n.devices, a.start_at, a.end_at \
         FROM nodes n LEFT JOIN allocations a ON a.node_id = n.id AND a.live = 1 WHERE n.id = $1",
    )
    .bind(node)
    .fetch_all(&mut *conn)
    .await?;
    let Some(first) = rows.first() else { return Ok(None) };
    let mut candidate = candidate_from_row(first)?;
    for row in &rows {
        let (start, end): (Option<i64>, Option<i64>) = (row.try_get("start_at")?, row.try_get("end_at")?);
        if let (Some(start), Some(end)) = (start, end) {
            candidate.bookings.push((start, end));
        }
    }
    Ok(Some(candidate))
}

/// What placement needs to know about a pool for a tenant, in one query: whether it exists
/// and is visible to the tenant (owned or offered), and whether it allows node bindings.
pub async fn pool_access(
    conn: &mut AnyConnection,
    pool: &str,
    tenant: &str,
) -> Result<Option<PoolAccess>, sqlx::Error> {
    let row = sqlx::query(
        "SELECT p.tenant_id, p.policy, o.tenant_id AS offered FROM pools p \
         LEFT JOIN pool_offers o ON o.pool_id = p.id AND o.tenant_id = $2 WHERE p.id = $1",
    )
    .bind(pool)
    .bind(tenant)
    .fetch_optional(conn)
    .await?;
    let Some(row) = row else { return Ok(None) };
    let owner: String = row.try_get("tenant_id")?;
    let offered: Option<String> = row.try_get("offered")?;
    let policy: crate::model::pool::PoolPolicy = json_column(&row, "policy")?;
    Ok(Some(PoolAccess { visible: offered.is_some() || owner == tenant, tenant_root: policy.tenant_root }))
}

/// See [`pool_access`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolAccess {
    /// Owned by or offered to the tenant.
    pub visible: bool,
    /// `policy.tenantRoot`.
    pub tenant_root: bool,
}

// ---- reservations -------------------------------------------------------------------------

/// A placed reservation to store.
#[derive(Debug)]
pub struct NewReservation<'a> {
    /// Id.
    pub id: &'a str,
    /// The request.
    pub request: &'a ReservationCreate,
    /// Window start.
    pub start: OffsetDateTime,
    /// Window end.
    pub end: OffsetDateTime,
    /// Initial state.
    pub state: ReservationState,
    /// Booked nodes.
    pub nodes: &'a [String],
}

/// Stores a reservation and one allocation per node, with its events.
pub async fn insert_reservation(
    conn: &mut AnyConnection,
    r: &NewReservation<'_>,
    now: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    let at = to_millis(now);
    sqlx::query(
        "INSERT INTO reservations (id, generation, tenant_id, pool_id, state, request, start_at, end_at, created_at, updated_at) \
         VALUES ($1, 1, $2, $3, $4, $5, $6, $7, $8, $8)",
    )
    .bind(r.id)
    .bind(&r.request.tenant_id)
    .bind(&r.request.pool_id)
    .bind(r.state.as_str())
    .bind(to_json(r.request)?)
    .bind(to_millis(r.start))
    .bind(to_millis(r.end))
    .bind(at)
    .execute(&mut *conn)
    .await?;
    for node in r.nodes {
        sqlx::query(
            "INSERT INTO allocations (id, reservation_id, node_id, tenant_id, start_at, end_at, live, created_at) VALUES ($1, $2, $3, $4, $5, $6, 1, $7)",
        )
        .bind(format!("alloc-{}", uuid::Uuid::new_v4().simple()))
        .bind(r.id)
        .bind(node)
        .bind(&r.request.tenant_id)
        .bind(to_millis(r.start))
        .bind(to_millis(r.end))
        .bind(at)
        .execute(&mut *conn)
        .await?;
    }
    events::append(
        conn,
        "reservation.placed",
        &format!("reservation/{}", r.id),
        Some(&r.request.tenant_id),
        &json!({"reservation": r.id, "pool": r.request.pool_id, "nodes": r.nodes, "state": r.state}),
        now,
    )
    .await?;
    Ok(())
}

const RESERVATION_COLUMNS: &str =
    "id, generation, tenant_id, pool_id, state, state_reason, request, start_at, end_at, bound_at, created_at";

async fn reservation_from_row(conn: &mut AnyConnection, row: &AnyRow) -> Result<Reservation, sqlx::Error> {
    let id: String = row.try_get("id")?;
    let nodes = sqlx::query("SELECT node_id FROM allocations WHERE reservation_id = $1 ORDER BY node_id")
        .bind(&id)
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get::<String, _>("node_id"))
        .collect::<Result<Vec<_>, _>>()?;
    let state: String = row.try_get("state")?;
    let bound_at: Option<i64> = row.try_get("bound_at")?;
    Ok(Reservation {
        id,
        generation: row.try_get("generation")?,
        tenant_id: row.try_get("tenant_id")?,
        pool_id: row.try_get("pool_id")?,
        state: ReservationState::parse(&state)
            .ok_or_else(|| decode_err(std::io::Error::other(format!("bad state {state}"))))?,
        state_reason: row.try_get("state_reason")?,
        request: json_column(row, "request")?,
        start: from_millis(row.try_get("start_at")?),
        end: from_millis(row.try_get("end_at")?),
        bound_at: bound_at.map(from_millis),
        nodes,
        created_at: from_millis(row.try_get("created_at")?),
    })
}

/// One reservation.
pub async fn get_reservation(conn: &mut AnyConnection, id: &str) -> Result<Option<Reservation>, sqlx::Error> {
    let row = sqlx::query(&format!("SELECT {RESERVATION_COLUMNS} FROM reservations WHERE id = $1"))
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    match row {
        Some(row) => Ok(Some(reservation_from_row(conn, &row).await?)),
        None => Ok(None),
    }
}

/// Reservations, newest first, of one tenant or all.
pub async fn list_reservations(
    conn: &mut AnyConnection,
    tenant: Option<&str>,
) -> Result<Vec<Reservation>, sqlx::Error> {
    let rows = match tenant {
        Some(t) => {
            sqlx::query(&format!(
                "SELECT {RESERVATION_COLUMNS} FROM reservations WHERE tenant_id = $1 ORDER BY created_at DESC, id"
            ))
            .bind(t)
            .fetch_all(&mut *conn)
            .await?
        }
        None => {
            sqlx::query(&format!("SELECT {RESERVATION_COLUMNS} FROM reservations ORDER BY created_at DESC, id"))
                .fetch_all(&mut *conn)
                .await?
        }
    };
    let mut out = Vec::with_capacity(rows.len());
    for row in &rows {
        out.push(reservation_from_row(conn, row).await?);
    }
    Ok(out)
}

/// Reservation ids in `state` whose `column` time is at or before `at`.
pub async fn due(
    conn: &mut AnyConnection,
    state: ReservationState,
    column: &str,
    at: OffsetDateTime,
) -> Result<Vec<String>, sqlx::Error> {
    let column = match column {
        "start_at" => "start_at",
        _ => "end_at",
    };
    sqlx::query(&format!("SELECT id FROM reservations WHERE state = $1 AND {column} <= $2 ORDER BY {column}, id"))
        .bind(state.as_str())
        .bind(to_millis(at))
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get("id"))
        .collect()
}

/// Compare-and-set of a reservation's state. When it leaves the live states its allocations
/// stop holding their nodes from `now` on. Returns the updated reservation, or CONFLICT.
pub async fn set_state(
    conn: &mut AnyConnection,
    id: &str,
    from: &[ReservationState],
    to: ReservationState,
    reason: Option<&str>,
    now: OffsetDateTime,
) -> Result<Reservation, ApiError> {
    let current =
        get_reservation(&mut *conn, id).await?.ok_or_else(|| ApiError::NotFound(format!("reservation {id}")))?;
    if !from.contains(&current.state) {
        return Err(ApiError::Conflict(format!(
            "reservation {id} is {}, it cannot become {}",
            current.state.as_str(),
            to.as_str()
        )));
    }
    let at = to_millis(now);
    let bound = (to == ReservationState::Active && current.request.binding.is_some()).then_some(at);
    let updated = sqlx::query(
        "UPDATE reservations SET state = $1, state_reason = $2, generation = generation + 1, updated_at = $3, \
         bound_at = COALESCE(bound_at, $4) WHERE id = $5 AND generation = $6",
    )
    .bind(to.as_str())
    .bind(reason)
    .bind(at)
    .bind(bound)
    .bind(id)
    .bind(current.generation)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if updated == 0 {
        return Err(ApiError::Conflict(format!("reservation {id} changed meanwhile; retry")));
    }
    if !to.is_live() {
        // Release the nodes now; a window that already ended keeps its end.
        sqlx::query("UPDATE allocations SET live = 0, end_at = CASE WHEN end_at > $1 THEN $1 ELSE end_at END WHERE reservation_id = $2")
            .bind(at.max(to_millis(current.start)))
            .bind(id)
            .execute(&mut *conn)
            .await?;
    }
    events::append(
        conn,
        &format!("reservation.{}", to.as_str()),
        &format!("reservation/{id}"),
        Some(&current.tenant_id),
        &json!({"reservation": id, "from": current.state, "to": to, "reason": reason}),
        now,
    )
    .await?;
    get_reservation(conn, id).await?.ok_or_else(|| ApiError::Internal("reservation vanished".into()))
}

// ---- idempotency ----------------------------------------------------------------------------

/// A stored response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResponse {
    /// Hash of the canonical request body.
    pub body_hash: String,
    /// HTTP status.
    pub status: u16,
    /// Response body (JSON).
    pub response: String,
}

/// How long idempotency keys are kept.
pub const IDEMPOTENCY_TTL: time::Duration = time::Duration::hours(24);

/// The stored response for a key, if it is younger than [`IDEMPOTENCY_TTL`] (older ones are
/// deleted here).
pub async fn idempotent_response(
    conn: &mut AnyConnection,
    tenant: &str,
    key: &str,
    now: OffsetDateTime,
) -> Result<Option<StoredResponse>, sqlx::Error> {
    sqlx::query("DELETE FROM idempotency WHERE tenant_id = $1 AND key = $2 AND created_at < $3")
        .bind(tenant)
        .bind(key)
        .bind(to_millis(now - IDEMPOTENCY_TTL))
        .execute(&mut *conn)
        .await?;
    let row = sqlx::query("SELECT body_hash, status, response FROM idempotency WHERE tenant_id = $1 AND key = $2")
        .bind(tenant)
        .bind(key)
        .fetch_optional(&mut *conn)
        .await?;
    row.map(|r| {
        Ok(StoredResponse {
            body_hash: r.try_get("body_hash")?,
            status: u16::try_from(r.try_get::<i64, _>("status")?).unwrap_or(500),
            response: r.try_get("response")?,
        })
    })
    .transpose()
}

/// Records the response for a key.
pub async fn record_response(
    conn: &mut AnyConnection,
    tenant: &str,
    key: &str,
    stored: &StoredResponse,
    now: OffsetDateTime,
) -> Result<(), sqlx::Error> {
    sqlx::query("INSERT INTO idempotency (tenant_id, key, body_hash, status, response, created_at) VALUES ($1, $2, $3, $4, $5, $6)")
        .bind(tenant)
        .bind(key)
        .bind(&stored.body_hash)
        .bind(i64::from(stored.status))
        .bind(&stored.response)
        .bind(to_millis(now))
        .execute(conn)
        .await?;
    Ok(())
}
