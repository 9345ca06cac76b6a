//! BMC rows: how each node's BMC is reached (the password only in its stored, usually
//! sealed, form), its last reported health, and the node's observed power state.

use serde_json::json;
use time::OffsetDateTime;

use crate::page::{Keyset, Order};
use crate::{Conn, DbError, DbResult, Row, events};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::bmc::{BmcInfo, BmcProtocol, BmcSpec, BmcTls, ConsoleSession, IpmiPrivilege};
use metal_types::page::{Page, Paged};

/// A BMC row with its stored secret.
#[derive(Debug, Clone)]
pub struct StoredBmc {
    /// What the API shows.
    pub info: BmcInfo,
    /// `enc:v1:...` or `plain:...` (see `secrets`).
    pub secret: String,
    /// A rotation in flight: the new secret, recorded before the BMC was asked.
    pub pending: Option<String>,
    /// Who holds the slot: a teardown run's id, or [`API_ROTATION`].
    pub pending_by: Option<String>,
    /// When that rotation began (none for a slot recorded before the column existed).
    pub pending_at: Option<OffsetDateTime>,
}

fn from_row(row: &Row) -> DbResult<StoredBmc> {
    let protocol: String = row.get("protocol")?;
    let secret: String = row.get("secret")?;
    Ok(StoredBmc {
        info: BmcInfo {
            node_id: row.get("node_id")?,
            protocol: match protocol.as_str() {
                "redfish" => BmcProtocol::Redfish,
                "ipmi" => BmcProtocol::Ipmi,
                other => {
                    return Err(DbError::Decode { column: "protocol".into(), message: format!("unknown {other}") });
                }
            },
            address: row.get("address")?,
            username: row.get("username")?,
            tls: row.json::<Option<BmcTls>>("tls")?,
            system_id: row.get("system_id")?,
            privilege: row.get::<Option<String>>("privilege")?.as_deref().and_then(IpmiPrivilege::parse),
            credential_sealed: metal_types::secrets::is_sealed(&secret),
            health: row.get("health")?,
            generation: row.get("generation")?,
        },
        secret,
        pending: row.get("pending_secret")?,
        pending_by: row.get("pending_by")?,
        pending_at: row.get::<Option<i64>>("pending_at")?.map(from_millis),
    })
}

/// A node's BMC.
pub fn get(conn: &mut dyn Conn, node: &str) -> DbResult<Option<StoredBmc>> {
    conn.query_opt(
        "SELECT node_id, generation, protocol, address, username, secret, pending_secret, pending_by, pending_at, tls, system_id, privilege, \
         health FROM bmcs \
         WHERE node_id = $1",
        &[&node],
    )?
    .as_ref()
    .map(from_row)
    .transpose()
}

/// Sets (or replaces) a node's BMC; NOT_FOUND when there is no such node. A rotation's
/// pending secret goes: the credential given now is the one the BMC has.
pub fn put(
    conn: &mut dyn Conn,
    node: &str,
    spec: &BmcSpec,
    sealed: &str,
    now: OffsetDateTime,
) -> Result<BmcInfo, ApiError> {
    if crate::nodes::get(conn, node)?.is_none() {
        return Err(ApiError::NotFound(format!("node {node}")));
    }
    let tls = crate::db::to_json(&spec.tls)?;
    let at = to_millis(now);
    let privilege = spec.privilege.map(IpmiPrivilege::as_str);
    let params: [&dyn crate::db::ToValue; 9] = [
        &node,
        &spec.protocol.as_str(),
        &spec.address,
        &spec.login.username,
        &sealed,
        &tls,
        &spec.system_id,
        &at,
        &privilege,
    ];
    let updated = conn.execute(
        "UPDATE bmcs SET generation = generation + 1, protocol = $2, address = $3, username = $4, secret = $5, tls = $6, \
         system_id = $7, health = NULL, updated_at = $8, privilege = $9, pending_secret = NULL, pending_by = NULL, \
         pending_at = NULL WHERE node_id = $1",
        &params,
    )?;
    if updated == 0 {
        conn.execute(
            "INSERT INTO bmcs (node_id, generation, protocol, address, username, secret, tls, system_id, updated_at, privilege) \
             VALUES ($1, 1, $2, $3, $4, $5, $6, $7, $8, $9)",
            &params,
        )?;
    }
    let data = json!({"node": node, "protocol": spec.protocol, "address": spec.address});
    events::append(conn, "node.bmc.set", &format!("node/{node}"), None, &data, now)?;
    Ok(get(conn, node)?.ok_or(DbError::NoRow)?.info)
}

