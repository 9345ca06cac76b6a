//! What a lessee sees of, and may do to, the machine of its live dedicated-root lease: its
//! own view of the node (nothing of the platform: no BMC, no credentials, no firmware
//! baseline, no other tenant) and the rules that decide when a tenant's hands reach it.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::event::Event;
use super::node::{Device, Node, NodeState, PowerState};
use super::reservation::{Binding, Reservation, ReservationState};
use crate::error::ApiError;

/// The newest events a lessee's view of its node carries.
pub const VIEW_EVENTS: i64 = 50;

/// A leased node as its lessee sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LeasedNode {
    /// Node id.
    pub id: String,
    /// Lifecycle state (`deployed` once the lessee's OS runs).
    pub state: NodeState,
    /// Power as last read from the BMC.
    pub power: PowerState,
    /// The lease (reservation) holding it.
    pub reservation_id: String,
    /// The lease's state.
    pub lease_state: ReservationState,
    /// Start of the lease window.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub lease_start: OffsetDateTime,
    /// End of the lease window: the teardown starts then.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub lease_end: OffsetDateTime,
    /// The profile deployed (or being deployed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<String>,
    /// Its version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_version: Option<i64>,
    /// The node's devices.
    pub devices: Vec<Device>,
    /// The lessee's events about the node since the lease started, newest first (at most 50).
    pub events: Vec<Event>,
}

/// A node as its caller may see it: the whole record for a platform admin, the lessee's
/// view for a member of the tenant leasing it.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
#[serde(untagged)]
pub enum NodeView {
    /// A platform admin's view.
    Admin(Box<Node>),
    /// A lessee's view.
    Lessee(Box<LeasedNode>),
}

/// `POST /v1/nodes/{id}/reinstall`: the profile version to deploy on the leased node (the
/// tenant's own profile, or a public one; the same version again is a reinstall too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReinstallRequest {
    /// The profile.
    pub profile_id: String,
    /// Its exact version.
    pub profile_version: u32,
}

/// A reinstall that started: the node is deploying, under the same lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReinstallStarted {
    /// The node.
    pub node_id: String,
    /// The lease.
    pub reservation_id: String,
    /// The profile deploying.
    pub profile_id: String,
    /// Its version.
    pub profile_version: u32,
    /// The workflow run that drives it (`GET /v1/nodes/{id}` shows its state).
    pub workflow: String,
}

/// A rescue or an unrescue that started: the node is in `rescue` while its run goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RescueStarted {
    /// The node.
    pub node_id: String,
    /// The lease.
    pub reservation_id: String,
    /// `rescue` (boot the rescue environment) or `unrescue` (boot the disk again).
    pub action: String,
    /// The workflow run that drives it (`GET /v1/nodes/{id}` shows its state).
    pub workflow: String,
}

/// What a lessee asks of its machine, for the rules and the audit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LesseeAction {
    /// Read the node, its power or its console sessions.
    Read,
    /// Power on, off, cycle or reset.
    Power,
    /// Open the serial console.
    Console,
    /// Redeploy it with a profile version.
    Reinstall,
    /// Boot the rescue environment, or the disk again after one.
    Rescue,
}

impl LesseeAction {
    /// Name in events and refusals.
    pub fn as_str(self) -> &'static str {
        match self {
            LesseeAction::Read => "read",
            LesseeAction::Power => "power",
            LesseeAction::Console => "console",
            LesseeAction::Reinstall => "reinstall",
            LesseeAction::Rescue => "rescue",
        }
    }
}

