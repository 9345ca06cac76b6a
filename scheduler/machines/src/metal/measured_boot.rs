//! Measured-boot baselines and the teardown's verdict (issue 32). A baseline is the quoted
//! PCRs of one verified attestation, learned in platform custody (the commissioning ramdisk's
//! attestation, a teardown in a `learn` pool) or approved by an operator. It is a node's own
//! (its boot entries, PCR 1), or, in a pool that names a `hardwareProfile`, the profile's at
//! the firmware the pool's `firmwareBaseline` names (the firmware's own PCRs), so a firmware
//! is qualified once for every machine of the profile and a move to firmware no machine was
//! qualified on fails closed. The teardown's `attest` step takes the attestation of the erase
//! boot (the ramdisk key whose wipe report it accepted) and compares each part of the pool's
//! PCRs with its baseline; a difference names the PCR and the first event of its log that is
//! not the baseline's, from both attestations' event logs.

use metal_protocol::Envelope;
use metal_protocol::eventlog::{EventLog, HashAlgorithm};
use metal_protocol::measurement::AttestationReport;
use serde_json::json;
use time::OffsetDateTime;

use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::boot::{
    AttestationRecord, BaselineComparison, BaselineKey, BaselineScope, BaselineState, BootBaseline, MeasuredEvent,
};
use metal_types::model::node::{Node, NodeState};
use metal_types::model::pool::{MeasuredBootMode, MeasuredBootPolicy, Pool};

/// `learned_by` of a baseline learned from the commissioning ramdisk's attestation.
pub const COMMISSIONING: &str = "commissioning";
/// `learned_by` of a baseline a teardown in a `learn` pool recorded.
pub const LEARN: &str = "learn";

/// The hardware profile's key in `pool`, at the firmware its baseline names
/// (`component=version,...`); none when the pool names no profile.
fn profile_key(pool: &Pool) -> Option<BaselineKey> {
    let hardware_profile = pool.policy.hardware_profile.clone()?;
    let firmware = pool.policy.firmware_baseline.iter().flatten().map(|(c, v)| format!("{c}={v}"));
    Some(BaselineKey::Profile { hardware_profile, firmware: firmware.collect::<Vec<_>>().join(",") })
}

/// The node's own key.
fn node_key(node: &Node) -> BaselineKey {
    BaselineKey::Node(node.id.clone())
}

/// The parts the pool's PCRs are compared in: each baseline's key and its PCRs (the node's
/// own for `nodePcrs` and the profile's for the rest, or the node's for all without a
/// profile); parts with no PCR are left out.
fn parts(node: &Node, pool: Option<&Pool>, policy: &MeasuredBootPolicy) -> Vec<(BaselineKey, Vec<u32>)> {
    let Some(profile) = pool.and_then(profile_key) else { return vec![(node_key(node), policy.pcrs.clone())] };
    let (own, profiles): (Vec<u32>, Vec<u32>) = policy.pcrs.iter().partition(|pcr| policy.node_pcrs.contains(pcr));
    [(node_key(node), own), (profile, profiles)].into_iter().filter(|(_, pcrs)| !pcrs.is_empty()).collect()
}

