//! The controller's side of `protocol::boot`, on the TLS listener: `join` trades a one-time
//! token and a public key for a `ramdisk` certificate of the node's current identity
//! generation; `reports` takes DSSE-signed reports over mutual TLS (commissioning
//! inventories move the node to ready or failed; wipe reports pass only through
//! `verify_wipe_report` against the stored platform inventory, and every refusal is stored
//! and raised as an event; task reports end deploys and erases); `plan` hands a deploying
//! ramdisk its plan.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use metal_protocol::boot::{JoinRequest, JoinResponse, ReportReceipt, TaskReport};
use metal_protocol::identity::{pem_encode, read_unverified};
use metal_protocol::join::HostSetupReport;
use metal_protocol::measurement::AttestationReport;
use metal_protocol::{
    Envelope, Identity, InventoryReport, Role, SiteCa, VerifyingKey, WipeExpectation, WipeReport, verify_wipe_report,
};
use serde_json::json;
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::app::App;
use crate::metal::boot::{BootService, Peer, claims};
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::boot::{BootStep, BootTask, WipeReportRecord, boot_step};
use metal_types::model::node::{Deadlines, Node, NodeState, NodeTransition, Trust};

/// The refusal of a genuine report whose erase failed (`WipeRefusal::DiskFailed`).
const DISK_FAILED: &str = "disk-failed";

/// The refusal of a ramdisk's report from outside the node's current boot.
const NOT_THIS_BOOT: &str = "not-this-boot";

/// Certificates are valid from a little before they are issued (clock skew).
const BACKDATE: Duration = Duration::from_secs(300);

fn node_or_404(tx: &mut dyn Conn, id: &str) -> ApiResult<Node> {
    store::nodes::get(tx, id)?.ok_or_else(|| ApiError::NotFound(format!("node {id}")))
}

pub(super) fn parse_key(text: &str) -> ApiResult<VerifyingKey> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|_| ApiError::invalid("publicKey", "not base64"))?;
    let raw = <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| ApiError::invalid("publicKey", "an Ed25519 public key is 32 bytes"))?;
    VerifyingKey::from_bytes(&raw).map_err(|_| ApiError::invalid("publicKey", "not an Ed25519 public key"))
}

/// `POST /v1/boot/join`: the one-time token (single use, bound to node, task and identity
/// generation, short-lived) and a public key give a `ramdisk` certificate.
pub async fn join(app: &App, address: IpAddr, request: JoinRequest) -> ApiResult<JoinResponse> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    let key = parse_key(&request.public_key)?;
    let now = app.clock.now();
    let token = request.token;
    let (client, key_stored) = (address.to_string(), claims::key_text(&key));
    let node = app
        .store
        .change(move |tx| {
            let boot = claims::boot_of_token(tx, &token)?
                .ok_or_else(|| ApiError::Forbidden("the join token is unknown".into()))?;
            if boot.task == Some(BootTask::Rescue) {
                return Err(ApiError::Forbidden("a rescue's token fetches its files; it never joins".into()));
            }
            let token = match store::boot::redeem_token(tx, &token, now) {
                Ok(token) => token,
                // The ramdisk that joined, asking again (its answer was lost): the same key.
                Err(ApiError::Forbidden(m))
                    if m.contains("already used") && boot.joined_key.as_deref() == Some(key_stored.as_str()) =>
                {
                    store::boot::token(tx, &token)?
                        .ok_or_else(|| ApiError::Forbidden("the join token is unknown".into()))?
                }
                // A second join for one boot with another key: somebody else holds its token.
                Err(ApiError::Forbidden(m)) if m.contains("already used") => {
                    let reason = claims::contest(tx, &boot, &client, "a second join", now)?;
                    return Ok(Err(ApiError::Forbidden(format!("the join token was already used: {reason}"))));
                }
                Err(e) => return Err(e),
            };
            let node = node_or_404(tx, &token.node_id)?;
            if node.identity_generation != token.identity_generation {
                return Err(ApiError::Forbidden(format!(
                    "node {}'s identity moved to generation {} after the token was issued",
                    node.id, node.identity_generation
                )));
            }
            if boot_step(node.state, store::boot::due(tx, &node)?) != BootStep::Ramdisk(token.task) {
                return Err(ApiError::Forbidden(format!(
                    "the token is for {} but node {} is {} now",
                    token.task, node.id, node.state
                )));
            }
            store::boots::joined(tx, &boot.id, &client, &key_stored, now)?;
            store::events::append(
                tx,
                "node.ramdisk.joined",
                &format!("node/{}", node.id),
                None,
                &json!({"node": node.id, "task": token.task, "identityGeneration": node.identity_generation,
                        "boot": boot.id, "client": client}),
                now,
            )?;
            Ok(Ok(node))
        })
        .await??;
    let validity = app.config.boot.certificate_validity;
    let generation =
        u64::try_from(node.identity_generation).map_err(|_| ApiError::Internal("negative generation".into()))?;
    let der = service
        .ca
        .issue(&key, &node.id, generation, Role::Ramdisk, SystemTime::from(now) - BACKDATE, validity + BACKDATE)
        .map_err(|e| ApiError::Internal(format!("issuing the ramdisk certificate: {e}")))?;
    info!(node = %node.id, generation, client = %address, "ramdisk joined");
    Ok(JoinResponse {
        node_id: node.id,
        generation,
        certificate_chain: pem_encode("CERTIFICATE", &der) + &service.ca.certificate().pem(),
        expires_at: now + validity,
    })
}

