//! How a tenant-root lease starts (seed 000): the `lease.start` work the capacity side
//! queues when a node binding's start comes, and the `metal-tenant-root-lease@1` workflow
//! that network-boots the node into the lessee's profile and waits for the deploy; in a
//! pool that isolates tenants on the switch it then moves the node's ports to the lease's
//! tenant VLAN and only then boots the deployed OS (the lease binds after that).
//!
//! Starting records the lease on the node, hands it to the tenant (tenant root,
//! tenant-controlled, release wipe `secure-erase`) and moves the identity generation on
//! before any tenant code runs, all in the transaction that takes the work row. A lease
//! that cannot start (not a tenant-root pool, the node not ready, no exact profile version,
//! an image that is not public) is refused and the node stays ready.

use std::time::Duration;

use futures::FutureExt as _;
use serde_json::{Value, json};
use time::OffsetDateTime;

use super::workflow::{Definition, Hooks, Outcome, StepDef};
use crate::app::AppState;
use metal_store::boot::DerivedPlan;
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::node::{Deadlines, Node, NodeState, NodeTransition};
use metal_types::model::profile::{Profile, ProfileVersion};
use metal_types::model::workflow::WorkflowRun;
use metal_types::work::{self, CapacityNotice, LeaseNotice};

/// The lease start: boot into the lessee's deploy, wait until it is deployed.
pub static START: Definition = Definition { name: "metal-tenant-root-lease@1", steps: &DEPLOY_STEPS };

/// A deploy on a tenant-root node: the BIOS settings its profile asks for (those the pool
/// lets tenants set), network boot, wait for the deploy, then (in a pool that isolates its
/// tenants) the ports to the lease's tenant VLAN and the disk booted. The
/// lease start is these; a reinstall runs them after its own.
pub(super) const DEPLOY_STEPS: [StepDef; 5] = [
    StepDef { name: "bios-tenant", ..SWITCH_STEP },
    StepDef {
        name: "network-boot",
        attempts: 5,
        deadline: Duration::from_secs(600),
        backoff: Duration::from_secs(15),
        poll: Duration::from_secs(5),
    },
    StepDef {
        name: "await-deploy",
        attempts: 1,
        // The deploy's own 2-hour limit fails the node first; this bounds the wait.
        deadline: Duration::from_secs(2 * 3600 + 600),
        backoff: Duration::from_secs(30),
        poll: Duration::from_secs(5),
    },
    SWITCH_STEP,
    StepDef { name: "boot-disk", ..SWITCH_STEP },
];

/// The bounds of a step that calls a switch or a BMC.
pub(super) const SWITCH_STEP: StepDef = StepDef {
    name: "network-tenant",
    attempts: 5,
    deadline: Duration::from_secs(900),
    backoff: Duration::from_secs(10),
    poll: Duration::from_secs(5),
};

/// A deploy that cannot go ahead, and why.
pub(super) struct Refusal(pub(super) String);

