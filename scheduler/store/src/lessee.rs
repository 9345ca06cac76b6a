//! A lessee's reach into the store: the node of its live lease (checked by
//! `metal_types::model::lessee::check`), the lessee's view of it, the tenant's leased nodes,
//! and the audit of what a lessee did or was refused, recorded on the node and the lease.

use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::{Conn, capacity, events, nodes};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::lessee::{LeasedNode, LesseeAction, VIEW_EVENTS, check};
use metal_types::model::node::Node;
use metal_types::model::reservation::{Binding, Reservation, ReservationState};

/// The node and the reservation holding it, if one does.
pub fn held(conn: &mut dyn Conn, node: &str) -> ApiResult<(Node, Option<Reservation>)> {
    let found = nodes::get(conn, node)?.ok_or_else(|| ApiError::NotFound(format!("node {node}")))?;
    let lease = match &found.held_by {
        Some(id) => capacity::get_reservation(conn, id)?,
        None => None,
    };
    Ok((found, lease))
}

/// The node of `tenant`'s live lease, and that lease, if `action` may reach it now.
pub fn leased(
    conn: &mut dyn Conn,
    tenant: &str,
    node: &str,
    now: OffsetDateTime,
    action: LesseeAction,
) -> ApiResult<(Node, Reservation)> {
    let (found, lease) = held(conn, node)?;
    check(tenant, &found, lease.as_ref(), now, action)?;
    let lease = lease.ok_or_else(|| ApiError::Internal("a checked lease vanished".into()))?;
    Ok((found, lease))
}

/// The profile version on `node` under `lease`: the one its plan was derived from, or the
/// lease's requested one before there is a plan.
fn lease_profile(conn: &mut dyn Conn, node: &str, lease: &Reservation) -> ApiResult<Option<(String, i64)>> {
    Ok(match crate::boot::plan_profile(conn, node)? {
        Some(deployed) => Some(deployed),
        None => lease.request.node.as_ref().and_then(|n| n.profile_id.clone().zip(n.profile_version.map(i64::from))),
    })
}

/// The lessee's view of `node` under `lease`.
pub fn view(conn: &mut dyn Conn, node: Node, lease: &Reservation) -> ApiResult<LeasedNode> {
    let (profile_id, profile_version) = lease_profile(conn, &node.id, lease)?.unzip();
    let events = events::newest_of(conn, &lease.tenant_id, &format!("node/{}", node.id), lease.start, VIEW_EVENTS)?;
    Ok(LeasedNode {
        id: node.id,
        state: node.state,
        power: node.power,
        reservation_id: lease.id.clone(),
        lease_state: lease.state,
        lease_start: lease.start,
        lease_end: lease.end,
        profile_id,
        profile_version,
        devices: node.devices,
        events,
    })
}

/// The SSH keys the console gateway takes for `node` under `lease`: the authorized keys of
/// the profile version deployed on it (the lease's requested version before its plan) and
/// those its tenant registered.
pub fn console_keys(conn: &mut dyn Conn, node: &str, lease: &Reservation) -> ApiResult<Vec<String>> {
    let mut keys = match lease_profile(conn, node, lease)? {
        Some((id, version)) => {
            crate::profiles::version(conn, &id, version)?.map(|(_, v)| v.spec.ssh_authorized_keys).unwrap_or_default()
        }
        None => Vec::new(),
    };
    keys.extend(crate::auth::tenant_ssh_keys(conn, &lease.tenant_id)?.unwrap_or_default());
    Ok(keys)
}

/// The nodes of `tenant`'s live node leases (every tenant's for `None`), by lease then node.
pub fn leased_nodes(conn: &mut dyn Conn, tenant: Option<&str>) -> ApiResult<Vec<LeasedNode>> {
    let mut leases = capacity::list_reservations(conn, tenant)?;
    leases.retain(|r| r.state == ReservationState::Active && r.request.binding == Some(Binding::Node));
    leases.sort_by(|a, b| a.id.cmp(&b.id));
    let mut out = Vec::new();
    for lease in &leases {
        for id in &lease.nodes {
            if let Some(node) = nodes::get(conn, id)?.filter(|n| n.held_by.as_deref() == Some(lease.id.as_str())) {
                out.push(view(conn, node, lease)?);
            }
        }
    }
    Ok(out)
}

/// Records what a lessee did to its node as `lessee.KIND` on the node and on the lease, both
/// visible to the lessee's tenant; `data` gets the node, the lease and the credential.
pub fn record(
    conn: &mut dyn Conn,
    kind: &str,
    lease: &Reservation,
    node: &str,
    credential: &str,
    mut data: Value,
    now: OffsetDateTime,
) -> ApiResult<()> {
    if let Some(fields) = data.as_object_mut() {
        fields.insert("node".into(), json!(node));
        fields.insert("reservation".into(), json!(lease.id));
        fields.insert("credential".into(), json!(credential));
    }
    let kind = format!("lessee.{kind}");
    for subject in [format!("node/{node}"), format!("reservation/{}", lease.id)] {
        events::append(conn, &kind, &subject, Some(&lease.tenant_id), &data, now)?;
    }
    Ok(())
}

/// Records a refusal of a tenant member's request about a node (`lessee.refused`, visible to
/// the caller's tenant and to admins): who, what, and the answer, never the request's body.
pub fn refused(
    conn: &mut dyn Conn,
    tenant: &str,
    credential: &str,
    node: &str,
    request: &str,
    status: u16,
    now: OffsetDateTime,
) -> ApiResult<()> {
    let data = json!({"node": node, "credential": credential, "request": request, "status": status});
    events::append(conn, "lessee.refused", &format!("node/{node}"), Some(tenant), &data, now)?;
    Ok(())
}
