//! Service configuration: defaults, then a TOML file, then `METAL_*` environment variables,
//! then command-line flags, each overriding the one before.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::duration::parse_duration;
use crate::model::node::Deadlines;

/// The effective configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Address the HTTP API listens on.
    pub listen: SocketAddr,
    /// Directory for the embedded database, the admin token and the site CA.
    pub data_dir: PathBuf,
    /// Database URL; `None` is SQLite in the data directory.
    pub database_url: Option<String>,
    /// Time limits of in-progress node states.
    pub deadlines: Deadlines,
    /// How often the reaper looks for overdue work.
    pub reaper_interval: Duration,
    /// How often the workflow engine looks for due steps and queued work.
    pub workflow_interval: Duration,
    /// How long events are kept: older ones are pruned, and a client resuming from before
    /// them is told (410) to list the current state and resume from now.
    pub event_retention: Duration,
    /// How long a workflow claim lasts unless renewed (renewed every third of it): how soon
    /// another replica takes over the runs of one that died.
    pub workflow_claim: Duration,
    /// How often a held claim is renewed, in real time; `None`: every third of
    /// `workflow_claim`. Only a clock that runs faster than real time (metal-sim's) needs
    /// another: its claims last `workflow_claim` on that clock.
    pub workflow_renew: Option<Duration>,
    /// Test hook (`METAL_TEST_CRASH_AT`, environment only): `STEP:before|after,...` aborts
    /// the process there, as `kill -9` would. Unset in production.
    pub test_crash_at: Option<String>,
    /// Seals BMC credentials at rest (`METAL_MASTER_KEY`, environment only).
    pub master_key: Option<crate::secrets::MasterKey>,
    /// The boot service (iPXE scripts, ramdisk files, the ramdisk protocol).
    pub boot: BootConfig,
    /// The image store.
    pub images: ImageConfig,
    /// HTTPS on the API listener.
    pub tls: TlsConfig,
    /// What a lessee may do to its leased machine (power, console, rescue, reinstall) per
    /// lease per minute, burst the same.
    pub lessee_rate_per_minute: u32,
    /// Where the lessee's console SSH gateway listens (`ssh RESERVATION@HOST`); off when
    /// unset.
    pub console_ssh_listen: Option<SocketAddr>,
}

/// The API listener's HTTPS settings, as configured; [`Config::api_transport`] checks them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TlsConfig {
    /// Certificate chain (PEM, the server's certificate first).
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
    /// Names (DNS names or IP addresses) for a certificate the site CA issues and renews.
    pub names: Vec<String>,
    /// Plain HTTP on an address other than loopback, on purpose (bearer tokens in clear).
    pub allow_plain_http: bool,
}

/// How the API listener speaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiTransport {
    /// Plain HTTP (loopback, or allowed explicitly).
    Plain,
    /// HTTPS with the certificate chain and key in these files.
    Files {
        /// The chain.
        cert: PathBuf,
        /// The key.
        key: PathBuf,
    },
    /// HTTPS with a certificate of the site CA for these names.
    SiteCa(Vec<String>),
}

impl Config {
    /// How the API listener speaks, or why the settings cannot stand: half a certificate, two
    /// sources of one, or plain HTTP where bearer tokens would cross a network in clear.
    pub fn api_transport(&self) -> Result<ApiTransport, ConfigError> {
        let tls = &self.tls;
        let transport = match (&tls.cert_file, &tls.key_file, tls.names.is_empty()) {
            (Some(cert), Some(key), true) => ApiTransport::Files { cert: cert.clone(), key: key.clone() },
            (None, None, true) => ApiTransport::Plain,
            (None, None, false) => ApiTransport::SiteCa(tls.names.clone()),
            (Some(_), Some(_), false) => {
                return Err(config_error("tls-names", "give tls-names or tls-cert-file and tls-key-file, not both"));
            }
            (Some(_), None, _) => return Err(config_error("tls-key-file", "tls-cert-file needs its key")),
            (None, Some(_), _) => return Err(config_error("tls-cert-file", "tls-key-file needs its certificate")),
        };
        if transport == ApiTransport::Plain && !self.listen.ip().is_loopback() && !tls.allow_plain_http {
            return Err(config_error(
                "listen",
                format!(
                    "{} is not a loopback address, and plain HTTP would send bearer tokens across the network in \
                     clear: serve HTTPS (tls-names, or tls-cert-file and tls-key-file), or set allow-plain-http = \
                     true to do so on purpose",
                    self.listen
                ),
            ));
        }
        Ok(transport)
    }
}

