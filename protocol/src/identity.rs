//! Site identity: the site CA, role certificates, and their verification.
//!
//! Every certificate names exactly one identity in a URI SAN,
//! `spiffe://SITE/node/NODE/gen/GENERATION/ROLE`, and is signed directly by the site CA
//! (Ed25519, no intermediates). Verification is strict by construction: the certificate's
//! DER must be exactly `SEQUENCE { tbs, Ed25519 AlgorithmIdentifier, BIT STRING sig }` rebuilt
//! from its own parts, so not one bit outside the signed TBS can change unnoticed.

use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

use ed25519_dalek::pkcs8::{DecodePrivateKey as _, EncodePrivateKey as _};
use ed25519_dalek::{SigningKey, VerifyingKey};
use rand::RngCore as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyIdMethod,
    KeyUsagePurpose, PublicKeyData, SanType, SerialNumber, SignatureAlgorithm,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer as _, GeneralName, ParsedExtension, X509Certificate};
use zeroize::Zeroizing;

/// DER of the AlgorithmIdentifier for Ed25519 (OID 1.3.101.112, no parameters).
const ED25519_ALGORITHM_DER: [u8; 7] = [0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70];
/// Longest node id or site name we accept.
const MAX_NAME_LEN: usize = 64;

/// What a certificate's holder is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// The metal ramdisk booted by the platform (commission, deploy, erase, firmware).
    Ramdisk,
    /// A platform-trusted OS on the node.
    Node,
    /// An OS on a node under tenant-controlled trust: runs as a node, vouches for nothing.
    NodeTenant,
    /// A site agent acting for the control plane.
    Agent,
}

impl Role {
    /// Every role, in a fixed order.
    pub const ALL: [Role; 4] = [Role::Ramdisk, Role::Node, Role::NodeTenant, Role::Agent];

    /// The role's name as it appears in URIs and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Ramdisk => "ramdisk",
            Role::Node => "node",
            Role::NodeTenant => "node-tenant",
            Role::Agent => "agent",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = IdentityError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL.into_iter().find(|r| r.as_str() == s).ok_or_else(|| {
            IdentityError::InvalidName(format!("unknown role {s:?} (expected ramdisk, node, node-tenant or agent)"))
        })
    }
}

/// The identity a role certificate carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Identity {
    /// The site (SPIFFE trust domain) that issued it.
    pub site: String,
    /// The node the certificate speaks for (for `agent`, the agent's name).
    pub node: String,
    /// The node's identity generation when the certificate was issued.
    pub generation: u64,
    /// What the holder is.
    pub role: Role,
}

impl Identity {
    /// The URI SAN form, `spiffe://SITE/node/NODE/gen/N/ROLE`.
    pub fn to_uri(&self) -> String {
        format!("spiffe://{}/node/{}/gen/{}/{}", self.site, self.node, self.generation, self.role)
    }

    /// Parses the URI SAN form, validating every part.
    pub fn parse_uri(uri: &str) -> Result<Self, IdentityError> {
        let bad = || IdentityError::InvalidName(format!("{uri:?} is not spiffe://SITE/node/NODE/gen/N/ROLE"));
        let rest = uri.strip_prefix("spiffe://").ok_or_else(bad)?;
        let parts: Vec<&str> = rest.split('/').collect();
        let [site, "node", node, "gen", generation, role] = parts.as_slice() else {
            return Err(bad());
        };
        validate_name("site", site)?;
        validate_name("node id", node)?;
        let generation = parse_generation(generation).ok_or_else(bad)?;
        Ok(Identity { site: (*site).to_owned(), node: (*node).to_owned(), generation, role: role.parse()? })
    }
}

/// Canonical decimal only: no sign, no leading zeros, so one generation has one spelling.
fn parse_generation(s: &str) -> Option<u64> {
    let canonical = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) && (s == "0" || !s.starts_with('0'));
    canonical.then(|| s.parse().ok()).flatten()
}

/// Site names and node ids: 1 to 64 of `A-Z a-z 0-9 . _ -`, not starting with `.` or `-`.
pub fn validate_name(what: &str, name: &str) -> Result<(), IdentityError> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && !name.starts_with(['.', '-'])
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(IdentityError::InvalidName(format!(
            "{what} {name:?} must be 1 to {MAX_NAME_LEN} characters of A-Z a-z 0-9 . _ - and not start with . or -"
        )))
    }
}

