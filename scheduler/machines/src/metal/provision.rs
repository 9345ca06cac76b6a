//! Provisioning by profile: allocation (the smallest ready nodes that satisfy the profile's
//! zone, cores, memory and disk, from the commissioned inventory), the derived deploy plan
//! (the image's plan + the target disk + the NoCloud seed) and the boot that starts it.
//!
//! The one design decision: allocation and every node's plan commit in one transaction, all
//! or nothing; only then are the BMCs asked to network-boot the machines, so a BMC failure
//! never leaves a half-provisioned request (the node stays deploying, the reaper fails it
//! at the deploy limit, and the answer says which BMC failed).

use metal_protocol::InventoryReport;
use metal_protocol::cloudinit::disk_bytes_with_seed;
use metal_protocol::deploy::{DeployPlan, RootDeviceHints};
use serde::Serialize;

use crate::app::AppState;
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::image::ImagePlan;
use metal_types::model::node::{Node, NodeState, NodeTransition, Trust};
use metal_types::model::profile::{BootStart, ProfileVersion, ProvisionOutcome, ProvisionRequest};

/// Who owns nodes while provisioning moves them.
const OWNER: &str = "provision";

/// A ready node's size, from its commissioned inventory.
#[derive(Debug, Clone)]
struct Candidate {
    node: Node,
    inventory: InventoryReport,
}

/// Why nodes were passed over, counted per constraint.
#[derive(Debug, Default)]
struct Refusals {
    considered: usize,
    /// Nodes of another architecture than the image's (named), first.
    architecture: (usize, &'static str),
    zone: usize,
    cores: usize,
    memory: usize,
    disk: usize,
}

impl Refusals {
    fn message(&self, wanted: u32, found: usize) -> String {
        let mut reasons = Vec::new();
        let (other_arch, image_arch) = self.architecture;
        let other_arch_text = format!("not {image_arch}, the image's architecture");
        for (count, what) in [
            (other_arch, other_arch_text.as_str()),
            (self.zone, "in another zone"),
            (self.cores, "with too few cores"),
            (self.memory, "with too little memory"),
            (self.disk, "without a disk that fits the image and the profile's hints"),
        ] {
            if count > 0 {
                reasons.push(format!("{count} {what}"));
            }
        }
        let nodes = |n: usize| if n == 1 { "1 node".to_owned() } else { format!("{n} nodes") };
        format!(
            "{} needed, {} qualify: {} ready for provisioning{}{}",
            nodes(usize::try_from(wanted).unwrap_or(usize::MAX)),
            found,
            nodes(self.considered),
            if reasons.is_empty() { "" } else { "; " },
            reasons.join(", ")
        )
    }
}

/// The disk a deploy writes on this inventory: the smallest non-removable, writable disk of
/// at least `needed` (and `min_disk`) bytes that the hints allow.
pub fn target_disk<'a>(
    inventory: &'a InventoryReport,
    hints: &RootDeviceHints,
    needed: u64,
    min_disk: Option<u64>,
) -> Option<&'a metal_protocol::inventory::Disk> {
    inventory
        .disks
        .iter()
        .filter(|d| !d.removable && !d.read_only)
        .filter(|d| d.identity.size_bytes >= needed.max(min_disk.unwrap_or(0)))
        .filter(|d| d.identity.matches_hints(hints).is_ok())
        .min_by_key(|d| (d.identity.size_bytes, d.name.clone()))
}

/// Hints that name exactly `disk`: the profile's own when it gave any, else its serial (or
/// WWN, or by-path link) and size.
fn pin(disk: &metal_protocol::inventory::Disk, hints: &RootDeviceHints) -> RootDeviceHints {
    if *hints != RootDeviceHints::default() {
        return hints.clone();
    }
    let id = &disk.identity;
    RootDeviceHints {
        serial: id.serial.clone(),
        wwn: if id.serial.is_none() { id.wwn.clone() } else { None },
        by_path: if id.serial.is_none() && id.wwn.is_none() { id.by_path.clone() } else { None },
        min_size_bytes: Some(id.size_bytes),
        max_size_bytes: Some(id.size_bytes),
        model: None,
    }
}

/// Disk bytes a version's deploy needs: the image and its seed, or nothing beyond the
/// profile's own minimum for an installer.
fn bytes_needed(image: Option<&ImagePlan>) -> u64 {
    image.map_or(0, |image| disk_bytes_with_seed(image.chunks.raw_size_bytes))
}

