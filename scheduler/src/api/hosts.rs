//! Admin views of hosts: the deployed OSes that joined (`metal::boot::hosts`) and each
//! node's join log, refusals included.

use axum::extract::State;

use crate::api::{ApiJson, ApiPath, Caller};
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::model::host::{Host, JoinLogEntry};
use crate::store;

/// Every host, by node id.
#[utoipa::path(get, path = "/v1/hosts", responses((status = 200, body = Vec<Host>)))]
pub async fn list_hosts(State(app): State<AppState>, caller: Caller) -> ApiResult<ApiJson<Vec<Host>>> {
    caller.admin("hosts")?;
    Ok(ApiJson(app.store.read(|tx| store::hosts::list(tx)).await?))
}

/// The host of a node.
#[utoipa::path(get, path = "/v1/hosts/{id}", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = Host), (status = 404, body = crate::error::ErrorBody)))]
pub async fn get_host(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Host>> {
    caller.admin(&format!("host {id}"))?;
    let what = format!("host {id} (its node has not joined)");
    let found = app.store.read(move |tx| store::hosts::get(tx, &id)).await?;
    found.map(ApiJson).ok_or(ApiError::NotFound(what))
}

/// Every step of every join of a node, oldest first: tokens issued, certificates, each
/// network and pool applied or refused, first boots that stopped, renewals.
#[utoipa::path(get, path = "/v1/hosts/{id}/join-log", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = Vec<JoinLogEntry>), (status = 404, body = crate::error::ErrorBody)))]
pub async fn join_log(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Vec<JoinLogEntry>>> {
    caller.admin(&format!("node {id}"))?;
    let what = format!("node {id}");
    let log = app
        .store
        .read(move |tx| {
            store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            Ok::<_, ApiError>(store::hosts::join_log(tx, &id)?)
        })
        .await?;
    Ok(ApiJson(log))
}
