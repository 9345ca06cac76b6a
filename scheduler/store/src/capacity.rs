//! Capacity rows: pools and offers, reservations and their allocations, idempotency
//! records, and the node snapshots placement works on.

use std::collections::HashMap;

use serde_json::json;
use time::OffsetDateTime;

use crate::db::to_json;
use crate::page::{Keyset, Order};
use crate::{Conn, DbError, DbResult, Row, events};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::node::Candidate;
use metal_types::model::pool::{Pool, PoolCapacity, PoolCreate, PoolPolicy};
use metal_types::model::reservation::{Reservation, ReservationCreate, ReservationFilter, ReservationState};
use metal_types::page::{Page, Paged};

// ---- pools ----------------------------------------------------------------------------

/// Creates a pool; CONFLICT when the id exists, INVALID_INPUT when the tenant does not.
pub fn insert_pool(conn: &mut dyn Conn, id: &str, create: &PoolCreate, now: OffsetDateTime) -> Result<Pool, ApiError> {
    if conn.query_opt("SELECT id FROM tenants WHERE id = $1", &[&create.tenant_id])?.is_none() {
        return Err(ApiError::invalid("tenantId", format!("no tenant {}", create.tenant_id)));
    }
    if get_pool(conn, id)?.is_some() {
        return Err(ApiError::Conflict(format!("pool {id} already exists")));
    }
    let inserted = crate::db::insert_unique(
        conn,
        "INSERT INTO pools (id, generation, tenant_id, site_id, class, policy, created_at) VALUES ($1, 1, $2, $3, $4, $5, $6)",
        &[&id, &create.tenant_id, &create.site_id, &create.class, &to_json(&create.policy)?, &to_millis(now)],
    )?;
    if !inserted {
        return Err(ApiError::Conflict(format!("pool {id} already exists")));
    }
    events::append(conn, "pool.created", &format!("pool/{id}"), Some(&create.tenant_id), &json!({"pool": id}), now)?;
    get_pool(conn, id)?.ok_or_else(|| ApiError::Internal("pool vanished".into()))
}

/// One pool (without its capacity rollup).
pub fn get_pool(conn: &mut dyn Conn, id: &str) -> DbResult<Option<Pool>> {
    let Some(row) =
        conn.query_opt("SELECT id, generation, tenant_id, site_id, class, policy FROM pools WHERE id = $1", &[&id])?
    else {
        return Ok(None);
    };
    let offered_to = conn
        .query("SELECT tenant_id FROM pool_offers WHERE pool_id = $1 ORDER BY tenant_id", &[&id])?
        .iter()
        .map(|r| r.get::<String>("tenant_id"))
        .collect::<DbResult<Vec<_>>>()?;
    Ok(Some(Pool {
        id: row.get("id")?,
        generation: row.get("generation")?,
        tenant_id: row.get("tenant_id")?,
        site_id: row.get("site_id")?,
        class: row.get("class")?,
        policy: row.json("policy")?,
        offered_to,
        capacity: None,
    }))
}

/// The pool a node is in, if any.
pub fn pool_of(conn: &mut dyn Conn, node: &metal_types::model::node::Node) -> DbResult<Option<Pool>> {
    match &node.pool_id {
        Some(id) => get_pool(conn, id),
        None => Ok(None),
    }
}

/// Pool ids visible to a tenant (offered to it), or all for `None`.
pub fn pool_ids(conn: &mut dyn Conn, tenant: Option<&str>) -> DbResult<Vec<String>> {
    let rows = match tenant {
        Some(t) => conn.query("SELECT pool_id AS id FROM pool_offers WHERE tenant_id = $1 ORDER BY pool_id", &[&t])?,
        None => conn.query("SELECT id FROM pools ORDER BY id", &[])?,
    };
    rows.iter().map(|r| r.get("id")).collect()
}

