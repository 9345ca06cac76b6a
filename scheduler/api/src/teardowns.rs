//! Tenant-root teardown routes: each node's teardown evidence (its release workflow runs
//! with every step's result), and `recover`, which runs the teardown of a quarantined
//! tenant-root node again from the start.

use axum::extract::State;
use axum::response::Response;
use metal_types::page::PageQuery;

use crate::paging::Paging;

use crate::AppState;
use crate::{ApiJson, ApiPath, Caller};
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::node::{Node, NodeState};
use metal_types::model::workflow::WorkflowRun;

/// The node's teardowns, oldest first, each with its evidence record (every step's
/// result, raw outcome and times).
#[utoipa::path(get, path = "/v1/nodes/{id}/teardowns", params(("id" = String, Path, description = "node id"), PageQuery),
    responses((status = 200, body = [WorkflowRun]), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn list_teardowns(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    paging: Paging,
) -> ApiResult<Response> {
    caller.admin(&format!("node {id}"))?;
    let page = paging.page.clone();
    let runs = app
        .store
        .read(move |tx| {
            store::nodes::get(tx, &id)?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))?;
            store::workflows::page_for_node(tx, &id, metal_machines::metal::teardown::PREFIX, &page)
        })
        .await?;
    Ok(paging.answer(runs))
}

/// Recover a quarantined tenant-root node (`metal.recover`): back to releasing, and the
/// teardown runs again from its first step (a new run). Maintenance stays on.
#[utoipa::path(post, path = "/v1/nodes/{id}/recover", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = Node), (status = 404, body = metal_types::error::ErrorBody),
              (status = 409, description = "not a quarantined tenant-root node", body = metal_types::error::ErrorBody)))]
pub async fn recover_node(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Node>> {
    caller.admin(&format!("node {id}"))?;
    let (deadlines, now) = (app.config.deadlines, app.clock.now());
    let node = app
        .store
        .change(move |tx| {
            let node = store::nodes::get(tx, &id)?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))?;
            if !node.tenant_root || node.state != NodeState::Failed {
                return Err(ApiError::Conflict(format!(
                    "node {id} is {}{}: recover runs the teardown of a failed tenant-root node; \
                     move other nodes with POST /v1/nodes/{id}/transitions",
                    node.state,
                    if node.tenant_root { "" } else { " and not tenant-root" }
                )));
            }
            let reason =
                format!("recovered: the teardown runs again (was: {})", node.state_reason.clone().unwrap_or_default());
            metal_machines::metal::teardown::begin(tx, &node, &reason, &deadlines, now)?;
            store::nodes::get(tx, &id)?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))
        })
        .await?;
    Ok(ApiJson(node))
}
