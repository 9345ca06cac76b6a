//! Admin views of what the boot service stored (a node's platform inventory, its wipe
//! reports and attestations) and the deploy plan a deploying ramdisk will fetch.

use axum::extract::State;
use axum::response::Response;
use metal_types::page::PageQuery;

use crate::paging::{Paging, node_rows};

use crate::ApiPath;
use metal_protocol::DeployPlan;

use crate::AppState;
use crate::{ApiJson, Caller};
use metal_machines::metal::measured_boot;
use metal_store as store;
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::boot::{
    AttestationDetail, AttestationRecord, BaselineApproval, BaselineEnd, BaselineState, BootBaseline,
    FirmwareCheckRecord, NodeBoot, NodeInventory, SignerCertificate, WipeReportDetail, WipeReportRecord,
};

/// The node's platform inventory (its last commissioning report).
#[utoipa::path(get, path = "/v1/nodes/{id}/inventory", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = NodeInventory), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_inventory(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<NodeInventory>> {
    caller.admin(&format!("node {id}"))?;
    let what = format!("inventory of node {id} (commission it first)");
    let found = app.store.read(move |tx| store::boot::get_inventory(tx, &id)).await?;
    found.map(ApiJson).ok_or(ApiError::NotFound(what))
}

/// Every wipe report received for the node, accepted or refused with its reason.
#[utoipa::path(get, path = "/v1/nodes/{id}/wipe-reports", params(("id" = String, Path, description = "node id"), PageQuery),
    responses((status = 200, body = Vec<WipeReportRecord>), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn list_wipe_reports(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    paging: Paging,
) -> ApiResult<Response> {
    node_rows(&app, &caller, id, &store::boot::WIPE_REPORTS, paging).await
}

/// Every attestation received for the node (measured boot): a TPM quote of its boot PCRs
/// verified against its one-time challenge and the node's pinned EK, with the quoted PCRs,
/// or refused with the rule it broke (`ek-differs`, `wrong-challenge`, `log-does-not-replay`).
#[utoipa::path(get, path = "/v1/nodes/{id}/attestations", params(("id" = String, Path, description = "node id"), PageQuery),
    responses((status = 200, body = Vec<AttestationRecord>), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn list_attestations(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    paging: Paging,
) -> ApiResult<Response> {
    node_rows(&app, &caller, id, &store::attestations::ATTESTATIONS, paging).await
}

/// The node's measured-boot baselines, newest first: its own and its hardware profile's at
/// the firmware its pool names (the active ones its teardowns compare their TPM quote with,
/// and those they replaced, obsolete), each with how it was learned.
#[utoipa::path(get, path = "/v1/nodes/{id}/boot-baselines", params(("id" = String, Path, description = "node id")),
    responses((status = 200, body = Vec<BootBaseline>), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn list_baselines(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<ApiJson<Vec<BootBaseline>>> {
    caller.admin(&format!("node {id}"))?;
    let what = format!("node {id}");
    let baselines = app
        .store
        .read(move |tx| {
            let node = store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            measured_boot::baselines_of(tx, &node)
        })
        .await?;
    Ok(ApiJson(baselines))
}

/// Approves a verified attestation of the node as its own baseline, or (`scope: profile`) as
/// its hardware profile's at the firmware its pool names, qualifying that firmware for every
/// machine of the profile; the one it replaces becomes obsolete. For a machine known good
/// whose firmware changed on purpose, or one commissioned before its pool measured boots.
/// The approving credential is on record.
#[utoipa::path(post, path = "/v1/nodes/{id}/boot-baselines", params(("id" = String, Path, description = "node id")),
    request_body = BaselineApproval,
    responses((status = 201, body = BootBaseline), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, description = "the attestation was refused", body = metal_types::error::ErrorBody),
        (status = 422, description = "scope profile, and the node's pool names no hardwareProfile",
            body = metal_types::error::ErrorBody)))]
pub async fn approve_baseline(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(approval): ApiJson<BaselineApproval>,
) -> ApiResult<(axum::http::StatusCode, ApiJson<BootBaseline>)> {
    caller.admin(&format!("node {id}"))?;
    let (now, by) = (app.clock.now(), format!("credential {}", caller.0.id));
    let what = format!("node {id}");
    let baseline = app
        .store
        .write(move |tx| {
            let node = store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            measured_boot::approve(tx, &node, &approval.attestation_id, approval.scope, &by, now)
        })
        .await?;
    Ok((axum::http::StatusCode::CREATED, ApiJson(baseline)))
}

/// Retires the node's active baseline (its own or its profile's): its teardowns compare with
/// nothing for that part until a baseline is learned (a `learn` pool) or approved, so an
/// `enforce` pool quarantines them meanwhile. For a firmware or boot configuration withdrawn
/// on purpose. Who retired it and why are on record.
#[utoipa::path(post, path = "/v1/nodes/{id}/boot-baselines/{baseline}/retire",
    params(("id" = String, Path, description = "node id"), ("baseline" = String, Path, description = "baseline id")),
    request_body = BaselineEnd,
    responses((status = 200, body = BootBaseline), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, description = "the baseline is not active", body = metal_types::error::ErrorBody),
        (status = 422, description = "no reason given", body = metal_types::error::ErrorBody)))]
