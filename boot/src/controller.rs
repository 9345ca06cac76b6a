//! Talking to the controller: HTTPS trusting only the site CA whose fingerprint is on the
//! kernel command line; the one-time token exchanged for a short-lived `ramdisk` certificate
//! for a key generated in memory (never written anywhere); later calls authenticated with
//! that certificate (mTLS), images the controller serves itself fetched with it too, and
//! reports signed with it as DSSE envelopes. Transient failures
//! (no connection, 5xx, 429) are retried with backoff; a refusal (4xx, a TLS mismatch) is
//! not.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use metal_bmc::tls::{ClientIdentity, TlsTrust, http_client_with_identity};
use metal_protocol::boot::{JOIN_PATH, JoinRequest, JoinResponse, PLAN_PATH, REPORTS_PATH, ReportReceipt, TaskReport};
use metal_protocol::deploy::DeployPlan;
use metal_protocol::identity::certificates_from_pem;
use metal_protocol::{CaCertificate, Envelope, Role, Signer, SigningIdentity, SigningKey, VerifiedCertificate};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::source::FetchOptions;

/// Why talking to the controller failed.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    /// The command line or the configuration is unusable.
    #[error("{0}")]
    Invalid(String),
    /// The controller refused (an HTTP error status; its message included).
    #[error("the controller refused {what}: HTTP {status}: {message}")]
    Refused {
        /// What was asked.
        what: &'static str,
        /// The status.
        status: u16,
        /// The controller's message.
        message: String,
    },
    /// The controller could not be reached, or TLS failed; after the retries, if any.
    #[error("cannot reach the controller for {what}: {message}")]
    Unreachable {
        /// What was asked.
        what: &'static str,
        /// Why.
        message: String,
    },
    /// The certificate the controller returned does not hold up.
    #[error("the controller's certificate: {0}")]
    Certificate(String),
}

/// Retry policy.
#[derive(Debug, Clone)]
pub struct Retry {
    /// Attempts in all.
    pub attempts: u32,
    /// First delay, doubled each time.
    pub backoff: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Self { attempts: 6, backoff: Duration::from_millis(500) }
    }
}

/// A controller the ramdisk has joined.
#[derive(Debug)]
pub struct Joined {
    base: reqwest::Url,
    pin: [u8; 32],
    client: reqwest::Client,
    identity: SigningIdentity,
    /// The same certificate and key, for mutual TLS on other connections (image fetches).
    tls_identity: Arc<ClientIdentity>,
    retry: Retry,
    runtime: tokio::runtime::Runtime,
}

/// A runtime for the blocking callers (the ramdisk and the host agent are synchronous).
pub fn runtime() -> Result<tokio::runtime::Runtime, ControllerError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| ControllerError::Invalid(format!("cannot start: {e}")))
}

/// Sends the request `build` makes, retrying transient failures, and parses the answer.
pub async fn send<T: DeserializeOwned>(
    build: impl Fn() -> reqwest::RequestBuilder,
    what: &'static str,
    retry: &Retry,
) -> Result<T, ControllerError> {
    let mut last = String::new();
    for attempt in 0..retry.attempts.max(1) {
        if attempt > 0 {
            tokio::time::sleep(retry.backoff * 2u32.saturating_pow(attempt - 1)).await;
            tracing::warn!(what, attempt = attempt + 1, "retrying: {last}");
        }
        match build().send().await {
            Err(e) => {
                let (message, tls) = metal_bmc::http_error::describe(&e);
                if tls {
                    return Err(ControllerError::Unreachable { what, message: format!("TLS: {message}") });
                }
                last = message;
            }
            Ok(response) if metal_bmc::http_error::transient(response.status()) => {
                last = format!("HTTP {}", response.status())
            }
            Ok(response) if !response.status().is_success() => {
                let status = response.status().as_u16();
                let text = response.text().await.unwrap_or_default();
                let message = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_owned))
                    .unwrap_or(text);
                return Err(ControllerError::Refused { what, status, message });
            }
            Ok(response) => {
                return response.json::<T>().await.map_err(|e| ControllerError::Unreachable {
                    what,
                    message: format!("unreadable answer: {}", metal_bmc::http_error::describe(&e).0),
                });
            }
        }
    }
    Err(ControllerError::Unreachable { what, message: format!("gave up after {} attempts: {last}", retry.attempts) })
}