/// Makes verified `attestation` the active baseline of `key` (the one it replaces obsolete)
/// and raises `node.boot-baseline.learned` (with `why`, when it replaced a differing one).
pub fn learn(
    tx: &mut dyn Conn,
    attestation: &AttestationRecord,
    key: &BaselineKey,
    learned_by: &str,
    why: Option<&str>,
    now: OffsetDateTime,
) -> ApiResult<BootBaseline> {
    if !attestation.verified {
        return Err(ApiError::Conflict(format!(
            "attestation {} was refused ({}); only a verified quote can be a baseline",
            attestation.id,
            attestation.code.as_deref().unwrap_or("refused")
        )));
    }
    let (scope, hardware_profile, firmware) = match key {
        BaselineKey::Node(_) => (BaselineScope::Node, None, None),
        BaselineKey::Profile { hardware_profile, firmware } => {
            (BaselineScope::Profile, Some(hardware_profile.clone()), Some(firmware.clone()))
        }
    };
    let baseline = BootBaseline {
        id: format!("mbb-{}", uuid::Uuid::new_v4().simple()),
        scope,
        node_id: attestation.node_id.clone(),
        hardware_profile,
        firmware,
        attestation_id: attestation.id.clone(),
        pcrs: attestation.pcrs.clone(),
        state: BaselineState::Active,
        learned_by: learned_by.to_owned(),
        created_at: now,
        replaced_at: None,
        state_reason: None,
    };
    let replaced = store::attestations::active_baseline(tx, key)?;
    store::attestations::learn(tx, &baseline)?;
    let data = json!({"node": baseline.node_id, "baseline": baseline.id, "scope": scope, "for": key.to_string(),
                      "attestation": attestation.id, "learnedBy": learned_by, "replaced": replaced.map(|b| b.id),
                      "why": why});
    store::events::append(tx, "node.boot-baseline.learned", &format!("node/{}", baseline.node_id), None, &data, now)?;
    Ok(baseline)
}

/// After a verified attestation: a commissioning node in a pool that measures its boot
/// learns it as its own baseline when it has none (the machine is in platform custody), and,
/// in a `learn` pool, as its profile's at this firmware when that has none either.
pub fn commissioned(
    tx: &mut dyn Conn,
    node: &Node,
    attestation: &AttestationRecord,
    now: OffsetDateTime,
) -> ApiResult<()> {
    if node.state != NodeState::Commissioning {
        return Ok(());
    }
    let pool = store::capacity::pool_of(tx, node)?;
    let mode = MeasuredBootPolicy::mode_of(pool.as_ref().and_then(|p| p.policy.measured_boot.as_ref()));
    if mode == MeasuredBootMode::Off {
        return Ok(());
    }
    let policy = pool.as_ref().and_then(|p| p.policy.measured_boot.clone()).unwrap_or_else(default_policy);
    for (key, pcrs) in parts(node, pool.as_ref(), &policy) {
        let learns = matches!(key, BaselineKey::Node(_)) || mode == MeasuredBootMode::Learn;
        if !learns {
            continue;
        }
        let found = store::attestations::baselines(tx, &key)?;
        if active_among(&found).is_some() {
            continue;
        }
        // Measurements an operator revoked are not learned, even in platform custody: the
        // teardown will refuse them with the revocation's reason.
        if let Some(revoked) = revoked_among(&found, attestation, &pcrs) {
            tracing::warn!(node = %node.id, baseline = %revoked.id, "commissioning quote repeats a revoked baseline");
            continue;
        }
        learn(tx, attestation, &key, COMMISSIONING, None, now)?;
    }
    Ok(())
}

/// In a pool that enforces measured boot, only a ramdisk that quoted the node's TPM this
/// boot (a verified attestation from its key, at the node's identity generation) is served
/// a deploy's plan and image: a host that took the boot's token without the machine's TPM
/// gets nothing of the tenant's. Elsewhere, nothing to check.
pub fn require_quote(tx: &mut dyn Conn, node: &Node, ramdisk_key: &str) -> ApiResult<()> {
    let pool = store::capacity::pool_of(tx, node)?;
    if MeasuredBootPolicy::mode_of(pool.as_ref().and_then(|p| p.policy.measured_boot.as_ref()))
        != MeasuredBootMode::Enforce
    {
        return Ok(());
    }
    let quoted = store::attestations::by_ramdisk(tx, &node.id, ramdisk_key)?
        .iter()
        .any(|a| a.verified && a.identity_generation == node.identity_generation);
    if quoted {
        return Ok(());
    }
    Err(ApiError::Forbidden(format!(
        "node {}'s pool enforces measured boot, and this ramdisk has sent no verified quote of the node's TPM",
        node.id
    )))
}

