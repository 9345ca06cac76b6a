//! Measured-boot rows (issue 32): the TPM a node's first attestation pinned, one-time
//! challenges (only the digest their quote must bind is kept, never the credential's
//! secret), every attestation as received, verified or refused, and the baselines learned
//! from verified ones.

use std::time::Duration;

use time::OffsetDateTime;

use crate::page::{NodeRows, Order};
use crate::{Conn, DbResult, Row};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::boot::{AttestationRecord, BaselineKey, BaselineScope, BaselineState, BootBaseline};

/// The TPM pinned to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTpm {
    /// SHA-256 (hex) of the EK's public area.
    pub ek_sha256: String,
    /// When it was pinned.
    pub first_seen: OffsetDateTime,
    /// Whether it came with an EK certificate.
    pub certified: bool,
}

/// The node's pinned TPM, if it has one.
pub fn tpm(conn: &mut dyn Conn, node_id: &str) -> DbResult<Option<NodeTpm>> {
    conn.query("SELECT ek_sha256, ek_certificate, first_seen FROM node_tpms WHERE node_id = $1", &[&node_id])?
        .first()
        .map(|row| {
            Ok(NodeTpm {
                ek_sha256: row.get("ek_sha256")?,
                first_seen: from_millis(row.get("first_seen")?),
                certified: row.get::<Option<String>>("ek_certificate")?.is_some(),
            })
        })
        .transpose()
}

/// Pins a TPM to a node (its first attestation). The EK and its certificate are base64.
pub fn pin(
    conn: &mut dyn Conn,
    node_id: &str,
    ek_sha256: &str,
    ek_public: &str,
    ek_certificate: Option<&str>,
    now: OffsetDateTime,
) -> DbResult<()> {
    conn.execute(
        "INSERT INTO node_tpms (node_id, ek_sha256, ek_public, ek_certificate, first_seen) VALUES ($1, $2, $3, $4, $5)",
        &[&node_id, &ek_sha256, &ek_public, &ek_certificate, &to_millis(now)],
    )?;
    Ok(())
}

/// A challenge as issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedChallenge {
    /// The node.
    pub node_id: String,
    /// The node's identity generation when it was issued.
    pub identity_generation: i64,
    /// The hex the quote must bind.
    pub extra_data: String,
    /// The ramdisk key (base64) that asked for it: only that key may answer it.
    pub ramdisk_key: String,
}

/// Records a challenge, valid for `ttl`.
pub fn issue_challenge(
    conn: &mut dyn Conn,
    id: &str,
    challenge: &IssuedChallenge,
    now: OffsetDateTime,
    ttl: Duration,
) -> DbResult<()> {
    conn.execute(
        "INSERT INTO attest_challenges (id, node_id, identity_generation, extra_data, ramdisk_key, created_at, \
         expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[
            &id,
            &challenge.node_id,
            &challenge.identity_generation,
            &challenge.extra_data,
            &challenge.ramdisk_key,
            &to_millis(now),
            &to_millis(now + ttl),
        ],
    )?;
    Ok(())
}

/// Takes a challenge: once, before it expires. Refused (403) when unknown, used or expired.
pub fn take_challenge(conn: &mut dyn Conn, id: &str, now: OffsetDateTime) -> Result<IssuedChallenge, ApiError> {
    let rows = conn.query(
        "SELECT node_id, identity_generation, extra_data, ramdisk_key, expires_at, used_at FROM attest_challenges \
         WHERE id = $1",
        &[&id],
    )?;
    let row = rows.first().ok_or_else(|| ApiError::Forbidden(format!("challenge {id} is unknown")))?;
    if row.get::<Option<i64>>("used_at")?.is_some() {
        return Err(ApiError::Forbidden(format!("challenge {id} was already answered")));
    }
    if from_millis(row.get("expires_at")?) <= now {
        return Err(ApiError::Forbidden(format!("challenge {id} has expired")));
    }
    // Conditional, so that of two answers racing on PostgreSQL only one takes it.
    let taken = conn.execute(
        "UPDATE attest_challenges SET used_at = $1 WHERE id = $2 AND used_at IS NULL",
        &[&to_millis(now), &id],
    )?;
    if taken != 1 {
        return Err(ApiError::Forbidden(format!("challenge {id} was already answered")));
    }
    Ok(IssuedChallenge {
        node_id: row.get("node_id")?,
        identity_generation: row.get("identity_generation")?,
        extra_data: row.get("extra_data")?,
        ramdisk_key: row.get("ramdisk_key")?,
    })
}

