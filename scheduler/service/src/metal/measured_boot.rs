//! Measured-boot baselines and the teardown's verdict (issue 32). A node's baseline is the
//! quoted PCRs of one verified attestation, learned in platform custody (the commissioning
//! ramdisk's attestation when the node has none, a teardown in a `learn` pool) or approved
//! by an operator. The teardown's `attest` step takes the attestation of the erase boot (the
//! ramdisk key whose wipe report it accepted) and compares the pool's PCRs with the active
//! baseline; a difference names the PCR and the first event of its log that is not the
//! baseline's, from both attestations' event logs.

use metal_protocol::Envelope;
use metal_protocol::eventlog::{EventLog, HashAlgorithm};
use metal_protocol::measurement::AttestationReport;
use serde_json::json;
use time::OffsetDateTime;

use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::boot::{AttestationRecord, BaselineComparison, BaselineState, BootBaseline, MeasuredEvent};
use metal_types::model::node::{Node, NodeState};
use metal_types::model::pool::{MeasuredBootMode, MeasuredBootPolicy};

/// `learned_by` of a baseline learned from the commissioning ramdisk's attestation.
pub const COMMISSIONING: &str = "commissioning";
/// `learned_by` of a baseline a teardown in a `learn` pool recorded.
pub const LEARN: &str = "learn";

/// Makes verified `attestation` the node's active baseline (the one it replaces obsolete)
/// and raises `node.boot-baseline.learned` (with `why`, when it replaced a differing one).
pub fn learn(
    tx: &mut dyn Conn,
    attestation: &AttestationRecord,
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
    let baseline = BootBaseline {
        id: format!("mbb-{}", uuid::Uuid::new_v4().simple()),
        node_id: attestation.node_id.clone(),
        attestation_id: attestation.id.clone(),
        pcrs: attestation.pcrs.clone(),
        state: BaselineState::Active,
        learned_by: learned_by.to_owned(),
        created_at: now,
        replaced_at: None,
    };
    let replaced = store::attestations::active_baseline(tx, &baseline.node_id)?;
    store::attestations::learn(tx, &baseline)?;
    let data = json!({"node": baseline.node_id, "baseline": baseline.id, "attestation": attestation.id,
                      "learnedBy": learned_by, "replaced": replaced.map(|b| b.id), "why": why});
    store::events::append(tx, "node.boot-baseline.learned", &format!("node/{}", baseline.node_id), None, &data, now)?;
    Ok(baseline)
}

/// After a verified attestation: a commissioning node in a pool that measures its boot, and
/// with no baseline yet, learns this one (the machine is in platform custody).
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
    if mode == MeasuredBootMode::Off || store::attestations::active_baseline(tx, &node.id)?.is_some() {
        return Ok(());
    }
    learn(tx, attestation, COMMISSIONING, None, now).map(drop)
}

/// What the `attest` step found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The compared PCRs are the baseline's.
    Matches {
        /// The erase boot's attestation.
        attestation: String,
        /// The baseline it matched.
        baseline: String,
    },
    /// A `learn` pool: this attestation is to become the baseline (there was none, or it
    /// differs as `difference` says).
    Learn {
        /// The erase boot's attestation.
        attestation: Box<AttestationRecord>,
        /// How it differs from the baseline it replaces.
        difference: Option<String>,
    },
    /// The machine's boot is not proven: the reason the node is quarantined with.
    Refused(String),
}

/// The verdict on the erase boot (the ramdisk of `ramdisk_key`) of `node`'s current
/// identity generation under `policy` (whose mode is not off).
pub fn judge(tx: &mut dyn Conn, node: &Node, policy: &MeasuredBootPolicy, ramdisk_key: &str) -> ApiResult<Verdict> {
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
    let Some(baseline) = store::attestations::active_baseline(tx, &node.id)? else {
        if learning {
            return Ok(Verdict::Learn { attestation: Box::new(attestation), difference: None });
        }
        return refused(format!(
            "node {} has no baseline to compare attestation {} with (approve one known good: metalctl attest \
             approve {} ATTESTATION)",
            node.id, attestation.id, node.id
        ));
    };
    let Some(difference) = difference(tx, &node.id, &attestation, &baseline, &policy.pcrs)? else {
        return Ok(Verdict::Matches { attestation: attestation.id, baseline: baseline.id });
    };
    if learning {
        return Ok(Verdict::Learn { attestation: Box::new(attestation), difference: Some(difference) });
    }
    refused(difference)
}

