//! Switch rows: the site's switches (the SSH key stored sealed, never read out but to call
//! the switch), each node's ports with what the last move read back, and the tenant VLANs
//! of live leases (`tenant_vlans`: one per lease and pool, the primary key keeps two leases
//! off one VLAN on both backends).

use time::OffsetDateTime;

use crate::page::{Keyset, Order};
use crate::{Conn, DbResult, Row};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::pool::VlanRange;
use metal_types::model::switch::{NodePort, NodePortSpec, PortSource, SwitchCreate, SwitchInfo};
use metal_types::page::{Page, Paged};

/// A switch as stored: what the API shows and the sealed key.
#[derive(Debug, Clone)]
pub struct StoredSwitch {
    /// What the API shows.
    pub info: SwitchInfo,
    /// The sealed SSH key (`secrets::open` it with the switch id).
    pub secret: Option<String>,
}

const SWITCH_COLUMNS: &str = "id, driver, address, command, secret, host_key, chassis_id, created_at";

fn switch_from_row(row: &Row) -> DbResult<StoredSwitch> {
    let secret: Option<String> = row.get("secret")?;
    Ok(StoredSwitch {
        info: SwitchInfo {
            id: row.get("id")?,
            driver: row.parse("driver")?,
            address: row.get("address")?,
            command: row.get("command")?,
            has_ssh_key: secret.is_some(),
            host_key: row.get("host_key")?,
            chassis_id: row.get("chassis_id")?,
            created_at: from_millis(row.get("created_at")?),
        },
        secret,
    })
}

/// Adds a switch (CONFLICT when its id is taken).
pub fn insert(
    conn: &mut dyn Conn,
    create: &SwitchCreate,
    sealed: Option<&str>,
    now: OffsetDateTime,
) -> Result<SwitchInfo, ApiError> {
    let inserted = crate::db::insert_unique(
        conn,
        "INSERT INTO switches (id, driver, address, command, secret, host_key, chassis_id, created_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        &[
            &create.id,
            &create.driver.as_str(),
            &create.address,
            &create.command,
            &sealed,
            &create.host_key,
            &create.chassis_id.as_ref().map(|c| c.to_lowercase()),
            &to_millis(now),
        ],
    )?;
    if !inserted {
        return Err(ApiError::Conflict(format!("switch {} exists", create.id)));
    }
    get(conn, &create.id)?.map(|s| s.info).ok_or_else(|| ApiError::Internal("the switch vanished".into()))
}

/// One switch.
pub fn get(conn: &mut dyn Conn, id: &str) -> DbResult<Option<StoredSwitch>> {
    let row = conn.query_opt(&format!("SELECT {SWITCH_COLUMNS} FROM switches WHERE id = $1"), &[&id])?;
    row.as_ref().map(switch_from_row).transpose()
}

/// Every switch, by id.
pub fn list(conn: &mut dyn Conn) -> DbResult<Vec<SwitchInfo>> {
    Keyset::new(SWITCH_COLUMNS, "switches").all(conn, SWITCH_KEY, info_from_row)
}

/// A page of the switches, by id.
pub fn page(conn: &mut dyn Conn, page: &Page) -> Result<Paged<SwitchInfo>, ApiError> {
    Keyset::new(SWITCH_COLUMNS, "switches").read(conn, SWITCH_KEY, page, info_from_row)
}

const SWITCH_KEY: &[(&str, Order)] = &[("id", Order::Asc)];

fn info_from_row(_: &mut dyn Conn, row: &Row) -> DbResult<SwitchInfo> {
    switch_from_row(row).map(|s| s.info)
}

/// Removes a switch no node port is on; false when there was none.
pub fn delete(conn: &mut dyn Conn, id: &str) -> Result<bool, ApiError> {
    let used = conn.query_opt("SELECT node_id FROM node_ports WHERE switch_id = $1 LIMIT 1", &[&id])?;
    if let Some(row) = used {
        let node: String = row.get("node_id")?;
        return Err(ApiError::Conflict(format!("node {node} has a port on switch {id}: move it first")));
    }
    Ok(conn.execute("DELETE FROM switches WHERE id = $1", &[&id])? == 1)
}

const PORT_COLUMNS: &str = "mac, switch_id, port, source, network, vlan, moved_at";

fn port_from_row(row: &Row) -> DbResult<NodePort> {
    let vlan: Option<i64> = row.get("vlan")?;
    let moved_at: Option<i64> = row.get("moved_at")?;
    Ok(NodePort {
        mac: row.get("mac")?,
        switch_id: row.get("switch_id")?,
        port: row.get("port")?,
        source: row.enum_text("source")?,
        network: row.get("network")?,
        vlan: vlan.and_then(|v| u16::try_from(v).ok()),
        moved_at: moved_at.map(from_millis),
    })
}

