//! Switch routes (platform admins): register, list, read and remove the site's switches
//! (the SSH key is sealed at rest and never in an answer), and set or read a node's ports
//! on them.

use axum::extract::State;
use axum::response::Response;
use metal_types::page::PageQuery;

use crate::paging::Paging;
use axum::http::StatusCode;

use super::{ApiJson, ApiPath, Caller};
use crate::AppState;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::switch::{NodePort, NodePortsPut, PortSource, SwitchCreate, SwitchInfo};

/// Register a switch.
#[utoipa::path(post, path = "/v1/switches", request_body = SwitchCreate,
    responses((status = 201, body = SwitchInfo), (status = 409, body = metal_types::error::ErrorBody), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn create_switch(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(create): ApiJson<SwitchCreate>,
) -> ApiResult<(StatusCode, ApiJson<SwitchInfo>)> {
    caller.admin("switches")?;
    create.validate()?;
    let sealed = create.ssh_key.as_ref().map(|key| {
        metal_types::secrets::seal(
            app.config.master_key.as_ref(),
            &format!("switch/{}", create.id),
            &metal_bmc::Secret::new(key.as_str()),
        )
    });
    let now = app.clock.now();
    let info = app.store.write(move |tx| store::switches::insert(tx, &create, sealed.as_deref(), now)).await?;
    Ok((StatusCode::CREATED, ApiJson(info)))
}

/// The switches of the site, by id, a page at a time.
#[utoipa::path(get, path = "/v1/switches", params(PageQuery), responses((status = 200, body = Vec<SwitchInfo>)))]
pub async fn list_switches(State(app): State<AppState>, caller: Caller, paging: Paging) -> ApiResult<Response> {
    caller.admin("switches")?;
    let page = paging.page.clone();
    Ok(paging.answer(app.store.read(move |tx| store::switches::page(tx, &page)).await?))
}

/// One switch.
#[utoipa::path(get, path = "/v1/switches/{id}", params(("id" = String, Path, description = "switch id")),
    responses((status = 200, body = SwitchInfo), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_switch(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<SwitchInfo>> {
    caller.admin(&format!("switch {id}"))?;
    let what = format!("switch {id}");
    let found = app.store.read(move |tx| store::switches::get(tx, &id)).await?;
    found.map(|s| ApiJson(s.info)).ok_or(ApiError::NotFound(what))
}

/// Remove a switch no node port is on.
#[utoipa::path(delete, path = "/v1/switches/{id}", params(("id" = String, Path, description = "switch id")),
    responses((status = 204), (status = 404, body = metal_types::error::ErrorBody), (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn delete_switch(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    caller.admin(&format!("switch {id}"))?;
    let what = format!("switch {id}");
    let deleted = app.store.write(move |tx| store::switches::delete(tx, &id)).await?;
    if deleted { Ok(StatusCode::NO_CONTENT) } else { Err(ApiError::NotFound(what)) }
}

/// The node's ports on the site's switches, with what the last move read back.
#[utoipa::path(get, path = "/v1/nodes/{id}/ports", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = Vec<NodePort>), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_ports(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Vec<NodePort>>> {
    caller.admin(&format!("node {id}"))?;
    let what = format!("node {id}");
    let ports = app
        .store
        .read(move |tx| {
            store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            Ok::<_, ApiError>(store::switches::ports(tx, &id)?)
        })
        .await?;
    Ok(ApiJson(ports))
}

/// Set the node's ports (`(switch, port)` per NIC), replacing what was known.
#[utoipa::path(put, path = "/v1/nodes/{id}/ports", params(("id" = String, Path, description = "node id")),
    request_body = NodePortsPut,
    responses((status = 200, body = Vec<NodePort>), (status = 404, body = metal_types::error::ErrorBody),
              (status = 409, body = metal_types::error::ErrorBody), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn put_ports(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(put): ApiJson<NodePortsPut>,
) -> ApiResult<ApiJson<Vec<NodePort>>> {
    caller.admin(&format!("node {id}"))?;
    let put = put.validate()?;
    let what = format!("node {id}");
    let ports = app
        .store
        .write(move |tx| {
            store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            store::switches::set_ports(tx, &id, &put.ports, PortSource::Operator)
        })
        .await?;
    Ok(ApiJson(ports))
}
