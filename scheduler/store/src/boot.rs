//! Boot service rows: one-time ramdisk tokens (only their SHA-256 is kept), the platform
//! inventory from the last commissioning, every wipe report as received (accepted or
//! refused, with the rule it broke) and the deploy plan a deploying ramdisk fetches.

use std::time::Duration;

use time::OffsetDateTime;

use crate::auth::{hash, new_secret};
use crate::page::{NodeRows, Order};
use crate::{Conn, DbResult, Row};
use metal_types::clock::{from_millis, to_millis};
use metal_types::error::ApiError;
use metal_types::model::boot::{BootTask, FirmwareCheckRecord, NodeInventory, WipeReportRecord};

/// What a one-time token was issued for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootToken {
    /// The node.
    pub node_id: String,
    /// The task.
    pub task: BootTask,
    /// The node's identity generation when the token was issued.
    pub identity_generation: i64,
    /// When it stops being accepted.
    pub expires_at: OffsetDateTime,
}

fn token_from_row(row: &Row) -> DbResult<BootToken> {
    Ok(BootToken {
        node_id: row.get("node_id")?,
        task: row.parse("task")?,
        identity_generation: row.get("identity_generation")?,
        expires_at: from_millis(row.get("expires_at")?),
    })
}

/// Issues a token for `node`'s `task`, valid for `ttl`; returns the token (the only time it
/// exists outside the kernel command line it is written on).
pub fn issue_token(
    conn: &mut dyn Conn,
    node_id: &str,
    task: BootTask,
    identity_generation: i64,
    now: OffsetDateTime,
    ttl: Duration,
) -> DbResult<String> {
    let token = new_secret();
    conn.execute(
        "INSERT INTO boot_tokens (token_hash, node_id, task, identity_generation, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[&hash(&token), &node_id, &task.as_str(), &identity_generation, &to_millis(now), &to_millis(now + ttl)],
    )?;
    Ok(token)
}

const TOKEN_COLUMNS: &str = "node_id, task, identity_generation, expires_at, used_at";

/// The token if it is live (issued, unused, unexpired), without using it: what the kernel
/// and initrd downloads check.
pub fn live_token(conn: &mut dyn Conn, token: &str, now: OffsetDateTime) -> DbResult<Option<BootToken>> {
    let row = conn.query_opt(
        &format!(
            "SELECT {TOKEN_COLUMNS} FROM boot_tokens WHERE token_hash = $1 AND used_at IS NULL AND expires_at > $2"
        ),
        &[&hash(token), &to_millis(now)],
    )?;
    row.as_ref().map(token_from_row).transpose()
}

/// The token's record, used or not, expired or not.
pub fn token(conn: &mut dyn Conn, token: &str) -> DbResult<Option<BootToken>> {
    let row =
        conn.query_opt(&format!("SELECT {TOKEN_COLUMNS} FROM boot_tokens WHERE token_hash = $1"), &[&hash(token)])?;
    row.as_ref().map(token_from_row).transpose()
}

/// Uses a token once. Unknown, already used and expired tokens are FORBIDDEN, each with its
/// own message.
pub fn redeem_token(conn: &mut dyn Conn, token: &str, now: OffsetDateTime) -> Result<BootToken, ApiError> {
    let digest = hash(token);
    let row = conn
        .query_opt(&format!("SELECT {TOKEN_COLUMNS} FROM boot_tokens WHERE token_hash = $1"), &[&digest])?
        .ok_or_else(|| ApiError::Forbidden("the join token is unknown".into()))?;
    let found = token_from_row(&row)?;
    let used_at: Option<i64> = row.get("used_at")?;
    if used_at.is_some() {
        return Err(ApiError::Forbidden("the join token was already used".into()));
    }
    if found.expires_at <= now {
        return Err(ApiError::Forbidden(format!("the join token expired at {}", found.expires_at)));
    }
    let used = conn.execute(
        "UPDATE boot_tokens SET used_at = $1 WHERE token_hash = $2 AND used_at IS NULL",
        &[&to_millis(now), &digest],
    )?;
    if used == 0 {
        return Err(ApiError::Forbidden("the join token was already used".into()));
    }
    Ok(found)
}