/// What the `attest` step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every part's PCRs are its baseline's.
    Matches {
        /// The erase boot's attestation.
        attestation: String,
        /// The baselines it matched.
        baselines: Vec<String>,
    },
    /// A `learn` pool: this attestation is to become the baseline of some parts (there was
    /// none, or it differs as said).
    Learn {
        /// The erase boot's attestation.
        attestation: Box<AttestationRecord>,
        /// Each part to learn, and how it differs from the baseline it replaces.
        parts: Vec<(BaselineKey, Option<String>)>,
    },
    /// The machine's boot is not proven: the reason the node is quarantined with.
    Refused(String),
}

/// The verdict on the erase boot (the ramdisk of `ramdisk_key`) of `node`'s current
/// identity generation under its pool's `policy` (whose mode is not off).
pub fn judge(
    tx: &mut dyn Conn,
    node: &Node,
    pool: Option<&Pool>,
    policy: &MeasuredBootPolicy,
    ramdisk_key: &str,
) -> ApiResult<Verdict> {
    let refused = |why: String| Ok(Verdict::Refused(format!("measured-boot: {why}")));
    let sent: Vec<_> = store::attestations::by_ramdisk(tx, &node.id, ramdisk_key)?
        .into_iter()
        .filter(|a| a.identity_generation == node.identity_generation)
        .collect();
    // One refusal is enough: another TPM (EK differs), a replayed or forged answer.
    if let Some(bad) = sent.iter().find(|a| !a.verified) {
        let code = bad.code.as_deref().unwrap_or("refused");
        return refused(format!(
            "attestation {} refused: {code}: {}",
            bad.id,
            bad.reason.as_deref().unwrap_or_default()
        ));
    }
    let Some(attestation) = sent.into_iter().last() else {
        return refused(format!(
            "the erase boot sent no attestation: node {} has no usable TPM, or its ramdisk did not quote it",
            node.id
        ));
    };
    let learning = policy.mode == MeasuredBootMode::Learn;
    let (mut matched, mut to_learn) = (Vec::new(), Vec::new());
    for (key, pcrs) in parts(node, pool, policy) {
        let found = store::attestations::baselines(tx, &key)?;
        if let Some(revoked) = revoked_among(&found, &attestation, &pcrs) {
            return refused(repeats_revoked(&attestation, revoked, &pcrs));
        }
        let Some(baseline) = active_among(&found).cloned() else {
            if learning {
                to_learn.push((key, None));
                continue;
            }
            let (how, scope) = match key {
                BaselineKey::Node(_) => ("", ""),
                BaselineKey::Profile { .. } => (" --scope profile", " (qualify the firmware on a reference node)"),
            };
            return refused(format!(
                "no baseline for {key} to compare attestation {} with{scope}: approve one known good with metalctl \
                 attest approve {} ATTESTATION{how}",
                attestation.id, node.id
            ));
        };
        match difference(tx, &attestation, &baseline, &pcrs)? {
            None => matched.push(baseline.id),
            Some(difference) if learning => to_learn.push((key, Some(difference))),
            Some(difference) => return refused(difference),
        }
    }
    if to_learn.is_empty() {
        return Ok(Verdict::Matches { attestation: attestation.id, baselines: matched });
    }
    Ok(Verdict::Learn { attestation: Box::new(attestation), parts: to_learn })
}

/// How verified `attestation` departs from `baseline` on `pcrs`: "PCR n differs (event k,
/// TYPE) from baseline B", the first compared PCR that differs found again in the two event
/// logs (which replayed to their quotes) to name the first event that is not the baseline's
/// (just "PCR n differs" when a log cannot be read back); `None` when they agree.
pub fn difference(
    tx: &mut dyn Conn,
    attestation: &AttestationRecord,
    baseline: &BootBaseline,
    pcrs: &[u32],
) -> ApiResult<Option<String>> {
    let Some(pcr) = pcrs.iter().copied().find(|p| attestation.pcrs.get(p) != baseline.pcrs.get(p)) else {
        return Ok(None);
    };
    let mut log = |id: &str| -> ApiResult<Option<EventLog>> {
        Ok(store::attestations::envelope(tx, id)?.and_then(|envelope| event_log(&envelope).ok()))
    };
    let (ours, theirs) = (log(&attestation.id)?, log(&baseline.attestation_id)?);
    let found = ours.zip(theirs).and_then(|(ours, theirs)| ours.first_difference(&theirs, &[pcr]).ok().flatten());
    let what = found.map_or_else(|| format!("PCR {pcr} differs"), |difference| difference.to_string());
    Ok(Some(format!("{what} from baseline {}", baseline.id)))
}

