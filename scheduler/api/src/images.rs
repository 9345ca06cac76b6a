//! Image routes: import (in the background; progress on the image), list, read, promote
//! (platform only) and delete (refused while a profile version names the image).

use axum::extract::State;
use axum::response::Response;
use metal_types::page::PageQuery;

use crate::paging::Paging;

use crate::ApiPath;
use axum::http::StatusCode;

use super::{ApiJson, Caller};
use crate::AppState;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::image::{Image, ImageImport};
use metal_types::model::tenant::ROOT_TENANT;

/// The tenant a caller creates in: a tenant its own (naming another is refused), an admin
/// the one named or the platform's.
pub fn owning_tenant(caller: &Caller, named: Option<&str>) -> ApiResult<String> {
    match (caller.tenant_scope(), named) {
        (Some(own), Some(other)) if own != other => {
            Err(ApiError::Forbidden(format!("a member of tenant {own} cannot create for tenant {other}")))
        }
        (Some(own), _) => Ok(own.to_owned()),
        (None, named) => Ok(named.unwrap_or(ROOT_TENANT).to_owned()),
    }
}

/// Import an image by URL and checksum (or checksum file), or by catalog name.
#[utoipa::path(post, path = "/v1/images", request_body = ImageImport,
    responses((status = 202, body = Image, description = "the import runs in the background"),
              (status = 409, body = metal_types::error::ErrorBody), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn import_image(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<ImageImport>,
) -> ApiResult<(StatusCode, ApiJson<Image>)> {
    let tenant = owning_tenant(&caller, request.tenant_id.as_deref())?;
    let (origin, name) = request.resolve(&app.images.catalog)?;
    let id = format!("img-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let now = app.clock.now();
    let (owner, until) = (app.images.owner.clone(), now + app.config.images.lease);
    let image = {
        let id = id.clone();
        app.store
            .write(move |tx| {
                let claim = store::images::Claim { owner: &owner, until };
                store::images::insert(tx, &id, &tenant, &name, &origin, claim, now)
            })
            .await?
    };
    app.store.events_committed();
    metal_machines::metal::images::import::spawn(app.machines.clone(), id);
    Ok((StatusCode::ACCEPTED, ApiJson(image)))
}

/// The image if the caller may see it (its own, a public one, or any for an admin).
async fn visible(app: &AppState, caller: &Caller, id: String) -> ApiResult<Image> {
    let scope = caller.tenant_scope().map(str::to_owned);
    let not_found = {
        let what = format!("image {id}");
        move || ApiError::NotFound(what)
    };
    let image = app.store.read(move |tx| store::images::get(tx, &id)).await?;
    let image = image.ok_or_else(not_found.clone())?;
    match scope {
        Some(tenant) if image.tenant_id != tenant && !image.public => Err(not_found()),
        _ => Ok(image),
    }
}

/// Images, a page at a time: a tenant's own and the public ones; every image for admins.
#[utoipa::path(get, path = "/v1/images", params(PageQuery), responses((status = 200, body = Vec<Image>)))]
pub async fn list_images(State(app): State<AppState>, caller: Caller, paging: Paging) -> ApiResult<Response> {
    let (scope, page) = (caller.tenant_scope().map(str::to_owned), paging.page.clone());
    Ok(paging.answer(app.store.read(move |tx| store::images::page(tx, scope.as_deref(), &page)).await?))
}

/// One image, with its import's progress.
#[utoipa::path(get, path = "/v1/images/{id}", params(("id" = String, Path, description = "image id")),
    responses((status = 200, body = Image), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_image(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Image>> {
    Ok(ApiJson(visible(&app, &caller, id).await?))
}

/// Make an image public, so every tenant's profiles may name it (platform only).
#[utoipa::path(post, path = "/v1/images/{id}/promote", params(("id" = String, Path, description = "image id")),
    responses((status = 200, body = Image), (status = 404, body = metal_types::error::ErrorBody), (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn promote_image(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Image>> {
    caller.admin(&format!("image {id}"))?;
    let now = app.clock.now();
    let image = app.store.change(move |tx| store::images::promote(tx, &id, now)).await?;
    Ok(ApiJson(image))
}

/// Delete an image (and its files); refused while a profile version names it.
#[utoipa::path(delete, path = "/v1/images/{id}", params(("id" = String, Path, description = "image id")),
    responses((status = 204), (status = 404, body = metal_types::error::ErrorBody), (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn delete_image(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    let image = visible(&app, &caller, id.clone()).await?;
    if caller.tenant_scope().is_some_and(|t| t != image.tenant_id) {
        return Err(ApiError::Forbidden(format!("image {id} is public but belongs to tenant {}", image.tenant_id)));
    }
    let now = app.clock.now();
    let deleted = app.store.change(move |tx| store::images::delete(tx, &id, now)).await?;
    app.images.remove_files(&deleted.id);
    Ok(StatusCode::NO_CONTENT)
}
