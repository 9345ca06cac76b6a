//! The lessee's hands: what a member of a tenant may do to the machine of its live
//! dedicated-root lease (see it, power it, open its serial console, reinstall or rescue it), through the
//! platform's BMC session and never with the BMC's address or credentials. It joins the two
//! sides (the lease from capacity's rows, the machine through metal's BMC calls), which is
//! why it sits above both. Every action is checked against the lease in the store when it
//! is asked (`metal_store::lessee::leased`), rate-limited per lease, and recorded on the
//! node and the lease with the caller's credential.

use metal_store::lessee as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::bmc::PowerResult;
use metal_types::model::lessee::{LeasedNode, LesseeAction, ReinstallRequest, ReinstallStarted, RescueStarted};
use metal_types::model::node::Node;
use metal_types::model::reservation::Reservation;
use serde_json::json;

use crate::app::App;
use crate::metal::bmcs;
use crate::metal::rescue::Ask;

/// Who is asking: a tenant member's credential and its tenant.
#[derive(Debug, Clone)]
pub struct Lessee {
    /// The credential's id (recorded, never its token).
    pub credential: String,
    /// Its tenant.
    pub tenant: String,
}

impl Lessee {
    /// The node of this lessee's live lease and the lease, if `action` may reach it now.
    pub async fn leased(&self, app: &App, node: &str, action: LesseeAction) -> ApiResult<(Node, Reservation)> {
        let (tenant, node, now) = (self.tenant.clone(), node.to_owned(), app.clock.now());
        app.store.read(move |conn| store::leased(conn, &tenant, &node, now, action)).await
    }

    /// As [`Lessee::leased`], for an action that changes something: also takes one from
    /// the lease's rate limit.
    async fn acting(&self, app: &App, node: &str, action: LesseeAction) -> ApiResult<(Node, Reservation)> {
        let (node, lease) = self.leased(app, node, action).await?;
        app.lessee_limiter.check(lease.id.clone())?;
        Ok((node, lease))
    }

    /// The lessee's view of its node.
    pub async fn view(&self, app: &App, node: &str) -> ApiResult<LeasedNode> {
        let (node, lease) = self.leased(app, node, LesseeAction::Read).await?;
        app.store.read(move |conn| store::view(conn, node, &lease)).await
    }

    /// The node's power, read from its BMC now.
    pub async fn power_status(&self, app: &App, node: &str) -> ApiResult<String> {
        self.leased(app, node, LesseeAction::Read).await?;
        bmcs::power_status(app, node).await
    }

    /// Power on, off, cycle or reset, read back; recorded as `lessee.power`.
    pub async fn power(&self, app: &App, node: &str, action: metal_bmc::PowerAction) -> ApiResult<PowerResult> {
        let (_, lease) = self.acting(app, node, LesseeAction::Power).await?;
        let result = bmcs::power(app, node, action).await?;
        let data = json!({"action": action, "before": result.before, "after": result.after});
        self.record(app, "power", lease, node, data).await?;
        Ok(result)
    }

    /// Opens the serial console for this lessee (one writer at a time): the console process,
    /// the session id, and the lease the bridge keeps checking.
    pub async fn open_console(
        &self,
        app: &App,
        node: &str,
    ) -> ApiResult<(tokio::process::Child, String, crate::metal::console::Scope)> {
        let (_, lease) = self.acting(app, node, LesseeAction::Console).await?;
        let (child, session) = bmcs::open_console(app, node, &self.credential).await?;
        self.record(app, "console", lease, node, json!({"session": session})).await?;
        let scope = crate::metal::console::Scope { tenant: self.tenant.clone(), node: node.to_owned() };
        Ok((child, session, scope))
    }

    /// Redeploys the node with a profile version; recorded as `lessee.reinstall`.
    pub async fn reinstall(&self, app: &App, node: &str, request: ReinstallRequest) -> ApiResult<ReinstallStarted> {
        let (found, lease) = self.acting(app, node, LesseeAction::Reinstall).await?;
        reinstall(app, &found, lease, request, &self.credential).await
    }

    /// Boots the rescue environment, or the disk again; recorded as `lessee.rescue` or
    /// `lessee.unrescue`.
    pub async fn rescue(&self, app: &App, node: &str, ask: Ask) -> ApiResult<RescueStarted> {
        let (found, lease) = self.acting(app, node, LesseeAction::Rescue).await?;
        rescue(app, &found, lease, ask, &self.credential).await
    }

    async fn record(
        &self,
        app: &App,
        kind: &'static str,
        lease: Reservation,
        node: &str,
        data: serde_json::Value,
    ) -> ApiResult<()> {
        let (credential, node, now) = (self.credential.clone(), node.to_owned(), app.clock.now());
        app.store.change(move |conn| store::record(conn, kind, &lease, &node, &credential, data, now)).await
    }
}

/// Every live node lease's node as its lessee sees it: `tenant`'s, or all for `None`.
pub async fn leased_nodes(app: &App, tenant: Option<String>) -> ApiResult<Vec<LeasedNode>> {
    app.store.read(move |conn| store::leased_nodes(conn, tenant.as_deref())).await
}

