//! Who is calling: the bearer token resolved to a credential. Admin-only resources answer
//! NOT_FOUND to tenant members, so a tenant cannot even learn that they exist. A tenant
//! member is a lessee on the node routes that reach the machine of its live lease
//! (`metal_machines::lessee`); what those routes refuse it is audited (`audit_refusals`).

use std::sync::{Arc, OnceLock};

use axum::extract::{FromRequestParts, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::Response;

use crate::AppState;
use metal_machines::lessee::Lessee;
use metal_store::auth::{Credential, lookup};
use metal_types::error::ApiError;
use metal_types::model::tenant::CredentialRole;

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller(pub Credential);

impl Caller {
    /// Passes platform admins; anyone else gets NOT_FOUND for `what`.
    pub fn admin(&self, what: &str) -> Result<(), ApiError> {
        match self.0.role {
            CredentialRole::PlatformAdmin => Ok(()),
            CredentialRole::TenantMember => Err(ApiError::NotFound(what.to_owned())),
        }
    }

    /// The caller as a lessee (a tenant member), or `None` for a platform admin.
    pub fn lessee(&self) -> Option<Lessee> {
        match self.0.role {
            CredentialRole::PlatformAdmin => None,
            CredentialRole::TenantMember => {
                Some(Lessee { credential: self.0.id.clone(), tenant: self.0.tenant_id.clone().unwrap_or_default() })
            }
        }
    }

    /// The tenant whose data the caller may see: `None` means every tenant (admin).
    pub fn tenant_scope(&self) -> Option<&str> {
        match self.0.role {
            CredentialRole::PlatformAdmin => None,
            CredentialRole::TenantMember => Some(self.0.tenant_id.as_deref().unwrap_or("")),
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .ok_or_else(|| ApiError::Unauthenticated("missing Authorization: Bearer <token>".into()))?;
        let token = header
            .to_str()
            .ok()
            .and_then(|h| h.strip_prefix("Bearer "))
            .ok_or_else(|| ApiError::Unauthenticated("Authorization must be Bearer <token>".into()))?;
        authenticate(state, parts, token.trim().to_owned()).await
    }
}

/// The caller `token` belongs to, left in the request's [`CallerSlot`] when it has one.
async fn authenticate(state: &AppState, parts: &Parts, token: String) -> Result<Caller, ApiError> {
    let credential = state
        .store
        .read(move |conn| lookup(conn, &token))
        .await?
        .ok_or_else(|| ApiError::Unauthenticated("unknown or revoked token".into()))?;
    if let Some(slot) = parts.extensions.get::<CallerSlot>() {
        let _ = slot.0.set(credential.clone());
    }
    Ok(Caller(credential))
}

/// Where the extractor leaves the authenticated credential for `audit_refusals`, which runs
/// around the handler and cannot see its extractors otherwise.
#[derive(Debug, Clone, Default)]
struct CallerSlot(Arc<OnceLock<Credential>>);

/// The answers to a tenant member that are refusals of its reach (not its input's errors).
const REFUSALS: [StatusCode; 4] =
    [StatusCode::FORBIDDEN, StatusCode::NOT_FOUND, StatusCode::CONFLICT, StatusCode::TOO_MANY_REQUESTS];

/// Records every refusal of a tenant member's request on a node route (`/v1/nodes/{id}...`:
/// another tenant's node, an ended lease, a node under teardown, an admin-only route, the
/// rate limit) as `lessee.refused`, with the credential, the request line and the answer.
pub async fn audit_refusals(State(app): State<AppState>, mut request: Request, next: Next) -> Response {
    let node = request
        .uri()
        .path()
        .strip_prefix("/v1/nodes/")
        .and_then(|rest| rest.split('/').next())
        .filter(|id| !id.is_empty() && *id != "import")
        .map(str::to_owned);
    let Some(node) = node else { return next.run(request).await };
    let line = format!("{} {}", request.method(), request.uri().path());
    let slot = CallerSlot::default();
    request.extensions_mut().insert(slot.clone());
    let response = next.run(request).await;
    let lessee = slot.0.get().map(|c| Caller(c.clone())).and_then(|c| c.lessee());
    if let Some(lessee) = lessee
        && REFUSALS.contains(&response.status())
        && let Err(e) = metal_machines::lessee::refused(&app, &lessee, &node, line, response.status().as_u16()).await
    {
        tracing::warn!(%node, error = %e, "could not record a refusal");
    }
    response
}

/// The caller of a WebSocket route (the serial console): the Authorization header as
/// everywhere, or else a token a browser offered as a subprotocol. Only WebSocket handlers
/// take this extractor, so no other route accepts a token that way.
#[derive(Debug, Clone)]
pub struct SocketCaller(pub Caller);

impl FromRequestParts<AppState> for SocketCaller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Self::Rejection> {
        if parts.headers.contains_key(axum::http::header::AUTHORIZATION) || parts.method != axum::http::Method::GET {
            return Caller::from_request_parts(parts, state).await.map(SocketCaller);
        }
        match websocket_token(&parts.headers)? {
            Some(token) => authenticate(state, parts, token).await.map(SocketCaller),
            None => Caller::from_request_parts(parts, state).await.map(SocketCaller),
        }
    }
}

/// The subprotocol a browser's WebSocket offers its token in, as
/// `metal.bearer.<base64url of the token>` beside [`CONSOLE_PROTOCOL`]: a browser cannot set
/// an Authorization header on a WebSocket, and a token in the URL would end up in logs
/// (Kubernetes carries its bearer tokens the same way).
pub const BEARER_PROTOCOL_PREFIX: &str = "metal.bearer.";

/// The subprotocol the serial console answers with when the client offers it.
pub const CONSOLE_PROTOCOL: &str = "metal.console";

/// The token of a WebSocket upgrade that offers it as a subprotocol; `None` without one.
fn websocket_token(headers: &axum::http::HeaderMap) -> Result<Option<String>, ApiError> {
    use base64::Engine as _;
    let upgrade = headers.get(axum::http::header::UPGRADE).and_then(|v| v.to_str().ok());
    if !upgrade.is_some_and(|u| u.eq_ignore_ascii_case("websocket")) {
        return Ok(None);
    }
    let offered = headers.get_all(axum::http::header::SEC_WEBSOCKET_PROTOCOL).iter();
    let Some(encoded) = offered
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(BEARER_PROTOCOL_PREFIX))
    else {
        return Ok(None);
    };
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded.trim_end_matches('='))
        .map_err(|_| ApiError::Unauthenticated("the bearer subprotocol is not base64url".into()))?;
    let token = String::from_utf8(bytes)
        .map_err(|_| ApiError::Unauthenticated("the bearer subprotocol is not a token".into()))?;
    Ok(Some(token.trim().to_owned()))
}