/// Handles one `lease.start` inside the transaction that took its row: starts the lease,
/// or refuses it (`node.tenant-root.refused`, the node untouched) and tells capacity.
pub fn start(
    tx: &mut dyn Conn,
    request: &work::LeaseStart,
    controller_url: Option<&str>,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<String> {
    match begin(tx, request, controller_url, deadlines, now)? {
        Ok(run) => Ok(format!("leased: workflow {run}")),
        Err(Refusal(reason)) => {
            let data = json!({"node": request.node, "reservation": request.reservation,
                              "allocation": request.allocation, "tenant": request.tenant, "reason": reason});
            store::events::append(tx, "node.tenant-root.refused", &format!("node/{}", request.node), None, &data, now)?;
            let notice = LeaseNotice {
                reservation: request.reservation.clone(),
                allocation: request.allocation.clone(),
                node: request.node.clone(),
                reason: Some(reason.clone()),
            };
            store::work::notify_capacity(tx, &CapacityNotice::LeaseRefused(notice), now)?;
            Ok(format!("refused: {reason}"))
        }
    }
}

fn begin(
    tx: &mut dyn Conn,
    request: &work::LeaseStart,
    controller_url: Option<&str>,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<Result<String, Refusal>> {
    let refuse = |reason: String| Ok(Err(Refusal(reason)));
    let Some(node) = store::nodes::get(tx, &request.node)? else {
        return refuse(format!("node {} does not exist", request.node));
    };
    let Some(pool) = store::capacity::pool_of(tx, &node)?.filter(|p| p.policy.tenant_root) else {
        return refuse(format!("node {} is not in a tenant-root pool", node.id));
    };
    if node.state != NodeState::Ready || node.maintenance {
        let why = if node.maintenance { "in maintenance".to_owned() } else { format!("{}", node.state) };
        return refuse(format!("node {} is {why}, not ready", node.id));
    }
    if store::bmcs::get(tx, &node.id)?.is_none() {
        return refuse(format!("node {} has no BMC: a tenant-root lease is torn down through it", node.id));
    }
    if pool.policy.network.is_some() && store::switches::ports(tx, &node.id)?.is_empty() {
        return refuse(format!(
            "node {} has no known switch port, and pool {} isolates its tenants on the switch (policy.network): \
             set its ports (PUT /v1/nodes/{}/ports) or let commissioning learn them",
            node.id, pool.id, node.id
        ));
    }
    let (profile, version, plan) =
        match deploy_for(tx, &node, &request.tenant, &request.profile_id, request.profile_version, controller_url)? {
            Ok(found) => found,
            Err(refusal) => return Ok(Err(refusal)),
        };
    let tenancy =
        store::nodes::Tenancy { lease: Some(request.allocation.clone()), release_wipe: Some("secure-erase".into()) };
    let leased = store::nodes::set_tenancy(tx, &node, &tenancy, now)?;
    let owner = format!("lease/{}", request.allocation);
    let reason = format!(
        "tenant-root lease {} of {}: deploying {}:{}",
        request.allocation, request.tenant, profile.id, version.version
    );
    let step = |from, to, generation| NodeTransition {
        from,
        to,
        generation: Some(generation),
        owner: Some(owner.clone()),
        reason: Some(reason.clone()),
    };
    let allocated = store::nodes::transition(
        tx,
        &node.id,
        &step(NodeState::Ready, NodeState::Allocated, leased.generation),
        deadlines,
        now,
    )?;
    store::nodes::transition(
        tx,
        &node.id,
        &step(NodeState::Allocated, NodeState::Deploying, allocated.generation),
        deadlines,
        now,
    )?;
    store::boot::put_derived_plan(tx, &node.id, &plan, &profile.id, version.version, now)?;
    let context = json!({"reservation": request.reservation, "allocation": request.allocation, "tenant": request.tenant,
                         "profileId": profile.id, "profileVersion": version.version, "imageId": version.image_id,
                         "pool": pool.id});
    let run = format!("run-{}", uuid::Uuid::new_v4().simple());
    store::workflows::create(tx, &run, &node.id, START.name, &START.specs(), &context, now)?;
    store::events::append(
        tx,
        "node.tenant-root.leased",
        &format!("node/{}", node.id),
        Some(&request.tenant),
        &json!({"node": node.id, "allocation": request.allocation, "reservation": request.reservation,
                "tenant": request.tenant, "profile": profile.id, "version": version.version,
                "identityGeneration": leased.identity_generation, "workflow": run}),
        now,
    )?;
    Ok(Ok(run))
}

/// What a tenant-root deploy of `profile_id:version` for `tenant` on `node` needs: the
/// profile, the version and its plan, derived for the node's next identity generation (the
/// lease start and a reinstall both move it on); or why there is none.
pub(super) fn deploy_for(
    tx: &mut dyn Conn,
    node: &Node,
    tenant: &str,
    profile_id: &str,
    version: Option<u32>,
    controller_url: Option<&str>,
) -> ApiResult<Result<(Profile, ProfileVersion, DerivedPlan), Refusal>> {
    let refuse = |reason: String| Ok(Err(Refusal(reason)));
    let Some(version) = version else {
        return refuse(format!(
            "the reservation names profile {profile_id} without a profileVersion: a tenant-root lease deploys one exact version"
        ));
    };
    let Some((profile, version)) = store::profiles::version(tx, profile_id, i64::from(version))? else {
        return refuse(format!("profile {profile_id} has no version {version}"));
    };
    if profile.tenant_id != tenant && !profile.public {
        return refuse(format!("profile {} is neither tenant {tenant}'s nor public", profile.id));
    }
    let (image, architecture) = match &version.image_id {
        Some(id) => {
            let Some(found) = store::images::get(tx, id)? else {
                return refuse(format!("image {id} of profile {} is gone", profile.id));
            };
            if !found.public {
                return refuse(format!("image {id} of profile {} is not public", profile.id));
            }
            let Some(plan) = store::images::plan(tx, id)? else {
                return refuse(format!("image {id} of profile {} is not ready", profile.id));
            };
            (Some(plan), Some((id, found.origin.machine_architecture())))
        }
        None => (None, None),
    };
    if !version.spec.bios.is_empty() {
        let pool = store::capacity::pool_of(tx, node)?;
        let settable = pool.as_ref().and_then(|p| p.policy.bios_baseline.as_ref()).map(|b| &b.tenant_settable);
        if let Some(name) = version.spec.bios.keys().find(|name| !settable.is_some_and(|s| s.contains(name))) {
            return refuse(format!(
                "profile {} version {} sets BIOS attribute {name}, which pool {} does not let tenants set \
                 (policy.biosBaseline.tenantSettable: {})",
                profile.id,
                version.version,
                pool.as_ref().map_or("none", |p| p.id.as_str()),
                settable.map_or_else(|| "none".to_owned(), |s| s.join(", "))
            ));
        }
    }
    let Some(controller_url) = controller_url else {
        return refuse("the boot service is off (set boot-listen): nothing can deploy the node".into());
    };
    let Some(inventory) = store::boot::get_inventory(tx, &node.id)? else {
        return refuse(format!("node {} has no platform inventory", node.id));
    };
    let inventory: metal_protocol::InventoryReport = serde_json::from_value(inventory.inventory)
        .map_err(|e| ApiError::Internal(format!("stored inventory of {}: {e}", node.id)))?;
    if let Some((id, arch)) = architecture
        && inventory.cpu.architecture != arch
    {
        return refuse(format!(
            "image {id} of profile {} is for {arch} machines; node {} is {}",
            profile.id, node.id, inventory.cpu.architecture
        ));
    }
    let mut next = node.clone();
    next.identity_generation += 1;
    match crate::metal::provision::derive_plan(controller_url, image.as_ref(), &version, &next, &inventory) {
        Ok(plan) => Ok(Ok((profile, version, plan))),
        Err(e) => refuse(format!("the lessee's deploy plan: {e}")),
    }
}

/// The lease start's steps and end hooks.
#[derive(Debug)]
pub struct LeaseStart;

/// The capacity side's notice about the run's lease.
fn lease_notice(run: &WorkflowRun, reason: Option<String>) -> LeaseNotice {
    LeaseNotice {
        reservation: context_str(run, "reservation").to_owned(),
        allocation: context_str(run, "allocation").to_owned(),
        node: run.node_id.clone(),
        reason,
    }
}

pub(super) fn context_str<'a>(run: &'a WorkflowRun, key: &str) -> &'a str {
    run.context.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The BIOS attributes the deploy's profile version asks for (`spec.bios`, allowed by the
/// pool when the deploy began), written through the BMC for the deploy boot to apply.
pub(super) async fn bios_tenant(app: &AppState, run: &WorkflowRun) -> Outcome {
    let (profile, version) = (context_str(run, "profileId").to_owned(), run.context["profileVersion"].as_i64());
    let found = app.store.read(move |tx| store::profiles::version(tx, &profile, version.unwrap_or_default())).await;
    let bios = match found {
        Ok(Some((_, version))) => version.spec.bios,
        Ok(None) => return Outcome::Failed("the deploy's profile version is gone".into(), Value::Null),
        Err(e) => return Outcome::Retry(e.to_string(), Value::Null),
    };
    if bios.is_empty() {
        return Outcome::done(json!({"bios": "none asked"}));
    }
    let bmc = match crate::metal::bmcs::client(app, &run.node_id).await {
        Ok(bmc) => bmc,
        Err(e) => return Outcome::Retry(format!("connecting to the BMC: {e}"), Value::Null),
    };
    match bmc.set_bios(&bios).await {
        Ok(()) => Outcome::done(json!({"set": bios})),
        Err(e @ (metal_bmc::BmcError::Refused { .. } | metal_bmc::BmcError::Unsupported { .. })) => {
            Outcome::Failed(format!("the BMC refused the profile's BIOS settings: {e}"), Value::Null)
        }
        Err(e) => Outcome::Retry(format!("writing the profile's BIOS settings: {e}"), Value::Null),
    }
}

/// Network-boots the node: observe (already past deploying?), act (PXE once, power cycle),
/// verify (the BMC reads power on).
pub(super) async fn network_boot(app: &AppState, run: &WorkflowRun) -> Outcome {
    network_boot_in(app, run, NodeState::Deploying).await
}

/// Network-boots the node while it is in `state` (deploying, or a rescue); done without a
/// boot once it is past it.
pub(super) async fn network_boot_in(app: &AppState, run: &WorkflowRun, state: NodeState) -> Outcome {
    let id = run.node_id.clone();
    let node = match app.store.read(move |tx| store::nodes::get(tx, &id)).await {
        Ok(Some(node)) => node,
        Ok(None) => return Outcome::Failed(format!("node {} is gone", run.node_id), Value::Null),
        Err(e) => return Outcome::Retry(e.to_string(), Value::Null),
    };
    if node.state != state {
        return Outcome::done(json!({"skipped": format!("node is {}", node.state)}));
    }
    let by = format!("{} network-boot", run.definition);
    match crate::metal::bmcs::network_boot(app, &run.node_id, &by, Some(&run.id)).await {
        Ok(power) if power.after == "on" => Outcome::done(json!({"bootOverride": "pxe (once)", "power": power})),
        Ok(power) => Outcome::Retry("the BMC reads power off after the power cycle".into(), json!({"power": power})),
        Err(e) => Outcome::Retry(format!("booting through the BMC: {e}"), Value::Null),
    }
}

/// The pool's network policy, when it isolates its tenants on the switch.
pub(super) async fn isolation(
    app: &AppState,
    run: &WorkflowRun,
) -> Result<Option<metal_types::model::pool::NetworkPolicy>, Outcome> {
    let id = run.node_id.clone();
    let pool = app
        .store
        .read(move |tx| {
            let node = store::nodes::get(tx, &id)?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))?;
            Ok::<_, ApiError>(store::capacity::pool_of(tx, &node)?)
        })
        .await
        .map_err(|e| Outcome::Retry(e.to_string(), Value::Null))?;
    Ok(super::network::policy(pool.as_ref()).cloned())
}

