//! The boots the scheduler started (`node_boots`): a ramdisk token exists only for one of
//! them. A boot is *armed* when a workflow, an operator or a lifecycle move starts it; the
//! first script request after that *takes* it (its one token is handed to that client); the
//! ramdisk that joins with the token is recorded (address and key); the boot *ends* when its
//! task is over, when the node moves, when a newer boot supersedes it, or when it is contested.
//! The one decision a reader needs: a boot is open from its arming until it ends, and while a
//! taken boot is open, any second script request or second join is somebody else.

use std::time::Duration;

use time::OffsetDateTime;

use crate::page::{NodeRows, Order};
use crate::{Conn, DbResult, Row};
use metal_types::clock::{from_millis, to_millis};
use metal_types::model::boot::{BootTask, NodeBoot};

const COLUMNS: &str = "id, node_id, armed_by, run_id, armed_at, expires_at, task, token_hash, handed_to, \
                       joined_from, joined_key, ended, contested_by, claim_hash";

fn from_row(row: &Row) -> DbResult<NodeBoot> {
    let task: Option<String> = row.get("task")?;
    Ok(NodeBoot {
        id: row.get("id")?,
        node_id: row.get("node_id")?,
        armed_by: row.get("armed_by")?,
        run_id: row.get("run_id")?,
        armed_at: from_millis(row.get("armed_at")?),
        expires_at: from_millis(row.get("expires_at")?),
        task: task
            .map(|t| t.parse())
            .transpose()
            .map_err(|message| crate::DbError::Decode { column: "task".into(), message })?,
        token_hash: row.get("token_hash")?,
        handed_to: row.get("handed_to")?,
        joined_from: row.get("joined_from")?,
        joined_key: row.get("joined_key")?,
        ended: row.get("ended")?,
        contested_by: row.get("contested_by")?,
        claim_hash: row.get("claim_hash")?,
    })
}

/// Ends the node's open boots with `why`; a token they handed out that was not used yet is
/// revoked with them. Returns how many ended.
pub fn end(conn: &mut dyn Conn, node_id: &str, why: &str, now: OffsetDateTime) -> DbResult<u64> {
    conn.execute(
        "UPDATE boot_tokens SET used_at = $1 WHERE used_at IS NULL AND token_hash IN \
         (SELECT token_hash FROM node_boots WHERE node_id = $2 AND ended_at IS NULL AND token_hash IS NOT NULL)",
        &[&to_millis(now), &node_id],
    )?;
    conn.execute(
        "UPDATE node_boots SET ended_at = $1, ended = $2 WHERE node_id = $3 AND ended_at IS NULL",
        &[&to_millis(now), &why, &node_id],
    )
}

/// Arms a boot of the node that one script request may take within `ttl`; an open boot
/// before it is superseded. Returns the new boot's id.
pub fn arm(
    conn: &mut dyn Conn,
    node_id: &str,
    armed_by: &str,
    run_id: Option<&str>,
    now: OffsetDateTime,
    ttl: Duration,
) -> DbResult<String> {
    arm_claimed(conn, node_id, armed_by, run_id, None, now, ttl)
}

/// [`arm`], for a boot that only the holder of the claim whose SHA-256 is `claim_hash` may
/// take (a virtual-media boot: the per-boot ISO carries the claim), when there is one.
pub fn arm_claimed(
    conn: &mut dyn Conn,
    node_id: &str,
    armed_by: &str,
    run_id: Option<&str>,
    claim_hash: Option<&str>,
    now: OffsetDateTime,
    ttl: Duration,
) -> DbResult<String> {
    let id = format!("boot-{}", uuid::Uuid::new_v4().simple());
    end(conn, node_id, &format!("superseded by {id} ({armed_by})"), now)?;
    conn.execute(
        "INSERT INTO node_boots (id, node_id, seq, armed_by, run_id, armed_at, expires_at, claim_hash) \
         SELECT CAST($1 AS TEXT), CAST($2 AS TEXT), COALESCE(MAX(seq), 0) + 1, CAST($3 AS TEXT), CAST($4 AS TEXT), \
         CAST($5 AS BIGINT), CAST($6 AS BIGINT), CAST($7 AS TEXT) FROM node_boots WHERE node_id = $2",
        &[&id, &node_id, &armed_by, &run_id, &to_millis(now), &to_millis(now + ttl), &claim_hash],
    )?;
    Ok(id)
}

/// The open boot that carries the claim whose SHA-256 is `claim_hash` (as [`open`] reads
/// open: not ended and, untaken, not expired).
pub fn open_by_claim(conn: &mut dyn Conn, claim_hash: &str, now: OffsetDateTime) -> DbResult<Option<NodeBoot>> {
    open_where(conn, "claim_hash", claim_hash, now)
}

/// The node's open boot: the newest that has not ended, and, when nobody took it yet, can
/// still be taken.
pub fn open(conn: &mut dyn Conn, node_id: &str, now: OffsetDateTime) -> DbResult<Option<NodeBoot>> {
    open_where(conn, "node_id", node_id, now)
}