/// Why an identity could not be created, issued or verified.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum IdentityError {
    /// A site, node id, role or URI is not well formed.
    #[error("invalid name: {0}")]
    InvalidName(String),
    /// Key or certificate material could not be read.
    #[error("malformed key or certificate: {0}")]
    Malformed(String),
    /// The certificate was not issued by this site's CA.
    #[error("certificate is not issued by this site's CA: {0}")]
    ForeignCa(String),
    /// The certificate's validity ended before the time it was checked at.
    #[error("certificate expired at {not_after} (checked at {at})")]
    Expired {
        /// End of validity (RFC 3339).
        not_after: String,
        /// The time of the check (RFC 3339).
        at: String,
    },
    /// The certificate's validity starts after the time it was checked at.
    #[error("certificate is not valid before {not_before} (checked at {at})")]
    NotYetValid {
        /// Start of validity (RFC 3339).
        not_before: String,
        /// The time of the check (RFC 3339).
        at: String,
    },
    /// The site CA itself is not valid at the time of the check (a chain is only as valid as
    /// its CA).
    #[error("the site CA is valid from {not_before} to {not_after}, not at {at}")]
    CaNotValid {
        /// Start of the CA's validity (RFC 3339).
        not_before: String,
        /// End of the CA's validity (RFC 3339).
        not_after: String,
        /// The time of the check (RFC 3339).
        at: String,
    },
    /// Issuing a certificate failed.
    #[error("could not issue certificate: {0}")]
    Issue(String),
}

/// An Ed25519 key adapted to rcgen, so certificates are signed by ed25519-dalek (pure Rust).
struct DalekKey<'a>(&'a SigningKey);

impl PublicKeyData for DalekKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0.as_ref().as_bytes()
    }
    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &rcgen::PKCS_ED25519
    }
}

impl rcgen::SigningKey for DalekKey<'_> {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        use ed25519_dalek::Signer as _;
        Ok(self.0.sign(msg).to_bytes().to_vec())
    }
}

/// A bare Ed25519 public key as rcgen's subject key.
struct SubjectKey<'a>(&'a VerifyingKey);

impl PublicKeyData for SubjectKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
    fn algorithm(&self) -> &'static SignatureAlgorithm {
        &rcgen::PKCS_ED25519
    }
}

/// RFC 5280 method 1 style key identifier (truncated SHA-256 of the raw key).
fn key_identifier(key: &VerifyingKey) -> Vec<u8> {
    Sha256::digest(key.as_bytes())[..20].to_vec()
}

fn random_serial() -> SerialNumber {
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes[0] &= 0x7f; // positive INTEGER
    SerialNumber::from_slice(&bytes)
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// The site CA's certificate: the trust anchor every verifier holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaCertificate {
    der: Vec<u8>,
    site: String,
    key: VerifyingKey,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
}

impl CaCertificate {
    /// Reads a CA certificate from DER, checking it is a self-signed Ed25519 site CA.
    pub fn from_der(der: &[u8]) -> Result<Self, IdentityError> {
        let parsed = StrictCert::parse(der)?;
        let cert = &parsed.cert;
        if !cert.is_ca() {
            return Err(IdentityError::Malformed("certificate is not a CA (basicConstraints cA is not set)".into()));
        }
        let key = parsed.public_key()?;
        parsed
            .check_signed_by(&key)
            .map_err(|_| IdentityError::Malformed("CA certificate is not self-signed".into()))?;
        let site = parsed
            .uris()?
            .into_iter()
            .find_map(|u| u.strip_prefix("spiffe://").map(str::to_owned))
            .ok_or_else(|| IdentityError::Malformed("CA certificate names no spiffe:// site".into()))?;
        validate_name("site", &site)?;
        let validity = cert.validity();
        let (not_before, not_after) = (validity.not_before.to_datetime(), validity.not_after.to_datetime());
        Ok(Self { der: der.to_vec(), site, key, not_before, not_after })
    }

    /// The end of the CA's own validity: no certificate it issues outlives it.
    pub fn not_after(&self) -> SystemTime {
        SystemTime::from(self.not_after)
    }

    /// Checks the CA itself is valid at `at`.
    fn check_valid_at(&self, at: OffsetDateTime) -> Result<(), IdentityError> {
        if at < self.not_before || at > self.not_after {
            return Err(IdentityError::CaNotValid {
                not_before: rfc3339(self.not_before),
                not_after: rfc3339(self.not_after),
                at: rfc3339(at),
            });
        }
        Ok(())
    }

