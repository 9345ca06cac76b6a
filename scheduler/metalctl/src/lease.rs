//! `metalctl lease`: a lessee's hands on the machines of its live dedicated-root leases
//! (with a tenant member's token; an admin's sees every lease): list them, show one with
//! its events, power it, open its serial console, reinstall it and rescue it. Nothing here reaches the BMC: the scheduler acts
//! through its own BMC session and records who asked.

use clap::Subcommand;
use metalctl::client::{Client, ClientError, RequestBody};
use metalctl::output::{Output, print};
use serde_json::{Value, json};

#[derive(Subcommand, Debug)]
pub enum LeaseCommand {
    /// The machines of your live leases: node, state, power, lease, its end, the profile.
    List,
    /// One leased machine, with your events about it since the lease started.
    Show { node: String },
    /// Power your leased machine: on, off, reset, cycle (answers once the BMC reports the
    /// result), or status. Rate-limited per lease; recorded with your credential.
    Power {
        node: String,
        #[arg(value_parser = ["on", "off", "reset", "cycle", "status"])]
        action: String,
    },
    /// Redeploy your leased machine with a version of one of your profiles (or a public
    /// one; the same version reinstalls it as it was): same machine and lease, a new
    /// identity. Answers once it started; `lease show` follows it. A failed reinstall
    /// leaves the machine `failed` under your lease: reinstall again.
    Reinstall {
        node: String,
        /// PROFILE:VERSION, e.g. web-os:3.
        #[arg(long)]
        profile: String,
    },
    /// Your leased machine's serial console in this terminal (the web console's session:
    /// one writer at a time, recorded with your credential). Keys go to the machine as
    /// typed; Ctrl-] leaves. From a pipe, the input is sent and the session ends once it is
    /// over and the machine has been quiet for --linger seconds.
    Console {
        node: String,
        /// Seconds of quiet after piped input ends before the session closes.
        #[arg(long, default_value_t = 3)]
        linger: u64,
    },
    /// Boot your leased machine into the rescue environment: root over SSH with your keys
    /// (your profile's and your tenant's), sshd and the repair tools (lsblk, mount, chroot,
    /// fsck, mdadm, cryptsetup), on your lease's network, your disks untouched and
    /// mountable. It asks your network's DHCP for its address and prints its SSH host keys
    /// on the serial console (`lease power` and the console stay yours). `unrescue` boots
    /// your disk again.
    Rescue { node: String },
    /// Boot the disk of your machine in a rescue again; it is `deployed` once it booted.
    Unrescue { node: String },
}

const LEASE_COLUMNS: [(&str, &str); 7] = [
    ("NODE", "id"),
    ("STATE", "state"),
    ("POWER", "power"),
    ("LEASE", "reservationId"),
    ("ENDS", "leaseEnd"),
    ("PROFILE", "profileId"),
    ("VERSION", "profileVersion"),
];

const REINSTALL_COLUMNS: [(&str, &str); 5] = [
    ("NODE", "nodeId"),
    ("LEASE", "reservationId"),
    ("PROFILE", "profileId"),
    ("VERSION", "profileVersion"),
    ("WORKFLOW", "workflow"),
];

const RESCUE_COLUMNS: [(&str, &str); 4] =
    [("NODE", "nodeId"), ("LEASE", "reservationId"), ("ACTION", "action"), ("WORKFLOW", "workflow")];

const EVENT_COLUMNS: [(&str, &str); 3] = [("SEQ", "seq"), ("AT", "at"), ("KIND", "kind")];

/// Runs a `lease` command.
pub fn run(client: &Client, out: Output, command: LeaseCommand) -> Result<(), ClientError> {
    match command {
        LeaseCommand::List => print(out, &client.request("GET", "/v1/leases", None)?, &LEASE_COLUMNS),
        LeaseCommand::Show { node } => {
            let leased = client.request("GET", &format!("/v1/nodes/{node}"), None)?;
            print(out, &leased, &LEASE_COLUMNS);
            if out == Output::Table {
                println!();
                print(out, &leased.get("events").cloned().unwrap_or(Value::Array(Vec::new())), &EVENT_COLUMNS);
            }
        }
        LeaseCommand::Power { node, action } => crate::bmc::power(client, out, &node, &action)?,
        LeaseCommand::Reinstall { node, profile } => {
            let (id, version) = crate::image::profile_version(&profile)?;
            let body = json!({"profileId": id, "profileVersion": version});
            let started =
                client.request("POST", &format!("/v1/nodes/{node}/reinstall"), Some(RequestBody::Json(body)))?;
            print(out, &started, &REINSTALL_COLUMNS);
        }
        LeaseCommand::Console { node, linger } => {
            let why = metalctl::console::run(client, &node, std::time::Duration::from_secs(linger))?;
            eprintln!("\r\nmetalctl: console of {node} closed: {why}");
        }
        LeaseCommand::Rescue { node } => rescue(client, out, &node, "rescue")?,
        LeaseCommand::Unrescue { node } => rescue(client, out, &node, "unrescue")?,
    }
    Ok(())
}

/// `POST /v1/nodes/{node}/rescue` or `/unrescue`, and what started.
fn rescue(client: &Client, out: Output, node: &str, action: &str) -> Result<(), ClientError> {
    let started = client.request("POST", &format!("/v1/nodes/{node}/{action}"), None)?;
    print(out, &started, &RESCUE_COLUMNS);
    Ok(())
}