/// Who holds the pending slot during an operator's rotation.
pub const API_ROTATION: &str = "api";

/// Records (`Some`) or drops (`None`) the secret of a teardown run's rotation, which the
/// run's claim fences.
pub fn set_pending(
    conn: &mut dyn Conn,
    node: &str,
    run: &str,
    sealed: Option<&str>,
    now: OffsetDateTime,
) -> DbResult<()> {
    let at = to_millis(now);
    let (by, began) = (sealed.map(|_| run), sealed.map(|_| at));
    conn.execute(
        "UPDATE bmcs SET pending_secret = $1, pending_by = $2, pending_at = $3, updated_at = $4 WHERE node_id = $5",
        &[&sealed, &by, &began, &at, &node],
    )?;
    Ok(())
}

/// Records `sealed` as an operator's rotation's pending secret only if no rotation holds
/// the slot: true when this call claimed it.
pub fn claim_pending(conn: &mut dyn Conn, node: &str, sealed: &str, now: OffsetDateTime) -> DbResult<bool> {
    let at = to_millis(now);
    let n = conn.execute(
        "UPDATE bmcs SET pending_secret = $1, pending_by = $2, pending_at = $3, updated_at = $3 \
         WHERE node_id = $4 AND pending_secret IS NULL",
        &[&sealed, &API_ROTATION, &at, &node],
    )?;
    Ok(n == 1)
}

/// Drops the pending secret if it is still `sealed` (a refused rotation's own): true when
/// it was.
pub fn drop_pending(conn: &mut dyn Conn, node: &str, sealed: &str, now: OffsetDateTime) -> DbResult<bool> {
    let n = conn.execute(
        "UPDATE bmcs SET pending_secret = NULL, pending_by = NULL, pending_at = NULL, updated_at = $1 \
         WHERE node_id = $2 AND pending_secret = $3",
        &[&to_millis(now), &node, &sealed],
    )?;
    Ok(n == 1)
}

/// Makes the pending secret the current one (after the BMC took it), if it is still `sealed`:
/// a rotation that ran alongside and recorded its own secret is not promoted by this one.
pub fn promote_pending(conn: &mut dyn Conn, node: &str, sealed: &str, now: OffsetDateTime) -> DbResult<bool> {
    let n = conn.execute(
        "UPDATE bmcs SET secret = pending_secret, pending_secret = NULL, pending_by = NULL, pending_at = NULL, \
         generation = generation + 1, updated_at = $1 WHERE node_id = $2 AND pending_secret = $3",
        &[&to_millis(now), &node, &sealed],
    )?;
    if n == 1 {
        events::append(
            conn,
            "node.bmc.credential.rotated",
            &format!("node/{node}"),
            None,
            &json!({"node": node}),
            now,
        )?;
    }
    Ok(n == 1)
}

/// What is recorded of the node's BMC readings: the node's power and its BMC's health (each
/// `None` when there is none).
pub fn recorded(conn: &mut dyn Conn, node: &str) -> DbResult<(Option<String>, Option<String>)> {
    let row = conn.query_opt(
        "SELECT n.power AS power, b.health AS health FROM nodes n LEFT JOIN bmcs b ON b.node_id = n.id WHERE n.id = $1",
        &[&node],
    )?;
    Ok(match row {
        Some(row) => (row.get("power")?, row.get("health")?),
        None => (None, None),
    })
}

/// Records the health the BMC reported; an event when it changed, a warning one when it is
/// not OK.
pub fn record_health(conn: &mut dyn Conn, node: &str, health: Option<&str>, now: OffsetDateTime) -> DbResult<()> {
    let before: Option<String> = conn
        .query_opt("SELECT health FROM bmcs WHERE node_id = $1", &[&node])?
        .map(|r| r.get("health"))
        .transpose()?
        .flatten();
    if before.as_deref() == health {
        return Ok(());
    }
    conn.execute(
        "UPDATE bmcs SET health = $1, updated_at = $2 WHERE node_id = $3",
        &[&health, &to_millis(now), &node],
    )?;
    let kind = if health == Some("OK") { "node.health.ok" } else { "node.health.degraded" };
    events::append(
        conn,
        kind,
        &format!("node/{node}"),
        None,
        &json!({"node": node, "from": before, "to": health}),
        now,
    )?;
    Ok(())
}

