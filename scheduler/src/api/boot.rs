//! Admin views of what the boot service stored (a node's platform inventory and its wipe
//! reports) and the deploy plan a deploying ramdisk will fetch.

use axum::extract::State;

use crate::api::ApiPath;
use metal_protocol::DeployPlan;

use crate::api::{ApiJson, Caller};
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::model::boot::{NodeInventory, WipeReportRecord};
use crate::store;

/// The node's platform inventory (its last commissioning report).
#[utoipa::path(get, path = "/v1/nodes/{id}/inventory", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = NodeInventory), (status = 404, body = crate::error::ErrorBody)))]
pub async fn get_inventory(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<NodeInventory>> {
    caller.admin(&format!("node {id}"))?;
    let what = format!("inventory of node {id} (commission it first)");
    let found = app.store.read(move |tx| store::boot::get_inventory(tx, &id)).await?;
    found.map(ApiJson).ok_or(ApiError::NotFound(what))
}

/// Every wipe report received for the node, accepted or refused with its reason.
#[utoipa::path(get, path = "/v1/nodes/{id}/wipe-reports", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = Vec<WipeReportRecord>), (status = 404, body = crate::error::ErrorBody)))]
pub async fn list_wipe_reports(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Vec<WipeReportRecord>>> {
    caller.admin(&format!("node {id}"))?;
    let what = format!("node {id}");
    let reports = app
        .store
        .read(move |tx| {
            store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            Ok::<_, ApiError>(store::boot::wipe_reports(tx, &id)?)
        })
        .await?;
    Ok(ApiJson(reports))
}

/// Sets the plan the node's ramdisk fetches when it next deploys (a `DeployPlan`, checked).
#[utoipa::path(put, path = "/v1/nodes/{id}/deploy-plan", params(("id" = String, Path, description = "node id")),
    request_body = DeployPlan,
    responses((status = 204), (status = 422, body = crate::error::ErrorBody)))]
pub async fn put_deploy_plan(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(plan): ApiJson<DeployPlan>,
) -> ApiResult<axum::http::StatusCode> {
    caller.admin(&format!("node {id}"))?;
    plan.validate().map_err(|e| ApiError::invalid("plan", e.to_string()))?;
    let text = serde_json::to_string(&plan).map_err(|e| ApiError::Internal(e.to_string()))?;
    let now = app.clock.now();
    let what = format!("node {id}");
    app.change(move |tx| {
        store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
        Ok::<_, ApiError>(store::boot::put_plan(tx, &id, &text, now)?)
    })
    .await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}
