//! A lessee's rescue (issue 33): the machine of a running tenant-root lease boots a rescue
//! environment (sshd with the lessee's keys, the usual repair tools, its disks untouched)
//! on the lease's tenant network, and `unrescue` boots its disk again.
//!
//! `metal-tenant-root-rescue@1`: power off, the ports to the pool's cleaning VLAN, a network
//! boot whose script loads the rescue ramdisk and the lessee's keys (`boot::ipxe`; the
//! token is only on the file URLs, never on the kernel command line, and it is spent when
//! the keys are fetched), the wait for that fetch, then the ports to the lease's tenant VLAN,
//! where the rescue asks DHCP for its address (it ignores the provisioning DHCP server it
//! booted from). The rescue never joins: it holds no token, key or certificate of the
//! platform. `metal-tenant-root-unrescue@1`: power off, the ports to the tenant VLAN (a
//! rescue that failed early left them on cleaning), the disk booted.
//!
//! The node is `rescue` from the request on, `deployed` again once unrescued. A run that
//! fails leaves it `failed` without maintenance, as a reinstall does: the lessee rescues,
//! unrescues or reinstalls again, and the lease's end tears it down from either state.

use std::time::Duration;

use futures::FutureExt as _;
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::lease::{self, SWITCH_STEP, context_str};
use super::workflow::{Definition, Hooks, Outcome, StepDef};
use crate::app::AppState;
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::node::{Deadlines, NodeState, NodeTransition};
use metal_types::model::reservation::Reservation;
use metal_types::model::workflow::WorkflowRun;

/// The rescue: off, to cleaning, the rescue's network boot, its files fetched, to the
/// tenant VLAN.
pub static RESCUE: Definition = Definition {
    name: "metal-tenant-root-rescue@1",
    steps: &[
        StepDef { name: "power-off", ..SWITCH_STEP },
        StepDef { name: "network-cleaning", ..SWITCH_STEP },
        StepDef { name: "network-boot", ..lease::DEPLOY_STEPS[1] },
        StepDef {
            name: "await-rescue",
            attempts: 1,
            deadline: Duration::from_secs(600),
            backoff: Duration::from_secs(10),
            poll: Duration::from_secs(2),
        },
        StepDef { name: "network-tenant", ..SWITCH_STEP },
    ],
};

/// The unrescue: off, to the tenant VLAN, the disk booted.
pub static UNRESCUE: Definition = Definition {
    name: "metal-tenant-root-unrescue@1",
    steps: &[
        StepDef { name: "power-off", ..SWITCH_STEP },
        StepDef { name: "network-tenant", ..SWITCH_STEP },
        StepDef { name: "boot-disk", ..SWITCH_STEP },
    ],
};

/// What a lessee (or an admin) asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// Boot the rescue environment.
    Rescue,
    /// Boot the disk again.
    Unrescue,
}

impl Ask {
    /// Its name in the API and in events.
    pub fn as_str(self) -> &'static str {
        match self {
            Ask::Rescue => "rescue",
            Ask::Unrescue => "unrescue",
        }
    }

    fn definition(self) -> &'static Definition {
        match self {
            Ask::Rescue => &RESCUE,
            Ask::Unrescue => &UNRESCUE,
        }
    }
}

/// Starts a rescue or an unrescue of `node_id` under `lease`, asked by credential `by`, in
/// the caller's transaction; returns the run. Refused (CONFLICT, nothing changed) when the
/// node is not the lease's, is busy with another run, is quarantined, or is in a state the
/// ask does not start from: a rescue from `deployed` or `failed`, an unrescue from `rescue`
/// or `failed`.
pub fn begin(
    tx: &mut dyn Conn,
    node_id: &str,
    lease: &Reservation,
    ask: Ask,
    by: &str,
    now: OffsetDateTime,
) -> ApiResult<String> {
    let node = store::nodes::get(tx, node_id)?.ok_or_else(|| ApiError::NotFound(format!("node {node_id}")))?;
    let Some(allocation) = node.lease_id.clone() else {
        return Err(ApiError::Conflict(format!("node {} carries no lease: nothing to {}", node.id, ask.as_str())));
    };
    if node.maintenance {
        return Err(ApiError::Conflict(format!("node {} is quarantined (maintenance): no {}", node.id, ask.as_str())));
    }
    let from: &[NodeState] = match ask {
        Ask::Rescue => &[NodeState::Deployed, NodeState::Failed],
        Ask::Unrescue => &[NodeState::Rescue, NodeState::Failed],
    };
    if !from.contains(&node.state) {
        let wanted: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
        return Err(ApiError::Conflict(format!(
            "node {} is {}: a {} starts from a node that is {}",
            node.id,
            node.state,
            ask.as_str(),
            wanted.join(" or ")
        )));
    }
    if let Some(run) = store::workflows::running_for(tx, &node.id)? {
        return Err(ApiError::Conflict(format!("node {} is busy with {} ({})", node.id, run.definition, run.id)));
    }
    let pool = store::capacity::pool_of(tx, &node)?.ok_or_else(|| {
        ApiError::Conflict(format!("node {} is in no pool: only a tenant-root lease's node is rescued", node.id))
    })?;
    let run = format!("run-{}", uuid::Uuid::new_v4().simple());
    // A rescue boot the last rescue left open is over: its token fetches nothing more.
    store::boots::end(tx, &node.id, &format!("{} by {by}", ask.as_str()), now)?;
    if node.state != NodeState::Rescue {
        let request = NodeTransition {
            from: node.state,
            to: NodeState::Rescue,
            generation: Some(node.generation),
            owner: Some(format!("workflow/{run}")),
            reason: Some(format!("{} under lease {} by {by}", ask.as_str(), lease.id)),
        };
        store::nodes::transition(tx, &node.id, &request, &Deadlines::default(), now)?;
    }
    let context = json!({"reservation": lease.id, "allocation": allocation, "tenant": lease.tenant_id,
                         "pool": pool.id, "by": by, "ask": ask.as_str()});
    let definition = ask.definition();
    store::workflows::create(tx, &run, &node.id, definition.name, &definition.specs(), &context, now)?;
    let kind = match ask {
        Ask::Rescue => "node.tenant-root.rescuing",
        Ask::Unrescue => "node.tenant-root.unrescuing",
    };
    let data = json!({"node": node.id, "reservation": lease.id, "from": node.state, "by": by, "workflow": run});
    store::events::append(tx, kind, &format!("node/{}", node.id), Some(&lease.tenant_id), &data, now)?;
    Ok(run)
}

