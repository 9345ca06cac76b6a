//! Tenants and API credentials. Tokens are 256-bit random values shown once; only their
//! SHA-256 is stored (a token is a key, not a password, so a fast hash is the right one).

use rand::RngCore as _;
use sha2::{Digest as _, Sha256};
use sqlx::{AnyConnection, Row as _};
use time::OffsetDateTime;

use crate::clock::to_millis;
use crate::model::tenant::{CredentialRole, Tenant};

/// Prefix of every token, so leaked tokens are recognisable by scanners.
pub const TOKEN_PREFIX: &str = "mtl_";

/// A credential as the service resolves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credential {
    /// Credential id.
    pub id: String,
    /// Role.
    pub role: CredentialRole,
    /// Tenant of a tenant member.
    pub tenant_id: Option<String>,
}

fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Creates a credential and returns it with its token (the only time the token exists).
pub async fn create_credential(
    conn: &mut AnyConnection,
    role: CredentialRole,
    tenant_id: Option<&str>,
    name: &str,
    now: OffsetDateTime,
) -> Result<(Credential, String), sqlx::Error> {
    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    let token = format!("{TOKEN_PREFIX}{}", hex::encode(secret));
    let id = format!("cred-{}", uuid::Uuid::new_v4().simple());
    sqlx::query(
        "INSERT INTO credentials (id, token_hash, role, tenant_id, name, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(&id)
    .bind(hash(&token))
    .bind(role.as_str())
    .bind(tenant_id)
    .bind(name)
    .bind(to_millis(now))
    .execute(conn)
    .await?;
    Ok((Credential { id, role, tenant_id: tenant_id.map(str::to_owned) }, token))
}

/// Resolves a bearer token to its live credential.
pub async fn lookup(pool: &sqlx::AnyPool, token: &str) -> Result<Option<Credential>, sqlx::Error> {
    let row = sqlx::query("SELECT id, role, tenant_id FROM credentials WHERE token_hash = $1 AND revoked_at IS NULL")
        .bind(hash(token))
        .fetch_optional(pool)
        .await?;
    let Some(row) = row else { return Ok(None) };
    let role: String = row.try_get("role")?;
    let role = match role.as_str() {
        "platform-admin" => CredentialRole::PlatformAdmin,
        _ => CredentialRole::TenantMember,
    };
    Ok(Some(Credential { id: row.try_get("id")?, role, tenant_id: row.try_get("tenant_id")? }))
}

/// Whether any platform admin credential exists (bootstrap creates the first).
pub async fn has_admin(pool: &sqlx::AnyPool) -> Result<bool, sqlx::Error> {
    let n: i64 = sqlx::query("SELECT COUNT(*) FROM credentials WHERE role = 'platform-admin' AND revoked_at IS NULL")
        .fetch_one(pool)
        .await?
        .try_get(0)?;
    Ok(n > 0)
}

/// Inserts a tenant; false when the id exists.
pub async fn create_tenant(
    conn: &mut AnyConnection,
    tenant: &Tenant,
    now: OffsetDateTime,
) -> Result<bool, sqlx::Error> {
    let exists =
        sqlx::query("SELECT id FROM tenants WHERE id = $1").bind(&tenant.id).fetch_optional(&mut *conn).await?;
    if exists.is_some() {
        return Ok(false);
    }
    sqlx::query("INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)")
        .bind(&tenant.id)
        .bind(&tenant.name)
        .bind(to_millis(now))
        .execute(conn)
        .await?;
    Ok(true)
}

/// One tenant.
pub async fn get_tenant(pool: &sqlx::AnyPool, id: &str) -> Result<Option<Tenant>, sqlx::Error> {
    let row = sqlx::query("SELECT id, name FROM tenants WHERE id = $1").bind(id).fetch_optional(pool).await?;
    row.map(|r| Ok(Tenant { id: r.try_get("id")?, name: r.try_get("name")? })).transpose()
}

/// Every tenant, by id.
pub async fn list_tenants(pool: &sqlx::AnyPool) -> Result<Vec<Tenant>, sqlx::Error> {
    sqlx::query("SELECT id, name FROM tenants ORDER BY id")
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| Ok(Tenant { id: r.try_get("id")?, name: r.try_get("name")? }))
        .collect()
}