/// Replaces the node's platform inventory.
pub fn put_inventory(
    conn: &mut dyn Conn,
    node_id: &str,
    passed: bool,
    inventory: &str,
    envelope: &str,
    now: OffsetDateTime,
) -> DbResult<()> {
    conn.execute("DELETE FROM node_inventories WHERE node_id = $1", &[&node_id])?;
    conn.execute(
        "INSERT INTO node_inventories (node_id, passed, inventory, envelope, reported_at) VALUES ($1, $2, $3, $4, $5)",
        &[&node_id, &i64::from(passed), &inventory, &envelope, &to_millis(now)],
    )?;
    Ok(())
}

/// The node's platform inventory, if it was ever commissioned.
pub fn get_inventory(conn: &mut dyn Conn, node_id: &str) -> DbResult<Option<NodeInventory>> {
    let row = conn.query_opt(
        "SELECT node_id, passed, inventory, reported_at FROM node_inventories WHERE node_id = $1",
        &[&node_id],
    )?;
    row.map(|row| {
        Ok(NodeInventory {
            node_id: row.get("node_id")?,
            passed: row.flag("passed")?,
            reported_at: from_millis(row.get("reported_at")?),
            inventory: row.json("inventory")?,
        })
    })
    .transpose()
}

/// Stores a wipe report as received, with the node's (row) generation then.
pub fn record_wipe(
    conn: &mut dyn Conn,
    record: &WipeReportRecord,
    node_generation: i64,
    envelope: &str,
) -> DbResult<()> {
    conn.execute(
        "INSERT INTO wipe_reports (id, node_id, accepted, code, reason, signer, signer_key, envelope, received_at, \
         node_generation) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        &[
            &record.id,
            &record.node_id,
            &i64::from(record.accepted),
            &record.code,
            &record.reason,
            &record.signer,
            &record.signer_key,
            &envelope,
            &to_millis(record.received_at),
            &node_generation,
        ],
    )?;
    Ok(())
}

/// A node's wipe reports, oldest first.
pub const WIPE_REPORTS: NodeRows<WipeReportRecord> = NodeRows {
    table: "wipe_reports",
    columns: "id, node_id, accepted, code, reason, signer, signer_key, received_at",
    key: &[("received_at", Order::Asc), ("id", Order::Asc)],
    decode: |row| {
        Ok(WipeReportRecord {
            id: row.get("id")?,
            node_id: row.get("node_id")?,
            accepted: row.flag("accepted")?,
            code: row.get("code")?,
            reason: row.get("reason")?,
            signer: row.get("signer")?,
            signer_key: row.get("signer_key")?,
            received_at: from_millis(row.get("received_at")?),
        })
    },
};

/// The DSSE envelope of wipe report `id` of `node_id`, as it was posted.
pub fn wipe_envelope(conn: &mut dyn Conn, node_id: &str, id: &str) -> DbResult<Option<String>> {
    conn.query("SELECT envelope FROM wipe_reports WHERE node_id = $1 AND id = $2", &[&node_id, &id])?
        .first()
        .map(|row| row.get("envelope"))
        .transpose()
}

/// Records a firmware check of the node at `node_generation`.
pub fn record_firmware_check(
    conn: &mut dyn Conn,
    node_id: &str,
    node_generation: i64,
    compliant: bool,
    report: &str,
    now: OffsetDateTime,
) -> DbResult<String> {
    let id = format!("fw-{}", uuid::Uuid::new_v4().simple());
    conn.execute(
        "INSERT INTO firmware_checks (id, node_id, node_generation, compliant, report, received_at) \
         VALUES ($1, $2, $3, $4, $5, $6)",
        &[&id, &node_id, &node_generation, &i64::from(compliant), &report, &to_millis(now)],
    )?;
    Ok(id)
}

