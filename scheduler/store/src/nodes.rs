//! Node rows: enrol, read, compare-and-set lifecycle moves, attribute patches, and the
//! reaper's query for overdue in-progress states. Every change bumps `generation` and
//! appends its event in the same transaction.

use std::collections::BTreeMap;

use serde_json::json;
use time::OffsetDateTime;

use crate::db::to_json;
use crate::page::{Keyset, Order};
use crate::{Backend, Conn, DbResult, Row, events};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::node::{Deadlines, Device, Node, NodeFilter, NodeState, NodeTransition, Taint};
use metal_types::page::{Page, Paged};

const COLUMNS: &str = "id, generation, state, failed_from, state_reason, owner, deadline, power, maintenance, cordoned, \
    tenant_root, trust, identity_generation, lease_id, release_wipe, boot_mac, pool_id, labels, taints, devices, architecture, created_at, updated_at, \
    (SELECT MIN(a.reservation_id) FROM allocations a JOIN reservations r ON r.id = a.reservation_id \
     WHERE a.node_id = nodes.id AND (a.id = nodes.lease_id OR (a.live = 1 AND r.state = 'active'))) AS held_by";

fn node_from_row(row: &Row) -> DbResult<Node> {
    let deadline: Option<i64> = row.get("deadline")?;
    let failed_from: Option<String> = row.get("failed_from")?;
    Ok(Node {
        id: row.get("id")?,
        generation: row.get("generation")?,
        state: row.parse("state")?,
        failed_from: failed_from
            .map(|t| t.parse::<NodeState>())
            .transpose()
            .map_err(|message| crate::DbError::Decode { column: "failed_from".into(), message })?,
        state_reason: row.get("state_reason")?,
        owner: row.get("owner")?,
        deadline: deadline.map(from_millis),
        power: row.enum_text("power")?,
        maintenance: row.flag("maintenance")?,
        cordoned: row.flag("cordoned")?,
        tenant_root: row.flag("tenant_root")?,
        trust: row.enum_text("trust")?,
        identity_generation: row.get("identity_generation")?,
        lease_id: row.get("lease_id")?,
        held_by: row.get("held_by")?,
        release_wipe: row.get("release_wipe")?,
        boot_mac: row.get("boot_mac")?,
        pool_id: row.get("pool_id")?,
        labels: row.json("labels")?,
        taints: row.json("taints")?,
        devices: row.json("devices")?,
        architecture: row.get("architecture")?,
        created_at: from_millis(row.get("created_at")?),
        updated_at: from_millis(row.get("updated_at")?),
    })
}

/// A validated enrolment.
#[derive(Debug, Clone)]
pub struct NewNode {
    /// Id.
    pub id: String,
    /// Normalised boot MAC.
    pub boot_mac: Option<String>,
    /// Pool.
    pub pool_id: Option<String>,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// Devices.
    pub devices: Vec<Device>,
}

/// Enrols a node in state `new`; `None` when the id (or boot MAC) is already enrolled.
pub fn insert(conn: &mut dyn Conn, node: &NewNode, now: OffsetDateTime) -> DbResult<Option<Node>> {
    if conn.query_opt("SELECT id FROM nodes WHERE id = $1 OR boot_mac = $2", &[&node.id, &node.boot_mac])?.is_some() {
        return Ok(None);
    }
    let inserted = crate::db::insert_unique(
        conn,
        "INSERT INTO nodes (id, generation, state, power, maintenance, cordoned, tenant_root, trust, \
         identity_generation, boot_mac, labels, taints, devices, created_at, updated_at, pool_id) \
         VALUES ($1, 1, 'new', 'unknown', 0, 0, 0, 'platform', 1, $2, $3, $4, $5, $6, $6, $7)",
        &[
            &node.id,
            &node.boot_mac,
            &to_json(&node.labels)?,
            &to_json(&node.taints)?,
            &to_json(&node.devices)?,
            &to_millis(now),
            &node.pool_id,
        ],
    )?;
    if !inserted {
        return Ok(None); // enrolled by another writer since we looked
    }
    let created = get(conn, &node.id)?.ok_or(crate::DbError::NoRow)?;
    crate::billing::record_health(conn, &created.id, created.generation, &created.devices, now)?;
    events::append(conn, "node.created", &format!("node/{}", node.id), None, &json!({"node": node.id}), now)?;
    Ok(Some(created))
}

/// One node.
pub fn get(conn: &mut dyn Conn, id: &str) -> DbResult<Option<Node>> {
    conn.query_opt(&format!("SELECT {COLUMNS} FROM nodes WHERE id = $1"), &[&id])?
        .as_ref()
        .map(node_from_row)
        .transpose()
}

/// The node whose boot MAC (normalised) is `mac`.
pub fn by_boot_mac(conn: &mut dyn Conn, mac: &str) -> DbResult<Option<Node>> {
    conn.query_opt(&format!("SELECT {COLUMNS} FROM nodes WHERE boot_mac = $1"), &[&mac])?
        .as_ref()
        .map(node_from_row)
        .transpose()
}

