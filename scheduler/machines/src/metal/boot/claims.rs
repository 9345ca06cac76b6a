//! Who may claim a node's ramdisk identity: one token per boot the scheduler started
//! (`store::boots`), handed once, and an alarm when a second host claims the same boot. The
//! rules a script request, a join and a report follow live here, so the handlers only call
//! them.
//!
//! A machine that asks again from the address its token went to, before anybody joined with
//! it, gets a new token (its answer was lost); a join again with the key that joined gets
//! its certificate again (nothing is given away: only that key's holder can use it).
//!
//! A boot from virtual media (`media`) is taken only by its ISO's claim: a request naming
//! the node's MAC gets nothing for it, so on such a boot no host that merely knows the MAC
//! is in the race at all.
//!
//! The one design decision: when two hosts claim one boot the platform cannot tell which is
//! the machine, so neither wins. The boot ends contested (its token revoked), the event
//! `node.boot.contested` names both addresses, and the node's run fails (a teardown
//! quarantines) or, with no run, the node is quarantined at once.

use std::time::Duration;

use base64::Engine as _;
use metal_protocol::VerifyingKey;
use serde_json::json;
use time::OffsetDateTime;
use tracing::warn;

use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::boot::NodeBoot;
use metal_types::model::boot::{BootStep, BootTask, boot_step};
use metal_types::model::node::Node;

/// What a script request may be handed for a node whose step is a ramdisk task.
#[derive(Debug)]
pub enum Claim {
    /// The boot the scheduler started, not taken yet: this request takes it.
    Take(Box<NodeBoot>),
    /// The boot was taken by this same address and nobody joined with its token yet: the
    /// machine asking again (its answer lost, as when a replica died before it answered). It
    /// gets a new token, and the first one is revoked.
    Retake(Box<NodeBoot>),
    /// Nothing for this request, and why: no boot was started (or it can no longer be
    /// taken), it is a virtual-media boot and the request named only the MAC, or the boot
    /// was taken already and this request is a second claim (now contested).
    Refused(String),
}

/// How a script request names the boot it wants.
#[derive(Debug, Clone, Copy)]
pub enum Asked<'a> {
    /// By the node's boot MAC (PXE, or an ISO without a claim).
    Mac,
    /// By the claim (its SHA-256) that a virtual-media boot's ISO carries.
    Claim(&'a str),
}

/// Why a request naming only the MAC gets nothing on a virtual-media boot.
pub const MEDIA_ONLY: &str = "its boot is from virtual media: only the ISO its BMC mounted can take it";

/// The reason a contested boot gives (in the event, the run's failure and the node).
pub fn contest_reason(boot: &NodeBoot) -> String {
    format!(
        "two ramdisks claimed node {}: the token of boot {} went to {}, then {} claimed it",
        boot.node_id,
        boot.id,
        boot.handed_to.as_deref().unwrap_or("?"),
        boot.contested_by.as_deref().unwrap_or("another host"),
    )
}

/// Ends `boot` as contested by `client` (`what`: a script request, a join): the event, and
/// the node's run failing (the engine reads the contest) or, with no run, its quarantine.
pub fn contest(tx: &mut dyn Conn, boot: &NodeBoot, client: &str, what: &str, now: OffsetDateTime) -> ApiResult<String> {
    let run = store::workflows::running_for(tx, &boot.node_id)?;
    store::boots::contest(tx, boot, client, run.as_ref().map(|r| r.id.as_str()), now)?;
    let contested = NodeBoot { contested_by: Some(client.to_owned()), ..boot.clone() };
    let reason = contest_reason(&contested);
    store::events::append(
        tx,
        "node.boot.contested",
        &format!("node/{}", boot.node_id),
        None,
        &json!({"node": boot.node_id, "boot": boot.id, "task": boot.task, "armedBy": boot.armed_by,
                "first": boot.handed_to, "joinedFrom": boot.joined_from, "second": client, "what": what,
                "run": run.as_ref().map(|r| &r.id)}),
        now,
    )?;
    warn!(node = %boot.node_id, boot = %boot.id, first = ?boot.handed_to, second = client, what, "boot contested");
    match run {
        Some(_) => {
            store::workflows::wake(tx, &boot.node_id, now)?;
        }
        None => crate::metal::quarantine(tx, &boot.node_id, &reason, now)?,
    }
    Ok(reason)
}

