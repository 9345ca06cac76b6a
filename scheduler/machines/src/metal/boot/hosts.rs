//! The join service, on the boot TLS listener: a deployed OS becomes a host (`protocol::join`).
//!
//! When a deploying ramdisk fetches its plan, the seed gains the first-boot join: a fresh
//! single-use enrolment token bound to the node and its identity generation, the site CA and
//! its fingerprint, and the SHA-256 of the join script served here (which pins the agent's
//! SHA-256 in turn). `join` trades the token and a host-generated public key for a `node`
//! certificate, or `node-tenant` when the node's trust is tenant-controlled; `renew` issues a
//! new one over mutual TLS while the identity generation holds; the signed setup report
//! says which networks and pools were applied. Every step, refusals included, goes into
//! the node's join log, and each outcome is an event.

use std::net::IpAddr;
use std::time::{Duration, SystemTime};

use base64::Engine as _;
use metal_protocol::cloudinit::FirstBootJoin;
use metal_protocol::identity::pem_encode;
use metal_protocol::join::{
    HOST_AGENT_PATH, HostCertificate, HostJoinRequest, HostJoinResponse, HostRenewRequest, HostSetup, HostSetupReport,
    JoinFailure,
};
use metal_protocol::{Envelope, Identity, Role, VerifyingKey};
use serde_json::json;
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use tracing::{info, warn};

use crate::app::{App, AppState};
use crate::metal::boot::{BootService, Peer};
use metal_store::{self as store, Conn};
use metal_types::error::{ApiError, ApiResult};
use metal_types::model::host::{Host, HostState};
use metal_types::model::node::{Node, NodeState, Trust};

/// The agent binary's name in the boot files directory.
pub const AGENT_FILE: &str = "metal-agent";

/// Certificates are valid from a little before they are issued (clock skew).
const BACKDATE: Duration = Duration::from_secs(300);

/// The join script: fetches `metal-agent` over the pinned CA, checks its SHA-256, runs its
/// join, and installs it as a service that renews the certificate and reports. Only the
/// agent's digest (64 hex digits) is put into the text.
fn install_script(agent_sha256: &str) -> String {
    format!(
        r#"#!/bin/sh
# metal's join script, served by the controller at /v1/hosts/install.sh. The seed's
# bootstrap checked its SHA-256 before running it. Installs metal-agent (after checking its
# SHA-256), which joins, sets the host up and keeps its certificate renewed.
set -eu
d=${{METAL_CONFIG_DIR:-/etc/metal}}
url=$(cat "$d/controller-url")
agent=/usr/local/sbin/metal-agent
mkdir -p /usr/local/sbin
# The agent from METAL_AGENT_SOURCE when one was brought (metalctl host add, the offline
# bundle), else from the controller; its digest is checked either way.
if [ -n "${{METAL_AGENT_SOURCE:-}}" ]; then
  cp "$METAL_AGENT_SOURCE" "$agent.part"
else
  curl -fsS --retry 10 --retry-delay 3 --retry-all-errors --max-time 300 --cacert "$d/ca.pem" \
    -o "$agent.part" "$url{HOST_AGENT_PATH}"
fi
if ! echo "{agent_sha256}  $agent.part" | sha256sum -c --status; then
  echo "metal-join: metal-agent's SHA-256 is not {agent_sha256}; not running it" >&2
  rm -f "$agent.part"
  exit 1
fi
chmod 0755 "$agent.part"
mv -f "$agent.part" "$agent"
"$agent" join --config-dir "$d"
cat > /etc/systemd/system/metal-agent.service <<UNIT
[Unit]
Description=metal host agent: certificate renewal and signed inventory reports
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=/usr/local/sbin/metal-agent run --config-dir $d
Restart=always
RestartSec=10
StandardOutput=journal+console
StandardError=journal+console

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now metal-agent.service
# Everything the first boot wrote reaches the disk now, not at the next writeback.
sync
echo "metal-join: joined; metal-agent.service is running"
"#
    )
}