/// The connection's client certificate, checked against the site CA now.
pub(super) fn peer_identity(
    service: &BootService,
    peer: &Peer,
    now: OffsetDateTime,
) -> ApiResult<(Identity, VerifyingKey)> {
    let der = peer.0.as_deref().ok_or_else(|| {
        ApiError::Unauthenticated("this endpoint needs a certificate of this site (mutual TLS)".into())
    })?;
    let verified = service
        .ca
        .certificate()
        .verify(der, SystemTime::from(now))
        .map_err(|e| ApiError::Unauthenticated(format!("client certificate refused: {e}")))?;
    Ok((verified.identity, verified.public_key))
}

/// The boot service and the connection's `ramdisk` certificate, checked now; FORBIDDEN for a
/// certificate of any other role, which cannot `what`.
pub(super) fn ramdisk_peer<'a>(
    app: &'a App,
    peer: &Peer,
    now: OffsetDateTime,
    what: &str,
) -> ApiResult<(&'a BootService, Identity, VerifyingKey)> {
    let service = BootService::of(app)?;
    let (identity, key) = peer_identity(service, peer, now)?;
    if identity.role != Role::Ramdisk {
        return Err(ApiError::Forbidden(format!("a {} certificate cannot {what}", identity.role)));
    }
    Ok((service, identity, key))
}

/// A ramdisk's own report: signed by the connection's `ramdisk` certificate of the node's
/// current identity generation, about that node (`node_of` reads the node the payload
/// names). Returns the node and the payload.
fn ramdisk_payload<T: serde::de::DeserializeOwned>(
    tx: &mut dyn Conn,
    identity: &Identity,
    key: &VerifyingKey,
    envelope: &Envelope,
    node_of: impl Fn(&T) -> &str,
) -> ApiResult<(Node, T)> {
    node_payload(tx, identity, key, envelope, &[Role::Ramdisk], node_of)
}

/// A report of one of `roles`, signed by the connection's certificate of the node's
/// current identity generation, about that node.
pub(super) fn node_payload<T: serde::de::DeserializeOwned>(
    tx: &mut dyn Conn,
    identity: &Identity,
    key: &VerifyingKey,
    envelope: &Envelope,
    roles: &[Role],
    node_of: impl Fn(&T) -> &str,
) -> ApiResult<(Node, T)> {
    if !roles.contains(&identity.role) {
        return Err(ApiError::Forbidden(format!(
            "a {} certificate cannot post {}",
            identity.role, envelope.payload_type
        )));
    }
    let signature = envelope.single_signature().map_err(|e| ApiError::invalid("signatures", e.to_string()))?;
    envelope
        .verify_signature(signature, key)
        .map_err(|_| ApiError::Forbidden("the report is not signed by the connection's certificate".into()))?;
    let node = current_node(tx, identity)?;
    let bytes = envelope.payload_bytes().map_err(|e| ApiError::invalid("payload", e.to_string()))?;
    let payload: T = serde_json::from_slice(&bytes).map_err(|e| ApiError::invalid("payload", e.to_string()))?;
    if node_of(&payload) != node.id {
        return Err(ApiError::Forbidden(format!(
            "the report names node {}, the certificate {}",
            node_of(&payload),
            node.id
        )));
    }
    Ok((node, payload))
}