/// Stores an attestation as received.
pub fn record(conn: &mut dyn Conn, record: &AttestationRecord, envelope: &str) -> DbResult<()> {
    let pcrs = serde_json::to_string(&record.pcrs).unwrap_or_else(|_| "{}".into());
    conn.execute(
        "INSERT INTO attestations (id, node_id, identity_generation, challenge_id, verified, code, reason, pcrs, \
         log_sha256, ramdisk_key, envelope, received_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
        &[
            &record.id,
            &record.node_id,
            &record.identity_generation,
            &record.challenge_id,
            &i64::from(record.verified),
            &record.code,
            &record.reason,
            &pcrs,
            &record.log_sha256,
            &record.ramdisk_key,
            &envelope,
            &to_millis(record.received_at),
        ],
    )?;
    Ok(())
}

fn record_from_row(row: &Row) -> DbResult<AttestationRecord> {
    Ok(AttestationRecord {
        id: row.get("id")?,
        node_id: row.get("node_id")?,
        identity_generation: row.get("identity_generation")?,
        challenge_id: row.get("challenge_id")?,
        verified: row.flag("verified")?,
        code: row.get("code")?,
        reason: row.get("reason")?,
        pcrs: row.json("pcrs")?,
        log_sha256: row.get("log_sha256")?,
        ramdisk_key: row.get("ramdisk_key")?,
        received_at: from_millis(row.get("received_at")?),
    })
}

const RECORD_COLUMNS: &str = "id, node_id, identity_generation, challenge_id, verified, code, reason, pcrs, log_sha256, ramdisk_key, received_at";

/// A node's attestations, oldest first.
pub const ATTESTATIONS: NodeRows<AttestationRecord> = NodeRows {
    table: "attestations",
    columns: RECORD_COLUMNS,
    key: &[("received_at", Order::Asc), ("id", Order::Asc)],
    decode: record_from_row,
};

/// The node's attestations sent by the ramdisk of `ramdisk_key` (one boot), oldest first.
pub fn by_ramdisk(conn: &mut dyn Conn, node_id: &str, ramdisk_key: &str) -> DbResult<Vec<AttestationRecord>> {
    conn.query(
        &format!(
            "SELECT {RECORD_COLUMNS} FROM attestations WHERE node_id = $1 AND ramdisk_key = $2 \
             ORDER BY received_at, id"
        ),
        &[&node_id, &ramdisk_key],
    )?
    .iter()
    .map(record_from_row)
    .collect()
}

/// The DSSE envelope attestation `id` came in, whichever node sent it (a profile's baseline
/// was learned on another node).
pub fn envelope(conn: &mut dyn Conn, id: &str) -> DbResult<Option<String>> {
    conn.query("SELECT envelope FROM attestations WHERE id = $1", &[&id])?
        .first()
        .map(|row| row.get("envelope"))
        .transpose()
}

/// Attestation `id` of `node_id` with the DSSE envelope it came in.
pub fn get(conn: &mut dyn Conn, node_id: &str, id: &str) -> DbResult<Option<(AttestationRecord, String)>> {
    conn.query(
        &format!("SELECT {RECORD_COLUMNS}, envelope FROM attestations WHERE node_id = $1 AND id = $2"),
        &[&node_id, &id],
    )?
    .first()
    .map(|row| Ok((record_from_row(row)?, row.get("envelope")?)))
    .transpose()
}

const BASELINE_COLUMNS: &str = "id, scope, node_id, hardware_profile, firmware, attestation_id, pcrs, state, \
                                learned_by, created_at, replaced_at, state_reason";

