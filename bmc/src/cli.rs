//! Command-line options naming one BMC, shared by the operator tools (`metal-firmware`):
//! protocol, address, user, how to trust its certificate, and where the password comes from
//! (a file, `METAL_BMC_PASSWORD`, or stdin; never the command line).

use std::io::Read as _;
use std::path::PathBuf;

use crate::Bmc;
use crate::error::{BmcError, BmcResult};
use crate::ipmi::{IpmiBmc, IpmiConfig};
use crate::redfish::{RedfishBmc, RedfishConfig, Timing};
use crate::secret::Credential;
use crate::tls::{TlsTrust, parse_fingerprint};

/// Which BMC to talk to.
#[derive(clap::Args, Debug, Clone)]
pub struct BmcArgs {
    /// redfish (the default) or ipmi.
    #[arg(long, value_parser = ["redfish", "ipmi"])]
    pub bmc_protocol: Option<String>,
    /// Redfish: https://host[:port]; IPMI: host[:port] (623).
    #[arg(long, requires = "bmc_user")]
    pub bmc_address: Option<String>,
    /// BMC user.
    #[arg(long, requires = "bmc_address")]
    pub bmc_user: Option<String>,
    /// File holding the password (- is stdin); else METAL_BMC_PASSWORD; else stdin.
    #[arg(long)]
    pub bmc_password_file: Option<PathBuf>,
    /// Trust exactly the certificate with this SHA-256 fingerprint.
    #[arg(long, conflicts_with_all = ["tls_ca", "tls_insecure"])]
    pub tls_fingerprint: Option<String>,
    /// Trust certificates from this CA (PEM file).
    #[arg(long, conflicts_with = "tls_insecure")]
    pub tls_ca: Option<PathBuf>,
    /// Verify nothing (only for BMCs you cannot pin).
    #[arg(long)]
    pub tls_insecure: bool,
}

fn read(path: &PathBuf) -> BmcResult<String> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin().read_to_string(&mut text).map_err(|e| BmcError::Invalid(format!("stdin: {e}")))?;
        Ok(text)
    } else {
        std::fs::read_to_string(path).map_err(|e| BmcError::Invalid(format!("{}: {e}", path.display())))
    }
}

impl BmcArgs {
    fn password(&self) -> BmcResult<String> {
        let text = match (&self.bmc_password_file, std::env::var("METAL_BMC_PASSWORD")) {
            (Some(f), _) => read(f)?,
            (None, Ok(p)) => p,
            (None, Err(_)) => read(&PathBuf::from("-"))?,
        };
        let password = text.trim_end_matches(['\n', '\r']).to_owned();
        if password.is_empty() {
            return Err(BmcError::Invalid(
                "no BMC password (use --bmc-password-file, METAL_BMC_PASSWORD or stdin)".into(),
            ));
        }
        Ok(password)
    }

    fn trust(&self) -> BmcResult<Option<TlsTrust>> {
        Ok(match (&self.tls_fingerprint, &self.tls_ca, self.tls_insecure) {
            (Some(f), _, _) => Some(TlsTrust::Fingerprint(parse_fingerprint(f)?)),
            (_, Some(ca), _) => Some(TlsTrust::Ca(read(ca)?.into_bytes())),
            (_, _, true) => Some(TlsTrust::InsecureSkipVerify),
            _ => None,
        })
    }

    /// Whether a BMC was named (for tools where the BMC is one source among others).
    pub fn given(&self) -> bool {
        self.bmc_address.is_some()
    }

    /// Connects, runs `op` on the BMC and gives the connection's session back, whatever `op`
    /// answered (a one-shot tool must not leave a session slot taken).
    pub async fn session<T>(&self, op: impl AsyncFnOnce(&dyn Bmc) -> T) -> BmcResult<T> {
        let connected = self.connect().await?;
        let out = op(connected.as_ref()).await;
        connected.close().await;
        Ok(out)
    }

    /// Connects.
    pub async fn connect(&self) -> BmcResult<Box<dyn Bmc>> {
        let (Some(address), Some(user)) = (&self.bmc_address, &self.bmc_user) else {
            return Err(BmcError::Invalid("name the BMC with --bmc-address and --bmc-user".into()));
        };
        let credential = Credential::new(user, self.password()?);
        if self.bmc_protocol.as_deref() == Some("ipmi") {
            let (host, port) = match address.rsplit_once(':') {
                Some((h, p)) => (h.to_owned(), p.parse().map_err(|_| BmcError::Invalid("--bmc-address port".into()))?),
                None => (address.clone(), 623),
            };
            return Ok(Box::new(IpmiBmc::new(IpmiConfig::new(host, port, credential))));
        }
        let trust = match self.trust()? {
            Some(t) => t,
            None if address.starts_with("http://") => TlsTrust::InsecureSkipVerify,
            None => {
                return Err(BmcError::Invalid(
                    "say how to trust the BMC: --tls-fingerprint, --tls-ca or --tls-insecure".into(),
                ));
            }
        };
        let config =
            RedfishConfig { endpoint: address.clone(), credential, trust, system: None, timing: Timing::default() };
        Ok(Box::new(RedfishBmc::connect(config).await?))
    }
}