/// The image store's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageConfig {
    /// Where imported images are kept (default `DATA_DIR/images`; shared storage when several
    /// replicas serve them).
    pub dir: Option<PathBuf>,
    /// The site catalog file (TOML, `[name.arch]` tables of `url` and `checksum-url`); the
    /// shipped catalog of upstream URLs when unset.
    pub catalog: Option<PathBuf>,
    /// Download attempts without progress before an import fails.
    pub attempts: u32,
    /// First retry delay of a download (doubled per attempt, at most a minute).
    pub backoff: Duration,
    /// How long an import's claim lasts without renewal (a restarted or dead replica's
    /// imports are resumed once it lapses).
    pub lease: Duration,
    /// Extra trusted CA certificates (PEM) for image and checksum downloads, beside the
    /// public web roots: a site mirror's own CA.
    pub ca_file: Option<PathBuf>,
}

impl Default for ImageConfig {
    fn default() -> Self {
        Self {
            dir: None,
            catalog: None,
            attempts: 5,
            backoff: Duration::from_secs(2),
            lease: Duration::from_secs(30),
            ca_file: None,
        }
    }
}

/// The boot service's settings. The service is on when `listen` is set.
#[derive(Debug, Clone, PartialEq)]
pub struct BootConfig {
    /// Address of the TLS listener ramdisks join and report on (`None`: boot service off).
    pub listen: Option<SocketAddr>,
    /// Address of a plain-HTTP listener with only the firmware's routes (`/boot/...`: iPXE
    /// and GRUB scripts, ramdisk and installer files behind one-time tokens), for PXE
    /// firmware that cannot speak HTTPS to an HTTPS API.
    pub http_listen: Option<SocketAddr>,
    /// The URL ramdisks reach that listener at (`metal.controller=`); its host is in the
    /// listener's certificate. Default: `https://` + `listen`.
    pub controller_url: Option<String>,
    /// Directory holding the ramdisk's `vmlinuz` and `initrd` (default `DATA_DIR/boot`).
    pub files_dir: Option<PathBuf>,
    /// Enrol unknown MACs that network-boot as new nodes (off by default).
    pub auto_enrol: bool,
    /// How long a one-time ramdisk token stays usable.
    pub token_ttl: Duration,
    /// How long a ramdisk certificate is valid.
    pub certificate_validity: Duration,
    /// How long a deploy's enrolment token stays usable (the write, the reboot and the
    /// first boot must fit in it).
    pub host_token_ttl: Duration,
    /// How long a host's `node` or `node-tenant` certificate is valid (it renews at two
    /// thirds of that).
    pub host_certificate_validity: Duration,
    /// Unauthenticated boot requests allowed per client address per minute (burst the same).
    pub rate_per_minute: u32,
    /// Extra kernel command line for every x86_64 ramdisk (console settings, for instance).
    pub kernel_args: String,
    /// The same for arm64 (Grace-class) machines, whose serial console is a PL011
    /// (`ttyAMA0`), not a 16550 (`ttyS0`).
    pub kernel_args_aarch64: String,
    /// How long a commissioning ramdisk listens for each NIC's LLDP neighbour (`metal.lldp`),
    /// whose switch ports the node then gets; zero (the default) does not listen.
    pub lldp_wait: Duration,
    /// The plain-HTTP URL BMCs fetch per-boot virtual-media ISOs at (the firmware routes:
    /// `boot-http-listen`'s, or the API's when it is plain HTTP). Set, the teardown boots its
    /// ramdisk from virtual media wherever the BMC has it, from `FILES_DIR/media.iso`, the
    /// template `ipxe/build-ipxe-iso.sh --claim-template` builds.
    pub media_url: Option<String>,
    /// PEM file of the TPM makers' CAs (roots and intermediates) that EK certificates must
    /// chain to (measured boot). Set, a node's TPM is registered only with an EK certificate
    /// that chains to one of them; unset, its first EK is trusted on first use.
    pub tpm_ca_file: Option<PathBuf>,
    /// Site name for a CA created on first start (the SPIFFE trust domain).
    pub site: String,
}