/// The node's baselines, newest first: its own, and its hardware profile's at the firmware
/// its pool names.
pub fn baselines_of(tx: &mut dyn Conn, node: &Node) -> ApiResult<Vec<BootBaseline>> {
    let pool = store::capacity::pool_of(tx, node)?;
    let mut found = store::attestations::baselines(tx, &node_key(node))?;
    if let Some(profile) = pool.as_ref().and_then(profile_key) {
        found.extend(store::attestations::baselines(tx, &profile)?);
    }
    found.sort_by(|a, b| b.created_at.cmp(&a.created_at).then_with(|| b.id.cmp(&a.id)));
    Ok(found)
}

/// What a stored attestation says was measured, and how it compares now with the node's
/// active baselines on its pool's PCRs (the default ones outside a measuring pool).
pub fn describe(
    tx: &mut dyn Conn,
    node: &Node,
    attestation: &AttestationRecord,
    envelope: &str,
) -> ApiResult<(Vec<MeasuredEvent>, Vec<BaselineComparison>)> {
    let events = event_log(envelope)
        .map(|log| {
            log.events
                .iter()
                .map(|e| MeasuredEvent {
                    number: e.number,
                    pcr: e.pcr,
                    event_type: e.type_name(),
                    sha256: e.digest(HashAlgorithm::SHA256).map(hex::encode),
                })
                .collect()
        })
        .unwrap_or_default();
    if !attestation.verified {
        return Ok((events, Vec::new()));
    }
    let pool = store::capacity::pool_of(tx, node)?;
    let policy = pool.as_ref().and_then(|p| p.policy.measured_boot.clone()).unwrap_or_else(default_policy);
    let mut comparisons = Vec::new();
    for (key, pcrs) in parts(node, pool.as_ref(), &policy) {
        if let Some(baseline) = store::attestations::active_baseline(tx, &key)? {
            let difference = difference(tx, attestation, &baseline, &pcrs)?;
            comparisons.push(BaselineComparison { baseline_id: baseline.id, scope: baseline.scope, pcrs, difference });
        }
    }
    Ok((events, comparisons))
}

/// The PCRs compared outside a measuring pool (to show an attestation against baselines).
fn default_policy() -> MeasuredBootPolicy {
    MeasuredBootPolicy {
        mode: MeasuredBootMode::Off,
        pcrs: MeasuredBootPolicy::default_pcrs(),
        node_pcrs: MeasuredBootPolicy::default_node_pcrs(),
    }
}

/// Of one key's `baselines`, the revoked one whose `pcrs` verified `attestation` repeats, if
/// any.
fn revoked_among<'a>(
    baselines: &'a [BootBaseline],
    attestation: &AttestationRecord,
    pcrs: &[u32],
) -> Option<&'a BootBaseline> {
    if pcrs.is_empty() {
        return None;
    }
    baselines
        .iter()
        .find(|b| b.state == BaselineState::Revoked && pcrs.iter().all(|p| attestation.pcrs.get(p) == b.pcrs.get(p)))
}

/// Of one key's `baselines`, the active one.
fn active_among(baselines: &[BootBaseline]) -> Option<&BootBaseline> {
    baselines.iter().find(|b| b.state == BaselineState::Active)
}

fn repeats_revoked(attestation: &AttestationRecord, revoked: &BootBaseline, pcrs: &[u32]) -> String {
    let list: Vec<String> = pcrs.iter().map(u32::to_string).collect();
    format!(
        "attestation {} repeats revoked baseline {} on PCRs {} ({})",
        attestation.id,
        revoked.id,
        list.join(","),
        revoked.state_reason.as_deref().unwrap_or("revoked")
    )
}