    /// Reads a CA certificate from PEM (the first CERTIFICATE block).
    pub fn from_pem(pem: &str) -> Result<Self, IdentityError> {
        let ders = certificates_from_pem(pem)?;
        let first = ders.first().ok_or_else(|| IdentityError::Malformed("no CERTIFICATE block in PEM".into()))?;
        Self::from_der(first)
    }

    /// DER bytes.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// PEM text.
    pub fn pem(&self) -> String {
        pem_encode("CERTIFICATE", &self.der)
    }

    /// The site name (SPIFFE trust domain).
    pub fn site(&self) -> &str {
        &self.site
    }

    /// Hex SHA-256 of the DER: the fingerprint the ramdisk pins on its kernel command line.
    pub fn fingerprint_sha256(&self) -> String {
        hex::encode(Sha256::digest(&self.der))
    }

    /// Verifies a role certificate (DER) against this CA at time `at` and returns its identity
    /// and public key. Refuses foreign, malformed, expired and not-yet-valid certificates.
    pub fn verify(&self, leaf_der: &[u8], at: SystemTime) -> Result<VerifiedCertificate, IdentityError> {
        let parsed = StrictCert::parse(leaf_der)?;
        let cert = &parsed.cert;
        if cert.tbs_certificate.issuer.as_raw() != self.subject_raw()? {
            return Err(IdentityError::ForeignCa(format!("issuer is {}", cert.tbs_certificate.issuer)));
        }
        parsed
            .check_signed_by(&self.key)
            .map_err(|()| IdentityError::ForeignCa("signature does not verify under the site CA key".into()))?;
        if cert.is_ca() {
            return Err(IdentityError::Malformed("a CA certificate cannot be a role certificate".into()));
        }
        let at = OffsetDateTime::from(at);
        let validity = cert.validity();
        let not_before = validity.not_before.to_datetime();
        let not_after = validity.not_after.to_datetime();
        if at < not_before {
            return Err(IdentityError::NotYetValid { not_before: rfc3339(not_before), at: rfc3339(at) });
        }
        if at > not_after {
            return Err(IdentityError::Expired { not_after: rfc3339(not_after), at: rfc3339(at) });
        }
        // Every certificate of the chain must be valid at the time: the CA too.
        self.check_valid_at(at)?;
        let uris = parsed.uris()?;
        let [uri] = uris.as_slice() else {
            return Err(IdentityError::Malformed(format!("expected exactly one URI SAN, found {}", uris.len())));
        };
        let identity = Identity::parse_uri(uri)?;
        if identity.site != self.site {
            return Err(IdentityError::ForeignCa(format!(
                "certificate names site {:?}, this CA is {:?}",
                identity.site, self.site
            )));
        }
        Ok(VerifiedCertificate { identity, public_key: parsed.public_key()?, not_after: SystemTime::from(not_after) })
    }

    /// [`CaCertificate::verify`] as of the certificate's own issue (its notBefore): for
    /// evidence checked offline after its short-lived signer expired. It proves the site CA
    /// issued it, for that identity; not that it was valid when it signed.
    pub fn verify_as_issued(&self, leaf_der: &[u8]) -> Result<VerifiedCertificate, IdentityError> {
        let issued = StrictCert::parse(leaf_der)?.cert.validity().not_before.to_datetime();
        self.verify(leaf_der, SystemTime::from(issued))
    }

    fn subject_raw(&self) -> Result<Vec<u8>, IdentityError> {
        Ok(StrictCert::parse(&self.der)?.cert.tbs_certificate.subject.as_raw().to_vec())
    }
}

/// Reads the identity and public key a role certificate names, WITHOUT checking who issued
/// it. For a signer to learn its own identity from its certificate; never a basis for trust.
pub fn read_unverified(der: &[u8]) -> Result<(Identity, VerifyingKey), IdentityError> {
    let parsed = StrictCert::parse(der)?;
    let uris = parsed.uris()?;
    let [uri] = uris.as_slice() else {
        return Err(IdentityError::Malformed(format!("expected exactly one URI SAN, found {}", uris.len())));
    };
    Ok((Identity::parse_uri(uri)?, parsed.public_key()?))
}

/// What a verified role certificate says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedCertificate {
    /// Its identity.
    pub identity: Identity,
    /// The holder's public key.
    pub public_key: VerifyingKey,
    /// End of validity.
    pub not_after: SystemTime,
}

/// A certificate parsed under our strictness rules.
struct StrictCert<'a> {
    cert: X509Certificate<'a>,
}