/// The join script as served now (with the agent's current digest), or why there is none.
async fn current_script(service: &BootService) -> Result<String, String> {
    let path = service.files_dir.join(AGENT_FILE);
    let digest = service
        .digests
        .sha256(&path)
        .await
        .map_err(|e| format!("no {AGENT_FILE} in the boot files ({}): {e}", path.display()))?;
    Ok(install_script(&digest))
}

/// The first-boot join of this controller without its token (`issue_join` adds one): `None`
/// (and a warning) when the boot files have no agent, in which case deploys go on without a
/// join.
pub async fn join_template(service: &BootService) -> Option<FirstBootJoin> {
    match current_script(service).await {
        Ok(script) => Some(FirstBootJoin {
            controller_url: service.controller_url.clone(),
            token: String::new(),
            ca_pem: service.ca.certificate().pem(),
            ca_fingerprint: service.ca_fingerprint.clone(),
            install_sha256: hex::encode(Sha256::digest(script.as_bytes())),
        }),
        Err(e) => {
            warn!("deployed machines will not join: {e}");
            None
        }
    }
}

/// Issues the node's enrolment token (withdrawing older unused ones) and returns `join` with
/// it; the token's setup is the deploy profile's `host` setup.
pub fn issue_join(
    tx: &mut dyn Conn,
    join: FirstBootJoin,
    node: &Node,
    ttl: Duration,
    now: OffsetDateTime,
) -> ApiResult<FirstBootJoin> {
    let profile = store::boot::plan_profile(tx, &node.id)?;
    let setup = match &profile {
        Some((id, version)) => {
            store::profiles::version(tx, id, *version)?.and_then(|(_, v)| v.spec.host).unwrap_or_default()
        }
        None => HostSetup::default(),
    };
    let request = store::hosts::TokenRequest {
        node_id: &node.id,
        identity_generation: node.identity_generation,
        profile: profile.as_ref().map(|(id, version)| (id.as_str(), *version)),
        setup: &setup,
        origin: store::hosts::TokenOrigin::Deploy,
    };
    let (token, id) = store::hosts::issue_token(tx, request, now, ttl)?;
    store::hosts::log(
        tx,
        &node.id,
        node.identity_generation,
        "token",
        true,
        &format!("enrolment token {id} issued with the deploy plan, valid until {}", now + ttl),
        now,
    )?;
    Ok(FirstBootJoin { token, ..join })
}

/// `GET /v1/hosts/install.sh`: the join script (no secret in it; its digest is in the seed).
pub async fn install(app: &App, address: IpAddr) -> ApiResult<String> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    current_script(service).await.map_err(ApiError::InvalidConfig)
}

/// `GET /v1/hosts/agent`: the `metal-agent` binary (its digest is in the join script).
pub async fn agent(app: &App, address: IpAddr) -> ApiResult<Vec<u8>> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    let path = service.files_dir.join(AGENT_FILE);
    let bytes = tokio::fs::read(&path)
        .await
        .map_err(|e| ApiError::InvalidConfig(format!("{AGENT_FILE} cannot be read from {}: {e}", path.display())))?;
    info!(client = %address, bytes = bytes.len(), "served metal-agent");
    Ok(bytes)
}

/// The role a node's OS gets: `node-tenant` while its trust is tenant-controlled.
fn host_role(node: &Node) -> Role {
    if node.trust == Trust::TenantControlled { Role::NodeTenant } else { Role::Node }
}

/// A refusal that is logged and raised before the handler answers with it.
fn refuse<T>(
    tx: &mut dyn Conn,
    node: Option<(&str, i64)>,
    step: &str,
    error: ApiError,
    client: &str,
    now: OffsetDateTime,
) -> ApiResult<Result<T, ApiError>> {
    let message = error.to_string();
    if let Some((node_id, generation)) = node {
        store::hosts::log(tx, node_id, generation, step, false, &message, now)?;
    }
    let subject = node.map_or_else(|| "host/unknown".to_owned(), |(id, _)| format!("node/{id}"));
    let data = json!({"node": node.map(|n| n.0), "step": step, "reason": message, "client": client});
    store::events::append(tx, "host.join.refused", &subject, None, &data, now)?;
    Ok(Err(error))
}