/// An operator ends baseline `id` of `node` (its own or its profile's): `retired` (only the
/// active one: its key has none until one is learned or approved) or `revoked` (any not yet
/// revoked: its measurements are refused from now on, and never learned again).
pub fn end_baseline(
    tx: &mut dyn Conn,
    node: &Node,
    id: &str,
    state: BaselineState,
    by: &str,
    reason: &str,
    now: OffsetDateTime,
) -> ApiResult<BootBaseline> {
    let baseline = baselines_of(tx, node)?
        .into_iter()
        .find(|b| b.id == id)
        .ok_or_else(|| ApiError::NotFound(format!("baseline {id} of node {}", node.id)))?;
    let (from, verb): (&[BaselineState], &str) = match state {
        BaselineState::Retired => (&[BaselineState::Active], "retired"),
        BaselineState::Revoked => {
            (&[BaselineState::Active, BaselineState::Obsolete, BaselineState::Retired], "revoked")
        }
        other => return Err(ApiError::Internal(format!("a baseline is not ended {}", other.as_str()))),
    };
    let recorded = format!("{verb} by {by}: {}", reason.trim());
    if !store::attestations::end_baseline(tx, id, from, state, &recorded, now)? {
        return Err(ApiError::Conflict(format!(
            "baseline {id} is {}; only {} can be {verb}",
            baseline.state.as_str(),
            from.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(" or ")
        )));
    }
    let data = json!({"node": node.id, "baseline": id, "scope": baseline.scope, "for": baseline.key().to_string(),
                      "was": baseline.state, "by": by, "reason": reason.trim()});
    store::events::append(tx, &format!("node.boot-baseline.{verb}"), &format!("node/{}", node.id), None, &data, now)?;
    Ok(BootBaseline {
        state,
        state_reason: Some(recorded),
        replaced_at: baseline.replaced_at.or(Some(now)),
        ..baseline
    })
}

/// The event log of a stored attestation envelope.
fn event_log(envelope: &str) -> Result<EventLog, String> {
    let envelope: Envelope = serde_json::from_str(envelope).map_err(|e| e.to_string())?;
    let bytes = envelope.payload_bytes().map_err(|e| e.to_string())?;
    let report: AttestationReport = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    EventLog::parse(&report.evidence.event_log).map_err(|e| e.to_string())
}

/// An operator's approval: verified attestation `attestation_id` of `node` becomes its own
/// baseline, or its hardware profile's at the firmware its pool names, `by` (a credential)
/// on record.
pub fn approve(
    tx: &mut dyn Conn,
    node: &Node,
    attestation_id: &str,
    scope: BaselineScope,
    by: &str,
    now: OffsetDateTime,
) -> ApiResult<BootBaseline> {
    let (attestation, _) = store::attestations::get(tx, &node.id, attestation_id)?
        .ok_or_else(|| ApiError::NotFound(format!("attestation {attestation_id} of node {}", node.id)))?;
    let key = match scope {
        BaselineScope::Node => node_key(node),
        BaselineScope::Profile => {
            store::capacity::pool_of(tx, node)?.as_ref().and_then(profile_key).ok_or_else(|| {
                ApiError::invalid(
                    "scope",
                    format!("node {}'s pool names no hardwareProfile to qualify firmware for", node.id),
                )
            })?
        }
    };
    let pool = store::capacity::pool_of(tx, node)?;
    let policy = pool.as_ref().and_then(|p| p.policy.measured_boot.clone()).unwrap_or_else(default_policy);
    let pcrs = parts(node, pool.as_ref(), &policy).into_iter().find(|(k, _)| *k == key).map(|(_, p)| p);
    let pcrs = pcrs.unwrap_or_default();
    if let Some(revoked) = revoked_among(&store::attestations::baselines(tx, &key)?, &attestation, &pcrs) {
        return Err(ApiError::Conflict(repeats_revoked(&attestation, revoked, &pcrs)));
    }
    learn(tx, &attestation, &key, &format!("approved by {by}"), None, now)
}
