//! Profile routes: create (version 1), add a version, list and read; and `provision`, which
//! allocates and deploys machines by profile version (platform only).

use axum::extract::State;
use axum::response::Response;
use metal_types::page::PageQuery;

use crate::paging::Paging;

use crate::ApiPath;
use axum::http::StatusCode;

use super::images::owning_tenant;
use super::{ApiJson, Caller};
use crate::AppState;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::profile::ProvisionOutcome;
use metal_types::model::profile::{Profile, ProfileCreate, ProfileSpec, ProvisionRequest};

/// Create a profile; its body is version 1.
#[utoipa::path(post, path = "/v1/profiles", request_body = ProfileCreate,
    responses((status = 201, body = Profile), (status = 409, body = metal_types::error::ErrorBody), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn create_profile(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(create): ApiJson<ProfileCreate>,
) -> ApiResult<(StatusCode, ApiJson<Profile>)> {
    let tenant = owning_tenant(&caller, create.tenant_id.as_deref())?;
    if create.public {
        caller
            .admin("public profiles")
            .map_err(|_| ApiError::Forbidden("only the platform makes public profiles".into()))?;
    }
    metal_protocol::identity::validate_name("profile id", &create.id)
        .map_err(|e| ApiError::invalid("id", e.to_string()))?;
    create.spec.validate()?;
    let now = app.clock.now();
    let profile = app
        .store
        .change(move |tx| store::profiles::insert(tx, &create.id, &tenant, create.public, &create.spec, now))
        .await?;
    Ok((StatusCode::CREATED, ApiJson(profile)))
}

/// The profile if the caller may see it (its own, a public one, or any for an admin).
async fn visible(app: &AppState, caller: &Caller, id: String) -> ApiResult<Profile> {
    let scope = caller.tenant_scope().map(str::to_owned);
    let what = format!("profile {id}");
    let profile = app.store.read(move |tx| store::profiles::get(tx, &id)).await?;
    match (profile, scope) {
        (Some(p), Some(tenant)) if p.tenant_id != tenant && !p.public => Err(ApiError::NotFound(what)),
        (Some(p), _) => Ok(p),
        (None, _) => Err(ApiError::NotFound(what)),
    }
}

/// Add the next version of a profile (versions never change once made).
#[utoipa::path(post, path = "/v1/profiles/{id}/versions", params(("id" = String, Path, description = "profile id")),
    request_body = ProfileSpec,
    responses((status = 201, body = Profile), (status = 404, body = metal_types::error::ErrorBody), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn add_version(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(spec): ApiJson<ProfileSpec>,
) -> ApiResult<(StatusCode, ApiJson<Profile>)> {
    let profile = visible(&app, &caller, id.clone()).await?;
    if caller.tenant_scope().is_some_and(|t| t != profile.tenant_id) {
        return Err(ApiError::Forbidden(format!("profile {id} belongs to tenant {}", profile.tenant_id)));
    }
    spec.validate()?;
    let now = app.clock.now();
    let profile = app.store.change(move |tx| store::profiles::add_version(tx, &id, &spec, now)).await?;
    Ok((StatusCode::CREATED, ApiJson(profile)))
}

/// Profiles, a page at a time: a tenant's own and the public ones; every profile for
/// admins.
#[utoipa::path(get, path = "/v1/profiles", params(PageQuery), responses((status = 200, body = Vec<Profile>)))]
pub async fn list_profiles(State(app): State<AppState>, caller: Caller, paging: Paging) -> ApiResult<Response> {
    let (scope, page) = (caller.tenant_scope().map(str::to_owned), paging.page.clone());
    Ok(paging.answer(app.store.read(move |tx| store::profiles::page(tx, scope.as_deref(), &page)).await?))
}

/// One profile with every version.
#[utoipa::path(get, path = "/v1/profiles/{id}", params(("id" = String, Path, description = "profile id")),
    responses((status = 200, body = Profile), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_profile(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Profile>> {
    Ok(ApiJson(visible(&app, &caller, id).await?))
}

/// Allocate and deploy `count` machines with a profile version, all or nothing: the
/// smallest ready nodes outside pools that satisfy its zone, cores, memory and disk. A
/// refusal counts each constraint. Machines with a BMC are network-booted at once.
#[utoipa::path(post, path = "/v1/provision", request_body = ProvisionRequest,
    responses((status = 200, body = ProvisionOutcome), (status = 404, body = metal_types::error::ErrorBody),
              (status = 409, body = metal_types::error::ErrorBody), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn provision(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(request): ApiJson<ProvisionRequest>,
) -> ApiResult<ApiJson<ProvisionOutcome>> {
    caller.admin("provision")?;
    Ok(ApiJson(metal_machines::metal::provision::provision(&app.machines, request, None).await?))
}
