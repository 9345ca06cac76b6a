//! Tenants and API credentials. Tokens are 256-bit random values shown once; only their
//! SHA-256 is stored (a token is a key, not a password, so a fast hash is the right one).

use rand::RngCore as _;
use sha2::{Digest as _, Sha256};
use sqlx::{AnyConnection, Row as _};
use time::OffsetDateTime;

use crate::clock::to_millis;
use crate::model::tenant::{CredentialInfo, CredentialRole, Tenant};

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

fn parse_role(stored: &str) -> CredentialRole {
    match stored {
        "platform-admin" => CredentialRole::PlatformAdmin,
        _ => CredentialRole::TenantMember,
    }
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
    Ok(Some(Credential { id: row.try_get("id")?, role: parse_role(&role), tenant_id: row.try_get("tenant_id")? }))
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

/// Every credential (without token hashes), by id.
pub async fn list_credentials(pool: &sqlx::AnyPool) -> Result<Vec<CredentialInfo>, sqlx::Error> {
    sqlx::query("SELECT id, role, tenant_id, name, revoked_at FROM credentials ORDER BY id")
        .fetch_all(pool)
        .await?
        .iter()
        .map(|r| {
            let role: String = r.try_get("role")?;
            let revoked: Option<i64> = r.try_get("revoked_at")?;
            Ok(CredentialInfo {
                id: r.try_get("id")?,
                role: parse_role(&role),
                tenant_id: r.try_get("tenant_id")?,
                name: r.try_get("name")?,
                revoked: revoked.is_some(),
            })
        })
        .collect()
}

/// Revokes a credential; false when there is no such live credential.
pub async fn revoke_credential(conn: &mut AnyConnection, id: &str, now: OffsetDateTime) -> Result<bool, sqlx::Error> {
    let done = sqlx::query("UPDATE credentials SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL")
        .bind(to_millis(now))
        .bind(id)
        .execute(conn)
        .await?
        .rows_affected();
    Ok(done == 1)
}
