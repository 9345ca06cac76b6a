//! Measured boot on the boot listener (issue 32). A ramdisk names its TPM's EK and
//! attestation key and gets a one-time challenge: a nonce and a credential (MakeCredential)
//! only the TPM of that EK can open for that key. The node's first challenge pins its EK
//! (with `boot-tpm-ca-file`, only an EK whose certificate chains to a TPM maker's CA the site
//! trusts); a later one from another EK is refused and recorded (`ek-differs`). The answer, a quote of
//! PCRs 0-9 binding the nonce, the opened secret and the ramdisk's own key, with the event
//! log, comes as a signed report; it is verified (`BootEvidence::verify`) and stored, verified
//! or refused with its rule, with an event either way; a commissioning node's first one
//! becomes its baseline in a pool that measures boots (`measured_boot::commissioned`).

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use metal_protocol::boot::ReportReceipt;
use metal_protocol::measurement::{AttestationReport, Challenge, TpmKeys, attestation_key, binding};
use metal_protocol::tpm::{KeyMaterial, PublicKey, attributes};
use metal_protocol::{Envelope, Identity, Role, VerifyingKey};
use rand::RngCore as _;
use serde_json::json;
use sha2::Digest as _;
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::app::App;
use crate::metal::boot::ramdisk::{current_node, node_payload, ramdisk_peer};
use crate::metal::boot::{Peer, claims};
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::boot::AttestationRecord;

/// How long a challenge may be answered: the ramdisk answers within seconds.
const CHALLENGE_TTL: Duration = Duration::from_secs(300);

/// The refusal of an EK other than the one the node registered.
pub const EK_DIFFERS: &str = "ek-differs";

/// `POST /v1/boot/attest/challenge`.
pub async fn challenge(app: &App, peer: &Peer, request: TpmKeys) -> ApiResult<Challenge> {
    let now = app.clock.now();
    let (service, identity, key) = ramdisk_peer(app, peer, now, "ask for a challenge")?;
    let ek = endorsement_key(&request.ek_public)?;
    let ak = attestation_key(&request.ak_public).map_err(|e| ApiError::invalid("akPublic", e.to_string()))?;
    let (mut nonce, mut secret) = ([0u8; 32], [0u8; 32]);
    rand::thread_rng().fill_bytes(&mut nonce);
    rand::thread_rng().fill_bytes(&mut secret);
    let extra_data = hex::encode(binding(&nonce, &secret, key.as_bytes()));
    let ramdisk_key = claims::key_text(&key);
    let id = format!("chl-{}", uuid::Uuid::new_v4().simple());
    let ek_sha256 = hex::encode(sha2::Sha256::digest(&request.ek_public));
    // An EK is pinned only with a certificate that chains to a configured TPM maker's CA,
    // when the site trusts some; otherwise on first use.
    let certificate = match (&request.ek_certificate, service.tpm_cas.is_empty()) {
        (Some(_), true) => "unchecked",
        (None, true) => "none",
        (Some(der), false) => {
            metal_protocol::ekcert::verify(der, &ek, &service.tpm_cas).map_err(|e| {
                warn!(node = %identity.node, reason = %e, "attestation challenge refused: untrusted EK certificate");
                ApiError::Forbidden(format!("the EK certificate is not trusted: {e}"))
            })?;
            "verified"
        }
        (None, false) => {
            warn!(node = %identity.node, "attestation challenge refused: no EK certificate");
            return Err(ApiError::Forbidden(
                "the TPM has no EK certificate, and this site trusts only EKs certified by its TPM CAs".into(),
            ));
        }
    };
    let (node_id, challenge_id) = (identity.node.clone(), id.clone());
    let ak_name = ak.name();
    let issued = app
        .store
        .change(move |tx| {
            let node = current_node(tx, &identity)?;
            let subject = format!("node/{}", node.id);
            let pinned = store::attestations::tpm(tx, &node.id)?;
            if let Some(pinned) = pinned.as_ref().filter(|pinned| pinned.ek_sha256 != ek_sha256) {
                let reason = format!(
                    "the TPM's EK ({ek_sha256}) differs from the EK node {} registered on {} ({})",
                    node.id, pinned.first_seen, pinned.ek_sha256
                );
                let raw = serde_json::to_string(&request).map_err(|e| ApiError::Internal(e.to_string()))?;
                refuse(tx, &identity, &ramdisk_key, None, (EK_DIFFERS, &reason), &raw, now)?;
                return Ok(Err(reason));
            }
            // Made only for the node's own EK (another TPM gets nothing to open), and before
            // a first EK is pinned (one no credential can be made for is not).
            let credential =
                metal_protocol::credential::make_credential(&ek, &ak_name, &secret, &mut rand::thread_rng())
                    .map_err(|e| ApiError::invalid("ekPublic", e.to_string()))?;
            if pinned.is_none() {
                let der = request.ek_certificate.as_deref().map(|der| STANDARD.encode(der));
                let public = STANDARD.encode(&request.ek_public);
                store::attestations::pin(tx, &node.id, &ek_sha256, &public, der.as_deref(), now)?;
                let data = json!({"node": node.id, "ekSha256": ek_sha256, "certificate": certificate});
                store::events::append(tx, "node.tpm.registered", &subject, None, &data, now)?;
            }
            let issued = store::attestations::IssuedChallenge {
                node_id: node.id.clone(),
                identity_generation: node.identity_generation,
                extra_data,
                ramdisk_key,
            };
            store::attestations::issue_challenge(tx, &id, &issued, now, CHALLENGE_TTL)?;
            Ok(Ok(credential))
        })
        .await?;
    let credential = match issued {
        Ok(credential) => credential,
        Err(reason) => {
            warn!(node = %node_id, %reason, "attestation challenge refused");
            return Err(ApiError::Forbidden(reason));
        }
    };
    info!(node = %node_id, challenge = %challenge_id, "attestation challenge issued");
    Ok(Challenge {
        challenge_id,
        nonce: nonce.to_vec(),
        credential_blob: credential.blob,
        encrypted_seed: credential.encrypted_seed,
        expires_at: now + CHALLENGE_TTL,
    })
}

