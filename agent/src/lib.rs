//! metal-agent: the host agent of an OS that metal deployed (or that an operator joined).
//!
//! `join` trades the seed's single-use enrolment token and a key generated here (kept 0600,
//! never sent) for a `node` or `node-tenant` certificate, sets up the networks and storage
//! pools the token names (`setup`, all or nothing) and reports how that went, signed.
//! `run` keeps the certificate renewed (at two thirds of its life) and reports the host's
//! inventory and health (disk and NIC checks) on a schedule, DSSE-signed; under tenant-controlled trust the controller keeps
//! those reports as advisory. A reboot keeps the identity: the key and certificate stay in
//! the configuration directory (`state`).

pub mod cli;
pub mod client;
pub mod setup;
pub mod state;

use std::time::{Duration, SystemTime};

use metal_boot::controller::{ControllerError, Retry};
use metal_protocol::identity::certificates_from_pem;
use metal_protocol::join::{HostSetupReport, SetupOutcome};
use metal_protocol::{CaCertificate, InventoryReport, SigningKey, VerifiedCertificate};

use crate::client::Controller;
use crate::state::{ConfigDir, StateError};

/// Why the agent stopped.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// Its files.
    #[error(transparent)]
    State(#[from] StateError),
    /// The controller.
    #[error(transparent)]
    Controller(#[from] ControllerError),
    /// Nothing to join with: no token, and no certificate.
    #[error("not joined: {0}")]
    NotJoined(String),
}

/// A joined host's identity, loaded from the configuration directory.
#[derive(Debug)]
pub struct Identity {
    /// The key.
    pub key: SigningKey,
    /// The chain (DER, leaf first).
    pub chain: Vec<Vec<u8>>,
    /// What the leaf says, verified against the pinned CA.
    pub certificate: VerifiedCertificate,
    /// When the leaf expires.
    pub not_after: SystemTime,
    /// When it was issued (its notBefore).
    pub not_before: SystemTime,
}

impl Identity {
    /// Whether two thirds of the certificate's life are behind it at `now`.
    pub fn due_for_renewal(&self, now: SystemTime) -> bool {
        let life = self.not_after.duration_since(self.not_before).unwrap_or_default();
        self.not_before + life * 2 / 3 <= now
    }
}

/// The controller and the site CA, from the configuration directory.
pub fn controller(config: &ConfigDir, retry: Retry) -> Result<(Controller, CaCertificate), AgentError> {
    let (ca, pin) = config.site_ca()?;
    Ok((Controller::new(&config.controller_url()?, pin, retry)?, ca))
}

/// The host's key and certificate, checked against the pinned CA now; `None` before the join.
pub fn load_identity(config: &ConfigDir, ca: &CaCertificate) -> Result<Option<Identity>, AgentError> {
    let (Some(key), Some(pem)) = (config.key()?, config.chain_pem()?) else { return Ok(None) };
    let chain = certificates_from_pem(&pem).map_err(|e| StateError::Invalid(format!("{}: {e}", state::CERT_FILE)))?;
    let leaf = chain.first().ok_or_else(|| StateError::Invalid(format!("{}: empty", state::CERT_FILE)))?;
    let (not_before, not_after) = validity(leaf)?;
    let certificate = ca
        .verify(leaf, metal_clock::now())
        .map_err(|e| AgentError::NotJoined(format!("the certificate in {} no longer holds: {e}", state::CERT_FILE)))?;
    if certificate.public_key != key.verifying_key() {
        return Err(StateError::Invalid(format!("{} is not for {}", state::CERT_FILE, state::KEY_FILE)).into());
    }
    Ok(Some(Identity { key, chain, certificate, not_after, not_before }))
}

fn validity(der: &[u8]) -> Result<(SystemTime, SystemTime), StateError> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| StateError::Invalid(format!("{}: {e}", state::CERT_FILE)))?;
    let at = |t: x509_parser::time::ASN1Time| {
        SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(t.timestamp()).unwrap_or_default())
    };
    Ok((at(cert.validity().not_before), at(cert.validity().not_after)))
}

