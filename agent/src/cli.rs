//! The command line of `metal-agent`: what each subcommand takes and prints.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use metal_boot::controller::Retry;

use crate::state::ConfigDir;
use crate::{AgentError, Joined};

/// metal's host agent: joins the controller with the enrolment token the deploy's seed
/// left in the configuration directory, sets up the networks and storage pools the token
/// names, renews the host's certificate and reports its inventory, signed. Logs go to
/// stderr (METAL_LOG sets the filter).
#[derive(Debug, Parser)]
#[command(name = "metal-agent", version)]
pub struct Cli {
    /// The configuration directory: controller-url, ca.pem, ca.sha256, enrolment-token
    /// from the seed; agent/key.pem and agent/cert.pem after the join.
    #[arg(long, global = true, default_value = metal_protocol::join::CONFIG_DIR)]
    pub config_dir: PathBuf,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Join (once): trade the enrolment token and a new key for a certificate, apply the
    /// setup, report it. A host that already holds a valid certificate keeps it.
    Join {
        /// The name to join as [default: this host's name].
        #[arg(long)]
        hostname: Option<String>,
    },
    /// The service: renew the certificate at two thirds of its life and report the
    /// inventory every interval, until stopped.
    Run {
        /// How often to report the inventory (`30s`, `15m`, `1h`).
        #[arg(long, default_value = "15m", value_parser = parse_interval)]
        report_interval: Duration,
    },
    /// Renew the certificate now.
    Renew,
    /// Report the inventory now.
    Report,
    /// Print the identity this host holds and when its certificate expires.
    Status,
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let n: u64 = number.parse().map_err(|_| format!("{text:?} is not a duration like 30s, 15m or 1h"))?;
    let seconds = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{text:?}: the unit is s, m or h")),
    };
    if seconds == 0 {
        return Err("the interval must be more than 0".into());
    }
    Ok(Duration::from_secs(seconds))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname").map(|h| h.trim().to_owned()).unwrap_or_else(|_| "host".into())
}

/// Runs a parsed command line; returns the exit code.
pub fn run(cli: Cli) -> u8 {
    let config = ConfigDir(cli.config_dir);
    let retry = Retry { attempts: 8, backoff: Duration::from_secs(1) };
    let result: Result<(), AgentError> = match cli.command {
        Command::Join { hostname: name } => {
            let name = name.unwrap_or_else(hostname);
            crate::join(&config, &name, &crate::setup::Host::default(), retry)
                .map(|joined| match joined {
                    Joined::Already(identity) => {
                        println!("already joined as {identity}; keeping it");
                        true
                    }
                    Joined::Now { identity, outcomes, receipt } => {
                        println!("joined as {identity}");
                        for o in &outcomes {
                            println!("  {} {}: {}", if o.applied { "applied" } else { "refused" }, o.item, o.detail);
                        }
                        if let Some(reason) = receipt {
                            println!("the controller says: {reason}");
                        }
                        outcomes.iter().all(|o| o.applied)
                    }
                })
                .and_then(|applied| {
                    if applied {
                        Ok(())
                    } else {
                        Err(AgentError::NotJoined(
                            "the host's setup was refused; it is left out (see its join log)".into(),
                        ))
                    }
                })
        }
        Command::Run { report_interval } => crate::run(&config, report_interval, retry),
        Command::Renew => crate::renew(&config, retry).map(|at| println!("renewed; expires at {at}")),
        Command::Report => crate::report(&config, retry).map(|(accepted, reason)| {
            println!(
                "inventory {}{}",
                if accepted { "accepted" } else { "refused" },
                reason.map(|r| format!(": {r}")).unwrap_or_default()
            )
        }),
        Command::Status => crate::controller(&config, retry).and_then(|(_, ca)| {
            match crate::load_identity(&config, &ca)? {
                Some(identity) => {
                    let expires = time::OffsetDateTime::from(identity.not_after);
                    println!("{} (expires {expires})", identity.certificate.identity.to_uri());
                }
                None => println!("not joined"),
            }
            Ok(())
        }),
    };
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("metal-agent: {e}");
            1
        }
    }
}
