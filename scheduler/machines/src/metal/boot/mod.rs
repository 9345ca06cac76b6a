//! The boot service. On the plain HTTP API: the iPXE script a network-booting machine asks
//! for and the ramdisk files (`ipxe`), and the per-boot ISOs of virtual-media boots (`media`). On its own TLS listener, whose certificate the site CA
//! issues: the ramdisk protocol (`ramdisk`), where the ramdisk pins the CA by the
//! fingerprint on its kernel command line and authenticates with the certificate it joined
//! for; and the join service (`hosts`), where a deployed OS becomes a host. Unauthenticated requests are rate-limited per client address (`crate::ratelimit`).
//! The work is here, as functions of the request's values; the HTTP shells (routes,
//! extractors, the TLS listener) are metal-api's `boot_service` and `firmware`.

pub mod attest;
pub mod claims;
pub mod cpio;
pub mod digests;
pub mod hosts;
pub mod ipxe;
pub mod media;
pub mod ramdisk;
pub mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use metal_protocol::SiteCa;
use tracing::info;

use crate::app::{App, StartError};
use crate::ca_files;
use metal_types::config::Config;
use metal_types::error::ApiError;

/// Directory of the site CA inside the data directory.
pub const CA_DIR: &str = "ca";

/// The boot service's state.
#[derive(Debug)]
pub struct BootService {
    /// The site CA: issues ramdisk certificates and the listener's own.
    pub ca: Arc<SiteCa>,
    /// What ramdisks are told to reach (`metal.controller=`).
    pub controller_url: String,
    /// SHA-256 of the site CA certificate, hex (`metal.ca=`).
    pub ca_fingerprint: String,
    /// Where `vmlinuz` and `initrd` are.
    pub files_dir: PathBuf,
    /// The listener's address (its IP is in the certificate too, when it is a specific one).
    pub listen: SocketAddr,
    /// Per-address limits on the unauthenticated endpoints.
    pub limiter: crate::ratelimit::RateLimiter,
    /// Digests of the served files (`metal-agent`'s), computed once per version.
    pub digests: digests::FileDigests,
    /// The virtual-media template, when `boot-media-url` is set: teardowns then boot their
    /// ramdisk from per-boot ISOs wherever the BMC has virtual media.
    pub media: Option<media::MediaTemplate>,
    /// The TPM makers' CAs (DER) an EK certificate must chain to, when `boot-tpm-ca-file`
    /// is set; empty: a node's first EK is trusted on first use.
    pub tpm_cas: Vec<Vec<u8>>,
}

impl BootService {
    /// The service when `boot-listen` is set: loads the site CA from `DATA_DIR/ca`, creating
    /// it on first start.
    pub fn open(config: &Config) -> Result<Option<BootService>, StartError> {
        let Some(listen) = config.boot.listen else { return Ok(None) };
        let controller_url = match &config.boot.controller_url {
            Some(url) => url.clone(),
            None if listen.ip().is_unspecified() => {
                return Err(StartError::Boot(format!(
                    "boot-listen {listen} listens on every address: set boot-controller-url to the one ramdisks reach"
                )));
            }
            None => format!("https://{listen}"),
        };
        let dir = config.data_dir.join(CA_DIR);
        let (ca, created) =
            ca_files::open_or_init(&dir, &config.boot.site).map_err(|e| StartError::Boot(e.to_string()))?;
        if created {
            info!(dir = %dir.display(), "created the site CA");
        }
        let ca_fingerprint = ca.certificate().fingerprint_sha256();
        let files_dir = config.boot.files_dir.clone().unwrap_or_else(|| config.data_dir.join("boot"));
        let media = match &config.boot.media_url {
            Some(url) => {
                Some(media::MediaTemplate::load(&files_dir.join(media::TEMPLATE), url).map_err(StartError::Boot)?)
            }
            None => None,
        };
        let tpm_cas = match &config.boot.tpm_ca_file {
            Some(file) => {
                let read = std::fs::read_to_string(file)
                    .map_err(|e| e.to_string())
                    .and_then(|pem| metal_protocol::identity::certificates_from_pem(&pem).map_err(|e| e.to_string()));
                match read {
                    Ok(cas) if !cas.is_empty() => cas,
                    Ok(_) => {
                        return Err(StartError::Boot(format!("boot-tpm-ca-file {}: no certificate", file.display())));
                    }
                    Err(e) => return Err(StartError::Boot(format!("boot-tpm-ca-file {}: {e}", file.display()))),
                }
            }
            None => Vec::new(),
        };
        info!(%controller_url, ca_fingerprint, virtual_media = media.is_some(), tpm_cas = tpm_cas.len(), "boot service on");
        Ok(Some(BootService {
            ca: Arc::new(ca),
            controller_url,
            ca_fingerprint,
            files_dir,
            listen,
            limiter: crate::ratelimit::RateLimiter::new(config.boot.rate_per_minute, "boot requests from"),
            digests: digests::FileDigests::default(),
            media,
            tpm_cas,
        }))
    }

    /// The running service, or NOT_FOUND when it is off.
    pub fn of(app: &App) -> Result<&BootService, ApiError> {
        app.boot.as_ref().ok_or_else(|| ApiError::NotFound("boot service (set boot-listen to turn it on)".into()))
    }

    /// The names the listener's certificate carries: the controller URL's host, and the
    /// listen address when it is a specific one.
    pub fn certificate_names(&self) -> Vec<String> {
        let host = self.controller_url.trim_start_matches("https://").split('/').next().unwrap_or_default();
        let host = match host.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => host.rsplit_once(':').map_or(host, |(h, _)| h),
        };
        let mut names = vec![host.to_owned()];
        let ip = self.listen.ip().to_string();
        if !self.listen.ip().is_unspecified() && ip != host {
            names.push(ip);
        }
        names
    }
}

/// The client certificate a TLS connection presented, if any.
#[derive(Debug, Clone)]
pub struct Peer(pub Option<Vec<u8>>);