/// How a join ended.
#[derive(Debug)]
pub enum Joined {
    /// It had joined before (a reboot): the identity it keeps.
    Already(String),
    /// It joined now: the identity, and how its setup went.
    Now { identity: String, outcomes: Vec<SetupOutcome>, receipt: Option<String> },
}

/// Joins with the seed's enrolment token, unless the host already holds a valid
/// certificate. The key is written (0600) before the token is spent, and the certificate as
/// soon as it arrives; then the setup is applied and reported, signed.
pub fn join(config: &ConfigDir, hostname: &str, host: &setup::Host, retry: Retry) -> Result<Joined, AgentError> {
    let (controller, ca) = controller(config, retry)?;
    if let Ok(Some(identity)) = load_identity(config, &ca) {
        config.remove_token()?;
        return Ok(Joined::Already(identity.certificate.identity.to_uri()));
    }
    let token = config.token()?.ok_or_else(|| {
        AgentError::NotJoined(format!("no enrolment token in {} and no valid certificate", config.0.display()))
    })?;
    config.persist_inputs()?;
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    config.save_key(&key)?;
    let (answer, verified) = controller.join(&token, &key, hostname)?;
    config.save_chain(&answer.certificate.certificate_chain)?;
    config.remove_token()?;
    tracing::info!(identity = %verified.identity.to_uri(), site = %answer.site, "joined");
    let outcomes = setup::apply(host, &answer.setup);
    for outcome in &outcomes {
        tracing::info!(item = %outcome.item, applied = outcome.applied, detail = %outcome.detail, "setup");
    }
    let report = HostSetupReport {
        node_id: verified.identity.node.clone(),
        outcomes: outcomes.clone(),
        finished_at: metal_clock::now_utc(),
    };
    // Kept until the controller has it: `run` sends it again if this one does not arrive.
    let text = serde_json::to_vec(&report).map_err(|e| StateError::Invalid(e.to_string()))?;
    config.write(state::PENDING_REPORT_FILE, &text, 0o600)?;
    let chain = certificates_from_pem(&answer.certificate.certificate_chain)
        .map_err(|e| ControllerError::Certificate(e.to_string()))?;
    let receipt = match controller.post_report(&key, &chain, HostSetupReport::PAYLOAD_TYPE, &report) {
        Ok(receipt) => {
            config.remove(state::PENDING_REPORT_FILE)?;
            receipt.reason
        }
        Err(e) => {
            tracing::warn!(error = %e, "the setup report did not reach the controller; metal-agent run sends it again");
            Some(format!("not reported yet ({e}); the service sends it again"))
        }
    };
    Ok(Joined::Now { identity: verified.identity.to_uri(), outcomes, receipt })
}

/// Sends a setup report the join could not deliver, if there is one; done when the
/// controller has it (a 409: it had it already).
pub fn send_pending_report(config: &ConfigDir, controller: &Controller, identity: &Identity) -> Result<(), AgentError> {
    let Some(text) = config.read_optional(state::PENDING_REPORT_FILE)? else { return Ok(()) };
    let report: HostSetupReport = serde_json::from_str(&text).map_err(|e| StateError::Invalid(e.to_string()))?;
    match controller.post_report(&identity.key, &identity.chain, HostSetupReport::PAYLOAD_TYPE, &report) {
        Ok(_) | Err(ControllerError::Refused { status: 409, .. }) => {
            tracing::info!("the pending setup report reached the controller");
            Ok(config.remove(state::PENDING_REPORT_FILE)?)
        }
        Err(e) => Err(e.into()),
    }
}