/// The node's ports, by MAC.
pub fn ports(conn: &mut dyn Conn, node_id: &str) -> DbResult<Vec<NodePort>> {
    conn.query(&format!("SELECT {PORT_COLUMNS} FROM node_ports WHERE node_id = $1 ORDER BY mac"), &[&node_id])?
        .iter()
        .map(port_from_row)
        .collect()
}

/// Replaces the node's ports with `ports` from `source`; every switch must exist and no port
/// may be another node's.
pub fn set_ports(
    conn: &mut dyn Conn,
    node_id: &str,
    specs: &[NodePortSpec],
    source: PortSource,
) -> Result<Vec<NodePort>, ApiError> {
    conn.execute("DELETE FROM node_ports WHERE node_id = $1", &[&node_id])?;
    let source_text = match source {
        PortSource::Operator => "operator",
        PortSource::Lldp => "lldp",
    };
    for (i, port) in specs.iter().enumerate() {
        if get(conn, &port.switch_id)?.is_none() {
            return Err(ApiError::invalid(format!("ports[{i}].switchId"), format!("no switch {}", port.switch_id)));
        }
        let inserted = crate::db::insert_unique(
            conn,
            "INSERT INTO node_ports (node_id, mac, switch_id, port, source) VALUES ($1, $2, $3, $4, $5)",
            &[&node_id, &port.mac, &port.switch_id, &port.port, &source_text],
        )?;
        if !inserted {
            return Err(ApiError::Conflict(format!(
                "port {} of switch {} is another node's, or MAC {} is listed twice",
                port.port, port.switch_id, port.mac
            )));
        }
    }
    Ok(ports(conn, node_id)?)
}

/// Records what a move read back on one port.
pub fn record_move(
    conn: &mut dyn Conn,
    node_id: &str,
    mac: &str,
    network: &str,
    vlan: u16,
    now: OffsetDateTime,
) -> DbResult<()> {
    conn.execute(
        "UPDATE node_ports SET network = $1, vlan = $2, moved_at = $3 WHERE node_id = $4 AND mac = $5",
        &[&network, &i64::from(vlan), &to_millis(now), &node_id, &mac],
    )?;
    Ok(())
}

/// The tenant VLAN of lease `lease_id` in `pool` for `node_id`: the lease's when it holds one
/// already, else the lowest free one of `range` (CONFLICT when all are held). The node is
/// recorded on it.
pub fn tenant_vlan(
    conn: &mut dyn Conn,
    pool_id: &str,
    lease_id: &str,
    node_id: &str,
    range: VlanRange,
    now: OffsetDateTime,
) -> Result<u16, ApiError> {
    let held =
        conn.query_opt("SELECT vlan FROM tenant_vlans WHERE pool_id = $1 AND lease_id = $2", &[&pool_id, &lease_id])?;
    let vlan = match held {
        Some(row) => row.get::<i64>("vlan")?,
        None => {
            let taken: Vec<i64> = conn
                .query("SELECT vlan FROM tenant_vlans WHERE pool_id = $1", &[&pool_id])?
                .iter()
                .map(|row| row.get("vlan"))
                .collect::<DbResult<_>>()?;
            let free = (range.first..=range.last).find(|v| !taken.contains(&i64::from(*v))).ok_or_else(|| {
                ApiError::Conflict(format!(
                    "pool {pool_id}'s tenant VLANs {}-{} are all held by live leases",
                    range.first, range.last
                ))
            })?;
            conn.execute(
                "INSERT INTO tenant_vlans (pool_id, vlan, lease_id, allocated_at) VALUES ($1, $2, $3, $4)",
                &[&pool_id, &i64::from(free), &lease_id, &to_millis(now)],
            )?;
            i64::from(free)
        }
    };
    conn.execute("DELETE FROM tenant_vlan_nodes WHERE node_id = $1", &[&node_id])?;
    conn.execute(
        "INSERT INTO tenant_vlan_nodes (node_id, pool_id, vlan, lease_id) VALUES ($1, $2, $3, $4)",
        &[&node_id, &pool_id, &vlan, &lease_id],
    )?;
    u16::try_from(vlan).map_err(|_| ApiError::Internal(format!("stored VLAN {vlan}")))
}

/// The node leaves its tenant VLAN; a VLAN no node is on any more is free again. Returns
/// the VLANs freed.
pub fn leave_tenant_vlan(conn: &mut dyn Conn, node_id: &str) -> DbResult<u64> {
    conn.execute("DELETE FROM tenant_vlan_nodes WHERE node_id = $1", &[&node_id])?;
    conn.execute(
        "DELETE FROM tenant_vlans WHERE NOT EXISTS (SELECT 1 FROM tenant_vlan_nodes t \
         WHERE t.pool_id = tenant_vlans.pool_id AND t.vlan = tenant_vlans.vlan)",
        &[],
    )
}