/// `POST /v1/hosts/join`: a live enrolment token of the node's current identity generation
/// and a public key give a `node` (or `node-tenant`) certificate and the host record.
pub async fn join(app: &App, address: IpAddr, request: HostJoinRequest) -> ApiResult<HostJoinResponse> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    let key = super::ramdisk::parse_key(&request.public_key)?;
    metal_protocol::identity::validate_name("hostname", &request.hostname)
        .map_err(|e| ApiError::invalid("hostname", e.to_string()))?;
    let now = app.clock.now();
    let validity = app.config.boot.host_certificate_validity;
    let site = service.ca.certificate().site().to_owned();
    let client = address.to_string();
    let ca = service.ca.clone();
    let outcome = app
        .store
        .change(move |tx| {
            let token = match store::hosts::find_token(tx, &request.token, now)? {
                Ok(token) => token,
                Err(refusal) => {
                    let node = refusal.token().map(|t| (t.node_id.as_str(), t.identity_generation));
                    return refuse(tx, node, "token", ApiError::Forbidden(refusal.message()), &client, now);
                }
            };
            let at = Some((token.node_id.as_str(), token.identity_generation));
            let Some(node) = store::nodes::get(tx, &token.node_id)? else {
                return refuse(tx, None, "token", ApiError::NotFound(format!("node {}", token.node_id)), &client, now);
            };
            if node.identity_generation != token.identity_generation {
                let e = ApiError::Forbidden(format!(
                    "node {}'s identity moved to generation {} after enrolment token {} was issued",
                    node.id, node.identity_generation, token.id
                ));
                return refuse(tx, at, "token", e, &client, now);
            }
            let adoptable = token.origin == store::hosts::TokenOrigin::Operator && node.state == NodeState::New;
            if node.state != NodeState::Deployed && !adoptable {
                let e = ApiError::Conflict(format!(
                    "node {} is {}: only a deployed node (or a new one, with an operator's token) joins",
                    node.id, node.state
                ));
                return refuse(tx, at, "token", e, &client, now);
            }
            // A deploy's token joins from where that deploy's ramdisk joined: the seed is read
            // off the disk by the machine it was written to, and a copy elsewhere is refused.
            if token.origin == store::hosts::TokenOrigin::Deploy
                && let Some(deploy) = store::boots::last_deploy_join(tx, &node.id)?
                && let Some(from) = deploy.joined_from.as_deref()
                && from != client
            {
                let e = ApiError::Forbidden(format!(
                    "enrolment token {} joins only from {from}, where node {}'s deploy ramdisk joined (boot {}); \
                     this join came from {client}",
                    token.id, node.id, deploy.id
                ));
                return refuse(tx, at, "token", e, &client, now);
            }
            // Only now, with every check passed, is the token spent.
            if !store::hosts::use_token(tx, &request.token, now)? {
                let e = ApiError::Forbidden(format!("enrolment token {} was already used", token.id));
                return refuse(tx, at, "token", e, &client, now);
            }
            let role = host_role(&node);
            let generation = u64::try_from(node.identity_generation)
                .map_err(|_| ApiError::Internal("negative identity generation".into()))?;
            // Signed inside the transaction: no token is spent, and no certificate logged,
            // without one.
            let certificate = issue(&ca, &key, &node.id, role, generation, now, validity)?;
            let host = Host {
                node_id: node.id.clone(),
                state: HostState::Joining,
                role: role.as_str().to_owned(),
                identity_generation: node.identity_generation,
                hostname: request.hostname.clone(),
                site: site.clone(),
                rack: node.labels.get("rack").cloned(),
                tags: node.labels.clone(),
                profile_id: token.profile.as_ref().map(|p| p.0.clone()),
                profile_version: token.profile.as_ref().map(|p| p.1),
                enrolment_token: token.id.clone(),
                setup: token.setup.clone(),
                public_key: request.public_key.clone(),
                certificate_expires_at: now + validity,
                joined_at: now,
                renewed_at: None,
                generation: 0,
            };
            let host = store::hosts::put(tx, &host, now)?;
            let detail = format!(
                "enrolment token {} taken from {client}: a {role} certificate of generation {generation} for {}, \
                 valid until {}",
                token.id,
                request.hostname,
                now + validity
            );
            store::hosts::log(tx, &node.id, node.identity_generation, "certificate", true, &detail, now)?;
            let data = json!({"node": node.id, "role": role.as_str(), "identityGeneration": generation,
                              "hostname": request.hostname, "enrolmentToken": token.id});
            store::events::append(tx, "host.certificate.issued", &format!("node/{}", node.id), None, &data, now)?;
            Ok(Ok((host, certificate)))
        })
        .await?;
    let (host, certificate) = outcome?;
    info!(node = %host.node_id, role = %certificate.role, generation = certificate.generation, client = %address,
          "host joined");
    Ok(HostJoinResponse { certificate, site: host.site, rack: host.rack, tags: host.tags, setup: host.setup })
}