impl<'a> StrictCert<'a> {
    fn parse(der: &'a [u8]) -> Result<Self, IdentityError> {
        let (rest, cert) = X509Certificate::from_der(der)
            .map_err(|e| IdentityError::Malformed(format!("not an X.509 certificate: {e}")))?;
        if !rest.is_empty() {
            return Err(IdentityError::Malformed("trailing bytes after the certificate".into()));
        }
        let signature = cert.signature_value.as_ref();
        let tbs = cert.tbs_certificate.as_ref();
        if signature.len() != 64 {
            return Err(IdentityError::Malformed("not an Ed25519 certificate".into()));
        }
        // Rebuild the whole certificate from the signed TBS and the signature: any other byte
        // (algorithm identifiers, unused-bit counts, lengths) then has exactly one allowed value.
        let mut body = tbs.to_vec();
        body.extend_from_slice(&ED25519_ALGORITHM_DER);
        body.extend_from_slice(&[0x03, 0x41, 0x00]);
        body.extend_from_slice(signature);
        if der_sequence(&body) != der {
            return Err(IdentityError::Malformed("certificate is not a canonical Ed25519 certificate".into()));
        }
        if cert.tbs_certificate.signature.algorithm.to_id_string() != "1.3.101.112" {
            return Err(IdentityError::Malformed("TBS signature algorithm is not Ed25519".into()));
        }
        Ok(Self { cert })
    }

    fn public_key(&self) -> Result<VerifyingKey, IdentityError> {
        let spki = self.cert.public_key();
        if spki.algorithm.algorithm.to_id_string() != "1.3.101.112" {
            return Err(IdentityError::Malformed("subject key is not Ed25519".into()));
        }
        let bytes: [u8; 32] = spki
            .subject_public_key
            .as_ref()
            .try_into()
            .map_err(|_| IdentityError::Malformed("Ed25519 key is not 32 bytes".into()))?;
        VerifyingKey::from_bytes(&bytes)
            .map_err(|_| IdentityError::Malformed("Ed25519 key is not a curve point".into()))
    }

    fn check_signed_by(&self, key: &VerifyingKey) -> Result<(), ()> {
        let bytes: [u8; 64] = self.cert.signature_value.as_ref().try_into().map_err(|_| ())?;
        let signature = ed25519_dalek::Signature::from_bytes(&bytes);
        key.verify_strict(self.cert.tbs_certificate.as_ref(), &signature).map_err(|_| ())
    }

    fn uris(&self) -> Result<Vec<&'a str>, IdentityError> {
        let mut uris = Vec::new();
        for ext in self.cert.extensions() {
            match ext.parsed_extension() {
                ParsedExtension::SubjectAlternativeName(san) => {
                    for name in &san.general_names {
                        if let GeneralName::URI(uri) = name {
                            uris.push(*uri);
                        }
                    }
                }
                ParsedExtension::UnsupportedExtension { .. } | ParsedExtension::ParseError { .. } if ext.critical => {
                    return Err(IdentityError::Malformed(format!("unsupported critical extension {}", ext.oid)));
                }
                _ => {}
            }
        }
        Ok(uris)
    }
}

/// DER SEQUENCE header plus content.
fn der_sequence(content: &[u8]) -> Vec<u8> {
    let mut out = vec![0x30];
    let len = content.len();
    if len < 0x80 {
        out.push(u8::try_from(len).unwrap_or(0));
    } else {
        let bytes = len.to_be_bytes();
        let skip = bytes.iter().take_while(|b| **b == 0).count();
        out.push(0x80 | u8::try_from(bytes.len() - skip).unwrap_or(0));
        out.extend_from_slice(&bytes[skip..]);
    }
    out.extend_from_slice(content);
    out
}

/// The site CA with its private key: issues role certificates.
pub struct SiteCa {
    key: SigningKey,
    certificate: CaCertificate,
}

impl fmt::Debug for SiteCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Never print the private key.
        f.debug_struct("SiteCa").field("site", &self.certificate.site).finish_non_exhaustive()
    }
}