pub async fn retire_baseline(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, baseline)): ApiPath<(String, String)>,
    ApiJson(end): ApiJson<BaselineEnd>,
) -> ApiResult<ApiJson<BootBaseline>> {
    end_baseline(app, caller, id, baseline, BaselineState::Retired, end).await
}

/// Revokes a baseline of the node (active, obsolete or retired): its measurements are known
/// bad, so a quote that repeats them on the compared PCRs is refused in every mode (the
/// teardown quarantines, a `learn` pool does not learn it, commissioning and approval do not
/// take it). For firmware found vulnerable or tampered with. Who revoked it and why are on
/// record.
#[utoipa::path(post, path = "/v1/nodes/{id}/boot-baselines/{baseline}/revoke",
    params(("id" = String, Path, description = "node id"), ("baseline" = String, Path, description = "baseline id")),
    request_body = BaselineEnd,
    responses((status = 200, body = BootBaseline), (status = 404, body = metal_types::error::ErrorBody),
        (status = 409, description = "the baseline is already revoked", body = metal_types::error::ErrorBody),
        (status = 422, description = "no reason given", body = metal_types::error::ErrorBody)))]
pub async fn revoke_baseline(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, baseline)): ApiPath<(String, String)>,
    ApiJson(end): ApiJson<BaselineEnd>,
) -> ApiResult<ApiJson<BootBaseline>> {
    end_baseline(app, caller, id, baseline, BaselineState::Revoked, end).await
}

async fn end_baseline(
    app: AppState,
    caller: Caller,
    id: String,
    baseline: String,
    state: BaselineState,
    end: BaselineEnd,
) -> ApiResult<ApiJson<BootBaseline>> {
    caller.admin(&format!("node {id}"))?;
    end.validate()?;
    let (now, by) = (app.clock.now(), format!("credential {}", caller.0.id));
    let what = format!("node {id}");
    let ended = app
        .store
        .write(move |tx| {
            let node = store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            measured_boot::end_baseline(tx, &node, &baseline, state, &by, &end.reason, now)
        })
        .await?;
    Ok(ApiJson(ended))
}

