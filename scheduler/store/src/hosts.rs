//! Host rows: single-use enrolment tokens (only their SHA-256 is kept), the host a joined OS
//! becomes (one per node) and each node's join log.

use std::time::Duration;

use metal_protocol::join::HostSetup;
use time::OffsetDateTime;

use crate::auth::{hash, new_secret};
use crate::page::{Keyset, NodeRows, Order};
use crate::{Conn, DbResult, Row};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::host::{Host, HostState, JoinLogEntry};
use metal_types::page::{Page, Paged};

/// Who an enrolment token was issued to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenOrigin {
    /// The seed of a deploy (the node joins once deployed).
    Deploy,
    /// An operator, for a machine that already runs an OS (the node may be `new`).
    Operator,
}

impl TokenOrigin {
    fn as_str(self) -> &'static str {
        match self {
            TokenOrigin::Deploy => "deploy",
            TokenOrigin::Operator => "operator",
        }
    }
}

/// What an enrolment token was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnrolmentToken {
    /// Its id (what the host record and the log name; never the token).
    pub id: String,
    /// The node.
    pub node_id: String,
    /// The node's identity generation when it was issued.
    pub identity_generation: i64,
    /// The profile version the deploy came from.
    pub profile: Option<(String, i64)>,
    /// What the host sets up after it joins.
    pub setup: HostSetup,
    /// Who it was issued to.
    pub origin: TokenOrigin,
    /// When it stops being accepted.
    pub expires_at: OffsetDateTime,
    /// When it was used, if it was.
    pub used_at: Option<OffsetDateTime>,
}

const TOKEN_COLUMNS: &str =
    "id, node_id, identity_generation, profile_id, profile_version, setup, origin, expires_at, used_at";

fn token_from_row(row: &Row) -> DbResult<EnrolmentToken> {
    let profile_id: Option<String> = row.get("profile_id")?;
    let profile_version: Option<i64> = row.get("profile_version")?;
    let used_at: Option<i64> = row.get("used_at")?;
    Ok(EnrolmentToken {
        id: row.get("id")?,
        node_id: row.get("node_id")?,
        identity_generation: row.get("identity_generation")?,
        profile: profile_id.zip(profile_version),
        setup: row.json("setup")?,
        origin: if row.get::<String>("origin")? == "operator" { TokenOrigin::Operator } else { TokenOrigin::Deploy },
        expires_at: from_millis(row.get("expires_at")?),
        used_at: used_at.map(from_millis),
    })
}

/// What a new enrolment token is for.
#[derive(Debug, Clone, Copy)]
pub struct TokenRequest<'a> {
    /// The node.
    pub node_id: &'a str,
    /// The node's current identity generation.
    pub identity_generation: i64,
    /// The profile version the deploy came from.
    pub profile: Option<(&'a str, i64)>,
    /// What the host sets up after it joins.
    pub setup: &'a HostSetup,
    /// Who it is issued to.
    pub origin: TokenOrigin,
}

/// Issues an enrolment token, valid for `ttl`, and withdraws the node's earlier unused
/// ones. Returns the token (the only time it exists outside the seed or the answer it is
/// handed out in) and its id.
pub fn issue_token(
    conn: &mut dyn Conn,
    request: TokenRequest<'_>,
    now: OffsetDateTime,
    ttl: Duration,
) -> DbResult<(String, String)> {
    let TokenRequest { node_id, identity_generation, profile, setup, origin } = request;
    crate::nodes::lock(conn, node_id)?;
    conn.execute("DELETE FROM enrolment_tokens WHERE node_id = $1 AND used_at IS NULL", &[&node_id])?;
    let token = new_secret();
    let id = format!("enr-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
    let setup = serde_json::to_string(setup).unwrap_or_else(|_| "{}".into());
    conn.execute(
        "INSERT INTO enrolment_tokens (token_hash, id, node_id, identity_generation, profile_id, profile_version, \
         setup, origin, created_at, expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        &[
            &hash(&token),
            &id,
            &node_id,
            &identity_generation,
            &profile.map(|p| p.0),
            &profile.map(|p| p.1),
            &setup,
            &origin.as_str(),
            &to_millis(now),
            &to_millis(now + ttl),
        ],
    )?;
    Ok((token, id))
}

/// Marks the tokens that expired unused (and were not marked before) as lapsed; returns
/// them. Compare-and-set on `lapsed_at`, so one replica reports each.
pub fn lapse_expired(conn: &mut dyn Conn, now: OffsetDateTime) -> DbResult<Vec<EnrolmentToken>> {
    let rows = conn.query(
        &format!(
            "SELECT {TOKEN_COLUMNS}, token_hash FROM enrolment_tokens \
             WHERE used_at IS NULL AND lapsed_at IS NULL AND expires_at <= $1 ORDER BY expires_at"
        ),
        &[&to_millis(now)],
    )?;
    let mut lapsed = Vec::new();
    for row in &rows {
        let digest: String = row.get("token_hash")?;
        let node: String = row.get("node_id")?;
        crate::nodes::lock(conn, &node)?;
        let marked = conn.execute(
            "UPDATE enrolment_tokens SET lapsed_at = $1 WHERE token_hash = $2 AND used_at IS NULL AND lapsed_at IS NULL",
            &[&to_millis(now), &digest],
        )?;
        if marked == 1 {
            lapsed.push(token_from_row(row)?);
        }
    }
    Ok(lapsed)
}

