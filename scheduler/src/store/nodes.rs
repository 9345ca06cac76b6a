//! Node rows: enrol, read, compare-and-set lifecycle moves, attribute patches, and the
//! reaper's query for overdue in-progress states. Every change bumps `generation` and
//! appends its event in the same transaction.

use std::collections::BTreeMap;

use serde_json::json;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row as _};
use time::OffsetDateTime;

use crate::clock::{from_millis, to_millis};
use crate::error::ApiError;
use crate::model::node::{Deadlines, Device, Node, NodeState, NodeTransition, Taint};
use crate::store::{decode_err, events, json_column};

const COLUMNS: &str = "id, generation, state, failed_from, state_reason, owner, deadline, power, maintenance, cordoned, \
    tenant_root, trust, identity_generation, boot_mac, pool_id, labels, taints, devices, created_at, updated_at";

fn enum_column<T: serde::de::DeserializeOwned>(row: &AnyRow, name: &str) -> Result<T, sqlx::Error> {
    let text: String = row.try_get(name)?;
    serde_json::from_value(serde_json::Value::String(text)).map_err(decode_err)
}

fn state_column(row: &AnyRow, name: &str) -> Result<Option<NodeState>, sqlx::Error> {
    let text: Option<String> = row.try_get(name)?;
    text.map(|t| t.parse::<NodeState>().map_err(|e| decode_err(std::io::Error::other(e)))).transpose()
}

fn node_from_row(row: &AnyRow) -> Result<Node, sqlx::Error> {
    let deadline: Option<i64> = row.try_get("deadline")?;
    Ok(Node {
        id: row.try_get("id")?,
        generation: row.try_get("generation")?,
        state: state_column(row, "state")?.ok_or_else(|| decode_err(std::io::Error::other("node without state")))?,
        failed_from: state_column(row, "failed_from")?,
        state_reason: row.try_get("state_reason")?,
        owner: row.try_get("owner")?,
        deadline: deadline.map(from_millis),
        power: enum_column(row, "power")?,
        maintenance: row.try_get::<i64, _>("maintenance")? != 0,
        cordoned: row.try_get::<i64, _>("cordoned")? != 0,
        tenant_root: row.try_get::<i64, _>("tenant_root")? != 0,
        trust: enum_column(row, "trust")?,
        identity_generation: row.try_get("identity_generation")?,
        boot_mac: row.try_get("boot_mac")?,
        pool_id: row.try_get("pool_id")?,
        labels: json_column(row, "labels")?,
        taints: json_column(row, "taints")?,
        devices: json_column(row, "devices")?,
        created_at: from_millis(row.try_get("created_at")?),
        updated_at: from_millis(row.try_get("updated_at")?),
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
pub async fn insert(
    conn: &mut AnyConnection,
    node: &NewNode,
    now: OffsetDateTime,
) -> Result<Option<Node>, sqlx::Error> {
    let taken = sqlx::query("SELECT id FROM nodes WHERE id = $1 OR boot_mac = $2")
        .bind(&node.id)
        .bind(node.boot_mac.as_deref())
        .fetch_optional(&mut *conn)
        .await?;
    if taken.is_some() {
        return Ok(None);
    }
    let at = to_millis(now);
    sqlx::query(
        "INSERT INTO nodes (id, generation, state, power, maintenance, cordoned, tenant_root, trust, \
         identity_generation, boot_mac, labels, taints, devices, created_at, updated_at, pool_id) \
         VALUES ($1, 1, 'new', 'unknown', 0, 0, 0, 'platform', 1, $2, $3, $4, $5, $6, $6, $7)",
    )
    .bind(&node.id)
    .bind(node.boot_mac.as_deref())
    .bind(serde_json::to_string(&node.labels).map_err(decode_err)?)
    .bind(serde_json::to_string(&node.taints).map_err(decode_err)?)
    .bind(serde_json::to_string(&node.devices).map_err(decode_err)?)
    .bind(at)
    .bind(node.pool_id.as_deref())
    .execute(&mut *conn)
    .await?;
    let created = get(&mut *conn, &node.id).await?.ok_or(sqlx::Error::RowNotFound)?;
    crate::store::billing::record_health(&mut *conn, &created.id, created.generation, &created.devices, now).await?;
    events::append(conn, "node.created", &format!("node/{}", node.id), None, &json!({"node": node.id}), now).await?;
    Ok(Some(created))
}

/// One node.
pub async fn get(conn: &mut AnyConnection, id: &str) -> Result<Option<Node>, sqlx::Error> {
    let row = sqlx::query(&format!("SELECT {COLUMNS} FROM nodes WHERE id = $1")).bind(id).fetch_optional(conn).await?;
    row.as_ref().map(node_from_row).transpose()
}

/// Nodes, by id, optionally in one state.
pub async fn list(pool: &sqlx::AnyPool, state: Option<NodeState>) -> Result<Vec<Node>, sqlx::Error> {
    let rows = match state {
        Some(s) => {
            sqlx::query(&format!("SELECT {COLUMNS} FROM nodes WHERE state = $1 ORDER BY id"))
                .bind(s.as_str())
                .fetch_all(pool)
                .await?
        }
        None => sqlx::query(&format!("SELECT {COLUMNS} FROM nodes ORDER BY id")).fetch_all(pool).await?,
    };
    rows.iter().map(node_from_row).collect()
}

/// Moves a node along its lifecycle, compare-and-set on the expected state (and the
/// generation when given). Illegal moves and lost races are CONFLICT.
pub async fn transition(
    conn: &mut AnyConnection,
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
    let mut sql = "UPDATE nodes SET state = $1, generation = generation + 1, failed_from = $2, state_reason = $3, \
                   owner = $4, deadline = $5, updated_at = $6 WHERE id = $7 AND state = $8"
        .to_owned();
    if request.generation.is_some() {
        sql.push_str(" AND generation = $9");
    }
    let mut query = sqlx::query(&sql)
        .bind(to.as_str())
        .bind(failed_from)
        .bind(request.reason.as_deref())
        .bind(owner)
        .bind(deadline)
        .bind(to_millis(now))
        .bind(id)
        .bind(from.as_str());
    if let Some(generation) = request.generation {
        query = query.bind(generation);
    }
    let updated = query.execute(&mut *conn).await?.rows_affected();
    let node = get(&mut *conn, id).await?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))?;
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
    )
    .await?;
    Ok(node)
}

