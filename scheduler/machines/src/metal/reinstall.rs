//! A reinstall of a leased machine (issue 33): the lessee (or an admin) redeploys the node of
//! a running tenant-root lease with a version of one of the tenant's profiles, or a public
//! one. Same node, same lease and billing; a new identity generation, moved on before any
//! ramdisk runs, so the old OS's identity is void.
//!
//! The `metal-tenant-root-reinstall@1` workflow: power off (the lessee's OS stops before its
//! ports move), the ports to the pool's cleaning VLAN (the deploy ramdisk talks to the boot
//! service, and a machine the tenant held may carry anything in its firmware: it gets the
//! teardown's network, never provisioning), then the lease start's deploy steps: network
//! boot into the deploy, wait for it, the ports back to the lease's tenant VLAN and the disk
//! booted (where the pool isolates; elsewhere the ramdisk reboots into the new OS itself).
//! In a pool that does not isolate on the switch the network steps do nothing.
//!
//! A failed reinstall leaves the lease active and the node `failed` without maintenance: it is
//! the tenant's OS that failed, not the platform's evidence, so the lessee may reinstall
//! again, and the lease's end tears the node down as usual.

use futures::FutureExt as _;
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::lease::{self, DEPLOY_STEPS, Refusal, SWITCH_STEP, context_str};
use super::workflow::{Definition, Hooks, Outcome, StepDef};
use crate::app::AppState;
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::node::{Deadlines, NodeState, NodeTransition};
use metal_types::model::workflow::WorkflowRun;
use metal_types::work::LeaseStart;

/// The reinstall: off, to cleaning, the profile's BIOS settings, deploy, back to the
/// tenant VLAN, boot the disk.
pub static REINSTALL: Definition = Definition {
    name: "metal-tenant-root-reinstall@1",
    steps: &[
        StepDef { name: "power-off", ..SWITCH_STEP },
        StepDef { name: "network-cleaning", ..SWITCH_STEP },
        DEPLOY_STEPS[0],
        DEPLOY_STEPS[1],
        DEPLOY_STEPS[2],
        DEPLOY_STEPS[3],
        DEPLOY_STEPS[4],
    ],
};

