//! The metal side of a tenant-root lease: the workflow engine and its definitions (the
//! lease start, a reinstall, a rescue, the teardown and its agentless variant), and the handling of the work the
//! capacity side queues. It talks to the capacity side only through work rows
//! (`store::work`); it never reads or writes reservations or allocations.

pub mod bmcs;
pub mod boot;
pub mod connections;
pub mod console;
pub mod discovery;
pub mod fencing;
pub mod images;
pub mod installer;
pub mod lease;
pub mod measured_boot;
pub mod network;
pub mod provision;
pub mod reinstall;
pub mod rescue;
pub mod teardown;
pub mod work;
pub mod workflow;

use workflow::{Definition, Hooks};

/// Every workflow definition with its hooks.
pub fn definitions() -> [(&'static Definition, &'static dyn Hooks); 6] {
    [
        (&lease::START, &lease::LeaseStart),
        (&reinstall::REINSTALL, &reinstall::Reinstall),
        (&rescue::RESCUE, &rescue::Rescue),
        (&rescue::UNRESCUE, &rescue::Rescue),
        (&teardown::RELEASE, &teardown::Teardown),
        (&teardown::RELEASE_OOB, &teardown::Teardown),
    ]
}

use serde_json::json;
use time::OffsetDateTime;

use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::node::{Deadlines, NodeState, NodeTransition};

/// Quarantines a node whose workflow failed: `failed` (from where it was), maintenance
/// on, still tenant root and tenant-controlled, the failing step and its reason on the node
/// and in `node.tenant-root.quarantined`.
pub fn quarantine(tx: &mut dyn Conn, node_id: &str, reason: &str, now: OffsetDateTime) -> ApiResult<()> {
    let node = store::nodes::get(tx, node_id)?.ok_or_else(|| ApiError::NotFound(format!("node {node_id}")))?;
    let failed = if node.state.can_move_to(NodeState::Failed) {
        let request = NodeTransition {
            from: node.state,
            to: NodeState::Failed,
            generation: Some(node.generation),
            owner: None,
            reason: Some(reason.to_owned()),
        };
        store::nodes::transition(tx, node_id, &request, &Deadlines::default(), now)?
    } else {
        node
    };
    let failed = if failed.maintenance { failed } else { store::nodes::set_maintenance(tx, &failed, true, now)? };
    store::events::append(
        tx,
        "node.tenant-root.quarantined",
        &format!("node/{node_id}"),
        None,
        &json!({"node": node_id, "state": failed.state, "failedFrom": failed.failed_from, "reason": reason}),
        now,
    )?;
    Ok(())
}
