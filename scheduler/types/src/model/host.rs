//! Hosts: the OS a deploy wrote, once it has joined over the pinned site CA with its
//! enrolment token (`protocol::join`), and the join log of each node.

use std::collections::BTreeMap;

use metal_protocol::join::HostSetup;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Where a host's join stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum HostState {
    /// The certificate is issued; the host has not reported its setup yet.
    Joining,
    /// Joined: certificate issued and every setup item applied.
    Joined,
    /// Its setup was refused (nothing of it applied): the host is left out.
    Failed,
}

impl HostState {
    /// Name in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            HostState::Joining => "joining",
            HostState::Joined => "joined",
            HostState::Failed => "failed",
        }
    }
}

impl std::str::FromStr for HostState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        [HostState::Joining, HostState::Joined, HostState::Failed]
            .into_iter()
            .find(|h| h.as_str() == s)
            .ok_or_else(|| format!("unknown host state {s:?}"))
    }
}

/// A joined OS: one per node, of the node's current identity generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Host {
    /// The node (the host's id is its node's).
    pub node_id: String,
    /// Where its join stands.
    pub state: HostState,
    /// The certificate's role: `node`, or `node-tenant` under tenant-controlled trust.
    pub role: String,
    /// The identity generation its certificate is of.
    pub identity_generation: i64,
    /// The name it gave itself.
    pub hostname: String,
    /// The site.
    pub site: String,
    /// The node's rack (its `rack` label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    /// The node's labels when it joined.
    pub tags: BTreeMap<String, String>,
    /// The profile it was deployed with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<String>,
    /// That profile's version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_version: Option<i64>,
    /// Id of the enrolment token it joined with (never the token).
    pub enrolment_token: String,
    /// What the token asked it to set up.
    pub setup: HostSetup,
    /// The Ed25519 public key (base64) its current certificate certifies; only that key
    /// speaks for the host.
    pub public_key: String,
    /// When its certificate expires.
    #[serde(with = "time::serde::rfc3339")]
    pub certificate_expires_at: time::OffsetDateTime,
    /// When it joined.
    #[serde(with = "time::serde::rfc3339")]
    pub joined_at: time::OffsetDateTime,
    /// When it last renewed its certificate.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "time::serde::rfc3339::option")]
    pub renewed_at: Option<time::OffsetDateTime>,
    /// Row generation (bumped by every change).
    pub generation: i64,
}

/// One step of a node's joins, as it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinLogEntry {
    /// Position in the node's log (from 1).
    pub seq: i64,
    /// The node's identity generation then.
    pub identity_generation: i64,
    /// When.
    #[serde(with = "time::serde::rfc3339")]
    pub at: time::OffsetDateTime,
    /// What: `token`, `certificate`, `network/NAME`, `pool/NAME`, `bootstrap/STAGE`,
    /// `renewal`, `joined`.
    pub step: String,
    /// Whether it went through.
    pub ok: bool,
    /// What was done, or why not.
    pub detail: String,
}

/// An operator's enrolment of a machine that already runs an OS (`metalctl host add`, the
/// offline bundle).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EnrolmentCreate {
    /// The node the machine is (enrolled already; `new`, or `deployed` to join it again).
    pub node_id: String,
    /// What the host sets up after it joins.
    #[serde(default)]
    pub setup: HostSetup,
    /// How long the token stays usable (`30m`, `2h`; default the service's host-token-ttl).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

/// An enrolment: the single-use token (shown only here, once) and what a host needs to join
/// with it over the pinned site CA. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Enrolment {
    /// The token's id (what the host record and the join log name).
    pub id: String,
    /// The node.
    pub node_id: String,
    /// The single-use enrolment token.
    pub token: String,
    /// When it stops being accepted.
    #[serde(with = "time::serde::rfc3339")]
    pub expires_at: time::OffsetDateTime,
    /// The boot listener's URL (where the host joins).
    pub controller_url: String,
    /// The site CA certificate (PEM).
    pub ca_pem: String,
    /// Its SHA-256 fingerprint (the pin).
    pub ca_fingerprint: String,
    /// SHA-256 of the join script the boot listener serves.
    pub install_sha256: String,
}

/// What a host needs to join this controller, but the token: the boot listener, the pinned
/// site CA and the join script's digest (for the offline bundle).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct JoinInfo {
    /// The boot listener's URL (where hosts join).
    pub controller_url: String,
    /// The site CA certificate (PEM).
    pub ca_pem: String,
    /// Its SHA-256 fingerprint (the pin).
    pub ca_fingerprint: String,
    /// SHA-256 of the join script the boot listener serves.
    pub install_sha256: String,
}

impl std::fmt::Debug for Enrolment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Enrolment")
            .field("id", &self.id)
            .field("node_id", &self.node_id)
            .field("token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}
