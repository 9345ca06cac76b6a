//! `metal-firmware` commands: `inventory` (in band, through the BMC, or both), `check
//! --baseline FILE` (a `FirmwareReport`, signed as a DSSE envelope when given the node's
//! key and certificate), `reflash --policy FILE` (the teardown's firmware step) and `bios
//! --baseline FILE [--write]` (the teardown's BIOS steps).
//!
//! Exit codes: 0 compliant (or made compliant, or an inventory printed); 1 drift (check) or
//! quarantine (reflash); 2 bad arguments or INVALID_CONFIG (no baseline); 3 the BMC failed.

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand};
use metal_bmc::cli::BmcArgs;
use metal_protocol::firmware::{FirmwareReport, FirmwareVersion};
use metal_protocol::{Envelope, SigningIdentity};

use crate::reflash::{self, FirmwarePolicy, RemediationError};
use crate::{baseline, bios, image, inband, inventory};

/// Firmware inventory, baseline drift check and reflash through the BMC; BIOS settings and
/// Secure Boot custody.
///
/// Versions are read in band (`--in-band`: DMI, /dev/ipmi0, ethtool, NVMe and GPU sysfs)
/// and/or out of band through the BMC (`--bmc-address`), with components named alike
/// (`bmc`, `bios`, `gpu-vbios`, `nic:<pci>`, `nvme:<serial>`) so one baseline names both;
/// a component reported by both complies only when both agree.
///
/// The BMC password comes from --bmc-password-file, METAL_BMC_PASSWORD or stdin, never the
/// command line.
///
/// Exit codes: 0 compliant (or reflashed, or inventory printed); 1 FIRMWARE_DRIFT (check)
/// or quarantined (reflash); 2 bad arguments or INVALID_CONFIG; 3 the BMC failed.
#[derive(Parser, Debug)]
#[command(name = "metal-firmware", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Where versions are read.
#[derive(Args, Debug)]
struct Sources {
    /// Read this machine's own firmware versions.
    #[arg(long)]
    in_band: bool,
    #[command(flatten)]
    bmc: BmcArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print firmware versions as JSON `[{component, version, source}]`.
    Inventory {
        #[command(flatten)]
        sources: Sources,
    },
    /// Compare versions with a baseline file (JSON `{component: version}`) and print the
    /// FirmwareReport (or, with --key and --cert, the report signed as a DSSE envelope).
    Check {
        #[command(flatten)]
        sources: Sources,
        /// Baseline file.
        #[arg(long)]
        baseline: PathBuf,
        /// Node id to name in the report (with --key, the certificate names it).
        #[arg(long, required_unless_present = "key")]
        node: Option<String>,
        /// Sign the report with this key (PKCS#8 PEM, Ed25519) ...
        #[arg(long, requires = "cert")]
        key: Option<PathBuf>,
        /// ... and this certificate, optionally followed by its chain (PEM, leaf first).
        #[arg(long, requires = "key")]
        cert: Option<PathBuf>,
    },
    /// The teardown's firmware step through the BMC: check against the policy's
    /// firmwareBaseline and, with firmwareRemediation `reflash` and an image for every
    /// drifted component, download and check each image's SHA-256, write them through the
    /// BMC's UpdateService, power-cycle when the BMC asks, and check again. Prints the
    /// outcome with every step; anything short of compliant is a quarantine with a reason.
    Reflash {
        #[command(flatten)]
        bmc: BmcArgs,
        /// Policy file: a pool policy (JSON) with firmwareBaseline, firmwareRemediation and
        /// firmwareImages ({component: {url, sha256}}); other fields are ignored.
        #[arg(long)]
        policy: PathBuf,
        /// Node id to name in the outcome.
        #[arg(long)]
        node: String,
        /// Accept plain http:// image URLs.
        #[arg(long)]
        allow_http: bool,
        /// Trust image servers issued by this CA (PEM). Without it the server certificate is
        /// not verified; the image's pinned SHA-256 is checked either way.
        #[arg(long)]
        image_ca: Option<PathBuf>,
    },
    /// BIOS settings and Secure Boot through the BMC against a baseline file (a pool's
    /// biosBaseline: JSON {"attributes": {NAME: VALUE}, "secureBoot": true,
    /// "resetToDefaults": false}): prints each attribute found and what drifted. With
    /// --write, writes back what drifted (every attribute after the vendor's defaults with
    /// resetToDefaults) for the next boot to apply, as the teardown's bios-reset step does;
    /// run it again without --write after that boot to verify, as bios-verify does.
    Bios {
        #[command(flatten)]
        bmc: BmcArgs,
        /// Baseline file.
        #[arg(long)]
        baseline: PathBuf,
        /// Write what drifted back.
        #[arg(long)]
        write: bool,
    },
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done (compliant, reflashed, inventory printed).
    Ok = 0,
    /// Drift found, or quarantined.
    Drift = 1,
    /// Bad arguments or configuration.
    Invalid = 2,
    /// The BMC failed.
    BmcFailed = 3,
}

