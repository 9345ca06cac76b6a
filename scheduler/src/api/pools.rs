//! Pool routes: create (admin), offer to tenants (admin), list and read with capacity
//! rollups (admins; tenants see the pools offered to them, without rollups).

use axum::extract::{Path, State};
use axum::http::StatusCode;

use super::{ApiJson, Caller};
use crate::app::AppState;
use crate::error::{ApiError, ApiResult};
use crate::model::pool::{Pool, PoolCreate, PoolOffer};
use crate::store;

/// Create a pool.
#[utoipa::path(post, path = "/v1/pools", request_body = PoolCreate,
    responses((status = 201, body = Pool), (status = 409, body = crate::error::ErrorBody), (status = 422, body = crate::error::ErrorBody)))]
pub async fn create_pool(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(create): ApiJson<PoolCreate>,
) -> ApiResult<(StatusCode, ApiJson<Pool>)> {
    caller.admin("pools")?;
    create.validate()?;
    let id = create.id.clone().unwrap_or_else(|| format!("pool-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]));
    let mut tx = app.store.write().await?;
    let pool = store::capacity::insert_pool(&mut tx.tx, &id, &create, app.clock.now()).await?;
    tx.commit().await?;
    app.events.notify_waiters();
    Ok((StatusCode::CREATED, ApiJson(pool)))
}

/// Offer a pool to a tenant.
#[utoipa::path(post, path = "/v1/pools/{id}/offers", params(("id" = String, Path, description = "pool id")), request_body = PoolOffer,
    responses((status = 200, body = Pool)))]
pub async fn offer_pool(
    State(app): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(offer): ApiJson<PoolOffer>,
) -> ApiResult<ApiJson<Pool>> {
    caller.admin(&format!("pool {id}"))?;
    let mut tx = app.store.write().await?;
    store::capacity::get_pool(&mut tx.tx, &id).await?.ok_or_else(|| ApiError::NotFound(format!("pool {id}")))?;
    if store::auth::get_tenant(app.store.pool(), &offer.tenant_id).await?.is_none() {
        return Err(ApiError::invalid("tenantId", format!("no tenant {}", offer.tenant_id)));
    }
    store::capacity::offer(&mut tx.tx, &id, &offer.tenant_id, app.clock.now()).await?;
    let pool =
        store::capacity::get_pool(&mut tx.tx, &id).await?.ok_or_else(|| ApiError::NotFound(format!("pool {id}")))?;
    tx.commit().await?;
    app.events.notify_waiters();
    Ok(ApiJson(pool))
}

async fn visible_pool(app: &AppState, caller: &Caller, id: &str) -> ApiResult<Pool> {
    let mut conn = app.store.pool().acquire().await?;
    let not_found = || ApiError::NotFound(format!("pool {id}"));
    let mut pool = store::capacity::get_pool(&mut conn, id).await?.ok_or_else(not_found)?;
    match caller.tenant_scope() {
        Some(tenant) if !pool.offered_to.iter().any(|t| t == tenant) => return Err(not_found()),
        Some(_) => pool.offered_to.clear(), // other tenants' names are not its business
        None => pool.capacity = Some(store::capacity::capacity(&mut conn, id, app.clock.now()).await?),
    }
    Ok(pool)
}

/// Pools: all with capacity for admins, the offered ones for tenants.
#[utoipa::path(get, path = "/v1/pools", responses((status = 200, body = Vec<Pool>)))]
pub async fn list_pools(State(app): State<AppState>, caller: Caller) -> ApiResult<ApiJson<Vec<Pool>>> {
    let ids = {
        let mut conn = app.store.pool().acquire().await?;
        store::capacity::pool_ids(&mut conn, caller.tenant_scope()).await?
    };
    let mut pools = Vec::with_capacity(ids.len());
    for id in ids {
        pools.push(visible_pool(&app, &caller, &id).await?);
    }
    Ok(ApiJson(pools))
}

/// One pool.
#[utoipa::path(get, path = "/v1/pools/{id}", params(("id" = String, Path, description = "pool id")),
    responses((status = 200, body = Pool), (status = 404, body = crate::error::ErrorBody)))]
pub async fn get_pool(State(app): State<AppState>, caller: Caller, Path(id): Path<String>) -> ApiResult<ApiJson<Pool>> {
    Ok(ApiJson(visible_pool(&app, &caller, &id).await?))
}