/// The EK a challenge's credential is made for: an RSA restricted decryption key fixed to
/// its TPM (the TCG default EK).
fn endorsement_key(bytes: &[u8]) -> ApiResult<PublicKey> {
    let ek = PublicKey::parse(bytes).map_err(|e| ApiError::invalid("ekPublic", e.to_string()))?;
    let required = attributes::FIXED_TPM | attributes::FIXED_PARENT | attributes::RESTRICTED | attributes::DECRYPT;
    if !matches!(ek.key, KeyMaterial::Rsa { .. }) || !ek.has(required) {
        return Err(ApiError::invalid("ekPublic", "not an RSA endorsement key (fixedTPM, restricted, decrypt)"));
    }
    Ok(ek)
}

/// Records a refused attestation from the ramdisk of `ramdisk_key` (the refusal's code and
/// reason) and raises `node.attestation.refused`.
fn refuse(
    tx: &mut dyn Conn,
    identity: &Identity,
    ramdisk_key: &str,
    challenge_id: Option<&str>,
    (code, reason): (&str, &str),
    raw: &str,
    now: OffsetDateTime,
) -> ApiResult<AttestationRecord> {
    let record = AttestationRecord {
        id: format!("att-{}", uuid::Uuid::new_v4().simple()),
        node_id: identity.node.clone(),
        identity_generation: i64::try_from(identity.generation).unwrap_or_default(),
        challenge_id: challenge_id.map(str::to_owned),
        verified: false,
        code: Some(code.to_owned()),
        reason: Some(reason.to_owned()),
        pcrs: Default::default(),
        log_sha256: None,
        ramdisk_key: Some(ramdisk_key.to_owned()),
        received_at: now,
    };
    store::attestations::record(tx, &record, raw)?;
    let data = json!({"node": record.node_id, "attestation": record.id, "code": code, "reason": reason});
    store::events::append(tx, "node.attestation.refused", &format!("node/{}", record.node_id), None, &data, now)?;
    Ok(record)
}

/// An attestation report: the challenge taken (once), the evidence verified against it.
pub(super) fn report(
    tx: &mut dyn Conn,
    identity: &Identity,
    key: &VerifyingKey,
    envelope: &Envelope,
    now: OffsetDateTime,
) -> ApiResult<ReportReceipt> {
    let (node, report): (_, AttestationReport) =
        node_payload(tx, identity, key, envelope, &[Role::Ramdisk], |r: &AttestationReport| &r.node_id)?;
    let raw = serde_json::to_string(envelope).map_err(|e| ApiError::Internal(e.to_string()))?;
    let checked = match store::attestations::take_challenge(tx, &report.challenge_id, now) {
        Err(ApiError::Forbidden(reason)) => Err(("challenge-refused", reason)),
        Err(other) => return Err(other),
        Ok(challenge) if challenge.node_id != node.id || challenge.identity_generation != node.identity_generation => {
            Err((
                "wrong-challenge",
                format!("challenge {} was not issued to this node's current identity", report.challenge_id),
            ))
        }
        // Only the ramdisk that asked may answer: the quote binds its key.
        Ok(challenge) if challenge.ramdisk_key != claims::key_text(key) => Err((
            "wrong-challenge",
            format!("challenge {} was issued to another ramdisk key than the report's", report.challenge_id),
        )),
        Ok(challenge) => {
            let extra_data = hex::decode(&challenge.extra_data).map_err(|e| ApiError::Internal(e.to_string()))?;
            report.evidence.verify(&extra_data).map_err(|refusal| (refusal.code(), refusal.to_string()))
        }
    };
    let verified = match checked {
        Ok(verified) => verified,
        Err((code, reason)) => {
            let challenge = Some(report.challenge_id.as_str());
            refuse(tx, identity, &claims::key_text(key), challenge, (code, &reason), &raw, now)?;
            return Ok(ReportReceipt { accepted: false, reason: Some(format!("{code}: {reason}")) });
        }
    };
    let record = AttestationRecord {
        id: format!("att-{}", uuid::Uuid::new_v4().simple()),
        node_id: node.id.clone(),
        identity_generation: node.identity_generation,
        challenge_id: Some(report.challenge_id.clone()),
        verified: true,
        code: None,
        reason: None,
        pcrs: verified.pcrs.iter().map(|(pcr, value)| (*pcr, hex::encode(value))).collect(),
        log_sha256: Some(hex::encode(sha2::Sha256::digest(&report.evidence.event_log))),
        ramdisk_key: Some(claims::key_text(key)),
        received_at: now,
    };
    store::attestations::record(tx, &record, &raw)?;
    let data = json!({"node": node.id, "attestation": record.id, "events": verified.log.events.len()});
    store::events::append(tx, "node.attestation.verified", &format!("node/{}", node.id), None, &data, now)?;
    crate::metal::measured_boot::commissioned(tx, &node, &record, now)?;
    Ok(ReportReceipt { accepted: true, reason: None })
}