/// The boots the scheduler started for the node, newest first: who started each, which
/// task its one token went to and to which client, where the ramdisk joined from, and why
/// it ended (its task over, superseded, the node moved, contested by a second host).
#[utoipa::path(get, path = "/v1/nodes/{id}/boots", params(("id" = String, Path, description = "node id"), PageQuery),
    responses((status = 200, body = Vec<NodeBoot>), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn list_boots(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    paging: Paging,
) -> ApiResult<Response> {
    node_rows(&app, &caller, id, &store::boots::BOOTS, paging).await
}

/// Starts a boot by hand, for a machine powered on by hand (no BMC): its next network boot
/// may take one ramdisk token, within the boot token's time. A boot through the BMC
/// (`POST /v1/nodes/{id}/boot`, network or CD) starts one itself.
#[utoipa::path(post, path = "/v1/nodes/{id}/boots", params(("id" = String, Path, description = "node id")),
    responses((status = 201, body = NodeBoot), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn arm_boot(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<(axum::http::StatusCode, ApiJson<NodeBoot>)> {
    caller.admin(&format!("node {id}"))?;
    let (ttl, now, by) = (app.config.boot.token_ttl, app.clock.now(), format!("operator {}", caller.0.id));
    let what = format!("node {id}");
    let boot = app
        .store
        .write(move |tx| {
            store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            let boot = store::boots::arm(tx, &id, &by, None, now, ttl)?;
            store::boots::get(tx, &boot)?.ok_or_else(|| ApiError::Internal(format!("boot {boot} vanished")))
        })
        .await?;
    Ok((axum::http::StatusCode::CREATED, ApiJson(boot)))
}

/// Sets the plan the node's ramdisk fetches when it next deploys (a `DeployPlan`, checked).
#[utoipa::path(put, path = "/v1/nodes/{id}/deploy-plan", params(("id" = String, Path, description = "node id")),
    request_body = DeployPlan,
    responses((status = 204), (status = 422, body = metal_types::error::ErrorBody)))]
pub async fn put_deploy_plan(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(plan): ApiJson<DeployPlan>,
) -> ApiResult<axum::http::StatusCode> {
    caller.admin(&format!("node {id}"))?;
    plan.validate().map_err(|e| ApiError::invalid("plan", e.to_string()))?;
    let text = serde_json::to_string(&plan).map_err(|e| ApiError::Internal(e.to_string()))?;
    let now = app.clock.now();
    let what = format!("node {id}");
    app.store
        .change(move |tx| {
            store::nodes::get(tx, &id)?.ok_or(ApiError::NotFound(what))?;
            Ok::<_, ApiError>(store::boot::put_plan(tx, &id, &text, now)?)
        })
        .await?;
    Ok(axum::http::StatusCode::NO_CONTENT)
}

/// Every in-band firmware check of the node against its pool's baseline (the teardown's
/// firmware step), compliant or with its drift.
#[utoipa::path(get, path = "/v1/nodes/{id}/firmware-checks", params(("id" = String, Path, description = "node id"), PageQuery),
    responses((status = 200, body = Vec<FirmwareCheckRecord>), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn list_firmware_checks(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    paging: Paging,
) -> ApiResult<Response> {
    node_rows(&app, &caller, id, &store::boot::FIRMWARE_CHECKS, paging).await
}

/// One wipe report: the server's verdict on receipt, the signed payload it judged and the
/// certificate that signed it (what the console prints as a certificate of sanitization).
#[utoipa::path(get, path = "/v1/nodes/{id}/wipe-reports/{report}",
    params(("id" = String, Path, description = "node id"), ("report" = String, Path, description = "wipe report id")),
    responses((status = 200, body = WipeReportDetail), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_wipe_report(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, report)): ApiPath<(String, String)>,
) -> ApiResult<ApiJson<WipeReportDetail>> {
    let (record, envelope) = wipe_report_and_envelope(&app, &caller, id, report).await?;
    let envelope = metal_protocol::dsse::Envelope::from_json(envelope.as_bytes()).ok();
    let report = envelope
        .as_ref()
        .and_then(|e| e.payload_bytes().ok())
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok());
    Ok(ApiJson(WipeReportDetail {
        record,
        signer: signer_of(envelope.as_ref()),
        payload_type: envelope.map(|e| e.payload_type).unwrap_or_default(),
        report,
    }))
}

/// The first certificate of an envelope's signature, as PEM with its fingerprint.
fn signer_of(envelope: Option<&metal_protocol::dsse::Envelope>) -> SignerCertificate {
    let signer = envelope
        .and_then(|e| e.single_signature().ok())
        .and_then(|s| s.certificate_ders().ok())
        .and_then(|chain| chain.into_iter().next());
    SignerCertificate {
        signer_fingerprint: signer.as_deref().map(|der| hex::encode(<sha2::Sha256 as sha2::Digest>::digest(der))),
        signer_certificate: signer.as_deref().map(certificate_pem),
    }
}

/// The wipe report's DSSE envelope exactly as the ramdisk posted it, as a download: what
/// `metal-erase verify` (or any DSSE verifier) checks offline.
#[utoipa::path(get, path = "/v1/nodes/{id}/wipe-reports/{report}/envelope",
    params(("id" = String, Path, description = "node id"), ("report" = String, Path, description = "wipe report id")),
    responses((status = 200, description = "the DSSE envelope (JSON)", content_type = "application/json", body = Object),
        (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_wipe_envelope(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, report)): ApiPath<(String, String)>,
) -> ApiResult<axum::response::Response> {
    let (record, envelope) = wipe_report_and_envelope(&app, &caller, id, report).await?;
    Ok(envelope_download(&record.id, envelope))
}