/// Records the power state a BMC reported (power is observed state, apart from the
/// lifecycle: the node's generation does not change); an event when it changed.
pub fn record_power(conn: &mut dyn Conn, node: &str, power: &str, now: OffsetDateTime) -> DbResult<()> {
    let changed = conn.execute(
        "UPDATE nodes SET power = $1, updated_at = $2 WHERE id = $3 AND power <> $1",
        &[&power, &to_millis(now), &node],
    )?;
    if changed > 0 {
        events::append(
            conn,
            "node.power.changed",
            &format!("node/{node}"),
            None,
            &json!({"node": node, "power": power}),
            now,
        )?;
    }
    Ok(())
}

/// How often a running console bridge renews its session's heartbeat.
pub const CONSOLE_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(20);

/// A session whose heartbeat is older than this no longer holds the console (its bridge died).
const CONSOLE_STALE: time::Duration = time::Duration::seconds(60);

/// Records that a console session opened, unless another session holds the node's console
/// (one writer at a time): CONFLICT naming who holds it and since when.
pub fn open_console(
    conn: &mut dyn Conn,
    id: &str,
    node: &str,
    credential: &str,
    now: OffsetDateTime,
) -> Result<(), ApiError> {
    crate::nodes::lock(conn, node)?;
    let fresh = to_millis(now - CONSOLE_STALE);
    if let Some(open) = conn.query_opt(
        "SELECT id, credential_id, started_at FROM console_sessions \
         WHERE node_id = $1 AND ended_at IS NULL AND alive_at >= $2 ORDER BY started_at LIMIT 1",
        &[&node, &fresh],
    )? {
        let (session, who): (String, String) = (open.get("id")?, open.get("credential_id")?);
        let since = metal_types::clock::to_rfc3339(from_millis(open.get("started_at")?));
        return Err(ApiError::Conflict(format!(
            "node {node}'s console is open (session {session} of credential {who}, since {since}): one writer at a time"
        )));
    }
    let at = to_millis(now);
    conn.execute(
        "INSERT INTO console_sessions (id, node_id, credential_id, started_at, alive_at, bytes_in, bytes_out) \
         VALUES ($1, $2, $3, $4, $4, 0, 0)",
        &[&id, &node, &credential, &at],
    )?;
    let data = json!({"node": node, "session": id, "credential": credential});
    events::append(conn, "node.console.opened", &format!("node/{node}"), None, &data, now)?;
    Ok(())
}

/// Renews a running console session's heartbeat.
pub fn console_alive(conn: &mut dyn Conn, id: &str, now: OffsetDateTime) -> DbResult<()> {
    conn.execute(
        "UPDATE console_sessions SET alive_at = $1 WHERE id = $2 AND ended_at IS NULL",
        &[&to_millis(now), &id],
    )?;
    Ok(())
}

/// Records that a console session ended, with its byte counts.
pub fn close_console(conn: &mut dyn Conn, id: &str, bytes: (i64, i64), now: OffsetDateTime) -> DbResult<()> {
    conn.execute(
        "UPDATE console_sessions SET ended_at = $1, bytes_in = $2, bytes_out = $3 WHERE id = $4",
        &[&to_millis(now), &bytes.0, &bytes.1, &id],
    )?;
    let node: String = conn.query_one("SELECT node_id FROM console_sessions WHERE id = $1", &[&id])?.get("node_id")?;
    let data = json!({"node": node, "session": id, "bytesIn": bytes.0, "bytesOut": bytes.1});
    events::append(conn, "node.console.closed", &format!("node/{node}"), None, &data, now)?;
    Ok(())
}

/// A page of a node's console sessions (those started at or after `since`), newest first.
pub fn console_sessions(
    conn: &mut dyn Conn,
    node: &str,
    since: Option<OffsetDateTime>,
    page: &Page,
) -> Result<Paged<ConsoleSession>, ApiError> {
    let since = since.map_or(i64::MIN, to_millis);
    let mut select = Keyset::new("id, credential_id, started_at, ended_at, bytes_in, bytes_out", "console_sessions");
    select.and("node_id = {}", &node).and("started_at >= {}", &since);
    select.read(conn, &[("started_at", Order::Desc), ("id", Order::Asc)], page, |_, r| {
        Ok(ConsoleSession {
            id: r.get("id")?,
            credential_id: r.get("credential_id")?,
            started_at: metal_types::clock::from_millis(r.get("started_at")?),
            ended_at: r.get::<Option<i64>>("ended_at")?.map(metal_types::clock::from_millis),
            bytes_in: r.get("bytes_in")?,
            bytes_out: r.get("bytes_out")?,
        })
    })
}