/// A page of [`pool_ids`], by id.
pub fn page_pool_ids(conn: &mut dyn Conn, tenant: Option<&str>, page: &Page) -> Result<Paged<String>, ApiError> {
    match tenant {
        Some(t) => {
            let mut offers = Keyset::new("pool_id", "pool_offers");
            offers.and("tenant_id = {}", &t);
            offers.read(conn, &[("pool_id", Order::Asc)], page, |_, row| row.get("pool_id"))
        }
        None => Keyset::new("id", "pools").read(conn, &[("id", Order::Asc)], page, |_, row| row.get("id")),
    }
}

/// Offers a pool to a tenant (idempotent).
pub fn offer(conn: &mut dyn Conn, pool: &str, tenant: &str, now: OffsetDateTime) -> DbResult<()> {
    let exists =
        conn.query_opt("SELECT pool_id FROM pool_offers WHERE pool_id = $1 AND tenant_id = $2", &[&pool, &tenant])?;
    if exists.is_none()
        && crate::db::insert_unique(
            conn,
            "INSERT INTO pool_offers (pool_id, tenant_id) VALUES ($1, $2)",
            &[&pool, &tenant],
        )?
    {
        conn.execute("UPDATE pools SET generation = generation + 1 WHERE id = $1", &[&pool])?;
        events::append(
            conn,
            "pool.offered",
            &format!("pool/{pool}"),
            Some(tenant),
            &json!({"pool": pool, "tenant": tenant}),
            now,
        )?;
    }
    Ok(())
}

/// The capacity rollup of a pool at `now`.
pub fn capacity(conn: &mut dyn Conn, pool: &str, now: OffsetDateTime) -> DbResult<PoolCapacity> {
    let nodes = candidates(conn, pool)?;
    let at = to_millis(now);
    let mut rollup = PoolCapacity::default();
    // Every node of the pool but the retired counts: a dedicated-root lease hands its node to
    // the tenant (tenant-controlled trust) and it is still the pool's, leased.
    for n in nodes.iter().filter(|n| n.state != metal_types::model::node::NodeState::Retired) {
        rollup.capacity += 1;
        let leased = n.bookings.iter().any(|&(s, e)| s <= at && at < e);
        if leased {
            rollup.leased += 1;
        } else if n.trust == metal_types::model::node::Trust::Platform
            && n.state == metal_types::model::node::NodeState::Ready
            && !n.maintenance
            && !n.cordoned
        {
            rollup.free += 1;
        }
    }
    Ok(rollup)
}

// ---- placement snapshots -----------------------------------------------------------------

fn candidate_from_row(row: &Row) -> DbResult<Candidate> {
    Ok(Candidate {
        id: row.get("id")?,
        state: row.parse("state")?,
        maintenance: row.flag("maintenance")?,
        cordoned: row.flag("cordoned")?,
        trust: row.enum_text("trust")?,
        taints: row.json("taints")?,
        labels: row.json("labels")?,
        devices: row.json("devices")?,
        architecture: row.get("architecture")?,
        bookings: Vec::new(),
    })
}

const CANDIDATE_COLUMNS: &str = "id, state, maintenance, cordoned, trust, taints, labels, devices, architecture";

/// Snapshots of every node of a pool with their live bookings.
pub fn candidates(conn: &mut dyn Conn, pool: &str) -> DbResult<Vec<Candidate>> {
    let mut nodes: Vec<Candidate> = conn
        .query(&format!("SELECT {CANDIDATE_COLUMNS} FROM nodes WHERE pool_id = $1 ORDER BY id"), &[&pool])?
        .iter()
        .map(candidate_from_row)
        .collect::<DbResult<_>>()?;
    let index: HashMap<String, usize> = nodes.iter().enumerate().map(|(i, n)| (n.id.clone(), i)).collect();
    let bookings = conn.query(
        "SELECT a.node_id, a.start_at, a.end_at FROM allocations a JOIN nodes n ON n.id = a.node_id WHERE n.pool_id = $1 AND a.live = 1",
        &[&pool],
    )?;
    for row in bookings {
        let node: String = row.get("node_id")?;
        if let Some(&i) = index.get(&node) {
            nodes[i].bookings.push((row.get("start_at")?, row.get("end_at")?));
        }
    }
    Ok(nodes)
}