/// Nodes, by id, optionally in one state.
pub fn list(conn: &mut dyn Conn, state: Option<NodeState>) -> DbResult<Vec<Node>> {
    let rows = match state {
        Some(s) => conn.query(&format!("SELECT {COLUMNS} FROM nodes WHERE state = $1 ORDER BY id"), &[&s.as_str()])?,
        None => conn.query(&format!("SELECT {COLUMNS} FROM nodes ORDER BY id"), &[])?,
    };
    rows.iter().map(node_from_row).collect()
}

/// A page of the nodes `filter` keeps, by id.
pub fn page(conn: &mut dyn Conn, filter: &NodeFilter, page: &Page) -> Result<Paged<Node>, ApiError> {
    let labels = filter.labels()?;
    let mut select = Keyset::new(COLUMNS, "nodes");
    select
        .and_some("state = {}", filter.state.map(NodeState::as_str))
        .and_some("pool_id = {}", filter.pool.as_deref())
        .and_some("substr(id, 1, length(CAST({} AS TEXT))) = CAST({} AS TEXT)", filter.prefix.as_deref())
        .and_some(
            "EXISTS (SELECT 1 FROM allocations a JOIN reservations r ON r.id = a.reservation_id \
             WHERE a.node_id = nodes.id AND r.tenant_id = {} AND (a.id = nodes.lease_id OR (a.live = 1 AND r.state IN ('pending', 'active'))))",
            filter.tenant.as_deref(),
        );
    // Labels are stored as compact JSON with sorted keys, so a pair is in the map exactly
    // when its JSON text (`"key":"value"`) is in the column's text: keys hold no quote, and
    // a quote inside a value is escaped, so the text cannot match across a boundary.
    let contains = match conn.backend() {
        Backend::Sqlite => "instr(labels, {}) > 0",
        Backend::Postgres => "strpos(labels, {}) > 0",
    };
    for (key, value) in &labels {
        let pair = format!("{}:{}", to_json(key)?, to_json(value)?);
        select.and(contains, &pair);
    }
    select.read(conn, &[("id", Order::Asc)], page, |_, row| node_from_row(row))
}

/// Moves a node along its lifecycle, compare-and-set on the expected state (and the
/// generation when given). Illegal moves and lost races are CONFLICT.
pub fn transition(
    conn: &mut dyn Conn,
    id: &str,
    request: &NodeTransition,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> Result<Node, ApiError> {
    let (from, to) = (request.from, request.to);
    if !from.can_move_to(to) {
        let allowed: Vec<&str> = from.next().iter().map(|s| s.as_str()).collect();
        return Err(ApiError::Conflict(format!(
            "a node cannot move from {from} to {to} (from {from}: {})",
            allowed.join(", ")
        )));
    }
    let deadline = deadlines.for_state(to).map(|d| to_millis(now + d));
    let failed_from = (to == NodeState::Failed).then_some(from.as_str());
    let owner = if to.in_progress() { request.owner.as_deref() } else { None };
    let sql = "UPDATE nodes SET state = $1, generation = generation + 1, failed_from = $2, state_reason = $3, \
               owner = $4, deadline = $5, updated_at = $6 WHERE id = $7 AND state = $8 \
               AND generation = COALESCE($9, generation)";
    let updated = conn.execute(
        sql,
        &[
            &to.as_str(),
            &failed_from,
            &request.reason,
            &owner,
            &deadline,
            &to_millis(now),
            &id,
            &from.as_str(),
            &request.generation,
        ],
    )?;
    let node = get(conn, id)?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))?;
    if updated == 0 {
        return Err(ApiError::Conflict(format!(
            "node {id} is {} at generation {}, not {from}{}",
            node.state,
            node.generation,
            request.generation.map(|g| format!(" at generation {g}")).unwrap_or_default()
        )));
    }
    events::append(
        conn,
        "node.state.changed",
        &format!("node/{id}"),
        None,
        &json!({"node": id, "from": from, "to": to, "reason": request.reason, "generation": node.generation}),
        now,
    )?;
    // A move ends the node's boot; moving to commissioning starts the one its next network
    // boot may take (for as long as commissioning may last): the operator's commission, or
    // a new node's first network boot. A deploy's boot is armed by whoever boots it.
    let moved = format!("node moved to {to}");
    match deadlines.for_state(to).filter(|_| to == NodeState::Commissioning) {
        Some(ttl) => super::boots::arm(conn, id, &moved, None, now, ttl).map(drop)?,
        None => super::boots::end(conn, id, &moved, now).map(drop)?,
    }
    Ok(node)
}

