//! `metalctl attest`: measured boot (issue 32). A node's attestations (TPM quotes of its boot
//! PCRs, verified or refused), its baselines (what a teardown compares the erase boot's quote
//! with), an operator's approval of a verified attestation as the new baseline, and the
//! retirement or revocation of one.

use std::path::PathBuf;

use clap::Subcommand;
use metalctl::client::{Client, ClientError, RequestBody, table};
use serde_json::{Value, json};

use metalctl::output::{Output, print};

#[derive(Subcommand, Debug)]
pub enum AttestCommand {
    /// Every attestation received for the node: a TPM quote of its boot PCRs that verified,
    /// or was refused with the rule it broke (-o json for the quoted PCRs).
    List { node: String },
    /// One attestation: its verdict, how it compares with the node's active baselines, and
    /// the events its log measured (-o json for all of it). With --envelope FILE, also
    /// write the signed envelope as the ramdisk posted it, for `metal-boot
    /// verify-attestation` (- is stdout).
    Show {
        node: String,
        attestation: String,
        #[arg(long, value_name = "FILE")]
        envelope: Option<PathBuf>,
    },
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
    /// Take the node's active baseline (its own or its profile's) out of use: that part
    /// compares with nothing until one is learned or approved, so an enforcing pool
    /// quarantines its teardowns meanwhile.
    Retire {
        node: String,
        baseline: String,
        /// Why, on record with your credential.
        #[arg(long)]
        reason: String,
    },
    /// Declare a baseline's measurements bad (a firmware found vulnerable or tampered with):
    /// a quote that repeats them is refused in every mode and never learned again.
    Revoke {
        node: String,
        baseline: String,
        /// Why, on record with your credential.
        #[arg(long)]
        reason: String,
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
            print(out, &client.list(&format!("/v1/nodes/{node}/attestations"), &[], None)?, &ATTESTATION_COLUMNS)
        }
        AttestCommand::Show { node, attestation, envelope } => {
            let path = format!("/v1/nodes/{node}/attestations/{attestation}");
            let detail = client.request("GET", &path, None)?;
            if let Some(file) = envelope {
                let signed = client.request("GET", &format!("{path}/envelope"), None)?;
                let text = serde_json::to_string(&signed).unwrap_or_default();
                if file.as_os_str() == "-" {
                    println!("{text}");
                } else {
                    std::fs::write(&file, text).map_err(|e| ClientError::Config(format!("{}: {e}", file.display())))?;
                }
            }
            match out {
                Output::Json => print(out, &detail, &[]),
                Output::Table => print!("{}", summary(&detail)),
            }
        }
        AttestCommand::Baselines { node } => {
            print(out, &client.request("GET", &format!("/v1/nodes/{node}/boot-baselines"), None)?, &BASELINE_COLUMNS)
        }
        AttestCommand::Approve { node, attestation, scope } => {
            let body = RequestBody::Json(json!({"attestationId": attestation, "scope": scope}));
            let baseline = client.request("POST", &format!("/v1/nodes/{node}/boot-baselines"), Some(body))?;
            print(out, &baseline, &BASELINE_COLUMNS);
        }
        AttestCommand::Retire { node, baseline, reason } => end(client, out, &node, &baseline, "retire", &reason)?,
        AttestCommand::Revoke { node, baseline, reason } => end(client, out, &node, &baseline, "revoke", &reason)?,
    }
    Ok(())
}

fn end(client: &Client, out: Output, node: &str, baseline: &str, verb: &str, reason: &str) -> Result<(), ClientError> {
    let body = RequestBody::Json(json!({"reason": reason}));
    let ended = client.request("POST", &format!("/v1/nodes/{node}/boot-baselines/{baseline}/{verb}"), Some(body))?;
    print(out, &ended, &BASELINE_COLUMNS);
    Ok(())
}

const EVENT_COLUMNS: [(&str, &str); 4] =
    [("EVENT", "number"), ("PCR", "pcr"), ("TYPE", "eventType"), ("SHA256", "sha256")];

/// An attestation as lines a person reads: the verdict, each comparison, then the events.
fn summary(detail: &Value) -> String {
    let record = &detail["record"];
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let mut out = match record["verified"].as_bool() {
        Some(true) => format!("{}: verified, received {}\n", text(&record["id"]), text(&record["receivedAt"])),
        _ => format!("{}: refused: {}: {}\n", text(&record["id"]), text(&record["code"]), text(&record["reason"])),
    };
    for comparison in detail["comparisons"].as_array().into_iter().flatten() {
        let verdict = comparison["difference"].as_str().map_or_else(|| "matches".to_owned(), str::to_owned);
        let pcrs = comparison["pcrs"].as_array().map(|p| p.iter().map(Value::to_string).collect::<Vec<_>>());
        out.push_str(&format!(
            "against the {} baseline {} (PCRs {}): {verdict}\n",
            text(&comparison["scope"]),
            text(&comparison["baselineId"]),
            pcrs.unwrap_or_default().join(",")
        ));
    }
    let events = detail["events"].as_array().cloned().unwrap_or_default();
    out + &table(&events, &EVENT_COLUMNS)
}