/// Replaces placement attributes; compare-and-set on the generation when given.
pub async fn update_attributes(
    conn: &mut AnyConnection,
    current: &Node,
    expected_generation: Option<i64>,
    now: OffsetDateTime,
) -> Result<Node, ApiError> {
    let mut sql = "UPDATE nodes SET generation = generation + 1, maintenance = $1, cordoned = $2, labels = $3, \
                   taints = $4, devices = $5, updated_at = $6, pool_id = $8 WHERE id = $7"
        .to_owned();
    if expected_generation.is_some() {
        sql.push_str(" AND generation = $9");
    }
    let mut query = sqlx::query(&sql)
        .bind(i64::from(current.maintenance))
        .bind(i64::from(current.cordoned))
        .bind(serde_json::to_string(&current.labels).map_err(|e| ApiError::Internal(e.to_string()))?)
        .bind(serde_json::to_string(&current.taints).map_err(|e| ApiError::Internal(e.to_string()))?)
        .bind(serde_json::to_string(&current.devices).map_err(|e| ApiError::Internal(e.to_string()))?)
        .bind(to_millis(now))
        .bind(&current.id)
        .bind(current.pool_id.as_deref());
    if let Some(generation) = expected_generation {
        query = query.bind(generation);
    }
    if query.execute(&mut *conn).await?.rows_affected() == 0 {
        let actual =
            get(&mut *conn, &current.id).await?.ok_or_else(|| ApiError::NotFound(format!("node {}", current.id)))?;
        return Err(ApiError::Conflict(format!(
            "node {} is at generation {}, not {}",
            current.id,
            actual.generation,
            expected_generation.unwrap_or_default()
        )));
    }
    let node = get(&mut *conn, &current.id).await?.ok_or_else(|| ApiError::NotFound(format!("node {}", current.id)))?;
    crate::store::billing::record_health(&mut *conn, &node.id, node.generation, &node.devices, now).await?;
    events::append(
        conn,
        "node.updated",
        &format!("node/{}", node.id),
        None,
        &json!({"node": node.id, "maintenance": node.maintenance, "cordoned": node.cordoned, "generation": node.generation}),
        now,
    )
    .await?;
    Ok(node)
}

/// In-progress nodes whose deadline has passed.
pub async fn overdue(pool: &sqlx::AnyPool, now: OffsetDateTime) -> Result<Vec<Node>, sqlx::Error> {
    sqlx::query(&format!("SELECT {COLUMNS} FROM nodes WHERE deadline IS NOT NULL AND deadline < $1 ORDER BY deadline"))
        .bind(to_millis(now))
        .fetch_all(pool)
        .await?
        .iter()
        .map(node_from_row)
        .collect()
}

/// Node counts by state, for metrics.
pub async fn count_by_state(pool: &sqlx::AnyPool) -> Result<Vec<(String, i64)>, sqlx::Error> {
    sqlx::query("SELECT state, COUNT(*) AS n FROM nodes GROUP BY state ORDER BY state")
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| Ok((r.try_get("state")?, r.try_get("n")?)))
        .collect()
}