/// The ports to the lease's tenant VLAN (allocated from the pool's range, shared by the
/// lease's nodes, never another lease's), after the image is written and before the
/// deployed OS boots: the ramdisk of an isolating pool powers off after its deploy.
pub(super) async fn network_tenant(app: &AppState, run: &WorkflowRun) -> Outcome {
    let policy = match isolation(app, run).await {
        Ok(Some(policy)) => policy,
        Ok(None) => return super::network::not_isolated(),
        Err(outcome) => return outcome,
    };
    let (pool, lease, node) =
        (context_str(run, "pool").to_owned(), context_str(run, "reservation").to_owned(), run.node_id.clone());
    let now = app.clock.now();
    let range = policy.tenant_vlans;
    let vlan = app.store.write(move |tx| store::switches::tenant_vlan(tx, &pool, &lease, &node, range, now)).await;
    match vlan {
        Ok(vlan) => super::network::move_ports(app, run, super::network::TENANT, vlan).await,
        Err(e @ ApiError::Conflict(_)) => Outcome::Failed(e.to_string(), Value::Null),
        Err(e) => Outcome::Retry(format!("allocating the lease's tenant VLAN: {e}"), Value::Null),
    }
}

/// In an isolating pool, the deployed OS boots now, on the tenant VLAN: the boot override to
/// the disk, then power on, read back.
pub(super) async fn boot_disk(app: &AppState, run: &WorkflowRun) -> Outcome {
    match isolation(app, run).await {
        Ok(Some(_)) => power_on_disk(app, run).await,
        Ok(None) => super::network::not_isolated(),
        Err(outcome) => outcome,
    }
}