/// The node a certificate names, refused (403) unless the certificate is of the node's
/// current identity generation.
pub(super) fn current_node(tx: &mut dyn Conn, identity: &Identity) -> ApiResult<Node> {
    let node = node_or_404(tx, &identity.node)?;
    if u64::try_from(node.identity_generation).ok() != Some(identity.generation) {
        return Err(ApiError::Forbidden(format!(
            "the certificate is of identity generation {}, node {} is at {}",
            identity.generation, node.id, node.identity_generation
        )));
    }
    Ok(node)
}

fn move_node(
    tx: &mut dyn Conn,
    node: &Node,
    to: NodeState,
    reason: String,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<Node> {
    let request =
        NodeTransition { from: node.state, to, generation: Some(node.generation), owner: None, reason: Some(reason) };
    store::nodes::transition(tx, &node.id, &request, deadlines, now)
}

/// An inventory: the commissioning report of a commissioning node, or the firmware check of
/// a releasing one.
fn inventory_report(
    tx: &mut dyn Conn,
    identity: &Identity,
    key: &VerifyingKey,
    envelope: &Envelope,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<ReportReceipt> {
    // Tenant-controlled until its teardown's end; the teardown's own ramdisk reports count.
    let node = node_or_404(tx, &identity.node)?;
    if node.trust == Trust::TenantControlled && node.state != NodeState::Releasing {
        return advisory_inventory(tx, identity, key, envelope, now);
    }
    if identity.role == Role::Node {
        return host_inventory(tx, identity, key, envelope, now);
    }
    let (node, report) = ramdisk_payload(tx, identity, key, envelope, |r: &InventoryReport| &r.node_id)?;
    match node.state {
        NodeState::Commissioning => commissioning_report(tx, &node, &report, envelope, deadlines, now),
        NodeState::Releasing => firmware_check(tx, &node, &report, deadlines, now),
        state => Err(ApiError::Conflict(format!("node {} is {state}, not commissioning or releasing", node.id))),
    }
}

/// An inventory from a tenant-controlled node outside its teardown (the tenant's OS, by
/// any certificate of the current generation): appended as an advisory snapshot and raised as
/// `node.inventory.changed` with `advisory: true`; the node's devices, device health,
/// labels and conditions stay as the platform last saw them.
fn advisory_inventory(
    tx: &mut dyn Conn,
    identity: &Identity,
    key: &VerifyingKey,
    envelope: &Envelope,
    now: OffsetDateTime,
) -> ApiResult<ReportReceipt> {
    let roles = [Role::Ramdisk, Role::NodeTenant];
    let (node, report) = node_payload(tx, identity, key, envelope, &roles, |r: &InventoryReport| &r.node_id)?;
    let id = inventory_snapshot(tx, &node, identity, &report, envelope, true, now)?;
    Ok(ReportReceipt {
        accepted: true,
        reason: Some(format!(
            "advisory: node {} is tenant-controlled; kept as snapshot {id}, nothing changed",
            node.id
        )),
    })
}

/// An inventory from a platform-trusted host (its `node` certificate, of a joined host): kept
/// as a platform-trusted snapshot (`advisory: false` in `node.inventory.changed`). It never
/// replaces the commissioning's platform inventory, which wipes are checked against: an OS,
/// whoever logs into it, does not get to say which disks the node has.
fn host_inventory(
    tx: &mut dyn Conn,
    identity: &Identity,
    key: &VerifyingKey,
    envelope: &Envelope,
    now: OffsetDateTime,
) -> ApiResult<ReportReceipt> {
    let (node, report) = node_payload(tx, identity, key, envelope, &[Role::Node], |r: &InventoryReport| &r.node_id)?;
    super::hosts::joined_host(tx, identity, key)?;
    inventory_snapshot(tx, &node, identity, &report, envelope, false, now)?;
    Ok(ReportReceipt { accepted: true, reason: None })
}

/// Appends an OS's inventory as a snapshot and raises `node.inventory.changed`; returns the
/// snapshot's id.
fn inventory_snapshot(
    tx: &mut dyn Conn,
    node: &Node,
    identity: &Identity,
    report: &InventoryReport,
    envelope: &Envelope,
    advisory: bool,
    now: OffsetDateTime,
) -> ApiResult<String> {
    let text = serde_json::to_string(report).map_err(|e| ApiError::Internal(e.to_string()))?;
    let raw = serde_json::to_string(envelope).map_err(|e| ApiError::Internal(e.to_string()))?;
    let id = store::boot::put_snapshot(tx, &node.id, node.identity_generation, advisory, &text, &raw, now)?;
    let data = json!({"node": node.id, "snapshot": id, "advisory": advisory, "signer": identity.to_uri(),
                      "disks": report.disks.len(), "nics": report.nics.len(), "passed": report.passed()});
    store::events::append(tx, "node.inventory.changed", &format!("node/{}", node.id), None, &data, now)?;
    Ok(id)
}

/// Whether a running teardown owns the node's verdict: it quarantines on its own, in the
/// transaction that ends its run (a node failed by a ramdisk report first would be `failed`
/// while its run still runs, and `recover` refused).
fn under_teardown(tx: &mut dyn Conn, node: &Node) -> ApiResult<bool> {
    Ok(node.state == NodeState::Releasing && store::workflows::running_for(tx, &node.id)?.is_some())
}

/// The teardown's firmware step: the versions the ramdisk read in band against the pool's
/// baseline (the ramdisk reports versions; the verdict is the scheduler's). Drift fails the
/// node (quarantine); a compliant check at this generation moves the boot service to the erase.
fn firmware_check(
    tx: &mut dyn Conn,
    node: &Node,
    report: &InventoryReport,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<ReportReceipt> {
    let baseline = store::capacity::pool_of(tx, node)?.and_then(|p| p.policy.firmware_baseline);
    let check = metal_firmware::baseline::check(&node.id, &report.firmware, baseline.as_ref(), now)
        .map_err(|e| ApiError::Conflict(format!("node {}: no firmware check is due: {e}", node.id)))?;
    let text = serde_json::to_string(&check).map_err(|e| ApiError::Internal(e.to_string()))?;
    let id = store::boot::record_firmware_check(tx, &node.id, node.generation, check.compliant, &text, now)?;
    let drift = metal_firmware::baseline::drift_lines(&check);
    let data = json!({"node": node.id, "check": id, "compliant": check.compliant, "drift": drift});
    store::events::append(tx, "node.firmware.checked", &format!("node/{}", node.id), None, &data, now)?;
    if check.compliant {
        return Ok(ReportReceipt { accepted: true, reason: None });
    }
    let reason = format!("FIRMWARE_DRIFT: {}", drift.join("; "));
    // Its erase step finds the check and quarantines, in the transaction that ends its run.
    if !under_teardown(tx, node)? {
        move_node(tx, node, NodeState::Failed, reason.clone(), deadlines, now)?;
    }
    Ok(ReportReceipt { accepted: true, reason: Some(reason) })
}

fn commissioning_report(
    tx: &mut dyn Conn,
    node: &Node,
    report: &InventoryReport,
    envelope: &Envelope,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<ReportReceipt> {
    let passed = report.passed();
    let inventory = serde_json::to_string(report).map_err(|e| ApiError::Internal(e.to_string()))?;
    let raw = serde_json::to_string(envelope).map_err(|e| ApiError::Internal(e.to_string()))?;
    store::boot::put_inventory(tx, &node.id, passed, &inventory, &raw, now)?;
    store::nodes::set_architecture(tx, &node.id, &report.cpu.architecture)?;
    crate::metal::network::learn_ports(tx, &node.id, report, now)?;
    let failed: Vec<String> =
        report.tests.iter().filter(|t| !t.passed).map(|t| format!("{:?}: {}", t.kind, t.details)).collect();
    let (to, reason) = if passed {
        (
            NodeState::Ready,
            format!("commissioned: {} disks, {} NICs, every test passed", report.disks.len(), report.nics.len()),
        )
    } else {
        (NodeState::Failed, format!("commissioning test failed: {}", failed.join("; ")))
    };
    move_node(tx, node, to, reason, deadlines, now)?;
    Ok(ReportReceipt { accepted: true, reason: None })
}

fn wipe_report(
    tx: &mut dyn Conn,
    ca: &SiteCa,
    identity: &Identity,
    envelope: &Envelope,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<ReportReceipt> {
    let node = node_or_404(tx, &identity.node)?;
    let leaf = envelope
        .single_signature()
        .ok()
        .and_then(|signature| signature.certificate_ders().ok())
        .and_then(|chain| chain.first().and_then(|der| read_unverified(der).ok()));
    let signer = leaf.as_ref().map(|(identity, _)| identity.to_uri());
    // A ramdisk's wipe counts only from the ramdisk that joined the node's current boot: a
    // certificate of the same generation from a boot that was superseded or contested, or
    // that the site CA issued elsewhere, vouches for nothing.
    let of_this_boot = match &leaf {
        Some((signed_by, key)) if signed_by.role == Role::Ramdisk => {
            let boot = store::boots::open(tx, &node.id, now)?;
            boot.and_then(|b| b.joined_key).as_deref() == Some(claims::key_text(key).as_str())
        }
        _ => true,
    };
    let inventory = store::boot::get_inventory(tx, &node.id)?;
    let outcome = match &inventory {
        None => Err(("no-inventory", format!("node {} has no platform inventory to check a wipe against", node.id))),
        Some(stored) => {
            let report: InventoryReport = serde_json::from_value(stored.inventory.clone())
                .map_err(|e| ApiError::Internal(format!("stored inventory of {}: {e}", node.id)))?;
            let disks: Vec<_> = report.disks.iter().map(|d| d.identity.clone()).collect();
            let expect = WipeExpectation {
                node_id: &node.id,
                generation: u64::try_from(node.identity_generation).unwrap_or_default(),
                disks: &disks,
                at: SystemTime::from(now),
            };
            verify_wipe_report(envelope, ca.certificate(), &expect).map_err(|r| (r.code(), r.to_string())).and_then(
                |report| match of_this_boot {
                    true => Ok(report),
                    false => Err((
                        NOT_THIS_BOOT,
                        format!("the report is signed by a ramdisk that did not join node {}'s current boot", node.id),
                    )),
                },
            )
        }
    };
    let record = WipeReportRecord {
        id: format!("wipe-{}", uuid::Uuid::new_v4().simple()),
        node_id: node.id.clone(),
        accepted: outcome.is_ok(),
        code: outcome.as_ref().err().map(|(code, _)| (*code).to_owned()),
        reason: outcome.as_ref().err().map(|(_, reason)| reason.clone()),
        signer,
        signer_key: leaf.as_ref().map(|(_, key)| claims::key_text(key)),
        received_at: now,
    };
    let raw = serde_json::to_string(envelope).map_err(|e| ApiError::Internal(e.to_string()))?;
    store::boot::record_wipe(tx, &record, node.generation, &raw)?;
    let subject = format!("node/{}", node.id);
    match outcome {
        Ok(report) => {
            let data = json!({"node": node.id, "report": record.id, "disks": report.disks.len()});
            store::events::append(tx, "node.wipe.accepted", &subject, None, &data, now)?;
            // A teardown workflow reads the accepted report itself and goes on from there.
            if node.state == NodeState::Releasing && store::workflows::running_for(tx, &node.id)?.is_none() {
                let reason =
                    format!("wipe report {} accepted: {} disks erased and verified", record.id, report.disks.len());
                move_node(tx, &node, NodeState::Ready, reason, deadlines, now)?;
            }
            Ok(ReportReceipt { accepted: true, reason: None })
        }
        Err((code, reason)) => {
            let data =
                json!({"node": node.id, "report": record.id, "code": code, "reason": reason, "signer": record.signer});
            store::events::append(tx, "node.wipe.refused", &subject, None, &data, now)?;
            // A genuine report of a failed erase quarantines the node at once; other refusals
            // leave it releasing (the reaper fails it at the deadline).
            // (A teardown workflow quarantines on its own, with this report as its reason.)
            if code == DISK_FAILED
                && node.state == NodeState::Releasing
                && store::workflows::running_for(tx, &node.id)?.is_none()
            {
                move_node(tx, &node, NodeState::Failed, format!("wipe failed: {reason}"), deadlines, now)?;
            }
            Ok(ReportReceipt { accepted: false, reason: Some(format!("{code}: {reason}")) })
        }
    }
}

fn task_report(
    tx: &mut dyn Conn,
    identity: &Identity,
    key: &VerifyingKey,
    envelope: &Envelope,
    deadlines: &Deadlines,
    now: OffsetDateTime,
) -> ApiResult<ReportReceipt> {
    let (node, report) = ramdisk_payload(tx, identity, key, envelope, |r: &TaskReport| &r.node_id)?;
    let data = json!({"node": node.id, "task": report.task, "ok": report.ok, "detail": report.detail});
    store::events::append(tx, "node.task.reported", &format!("node/{}", node.id), None, &data, now)?;
    let teardown = under_teardown(tx, &node)?;
    let outcome = match (report.task.as_str(), report.ok, node.state) {
        ("deploy", true, NodeState::Deploying) => Some(NodeState::Deployed),
        ("erase" | "firmware", false, NodeState::Releasing) if !teardown => Some(NodeState::Failed),
        ("deploy", false, NodeState::Deploying) | ("commission", false, NodeState::Commissioning) => {
            Some(NodeState::Failed)
        }
        _ => None,
    };
    if let Some(to) = outcome {
        let verb = if report.ok { "done" } else { "failed" };
        let reason = format!("{} {verb}: {}", report.task, report.detail);
        match to {
            NodeState::Deployed => crate::metal::provision::deploy_done(tx, &node, reason, deadlines, now)?,
            _ => move_node(tx, &node, to, reason, deadlines, now)?,
        };
    }
    Ok(ReportReceipt { accepted: true, reason: None })
}

/// `POST /v1/boot/reports`: a DSSE-signed report over mutual TLS.
pub async fn reports(app: &App, peer: &Peer, envelope: Envelope) -> ApiResult<ReportReceipt> {
    let service = BootService::of(app)?;
    let now = app.clock.now();
    let (identity, key) = peer_identity(service, peer, now)?;
    let (deadlines, token_ttl) = (app.config.deadlines, app.config.boot.token_ttl);
    let payload_type = envelope.payload_type.clone();
    let who = identity.to_uri();
    let ca = service.ca.clone();
    let receipt = app
        .store
        .change(move |tx| {
            let receipt = match envelope.payload_type.as_str() {
                InventoryReport::PAYLOAD_TYPE => inventory_report(tx, &identity, &key, &envelope, &deadlines, now),
                WipeReport::PAYLOAD_TYPE => wipe_report(tx, &ca, &identity, &envelope, &deadlines, now),
                TaskReport::PAYLOAD_TYPE => task_report(tx, &identity, &key, &envelope, &deadlines, now),
                HostSetupReport::PAYLOAD_TYPE => super::hosts::setup_report(tx, &identity, &key, &envelope, now),
                AttestationReport::PAYLOAD_TYPE => super::attest::report(tx, &identity, &key, &envelope, now),
                other => Err(ApiError::invalid("payloadType", format!("unknown report type {other:?}"))),
            }?;
            claims::after_report(tx, &identity.node, token_ttl, now)?;
            // A workflow waiting on this node reads the report at its next pass, not its next poll.
            store::workflows::wake(tx, &identity.node, now)?;
            Ok(receipt)
        })
        .await?;
    match &receipt.reason {
        None => info!(from = %who, %payload_type, "report accepted"),
        Some(reason) => warn!(from = %who, %payload_type, %reason, "report refused"),
    }
    Ok(receipt)
}

/// `GET /v1/boot/images/{id}`: the file of an image's served form, only to a ramdisk of the
/// node's current identity generation whose node is deploying a plan of that image.
pub async fn image(app: &App, peer: &Peer, id: String) -> ApiResult<PathBuf> {
    let now = app.clock.now();
    let (_, identity, key) = ramdisk_peer(app, peer, now, "fetch images")?;
    let (node_id, image_id) = (identity.node.clone(), id.clone());
    app.store
        .read(move |tx| {
            let node = node_or_404(tx, &node_id)?;
            if u64::try_from(node.identity_generation).ok() != Some(identity.generation) {
                return Err(ApiError::Forbidden(format!(
                    "the certificate is of identity generation {}, node {} is at {}",
                    identity.generation, node.id, node.identity_generation
                )));
            }
            if node.state != NodeState::Deploying {
                return Err(ApiError::Conflict(format!("node {} is {}, not deploying", node.id, node.state)));
            }
            claims::require_boot_key(tx, &node.id, &key, now)?;
            crate::metal::measured_boot::require_quote(tx, &node, &claims::key_text(&key))?;
            if store::boot::plan_image(tx, &node.id)?.as_deref() != Some(image_id.as_str()) {
                return Err(ApiError::Forbidden(format!(
                    "node {}'s deploy plan does not name image {image_id}",
                    node.id
                )));
            }
            Ok(())
        })
        .await?;
    let path = app.images.served(&id);
    if !path.exists() {
        return Err(ApiError::NotFound(format!("image {id}'s file")));
    }
    Ok(path)
}

/// `GET /v1/boot/plan`: the deploy plan of the connection's node, while it is deploying.
/// Its seed gains the first-boot join (`hosts::issue_join`: a fresh enrolment token), so the
/// stored plan never holds a token; without an agent in the boot files it has none.
pub async fn plan(app: &App, peer: &Peer) -> ApiResult<serde_json::Value> {
    let (service, identity, key) = ramdisk_peer(app, peer, app.clock.now(), "fetch a deploy plan")?;
    let join = super::hosts::join_template(service).await;
    let node_id = identity.node.clone();
    let (now, ttl) = (app.clock.now(), app.config.boot.host_token_ttl);
    let plan = app
        .store
        .change(move |tx| {
            let node = node_or_404(tx, &node_id)?;
            if node.state != NodeState::Deploying {
                return Err(ApiError::Conflict(format!("node {} is {}, not deploying", node.id, node.state)));
            }
            claims::require_boot_key(tx, &node.id, &key, now)?;
            crate::metal::measured_boot::require_quote(tx, &node, &claims::key_text(&key))?;
            let Some(stored) = store::boot::get_plan(tx, &node.id)? else { return Ok(None) };
            let mut plan: metal_protocol::DeployPlan = serde_json::from_value(stored)
                .map_err(|e| ApiError::Internal(format!("the stored plan of node {}: {e}", node.id)))?;
            match (&plan.cloud_init, join) {
                (Some(seed), Some(join)) if metal_protocol::cloudinit::rendered_config(seed).is_some() => {
                    let join = super::hosts::issue_join(tx, join, &node, ttl, now)?;
                    let seed = metal_protocol::cloudinit::with_join(seed, &join)
                        .map_err(|e| ApiError::Internal(format!("adding the join to node {}'s seed: {e}", node.id)))?;
                    plan.cloud_init = Some(seed);
                }
                (Some(_), Some(_)) => {
                    warn!(node = %node.id, "the plan's seed was not rendered by metal (set by hand): no join is added");
                }
                _ => {}
            }
            serde_json::to_value(&plan).map(Some).map_err(|e| ApiError::Internal(e.to_string()))
        })
        .await?;
    plan.ok_or_else(|| ApiError::NotFound(format!("deploy plan of node {}", identity.node)))
}
