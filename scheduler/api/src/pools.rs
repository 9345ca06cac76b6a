//! Pool routes: create (admin), offer to tenants (admin), list and read with capacity
//! rollups (admins; tenants see the pools offered to them, without rollups).

use axum::extract::State;
use axum::response::Response;
use metal_types::page::{PageQuery, Paged};
use time::OffsetDateTime;

use crate::paging::Paging;

use crate::ApiPath;
use axum::http::StatusCode;

use super::{ApiJson, Caller};
use crate::AppState;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::pool::{Pool, PoolCreate, PoolOffer};

/// Create a pool.
#[utoipa::path(post, path = "/v1/pools", request_body = PoolCreate,
    responses((status = 201, body = Pool), (status = 409, body = metal_types::error::ErrorBody), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn create_pool(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(create): ApiJson<PoolCreate>,
) -> ApiResult<(StatusCode, ApiJson<Pool>)> {
    caller.admin("pools")?;
    create.validate()?;
    let id = create.id.clone().unwrap_or_else(|| format!("pool-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]));
    let now = app.clock.now();
    let pool = app.store.write(move |tx| store::capacity::insert_pool(tx, &id, &create, now)).await?;
    app.store.events_committed();
    Ok((StatusCode::CREATED, ApiJson(pool)))
}

/// Offer a pool to a tenant.
#[utoipa::path(post, path = "/v1/pools/{id}/offers", params(("id" = String, Path, description = "pool id")), request_body = PoolOffer,
    responses((status = 200, body = Pool)))]
pub async fn offer_pool(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(offer): ApiJson<PoolOffer>,
) -> ApiResult<ApiJson<Pool>> {
    caller.admin(&format!("pool {id}"))?;
    let now = app.clock.now();
    let pool = app
        .store
        .write(move |tx| {
            let not_found = || ApiError::NotFound(format!("pool {id}"));
            store::capacity::get_pool(tx, &id)?.ok_or_else(not_found)?;
            if store::auth::get_tenant(tx, &offer.tenant_id)?.is_none() {
                return Err(ApiError::invalid("tenantId", format!("no tenant {}", offer.tenant_id)));
            }
            store::capacity::offer(tx, &id, &offer.tenant_id, now)?;
            store::capacity::get_pool(tx, &id)?.ok_or_else(not_found)
        })
        .await?;
    app.store.events_committed();
    Ok(ApiJson(pool))
}

/// A pool as the caller may see it: a tenant only one offered to it (without the other
/// tenants' names), an admin with its capacity rollup.
fn visible_pool(conn: &mut dyn store::Conn, id: &str, scope: Option<&str>, now: OffsetDateTime) -> ApiResult<Pool> {
    let not_found = || ApiError::NotFound(format!("pool {id}"));
    let mut pool = store::capacity::get_pool(conn, id)?.ok_or_else(not_found)?;
    match scope {
        Some(tenant) if !pool.offered_to.iter().any(|t| t == tenant) => return Err(not_found()),
        Some(_) => pool.offered_to.clear(), // other tenants' names are not its business
        None => pool.capacity = Some(store::capacity::capacity(conn, id, now)?),
    }
    Ok(pool)
}

/// Pools, by id, a page at a time: all with capacity for admins, the offered ones for
/// tenants.
#[utoipa::path(get, path = "/v1/pools", params(PageQuery), responses((status = 200, body = Vec<Pool>)))]
pub async fn list_pools(State(app): State<AppState>, caller: Caller, paging: Paging) -> ApiResult<Response> {
    let (scope, page, now) = (caller.tenant_scope().map(str::to_owned), paging.page.clone(), app.clock.now());
    let pools = app
        .store
        .read(move |conn| {
            let ids = store::capacity::page_pool_ids(conn, scope.as_deref(), &page)?;
            let pools =
                ids.items.iter().map(|id| visible_pool(conn, id, scope.as_deref(), now)).collect::<ApiResult<_>>()?;
            Ok::<_, ApiError>(Paged { items: pools, next: ids.next })
        })
        .await?;
    Ok(paging.answer(pools))
}

/// One pool.
#[utoipa::path(get, path = "/v1/pools/{id}", params(("id" = String, Path, description = "pool id")),
    responses((status = 200, body = Pool), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_pool(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Pool>> {
    let (scope, now) = (caller.tenant_scope().map(str::to_owned), app.clock.now());
    Ok(ApiJson(app.store.read(move |conn| visible_pool(conn, &id, scope.as_deref(), now)).await?))
}