/// Replaces placement attributes; compare-and-set on the generation when given.
pub fn update_attributes(
    conn: &mut dyn Conn,
    current: &Node,
    expected_generation: Option<i64>,
    now: OffsetDateTime,
) -> Result<Node, ApiError> {
    let updated = conn.execute(
        "UPDATE nodes SET generation = generation + 1, maintenance = $1, cordoned = $2, labels = $3, \
         taints = $4, devices = $5, updated_at = $6, pool_id = $7 WHERE id = $8 AND generation = COALESCE($9, generation)",
        &[
            &i64::from(current.maintenance),
            &i64::from(current.cordoned),
            &to_json(&current.labels)?,
            &to_json(&current.taints)?,
            &to_json(&current.devices)?,
            &to_millis(now),
            &current.pool_id,
            &current.id,
            &expected_generation,
        ],
    )?;
    let node = get(conn, &current.id)?.ok_or_else(|| ApiError::NotFound(format!("node {}", current.id)))?;
    if updated == 0 {
        return Err(ApiError::Conflict(format!(
            "node {} is at generation {}, not {}",
            current.id,
            node.generation,
            expected_generation.unwrap_or_default()
        )));
    }
    crate::billing::record_health(conn, &node.id, node.generation, &node.devices, now)?;
    events::append(
        conn,
        "node.updated",
        &format!("node/{}", node.id),
        None,
        &json!({"node": node.id, "maintenance": node.maintenance, "cordoned": node.cordoned, "generation": node.generation}),
        now,
    )?;
    Ok(node)
}

/// Locks the node's row until the transaction ends (PostgreSQL; SQLite's one writer needs
/// nothing), so writers of one node's dependent rows take their turns.
pub fn lock(conn: &mut dyn Conn, id: &str) -> DbResult<()> {
    if conn.backend() == Backend::Postgres {
        conn.query("SELECT id FROM nodes WHERE id = $1 FOR UPDATE", &[&id])?;
    }
    Ok(())
}

/// Who controls a node: set at a tenant-root lease's start (tenant root, tenant-controlled,
/// the lease and its release wipe) and cleared at its teardown's end. Either way the
/// identity generation moves on, which revokes every certificate of the older one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tenancy {
    /// The lease's allocation; `None` hands the node back to the platform.
    pub lease: Option<String>,
    /// The lease's release wipe.
    pub release_wipe: Option<String>,
}

/// Applies a [`Tenancy`], compare-and-set on the row generation; returns the node.
pub fn set_tenancy(conn: &mut dyn Conn, node: &Node, tenancy: &Tenancy, now: OffsetDateTime) -> Result<Node, ApiError> {
    let leased = tenancy.lease.is_some();
    let trust = if leased { "tenant-controlled" } else { "platform" };
    let updated = conn.execute(
        "UPDATE nodes SET generation = generation + 1, identity_generation = identity_generation + 1, \
         tenant_root = $1, trust = $2, lease_id = $3, release_wipe = $4, updated_at = $5 \
         WHERE id = $6 AND generation = $7",
        &[
            &i64::from(leased),
            &trust,
            &tenancy.lease,
            &tenancy.release_wipe,
            &to_millis(now),
            &node.id,
            &node.generation,
        ],
    )?;
    let after = get(conn, &node.id)?.ok_or_else(|| ApiError::NotFound(format!("node {}", node.id)))?;
    if updated == 0 {
        return Err(ApiError::Conflict(format!(
            "node {} changed meanwhile (generation {})",
            node.id, after.generation
        )));
    }
    events::append(
        conn,
        "node.identity.rotated",
        &format!("node/{}", node.id),
        None,
        &json!({"node": node.id, "from": node.identity_generation, "to": after.identity_generation,
                "trust": trust, "lease": tenancy.lease}),
        now,
    )?;
    Ok(after)
}

/// Records the architecture the node's commissioning ramdisk reported (a fact of the
/// machine, not a change an API client makes: the row generation stays).
pub fn set_architecture(conn: &mut dyn Conn, node_id: &str, architecture: &str) -> DbResult<()> {
    conn.execute("UPDATE nodes SET architecture = $1 WHERE id = $2", &[&architecture, &node_id])?;
    Ok(())
}

/// Sets or clears maintenance, compare-and-set on the row generation (quarantine keeps a
/// failed tenant-root node off placement until an operator looks).
pub fn set_maintenance(conn: &mut dyn Conn, node: &Node, on: bool, now: OffsetDateTime) -> Result<Node, ApiError> {
    let mut changed = node.clone();
    changed.maintenance = on;
    update_attributes(conn, &changed, Some(node.generation), now)
}

/// In-progress nodes whose deadline has passed.
pub fn overdue(conn: &mut dyn Conn, now: OffsetDateTime) -> DbResult<Vec<Node>> {
    conn.query(
        &format!("SELECT {COLUMNS} FROM nodes WHERE deadline IS NOT NULL AND deadline < $1 ORDER BY deadline"),
        &[&to_millis(now)],
    )?
    .iter()
    .map(node_from_row)
    .collect()
}

/// Node counts by state, for metrics.
pub fn count_by_state(conn: &mut dyn Conn) -> DbResult<Vec<(String, i64)>> {
    conn.query("SELECT state, COUNT(*) AS n FROM nodes GROUP BY state ORDER BY state", &[])?
        .iter()
        .map(|r| Ok((r.get("state")?, r.get("n")?)))
        .collect()
}