fn issue(
    ca: &metal_protocol::SiteCa,
    key: &VerifyingKey,
    node_id: &str,
    role: Role,
    generation: u64,
    now: OffsetDateTime,
    validity: Duration,
) -> ApiResult<HostCertificate> {
    let der = ca
        .issue(key, node_id, generation, role, SystemTime::from(now) - BACKDATE, validity + BACKDATE)
        .map_err(|e| ApiError::Internal(format!("issuing the {role} certificate: {e}")))?;
    Ok(HostCertificate {
        node_id: node_id.to_owned(),
        role,
        generation,
        certificate_chain: pem_encode("CERTIFICATE", &der) + &ca.certificate().pem(),
        expires_at: now + validity,
    })
}

/// `POST /v1/hosts/join-failed`: the bootstrap's word that a join stopped before the agent
/// ran (the script's digest did not match, it could not be fetched, it failed). Logged under
/// the token's node and raised as `host.join.failed`; the token is used up.
pub async fn join_failed(app: &App, address: IpAddr, report: JoinFailure) -> ApiResult<()> {
    let service = BootService::of(app)?;
    service.limiter.check(address)?;
    let clip = |text: &str, n: usize| text.chars().take(n).filter(|c| !c.is_control()).collect::<String>();
    let (stage, reason) = (clip(&report.stage, 32), clip(&report.reason, 500));
    let now = app.clock.now();
    app.store
        .change(move |tx| {
            let token = match store::hosts::find_token(tx, &report.token, now)? {
                Ok(token) => {
                    store::hosts::use_token(tx, &report.token, now)?;
                    token
                }
                Err(refusal) => match refusal.token() {
                    Some(token) => token.clone(),
                    None => return Err(ApiError::Forbidden(refusal.message())),
                },
            };
            let detail = format!("the first boot stopped ({stage}): {reason}");
            store::hosts::log(
                tx,
                &token.node_id,
                token.identity_generation,
                &format!("bootstrap/{stage}"),
                false,
                &detail,
                now,
            )?;
            if let Some(host) = store::hosts::get(tx, &token.node_id)?
                && host.identity_generation == token.identity_generation
                && host.state != HostState::Failed
            {
                store::hosts::set_state(tx, &host, HostState::Failed, now)?;
            }
            let data = json!({"node": token.node_id, "stage": stage, "reason": reason, "enrolmentToken": token.id});
            store::events::append(tx, "host.join.failed", &format!("node/{}", token.node_id), None, &data, now)?;
            Ok(())
        })
        .await?;
    warn!(client = %address, "a first boot reported a failed join");
    Ok(())
}

