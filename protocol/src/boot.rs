//! What a ramdisk and its controller say to each other. The ramdisk boots with a one-time
//! token and the site CA's fingerprint on its kernel command line; it generates a key in
//! memory and exchanges the token for a short-lived `ramdisk` certificate (`JoinRequest` ->
//! `JoinResponse`), then authenticates every later call with it (mTLS) and signs its reports
//! (DSSE envelopes, `POST /v1/boot/reports`). A deploy fetches its plan
//! (`GET /v1/boot/plan`); every task ends with a signed `TaskReport`, failures included.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Where a ramdisk joins.
pub const JOIN_PATH: &str = "/v1/boot/join";
/// Where a ramdisk posts its signed reports.
pub const REPORTS_PATH: &str = "/v1/boot/reports";
/// Where a ramdisk asks for a measured-boot challenge (`POST`, mutual TLS).
pub const ATTEST_CHALLENGE_PATH: &str = "/v1/boot/attest/challenge";
/// Where a deploying ramdisk fetches its `DeployPlan` (mutual TLS).
pub const PLAN_PATH: &str = "/v1/boot/plan";
/// Images the controller serves to deploying ramdisks (`IMAGES_PATH/ID`, Range supported).
pub const IMAGES_PATH: &str = "/v1/boot/images";

/// A ramdisk asks for its certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinRequest {
    /// The one-time token from the kernel command line (single use, bound to node and task).
    pub token: String,
    /// The ramdisk's Ed25519 public key, base64 of the 32 raw bytes.
    pub public_key: String,
}

impl std::fmt::Display for JoinRequest {
    /// Never shows the token.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "join request for key {}", self.public_key)
    }
}

/// The controller's answer: the certificate for the key, of the node's current generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JoinResponse {
    /// The node the token was issued for.
    pub node_id: String,
    /// The node's identity generation.
    pub generation: u64,
    /// The `ramdisk` certificate, then the site CA (PEM).
    pub certificate_chain: String,
    /// When the certificate expires.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: OffsetDateTime,
}

/// The controller's word on a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReportReceipt {
    /// Whether the report was accepted.
    pub accepted: bool,
    /// Why not, when refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// How a ramdisk task ended, signed like every report (a failure included, so the
/// controller hears why a machine stopped).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskReport {
    /// The node (from the ramdisk's certificate).
    pub node_id: String,
    /// The task (`deploy`, `commission`, ...).
    pub task: String,
    /// Whether it succeeded.
    pub ok: bool,
    /// What happened: the outcome, or the error.
    pub detail: String,
    /// When it ended.
    #[serde(with = "time::serde::rfc3339")]
    pub finished_at: OffsetDateTime,
}

impl TaskReport {
    /// DSSE payload type of a signed task report.
    pub const PAYLOAD_TYPE: &'static str = "application/vnd.metal.task-report+json";
}