/// Exchanges the one-time `token` for a `ramdisk` certificate from the controller at
/// `base_url`, trusting only the CA with `ca_fingerprint`.
pub fn join(base_url: &str, ca_fingerprint: &str, token: &str, retry: Retry) -> Result<Joined, ControllerError> {
    let base = reqwest::Url::parse(base_url)
        .map_err(|e| ControllerError::Invalid(format!("controller URL {base_url:?}: {e}")))?;
    if base.scheme() != "https" {
        return Err(ControllerError::Invalid(format!("the controller URL {base_url:?} must be https://")));
    }
    let pin = metal_bmc::tls::parse_fingerprint(ca_fingerprint).map_err(|e| ControllerError::Invalid(e.to_string()))?;
    let trust = TlsTrust::CaFingerprint(pin);
    let timeout = Duration::from_secs(30);
    let anonymous =
        http_client_with_identity(&trust, timeout, None).map_err(|e| ControllerError::Invalid(e.to_string()))?;
    let key = SigningKey::generate(&mut rand::rngs::OsRng);
    let request = JoinRequest {
        token: token.to_owned(),
        public_key: base64::engine::general_purpose::STANDARD.encode(key.verifying_key().to_bytes()),
    };
    let runtime = runtime()?;
    let url = base.join(JOIN_PATH).map_err(|e| ControllerError::Invalid(e.to_string()))?;
    let answer: JoinResponse =
        runtime.block_on(send(|| anonymous.post(url.clone()).json(&request), "the join", &retry))?;

    // The certificate must chain to the pinned CA and be ours, of the ramdisk role.
    let (chain, verified) = check_certificate(&answer.certificate_chain, &pin, &key, Role::Ramdisk, &answer.node_id)?;
    let tls_identity = Arc::new(client_identity(&key, &chain)?);
    let client = http_client_with_identity(&trust, timeout, Some(&tls_identity))
        .map_err(|e| ControllerError::Invalid(e.to_string()))?;
    tracing::info!(identity = %verified.identity.to_uri(), expires_at = %answer.expires_at, "joined the controller");
    let identity = SigningIdentity::new(Signer::new(key, chain), verified.identity);
    Ok(Joined { base, pin, client, identity, tls_identity, retry, runtime })
}

/// Checks a certificate chain the controller issued: it includes the CA with fingerprint
/// `pin`, its leaf verifies against that CA now, certifies `key` and names `role` of `node`.
/// Returns the chain (DER, leaf first) and what the leaf says.
pub fn check_certificate(
    chain_pem: &str,
    pin: &[u8; 32],
    key: &SigningKey,
    role: Role,
    node: &str,
) -> Result<(Vec<Vec<u8>>, VerifiedCertificate), ControllerError> {
    let chain = certificates_from_pem(chain_pem).map_err(|e| ControllerError::Certificate(e.to_string()))?;
    let ca_der = chain
        .iter()
        .find(|der| metal_bmc::tls::fingerprint(der) == *pin)
        .ok_or_else(|| ControllerError::Certificate("the chain does not include the pinned site CA".into()))?;
    let ca = CaCertificate::from_der(ca_der).map_err(|e| ControllerError::Certificate(e.to_string()))?;
    let leaf = chain.first().ok_or_else(|| ControllerError::Certificate("an empty chain".into()))?;
    let verified = ca.verify(leaf, metal_clock::now()).map_err(|e| ControllerError::Certificate(e.to_string()))?;
    if verified.public_key != key.verifying_key() {
        return Err(ControllerError::Certificate("it is not for the key that was sent".into()));
    }
    if verified.identity.role != role || verified.identity.node != node {
        return Err(ControllerError::Certificate(format!(
            "it names {}, not a {role} of {node}",
            verified.identity.to_uri()
        )));
    }
    Ok((chain, verified))
}