/// Why a token was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenRefusal {
    /// No such token (or withdrawn).
    Unknown,
    /// Used already, at that time.
    Used(EnrolmentToken),
    /// Expired.
    Expired(EnrolmentToken),
}

impl TokenRefusal {
    /// The refusal in words.
    pub fn message(&self) -> String {
        match self {
            TokenRefusal::Unknown => "the enrolment token is unknown (never issued, or withdrawn)".into(),
            TokenRefusal::Used(t) => format!(
                "enrolment token {} was already used at {}",
                t.id,
                t.used_at.map(|at| at.to_string()).unwrap_or_default()
            ),
            TokenRefusal::Expired(t) => format!("enrolment token {} expired at {}", t.id, t.expires_at),
        }
    }

    /// The token, when it was known.
    pub fn token(&self) -> Option<&EnrolmentToken> {
        match self {
            TokenRefusal::Unknown => None,
            TokenRefusal::Used(t) | TokenRefusal::Expired(t) => Some(t),
        }
    }
}

/// Looks a token up (after locking its node's row: the order every writer of a node's host
/// rows takes, a teardown's clean-up too, and what makes the join log's numbering safe),
/// without using it: the live token, or why it is refused. An expired one is marked lapsed
/// here, so the lapse pass does not report as missing a host that did come.
pub fn find_token(
    conn: &mut dyn Conn,
    token: &str,
    now: OffsetDateTime,
) -> DbResult<Result<EnrolmentToken, TokenRefusal>> {
    let digest = hash(token);
    let select = format!("SELECT {TOKEN_COLUMNS} FROM enrolment_tokens WHERE token_hash = $1");
    let Some(row) = conn.query_opt(&select, &[&digest])? else {
        return Ok(Err(TokenRefusal::Unknown));
    };
    crate::nodes::lock(conn, &token_from_row(&row)?.node_id)?;
    // Read again under the lock: another replica may have used or withdrawn it meanwhile.
    let Some(row) = conn.query_opt(&select, &[&digest])? else {
        return Ok(Err(TokenRefusal::Unknown));
    };
    let found = token_from_row(&row)?;
    if found.used_at.is_some() {
        return Ok(Err(TokenRefusal::Used(found)));
    }
    if found.expires_at <= now {
        conn.execute(
            "UPDATE enrolment_tokens SET lapsed_at = $1 WHERE token_hash = $2 AND lapsed_at IS NULL",
            &[&to_millis(now), &digest],
        )?;
        return Ok(Err(TokenRefusal::Expired(found)));
    }
    Ok(Ok(found))
}

/// Uses a token [`find_token`] found live (compare-and-set on `used_at`, so two replicas
/// cannot both take it); false when it was used meanwhile.
pub fn use_token(conn: &mut dyn Conn, token: &str, now: OffsetDateTime) -> DbResult<bool> {
    let used = conn.execute(
        "UPDATE enrolment_tokens SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL",
        &[&to_millis(now), &hash(token)],
    )?;
    Ok(used == 1)
}

const HOST_COLUMNS: &str = "node_id, state, role, identity_generation, hostname, site, rack, tags, profile_id, \
     profile_version, enrolment_token, setup, public_key, certificate_expires_at, joined_at, renewed_at, generation";

fn host_from_row(row: &Row) -> DbResult<Host> {
    let renewed_at: Option<i64> = row.get("renewed_at")?;
    Ok(Host {
        node_id: row.get("node_id")?,
        state: row.parse("state")?,
        role: row.get("role")?,
        identity_generation: row.get("identity_generation")?,
        hostname: row.get("hostname")?,
        site: row.get("site")?,
        rack: row.get("rack")?,
        tags: row.json("tags")?,
        profile_id: row.get("profile_id")?,
        profile_version: row.get("profile_version")?,
        enrolment_token: row.get("enrolment_token")?,
        setup: row.json("setup")?,
        public_key: row.get("public_key")?,
        certificate_expires_at: from_millis(row.get("certificate_expires_at")?),
        joined_at: from_millis(row.get("joined_at")?),
        renewed_at: renewed_at.map(from_millis),
        generation: row.get("generation")?,
    })
}