impl SiteCa {
    /// Creates a new site CA with a fresh key, valid from `now` for `validity`.
    pub fn create(site: &str, now: SystemTime, validity: Duration) -> Result<Self, IdentityError> {
        validate_name("site", site)?;
        let key = SigningKey::generate(&mut rand::rngs::OsRng);
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, "metal");
        params.distinguished_name.push(DnType::CommonName, format!("metal site CA {site}"));
        params.subject_alt_names = vec![SanType::URI(format!("spiffe://{site}").try_into().map_err(issue_error)?)];
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        params.key_identifier_method = KeyIdMethod::PreSpecified(key_identifier(&key.verifying_key()));
        params.serial_number = Some(random_serial());
        params.not_before = OffsetDateTime::from(now);
        params.not_after = OffsetDateTime::from(now + validity);
        let cert = params.self_signed(&DalekKey(&key)).map_err(issue_error)?;
        let certificate = CaCertificate::from_der(cert.der())?;
        Ok(Self { key, certificate })
    }

    /// Loads a CA from its certificate and PKCS#8 private key (PEM), checking they belong together.
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, IdentityError> {
        let certificate = CaCertificate::from_pem(cert_pem)?;
        let key = SigningKey::from_pkcs8_pem(key_pem).map_err(|e| IdentityError::Malformed(format!("CA key: {e}")))?;
        if key.verifying_key() != certificate.key {
            return Err(IdentityError::Malformed("CA key does not match the CA certificate".into()));
        }
        Ok(Self { key, certificate })
    }

    /// The private key as PKCS#8 PEM (zeroed when dropped).
    pub fn key_pem(&self) -> Result<Zeroizing<String>, IdentityError> {
        signing_key_pem(&self.key)
    }

    /// The CA certificate.
    pub fn certificate(&self) -> &CaCertificate {
        &self.certificate
    }

    /// Issues a role certificate for `subject` (the holder's public key), valid from `now` for
    /// `validity`. Returns DER.
    pub fn issue(
        &self,
        subject: &VerifyingKey,
        node: &str,
        generation: u64,
        role: Role,
        now: SystemTime,
        validity: Duration,
    ) -> Result<Vec<u8>, IdentityError> {
        validate_name("node id", node)?;
        let identity = Identity { site: self.certificate.site.clone(), node: node.to_owned(), generation, role };
        let san = vec![SanType::URI(identity.to_uri().try_into().map_err(issue_error)?)];
        self.sign_leaf(
            subject,
            &format!("{role} {node} gen {generation}"),
            san,
            ExtendedKeyUsagePurpose::ClientAuth,
            now,
            validity,
        )
    }

    /// Signs an end-entity certificate for `subject` with these names and one extended key
    /// usage, valid from `now` for `validity`. Returns DER.
    fn sign_leaf(
        &self,
        subject: &VerifyingKey,
        common_name: &str,
        subject_alt_names: Vec<SanType>,
        usage: ExtendedKeyUsagePurpose,
        now: SystemTime,
        validity: Duration,
    ) -> Result<Vec<u8>, IdentityError> {
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params.distinguished_name.push(DnType::OrganizationName, "metal");
        params.distinguished_name.push(DnType::CommonName, common_name);
        params.subject_alt_names = subject_alt_names;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        params.use_authority_key_identifier_extension = true;
        params.key_identifier_method = KeyIdMethod::PreSpecified(key_identifier(subject));
        params.serial_number = Some(random_serial());
        // Nothing outlives the CA, and nothing is issued by a CA that is not valid now.
        let ca = &self.certificate;
        let (start, end) = (OffsetDateTime::from(now), OffsetDateTime::from(now + validity));
        if start >= ca.not_after {
            return Err(IdentityError::Issue(format!("the site CA expired at {}", rfc3339(ca.not_after))));
        }
        params.not_before = start.max(ca.not_before);
        params.not_after = end.min(ca.not_after);
        let issuer = Issuer::new(self.issuer_params()?, DalekKey(&self.key));
        let cert = params.signed_by(&SubjectKey(subject), &issuer).map_err(issue_error)?;
        Ok(cert.der().to_vec())
    }
}

impl SiteCa {
    /// Issues a TLS server certificate for the controller (`names`: DNS names or IP
    /// addresses, at least one), valid from `now` for `validity`. Ramdisks trust it through
    /// the CA's fingerprint on their kernel command line. Returns DER.
    pub fn issue_server(
        &self,
        subject: &VerifyingKey,
        names: &[String],
        now: SystemTime,
        validity: Duration,
    ) -> Result<Vec<u8>, IdentityError> {
        if names.is_empty() {
            return Err(IdentityError::InvalidName("a server certificate needs at least one name".into()));
        }
        let san = names
            .iter()
            .map(|n| match n.parse::<std::net::IpAddr>() {
                Ok(ip) => Ok(SanType::IpAddress(ip)),
                Err(_) => n.clone().try_into().map(SanType::DnsName).map_err(issue_error),
            })
            .collect::<Result<_, _>>()?;
        self.sign_leaf(
            subject,
            &format!("metal controller {}", names[0]),
            san,
            ExtendedKeyUsagePurpose::ServerAuth,
            now,
            validity,
        )
    }