/// The connection's host: a `node` or `node-tenant` certificate of the node's current
/// identity generation, whose role still matches the node's trust, and whose key is the one
/// the host record holds (a re-join or a renewal replaces it: an older certificate speaks
/// no more). Locks the node's row first.
fn connected_host(tx: &mut dyn Conn, identity: &Identity, key: &VerifyingKey) -> ApiResult<(Node, Host)> {
    if !matches!(identity.role, Role::Node | Role::NodeTenant) {
        return Err(ApiError::Forbidden(format!("a {} certificate is not a host's", identity.role)));
    }
    store::nodes::lock(tx, &identity.node)?;
    let node =
        store::nodes::get(tx, &identity.node)?.ok_or_else(|| ApiError::NotFound(format!("node {}", identity.node)))?;
    if u64::try_from(node.identity_generation).ok() != Some(identity.generation) {
        return Err(ApiError::Forbidden(format!(
            "the certificate is of identity generation {}, node {} is at {}: it is revoked",
            identity.generation, node.id, node.identity_generation
        )));
    }
    if host_role(&node) != identity.role {
        return Err(ApiError::Forbidden(format!(
            "node {}'s trust is {:?} now; a {} certificate no longer holds",
            node.id, node.trust, identity.role
        )));
    }
    let host = store::hosts::get(tx, &node.id)?.ok_or_else(|| ApiError::NotFound(format!("host {}", node.id)))?;
    if host.public_key != base64::engine::general_purpose::STANDARD.encode(key.to_bytes()) {
        return Err(ApiError::Forbidden(format!(
            "the certificate's key is not host {}'s current one (it joined or renewed since): it is revoked",
            node.id
        )));
    }
    Ok((node, host))
}

/// A platform-trusted host's own report is about a joined host of its node: what
/// `ramdisk::host_inventory` takes.
pub(super) fn joined_host(tx: &mut dyn Conn, identity: &Identity, key: &VerifyingKey) -> ApiResult<Host> {
    let (_, host) = connected_host(tx, identity, key)?;
    if host.state != HostState::Joined {
        return Err(ApiError::Conflict(format!("host {} is {:?}, not joined", host.node_id, host.state)));
    }
    Ok(host)
}

/// `POST /v1/hosts/renew`: a new certificate (for the key in the body) over mutual TLS with
/// the current one; refused once the node's identity generation moved on.
pub async fn renew(app: &App, peer: &Peer, request: HostRenewRequest) -> ApiResult<HostCertificate> {
    let service = BootService::of(app)?;
    let now = app.clock.now();
    let (identity, current) = super::ramdisk::peer_identity(service, peer, now)?;
    let key = super::ramdisk::parse_key(&request.public_key)?;
    let validity = app.config.boot.host_certificate_validity;
    let who = identity.to_uri();
    let checked = identity.clone();
    let ca = service.ca.clone();
    let outcome = app
        .store
        .change(move |tx| {
            let (node, host) = match connected_host(tx, &checked, &current) {
                Ok(found) => found,
                Err(e) => {
                    let generation = i64::try_from(checked.generation).unwrap_or(i64::MAX);
                    if store::nodes::get(tx, &checked.node)?.is_some() {
                        store::hosts::log(tx, &checked.node, generation, "renewal", false, &e.to_string(), now)?;
                    }
                    return Ok(Err(e));
                }
            };
            if host.state == HostState::Failed {
                let e = ApiError::Forbidden(format!("host {} failed its join; it is left out", node.id));
                store::hosts::log(tx, &node.id, node.identity_generation, "renewal", false, &e.to_string(), now)?;
                return Ok(Err(e));
            }
            let certificate = issue(&ca, &key, &node.id, checked.role, checked.generation, now, validity)?;
            if !store::hosts::renewed(tx, &host, &request.public_key, now + validity, now)? {
                return Err(ApiError::Conflict(format!("host {} changed meanwhile; renew again", node.id)));
            }
            let detail = format!("renewed until {}", now + validity);
            store::hosts::log(tx, &node.id, node.identity_generation, "renewal", true, &detail, now)?;
            let data =
                json!({"node": node.id, "role": checked.role.as_str(), "expiresAt": (now + validity).to_string()});
            store::events::append(tx, "host.certificate.renewed", &format!("node/{}", node.id), None, &data, now)?;
            Ok(Ok(certificate))
        })
        .await?;
    let certificate = outcome?;
    info!(host = %who, "host certificate renewed");
    Ok(certificate)
}

