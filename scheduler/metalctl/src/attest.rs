//! `metalctl attest`: measured boot (issue 32). A node's attestations (TPM quotes of its boot
//! PCRs, verified or refused), its baselines (what a teardown compares the erase boot's quote
//! with) and an operator's approval of a verified attestation as the new baseline.

use clap::Subcommand;
use metalctl::client::{Client, ClientError, RequestBody};
use serde_json::json;

use metalctl::output::{Output, print};

#[derive(Subcommand, Debug)]
pub enum AttestCommand {
    /// Every attestation received for the node: a TPM quote of its boot PCRs that verified,
    /// or was refused with the rule it broke (-o json for the quoted PCRs).
    List { node: String },
    /// The node's baselines, newest first: the active one and those it replaced.
    Baselines { node: String },
    /// Make a verified attestation of the node its own baseline, or with --scope profile its
    /// hardware profile's at the firmware its pool names (qualifying that firmware for every
    /// machine of the profile); the active one becomes obsolete. Only for a machine known
    /// good: a teardown that quarantined on a PCR difference passes once the differing quote
    /// is approved.
    Approve {
        node: String,
        attestation: String,
        /// node (the node's own PCRs) or profile (the firmware's, for the whole profile).
        #[arg(long, default_value = "node", value_parser = ["node", "profile"])]
        scope: String,
    },
}

const ATTESTATION_COLUMNS: [(&str, &str); 6] = [
    ("ID", "id"),
    ("RECEIVED", "receivedAt"),
    ("GENERATION", "identityGeneration"),
    ("VERIFIED", "verified"),
    ("CODE", "code"),
    ("REASON", "reason"),
];

const BASELINE_COLUMNS: [(&str, &str); 7] = [
    ("ID", "id"),
    ("SCOPE", "scope"),
    ("FIRMWARE", "firmware"),
    ("STATE", "state"),
    ("ATTESTATION", "attestationId"),
    ("LEARNED BY", "learnedBy"),
    ("CREATED", "createdAt"),
];

pub fn run(client: &Client, out: Output, command: AttestCommand) -> Result<(), ClientError> {
    match command {
        AttestCommand::List { node } => {
            print(out, &client.request("GET", &format!("/v1/nodes/{node}/attestations"), None)?, &ATTESTATION_COLUMNS)
        }
        AttestCommand::Baselines { node } => {
            print(out, &client.request("GET", &format!("/v1/nodes/{node}/boot-baselines"), None)?, &BASELINE_COLUMNS)
        }
        AttestCommand::Approve { node, attestation, scope } => {
            let body = RequestBody::Json(json!({"attestationId": attestation, "scope": scope}));
            let baseline = client.request("POST", &format!("/v1/nodes/{node}/boot-baselines"), Some(body))?;
            print(out, &baseline, &BASELINE_COLUMNS);
        }
    }
    Ok(())
}
