//! Tenants and API credentials (admin-only, except that a tenant member may read its own
//! tenant and manage its console SSH keys).

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
use metal_types::model::tenant::{
    CredentialCreate, CredentialCreated, CredentialInfo, CredentialRole, NAME_MAX, Session, SshKeys, Tenant,
    TenantCreate,
};

/// Create a tenant.
#[utoipa::path(post, path = "/v1/tenants", request_body = TenantCreate,
    responses((status = 201, body = Tenant), (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn create_tenant(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(create): ApiJson<TenantCreate>,
) -> ApiResult<(StatusCode, ApiJson<Tenant>)> {
    caller.admin("tenants")?;
    metal_protocol::identity::validate_name("tenant id", &create.id)
        .map_err(|e| ApiError::invalid("id", e.to_string()))?;
    let name = create.name.unwrap_or_else(|| create.id.clone());
    if name.is_empty() || name.len() > NAME_MAX || name.chars().any(char::is_control) {
        return Err(ApiError::invalid("name", format!("must be 1 to {NAME_MAX} printable characters")));
    }
    let tenant = Tenant { id: create.id, name };
    let now = app.clock.now();
    let tenant = app
        .store
        .change(move |tx| {
            if !store::auth::create_tenant(tx, &tenant, now)? {
                return Err(ApiError::Conflict(format!("tenant {} already exists", tenant.id)));
            }
            let data = serde_json::json!({"tenant": tenant.id});
            store::events::append(
                tx,
                "tenant.created",
                &format!("tenant/{}", tenant.id),
                Some(&tenant.id),
                &data,
                now,
            )?;
            Ok(tenant)
        })
        .await?;
    Ok((StatusCode::CREATED, ApiJson(tenant)))
}

/// The tenants, by id, a page at a time.
#[utoipa::path(get, path = "/v1/tenants", params(PageQuery), responses((status = 200, body = Vec<Tenant>)))]
pub async fn list_tenants(State(app): State<AppState>, caller: Caller, paging: Paging) -> ApiResult<Response> {
    caller.admin("tenants")?;
    let page = paging.page.clone();
    Ok(paging.answer(app.store.read(move |tx| store::auth::list_tenants(tx, &page)).await?))
}

/// One tenant (a tenant member sees only its own).
#[utoipa::path(get, path = "/v1/tenants/{id}", params(("id" = String, Path, description = "tenant id")),
    responses((status = 200, body = Tenant), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_tenant(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Tenant>> {
    own_tenant(&caller, &id)?;
    let what = format!("tenant {id}");
    let tenant = app.store.read(move |conn| store::auth::get_tenant(conn, &id)).await?;
    Ok(ApiJson(tenant.ok_or(ApiError::NotFound(what))?))
}

/// Delete a tenant: its live reservations end (node bindings are torn down), the machines of
/// its own pools are retired, its credentials revoked.
#[utoipa::path(delete, path = "/v1/tenants/{id}", params(("id" = String, Path, description = "tenant id")),
    responses((status = 200, body = metal_types::model::tenant::TenantDeleted), (status = 404, body = metal_types::error::ErrorBody),
              (status = 409, body = metal_types::error::ErrorBody)))]
pub async fn delete_tenant(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<metal_types::model::tenant::TenantDeleted>> {
    caller.admin(&format!("tenant {id}"))?;
    let now = app.clock.now();
    Ok(ApiJson(app.store.change(move |tx| metal_capacity::tenants::delete(tx, &id, now)).await?))
}

/// Create an API credential. The token is in this response only; it is stored hashed.
#[utoipa::path(post, path = "/v1/credentials", request_body = CredentialCreate,
    responses((status = 201, body = CredentialCreated), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn create_credential(
    State(app): State<AppState>,
    caller: Caller,
    ApiJson(create): ApiJson<CredentialCreate>,
) -> ApiResult<(StatusCode, ApiJson<CredentialCreated>)> {
    caller.admin("credentials")?;
    if create.name.trim().is_empty() || create.name.len() > NAME_MAX {
        return Err(ApiError::invalid("name", format!("must be 1 to {NAME_MAX} characters")));
    }
    let tenant_id = match (create.role, create.tenant_id.clone()) {
        (CredentialRole::TenantMember, None) => {
            return Err(ApiError::invalid("tenantId", "a tenant member credential needs a tenant"));
        }
        (CredentialRole::PlatformAdmin, Some(_)) => {
            return Err(ApiError::invalid("tenantId", "a platform admin belongs to no tenant"));
        }
        (_, t) => t,
    };
    let now = app.clock.now();
    let (credential, token) = app
        .store
        .change(move |tx| {
            let tenant_id = tenant_id.as_deref();
            if let Some(t) = tenant_id
                && store::auth::get_tenant(tx, t)?.is_none()
            {
                return Err(ApiError::invalid("tenantId", format!("no tenant {t}")));
            }
            let (credential, token) = store::auth::create_credential(tx, create.role, tenant_id, &create.name, now)?;
            store::events::append(
                tx,
                "credential.created",
                &format!("credential/{}", credential.id),
                tenant_id,
                &serde_json::json!({"credential": credential.id, "role": create.role, "name": create.name}),
                now,
            )?;
            Ok((credential, token))
        })
        .await?;
    Ok((
        StatusCode::CREATED,
        ApiJson(CredentialCreated { id: credential.id, role: credential.role, tenant_id: credential.tenant_id, token }),
    ))
}

/// The credentials, by id, a page at a time (never their tokens).
#[utoipa::path(get, path = "/v1/credentials", params(PageQuery), responses((status = 200, body = Vec<CredentialInfo>)))]
pub async fn list_credentials(State(app): State<AppState>, caller: Caller, paging: Paging) -> ApiResult<Response> {
    caller.admin("credentials")?;
    let page = paging.page.clone();
    Ok(paging.answer(app.store.read(move |tx| store::auth::list_credentials(tx, &page)).await?))
}

/// Revoke a credential: its token stops authenticating at once.
#[utoipa::path(delete, path = "/v1/credentials/{id}", params(("id" = String, Path, description = "credential id")),
    responses((status = 204), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn revoke_credential(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<StatusCode> {
    caller.admin("credentials")?;
    if caller.0.id == id {
        return Err(ApiError::Conflict("a credential cannot revoke itself (use another admin credential)".into()));
    }
    let now = app.clock.now();
    app.store
        .change(move |tx| {
            if !store::auth::revoke_credential(tx, &id, now)? {
                return Err(ApiError::NotFound(format!("live credential {id}")));
            }
            let data = serde_json::json!({"credential": id});
            store::events::append(tx, "credential.revoked", &format!("credential/{id}"), None, &data, now)?;
            Ok(())
        })
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Who the bearer token belongs to: its credential, role and tenant (what a client shows
/// after signing in, and how it knows which views the API will answer).
#[utoipa::path(get, path = "/v1/session", responses((status = 200, body = Session), (status = 401, body = metal_types::error::ErrorBody)))]
pub async fn get_session(State(app): State<AppState>, caller: Caller) -> ApiJson<Session> {
    let Caller(credential) = caller;
    let now = app.clock.now();
    let console_ssh_port = app.config.console_ssh_listen.map(|a| a.port());
    ApiJson(Session {
        credential_id: credential.id,
        role: credential.role,
        tenant_id: credential.tenant_id,
        now,
        console_ssh_port,
    })
}

/// Passes a platform admin and a member of tenant `id`; anyone else gets NOT_FOUND.
fn own_tenant(caller: &Caller, id: &str) -> ApiResult<()> {
    if caller.tenant_scope().is_some_and(|own| own != id) {
        return Err(ApiError::NotFound(format!("tenant {id}")));
    }
    Ok(())
}

/// The SSH keys the tenant registered for the console gateway (a member of the tenant, or an
/// admin).
#[utoipa::path(get, path = "/v1/tenants/{id}/ssh-keys", params(("id" = String, Path, description = "tenant id")),
    responses((status = 200, body = SshKeys), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_ssh_keys(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<SshKeys>> {
    own_tenant(&caller, &id)?;
    let what = format!("tenant {id}");
    let keys = app.store.read(move |conn| store::auth::tenant_ssh_keys(conn, &id)).await?;
    Ok(ApiJson(SshKeys { keys: keys.ok_or(ApiError::NotFound(what))? }))
}

/// Replace the tenant's console SSH keys: with one of them, `ssh RESERVATION@GATEWAY` reaches
/// the serial console of a machine the tenant leases, beside its profile's keys.
#[utoipa::path(put, path = "/v1/tenants/{id}/ssh-keys", params(("id" = String, Path, description = "tenant id")),
    request_body = SshKeys,
    responses((status = 200, body = SshKeys), (status = 404, body = metal_types::error::ErrorBody),
        (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn put_ssh_keys(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(keys): ApiJson<SshKeys>,
) -> ApiResult<ApiJson<SshKeys>> {
    own_tenant(&caller, &id)?;
    keys.validate()?;
    let (what, now, stored) = (format!("tenant {id}"), app.clock.now(), keys.keys.clone());
    let set = app.store.change(move |conn| Ok(store::auth::set_tenant_ssh_keys(conn, &id, &stored, now)?)).await?;
    if !set {
        return Err(ApiError::NotFound(what));
    }
    Ok(ApiJson(keys))
}