/// The newest open boot whose `column` is `value`.
fn open_where(conn: &mut dyn Conn, column: &str, value: &str, now: OffsetDateTime) -> DbResult<Option<NodeBoot>> {
    let row = conn.query_opt(
        &format!(
            "SELECT {COLUMNS} FROM node_boots WHERE {column} = $1 AND ended_at IS NULL \
             AND (handed_at IS NOT NULL OR expires_at > $2) ORDER BY seq DESC LIMIT 1"
        ),
        &[&value, &to_millis(now)],
    )?;
    row.as_ref().map(from_row).transpose()
}

/// One boot by its id.
pub fn get(conn: &mut dyn Conn, id: &str) -> DbResult<Option<NodeBoot>> {
    let row = conn.query_opt(&format!("SELECT {COLUMNS} FROM node_boots WHERE id = $1"), &[&id])?;
    row.as_ref().map(from_row).transpose()
}

/// A node's boots, newest first.
pub const BOOTS: NodeRows<NodeBoot> =
    NodeRows { table: "node_boots", columns: COLUMNS, key: &[("seq", Order::Desc)], decode: from_row };

/// The boot a token was handed for.
pub fn of_token(conn: &mut dyn Conn, token_hash: &str) -> DbResult<Option<NodeBoot>> {
    let row = conn.query_opt(&format!("SELECT {COLUMNS} FROM node_boots WHERE token_hash = $1"), &[&token_hash])?;
    row.as_ref().map(from_row).transpose()
}

/// Hands the untaken boot's token (by its hash) to `client` for `task`; false when another
/// request took it first.
pub fn take(
    conn: &mut dyn Conn,
    boot_id: &str,
    task: BootTask,
    token_hash: &str,
    client: &str,
    now: OffsetDateTime,
) -> DbResult<bool> {
    let taken = conn.execute(
        "UPDATE node_boots SET task = $1, token_hash = $2, handed_to = $3, handed_at = $4 \
         WHERE id = $5 AND handed_at IS NULL AND ended_at IS NULL",
        &[&task.as_str(), &token_hash, &client, &to_millis(now), &boot_id],
    )?;
    Ok(taken == 1)
}

/// Hands the boot's token anew (to the client it went to, nobody joined with it yet): the old
/// token is revoked, the new one's hash recorded. False when somebody joined meanwhile.
pub fn retake(conn: &mut dyn Conn, boot: &NodeBoot, token_hash: &str, now: OffsetDateTime) -> DbResult<bool> {
    if let Some(old) = &boot.token_hash {
        conn.execute(
            "UPDATE boot_tokens SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL",
            &[&to_millis(now), old],
        )?;
    }
    let taken = conn.execute(
        "UPDATE node_boots SET token_hash = $1, handed_at = $2 WHERE id = $3 AND joined_at IS NULL AND ended_at IS NULL",
        &[&token_hash, &to_millis(now), &boot.id],
    )?;
    Ok(taken == 1)
}

/// Records the ramdisk that joined with the boot's token: its address and public key.
pub fn joined(conn: &mut dyn Conn, boot_id: &str, from: &str, key: &str, now: OffsetDateTime) -> DbResult<()> {
    conn.execute(
        "UPDATE node_boots SET joined_at = $1, joined_from = $2, joined_key = $3 WHERE id = $4",
        &[&to_millis(now), &from, &key, &boot_id],
    )?;
    Ok(())
}

/// Ends the boot as contested by `client`, revoking its token if unused; `run` is the
/// workflow run that must fail for it (the engine reads it with `contest_of_run`).
pub fn contest(
    conn: &mut dyn Conn,
    boot: &NodeBoot,
    client: &str,
    run: Option<&str>,
    now: OffsetDateTime,
) -> DbResult<()> {
    if let Some(hash) = &boot.token_hash {
        conn.execute(
            "UPDATE boot_tokens SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL",
            &[&to_millis(now), hash],
        )?;
    }
    conn.execute(
        "UPDATE node_boots SET ended_at = $1, ended = 'contested', contested_by = $2, contested_run = $3 \
         WHERE id = $4",
        &[&to_millis(now), &client, &run, &boot.id],
    )?;
    Ok(())
}

/// A boot contested while `run` ran on its node, if any: the run fails for it.
pub fn contest_of_run(conn: &mut dyn Conn, run_id: &str) -> DbResult<Option<NodeBoot>> {
    let row = conn.query_opt(
        &format!("SELECT {COLUMNS} FROM node_boots WHERE contested_run = $1 ORDER BY ended_at LIMIT 1"),
        &[&run_id],
    )?;
    row.as_ref().map(from_row).transpose()
}

/// The node's newest deploy boot whose ramdisk joined: where the deployed OS's join must
/// come from.
pub fn last_deploy_join(conn: &mut dyn Conn, node_id: &str) -> DbResult<Option<NodeBoot>> {
    let row = conn.query_opt(
        &format!(
            "SELECT {COLUMNS} FROM node_boots WHERE node_id = $1 AND task = 'deploy' AND joined_from IS NOT NULL \
             ORDER BY seq DESC LIMIT 1"
        ),
        &[&node_id],
    )?;
    row.as_ref().map(from_row).transpose()
}
