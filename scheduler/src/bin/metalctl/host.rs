//! `metalctl host`: the deployed OSes that joined as hosts, and each node's join log.

use clap::Subcommand;
use metal_scheduler::client::{Client, ClientError};

use super::{Output, print};

const HOST_COLUMNS: [(&str, &str); 7] = [
    ("NODE", "nodeId"),
    ("STATE", "state"),
    ("ROLE", "role"),
    ("GENERATION", "identityGeneration"),
    ("HOSTNAME", "hostname"),
    ("RACK", "rack"),
    ("CERTIFICATE EXPIRES", "certificateExpiresAt"),
];

const LOG_COLUMNS: [(&str, &str); 5] =
    [("#", "seq"), ("AT", "at"), ("STEP", "step"), ("OK", "ok"), ("DETAIL", "detail")];

#[derive(Subcommand, Debug)]
pub enum HostCommand {
    /// List hosts: nodes whose OS joined (joining, joined, or failed and left out).
    List,
    /// One host: its site, rack, tags, profile, setup and certificate.
    Show { id: String },
    /// A node's join log: every token, certificate, network and pool applied or refused,
    /// first boots that stopped, renewals.
    Log { id: String },
}

/// Runs a `metalctl host` command.
pub fn run_host(client: &Client, out: Output, command: HostCommand) -> Result<(), ClientError> {
    match command {
        HostCommand::List => print(out, &client.request("GET", "/v1/hosts", None)?, &HOST_COLUMNS),
        HostCommand::Show { id } => {
            let host = client.request("GET", &format!("/v1/hosts/{id}"), None)?;
            match out {
                Output::Json => print(out, &host, &[]),
                Output::Table => {
                    for (k, v) in host.as_object().into_iter().flatten() {
                        let text =
                            if v.is_string() { v.as_str().unwrap_or_default().to_owned() } else { v.to_string() };
                        println!("{k:<22} {text}");
                    }
                }
            }
        }
        HostCommand::Log { id } => {
            print(out, &client.request("GET", &format!("/v1/hosts/{id}/join-log"), None)?, &LOG_COLUMNS)
        }
    }
    Ok(())
}