/// Waits until the rescue's boot fetched its keys (the last of its files): from then on
/// the ramdisk runs, and the ports may leave the network it booted from.
async fn await_rescue(app: &AppState, run: &WorkflowRun) -> Outcome {
    let id = run.node_id.clone();
    let boots = match app.store.read(move |tx| store::boots::BOOTS.all(tx, &id)).await {
        Ok(boots) => boots,
        Err(e) => return Outcome::Retry(e.to_string(), Value::Null),
    };
    match boots.iter().find(|b| b.run_id.as_deref() == Some(run.id.as_str())) {
        Some(boot) if boot.joined_from.is_some() => {
            Outcome::done(json!({"boot": boot.id, "fetchedBy": boot.joined_from}))
        }
        Some(boot) if boot.ended.is_some() => Outcome::Failed(
            format!(
                "the rescue's boot {} ended before it fetched its files: {}",
                boot.id,
                boot.ended.as_deref().unwrap_or("")
            ),
            Value::Null,
        ),
        Some(boot) if boot.taken() => Outcome::Waiting(format!("boot {}: the rescue's files are loading", boot.id)),
        _ => Outcome::Waiting("the machine has not asked for its boot script yet".into()),
    }
}

/// The rescue's and the unrescue's steps and end hooks.
#[derive(Debug)]
pub struct Rescue;

impl Hooks for Rescue {
    fn step<'a>(
        &'a self,
        app: &'a AppState,
        run: &'a WorkflowRun,
        step: &'a str,
    ) -> futures::future::BoxFuture<'a, Outcome> {
        async move {
            match step {
                "power-off" => super::teardown::power_off(app, &run.node_id).await,
                "network-cleaning" => super::reinstall::network_cleaning(app, run).await,
                "network-boot" => lease::network_boot_in(app, run, NodeState::Rescue).await,
                "await-rescue" => await_rescue(app, run).await,
                "network-tenant" => lease::network_tenant(app, run).await,
                "boot-disk" => lease::power_on_disk(app, run).await,
                other => Outcome::Failed(format!("{} has no step {other}", run.definition), Value::Null),
            }
        }
        .boxed()
    }

    /// A rescue leaves the node in `rescue`; an unrescue moves it to `deployed`.
    fn succeeded(&self, tx: &mut dyn Conn, run: &WorkflowRun, now: OffsetDateTime) -> ApiResult<()> {
        if run.definition == UNRESCUE.name {
            settle(tx, run, NodeState::Deployed, "unrescued: the disk booted".into(), now)?;
            return record(tx, run, "node.tenant-root.unrescued", None, now);
        }
        record(tx, run, "node.tenant-root.rescued", None, now)
    }

    /// The node fails (from `rescue`), without maintenance; the lease runs on.
    fn failed(&self, tx: &mut dyn Conn, run: &WorkflowRun, reason: &str, now: OffsetDateTime) -> ApiResult<()> {
        let ask = context_str(run, "ask").to_owned();
        settle(tx, run, NodeState::Failed, format!("{ask} failed: {reason}"), now)?;
        record(tx, run, &format!("node.tenant-root.{ask}-failed"), Some(reason), now)
    }
}

/// Moves the node from `rescue` to `to` (nothing when the lease's end moved it on).
fn settle(tx: &mut dyn Conn, run: &WorkflowRun, to: NodeState, reason: String, now: OffsetDateTime) -> ApiResult<()> {
    let Some(node) = store::nodes::get(tx, &run.node_id)? else { return Ok(()) };
    if node.state == NodeState::Rescue {
        let request = NodeTransition {
            from: node.state,
            to,
            generation: Some(node.generation),
            owner: None,
            reason: Some(reason),
        };
        store::nodes::transition(tx, &node.id, &request, &Deadlines::default(), now)?;
    }
    Ok(())
}

/// How the run ended, as an event the lease's tenant sees.
fn record(
    tx: &mut dyn Conn,
    run: &WorkflowRun,
    kind: &str,
    reason: Option<&str>,
    now: OffsetDateTime,
) -> ApiResult<()> {
    let mut data = json!({"node": run.node_id, "reservation": run.context["reservation"], "workflow": run.id});
    if let Some(reason) = reason {
        data["reason"] = json!(reason);
    }
    let tenant = context_str(run, "tenant");
    store::events::append(tx, kind, &format!("node/{}", run.node_id), Some(tenant), &data, now)?;
    Ok(())
}