/// A node's firmware checks, oldest first.
pub const FIRMWARE_CHECKS: NodeRows<FirmwareCheckRecord> = NodeRows {
    table: "firmware_checks",
    columns: "id, node_id, node_generation, compliant, report, received_at",
    key: &[("received_at", Order::Asc), ("id", Order::Asc)],
    decode: |row| {
        Ok(FirmwareCheckRecord {
            id: row.get("id")?,
            node_id: row.get("node_id")?,
            node_generation: row.get("node_generation")?,
            compliant: row.flag("compliant")?,
            received_at: from_millis(row.get("received_at")?),
            report: row.json("report")?,
        })
    },
};

/// What a releasing node still needs from a ramdisk: its firmware checked, its disks erased
/// (nothing, for a node in any other state). Both are counted at the node's current (row)
/// generation, which every lifecycle move bumps, so a new release (or a recovery) needs
/// both again; so does a PATCH of the node's attributes, which bumps it too. Under a running
/// teardown with an erase step, the erase is the step's to judge, by the step's own rule: due
/// until the step has a report accepted since it began (so a report from a ramdisk of an
/// earlier boot, arriving before the step, neither counts for it nor stops the erase being
/// served), and not due once the run is past it.
pub fn due(conn: &mut dyn Conn, node: &metal_types::model::node::Node) -> DbResult<metal_types::model::boot::Due> {
    if node.state != metal_types::model::node::NodeState::Releasing {
        return Ok(metal_types::model::boot::Due { firmware: false, erase: false });
    }
    let erase_step = crate::workflows::running_for(conn, &node.id)?.and_then(|run| {
        let at = run.steps.iter().position(|s| s.name == "erase")?;
        Some((usize::try_from(run.step_index).unwrap_or(usize::MAX).cmp(&at), run.step_started))
    });
    let erase = match erase_step {
        Some((std::cmp::Ordering::Less, _)) => true,
        Some((std::cmp::Ordering::Greater, _)) => false,
        Some((std::cmp::Ordering::Equal, began)) => conn
            .query_opt(
                "SELECT id FROM wipe_reports WHERE node_id = $1 AND accepted = 1 AND received_at >= $2",
                &[&node.id, &to_millis(began)],
            )?
            .is_none(),
        None => conn
            .query_opt(
                "SELECT id FROM wipe_reports WHERE node_id = $1 AND node_generation = $2 AND accepted = 1",
                &[&node.id, &node.generation],
            )?
            .is_none(),
    };
    Ok(metal_types::model::boot::Due { firmware: firmware_due(conn, node)?, erase })
}

/// Whether a releasing node still needs its firmware checked: its pool has a baseline and
/// no compliant check was recorded at its current generation (every lifecycle move bumps it).
fn firmware_due(conn: &mut dyn Conn, node: &metal_types::model::node::Node) -> DbResult<bool> {
    let Some(pool) = node.pool_id.as_deref() else { return Ok(false) };
    let baseline =
        crate::capacity::get_pool(conn, pool)?.and_then(|p| p.policy.firmware_baseline).is_some_and(|b| !b.is_empty());
    if !baseline {
        return Ok(false);
    }
    let checked = conn.query_opt(
        "SELECT id FROM firmware_checks WHERE node_id = $1 AND node_generation = $2 AND compliant = 1",
        &[&node.id, &node.generation],
    )?;
    Ok(checked.is_none())
}

/// Replaces the node's deploy plan (JSON of a `DeployPlan`).
pub fn put_plan(conn: &mut dyn Conn, node_id: &str, plan: &str, now: OffsetDateTime) -> DbResult<()> {
    conn.execute("DELETE FROM deploy_plans WHERE node_id = $1", &[&node_id])?;
    conn.execute(
        "INSERT INTO deploy_plans (node_id, plan, created_at) VALUES ($1, $2, $3)",
        &[&node_id, &plan, &to_millis(now)],
    )?;
    Ok(())
}

/// What a derived plan is.
#[derive(Debug, Clone)]
pub enum DerivedPlan {
    /// A `DeployPlan` for the ramdisk, of this image (the one the boot listener serves the node).
    Image {
        /// The plan's JSON.
        plan: String,
        /// The image it writes.
        image_id: String,
    },
    /// An installer deploy's `InstallerPlan` JSON.
    Installer(String),
}