/// The node's host name: its id in RFC 1123 form.
fn hostname(node: &Node) -> String {
    let name: String = node
        .id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '.' { c.to_ascii_lowercase() } else { '-' })
        .collect();
    name.trim_matches(['-', '.']).to_owned()
}

/// A fresh instance id (cloud-init runs again for every deploy).
fn instance_id(node: &Node) -> String {
    format!("{}-g{}-{}", node.id, node.identity_generation, &uuid::Uuid::new_v4().simple().to_string()[..8])
}

/// The plan of `version` for `node`: for an image deploy the image's plan served by this
/// controller, the target disk pinned, and the seed (keys, admin user, host name, extras);
/// for an installer deploy the rendered autoinstall or kickstart.
pub fn derive_plan(
    controller_url: &str,
    image: Option<&ImagePlan>,
    version: &ProfileVersion,
    node: &Node,
    inventory: &InventoryReport,
) -> ApiResult<store::boot::DerivedPlan> {
    let spec = &version.spec;
    let needed = bytes_needed(image);
    let disk = target_disk(inventory, &spec.root_device_hints, needed, spec.min_disk_bytes).ok_or_else(|| {
        ApiError::Conflict(format!("node {} has no disk for the {needed}-byte deploy and the profile's hints", node.id))
    })?;
    match (image, &version.image_id, &spec.installer) {
        (Some(image), Some(image_id), _) => {
            let seed = metal_protocol::cloudinit::render(&spec.seed_input(instance_id(node), hostname(node)))
                .map_err(|e| ApiError::invalid(e.field.clone(), e.message.clone()))?;
            let mut source = image.image.clone();
            source.url = format!("{controller_url}{}/{image_id}", metal_protocol::boot::IMAGES_PATH);
            let plan = DeployPlan {
                image: source,
                chunks: image.chunks.clone(),
                target: pin(disk, &spec.root_device_hints),
                cloud_init: Some(seed),
            };
            plan.validate().map_err(|e| ApiError::Internal(format!("derived an invalid plan: {e}")))?;
            Ok(store::boot::DerivedPlan::Image { plan: stored(&plan)?, image_id: image_id.clone() })
        }
        (None, None, Some(installer)) => {
            let plan = crate::metal::installer::derive(spec, installer, node, instance_id(node), hostname(node), disk)?;
            Ok(store::boot::DerivedPlan::Installer(stored(&plan)?))
        }
        _ => Err(ApiError::Internal(format!(
            "profile {}:{} is neither an image nor an installer deploy",
            version.profile_id, version.version
        ))),
    }
}

/// A plan as the JSON text it is stored as.
fn stored<T: Serialize>(plan: &T) -> ApiResult<String> {
    serde_json::to_string(plan).map_err(|e| ApiError::Internal(e.to_string()))
}

/// Ends a deploy: the node is deployed, and carries the `role` label its profile version
/// names (when the plan came from one).
pub fn deploy_done(
    tx: &mut dyn Conn,
    node: &Node,
    reason: String,
    deadlines: &metal_types::model::node::Deadlines,
    now: time::OffsetDateTime,
) -> ApiResult<Node> {
    let request = NodeTransition {
        from: NodeState::Deploying,
        to: NodeState::Deployed,
        generation: Some(node.generation),
        owner: None,
        reason: Some(reason),
    };
    let mut deployed = store::nodes::transition(tx, &node.id, &request, deadlines, now)?;
    let role = match store::boot::plan_profile(tx, &node.id)? {
        Some((profile, version)) => store::profiles::version(tx, &profile, version)?.and_then(|(_, v)| v.spec.role),
        None => None,
    };
    if let Some(role) = role {
        deployed.labels.insert("role".into(), role);
        deployed = store::nodes::update_attributes(tx, &deployed, Some(deployed.generation), now)?;
    }
    Ok(deployed)
}

/// Ready nodes provisioning may take: not in a pool (pool nodes are the reservations'),
/// not in maintenance or cordoned, under platform trust, with a passing inventory.
fn candidates(conn: &mut dyn Conn) -> ApiResult<Vec<Candidate>> {
    let mut out = Vec::new();
    for node in store::nodes::list(conn, Some(NodeState::Ready))? {
        if node.pool_id.is_some() || node.maintenance || node.cordoned || node.trust != Trust::Platform {
            continue;
        }
        let Some(stored) = store::boot::get_inventory(conn, &node.id)? else { continue };
        if !stored.passed {
            continue;
        }
        let inventory: InventoryReport = serde_json::from_value(stored.inventory)
            .map_err(|e| ApiError::Internal(format!("stored inventory of {}: {e}", node.id)))?;
        out.push(Candidate { node, inventory });
    }
    Ok(out)
}

