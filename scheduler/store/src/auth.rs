//! Tenants and API credentials. Tokens are 256-bit random values shown once; only their
//! SHA-256 is stored (a token is a key, not a password, so a fast hash is the right one).

use rand::RngCore as _;
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;

use crate::page::{Keyset, Order};
use crate::{Conn, DbResult, Row};
use metal_types::clock::to_millis;
use metal_types::error::ApiError;
use metal_types::model::tenant::{CredentialInfo, CredentialRole, Tenant};
use metal_types::page::{Page, Paged};

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

/// 256 random bits, hex.
pub fn new_secret() -> String {
    let mut secret = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut secret);
    hex::encode(secret)
}

/// SHA-256 of a secret token, hex: what the database keeps instead of the token.
pub fn hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Creates a credential and returns it with its token (the only time the token exists).
pub fn create_credential(
    conn: &mut dyn Conn,
    role: CredentialRole,
    tenant_id: Option<&str>,
    name: &str,
    now: OffsetDateTime,
) -> DbResult<(Credential, String)> {
    let token = format!("{TOKEN_PREFIX}{}", new_secret());
    let id = format!("cred-{}", uuid::Uuid::new_v4().simple());
    conn.execute(
        "INSERT INTO credentials (id, token_hash, role, tenant_id, name, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        &[&id, &hash(&token), &role.as_str(), &tenant_id, &name, &to_millis(now)],
    )?;
    Ok((Credential { id, role, tenant_id: tenant_id.map(str::to_owned) }, token))
}

/// Resolves a bearer token to its live credential.
pub fn lookup(conn: &mut dyn Conn, token: &str) -> DbResult<Option<Credential>> {
    let row = conn.query_opt(
        "SELECT id, role, tenant_id FROM credentials WHERE token_hash = $1 AND revoked_at IS NULL",
        &[&hash(token)],
    )?;
    let Some(row) = row else { return Ok(None) };
    let role: String = row.get("role")?;
    Ok(Some(Credential { id: row.get("id")?, role: parse_role(&role), tenant_id: row.get("tenant_id")? }))
}

/// Whether any platform admin credential exists (bootstrap creates the first).
pub fn has_admin(conn: &mut dyn Conn) -> DbResult<bool> {
    let n: i64 = conn
        .query_one("SELECT COUNT(*) AS n FROM credentials WHERE role = 'platform-admin' AND revoked_at IS NULL", &[])?
        .get("n")?;
    Ok(n > 0)
}

/// Inserts a tenant; false when the id exists.
pub fn create_tenant(conn: &mut dyn Conn, tenant: &Tenant, now: OffsetDateTime) -> DbResult<bool> {
    if conn.query_opt("SELECT id FROM tenants WHERE id = $1", &[&tenant.id])?.is_some() {
        return Ok(false);
    }
    crate::db::insert_unique(
        conn,
        "INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)",
        &[&tenant.id, &tenant.name, &to_millis(now)],
    )
}

fn tenant_from_row(r: &Row) -> DbResult<Tenant> {
    Ok(Tenant { id: r.get("id")?, name: r.get("name")? })
}

/// One tenant.
pub fn get_tenant(conn: &mut dyn Conn, id: &str) -> DbResult<Option<Tenant>> {
    conn.query_opt("SELECT id, name FROM tenants WHERE id = $1 AND deleted_at IS NULL", &[&id])?
        .as_ref()
        .map(tenant_from_row)
        .transpose()
}

/// The SSH keys a live tenant registered for the console gateway; `None` without such a tenant.
pub fn tenant_ssh_keys(conn: &mut dyn Conn, id: &str) -> DbResult<Option<Vec<String>>> {
    let Some(row) = conn.query_opt("SELECT ssh_keys FROM tenants WHERE id = $1 AND deleted_at IS NULL", &[&id])? else {
        return Ok(None);
    };
    let keys: Option<String> = row.get("ssh_keys")?;
    Ok(Some(match keys {
        Some(text) => serde_json::from_str(&text)
            .map_err(|e| crate::DbError::Decode { column: "ssh_keys".into(), message: e.to_string() })?,
        None => Vec::new(),
    }))
}

/// Replaces a live tenant's console SSH keys (`tenant.ssh-keys.set`); false without such a
/// tenant.
pub fn set_tenant_ssh_keys(conn: &mut dyn Conn, id: &str, keys: &[String], now: OffsetDateTime) -> DbResult<bool> {
    let text = serde_json::to_string(keys).unwrap_or_else(|_| "[]".into());
    if conn.execute("UPDATE tenants SET ssh_keys = $1 WHERE id = $2 AND deleted_at IS NULL", &[&text, &id])? == 0 {
        return Ok(false);
    }
    let data = serde_json::json!({"tenant": id, "keys": keys.len()});
    crate::events::append(conn, "tenant.ssh-keys.set", &format!("tenant/{id}"), Some(id), &data, now)?;
    Ok(true)
}

/// A page of the tenants, by id.
pub fn list_tenants(conn: &mut dyn Conn, page: &Page) -> Result<Paged<Tenant>, ApiError> {
    let mut select = Keyset::new("id, name", "tenants");
    select.and_sql("deleted_at IS NULL");
    select.read(conn, &[("id", Order::Asc)], page, |_, row| tenant_from_row(row))
}

/// Marks a tenant deleted: hidden from the API, every credential of it revoked, offers to
/// it withdrawn. False when there is no such (live) tenant.
pub fn delete_tenant(conn: &mut dyn Conn, id: &str, now: OffsetDateTime) -> DbResult<bool> {
    let at = to_millis(now);
    if conn.execute("UPDATE tenants SET deleted_at = $1 WHERE id = $2 AND deleted_at IS NULL", &[&at, &id])? == 0 {
        return Ok(false);
    }
    conn.execute("UPDATE credentials SET revoked_at = $1 WHERE tenant_id = $2 AND revoked_at IS NULL", &[&at, &id])?;
    conn.execute("DELETE FROM pool_offers WHERE tenant_id = $1", &[&id])?;
    Ok(true)
}

/// A page of the credentials (without token hashes), by id.
pub fn list_credentials(conn: &mut dyn Conn, page: &Page) -> Result<Paged<CredentialInfo>, ApiError> {
    let select = Keyset::new("id, role, tenant_id, name, revoked_at", "credentials");
    select.read(conn, &[("id", Order::Asc)], page, |_, r| {
        let role: String = r.get("role")?;
        let revoked: Option<i64> = r.get("revoked_at")?;
        Ok(CredentialInfo {
            id: r.get("id")?,
            role: parse_role(&role),
            tenant_id: r.get("tenant_id")?,
            name: r.get("name")?,
            revoked: revoked.is_some(),
        })
    })
}

/// Revokes a credential; false when there is no such live credential.
pub fn revoke_credential(conn: &mut dyn Conn, id: &str, now: OffsetDateTime) -> DbResult<bool> {
    let done = conn.execute(
        "UPDATE credentials SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL",
        &[&to_millis(now), &id],
    )?;
    Ok(done == 1)
}