/// How verified `attestation` departs from `baseline` on `pcrs`: "PCR n differs (event k,
/// TYPE) from baseline B", the first compared PCR that differs found again in the two event
/// logs (which replayed to their quotes) to name the first event that is not the baseline's
/// (just "PCR n differs" when a log cannot be read back); `None` when they agree.
pub fn difference(
    tx: &mut dyn Conn,
    node_id: &str,
    attestation: &AttestationRecord,
    baseline: &BootBaseline,
    pcrs: &[u32],
) -> ApiResult<Option<String>> {
    let Some(pcr) = pcrs.iter().copied().find(|p| attestation.pcrs.get(p) != baseline.pcrs.get(p)) else {
        return Ok(None);
    };
    let mut log = |id: &str| -> ApiResult<Option<EventLog>> {
        Ok(store::attestations::get(tx, node_id, id)?.and_then(|(_, envelope)| event_log(&envelope).ok()))
    };
    let (ours, theirs) = (log(&attestation.id)?, log(&baseline.attestation_id)?);
    let found = ours.zip(theirs).and_then(|(ours, theirs)| ours.first_difference(&theirs, &[pcr]).ok().flatten());
    let what = found.map_or_else(|| format!("PCR {pcr} differs"), |difference| difference.to_string());
    Ok(Some(format!("{what} from baseline {}", baseline.id)))
}

/// What a stored attestation says was measured, and how it compares now with the node's
/// active baseline on its pool's PCRs (the default ones outside a measuring pool).
pub fn describe(
    tx: &mut dyn Conn,
    node: &Node,
    attestation: &AttestationRecord,
    envelope: &str,
) -> ApiResult<(Vec<MeasuredEvent>, Option<BaselineComparison>)> {
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
    let baseline = store::attestations::active_baseline(tx, &node.id)?;
    let Some(baseline) = baseline.filter(|_| attestation.verified) else { return Ok((events, None)) };
    let pool = store::capacity::pool_of(tx, node)?;
    let pcrs =
        pool.and_then(|p| p.policy.measured_boot).map_or_else(MeasuredBootPolicy::default_pcrs, |policy| policy.pcrs);
    let difference = difference(tx, &node.id, attestation, &baseline, &pcrs)?;
    Ok((events, Some(BaselineComparison { baseline_id: baseline.id, pcrs, difference })))
}

/// The event log of a stored attestation envelope.
fn event_log(envelope: &str) -> Result<EventLog, String> {
    let envelope: Envelope = serde_json::from_str(envelope).map_err(|e| e.to_string())?;
    let bytes = envelope.payload_bytes().map_err(|e| e.to_string())?;
    let report: AttestationReport = serde_json::from_slice(&bytes).map_err(|e| e.to_string())?;
    EventLog::parse(&report.evidence.event_log).map_err(|e| e.to_string())
}

/// An operator's approval: verified attestation `attestation_id` of `node_id` becomes its
/// baseline, `by` (a credential) on record.
pub fn approve(
    tx: &mut dyn Conn,
    node_id: &str,
    attestation_id: &str,
    by: &str,
    now: OffsetDateTime,
) -> ApiResult<BootBaseline> {
    let (attestation, _) = store::attestations::get(tx, node_id, attestation_id)?
        .ok_or_else(|| ApiError::NotFound(format!("attestation {attestation_id} of node {node_id}")))?;
    learn(tx, &attestation, &format!("approved by {by}"), None, now)
}