/// How many of the nodes asked for an allocation must get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Take {
    /// All of them, or none (provision).
    All,
    /// As many as fit, perhaps none (the auto-deploy top-up).
    AsMany,
}

/// Allocates `request.count` nodes for the version and sets their plans, in one transaction.
fn allocate(
    conn: &mut dyn Conn,
    controller_url: &str,
    request: &ProvisionRequest,
    scope: Option<&str>,
    take: Take,
    deadlines: &metal_types::model::node::Deadlines,
    now: time::OffsetDateTime,
) -> ApiResult<Vec<String>> {
    let what = format!("profile {}", request.profile_id);
    let (profile, version) = store::profiles::version(conn, &request.profile_id, request.profile_version)?
        .ok_or_else(|| ApiError::NotFound(format!("{what} version {}", request.profile_version)))?;
    if let Some(tenant) = scope
        && profile.tenant_id != tenant
        && !profile.public
    {
        return Err(ApiError::NotFound(what));
    }
    let (image, architecture) = match &version.image_id {
        Some(id) => {
            let not_ready = || ApiError::Conflict(format!("image {id} of {what} is not ready"));
            let origin = store::images::get(conn, id)?.ok_or_else(not_ready)?.origin;
            (Some(store::images::plan(conn, id)?.ok_or_else(not_ready)?), Some(origin.machine_architecture()))
        }
        None => (None, None),
    };
    let spec = &version.spec;
    let needed = bytes_needed(image.as_ref());
    let mut refusals = Refusals::default();
    let mut fit = Vec::new();
    for candidate in candidates(conn)? {
        refusals.considered += 1;
        let inventory = &candidate.inventory;
        if let Some(arch) = architecture.filter(|arch| inventory.cpu.architecture != *arch) {
            refusals.architecture = (refusals.architecture.0 + 1, arch);
        } else if spec.zone.as_ref().is_some_and(|zone| candidate.node.labels.get("zone") != Some(zone)) {
            refusals.zone += 1;
        } else if spec.min_cores.is_some_and(|min| inventory.cpu.cores < min) {
            refusals.cores += 1;
        } else if spec.min_memory_bytes.is_some_and(|min| inventory.memory.total_bytes < min) {
            refusals.memory += 1;
        } else if target_disk(inventory, &spec.root_device_hints, needed, spec.min_disk_bytes).is_none() {
            refusals.disk += 1;
        } else {
            fit.push(candidate);
        }
    }
    let mut wanted = usize::try_from(request.count).unwrap_or(usize::MAX);
    if fit.len() < wanted {
        match take {
            Take::All => return Err(ApiError::Conflict(refusals.message(request.count, fit.len()))),
            Take::AsMany => wanted = fit.len(),
        }
    }
    // Smallest first: cores, then memory, then total disk.
    fit.sort_by_key(|c| {
        let disks: u64 = c.inventory.disks.iter().map(|d| d.identity.size_bytes).sum();
        (c.inventory.cpu.cores, c.inventory.memory.total_bytes, disks, c.node.id.clone())
    });
    let mut chosen = Vec::new();
    for candidate in fit.into_iter().take(wanted) {
        let node = &candidate.node;
        let plan = derive_plan(controller_url, image.as_ref(), &version, node, &candidate.inventory)?;
        let owner = format!("{OWNER}:{}:{}", profile.id, version.version);
        let reason = format!("provisioned with profile {}:{}", profile.id, version.version);
        let step = |from, to, generation| NodeTransition {
            from,
            to,
            generation,
            owner: Some(owner.clone()),
            reason: Some(reason.clone()),
        };
        let allocated = store::nodes::transition(
            conn,
            &node.id,
            &step(NodeState::Ready, NodeState::Allocated, Some(node.generation)),
            deadlines,
            now,
        )?;
        store::nodes::transition(
            conn,
            &node.id,
            &step(NodeState::Allocated, NodeState::Deploying, Some(allocated.generation)),
            deadlines,
            now,
        )?;
        store::boot::put_derived_plan(conn, &node.id, &plan, &profile.id, version.version, now)?;
        store::events::append(
            conn,
            "node.provisioned",
            &format!("node/{}", node.id),
            None,
            &serde_json::json!({"node": node.id, "profile": profile.id, "version": version.version,
                                "image": version.image_id, "mode": spec.deploy_mode}),
            now,
        )?;
        chosen.push(node.id.clone());
    }
    Ok(chosen)
}