/// The key and chain as a TLS client identity (mutual TLS).
pub fn client_identity(key: &SigningKey, chain: &[Vec<u8>]) -> Result<ClientIdentity, ControllerError> {
    let key_pkcs8 = zeroize::Zeroizing::new(
        ed25519_dalek::pkcs8::EncodePrivateKey::to_pkcs8_der(key)
            .map_err(|e| ControllerError::Invalid(format!("encoding the key: {e}")))?
            .as_bytes()
            .to_vec(),
    );
    Ok(ClientIdentity { chain: chain.to_vec(), key_pkcs8 })
}

impl Joined {
    /// The identity the certificate names.
    pub fn identity(&self) -> &SigningIdentity {
        &self.identity
    }

    /// Signs `report` as a DSSE envelope of `payload_type` and posts it over mTLS.
    pub fn post_report<T: Serialize>(&self, payload_type: &str, report: &T) -> Result<ReportReceipt, ControllerError> {
        let envelope = Envelope::sign_json(payload_type, report, self.identity.signer())
            .map_err(|e| ControllerError::Invalid(format!("signing the report: {e}")))?;
        let url = self.base.join(REPORTS_PATH).map_err(|e| ControllerError::Invalid(e.to_string()))?;
        self.runtime.block_on(send(|| self.client.post(url.clone()).json(&envelope), "the report", &self.retry))
    }

    /// Asks for a measured-boot challenge for the TPM's `keys` (over mTLS).
    pub fn challenge(
        &self,
        keys: &metal_protocol::measurement::TpmKeys,
    ) -> Result<metal_protocol::measurement::Challenge, ControllerError> {
        let url = self
            .base
            .join(metal_protocol::boot::ATTEST_CHALLENGE_PATH)
            .map_err(|e| ControllerError::Invalid(e.to_string()))?;
        self.runtime.block_on(send(
            || self.client.post(url.clone()).json(keys),
            "the attestation challenge",
            &self.retry,
        ))
    }

    /// Fetches this node's deploy plan (over mTLS) and checks it is self-consistent.
    pub fn fetch_plan(&self) -> Result<DeployPlan, ControllerError> {
        let url = self.base.join(PLAN_PATH).map_err(|e| ControllerError::Invalid(e.to_string()))?;
        let plan: DeployPlan =
            self.runtime.block_on(send(|| self.client.get(url.clone()), "the deploy plan", &self.retry))?;
        plan.validate().map_err(|e| ControllerError::Invalid(format!("the controller's plan: {e}")))?;
        Ok(plan)
    }

    /// Whether `url` is on this controller (same scheme, host and port, under its base
    /// path), where images need the ramdisk's client certificate.
    pub fn serves(&self, url: &str) -> bool {
        reqwest::Url::parse(url)
            .is_ok_and(|u| u.origin() == self.base.origin() && u.path().starts_with(self.base.path()))
    }

    /// How to fetch the image at `url`: trusting the site CA (whatever the server), and
    /// presenting the ramdisk's
    /// certificate only when the controller itself serves it (never to another server).
    pub fn image_fetch(&self, url: &str) -> FetchOptions {
        FetchOptions {
            ca_fingerprint: Some(self.pin),
            identity: self.serves(url).then(|| self.tls_identity.clone()),
            ..FetchOptions::default()
        }
    }

    /// Signs and posts how `task` ended.
    pub fn report_task(&self, task: &str, ok: bool, detail: String) -> Result<ReportReceipt, ControllerError> {
        let report = TaskReport {
            node_id: self.identity.identity().node.clone(),
            task: task.to_owned(),
            ok,
            detail,
            finished_at: metal_clock::now_utc(),
        };
        self.post_report(TaskReport::PAYLOAD_TYPE, &report)
    }
}