/// Replaces the node's deploy plan with one derived from `profile:version`.
pub fn put_derived_plan(
    conn: &mut dyn Conn,
    node_id: &str,
    derived: &DerivedPlan,
    profile_id: &str,
    profile_version: i64,
    now: OffsetDateTime,
) -> DbResult<()> {
    let (mode, plan, image_id) = match derived {
        DerivedPlan::Image { plan, image_id } => ("image", plan, Some(image_id)),
        DerivedPlan::Installer(plan) => ("installer", plan, None),
    };
    conn.execute("DELETE FROM deploy_plans WHERE node_id = $1", &[&node_id])?;
    conn.execute(
        "INSERT INTO deploy_plans (node_id, plan, created_at, mode, image_id, profile_id, profile_version) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[&node_id, plan, &to_millis(now), &mode, &image_id, &profile_id, &profile_version],
    )?;
    Ok(())
}

/// The node's installer plan, when its deploy plan is one.
pub fn installer_plan(
    conn: &mut dyn Conn,
    node_id: &str,
) -> DbResult<Option<metal_types::model::profile::InstallerPlan>> {
    conn.query_opt("SELECT plan FROM deploy_plans WHERE node_id = $1 AND mode = 'installer'", &[&node_id])?
        .map(|row| row.json("plan"))
        .transpose()
}

/// The profile and version the node's plan was derived from, if any.
pub fn plan_profile(conn: &mut dyn Conn, node_id: &str) -> DbResult<Option<(String, i64)>> {
    let Some(row) =
        conn.query_opt("SELECT profile_id, profile_version FROM deploy_plans WHERE node_id = $1", &[&node_id])?
    else {
        return Ok(None);
    };
    let profile: Option<String> = row.get("profile_id")?;
    let version: Option<i64> = row.get("profile_version")?;
    Ok(profile.zip(version))
}

/// The image the node's plan deploys from this controller, if it was derived from a profile.
pub fn plan_image(conn: &mut dyn Conn, node_id: &str) -> DbResult<Option<String>> {
    Ok(conn
        .query_opt("SELECT image_id FROM deploy_plans WHERE node_id = $1", &[&node_id])?
        .map(|row| row.get::<Option<String>>("image_id"))
        .transpose()?
        .flatten())
}

/// The node's deploy plan for the ramdisk, if one is set (an installer plan is not one).
pub fn get_plan(conn: &mut dyn Conn, node_id: &str) -> DbResult<Option<serde_json::Value>> {
    conn.query_opt("SELECT plan FROM deploy_plans WHERE node_id = $1 AND mode = 'image'", &[&node_id])?
        .map(|row| row.json("plan"))
        .transpose()
}

/// `boot.cleanUp` of a lease: the node's boot tokens and its deploy plan go. Returns how
/// many tokens and plans were removed.
pub fn clean_up(conn: &mut dyn Conn, node_id: &str) -> DbResult<(u64, u64)> {
    let tokens = conn.execute("DELETE FROM boot_tokens WHERE node_id = $1", &[&node_id])?;
    let plans = conn.execute("DELETE FROM deploy_plans WHERE node_id = $1", &[&node_id])?;
    Ok((tokens, plans))
}

/// Appends an inventory snapshot (advisory: a tenant-controlled node's report; otherwise a
/// platform-trusted host's); returns its id.
pub fn put_snapshot(
    conn: &mut dyn Conn,
    node_id: &str,
    generation: i64,
    advisory: bool,
    inventory: &str,
    envelope: &str,
    now: OffsetDateTime,
) -> DbResult<String> {
    let id = format!("snap-{}", uuid::Uuid::new_v4().simple());
    conn.execute(
        "INSERT INTO inventory_snapshots (id, node_id, identity_generation, advisory, inventory, envelope, reported_at) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
        &[&id, &node_id, &generation, &i64::from(advisory), &inventory, &envelope, &to_millis(now)],
    )?;
    Ok(id)
}
