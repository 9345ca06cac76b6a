//! The agent's calls to the controller's join service, over HTTPS that trusts only the
//! pinned site CA: the join (token + public key, no client certificate), renewals and
//! signed reports (mutual TLS with the host's certificate). Transient failures are retried
//! (`metal_boot::controller::send`); refusals are not.

use std::time::Duration;

use base64::Engine as _;
use metal_bmc::tls::{TlsTrust, http_client_with_identity};
use metal_boot::controller::{ControllerError, Retry, check_certificate, client_identity, send};
use metal_protocol::boot::{REPORTS_PATH, ReportReceipt};
use metal_protocol::join::{
    HOST_JOIN_PATH, HOST_RENEW_PATH, HostCertificate, HostJoinRequest, HostJoinResponse, HostRenewRequest,
};
use metal_protocol::{Envelope, Role, Signer, SigningKey, VerifiedCertificate};
use serde::Serialize;

const TIMEOUT: Duration = Duration::from_secs(30);

/// A controller, pinned.
#[derive(Debug, Clone)]
pub struct Controller {
    base: reqwest::Url,
    pin: [u8; 32],
    retry: Retry,
}

fn invalid(e: impl std::fmt::Display) -> ControllerError {
    ControllerError::Invalid(e.to_string())
}

fn public_key(key: &SigningKey) -> String {
    base64::engine::general_purpose::STANDARD.encode(key.verifying_key().to_bytes())
}

impl Controller {
    /// The controller at `base_url`, trusting only the CA with fingerprint `pin`.
    pub fn new(base_url: &str, pin: [u8; 32], retry: Retry) -> Result<Self, ControllerError> {
        let base = reqwest::Url::parse(base_url).map_err(|e| invalid(format!("controller URL {base_url:?}: {e}")))?;
        if base.scheme() != "https" {
            return Err(invalid(format!("the controller URL {base_url:?} must be https://")));
        }
        Ok(Self { base, pin, retry })
    }

    fn client(&self, identity: Option<(&SigningKey, &[Vec<u8>])>) -> Result<reqwest::Client, ControllerError> {
        let identity = identity.map(|(key, chain)| client_identity(key, chain)).transpose()?;
        http_client_with_identity(&TlsTrust::CaFingerprint(self.pin), TIMEOUT, identity.as_ref()).map_err(invalid)
    }

    /// Joins with the enrolment `token` for `key`: checks that the certificate chains to the
    /// pinned CA, certifies `key` and is a host's (`node` or `node-tenant`).
    pub fn join(
        &self,
        token: &str,
        key: &SigningKey,
        hostname: &str,
    ) -> Result<(HostJoinResponse, VerifiedCertificate), ControllerError> {
        let request =
            HostJoinRequest { token: token.to_owned(), public_key: public_key(key), hostname: hostname.to_owned() };
        let url = self.base.join(HOST_JOIN_PATH).map_err(invalid)?;
        let client = self.client(None)?;
        let answer: HostJoinResponse = metal_boot::controller::runtime()?.block_on(send(
            || client.post(url.clone()).json(&request),
            "the join",
            &self.retry,
        ))?;
        let verified = self.check(&answer.certificate, key)?;
        Ok((answer, verified))
    }

    /// Checks a host certificate the controller issued for `key`.
    pub fn check(
        &self,
        certificate: &HostCertificate,
        key: &SigningKey,
    ) -> Result<VerifiedCertificate, ControllerError> {
        if !matches!(certificate.role, Role::Node | Role::NodeTenant) {
            return Err(ControllerError::Certificate(format!("a {} certificate is not a host's", certificate.role)));
        }
        let (_, verified) =
            check_certificate(&certificate.certificate_chain, &self.pin, key, certificate.role, &certificate.node_id)?;
        Ok(verified)
    }

    /// Renews the certificate `chain` (of `key`) for the same key.
    pub fn renew(&self, key: &SigningKey, chain: &[Vec<u8>]) -> Result<HostCertificate, ControllerError> {
        let request = HostRenewRequest { public_key: public_key(key) };
        let url = self.base.join(HOST_RENEW_PATH).map_err(invalid)?;
        let client = self.client(Some((key, chain)))?;
        let answer: HostCertificate = metal_boot::controller::runtime()?.block_on(send(
            || client.post(url.clone()).json(&request),
            "the renewal",
            &self.retry,
        ))?;
        self.check(&answer, key)?;
        Ok(answer)
    }

    /// Signs `report` as a DSSE envelope of `payload_type` with the host's key and chain and
    /// posts it over mutual TLS.
    pub fn post_report<T: Serialize>(
        &self,
        key: &SigningKey,
        chain: &[Vec<u8>],
        payload_type: &str,
        report: &T,
    ) -> Result<ReportReceipt, ControllerError> {
        let signer = Signer::new(key.clone(), chain.to_vec());
        let envelope = Envelope::sign_json(payload_type, report, &signer)
            .map_err(|e| invalid(format!("signing the report: {e}")))?;
        let url = self.base.join(REPORTS_PATH).map_err(invalid)?;
        let client = self.client(Some((key, chain)))?;
        metal_boot::controller::runtime()?.block_on(send(
            || client.post(url.clone()).json(&envelope),
            "the report",
            &self.retry,
        ))
    }
}