/// The claim a script request from `client` makes on `node`'s open boot.
pub fn claim(tx: &mut dyn Conn, node: &Node, asked: Asked<'_>, client: &str, now: OffsetDateTime) -> ApiResult<Claim> {
    let boot = match (store::boots::open(tx, &node.id, now)?, asked) {
        (None, _) => return Ok(Claim::Refused("no boot was started for it".into())),
        (Some(boot), Asked::Mac) if boot.by_media() => return Ok(Claim::Refused(MEDIA_ONLY.into())),
        (Some(boot), Asked::Claim(hash)) if boot.claim_hash.as_deref() != Some(hash) => {
            return Ok(Claim::Refused("the boot this claim was made for is over".into()));
        }
        (Some(boot), _) => boot,
    };
    if boot.taken() && boot.joined_key.is_none() && boot.handed_to.as_deref() == Some(client) {
        Ok(Claim::Retake(Box::new(boot)))
    } else if boot.taken() {
        Ok(Claim::Refused(contest(tx, &boot, client, "a second script request", now)?))
    } else {
        Ok(Claim::Take(Box::new(boot)))
    }
}

/// The boot a join's token was handed for, when it may still join: a token of a boot that
/// ended (superseded, its task over, contested) is refused with why.
pub fn boot_of_token(tx: &mut dyn Conn, token: &str) -> ApiResult<Option<NodeBoot>> {
    let Some(boot) = store::boots::of_token(tx, &store::auth::hash(token))? else { return Ok(None) };
    match &boot.ended {
        Some(why) => {
            Err(ApiError::Forbidden(format!("the boot this token was handed for ({}) is over: {why}", boot.id)))
        }
        None => Ok(Some(boot)),
    }
}

/// The public key as stored with a boot's join.
pub fn key_text(key: &VerifyingKey) -> String {
    base64::engine::general_purpose::STANDARD.encode(key.as_bytes())
}

/// Refuses a ramdisk key that is not the one that joined the node's open boot: a deploy's
/// plan and image go only to the ramdisk of this boot (a certificate of an earlier boot of
/// the same generation, or of a host that never joined this boot, gets nothing).
pub fn require_boot_key(tx: &mut dyn Conn, node_id: &str, key: &VerifyingKey, now: OffsetDateTime) -> ApiResult<()> {
    let boot = store::boots::open(tx, node_id, now)?;
    if boot.as_ref().and_then(|b| b.joined_key.as_deref()) == Some(key_text(key).as_str()) {
        return Ok(());
    }
    Err(ApiError::Forbidden(format!("this certificate's key did not join node {node_id}'s current boot")))
}

/// After an accepted report: when the node's open boot's task is over (the node moved on, or
/// its releasing step is no longer that task), the boot ends; when another ramdisk task is
/// now due (the erase after the in-band firmware check), a boot is armed for it, so the
/// ramdisk's reboot takes that one.
pub fn after_report(tx: &mut dyn Conn, node_id: &str, ttl: Duration, now: OffsetDateTime) -> ApiResult<()> {
    let Some(boot) = store::boots::open(tx, node_id, now)? else { return Ok(()) };
    let (Some(task), Some(node)) = (boot.task, store::nodes::get(tx, node_id)?) else { return Ok(()) };
    let step = boot_step(node.state, store::boot::due(tx, &node)?);
    let still = match step {
        BootStep::Ramdisk(now_due) => now_due == task,
        BootStep::Installer => task == BootTask::Install,
        BootStep::LocalDisk => false,
    };
    if still {
        return Ok(());
    }
    store::boots::end(tx, node_id, &format!("its {task} is over"), now)?;
    if let BootStep::Ramdisk(next) = step {
        let by = format!("{next} after the {task} of {}", boot.id);
        // A virtual-media boot's ISO stays mounted: the ramdisk's reboot takes the next boot
        // with the same claim.
        store::boots::arm_claimed(tx, node_id, &by, boot.run_id.as_deref(), boot.claim_hash.as_deref(), now, ttl)?;
    }
    Ok(())
}
