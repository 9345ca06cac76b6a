//! `metal-firmware` commands: `inventory` (what the BMC reports, named for baselines) and
//! `check --baseline FILE` (a `FirmwareReport` on stdout). Exit codes: 0 compliant (or an
//! inventory printed), 1 FIRMWARE_DRIFT, 2 bad arguments or INVALID_CONFIG (no baseline),
//! 3 the BMC failed.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::{Parser, Subcommand};
use metal_bmc::cli::BmcArgs;

use crate::{baseline, inventory};

/// Firmware inventory and baseline drift check through the BMC.
///
/// The BMC password comes from --bmc-password-file, METAL_BMC_PASSWORD or stdin, never the
/// command line. Reflash arrives with the rest of the firmware issue.
#[derive(Parser, Debug)]
#[command(name = "metal-firmware", version, about, long_about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the firmware the BMC reports, as JSON `[{component, version, source}]`.
    Inventory {
        #[command(flatten)]
        bmc: BmcArgs,
    },
    /// Compare the BMC's inventory with a baseline file (JSON `{component: version}`) and
    /// print the FirmwareReport.
    Check {
        #[command(flatten)]
        bmc: BmcArgs,
        /// Baseline file.
        #[arg(long)]
        baseline: PathBuf,
        /// Node id to name in the report.
        #[arg(long)]
        node: String,
    },
}

/// How a command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done (compliant).
    Ok = 0,
    /// Drift found.
    Drift = 1,
    /// Bad arguments or configuration.
    Invalid = 2,
    /// The BMC failed.
    BmcFailed = 3,
}

fn fail(outcome: Outcome, message: impl std::fmt::Display) -> Outcome {
    eprintln!("metal-firmware: {message}");
    outcome
}

fn bmc_failure(e: metal_bmc::BmcError) -> Outcome {
    let outcome = if matches!(e, metal_bmc::BmcError::Invalid(_)) { Outcome::Invalid } else { Outcome::BmcFailed };
    fail(outcome, e)
}

/// Runs a parsed command line.
pub async fn run(cli: Cli) -> Outcome {
    match cli.command {
        Command::Inventory { bmc } => {
            let versions = match connect_and_read(&bmc).await {
                Ok(v) => v,
                Err(e) => return bmc_failure(e),
            };
            println!("{}", serde_json::to_string_pretty(&versions).unwrap_or_default());
            Outcome::Ok
        }
        Command::Check { bmc, baseline: file, node } => {
            let wanted: BTreeMap<String, String> = match std::fs::read_to_string(&file)
                .map_err(|e| e.to_string())
                .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            {
                Ok(b) => b,
                Err(e) => {
                    return fail(
                        Outcome::Invalid,
                        format!("{}: {e} (expected {{\"component\": \"version\"}})", file.display()),
                    );
                }
            };
            let versions = match connect_and_read(&bmc).await {
                Ok(v) => v,
                Err(e) => return bmc_failure(e),
            };
            let report = match baseline::check(&node, &versions, Some(&wanted), time::OffsetDateTime::now_utc()) {
                Ok(r) => r,
                Err(e) => return fail(Outcome::Invalid, e),
            };
            println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            for line in baseline::drift_lines(&report) {
                eprintln!("FIRMWARE_DRIFT {line}");
            }
            if report.compliant { Outcome::Ok } else { Outcome::Drift }
        }
    }
}

async fn connect_and_read(bmc: &BmcArgs) -> metal_bmc::BmcResult<Vec<metal_protocol::firmware::FirmwareVersion>> {
    inventory::out_of_band(bmc.connect().await?.as_ref()).await
}
