//! BMC API types: how a node's BMC is reached (the password is write-only), power, boot
//! and virtual media requests and their answers, and discovery.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::error::ApiError;

/// A password in a request: write-only, wiped on drop, never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(pub metal_bmc::Secret);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(***)")
    }
}

impl Password {
    /// Longest password taken.
    pub const MAX_LEN: usize = 128;

    /// 1 to [`Self::MAX_LEN`] characters, or an error naming `field`.
    pub fn check(&self, field: &str) -> Result<(), ApiError> {
        let length = self.0.expose().len();
        if length == 0 || length > Self::MAX_LEN {
            return Err(ApiError::invalid(field, format!("must be 1 to {} characters", Self::MAX_LEN)));
        }
        Ok(())
    }
}

impl<'de> Deserialize<'de> for Password {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(|s| Password(metal_bmc::Secret::new(s)))
    }
}

/// Which protocol the BMC speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BmcProtocol {
    /// Redfish over HTTPS.
    Redfish,
    /// IPMI over LAN (RMCP+), through ipmitool.
    Ipmi,
}

impl BmcProtocol {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            BmcProtocol::Redfish => "redfish",
            BmcProtocol::Ipmi => "ipmi",
        }
    }
}

/// How a Redfish BMC's certificate is trusted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", tag = "mode", content = "value")]
pub enum BmcTls {
    /// Certificates from this CA (PEM); the host name is checked.
    Ca(String),
    /// Exactly the certificate with this SHA-256 fingerprint (hex, colons allowed).
    Fingerprint(String),
    /// No verification (only when asked for, per BMC).
    Insecure,
}

impl BmcTls {
    /// The client's trust setting.
    pub fn trust(&self) -> Result<metal_bmc::tls::TlsTrust, ApiError> {
        use metal_bmc::tls::TlsTrust;
        Ok(match self {
            BmcTls::Ca(pem) => TlsTrust::Ca(pem.as_bytes().to_vec()),
            BmcTls::Fingerprint(f) => TlsTrust::Fingerprint(
                metal_bmc::tls::parse_fingerprint(f).map_err(|e| ApiError::invalid("tls.value", e.to_string()))?,
            ),
            BmcTls::Insecure => TlsTrust::InsecureSkipVerify,
        })
    }
}

/// A username and password.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BmcLogin {
    /// User name.
    pub username: String,
    /// Password (write-only).
    #[schema(value_type = String, write_only)]
    pub password: Password,
}

/// How to reach a node's BMC.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BmcSpec {
    /// Protocol.
    pub protocol: BmcProtocol,
    /// Redfish: `https://host[:port]` (`http://` only on loopback, for emulators). IPMI:
    /// `host[:port]` (port 623 by default).
    pub address: String,
    /// Credential.
    #[serde(flatten)]
    pub login: BmcLogin,
    /// Redfish: how to trust the certificate (required for https).
    #[serde(default)]
    pub tls: Option<BmcTls>,
    /// Redfish: which system (`Id` or `UUID`) when the BMC has several.
    #[serde(default)]
    pub system_id: Option<String>,
    /// IPMI: the session privilege level (administrator by default; operator or user for
    /// accounts limited to those).
    #[serde(default)]
    pub privilege: Option<IpmiPrivilege>,
}

/// IPMI session privilege levels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum IpmiPrivilege {
    /// Administrator.
    Administrator,
    /// Operator.
    Operator,
    /// User.
    User,
}

impl IpmiPrivilege {
    /// ipmitool's name for it.
    pub fn as_str(self) -> &'static str {
        match self {
            IpmiPrivilege::Administrator => "ADMINISTRATOR",
            IpmiPrivilege::Operator => "OPERATOR",
            IpmiPrivilege::User => "USER",
        }
    }

    /// From ipmitool's name.
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Administrator, Self::Operator, Self::User].into_iter().find(|p| p.as_str() == text)
    }
}

fn is_loopback_url(address: &str) -> bool {
    url::Url::parse(address)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .is_some_and(|h| h == "localhost" || h.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback()))
}

/// The longest BMC user name taken, in bytes.
pub const USERNAME_MAX: usize = 64;

impl BmcSpec {
    /// Checks the fields, naming the first one that is wrong.
    pub fn validate(&self) -> Result<(), ApiError> {
        if self.login.username.is_empty() || self.login.username.len() > USERNAME_MAX {
            return Err(ApiError::invalid("username", format!("must be 1 to {USERNAME_MAX} characters")));
        }
        self.login.password.check("password")?;
        match self.protocol {
            BmcProtocol::Redfish => {
                let url = url::Url::parse(&self.address)
                    .map_err(|_| ApiError::invalid("address", "must be a URL such as https://10.0.0.5"))?;
                match url.scheme() {
                    "https" if self.tls.is_none() => {
                        return Err(ApiError::invalid(
                            "tls",
                            "say how to trust this BMC's certificate: ca, fingerprint, or (explicitly) insecure",
                        ));
                    }
                    "https" => {}
                    "http" if is_loopback_url(&self.address) => {}
                    _ => return Err(ApiError::invalid("address", "must be https:// (http:// only on loopback)")),
                }
                if url.host_str().is_none() {
                    return Err(ApiError::invalid("address", "has no host"));
                }
                if let Some(tls) = &self.tls {
                    tls.trust()?;
                }
                if self.privilege.is_some() {
                    return Err(ApiError::invalid("privilege", "only IPMI has session privilege levels"));
                }
            }
            BmcProtocol::Ipmi => {
                ipmi_address(&self.address)?;
                if self.tls.is_some() {
                    return Err(ApiError::invalid("tls", "IPMI has no TLS"));
                }
            }
        }
        Ok(())
    }
}