/// An envelope as a JSON download named after its record.
fn envelope_download(id: &str, envelope: String) -> axum::response::Response {
    use axum::http::header;
    use axum::response::IntoResponse;
    let disposition = format!("attachment; filename=\"{id}.dsse.json\"");
    ([(header::CONTENT_TYPE, "application/json".to_owned()), (header::CONTENT_DISPOSITION, disposition)], envelope)
        .into_response()
}

/// One attestation: the server's verdict on receipt, the events its TCG event log says were
/// measured, how its PCRs compare now with the node's active baseline (on the pool's
/// compared PCRs), and the ramdisk certificate that signed it.
#[utoipa::path(get, path = "/v1/nodes/{id}/attestations/{attestation}",
    params(("id" = String, Path, description = "node id"), ("attestation" = String, Path, description = "attestation id")),
    responses((status = 200, body = AttestationDetail), (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_attestation(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, attestation)): ApiPath<(String, String)>,
) -> ApiResult<ApiJson<AttestationDetail>> {
    caller.admin(&format!("node {id}"))?;
    let what = format!("attestation {attestation} of node {id}");
    let (record, envelope, events, comparisons) = app
        .store
        .read(move |tx| {
            let node = store::nodes::get(tx, &id)?.ok_or_else(|| ApiError::NotFound(what.clone()))?;
            let (record, envelope) =
                store::attestations::get(tx, &id, &attestation)?.ok_or(ApiError::NotFound(what))?;
            let (events, comparisons) = measured_boot::describe(tx, &node, &record, &envelope)?;
            Ok::<_, ApiError>((record, envelope, events, comparisons))
        })
        .await?;
    let envelope = metal_protocol::dsse::Envelope::from_json(envelope.as_bytes()).ok();
    Ok(ApiJson(AttestationDetail { record, events, comparisons, signer: signer_of(envelope.as_ref()) }))
}

/// The attestation's DSSE envelope exactly as the ramdisk posted it (the quote, its
/// signature, the attestation key and the event log inside), as a download:
/// `metal-boot verify-attestation` checks it offline.
#[utoipa::path(get, path = "/v1/nodes/{id}/attestations/{attestation}/envelope",
    params(("id" = String, Path, description = "node id"), ("attestation" = String, Path, description = "attestation id")),
    responses((status = 200, description = "the DSSE envelope (JSON)", content_type = "application/json", body = Object),
        (status = 404, body = metal_types::error::ErrorBody)))]
pub async fn get_attestation_envelope(
    State(app): State<AppState>,
    caller: Caller,
    ApiPath((id, attestation)): ApiPath<(String, String)>,
) -> ApiResult<axum::response::Response> {
    caller.admin(&format!("node {id}"))?;
    let what = format!("attestation {attestation} of node {id}");
    let found = app.store.read(move |tx| store::attestations::get(tx, &id, &attestation)).await?;
    let (record, envelope) = found.ok_or(ApiError::NotFound(what))?;
    Ok(envelope_download(&record.id, envelope))
}

async fn wipe_report_and_envelope(
    app: &AppState,
    caller: &Caller,
    node: String,
    report: String,
) -> ApiResult<(WipeReportRecord, String)> {
    caller.admin(&format!("node {node}"))?;
    let what = format!("wipe report {report} of node {node}");
    app.store
        .read(move |tx| {
            let record = store::boot::WIPE_REPORTS.all(tx, &node)?.into_iter().find(|r| r.id == report);
            let envelope = store::boot::wipe_envelope(tx, &node, &report)?;
            match (record, envelope) {
                (Some(record), Some(envelope)) => Ok((record, envelope)),
                _ => Err(ApiError::NotFound(what)),
            }
        })
        .await
}

/// A DER certificate as PEM.
fn certificate_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let lines: Vec<&str> = body.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap_or_default()).collect();
    format!("-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n", lines.join("\n"))
}
