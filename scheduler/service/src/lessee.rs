//! The lessee's hands: what a member of a tenant may do to the machine of its live
//! dedicated-root lease (see it, power it, open its serial console), through the
//! platform's BMC session and never with the BMC's address or credentials. It joins the two
//! sides (the lease from capacity's rows, the machine through metal's BMC calls), which is
//! why it sits above both. Every action is checked against the lease in the store when it
//! is asked (`metal_store::lessee::leased`), rate-limited per lease, and recorded on the
//! node and the lease with the caller's credential.

use metal_store::lessee as store;
use metal_types::error::ApiResult;
use metal_types::model::bmc::PowerResult;
use metal_types::model::lessee::{LeasedNode, LesseeAction};
use metal_types::model::node::Node;
use metal_types::model::reservation::Reservation;
use serde_json::json;

use crate::app::App;
use crate::metal::bmcs;

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

    async fn record(
        &self,
        app: &App,
        kind: &'static str,
        lease: Reservation,
        node: &str,
        data: serde_json::Value,
    ) -> ApiResult<()> {
        let (credential, node, now) = (self.credential.clone(), node.to_owned(), app.clock.now());
        app.change(move |conn| store::record(conn, kind, &lease, &node, &credential, data, now)).await
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
    app.change(move |conn| store::refused(conn, &tenant, &credential, &node, &request, status, now)).await
}