/// Host and port of an IPMI address (`host[:port]`, 623 by default).
pub fn ipmi_address(address: &str) -> Result<(String, u16), ApiError> {
    let (host, port) = match address.rsplit_once(':') {
        Some((h, p)) => (h, p.parse().map_err(|_| ApiError::invalid("address", "port must be a number"))?),
        None => (address, 623),
    };
    let name = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let host_ok = host.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok()
        || (host.len() <= 253 && host.trim_end_matches('.').split('.').all(name));
    if !host_ok {
        return Err(ApiError::invalid("address", "must be host[:port], the host an IP address or a DNS name"));
    }
    Ok((host.trim_matches(['[', ']']).to_owned(), port))
}

/// A node's BMC as the API shows it (never the password).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BmcInfo {
    /// Node.
    pub node_id: String,
    /// Protocol.
    pub protocol: BmcProtocol,
    /// Address.
    pub address: String,
    /// User name.
    pub username: String,
    /// TLS trust.
    pub tls: Option<BmcTls>,
    /// Selected system.
    pub system_id: Option<String>,
    /// IPMI session privilege level.
    pub privilege: Option<IpmiPrivilege>,
    /// Whether the password is sealed under METAL_MASTER_KEY.
    pub credential_sealed: bool,
    /// Last health the BMC reported.
    pub health: Option<String>,
    /// Generation.
    pub generation: i64,
}

/// Body of a power request.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerRequest {
    /// What to do.
    pub action: metal_bmc::PowerAction,
}

/// What a power request did.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PowerResult {
    /// Power before (`on` or `off`).
    pub before: String,
    /// Power read back after.
    pub after: String,
    /// The BMC commands sent, in order (empty when nothing was needed).
    pub sent: Vec<String>,
}

/// Body of a boot override request.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BootRequest {
    /// Where to boot.
    pub target: metal_bmc::BootTarget,
    /// Every boot until changed (default: the next boot only).
    #[serde(default)]
    pub persistent: bool,
}

/// Body of a virtual media insert.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MediaRequest {
    /// URL of the ISO the BMC fetches.
    pub url: String,
}

/// The virtual CD.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MediaInfo {
    /// Whether an image is inserted.
    pub inserted: bool,
    /// Its URL.
    pub image: Option<String>,
}

/// A discovery scan.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DiscoverRequest {
    /// IPv4 range in CIDR form, private (10/8, 172.16/12, 192.168/16) or loopback, at most
    /// 512 addresses.
    pub range: String,
    /// Redfish port (443).
    #[serde(default)]
    pub port: Option<u16>,
    /// `https` (default) or `http` (loopback emulators only).
    #[serde(default)]
    pub scheme: Option<String>,
    /// At most three credentials, tried in order (BMCs lock accounts after a few failures).
    pub credentials: Vec<BmcLogin>,
    /// How to trust the BMCs' certificates.
    pub tls: BmcTls,
    /// Enrol every BMC a credential opened as a node with that BMC.
    #[serde(default)]
    pub register: bool,
    /// Pool for registered nodes.
    #[serde(default)]
    pub pool_id: Option<String>,
}

/// One BMC found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredBmc {
    /// Its Redfish endpoint.
    pub address: String,
    /// RedfishVersion of its service root.
    pub redfish_version: Option<String>,
    /// The user that authenticated, if any did.
    pub authenticated_as: Option<String>,
    /// System manufacturer, model, serial and UUID when authenticated.
    pub manufacturer: Option<String>,
    /// Model.
    pub model: Option<String>,
    /// Serial.
    pub serial: Option<String>,
    /// System UUID.
    pub uuid: Option<String>,
    /// The node registered for it, when asked to register.
    pub registered_node: Option<String>,
    /// Why it was not authenticated or registered.
    pub note: Option<String>,
}

/// What a scan found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiscoverResult {
    /// Addresses probed.
    pub scanned: usize,
    /// Redfish services found.
    pub found: Vec<DiscoveredBmc>,
}

/// One serial console session (audit).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConsoleSession {
    /// Session id.
    pub id: String,
    /// The credential that opened it.
    pub credential_id: String,
    /// When it opened.
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String)]
    pub started_at: time::OffsetDateTime,
    /// When it ended (none while open).
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>)]
    pub ended_at: Option<time::OffsetDateTime>,
    /// Bytes typed into it.
    pub bytes_in: i64,
    /// Bytes the machine sent.
    pub bytes_out: i64,
}

/// A node's power as its BMC reports it.
#[derive(Debug, Serialize, ToSchema)]
pub struct PowerStatus {
    /// `on` or `off`.
    pub power: String,
}

/// A new BMC password.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RotateRequest {
    /// The new password (write-only).
    #[schema(value_type = String, write_only)]
    pub password: Password,
}