/// Locks one node for booking and returns its fresh snapshot. On PostgreSQL the row lock
/// makes concurrent bookers of the node (other replicas) wait for each other; SQLite's one
/// writer already excludes them.
pub fn lock_candidate(conn: &mut dyn Conn, node: &str) -> DbResult<Option<Candidate>> {
    crate::nodes::lock(conn, node)?;
    let rows = conn.query(
        "SELECT n.id, n.state, n.maintenance, n.cordoned, n.trust, n.taints, n.labels, n.devices, n.architecture, \
         a.start_at, a.end_at \
         FROM nodes n LEFT JOIN allocations a ON a.node_id = n.id AND a.live = 1 WHERE n.id = $1",
        &[&node],
    )?;
    let Some(first) = rows.first() else { return Ok(None) };
    let mut candidate = candidate_from_row(first)?;
    for row in &rows {
        let (start, end): (Option<i64>, Option<i64>) = (row.get("start_at")?, row.get("end_at")?);
        if let (Some(start), Some(end)) = (start, end) {
            candidate.bookings.push((start, end));
        }
    }
    Ok(Some(candidate))
}

/// What placement needs to know about a pool for a tenant, in one query: whether it exists
/// and is visible to the tenant (owned or offered), and whether it allows node bindings.
pub fn pool_access(conn: &mut dyn Conn, pool: &str, tenant: &str) -> DbResult<Option<PoolAccess>> {
    let row = conn.query_opt(
        "SELECT p.tenant_id, p.policy, o.tenant_id AS offered FROM pools p \
         LEFT JOIN pool_offers o ON o.pool_id = p.id AND o.tenant_id = $2 WHERE p.id = $1",
        &[&pool, &tenant],
    )?;
    let Some(row) = row else { return Ok(None) };
    let owner: String = row.get("tenant_id")?;
    let offered: Option<String> = row.get("offered")?;
    let policy: PoolPolicy = row.json("policy")?;
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
pub fn insert_reservation(conn: &mut dyn Conn, r: &NewReservation<'_>, now: OffsetDateTime) -> DbResult<()> {
    let at = to_millis(now);
    let (start, end) = (to_millis(r.start), to_millis(r.end));
    conn.execute(
        "INSERT INTO reservations (id, generation, tenant_id, pool_id, state, request, start_at, end_at, created_at, updated_at) \
         VALUES ($1, 1, $2, $3, $4, $5, $6, $7, $8, $8)",
        &[&r.id, &r.request.tenant_id, &r.request.pool_id, &r.state.as_str(), &to_json(r.request)?, &start, &end, &at],
    )?;
    for node in r.nodes {
        conn.execute(
            "INSERT INTO allocations (id, reservation_id, node_id, tenant_id, start_at, end_at, live, created_at) VALUES ($1, $2, $3, $4, $5, $6, 1, $7)",
            &[&format!("alloc-{}", uuid::Uuid::new_v4().simple()), &r.id, node, &r.request.tenant_id, &start, &end, &at],
        )?;
    }
    events::append(
        conn,
        "reservation.placed",
        &format!("reservation/{}", r.id),
        Some(&r.request.tenant_id),
        &json!({"reservation": r.id, "pool": r.request.pool_id, "nodes": r.nodes, "state": r.state}),
        now,
    )?;
    Ok(())
}

const RESERVATION_COLUMNS: &str =
    "id, generation, tenant_id, pool_id, state, state_reason, request, start_at, end_at, bound_at, created_at";

fn reservation_from_row(conn: &mut dyn Conn, row: &Row) -> DbResult<Reservation> {
    let id: String = row.get("id")?;
    let nodes = conn
        .query("SELECT node_id FROM allocations WHERE reservation_id = $1 ORDER BY node_id", &[&id])?
        .iter()
        .map(|r| r.get::<String>("node_id"))
        .collect::<DbResult<Vec<_>>>()?;
    let state: String = row.get("state")?;
    let state = ReservationState::parse(&state)
        .ok_or_else(|| DbError::Decode { column: "state".into(), message: format!("bad state {state}") })?;
    let bound_at: Option<i64> = row.get("bound_at")?;
    let request: ReservationCreate = row.json("request")?;
    let start = from_millis(row.get("start_at")?);
    Ok(Reservation {
        id,
        generation: row.get("generation")?,
        tenant_id: row.get("tenant_id")?,
        pool_id: row.get("pool_id")?,
        state,
        state_reason: row.get("state_reason")?,
        request,
        start,
        end: from_millis(row.get("end_at")?),
        bound_at: bound_at.map(from_millis),
        nodes,
        created_at: from_millis(row.get("created_at")?),
    }
    .explained())
}

/// One reservation.
pub fn get_reservation(conn: &mut dyn Conn, id: &str) -> DbResult<Option<Reservation>> {
    match conn.query_opt(&format!("SELECT {RESERVATION_COLUMNS} FROM reservations WHERE id = $1"), &[&id])? {
        Some(row) => Ok(Some(reservation_from_row(conn, &row)?)),
        None => Ok(None),
    }
}

/// Reservations, newest first, of one tenant or all.
pub fn list_reservations(conn: &mut dyn Conn, tenant: Option<&str>) -> DbResult<Vec<Reservation>> {
    let rows = match tenant {
        Some(t) => conn.query(
            &format!(
                "SELECT {RESERVATION_COLUMNS} FROM reservations WHERE tenant_id = $1 ORDER BY created_at DESC, id"
            ),
            &[&t],
        )?,
        None => {
            conn.query(&format!("SELECT {RESERVATION_COLUMNS} FROM reservations ORDER BY created_at DESC, id"), &[])?
        }
    };
    rows.iter().map(|row| reservation_from_row(conn, row)).collect()
}

/// A page of reservations, newest first: of `tenant` when given, and only those `filter`
/// keeps.
pub fn page_reservations(
    conn: &mut dyn Conn,
    tenant: Option<&str>,
    filter: &ReservationFilter,
    page: &Page,
) -> Result<Paged<Reservation>, ApiError> {
    let mut select = Keyset::new(RESERVATION_COLUMNS, "reservations");
    select
        .and_some("tenant_id = {}", tenant)
        .and_some("tenant_id = {}", filter.tenant.as_deref())
        .and_some("pool_id = {}", filter.pool.as_deref())
        .and_some("state = {}", filter.state.map(ReservationState::as_str));
    select.read(conn, &[("created_at", Order::Desc), ("id", Order::Asc)], page, reservation_from_row)
}

/// Reservation ids in `state` whose `column` time is at or before `at`.
pub fn due(conn: &mut dyn Conn, state: ReservationState, column: &str, at: OffsetDateTime) -> DbResult<Vec<String>> {
    let column = match column {
        "start_at" => "start_at",
        _ => "end_at",
    };
    conn.query(
        &format!("SELECT id FROM reservations WHERE state = $1 AND {column} <= $2 ORDER BY {column}, id"),
        &[&state.as_str(), &to_millis(at)],
    )?
    .iter()
    .map(|r| r.get("id"))
    .collect()
}

/// Compare-and-set of a reservation's state row. When it leaves the live states its
/// allocations stop holding their nodes from `now` on. Returns the updated reservation, or
/// CONFLICT. The capacity side's `leases::set_state` wraps it: a node binding that leaves the
/// live states also asks the metal side for its teardown.
pub fn set_state(
    conn: &mut dyn Conn,
    id: &str,
    from: &[ReservationState],
    to: ReservationState,
    reason: Option<&str>,
    now: OffsetDateTime,
) -> Result<Reservation, ApiError> {
    let current = get_reservation(conn, id)?.ok_or_else(|| ApiError::NotFound(format!("reservation {id}")))?;
    if !from.contains(&current.state) {
        let hint = match (current.state, to) {
            (ReservationState::Pending, ReservationState::Ended) => {
                " (a pending reservation is cancelled, not released)"
            }
            _ => "",
        };
        return Err(ApiError::Conflict(format!(
            "reservation {id} is {}, it cannot become {}{hint}",
            current.state.as_str(),
            to.as_str()
        )));
    }
    let at = to_millis(now);
    let bound = (to == ReservationState::Active && current.request.binding.is_some()).then_some(at);
    let updated = conn.execute(
        "UPDATE reservations SET state = $1, state_reason = $2, generation = generation + 1, updated_at = $3, \
         bound_at = COALESCE(bound_at, $4) WHERE id = $5 AND generation = $6",
        &[&to.as_str(), &reason, &at, &bound, &id, &current.generation],
    )?;
    if updated == 0 {
        return Err(ApiError::Conflict(format!("reservation {id} changed meanwhile; retry")));
    }
    if !to.is_live() {
        // Release the nodes now; a window that already ended keeps its end.
        conn.execute(
            "UPDATE allocations SET live = 0, end_at = CASE WHEN end_at > $1 THEN $1 ELSE end_at END WHERE reservation_id = $2",
            &[&at.max(to_millis(current.start)), &id],
        )?;
    }
    events::append(
        conn,
        &format!("reservation.{}", to.as_str()),
        &format!("reservation/{id}"),
        Some(&current.tenant_id),
        &json!({"reservation": id, "from": current.state, "to": to, "reason": reason}),
        now,
    )?;
    get_reservation(conn, id)?.ok_or_else(|| ApiError::Internal("reservation vanished".into()))
}

/// A reservation's allocations as (allocation id, node id).
pub fn allocations(conn: &mut dyn Conn, reservation: &str) -> DbResult<Vec<(String, String)>> {
    conn.query("SELECT id, node_id FROM allocations WHERE reservation_id = $1 ORDER BY node_id", &[&reservation])?
        .iter()
        .map(|r| Ok((r.get("id")?, r.get("node_id")?)))
        .collect()
}

/// Marks an allocation bound; true when every allocation of its reservation is.
pub fn mark_bound(conn: &mut dyn Conn, allocation: &str, now: OffsetDateTime) -> DbResult<bool> {
    conn.execute(
        "UPDATE allocations SET bound_at = COALESCE(bound_at, $1) WHERE id = $2",
        &[&to_millis(now), &allocation],
    )?;
    let unbound = conn
        .query_opt(
            "SELECT COUNT(*) AS n FROM allocations WHERE bound_at IS NULL AND reservation_id = \
             (SELECT reservation_id FROM allocations WHERE id = $1)",
            &[&allocation],
        )?
        .map(|r| r.get::<i64>("n"))
        .transpose()?
        .unwrap_or(0);
    Ok(unbound == 0)
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
pub fn idempotent_response(
    conn: &mut dyn Conn,
    tenant: &str,
    key: &str,
    now: OffsetDateTime,
) -> DbResult<Option<StoredResponse>> {
    conn.execute(
        "DELETE FROM idempotency WHERE tenant_id = $1 AND key = $2 AND created_at < $3",
        &[&tenant, &key, &to_millis(now - IDEMPOTENCY_TTL)],
    )?;
    let row = conn.query_opt(
        "SELECT body_hash, status, response FROM idempotency WHERE tenant_id = $1 AND key = $2",
        &[&tenant, &key],
    )?;
    row.map(|r| {
        Ok(StoredResponse {
            body_hash: r.get("body_hash")?,
            status: u16::try_from(r.get::<i64>("status")?).unwrap_or(500),
            response: r.get("response")?,
        })
    })
    .transpose()
}

/// Records the response for a key; false when another request with the key (on another
/// replica) recorded its response since this transaction looked.
pub fn record_response(
    conn: &mut dyn Conn,
    tenant: &str,
    key: &str,
    stored: &StoredResponse,
    now: OffsetDateTime,
) -> DbResult<bool> {
    crate::db::insert_unique(
        conn,
        "INSERT INTO idempotency (tenant_id, key, body_hash, status, response, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        &[&tenant, &key, &stored.body_hash, &i64::from(stored.status), &stored.response, &to_millis(now)],
    )
}