/// The boot override to the disk, then power on, read back: the isolated deploy's last
/// step, and an unrescue's.
pub(super) async fn power_on_disk(app: &AppState, run: &WorkflowRun) -> Outcome {
    let request = metal_types::model::bmc::BootRequest { target: metal_bmc::BootTarget::Disk, persistent: false };
    let booted = async {
        crate::metal::bmcs::boot(app, &run.node_id, &request).await?;
        crate::metal::bmcs::power(app, &run.node_id, metal_bmc::PowerAction::On).await
    }
    .await;
    match booted {
        Ok(power) if power.after == "on" => Outcome::done(json!({"bootOverride": "disk (once)", "power": power})),
        Ok(power) => Outcome::Retry("the BMC reads power off after power on".into(), json!({"power": power})),
        Err(e) => Outcome::Retry(format!("booting the deployed OS through the BMC: {e}"), Value::Null),
    }
}

/// Waits for the deploy: deployed is done, failed fails the lease.
pub(super) async fn await_deploy(app: &AppState, run: &WorkflowRun) -> Outcome {
    let id = run.node_id.clone();
    match app.store.read(move |tx| store::nodes::get(tx, &id)).await {
        Ok(Some(node)) => match node.state {
            NodeState::Deployed => Outcome::done(json!({"state": "deployed", "reason": node.state_reason})),
            NodeState::Deploying => Outcome::Waiting(format!(
                "deploying {}:{}",
                context_str(run, "profileId"),
                run.context["profileVersion"]
            )),
            state => Outcome::Failed(
                format!("the lessee's deploy ended {state}: {}", node.state_reason.unwrap_or_default()),
                json!({"state": state}),
            ),
        },
        Ok(None) => Outcome::Failed(format!("node {} is gone", run.node_id), Value::Null),
        Err(e) => Outcome::Retry(e.to_string(), Value::Null),
    }
}