/// Records a join: the node's host, replacing an earlier one of the node (whose row
/// generation it continues, so a compare-and-set on the old row fails).
pub fn put(conn: &mut dyn Conn, host: &Host, now: OffsetDateTime) -> DbResult<Host> {
    crate::nodes::lock(conn, &host.node_id)?;
    let previous = conn.query_opt("SELECT generation FROM hosts WHERE node_id = $1", &[&host.node_id])?;
    let generation = match previous {
        Some(row) => row.get::<i64>("generation")? + 1,
        None => 1,
    };
    conn.execute("DELETE FROM hosts WHERE node_id = $1", &[&host.node_id])?;
    let tags = serde_json::to_string(&host.tags).unwrap_or_else(|_| "{}".into());
    let setup = serde_json::to_string(&host.setup).unwrap_or_else(|_| "{}".into());
    conn.execute(
        &format!(
            "INSERT INTO hosts ({HOST_COLUMNS}, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
        ),
        &[
            &host.node_id,
            &host.state.as_str(),
            &host.role,
            &host.identity_generation,
            &host.hostname,
            &host.site,
            &host.rack,
            &tags,
            &host.profile_id,
            &host.profile_version,
            &host.enrolment_token,
            &setup,
            &host.public_key,
            &to_millis(host.certificate_expires_at),
            &to_millis(host.joined_at),
            &host.renewed_at.map(to_millis),
            &generation,
            &to_millis(now),
        ],
    )?;
    Ok(Host { generation, ..host.clone() })
}

/// The node's host, if it has one.
pub fn get(conn: &mut dyn Conn, node_id: &str) -> DbResult<Option<Host>> {
    let row = conn.query_opt(&format!("SELECT {HOST_COLUMNS} FROM hosts WHERE node_id = $1"), &[&node_id])?;
    row.as_ref().map(host_from_row).transpose()
}

/// A page of the hosts, by node id.
pub fn page(conn: &mut dyn Conn, page: &Page) -> Result<Paged<Host>, ApiError> {
    Keyset::new(HOST_COLUMNS, "hosts").read(conn, &[("node_id", Order::Asc)], page, |_, row| host_from_row(row))
}

/// Moves a host to `state` (compare-and-set on its row generation); false when it changed.
pub fn set_state(conn: &mut dyn Conn, host: &Host, state: HostState, now: OffsetDateTime) -> DbResult<bool> {
    let updated = conn.execute(
        "UPDATE hosts SET state = $1, generation = generation + 1, updated_at = $2 \
         WHERE node_id = $3 AND generation = $4",
        &[&state.as_str(), &to_millis(now), &host.node_id, &host.generation],
    )?;
    Ok(updated == 1)
}

/// Records a renewal: the key the new certificate certifies, and its end.
pub fn renewed(
    conn: &mut dyn Conn,
    host: &Host,
    public_key: &str,
    expires_at: OffsetDateTime,
    now: OffsetDateTime,
) -> DbResult<bool> {
    let updated = conn.execute(
        "UPDATE hosts SET public_key = $1, certificate_expires_at = $2, renewed_at = $3, generation = generation + 1, \
         updated_at = $3 WHERE node_id = $4 AND generation = $5",
        &[&public_key, &to_millis(expires_at), &to_millis(now), &host.node_id, &host.generation],
    )?;
    Ok(updated == 1)
}

/// Appends a step to the node's join log.
pub fn log(
    conn: &mut dyn Conn,
    node_id: &str,
    identity_generation: i64,
    step: &str,
    ok: bool,
    detail: &str,
    now: OffsetDateTime,
) -> DbResult<()> {
    crate::nodes::lock(conn, node_id)?;
    let row =
        conn.query_one("SELECT COALESCE(MAX(seq), 0) AS last FROM host_join_log WHERE node_id = $1", &[&node_id])?;
    let seq = row.get::<i64>("last")? + 1;
    conn.execute(
        "INSERT INTO host_join_log (node_id, seq, identity_generation, at, step, ok, detail) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[&node_id, &seq, &identity_generation, &to_millis(now), &step, &i64::from(ok), &detail],
    )?;
    Ok(())
}

/// A node's join log, oldest first.
pub const JOIN_LOG: NodeRows<JoinLogEntry> = NodeRows {
    table: "host_join_log",
    columns: "seq, identity_generation, at, step, ok, detail",
    key: &[("seq", Order::Asc)],
    decode: |row| {
        Ok(JoinLogEntry {
            seq: row.get("seq")?,
            identity_generation: row.get("identity_generation")?,
            at: from_millis(row.get("at")?),
            step: row.get("step")?,
            ok: row.flag("ok")?,
            detail: row.get("detail")?,
        })
    },
};

/// A teardown's clean-up: the node's host and its enrolment tokens go (the log stays).
/// Returns how many host rows and tokens were removed.
pub fn forget(conn: &mut dyn Conn, node_id: &str) -> DbResult<(u64, u64)> {
    crate::nodes::lock(conn, node_id)?;
    let hosts = conn.execute("DELETE FROM hosts WHERE node_id = $1", &[&node_id])?;
    let tokens = conn.execute("DELETE FROM enrolment_tokens WHERE node_id = $1", &[&node_id])?;
    Ok((hosts, tokens))
}
