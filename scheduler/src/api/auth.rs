//! Who is calling: the bearer token resolved to a credential. Admin-only resources answer
//! NOT_FOUND to tenant members, so a tenant cannot even learn that they exist.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::app::AppState;
use crate::error::ApiError;
use crate::model::tenant::CredentialRole;
use crate::store::auth::{Credential, lookup};

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
        let token = token.trim().to_owned();
        let credential = state
            .store
            .read(move |conn| lookup(conn, &token))
            .await?
            .ok_or_else(|| ApiError::Unauthenticated("unknown or revoked token".into()))?;
        Ok(Caller(credential))
    }
}