impl Default for BootConfig {
    fn default() -> Self {
        Self {
            listen: None,
            http_listen: None,
            controller_url: None,
            files_dir: None,
            auto_enrol: false,
            token_ttl: Duration::from_secs(30 * 60),
            certificate_validity: Duration::from_secs(12 * 3600),
            host_token_ttl: Duration::from_secs(2 * 3600),
            host_certificate_validity: Duration::from_secs(30 * 86400),
            rate_per_minute: 120,
            kernel_args: "console=tty0 console=ttyS0,115200".into(),
            kernel_args_aarch64: "console=tty0 console=ttyAMA0,115200".into(),
            lldp_wait: Duration::ZERO,
            media_url: None,
            tpm_ca_file: None,
            site: "metal".into(),
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 7450)),
            data_dir: PathBuf::from("/var/lib/metal"),
            database_url: None,
            deadlines: Deadlines::default(),
            reaper_interval: Duration::from_secs(30),
            event_retention: Duration::from_secs(30 * 24 * 3600),
            workflow_interval: Duration::from_secs(2),
            workflow_claim: Duration::from_secs(60),
            workflow_renew: None,
            test_crash_at: None,
            master_key: None,
            boot: BootConfig::default(),
            images: ImageConfig::default(),
            tls: TlsConfig::default(),
            lessee_rate_per_minute: 12,
            console_ssh_listen: None,
        }
    }
}

/// The file and environment layer: every field optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ConfigLayer {
    /// `listen = "0.0.0.0:7450"`.
    pub listen: Option<SocketAddr>,
    /// `data-dir = "/var/lib/metal"`.
    pub data_dir: Option<PathBuf>,
    /// `database-url = "postgres://..."`.
    pub database_url: Option<String>,
    /// `commissioning-deadline = "1h"`.
    pub commissioning_deadline: Option<String>,
    /// `deploying-deadline = "2h"`.
    pub deploying_deadline: Option<String>,
    /// `releasing-deadline = "12h"`.
    pub releasing_deadline: Option<String>,
    /// `reaper-interval = "30s"`.
    pub reaper_interval: Option<String>,
    /// `workflow-interval = "2s"`.
    pub workflow_interval: Option<String>,
    /// `event-retention = "30d"`.
    pub event_retention: Option<String>,
    /// `workflow-claim = "60s"`.
    pub workflow_claim: Option<String>,
    /// `METAL_TEST_CRASH_AT`; never read from a file.
    #[serde(skip)]
    pub test_crash_at: Option<String>,
    /// `METAL_MASTER_KEY` (64 hex digits); never read from a file.
    #[serde(skip)]
    pub master_key: Option<String>,
    /// `boot-listen = "0.0.0.0:7451"`: turns the boot service on.
    pub boot_listen: Option<SocketAddr>,
    /// `boot-controller-url = "https://10.0.0.1:7451"`.
    pub boot_controller_url: Option<String>,
    /// `boot-files-dir = "/var/lib/metal/boot"`.
    pub boot_files_dir: Option<PathBuf>,
    /// `boot-auto-enrol = true`.
    pub boot_auto_enrol: Option<bool>,
    /// `boot-token-ttl = "30m"`.
    pub boot_token_ttl: Option<String>,
    /// `boot-certificate-validity = "12h"`.
    pub boot_certificate_validity: Option<String>,
    /// `host-token-ttl = "2h"`.
    pub host_token_ttl: Option<String>,
    /// `host-certificate-validity = "30d"`.
    pub host_certificate_validity: Option<String>,
    /// `boot-rate-limit = 120` (requests per client address per minute).
    pub boot_rate_limit: Option<u32>,
    /// `boot-kernel-args = "console=ttyS0,115200"`.
    pub boot_kernel_args: Option<String>,
    /// `boot-kernel-args-aarch64 = "console=ttyAMA0,115200"` (arm64 machines' ramdisks).
    pub boot_kernel_args_aarch64: Option<String>,
    /// `boot-lldp-wait = "35s"` (commissioning learns switch ports by LLDP).
    pub boot_lldp_wait: Option<String>,
    /// `boot-media-url = "http://10.0.0.1:7451"` (teardowns boot from virtual media).
    pub boot_media_url: Option<String>,
    /// `boot-tpm-ca-file = "/etc/metal/tpm-cas.pem"` (EK certificates must chain to these).
    pub boot_tpm_ca_file: Option<PathBuf>,
    /// `site = "metal"`.
    pub site: Option<String>,
    /// `image-dir = "/var/lib/metal/images"`.
    pub image_dir: Option<PathBuf>,
    /// `image-catalog = "/etc/metal/catalog.toml"`.
    pub image_catalog: Option<PathBuf>,
    /// `image-import-attempts = 5`.
    pub image_import_attempts: Option<u32>,
    /// `image-import-backoff = "2s"`.
    pub image_import_backoff: Option<String>,
    /// `image-import-lease = "30s"`.
    pub image_import_lease: Option<String>,
    /// `image-ca-file = "/etc/metal/mirror-ca.pem"`.
    pub image_ca_file: Option<PathBuf>,
    /// `tls-cert-file = "/etc/metal/api.crt"`.
    pub tls_cert_file: Option<PathBuf>,
    /// `tls-key-file = "/etc/metal/api.key"`.
    pub tls_key_file: Option<PathBuf>,
    /// `tls-names = ["metal.example.org", "10.0.0.1"]` (`METAL_TLS_NAMES`: comma-separated).
    pub tls_names: Option<Vec<String>>,
    /// `allow-plain-http = true`.
    pub allow_plain_http: Option<bool>,
    /// `boot-http-listen = "0.0.0.0:7452"`.
    pub boot_http_listen: Option<SocketAddr>,
    /// `lessee-rate-limit = 12` (a lessee's actions per lease per minute).
    pub lessee_rate_limit: Option<u32>,
    /// `console-ssh-listen = "0.0.0.0:2222"` (the lessee's console over SSH).
    pub console_ssh_listen: Option<SocketAddr>,
}