/// Renews the certificate (same key) and saves it; returns the new expiry.
pub fn renew(config: &ConfigDir, retry: Retry) -> Result<time::OffsetDateTime, AgentError> {
    let (controller, ca) = controller(config, retry)?;
    let identity =
        load_identity(config, &ca)?.ok_or_else(|| AgentError::NotJoined("no certificate to renew".into()))?;
    let renewed = controller.renew(&identity.key, &identity.chain)?;
    config.save_chain(&renewed.certificate_chain)?;
    tracing::info!(identity = %identity.certificate.identity.to_uri(), expires_at = %renewed.expires_at, "renewed");
    Ok(renewed.expires_at)
}

/// Collects this host's inventory and posts it signed; returns the controller's word.
pub fn report(config: &ConfigDir, retry: Retry) -> Result<(bool, Option<String>), AgentError> {
    let (controller, ca) = controller(config, retry)?;
    let identity = load_identity(config, &ca)?.ok_or_else(|| AgentError::NotJoined("no certificate".into()))?;
    let inventory = host_inventory(&identity.certificate.identity.node);
    let receipt = controller.post_report(&identity.key, &identity.chain, InventoryReport::PAYLOAD_TYPE, &inventory)?;
    Ok((receipt.accepted, receipt.reason))
}

/// This host's inventory with its health: the checks that are safe on a running system
/// (each disk's SMART critical warning and sampled reads, each NIC's link), not the
/// commissioning's memory and CPU burn.
pub fn host_inventory(node: &str) -> InventoryReport {
    let roots = metal_boot::inventory::SystemPaths::default();
    let mut inventory = metal_boot::report::collect(&roots, node, None);
    let devices = metal_erase::device::discover(&roots).unwrap_or_default();
    inventory.tests = vec![metal_boot::checks::disks(&devices, 8), metal_boot::checks::nics(&inventory.nics)];
    inventory.tool =
        metal_protocol::tool::Tool { name: "metal-agent".into(), version: env!("CARGO_PKG_VERSION").into() };
    inventory
}

/// The service loop: renew when due, report every `interval`; transient errors are logged
/// and retried on the next turn.
pub fn run(config: &ConfigDir, interval: Duration, retry: Retry) -> Result<(), AgentError> {
    let mut next_report = metal_clock::now();
    loop {
        let (client, ca) = controller(config, retry.clone())?;
        let identity = load_identity(config, &ca)?.ok_or_else(|| AgentError::NotJoined("no certificate".into()))?;
        if let Err(e) = send_pending_report(config, &client, &identity) {
            tracing::warn!(error = %e, "the pending setup report failed again; trying again in a minute");
        }
        if identity.due_for_renewal(metal_clock::now())
            && let Err(e) = renew(config, retry.clone())
        {
            tracing::warn!(error = %e, "renewal failed; trying again in a minute");
        }
        if metal_clock::now() >= next_report {
            match report(config, retry.clone()) {
                Ok((accepted, reason)) => tracing::info!(accepted, reason = reason.as_deref(), "inventory reported"),
                Err(e) => tracing::warn!(error = %e, "inventory report failed"),
            }
            next_report = metal_clock::now() + interval;
        }
        std::thread::sleep(Duration::from_secs(60).min(interval));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_is_due_for_renewal_at_two_thirds_of_its_life() {
        let key = SigningKey::generate(&mut rand::rngs::OsRng);
        let year = Duration::from_secs(365 * 86400);
        let ca = metal_protocol::SiteCa::create("site-a", SystemTime::now(), year).unwrap();
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let der = ca.issue(&key.verifying_key(), "n1", 1, metal_protocol::Role::Node, SystemTime::now(), year).unwrap();
        let certificate = ca.certificate().verify(&der, SystemTime::now()).unwrap();
        let identity = Identity {
            key,
            chain: vec![der],
            certificate,
            not_before: start,
            not_after: start + Duration::from_secs(300),
        };
        assert!(!identity.due_for_renewal(start + Duration::from_secs(199)));
        assert!(identity.due_for_renewal(start + Duration::from_secs(200)));
    }
}