/// Logs to stderr (JSON unless stderr is a terminal), filtered by `METAL_LOG`.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("METAL_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() { builder.init() } else { builder.json().init() }
}

fn fail(outcome: Outcome, message: impl std::fmt::Display) -> Outcome {
    eprintln!("metal-firmware: {message}");
    outcome
}

fn bmc_failure(e: metal_bmc::BmcError) -> Outcome {
    let outcome = if matches!(e, metal_bmc::BmcError::Invalid(_)) { Outcome::Invalid } else { Outcome::BmcFailed };
    fail(outcome, e)
}

fn print_json<T: serde::Serialize>(value: &T) {
    println!("{}", serde_json::to_string_pretty(value).unwrap_or_default());
}

fn read_json<T: serde::de::DeserializeOwned>(file: &Path, shape: &str) -> Result<T, Outcome> {
    std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        .map_err(|e| fail(Outcome::Invalid, format!("{}: {e} (expected {shape})", file.display())))
}

fn read_text(file: &Path, what: &str) -> Result<String, Outcome> {
    std::fs::read_to_string(file).map_err(|e| fail(Outcome::Invalid, format!("{what} {}: {e}", file.display())))
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Outcome {
    let result = match cli.command {
        Command::Inventory { sources } => read_sources(&sources).await.map(|versions| {
            print_json(&versions);
            Outcome::Ok
        }),
        Command::Check { sources, baseline, node, key, cert } => check(&sources, &baseline, node, key, cert).await,
        Command::Reflash { bmc, policy, node, allow_http, image_ca } => {
            reflash(&bmc, &policy, &node, allow_http, image_ca.as_deref()).await
        }
        Command::Bios { bmc, baseline, write } => bios(&bmc, &baseline, write).await,
    };
    result.unwrap_or_else(|outcome| outcome)
}

async fn read_sources(sources: &Sources) -> Result<Vec<FirmwareVersion>, Outcome> {
    if !sources.in_band && !sources.bmc.given() {
        return Err(fail(Outcome::Invalid, "name a source: --in-band, --bmc-address ... or both"));
    }
    let mut versions = if sources.in_band { inband::read(&inband::SystemPaths::default()) } else { Vec::new() };
    if sources.bmc.given() {
        let read = sources.bmc.session(async |bmc| inventory::out_of_band(bmc).await).await;
        versions.extend(read.map_err(bmc_failure)?.map_err(bmc_failure)?.versions);
    }
    versions.sort_by(|a, b| a.component.cmp(&b.component));
    Ok(versions)
}

async fn check(
    sources: &Sources,
    baseline_file: &Path,
    node: Option<String>,
    key: Option<PathBuf>,
    cert: Option<PathBuf>,
) -> Result<Outcome, Outcome> {
    let wanted: BTreeMap<String, String> = read_json(baseline_file, "{\"component\": \"version\"}")?;
    // The signing identity is checked before anything is read, and names the node.
    let signing = match (key, cert) {
        (Some(key), Some(cert)) => {
            let identity = SigningIdentity::from_pem(&read_text(&key, "key")?, &read_text(&cert, "certificate")?)
                .map_err(|e| fail(Outcome::Invalid, format!("signing identity: {e}")))?;
            if let Some(node) = &node
                && *node != identity.identity().node
            {
                return Err(fail(
                    Outcome::Invalid,
                    format!("--node {node} differs from the certificate's node {}", identity.identity().node),
                ));
            }
            Some(identity)
        }
        _ => None,
    };
    let node = signing.as_ref().map_or_else(|| node.unwrap_or_default(), |s| s.identity().node.clone());
    let versions = read_sources(sources).await?;
    let report = baseline::check(&node, &versions, Some(&wanted), metal_clock::now_utc())
        .map_err(|e| fail(Outcome::Invalid, e))?;
    match &signing {
        Some(identity) => print_json(
            &Envelope::sign_json(FirmwareReport::PAYLOAD_TYPE, &report, identity.signer())
                .map_err(|e| fail(Outcome::Invalid, format!("signing the report: {e}")))?,
        ),
        None => print_json(&report),
    }
    for line in baseline::drift_lines(&report) {
        eprintln!("FIRMWARE_DRIFT {line}");
    }
    Ok(if report.compliant { Outcome::Ok } else { Outcome::Drift })
}

async fn reflash(
    bmc: &BmcArgs,
    policy_file: &Path,
    node: &str,
    allow_http: bool,
    image_ca: Option<&Path>,
) -> Result<Outcome, Outcome> {
    let policy: FirmwarePolicy =
        read_json(policy_file, "a pool policy with firmwareBaseline, firmwareRemediation, firmwareImages")?;
    let ca_pem = match image_ca {
        Some(file) => Some(read_text(file, "image CA")?.into_bytes()),
        None => None,
    };
    for source in policy.firmware_images.values() {
        image::check_url(&source.url, &image::FetchOptions { allow_http, ..Default::default() })
            .map_err(|e| fail(Outcome::Invalid, e))?;
    }
    let fetch = image::FetchOptions { allow_http, ca_pem, ..Default::default() };
    let remediated = bmc.session(async |bmc| reflash::remediate(bmc, node, &policy, &fetch).await).await;
    match remediated.map_err(bmc_failure)? {
        Ok(outcome) => {
            print_json(&outcome);
            if let Some(reason) = &outcome.reason {
                eprintln!("{}: {reason}", outcome.code.as_str());
            }
            Ok(if outcome.code.passed() {
                Outcome::Ok
            } else if outcome.code == reflash::Code::BmcFailed {
                Outcome::BmcFailed
            } else {
                Outcome::Drift
            })
        }
        Err(RemediationError::Config(e)) => Err(fail(Outcome::Invalid, e)),
        Err(RemediationError::Bmc(e)) => Err(bmc_failure(e)),
    }
}

async fn bios(bmc: &BmcArgs, baseline_file: &Path, write: bool) -> Result<Outcome, Outcome> {
    let baseline: bios::BiosBaseline =
        read_json(baseline_file, "{\"attributes\": {\"NAME\": VALUE}, \"secureBoot\": BOOL}")?;
    if let Some((field, message)) = baseline.problem() {
        return Err(fail(Outcome::Invalid, format!("{}: {field}: {message}", baseline_file.display())));
    }
    let drifted = bmc.session(async |bmc| bios_on(bmc, &baseline, write).await).await.map_err(bmc_failure)??;
    for drift in &drifted {
        eprintln!("BIOS_DRIFT {drift}");
    }
    Ok(if drifted.is_empty() { Outcome::Ok } else { Outcome::Drift })
}

/// Resets (`write`) or checks the BIOS against `baseline`; answers what still drifts.
async fn bios_on(
    connected: &dyn metal_bmc::Bmc,
    baseline: &bios::BiosBaseline,
    write: bool,
) -> Result<Vec<bios::AttributeDrift>, Outcome> {
    Ok(if write {
        let reset = bios::reset(connected, baseline).await.map_err(|e| match e {
            bios::BiosError::Unknown { .. } => fail(Outcome::Invalid, e),
            bios::BiosError::Bmc(e) => bmc_failure(e),
        })?;
        print_json(&reset);
        for drift in &reset.drifted {
            eprintln!("BIOS_DRIFT {drift} (written for the next boot)");
        }
        // Written back is done: the next boot applies it.
        Vec::new()
    } else {
        let check = bios::verify(connected, baseline).await.map_err(bmc_failure)?;
        print_json(&check);
        check.drifted
    })
}