/// A configuration error, naming the setting.
#[derive(Debug, thiserror::Error)]
#[error("configuration: {setting}: {message}")]
pub struct ConfigError {
    /// The setting (file key or environment variable).
    pub setting: String,
    /// What is wrong.
    pub message: String,
}

/// `v`, or the error that `setting` must be at least 1.
fn at_least_one(setting: &str, v: u32) -> Result<u32, ConfigError> {
    if v == 0 { Err(config_error(setting, "must be at least 1")) } else { Ok(v) }
}

fn config_error(setting: &str, message: impl Into<String>) -> ConfigError {
    ConfigError { setting: setting.to_owned(), message: message.into() }
}

impl ConfigLayer {
    /// Reads a TOML file.
    pub fn from_file(path: &Path) -> Result<Self, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|e| config_error(&path.display().to_string(), e.to_string()))?;
        toml::from_str(&text).map_err(|e| config_error(&path.display().to_string(), e.to_string()))
    }

    /// Reads `METAL_LISTEN`, `METAL_DATA_DIR`, `METAL_DATABASE_URL`, `METAL_*_DEADLINE`,
    /// `METAL_REAPER_INTERVAL` and `METAL_MASTER_KEY` through `get` (the process environment
    /// in production).
    pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let address = |name: &str| {
            get(name)
                .map(|v| v.parse().map_err(|_| config_error(name, format!("{v:?} is not ADDRESS:PORT"))))
                .transpose()
        };
        let flag = |name: &str| {
            get(name)
                .map(|v| match v.as_str() {
                    "1" | "true" => Ok(true),
                    "0" | "false" => Ok(false),
                    _ => Err(config_error(name, format!("{v:?} is not true or false"))),
                })
                .transpose()
        };
        let count = |name: &str| {
            get(name).map(|v| v.parse().map_err(|_| config_error(name, format!("{v:?} is not a count")))).transpose()
        };
        Ok(Self {
            listen: address("METAL_LISTEN")?,
            data_dir: get("METAL_DATA_DIR").map(PathBuf::from),
            database_url: get("METAL_DATABASE_URL"),
            commissioning_deadline: get("METAL_COMMISSIONING_DEADLINE"),
            deploying_deadline: get("METAL_DEPLOYING_DEADLINE"),
            releasing_deadline: get("METAL_RELEASING_DEADLINE"),
            reaper_interval: get("METAL_REAPER_INTERVAL"),
            workflow_interval: get("METAL_WORKFLOW_INTERVAL"),
            event_retention: get("METAL_EVENT_RETENTION"),
            workflow_claim: get("METAL_WORKFLOW_CLAIM"),
            test_crash_at: get("METAL_TEST_CRASH_AT"),
            master_key: get("METAL_MASTER_KEY"),
            boot_listen: address("METAL_BOOT_LISTEN")?,
            boot_controller_url: get("METAL_BOOT_CONTROLLER_URL"),
            boot_files_dir: get("METAL_BOOT_FILES_DIR").map(PathBuf::from),
            boot_auto_enrol: flag("METAL_BOOT_AUTO_ENROL")?,
            boot_token_ttl: get("METAL_BOOT_TOKEN_TTL"),
            boot_certificate_validity: get("METAL_BOOT_CERTIFICATE_VALIDITY"),
            host_token_ttl: get("METAL_HOST_TOKEN_TTL"),
            host_certificate_validity: get("METAL_HOST_CERTIFICATE_VALIDITY"),
            boot_rate_limit: count("METAL_BOOT_RATE_LIMIT")?,
            boot_kernel_args: get("METAL_BOOT_KERNEL_ARGS"),
            boot_kernel_args_aarch64: get("METAL_BOOT_KERNEL_ARGS_AARCH64"),
            boot_lldp_wait: get("METAL_BOOT_LLDP_WAIT"),
            boot_media_url: get("METAL_BOOT_MEDIA_URL"),
            boot_tpm_ca_file: get("METAL_BOOT_TPM_CA_FILE").map(PathBuf::from),
            site: get("METAL_SITE"),
            image_dir: get("METAL_IMAGE_DIR").map(PathBuf::from),
            image_catalog: get("METAL_IMAGE_CATALOG").map(PathBuf::from),
            image_import_attempts: count("METAL_IMAGE_IMPORT_ATTEMPTS")?,
            image_import_backoff: get("METAL_IMAGE_IMPORT_BACKOFF"),
            image_import_lease: get("METAL_IMAGE_IMPORT_LEASE"),
            image_ca_file: get("METAL_IMAGE_CA_FILE").map(PathBuf::from),
            tls_cert_file: get("METAL_TLS_CERT_FILE").map(PathBuf::from),
            tls_key_file: get("METAL_TLS_KEY_FILE").map(PathBuf::from),
            tls_names: get("METAL_TLS_NAMES")
                .map(|v| v.split(',').map(str::trim).filter(|n| !n.is_empty()).map(str::to_owned).collect()),
            allow_plain_http: flag("METAL_ALLOW_PLAIN_HTTP")?,
            boot_http_listen: address("METAL_BOOT_HTTP_LISTEN")?,
            lessee_rate_limit: count("METAL_LESSEE_RATE_LIMIT")?,
            console_ssh_listen: address("METAL_CONSOLE_SSH_LISTEN")?,
        })
    }

    /// Applies this layer over `config`.
    pub fn apply(self, config: &mut Config) -> Result<(), ConfigError> {
        let duration = |setting: &str, v: &str| parse_duration(v).map_err(|e| config_error(setting, e));
        if let Some(v) = self.listen {
            config.listen = v;
        }
        if let Some(v) = self.data_dir {
            config.data_dir = v;
        }
        if let Some(v) = self.database_url {
            config.database_url = Some(v);
        }
        if let Some(v) = self.commissioning_deadline {
            config.deadlines.commissioning = duration("commissioning-deadline", &v)?;
        }
        if let Some(v) = self.deploying_deadline {
            config.deadlines.deploying = duration("deploying-deadline", &v)?;
        }
        if let Some(v) = self.releasing_deadline {
            config.deadlines.releasing = duration("releasing-deadline", &v)?;
        }
        if let Some(v) = self.reaper_interval {
            config.reaper_interval = duration("reaper-interval", &v)?;
        }
        if let Some(v) = self.workflow_interval {
            config.workflow_interval = duration("workflow-interval", &v)?;
        }
        if let Some(v) = self.event_retention {
            config.event_retention = duration("event-retention", &v)?;
            if config.event_retention < Duration::from_secs(3600) {
                return Err(config_error("event-retention", "must be at least 1h (clients resume from it)"));
            }
        }
        if let Some(v) = self.workflow_claim {
            config.workflow_claim = duration("workflow-claim", &v)?;
            if config.workflow_claim < Duration::from_secs(1) {
                return Err(config_error("workflow-claim", "must be at least 1s"));
            }
        }
        if let Some(v) = self.test_crash_at {
            config.test_crash_at = Some(v);
        }
        let boot = &mut config.boot;
        if let Some(v) = self.boot_listen {
            boot.listen = Some(v);
        }
        if let Some(v) = self.boot_http_listen {
            boot.http_listen = Some(v);
        }
        if let Some(v) = self.boot_controller_url {
            if !v.starts_with("https://") {
                return Err(config_error("boot-controller-url", format!("{v:?} must be an https:// URL")));
            }
            boot.controller_url = Some(v.trim_end_matches('/').to_owned());
        }
        if let Some(v) = self.boot_files_dir {
            boot.files_dir = Some(v);
        }
        if let Some(v) = self.boot_auto_enrol {
            boot.auto_enrol = v;
        }
        if let Some(v) = self.boot_token_ttl {
            boot.token_ttl = duration("boot-token-ttl", &v)?;
        }
        if let Some(v) = self.boot_lldp_wait {
            boot.lldp_wait = duration("boot-lldp-wait", &v)?;
        }
        if let Some(v) = self.boot_media_url {
            if !v.starts_with("http://") || v.len() <= "http://".len() {
                return Err(config_error(
                    "boot-media-url",
                    format!("{v:?} must be an http:// URL (the ISO's boot loaders fetch over plain HTTP)"),
                ));
            }
            boot.media_url = Some(v.trim_end_matches('/').to_owned());
        }
        if let Some(v) = self.boot_tpm_ca_file {
            boot.tpm_ca_file = Some(v);
        }
        if let Some(v) = self.boot_certificate_validity {
            boot.certificate_validity = duration("boot-certificate-validity", &v)?;
        }
        if let Some(v) = self.host_token_ttl {
            boot.host_token_ttl = duration("host-token-ttl", &v)?;
        }
        if let Some(v) = self.host_certificate_validity {
            boot.host_certificate_validity = duration("host-certificate-validity", &v)?;
        }
        if let Some(v) = self.boot_rate_limit {
            boot.rate_per_minute = at_least_one("boot-rate-limit", v)?;
        }
        if let Some(v) = self.console_ssh_listen {
            config.console_ssh_listen = Some(v);
        }
        if let Some(v) = self.lessee_rate_limit {
            config.lessee_rate_per_minute = at_least_one("lessee-rate-limit", v)?;
        }
        if let Some(v) = self.boot_kernel_args {
            boot.kernel_args = v;
        }
        if let Some(v) = self.boot_kernel_args_aarch64 {
            boot.kernel_args_aarch64 = v;
        }
        if let Some(v) = self.site {
            metal_protocol::identity::validate_name("site", &v).map_err(|e| config_error("site", e.to_string()))?;
            boot.site = v;
        }
        let images = &mut config.images;
        if let Some(v) = self.image_dir {
            images.dir = Some(v);
        }
        if let Some(v) = self.image_catalog {
            images.catalog = Some(v);
        }
        if let Some(v) = self.image_import_attempts {
            images.attempts = at_least_one("image-import-attempts", v)?;
        }
        if let Some(v) = self.image_import_backoff {
            images.backoff = duration("image-import-backoff", &v)?;
        }
        if let Some(v) = self.image_import_lease {
            images.lease = duration("image-import-lease", &v)?;
        }
        if let Some(v) = self.image_ca_file {
            images.ca_file = Some(v);
        }
        let tls = &mut config.tls;
        if let Some(v) = self.tls_cert_file {
            tls.cert_file = Some(v);
        }
        if let Some(v) = self.tls_key_file {
            tls.key_file = Some(v);
        }
        if let Some(v) = self.tls_names {
            tls.names = v;
        }
        if let Some(v) = self.allow_plain_http {
            tls.allow_plain_http = v;
        }
        if let Some(v) = self.master_key {
            config.master_key =
                Some(crate::secrets::MasterKey::from_hex(&v).map_err(|m| config_error("METAL_MASTER_KEY", m))?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layers_override_in_order_and_errors_name_the_setting() {
        let mut config = Config::default();
        let file: ConfigLayer = toml::from_str("listen = \"0.0.0.0:8000\"\ndeploying-deadline = \"3h\"").unwrap();
        file.apply(&mut config).unwrap();
        let env = ConfigLayer::from_env(|k| (k == "METAL_LISTEN").then(|| "127.0.0.1:9000".to_owned())).unwrap();
        env.apply(&mut config).unwrap();
        assert_eq!(config.listen, "127.0.0.1:9000".parse().unwrap());
        assert_eq!(config.deadlines.deploying, Duration::from_secs(3 * 3600));
        let err = ConfigLayer::from_env(|k| (k == "METAL_LISTEN").then(|| "nope".to_owned())).unwrap_err();
        assert!(err.to_string().contains("METAL_LISTEN"), "{err}");
        assert!(toml::from_str::<ConfigLayer>("lisen = \"x\"").is_err(), "unknown keys are refused");
        let key = ConfigLayer::from_env(|k| (k == "METAL_MASTER_KEY").then(|| "ab".repeat(32))).unwrap();
        key.apply(&mut config).unwrap();
        assert!(config.master_key.is_some());
        let short = ConfigLayer::from_env(|k| (k == "METAL_MASTER_KEY").then(|| "abcd".to_owned())).unwrap();
        let err = short.apply(&mut config).unwrap_err().to_string();
        assert!(err.contains("METAL_MASTER_KEY") && err.contains("32 bytes") && !err.contains("abcd"), "{err}");
        assert!(toml::from_str::<ConfigLayer>("master-key = \"x\"").is_err(), "the key is never read from a file");
        let bad: ConfigLayer = toml::from_str("reaper-interval = \"soon\"").unwrap();
        assert!(bad.apply(&mut config).unwrap_err().to_string().contains("reaper-interval"));
        assert_eq!(config.event_retention, Duration::from_secs(30 * 86400), "a month by default");
        let week = ConfigLayer::from_env(|k| (k == "METAL_EVENT_RETENTION").then(|| "7d".to_owned())).unwrap();
        week.apply(&mut config).unwrap();
        assert_eq!(config.event_retention, Duration::from_secs(7 * 86400));
        let short: ConfigLayer = toml::from_str("event-retention = \"10m\"").unwrap();
        assert!(short.apply(&mut config).unwrap_err().to_string().contains("event-retention"));
    }

    fn transport(file: &str) -> Result<ApiTransport, ConfigError> {
        let mut config = Config::default();
        toml::from_str::<ConfigLayer>(file).unwrap().apply(&mut config).unwrap();
        config.api_transport()
    }

    #[test]
    fn plain_http_beyond_loopback_is_refused_unless_said_on_purpose() {
        assert_eq!(transport("").unwrap(), ApiTransport::Plain, "loopback by default");
        let err = transport("listen = \"0.0.0.0:7450\"").unwrap_err().to_string();
        assert!(err.contains("listen") && err.contains("in clear") && err.contains("allow-plain-http"), "{err}");
        let allowed = transport("listen = \"0.0.0.0:7450\"\nallow-plain-http = true").unwrap();
        assert_eq!(allowed, ApiTransport::Plain);
        let names = transport("listen = \"10.0.0.1:7450\"\ntls-names = [\"metal.example\", \"10.0.0.1\"]").unwrap();
        assert_eq!(names, ApiTransport::SiteCa(vec!["metal.example".into(), "10.0.0.1".into()]));
        let files = transport("tls-cert-file = \"/c\"\ntls-key-file = \"/k\"").unwrap();
        assert_eq!(files, ApiTransport::Files { cert: "/c".into(), key: "/k".into() });
        assert!(transport("tls-cert-file = \"/c\"").unwrap_err().to_string().contains("needs its key"));
        let both = transport("tls-cert-file = \"/c\"\ntls-key-file = \"/k\"\ntls-names = [\"a\"]").unwrap_err();
        assert!(both.to_string().contains("not both"), "{both}");
        let env = ConfigLayer::from_env(|k| match k {
            "METAL_TLS_NAMES" => Some("metal.example, 10.0.0.1".into()),
            "METAL_ALLOW_PLAIN_HTTP" => Some("yes".into()),
            _ => None,
        });
        assert!(env.unwrap_err().to_string().contains("METAL_ALLOW_PLAIN_HTTP"));
        let env = ConfigLayer::from_env(|k| (k == "METAL_TLS_NAMES").then(|| "metal.example, 10.0.0.1".into()));
        let mut config = Config::default();
        env.unwrap().apply(&mut config).unwrap();
        assert_eq!(config.tls.names, ["metal.example", "10.0.0.1"]);
    }
}