    /// The CA's subject name and key identifier, rebuilt from its certificate for rcgen.
    fn issuer_params(&self) -> Result<CertificateParams, IdentityError> {
        let parsed = StrictCert::parse(&self.certificate.der)?;
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        for attribute in parsed.cert.subject().iter_attributes() {
            let kind = match attribute.attr_type().to_id_string().as_str() {
                "2.5.4.3" => DnType::CommonName,
                "2.5.4.10" => DnType::OrganizationName,
                other => {
                    return Err(IdentityError::Malformed(format!("CA subject has an unsupported attribute {other}")));
                }
            };
            let value = attribute.as_str().map_err(|e| IdentityError::Malformed(format!("CA subject: {e}")))?;
            params.distinguished_name.push(kind, value);
        }
        params.key_identifier_method = KeyIdMethod::PreSpecified(key_identifier(&self.key.verifying_key()));
        params.key_usages =
            vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        Ok(params)
    }
}

fn issue_error(e: rcgen::Error) -> IdentityError {
    IdentityError::Issue(e.to_string())
}

/// A signing key as PKCS#8 v1 PEM (RFC 5208: the private key alone, which OpenSSL and
/// pyca/cryptography read; v2's attached public key they refuse), zeroed when dropped.
pub fn signing_key_pem(key: &SigningKey) -> Result<Zeroizing<String>, IdentityError> {
    let bytes = ed25519_dalek::pkcs8::KeypairBytes { secret_key: key.to_bytes(), public_key: None };
    bytes.to_pkcs8_pem(Default::default()).map_err(|e| IdentityError::Malformed(format!("encode key: {e}")))
}

/// Reads an Ed25519 signing key from PKCS#8 PEM.
pub fn signing_key_from_pem(pem: &str) -> Result<SigningKey, IdentityError> {
    SigningKey::from_pkcs8_pem(pem).map_err(|e| IdentityError::Malformed(format!("Ed25519 PKCS#8 key: {e}")))
}

/// PEM-encodes DER under `label`.
pub fn pem_encode(label: &str, der: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).unwrap_or_default());
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// Every CERTIFICATE block of a PEM file, as DER, in order (a chain file: leaf first).
pub fn certificates_from_pem(pem: &str) -> Result<Vec<Vec<u8>>, IdentityError> {
    use base64::Engine as _;
    let mut ders = Vec::new();
    let mut lines = pem.lines().map(str::trim);
    while let Some(line) = lines.next() {
        if line != "-----BEGIN CERTIFICATE-----" {
            continue;
        }
        let mut b64 = String::new();
        loop {
            match lines.next() {
                Some("-----END CERTIFICATE-----") => break,
                Some(l) => b64.push_str(l),
                None => {
                    return Err(IdentityError::Malformed("unterminated CERTIFICATE block".into()));
                }
            }
        }
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| IdentityError::Malformed("CERTIFICATE block is not base64".into()))?;
        ders.push(der);
    }
    Ok(ders)
}
/// A loaded signing identity: key, chain, and the identity its certificate names. Reports
/// signed with it can only speak for the node its certificate was issued to.
#[derive(Debug)]
pub struct SigningIdentity {
    signer: crate::Signer,
    identity: Identity,
}

impl SigningIdentity {
    /// Loads a PKCS#8 key and a PEM certificate chain (leaf first) and checks they belong
    /// together. The certificate is not verified against a CA here (the receiver does that).
    pub fn from_pem(key_pem: &str, chain_pem: &str) -> Result<Self, IdentityError> {
        let key = signing_key_from_pem(key_pem)?;
        let chain = certificates_from_pem(chain_pem)?;
        let leaf = chain
            .first()
            .ok_or_else(|| IdentityError::Malformed("the certificate file holds no certificate".into()))?;
        let (identity, public_key) = read_unverified(leaf)?;
        if public_key != key.verifying_key() {
            return Err(IdentityError::Malformed("the key does not belong to the certificate".into()));
        }
        Ok(Self { signer: crate::Signer::new(key, chain), identity })
    }

    /// From an already loaded signer (metal-boot passes its in-memory ramdisk identity).
    pub fn new(signer: crate::Signer, identity: Identity) -> Self {
        Self { signer, identity }
    }

    /// The identity the certificate names.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The signer.
    pub fn signer(&self) -> &crate::Signer {
        &self.signer
    }
}