fn baseline_from_row(row: &Row) -> DbResult<BootBaseline> {
    Ok(BootBaseline {
        id: row.get("id")?,
        scope: row.parse("scope")?,
        node_id: row.get("node_id")?,
        hardware_profile: row.get("hardware_profile")?,
        firmware: row.get("firmware")?,
        attestation_id: row.get("attestation_id")?,
        pcrs: row.json("pcrs")?,
        state: row.parse("state")?,
        learned_by: row.get("learned_by")?,
        created_at: from_millis(row.get("created_at")?),
        replaced_at: row.get::<Option<i64>>("replaced_at")?.map(from_millis),
        state_reason: row.get("state_reason")?,
    })
}

/// The baselines of `key`, newest first.
pub fn baselines(conn: &mut dyn Conn, key: &BaselineKey) -> DbResult<Vec<BootBaseline>> {
    let rows = match key {
        BaselineKey::Node(node) => conn.query(
            &format!(
                "SELECT {BASELINE_COLUMNS} FROM boot_baselines WHERE scope = $1 AND node_id = $2 \
                 ORDER BY created_at DESC, id DESC"
            ),
            &[&BaselineScope::Node.as_str(), node],
        )?,
        BaselineKey::Profile { hardware_profile, firmware } => conn.query(
            &format!(
                "SELECT {BASELINE_COLUMNS} FROM boot_baselines WHERE scope = $1 AND hardware_profile = $2 \
                 AND firmware = $3 ORDER BY created_at DESC, id DESC"
            ),
            &[&BaselineScope::Profile.as_str(), hardware_profile, firmware],
        )?,
    };
    rows.iter().map(baseline_from_row).collect()
}

/// The active baseline of `key`.
pub fn active_baseline(conn: &mut dyn Conn, key: &BaselineKey) -> DbResult<Option<BootBaseline>> {
    Ok(baselines(conn, key)?.into_iter().find(|b| b.state == BaselineState::Active))
}

/// Ends baseline `id` by hand: `state` (retired or revoked), with who and why. False when no
/// baseline was in one of the states `from`.
pub fn end_baseline(
    conn: &mut dyn Conn,
    id: &str,
    from: &[BaselineState],
    state: BaselineState,
    reason: &str,
    now: OffsetDateTime,
) -> DbResult<bool> {
    let Some(current) = conn
        .query("SELECT state FROM boot_baselines WHERE id = $1", &[&id])?
        .first()
        .map(|row| row.parse::<BaselineState>("state"))
        .transpose()?
    else {
        return Ok(false);
    };
    if !from.contains(&current) {
        return Ok(false);
    }
    // The state read is the state changed: a concurrent end of the same baseline loses.
    let changed = conn.execute(
        "UPDATE boot_baselines SET state = $1, state_reason = $2, replaced_at = COALESCE(replaced_at, $3) \
         WHERE id = $4 AND state = $5",
        &[&state.as_str(), &reason, &to_millis(now), &id, &current.as_str()],
    )?;
    Ok(changed == 1)
}

/// Makes `baseline` the active one of its key; the one it replaces becomes obsolete.
pub fn learn(conn: &mut dyn Conn, baseline: &BootBaseline) -> DbResult<()> {
    if let Some(active) = active_baseline(conn, &baseline.key())? {
        conn.execute(
            "UPDATE boot_baselines SET state = $1, replaced_at = $2 WHERE id = $3",
            &[&BaselineState::Obsolete.as_str(), &to_millis(baseline.created_at), &active.id],
        )?;
    }
    let pcrs = serde_json::to_string(&baseline.pcrs).unwrap_or_else(|_| "{}".into());
    conn.execute(
        "INSERT INTO boot_baselines (id, scope, node_id, hardware_profile, firmware, attestation_id, pcrs, state, \
         learned_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        &[
            &baseline.id,
            &baseline.scope.as_str(),
            &baseline.node_id,
            &baseline.hardware_profile,
            &baseline.firmware,
            &baseline.attestation_id,
            &pcrs,
            &BaselineState::Active.as_str(),
            &baseline.learned_by,
            &to_millis(baseline.created_at),
        ],
    )?;
    Ok(())
}