/// `POST /v1/provision`: allocates and deploys `count` machines with one profile version.
pub async fn provision(
    app: &AppState,
    request: ProvisionRequest,
    scope: Option<String>,
) -> ApiResult<ProvisionOutcome> {
    if request.count == 0 {
        return Err(ApiError::invalid("count", "must be at least 1"));
    }
    let service = crate::metal::boot::BootService::of(app)
        .map_err(|_| ApiError::InvalidConfig("provisioning needs the boot service (set boot-listen)".into()))?;
    let controller_url = service.controller_url.clone();
    let (deadlines, now) = (app.config.deadlines, app.clock.now());
    let nodes = {
        let request = request.clone();
        app.store
            .change(move |tx| allocate(tx, &controller_url, &request, scope.as_deref(), Take::All, &deadlines, now))
            .await?
    };
    let mut boots = Vec::new();
    for node in &nodes {
        boots.push(start(app, node).await);
    }
    Ok(ProvisionOutcome { profile_id: request.profile_id, profile_version: request.profile_version, nodes, boots })
}

/// The auto-deploy pass: every profile whose latest version says `autoDeploy: {desired: N}`
/// gets ready nodes deployed with that version until N of its machines are allocated,
/// deploying or deployed (fewer when not enough ready nodes fit; the next pass tries again).
/// Returns how many nodes it started.
pub async fn auto_deploy_once(app: &AppState) -> ApiResult<usize> {
    let Ok(service) = crate::metal::boot::BootService::of(app) else { return Ok(0) };
    let controller_url = service.controller_url.clone();
    let (deadlines, now) = (app.config.deadlines, app.clock.now());
    let wanted = app.store.read(|tx| Ok::<_, ApiError>(store::profiles::auto_deploy_shortfalls(tx)?)).await?;
    let mut started = 0;
    for (profile_id, profile_version, missing) in wanted {
        let request = ProvisionRequest { profile_id: profile_id.clone(), profile_version, count: missing };
        let url = controller_url.clone();
        let nodes = app
            .store
            .change(move |tx| {
                let nodes = allocate(tx, &url, &request, None, Take::AsMany, &deadlines, now)?;
                if !nodes.is_empty() {
                    store::events::append(
                        tx,
                        "profile.auto-deployed",
                        &format!("profile/{}", request.profile_id),
                        None,
                        &serde_json::json!({"profile": request.profile_id, "version": request.profile_version,
                                            "missing": request.count, "nodes": nodes}),
                        now,
                    )?;
                }
                Ok(nodes)
            })
            .await?;
        for node in &nodes {
            let boot = start(app, node).await;
            tracing::info!(node, profile = %profile_id, outcome = %boot.outcome, "auto-deploy started a node");
        }
        started += nodes.len();
    }
    Ok(started)
}

/// Network-boots a deploying node through its BMC (boot override to PXE, then power cycle,
/// which powers on a machine that is off).
async fn start(app: &AppState, node: &str) -> BootStart {
    let has_bmc = crate::metal::bmcs::info(app, node.to_owned()).await.is_ok();
    if !has_bmc {
        if let Err(e) = crate::metal::bmcs::arm(app, node, "provisioning (no BMC: its next network boot)", None).await {
            return BootStart { node: node.to_owned(), outcome: format!("arming its boot: {e}"), ok: false };
        }
        return BootStart {
            node: node.to_owned(),
            outcome: "no BMC: the machine deploys at its next network boot".into(),
            ok: true,
        };
    }
    match crate::metal::bmcs::network_boot(app, node, "provisioning", None).await {
        Ok(_) => BootStart { node: node.to_owned(), outcome: "network boot + power cycle".into(), ok: true },
        Err(e) => {
            tracing::warn!(node, error = %e, "provisioning could not boot the node through its BMC");
            BootStart { node: node.to_owned(), outcome: e.to_string(), ok: false }
        }
    }
}