/// A host's signed setup report: each outcome into the join log; all applied makes the host
/// `joined` (`host.joined`), any refusal leaves it out as `failed` (`host.join.failed`).
pub fn setup_report(
    tx: &mut dyn Conn,
    identity: &Identity,
    key: &VerifyingKey,
    envelope: &Envelope,
    now: OffsetDateTime,
) -> ApiResult<metal_protocol::boot::ReportReceipt> {
    let roles = [Role::Node, Role::NodeTenant];
    let (node, report) =
        super::ramdisk::node_payload(tx, identity, key, envelope, &roles, |r: &HostSetupReport| &r.node_id)?;
    let (_, host) = connected_host(tx, identity, key)?;
    if host.state != HostState::Joining {
        return Err(ApiError::Conflict(format!("host {} is {:?}, not joining", node.id, host.state)));
    }
    let expected = host.setup.items();
    let reported: Vec<&str> = report.outcomes.iter().map(|o| o.item.as_str()).collect();
    if reported != expected.iter().map(String::as_str).collect::<Vec<_>>() {
        return Err(ApiError::invalid(
            "outcomes",
            format!("the report covers {reported:?}; the enrolment token asked for {expected:?}"),
        ));
    }
    let clip = |text: &str| text.chars().take(1000).collect::<String>();
    for outcome in &report.outcomes {
        store::hosts::log(
            tx,
            &node.id,
            node.identity_generation,
            &outcome.item,
            outcome.applied,
            &clip(&outcome.detail),
            now,
        )?;
    }
    let subject = format!("node/{}", node.id);
    let moved_on = || ApiError::Conflict(format!("host {} changed meanwhile; report again", node.id));
    if report.applied() {
        if !store::hosts::set_state(tx, &host, HostState::Joined, now)? {
            return Err(moved_on());
        }
        let detail = format!("joined as {} {}: {} setup items applied", identity.role, host.hostname, expected.len());
        store::hosts::log(tx, &node.id, node.identity_generation, "joined", true, &detail, now)?;
        let data = json!({"node": node.id, "role": identity.role.as_str(), "hostname": host.hostname,
                          "site": host.site, "rack": host.rack, "setup": expected});
        store::events::append(tx, "host.joined", &subject, None, &data, now)?;
        Ok(metal_protocol::boot::ReportReceipt { accepted: true, reason: None })
    } else {
        if !store::hosts::set_state(tx, &host, HostState::Failed, now)? {
            return Err(moved_on());
        }
        let refused: Vec<String> =
            report.outcomes.iter().filter(|o| !o.applied).map(|o| format!("{}: {}", o.item, o.detail)).collect();
        let reason = format!("setup refused, nothing applied: {}", refused.join("; "));
        store::hosts::log(tx, &node.id, node.identity_generation, "joined", false, &clip(&reason), now)?;
        let data = json!({"node": node.id, "stage": "setup", "reason": clip(&reason)});
        store::events::append(tx, "host.join.failed", &subject, None, &data, now)?;
        Ok(metal_protocol::boot::ReportReceipt { accepted: true, reason: Some(reason) })
    }
}

/// The lapse pass: every enrolment token that expired unused goes into its node's join log
/// and raises `host.join.missing`, so a host that never reached the join service (no route
/// to the boot listener, a CA that was not the pinned one, an image without cloud-init) is
/// seen, not silently absent. Returns how many lapsed.
pub async fn lapse_once(app: &AppState) -> ApiResult<usize> {
    let now = app.clock.now();
    app.store
        .change(move |tx| {
            let lapsed = store::hosts::lapse_expired(tx, now)?;
            for token in &lapsed {
                let detail = format!(
                    "enrolment token {} expired unused at {}: the host never reached the join service (no route to \
                 the boot listener, a site CA that is not the pinned one, or an image without cloud-init)",
                    token.id, token.expires_at
                );
                store::hosts::log(tx, &token.node_id, token.identity_generation, "token", false, &detail, now)?;
                let data = json!({"node": token.node_id, "enrolmentToken": token.id, "reason": detail});
                store::events::append(tx, "host.join.missing", &format!("node/{}", token.node_id), None, &data, now)?;
            }
            Ok(lapsed.len())
        })
        .await
}