/// Starts a reinstall of `request.node` under its lease (`request` names the lease, its
/// tenant and the profile version to deploy), asked by credential `by`: the node moves to
/// deploying with a new identity generation and a plan for that version, and the run
/// begins. Refused (CONFLICT, nothing changed) when the node is not deployed, in a rescue or failed under
/// that lease, is in maintenance, is busy with another run, or the version cannot deploy.
pub fn begin(
    tx: &mut dyn Conn,
    request: &LeaseStart,
    by: &str,
    controller_url: Option<&str>,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<String> {
    let node =
        store::nodes::get(tx, &request.node)?.ok_or_else(|| ApiError::NotFound(format!("node {}", request.node)))?;
    if node.lease_id.as_deref() != Some(request.allocation.as_str()) {
        return Err(ApiError::Conflict(format!(
            "node {} is not under lease {}'s allocation {}",
            node.id, request.reservation, request.allocation
        )));
    }
    let retry = node.state == NodeState::Failed && !node.maintenance;
    if !matches!(node.state, NodeState::Deployed | NodeState::Rescue) && !retry {
        let why = if node.maintenance { "quarantined (maintenance)".to_owned() } else { node.state.to_string() };
        return Err(ApiError::Conflict(format!(
            "node {} is {why}: a reinstall starts from a deployed node, one in a rescue, or one whose reinstall \
             or rescue failed",
            node.id
        )));
    }
    if let Some(run) = store::workflows::running_for(tx, &node.id)? {
        return Err(ApiError::Conflict(format!("node {} is busy with {} ({})", node.id, run.definition, run.id)));
    }
    let pool = store::capacity::pool_of(tx, &node)?.ok_or_else(|| {
        ApiError::Conflict(format!("node {} is in no pool: only a tenant-root lease's node reinstalls", node.id))
    })?;
    let (profile, version, plan) = match lease::deploy_for(
        tx,
        &node,
        &request.tenant,
        &request.profile_id,
        request.profile_version,
        controller_url,
    )? {
        Ok(found) => found,
        Err(Refusal(reason)) => return Err(ApiError::Conflict(format!("the reinstall cannot start: {reason}"))),
    };
    let tenancy = store::nodes::Tenancy { lease: node.lease_id.clone(), release_wipe: node.release_wipe.clone() };
    let renewed = store::nodes::set_tenancy(tx, &node, &tenancy, now)?;
    // The old OS's host goes with its identity (the new OS joins afresh).
    store::hosts::forget(tx, &node.id)?;
    let run = format!("run-{}", uuid::Uuid::new_v4().simple());
    let reason =
        format!("reinstall under lease {} by {by}: deploying {}:{}", request.reservation, profile.id, version.version);
    let request_move = NodeTransition {
        from: renewed.state,
        to: NodeState::Deploying,
        generation: Some(renewed.generation),
        owner: Some(format!("workflow/{run}")),
        reason: Some(reason),
    };
    store::nodes::transition(tx, &node.id, &request_move, deadlines, now)?;
    store::boot::put_derived_plan(tx, &node.id, &plan, &profile.id, version.version, now)?;
    let context = json!({"reservation": request.reservation, "allocation": request.allocation, "tenant": request.tenant,
                         "profileId": profile.id, "profileVersion": version.version, "imageId": version.image_id,
                         "pool": pool.id, "by": by});
    store::workflows::create(tx, &run, &node.id, REINSTALL.name, &REINSTALL.specs(), &context, now)?;
    store::events::append(
        tx,
        "node.tenant-root.reinstalling",
        &format!("node/{}", node.id),
        Some(&request.tenant),
        &json!({"node": node.id, "reservation": request.reservation, "profile": profile.id,
                "version": version.version, "identityGeneration": renewed.identity_generation,
                "from": node.state, "by": by, "workflow": run}),
        now,
    )?;
    Ok(run)
}

/// The reinstall's steps and end hooks.
#[derive(Debug)]
pub struct Reinstall;

/// The node's ports to its pool's cleaning VLAN (nothing to do without isolation): a
/// reinstall's and a rescue's.
pub(super) async fn network_cleaning(app: &AppState, run: &WorkflowRun) -> Outcome {
    match lease::isolation(app, run).await {
        Ok(Some(policy)) => super::network::move_ports(app, run, super::network::CLEANING, policy.cleaning()).await,
        Ok(None) => super::network::not_isolated(),
        Err(outcome) => outcome,
    }
}

impl Hooks for Reinstall {
    fn step<'a>(
        &'a self,
        app: &'a AppState,
        run: &'a WorkflowRun,
        step: &'a str,
    ) -> futures::future::BoxFuture<'a, Outcome> {
        async move {
            match step {
                "power-off" => super::teardown::power_off(app, &run.node_id).await,
                "network-cleaning" => network_cleaning(app, run).await,
                "bios-tenant" => lease::bios_tenant(app, run).await,
                "network-boot" => lease::network_boot(app, run).await,
                "await-deploy" => lease::await_deploy(app, run).await,
                "network-tenant" => lease::network_tenant(app, run).await,
                "boot-disk" => lease::boot_disk(app, run).await,
                other => Outcome::Failed(format!("{} has no step {other}", REINSTALL.name), Value::Null),
            }
        }
        .boxed()
    }

    fn succeeded(&self, tx: &mut dyn Conn, run: &WorkflowRun, now: OffsetDateTime) -> ApiResult<()> {
        record(tx, run, "node.tenant-root.reinstalled", None, now)
    }

    /// The node fails (if it is still deploying), without maintenance; the lease runs on.
    fn failed(&self, tx: &mut dyn Conn, run: &WorkflowRun, reason: &str, now: OffsetDateTime) -> ApiResult<()> {
        let Some(node) = store::nodes::get(tx, &run.node_id)? else { return Ok(()) };
        if node.state == NodeState::Deploying {
            let request = NodeTransition {
                from: NodeState::Deploying,
                to: NodeState::Failed,
                generation: Some(node.generation),
                owner: None,
                reason: Some(format!("reinstall failed: {reason}")),
            };
            store::nodes::transition(tx, &node.id, &request, &Deadlines::default(), now)?;
        }
        record(tx, run, "node.tenant-root.reinstall-failed", Some(reason), now)
    }
}

/// How the run ended, as an event the lease's tenant sees.
fn record(
    tx: &mut dyn Conn,
    run: &WorkflowRun,
    kind: &str,
    reason: Option<&str>,
    now: OffsetDateTime,
) -> ApiResult<()> {
    let mut data = json!({"node": run.node_id, "reservation": run.context["reservation"],
                          "profile": run.context["profileId"], "version": run.context["profileVersion"],
                          "workflow": run.id});
    if let Some(reason) = reason {
        data["reason"] = json!(reason);
    }
    let tenant = context_str(run, "tenant");
    store::events::append(tx, kind, &format!("node/{}", run.node_id), Some(tenant), &data, now)?;
    Ok(())
}