/// Whether `tenant`'s hands reach `node`, held by `lease` (the reservation in the node's
/// `heldBy`, if any), at `now`, for `action`. A node not leased to the tenant is NOT_FOUND
/// (never FORBIDDEN: no existence oracle); the tenant's own lease outside its window or
/// ended, or its node under teardown or not yet running its OS, is CONFLICT with why.
pub fn check(
    tenant: &str,
    node: &Node,
    lease: Option<&Reservation>,
    now: OffsetDateTime,
    action: LesseeAction,
) -> Result<(), ApiError> {
    let Some(lease) = lease.filter(|r| r.tenant_id == tenant && r.request.binding == Some(Binding::Node)) else {
        return Err(ApiError::NotFound(format!("node {}", node.id)));
    };
    let id = &lease.id;
    match lease.state {
        ReservationState::Active => {}
        ReservationState::Pending => {
            return Err(ApiError::Conflict(format!("lease {id} has not started: node {} is not yours yet", node.id)));
        }
        over => {
            return Err(ApiError::Conflict(format!(
                "lease {id} is {}: node {} is no longer yours",
                over.as_str(),
                node.id
            )));
        }
    }
    if now >= lease.end {
        return Err(ApiError::Conflict(format!("lease {id} ended at {}", crate::clock::to_rfc3339(lease.end))));
    }
    if now < lease.start {
        return Err(ApiError::Conflict(format!("lease {id} starts at {}", crate::clock::to_rfc3339(lease.start))));
    }
    if node.state == NodeState::Releasing {
        return Err(ApiError::Conflict(format!("node {} is under teardown", node.id)));
    }
    // A reinstall or a rescue that failed leaves the node failed, for the lessee to try
    // again (or to rescue it); in a rescue the lessee keeps every hand on its machine.
    let retry = matches!(action, LesseeAction::Reinstall | LesseeAction::Rescue) && node.state == NodeState::Failed;
    let yours = matches!(node.state, NodeState::Deployed | NodeState::Rescue);
    if action != LesseeAction::Read && !yours && !retry {
        return Err(ApiError::Conflict(format!(
            "node {} is {}: {} is yours once your OS is deployed",
            node.id,
            node.state.as_str(),
            action.as_str()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NOW: &str = "2026-12-06T12:00:00Z";

    fn node(state: &str) -> Node {
        serde_json::from_value(json!({
            "id": "n1", "generation": 3, "state": state, "power": "on", "maintenance": false, "cordoned": false,
            "tenantRoot": true, "trust": "tenant-controlled", "identityGeneration": 2, "heldBy": "r1",
            "labels": {}, "taints": [], "devices": [], "createdAt": NOW, "updatedAt": NOW}))
        .unwrap()
    }

    fn lease(tenant: &str, state: &str, binding: Option<&str>) -> Reservation {
        serde_json::from_value(json!({
            "id": "r1", "generation": 1, "tenantId": tenant, "poolId": "p1", "state": state,
            "request": {"tenantId": tenant, "poolId": "p1", "duration": "1d", "binding": binding},
            "start": "2026-12-06T00:00:00Z", "end": "2026-12-07T00:00:00Z", "nodes": ["n1"], "createdAt": NOW}))
        .unwrap()
    }

    fn at(t: &str) -> OffsetDateTime {
        OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).unwrap()
    }

    fn answer(tenant: &str, node: &Node, lease: Option<&Reservation>, now: &str, action: LesseeAction) -> String {
        match check(tenant, node, lease, at(now), action) {
            Ok(()) => "ok".into(),
            Err(e) => format!("{} {e}", e.status().as_u16()),
        }
    }

    #[test]
    fn only_the_lessee_of_a_live_node_lease_reaches_its_deployed_node() {
        let (deployed, live) = (node("deployed"), lease("acme", "active", Some("node")));
        assert_eq!(answer("acme", &deployed, Some(&live), NOW, LesseeAction::Power), "ok");
        assert_eq!(answer("acme", &deployed, Some(&live), NOW, LesseeAction::Read), "ok");
        // Another tenant, no lease, a lease that is not a node binding: never there.
        for (tenant, held) in [("other", Some(&live)), ("acme", None)] {
            assert_eq!(answer(tenant, &deployed, held, NOW, LesseeAction::Read), "404 node n1 not found");
        }
        let pooled = lease("acme", "active", None);
        assert_eq!(answer("acme", &deployed, Some(&pooled), NOW, LesseeAction::Read), "404 node n1 not found");
    }

    #[test]
    fn the_lessees_own_node_outside_its_lease_is_a_conflict_that_says_why() {
        let deployed = node("deployed");
        let ended = lease("acme", "ended", Some("node"));
        assert_eq!(
            answer("acme", &node("releasing"), Some(&ended), NOW, LesseeAction::Read),
            "409 lease r1 is ended: node n1 is no longer yours"
        );
        let pending = lease("acme", "pending", Some("node"));
        assert_eq!(
            answer("acme", &node("deploying"), Some(&pending), NOW, LesseeAction::Read),
            "409 lease r1 has not started: node n1 is not yours yet"
        );
        let live = lease("acme", "active", Some("node"));
        assert_eq!(
            answer("acme", &deployed, Some(&live), "2026-12-07T00:00:00Z", LesseeAction::Power),
            "409 lease r1 ended at 2026-12-07T00:00:00Z"
        );
        assert_eq!(
            answer("acme", &node("releasing"), Some(&live), NOW, LesseeAction::Read),
            "409 node n1 is under teardown"
        );
        // Reading is allowed while the OS deploys; acting waits for it.
        assert_eq!(answer("acme", &node("deploying"), Some(&live), NOW, LesseeAction::Read), "ok");
        assert_eq!(
            answer("acme", &node("deploying"), Some(&live), NOW, LesseeAction::Console),
            "409 node n1 is deploying: console is yours once your OS is deployed"
        );
    }

    #[test]
    fn a_reinstall_that_failed_may_be_tried_again_and_nothing_else_acts_on_a_failed_node() {
        let live = lease("acme", "active", Some("node"));
        assert_eq!(answer("acme", &node("deployed"), Some(&live), NOW, LesseeAction::Reinstall), "ok");
        assert_eq!(answer("acme", &node("failed"), Some(&live), NOW, LesseeAction::Reinstall), "ok");
        assert_eq!(
            answer("acme", &node("failed"), Some(&live), NOW, LesseeAction::Power),
            "409 node n1 is failed: power is yours once your OS is deployed"
        );
        assert_eq!(
            answer("acme", &node("deploying"), Some(&live), NOW, LesseeAction::Reinstall),
            "409 node n1 is deploying: reinstall is yours once your OS is deployed"
        );
        assert_eq!(
            answer("other", &node("failed"), Some(&live), NOW, LesseeAction::Reinstall),
            "404 node n1 not found"
        );
    }

    #[test]
    fn a_node_in_rescue_stays_in_its_lessees_hands_and_a_failed_one_may_be_rescued() {
        let live = lease("acme", "active", Some("node"));
        for action in [LesseeAction::Power, LesseeAction::Console, LesseeAction::Reinstall, LesseeAction::Rescue] {
            assert_eq!(answer("acme", &node("rescue"), Some(&live), NOW, action), "ok", "{action:?}");
        }
        assert_eq!(answer("acme", &node("failed"), Some(&live), NOW, LesseeAction::Rescue), "ok");
        assert_eq!(
            answer("acme", &node("deploying"), Some(&live), NOW, LesseeAction::Rescue),
            "409 node n1 is deploying: rescue is yours once your OS is deployed"
        );
        assert_eq!(answer("other", &node("rescue"), Some(&live), NOW, LesseeAction::Read), "404 node n1 not found");
    }
}
