//! Tenants and API credentials.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The platform's own tenant, which owns platform pools (seed 000's `tenantId: 'root'`).
pub const ROOT_TENANT: &str = "root";

/// What a credential may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CredentialRole {
    /// Everything.
    PlatformAdmin,
    /// Its tenant's reservations, leases and usage, and the pools offered to it.
    TenantMember,
}

impl CredentialRole {
    /// Name as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            CredentialRole::PlatformAdmin => "platform-admin",
            CredentialRole::TenantMember => "tenant-member",
        }
    }
}

/// A tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    /// Id (A-Z a-z 0-9 . _ -).
    pub id: String,
    /// Display name.
    pub name: String,
}

/// The SSH keys a tenant registered for the console gateway (`ssh RESERVATION@GATEWAY`), as
/// OpenSSH public key lines; its leases' profile keys are taken as well.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SshKeys {
    /// Public keys, `TYPE BASE64 [COMMENT]` (no options).
    pub keys: Vec<String>,
}

impl SshKeys {
    /// The most keys a tenant may register.
    pub const MAX: usize = 64;

    /// Every key is an OpenSSH public key line; the error names the first that is not.
    pub fn validate(&self) -> Result<(), crate::error::ApiError> {
        if self.keys.len() > Self::MAX {
            return Err(crate::error::ApiError::invalid("keys", format!("at most {} keys", Self::MAX)));
        }
        for (i, key) in self.keys.iter().enumerate() {
            metal_protocol::cloudinit::check_ssh_key(&format!("keys[{i}]"), key)
                .map_err(|e| crate::error::ApiError::invalid(e.field, e.message))?;
        }
        Ok(())
    }
}

/// The longest display name of a tenant or an API credential, in bytes.
pub const NAME_MAX: usize = 200;

/// Creates a tenant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TenantCreate {
    /// Id (A-Z a-z 0-9 . _ -, at most 64).
    pub id: String,
    /// Display name (defaults to the id).
    #[serde(default)]
    pub name: Option<String>,
}

/// Creates an API credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CredentialCreate {
    /// Role.
    pub role: CredentialRole,
    /// Tenant, required for tenant members.
    #[serde(default)]
    pub tenant_id: Option<String>,
    /// A name to recognise it by.
    pub name: String,
}

/// A newly created credential: the token is shown this once and stored only hashed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialCreated {
    /// Credential id.
    pub id: String,
    /// Role.
    pub role: CredentialRole,
    /// Tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The bearer token. Not retrievable later.
    pub token: String,
}

/// A credential as listed: never its token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CredentialInfo {
    /// Credential id.
    pub id: String,
    /// Role.
    pub role: CredentialRole,
    /// Tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// Name.
    pub name: String,
    /// Revoked: the token no longer authenticates.
    pub revoked: bool,
}

/// Who the caller's token says it is (`GET /v1/session`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// Credential id.
    pub credential_id: String,
    /// Role.
    pub role: CredentialRole,
    /// Tenant of a tenant member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<String>,
    /// The scheduler's clock now: what a client measures leases and windows against (a
    /// browser's own clock may be off, and a simulated site's runs ahead).
    #[serde(with = "time::serde::rfc3339")]
    pub now: time::OffsetDateTime,
    /// The port of the console SSH gateway (`ssh -p PORT RESERVATION@HOST`), when it is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub console_ssh_port: Option<u16>,
}

/// What deleting a tenant did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantDeleted {
    /// The tenant.
    pub tenant_id: String,
    /// Reservations ended or cancelled (their node bindings are torn down).
    pub reservations: Vec<String>,
    /// Pools of the tenant whose machines are retired.
    pub pools: Vec<String>,
}