/// Records a refusal of a tenant member's request about a node.
pub async fn refused(app: &App, lessee: &Lessee, node: &str, request: String, status: u16) -> ApiResult<()> {
    let (tenant, credential, node, now) =
        (lessee.tenant.clone(), lessee.credential.clone(), node.to_owned(), app.clock.now());
    app.store.change(move |conn| store::refused(conn, &tenant, &credential, &node, &request, status, now)).await
}

/// Starts a reinstall of `node` under `lease`, asked by credential `by` (a lessee's, or an
/// admin's through [`reinstall_by_admin`]), and records it as `lessee.reinstall` in the same
/// transaction.
async fn reinstall(
    app: &App,
    node: &Node,
    lease: Reservation,
    request: ReinstallRequest,
    by: &str,
) -> ApiResult<ReinstallStarted> {
    let allocation = node.lease_id.clone().ok_or_else(|| {
        ApiError::Conflict(format!(
            "node {} is held by {} but carries no lease: nothing to reinstall",
            node.id, lease.id
        ))
    })?;
    let start = metal_types::work::LeaseStart {
        reservation: lease.id.clone(),
        allocation,
        node: node.id.clone(),
        tenant: lease.tenant_id.clone(),
        profile_id: request.profile_id.clone(),
        profile_version: Some(request.profile_version),
    };
    let controller_url = app.boot.as_ref().map(|b| b.controller_url.clone());
    let (by, deadlines, now) = (by.to_owned(), app.config.deadlines, app.clock.now());
    let reservation_id = lease.id.clone();
    let workflow = app
        .store
        .change(move |tx| {
            let workflow = crate::metal::reinstall::begin(tx, &start, &by, controller_url.as_deref(), &deadlines, now)?;
            let data = json!({"profile": start.profile_id, "version": start.profile_version, "workflow": workflow});
            store::record(tx, "reinstall", &lease, &start.node, &by, data, now)?;
            Ok(workflow)
        })
        .await?;
    Ok(ReinstallStarted {
        node_id: node.id.clone(),
        reservation_id,
        profile_id: request.profile_id,
        profile_version: request.profile_version,
        workflow,
    })
}

/// An admin's reinstall of a node under a tenant-root lease (the lease's tenant's profiles,
/// or public ones); recorded as the lessee's would be, with the admin's credential.
pub async fn reinstall_by_admin(
    app: &App,
    node: &str,
    request: ReinstallRequest,
    credential: &str,
) -> ApiResult<ReinstallStarted> {
    let (found, lease) = held_lease(app, node, "reinstall").await?;
    reinstall(app, &found, lease, request, credential).await
}

/// The node and the lease that holds it, for an admin acting as its lessee would.
async fn held_lease(app: &App, node: &str, what: &str) -> ApiResult<(Node, Reservation)> {
    let id = node.to_owned();
    let (found, lease) = app.store.read(move |conn| store::held(conn, &id)).await?;
    let lease = lease.ok_or_else(|| ApiError::Conflict(format!("node {node} is under no lease: nothing to {what}")))?;
    Ok((found, lease))
}

/// Starts a rescue or an unrescue of `node` under `lease`, asked by credential `by`, and
/// records it as `lessee.rescue` or `lessee.unrescue` in the same transaction. A rescue
/// needs the boot service to serve the rescue ramdisk, which is x86_64's only.
async fn rescue(app: &App, node: &Node, lease: Reservation, ask: Ask, by: &str) -> ApiResult<RescueStarted> {
    if ask == Ask::Rescue {
        let boot = app.boot.as_ref().ok_or_else(|| {
            ApiError::Conflict("the boot service is off (set boot-listen): nothing can boot a rescue".into())
        })?;
        if node.architecture.as_deref() == Some(crate::metal::boot::ipxe::AARCH64) {
            return Err(ApiError::Conflict(format!(
                "node {} is an arm64 machine: there is no arm64 rescue ramdisk yet (its network boot is GRUB's, \
                 and the rescue boots through iPXE); reinstall it instead",
                node.id
            )));
        }
        let ramdisk = boot.files_dir.join("rescue");
        if !tokio::fs::try_exists(&ramdisk).await.unwrap_or(false) {
            return Err(ApiError::Conflict(format!(
                "this site serves no rescue ramdisk ({} is missing: scripts/build-ramdisk writes rescue.cpio.gz)",
                ramdisk.display()
            )));
        }
    }
    let (node, by, now) = (node.id.clone(), by.to_owned(), app.clock.now());
    let reservation_id = lease.id.clone();
    let answer_node = node.clone();
    let workflow = app
        .store
        .change(move |tx| {
            let workflow = crate::metal::rescue::begin(tx, &node, &lease, ask, &by, now)?;
            store::record(tx, ask.as_str(), &lease, &node, &by, json!({"workflow": workflow}), now)?;
            Ok(workflow)
        })
        .await?;
    Ok(RescueStarted { node_id: answer_node, reservation_id, action: ask.as_str().to_owned(), workflow })
}

/// An admin's rescue or unrescue of a node under a tenant-root lease; recorded as the
/// lessee's would be, with the admin's credential.
pub async fn rescue_by_admin(app: &App, node: &str, ask: Ask, credential: &str) -> ApiResult<RescueStarted> {
    let (found, lease) = held_lease(app, node, ask.as_str()).await?;
    rescue(app, &found, lease, ask, credential).await
}
