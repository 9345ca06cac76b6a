//! The metal side's queue: `lease.start` (a node binding's start came) and `lease.end` (its
//! allocation was released, ran out or failed). Each row is taken by the compare-and-set
//! that marks it done, in the transaction that acts on it, so it is handled exactly once.

use time::OffsetDateTime;

use super::lease;
use crate::app::AppState;
use metal_store::work::{Side, WorkItem};
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::node::{Deadlines, NodeState, NodeTransition};
use metal_types::work::{LeaseEnd, MetalWork, PoolRetire};

/// Handles every queued metal work row; returns how many it handled.
pub async fn drain_once(app: &AppState) -> ApiResult<usize> {
    let controller_url = app.boot.as_ref().map(|b| b.controller_url.clone());
    let deadlines = app.config.deadlines;
    let handler =
        move |tx: &mut dyn Conn, item: &WorkItem, now| handle(tx, item, controller_url.as_deref(), &deadlines, now);
    store::work::drain(&app.store, &*app.clock, Side::Metal, handler).await
}

fn handle(
    tx: &mut dyn Conn,
    item: &WorkItem,
    controller_url: Option<&str>,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<String> {
    match MetalWork::parse(&item.kind, &item.payload) {
        Ok(Some(MetalWork::LeaseStart(start))) => lease::start(tx, &start, controller_url, deadlines, now),
        Ok(Some(MetalWork::LeaseEnd(request))) => end(tx, &request, deadlines, now),
        Ok(Some(MetalWork::PoolRetire(retire))) => retire_pool(tx, &retire, now),
        Ok(None) => Ok(format!("unknown kind {}: ignored", item.kind)),
        Err(e) => Err(ApiError::Internal(format!("work {}: {e}", item.id))),
    }
}

/// Retires the machines of a deleted tenant's pool: every node that may move to retired
/// now does (the rest are named in the result, for an operator).
fn retire_pool(tx: &mut dyn Conn, retire: &PoolRetire, now: OffsetDateTime) -> ApiResult<String> {
    let (pool, reason) = (retire.pool.as_str(), retire.reason.as_str());
    let (mut retired, mut left) = (Vec::new(), Vec::new());
    for node in store::nodes::list(tx, None)?.into_iter().filter(|n| n.pool_id.as_deref() == Some(pool)) {
        if !node.state.can_move_to(NodeState::Retired) {
            left.push(format!("{} ({})", node.id, node.state));
            continue;
        }
        let request = NodeTransition {
            from: node.state,
            to: NodeState::Retired,
            generation: Some(node.generation),
            owner: None,
            reason: Some(reason.to_owned()),
        };
        store::nodes::transition(tx, &node.id, &request, &Deadlines::default(), now)?;
        retired.push(node.id);
    }
    Ok(format!("pool {pool}: retired [{}]; left [{}]", retired.join(", "), left.join(", ")))
}

/// Ends a lease: a deployed node starts its teardown; a node still deploying has its lease
/// start cancelled and is torn down too, as is one in a rescue or whose reinstall failed; a quarantined
/// node waits for `recover`.
fn end(tx: &mut dyn Conn, request: &LeaseEnd, deadlines: &Deadlines, now: OffsetDateTime) -> ApiResult<String> {
    let Some(node) = store::nodes::get(tx, &request.node)? else {
        return Ok(format!("node {} is gone", request.node));
    };
    if node.lease_id.as_deref() != Some(request.allocation.as_str()) {
        return Ok(format!("node {} is not leased by {}: nothing to tear down", node.id, request.allocation));
    }
    let node = match node.state {
        NodeState::Deployed => node,
        NodeState::Deploying => {
            if let Some(run) = store::workflows::running_for(tx, &node.id)? {
                store::workflows::cancel(tx, &run, "the lease ended before its deploy bound", now)?;
            }
            let request = NodeTransition {
                from: NodeState::Deploying,
                to: NodeState::Failed,
                generation: Some(node.generation),
                owner: None,
                reason: Some(format!("lease {} ended while deploying: {}", request.allocation, request.reason)),
            };
            store::nodes::transition(tx, &node.id, &request, deadlines, now)?
        }
        NodeState::Failed if node.maintenance => {
            return Ok(format!("node {} is quarantined: recover it to run the teardown", node.id));
        }
        // A failed reinstall or rescue (the lessee's OS, not the platform's evidence), or a
        // rescue running (its console sessions close as the lease goes): torn down as is;
        // a run that has not yet seen the end is over.
        NodeState::Failed | NodeState::Rescue => {
            if let Some(run) = store::workflows::running_for(tx, &node.id)? {
                store::workflows::cancel(tx, &run, "the lease ended", now)?;
            }
            node
        }
        state => return Ok(format!("node {} is {state}: nothing to tear down", node.id)),
    };
    let run = super::teardown::begin(
        tx,
        &node,
        &format!("lease {} ended: {}", request.allocation, request.reason),
        deadlines,
        now,
    )?;
    Ok(format!("teardown {run}"))
}