impl Hooks for LeaseStart {
    fn step<'a>(
        &'a self,
        app: &'a AppState,
        run: &'a WorkflowRun,
        step: &'a str,
    ) -> futures::future::BoxFuture<'a, Outcome> {
        async move {
            match step {
                "bios-tenant" => bios_tenant(app, run).await,
                "network-boot" => network_boot(app, run).await,
                "await-deploy" => await_deploy(app, run).await,
                "network-tenant" => network_tenant(app, run).await,
                "boot-disk" => boot_disk(app, run).await,
                other => Outcome::Failed(format!("{} has no step {other}", START.name), Value::Null),
            }
        }
        .boxed()
    }

    fn succeeded(&self, tx: &mut dyn Conn, run: &WorkflowRun, now: OffsetDateTime) -> ApiResult<()> {
        let allocation = context_str(run, "allocation");
        let data = json!({"node": run.node_id, "allocation": allocation, "reservation": run.context["reservation"],
                          "tenant": run.context["tenant"], "profile": run.context["profileId"],
                          "version": run.context["profileVersion"]});
        store::events::append(tx, "node.tenant-root.bound", &format!("node/{}", run.node_id), None, &data, now)?;
        store::work::notify_capacity(tx, &CapacityNotice::LeaseBound(lease_notice(run, None)), now)?;
        Ok(())
    }

    fn failed(&self, tx: &mut dyn Conn, run: &WorkflowRun, reason: &str, now: OffsetDateTime) -> ApiResult<()> {
        super::quarantine(tx, &run.node_id, reason, now)?;
        let notice = lease_notice(run, Some(reason.to_owned()));
        store::work::notify_capacity(tx, &CapacityNotice::LeaseFailed(notice), now)?;
        Ok(())
    }
}
