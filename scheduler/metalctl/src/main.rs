//! `metalctl`: parses the command line and dispatches to the scheduler's HTTP API.

mod attest;
mod bmc;
mod host;
mod image;
mod lease;
mod switch;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use metalctl::client::{Client, ClientConfig, ClientError, RequestBody, Transport, config_path, table};
use metalctl::output::{Output, print, read_input};
use serde_json::{Value, json};

/// Command-line client of the metal-scheduler HTTP API.
///
/// The server URL comes from --url, METAL_URL or `url` in the config file
/// (~/.config/metal/metalctl.toml, or METALCTL_CONFIG); the token from --token-file,
/// METAL_TOKEN or `token-file` in the config file. Tokens never go on the command line.
#[derive(Parser, Debug)]
#[command(name = "metalctl", version, about, long_about)]
struct Cli {
    /// Scheduler URL, e.g. http://127.0.0.1:7450.
    #[arg(long, env = "METAL_URL", global = true, help_heading = "Global options")]
    url: Option<String>,
    /// File holding the bearer token.
    #[arg(long, global = true, help_heading = "Global options")]
    token_file: Option<PathBuf>,
    /// CA certificates (PEM) the server's HTTPS certificate must chain to, e.g. the site CA's
    /// DATA_DIR/ca/ca.crt [config: ca-file; default: the public web roots].
    #[arg(long, global = true, help_heading = "Global options", conflicts_with = "ca_fingerprint")]
    ca_file: Option<PathBuf>,
    /// SHA-256 fingerprint of the CA in the server's certificate chain (the site CA's, as
    /// `metal-scheduler ca init` printed it) [config: ca-fingerprint].
    #[arg(long, global = true, help_heading = "Global options")]
    ca_fingerprint: Option<String>,
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Output::Table, global = true, help_heading = "Global options")]
    output: Output,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Nodes: enrol, import, list, show, move along the lifecycle, maintenance and cordon.
    #[command(subcommand)]
    Node(NodeCommand),
    /// A node's BMC: settings, power, boot override, virtual media, readings, rotation,
    /// discovery.
    #[command(subcommand)]
    Bmc(bmc::BmcCommand),
    /// Measured boot: a node's TPM attestations and baselines, and approving a baseline.
    #[command(subcommand)]
    Attest(attest::AttestCommand),
    /// Switches and node ports: tenant isolation on the switch.
    #[command(subcommand)]
    Switch(switch::SwitchCommand),
    /// Tenants.
    #[command(subcommand)]
    Tenant(TenantCommand),
    /// API credentials.
    #[command(subcommand)]
    Credential(CredentialCommand),
    /// Pools: create, offer, list with capacity.
    #[command(subcommand)]
    Pool(PoolCommand),
    /// Your leased machines (a tenant member's token): list, show, power.
    #[command(subcommand)]
    Lease(lease::LeaseCommand),
    /// Reservations: create (whole-node placement), list, show, cancel, release.
    #[command(subcommand)]
    Reservation(ReservationCommand),
    /// Images: import once (by URL and checksum, or catalog name), list, promote, delete.
    #[command(subcommand)]
    Image(image::ImageCommand),
    /// Profiles: what a machine of a kind gets, in immutable versions.
    #[command(subcommand)]
    Profile(image::ProfileCommand),
    /// Hosts: deployed OSes that joined, and each node's join log.
    #[command(subcommand)]
    Host(host::HostCommand),
    /// Allocate and deploy machines with a profile version, all or nothing.
    Provision {
        /// PROFILE:VERSION, e.g. web:2.
        profile: String,
        /// How many machines.
        #[arg(long, default_value_t = 1)]
        count: u32,
    },
    /// Metered usage of a tenant over a time range (quantities in hours, to four decimals in
    /// the table; exact in -o json).
    Usage {
        /// Tenant: your own by default for a tenant member; platform admins must name one.
        #[arg(long)]
        tenant: Option<String>,
        /// Windows starting at or after (RFC 3339).
        #[arg(long)]
        from: Option<String>,
        /// Windows starting before (RFC 3339).
        #[arg(long)]
        to: Option<String>,
    },
    /// Events after a sequence number (with --follow, wait for more until interrupted).
    Events {
        /// Start after this sequence number.
        #[arg(long, default_value_t = 0)]
        after: i64,
        /// Keep waiting for new events.
        #[arg(long)]
        follow: bool,
    },
}

#[derive(Subcommand, Debug)]
enum NodeCommand {
    /// List nodes (every page, unless --limit).
    List {
        /// Only nodes in this state.
        #[arg(long)]
        state: Option<String>,
        /// Only nodes of this pool.
        #[arg(long)]
        pool: Option<String>,
        /// Only nodes held by this tenant's reservations.
        #[arg(long)]
        tenant: Option<String>,
        /// Only nodes with these labels: key=value, comma-separated (rack=r1,gpu=h200).
        #[arg(long)]
        label: Option<String>,
        /// At most this many nodes.
        #[arg(long)]
        limit: Option<u32>,
    },
    /// Show one node.
    Show { id: String },
    /// Enrol one node.
    Enrol {
        id: String,
        /// Boot NIC MAC.
        #[arg(long)]
        boot_mac: Option<String>,
        /// Label key=value (repeatable), e.g. rack=r1.
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Vec<String>,
        /// Taint key=value:NoSchedule (repeatable).
        #[arg(long = "taint")]
        taints: Vec<String>,
        /// Bookable devices class=count (repeatable), e.g. gpu=8.
        #[arg(long = "devices", value_name = "CLASS=COUNT")]
        devices: Vec<String>,
    },
    /// Enrol many nodes from a CSV or JSON file (- is stdin); nodes that exist are skipped.
    #[command(long_about = import_help())]
    Import {
        /// The CSV or JSON file, or - for stdin.
        file: PathBuf,
    },
    /// Move a node from one lifecycle state to another (compare-and-set: refused when the node
    /// is not in --from, or the move is not allowed).
    #[command(after_long_help = metal_types::model::node::moves_help())]
    Move {
        /// The node id.
        id: String,
        /// The state you believe it is in.
        #[arg(long, value_parser = state_names())]
        from: String,
        /// The state to move it to.
        #[arg(long, value_parser = state_names())]
        to: String,
        /// Who drives the new state (required for commissioning, deploying, releasing).
        #[arg(long)]
        owner: Option<String>,
        /// Why.
        #[arg(long)]
        reason: Option<String>,
    },
    /// Run the tenant-root teardown of a quarantined (failed) tenant-root node again, from
    /// its first step. Maintenance stays on; turn it off once the node is ready again.
    Recover { id: String },
    /// A node's tenant-root teardowns with their evidence: every step, its result and times.
    Teardowns { id: String },
    /// Turn maintenance on or off.
    Maintenance {
        id: String,
        #[arg(value_parser = ["on", "off"])]
        mode: String,
    },
    /// Cordon or uncordon.
    Cordon {
        id: String,
        #[arg(value_parser = ["on", "off"])]
        mode: String,
    },
    /// Replace a node's labels, taints or pool (each flag given replaces that whole set).
    Set {
        id: String,
        /// Label key=value (repeatable; replaces all labels).
        #[arg(long = "label", value_name = "KEY=VALUE")]
        labels: Option<Vec<String>>,
        /// Taint key=value:NoSchedule (repeatable; replaces all taints; --taint '' clears).
        #[arg(long = "taint")]
        taints: Option<Vec<String>>,
        /// Pool ('' takes the node out of its pool).
        #[arg(long)]
        pool: Option<String>,
    },
    /// The platform inventory its last commissioning reported (disks in a table; -o json for all).
    Inventory { id: String },
    /// Every wipe report received for the node: accepted, or refused with the rule it broke.
    WipeReports { id: String },
    /// Set the deploy plan (a DeployPlan JSON file, e.g. from `metal-boot plan`; - is stdin) its
    /// ramdisk fetches when it next deploys.
    DeployPlan { id: String, file: PathBuf },
}

#[derive(Subcommand, Debug)]
enum TenantCommand {
    /// List tenants.
    List,
    /// Create a tenant.
    Create {
        id: String,
        #[arg(long)]
        name: Option<String>,
    },
    /// Delete a tenant: its live reservations end (leased machines are torn down and return
    /// to ready), the machines of its own pools are retired, its credentials are revoked.
    Delete { id: String },
    /// The SSH keys that reach the serial console of the tenant's leased machines over the
    /// console gateway (beside its profiles' keys): show them, or --set them from a file of
    /// OpenSSH public key lines (- is stdin; an empty file removes them all).
    SshKeys {
        id: String,
        #[arg(long)]
        set: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum CredentialCommand {
    /// Create a credential; its token is printed once (store it in a file).
    Create {
        /// platform-admin or tenant-member.
        #[arg(long)]
        role: String,
        /// Tenant of a tenant member.
        #[arg(long)]
        tenant: Option<String>,
        /// A name to recognise it by.
        #[arg(long)]
        name: String,
    },
    /// List credentials (never their tokens).
    List,
    /// Revoke a credential: its token stops working at once.
    Revoke { id: String },
}

#[derive(Subcommand, Debug)]
enum PoolCommand {
    /// List pools.
    List,
    /// Create a pool from a JSON body file (as in the API: tenantId, siteId, class, policy); - is stdin.
    Create { file: PathBuf },
    /// Offer a pool to a tenant.
    Offer {
        pool: String,
        #[arg(long)]
        tenant: String,
    },
}

#[derive(Subcommand, Debug)]
enum ReservationCommand {
    /// List reservations.
    List,
    /// Show one reservation.
    Show { id: String },
    /// Create a reservation.
    Create {
        /// The lessee.
        #[arg(long)]
        tenant: String,
        /// Pool.
        #[arg(long)]
        pool: String,
        /// Devices per node, class=count (repeatable), e.g. gpu=8.
        #[arg(long = "devices", value_name = "CLASS=COUNT")]
        devices: Vec<String>,
        /// Lease length, e.g. 7d.
        #[arg(long)]
        duration: String,
        /// `now` or an RFC 3339 time.
        #[arg(long)]
        start: Option<String>,
        /// Whole-node dedicated-root lease deploying this profile (profile-id:version).
        #[arg(long, value_name = "PROFILE:VERSION")]
        node_profile: Option<String>,
        /// Gang of N nodes sharing one value of a label, N:KEY (e.g. 4:rack).
        #[arg(long, value_name = "N:KEY")]
        gang: Option<String>,
        /// The machines' architecture (aarch64: Grace-class). Unset, a node binding's
        /// profile image decides; machines commissioned before nodes recorded one count as
        /// x86_64.
        #[arg(long = "arch", value_parser = ["x86_64", "aarch64"])]
        architecture: Option<String>,
        /// Idempotency key (retries with the same key replay the first answer).
        #[arg(long)]
        idempotency_key: Option<String>,
    },
    /// Cancel a reservation.
    Cancel { id: String },
    /// Release an active lease early (a node binding's node is then torn down).
    Release { id: String },
}

const TENANT_DELETED_COLUMNS: [(&str, &str); 3] =
    [("TENANT", "tenantId"), ("RESERVATIONS ENDED", "reservations"), ("POOLS RETIRED", "pools")];

const TEARDOWN_COLUMNS: [(&str, &str); 6] = [
    ("RUN", "id"),
    ("DEFINITION", "definition"),
    ("STATUS", "status"),
    ("STEP", "stepIndex"),
    ("CREATED", "createdAt"),
    ("LAST ERROR", "lastError"),
];

const STEP_COLUMNS: [(&str, &str); 5] =
    [("STEP", "step"), ("RESULT", "result"), ("ATTEMPT", "attempt"), ("FINISHED", "finishedAt"), ("FENCE", "fence")];

const RESERVATION_COLUMNS: [(&str, &str); 7] = [
    ("ID", "id"),
    ("TENANT", "tenantId"),
    ("POOL", "poolId"),
    ("STATE", "state"),
    ("START", "start"),
    ("END", "end"),
    ("NODES", "nodes"),
];
const POOL_COLUMNS: [(&str, &str); 6] = [
    ("ID", "id"),
    ("TENANT", "tenantId"),
    ("SITE", "siteId"),
    ("CLASS", "class"),
    ("OFFERED TO", "offeredTo"),
    ("CAPACITY", "capacity"),
];

const DISK_COLUMNS: [(&str, &str); 5] =
    [("NAME", "name"), ("SERIAL", "serial"), ("MODEL", "model"), ("BYTES", "size"), ("TRANSPORT", "transport")];

const WIPE_COLUMNS: [(&str, &str); 5] = [
    ("RECEIVED", "receivedAt"),
    ("ACCEPTED", "accepted"),
    ("CODE", "code"),
    ("REASON", "reason"),
    ("SIGNER", "signer"),
];

const NODE_COLUMNS: [(&str, &str); 11] = [
    ("ID", "id"),
    ("STATE", "state"),
    ("POWER", "power"),
    ("MAINT", "maintenance"),
    ("CORDON", "cordoned"),
    ("TRUST", "trust"),
    ("POOL", "poolId"),
    ("DEVICES", "deviceSummary"),
    ("ARCH", "architecture"),
    ("RESERVATION", "heldBy"),
    ("LABELS", "labels"),
];

/// A node's devices in a word per class: `gpu=8`, or `gpu=6/8` when two are unhealthy.
fn device_summary(node: &Value) -> String {
    let mut classes: std::collections::BTreeMap<String, (u32, u32)> = Default::default();
    for device in node["devices"].as_array().into_iter().flatten() {
        let entry = classes.entry(device["class"].as_str().unwrap_or("?").to_owned()).or_default();
        entry.1 += 1;
        if device["healthy"] == true {
            entry.0 += 1;
        }
    }
    let words: Vec<String> = classes
        .into_iter()
        .map(
            |(class, (healthy, all))| {
                if healthy == all { format!("{class}={all}") } else { format!("{class}={healthy}/{all}") }
            },
        )
        .collect();
    if words.is_empty() { "-".into() } else { words.join(" ") }
}

/// Prints nodes (one or a list) with their device summary.
fn print_nodes(out: Output, value: &Value) {
    let with_summary = |node: &Value| {
        let mut node = node.clone();
        node["deviceSummary"] = json!(device_summary(&node));
        node
    };
    match (out, value) {
        (Output::Json, v) => print(out, v, &[]),
        (Output::Table, Value::Array(nodes)) => {
            print(out, &Value::Array(nodes.iter().map(with_summary).collect()), &NODE_COLUMNS)
        }
        (Output::Table, node) => print(out, &with_summary(node), &NODE_COLUMNS),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("metalctl: {e}");
            ExitCode::FAILURE
        }
    }
}

fn connect(cli: &Cli) -> Result<Client, ClientError> {
    let file: ClientConfig = match config_path().filter(|p| p.exists()) {
        Some(path) => {
            let text =
                std::fs::read_to_string(&path).map_err(|e| ClientError::Config(format!("{}: {e}", path.display())))?;
            toml::from_str(&text).map_err(|e| ClientError::Config(format!("{}: {e}", path.display())))?
        }
        None => ClientConfig::default(),
    };
    let url = cli
        .url
        .clone()
        .or(file.url)
        .ok_or_else(|| ClientError::Config("no server: pass --url or set METAL_URL".into()))?;
    let token = match cli.token_file.clone().or(file.token_file) {
        Some(path) => std::fs::read_to_string(&path)
            .map_err(|e| ClientError::Config(format!("token file {}: {e}", path.display())))?,
        None => std::env::var("METAL_TOKEN")
            .map_err(|_| ClientError::Config("no token: pass --token-file or set METAL_TOKEN".into()))?,
    };
    let (ca_file, ca_fingerprint) = match (&cli.ca_file, &cli.ca_fingerprint) {
        (None, None) => (file.ca_file, file.ca_fingerprint),
        (flag_file, flag_pin) => (flag_file.clone(), flag_pin.clone()),
    };
    let mut transport = Transport::new(ca_file.as_deref(), ca_fingerprint.as_deref())?;
    transport.allow_plain_http = file.allow_plain_http;
    Client::new(&url, &token, &transport)
}

/// A quantity of hours as people read it: four decimals, trailing zeros dropped.
fn hours(quantity: f64) -> String {
    let text = format!("{quantity:.4}");
    let text = text.trim_end_matches('0').trim_end_matches('.');
    if text == "-0" { "0".into() } else { text.to_owned() }
}

/// `node import --help`: the CSV columns the server takes.
fn import_help() -> String {
    format!(
        "Enrol many nodes from a CSV or JSON file (- is stdin); nodes that exist are skipped, and any invalid \
         entry rejects the whole import.\n\nCSV: a header row, then one node a line, cells separated by commas \
         (a cell with a comma is double-quoted). Columns: {}. labels are key=value;key=value, taints \
         key=value:Effect;..., devices class=count;..., bmcTls insecure or fingerprint=HEX.\n\nJSON: an array of \
         nodes as POST /v1/nodes takes them, each with an optional bmc as `bmc set` takes it.",
        metal_types::model::node::CSV_COLUMNS.join(", ")
    )
}

/// The lifecycle states, as the command line takes them.
fn state_names() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(metal_types::model::node::NodeState::ALL.map(|s| s.as_str()))
}

fn key_values(items: &[String], what: &str) -> Result<serde_json::Map<String, Value>, ClientError> {
    items
        .iter()
        .map(|kv| {
            kv.split_once('=')
                .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                .ok_or_else(|| ClientError::Config(format!("{what} {kv:?} is not key=value")))
        })
        .collect()
}

/// A file's text, or stdin's for `-`.
/// PATCHes a node's attributes and prints the result.
fn patch_node(client: &Client, out: Output, id: &str, body: Value) -> Result<(), ClientError> {
    print_nodes(out, &client.request("PATCH", &format!("/v1/nodes/{id}"), Some(RequestBody::Json(body)))?);
    Ok(())
}

fn run(cli: Cli) -> Result<(), ClientError> {
    let client = connect(&cli)?;
    let out = cli.output;
    match cli.command {
        Command::Node(NodeCommand::List { state, pool, tenant, label, limit }) => {
            let filters = [("state", state), ("pool", pool), ("tenant", tenant), ("label", label)];
            let query: Vec<(&str, String)> =
                filters.into_iter().filter_map(|(name, value)| value.map(|v| (name, v))).collect();
            print_nodes(out, &client.list("/v1/nodes", &query, limit)?);
        }
        Command::Node(NodeCommand::Show { id }) => {
            let node = client.request("GET", &format!("/v1/nodes/{id}"), None)?;
            match out {
                Output::Json => print(out, &node, &[]),
                Output::Table => {
                    for (k, v) in node.as_object().into_iter().flatten().filter(|(k, _)| *k != "devices") {
                        println!(
                            "{k:<20} {}",
                            if v.is_string() { v.as_str().unwrap_or_default().to_owned() } else { v.to_string() }
                        );
                    }
                    println!("{:<20} {}\n", "devices", device_summary(&node));
                    print(out, &node["devices"], &[("DEVICE", "id"), ("CLASS", "class"), ("HEALTHY", "healthy")]);
                }
            }
        }
        Command::Node(NodeCommand::Enrol { id, boot_mac, labels, taints, devices }) => {
            let mut atoms = Vec::new();
            for (class, count) in key_values(&devices, "devices")? {
                let count: u32 = count
                    .as_str()
                    .unwrap_or("")
                    .parse()
                    .map_err(|_| ClientError::Config(format!("devices {class}: count is not a number")))?;
                atoms.extend((0..count).map(|i| json!({"id": format!("{class}{i}"), "class": class, "healthy": true})));
            }
            let body = json!({"id": id, "bootMac": boot_mac, "labels": key_values(&labels, "label")?, "taints": taints, "devices": atoms});
            print_nodes(out, &client.request("POST", "/v1/nodes", Some(RequestBody::Json(body)))?);
        }
        Command::Node(NodeCommand::Import { file }) => {
            let text = read_input(&file)?;
            let body = match serde_json::from_str::<Value>(&text) {
                Ok(json) => RequestBody::Json(json),
                Err(_) => RequestBody::Csv(text),
            };
            let result = client.request("POST", "/v1/nodes/import", Some(body))?;
            match out {
                Output::Json => print(out, &result, &[]),
                Output::Table => {
                    println!("created: {}", result["created"].as_array().map(Vec::len).unwrap_or(0));
                    for s in result["skipped"].as_array().into_iter().flatten() {
                        println!("skipped {}: {}", s["id"].as_str().unwrap_or("?"), s["reason"].as_str().unwrap_or(""));
                    }
                }
            }
        }
        Command::Node(NodeCommand::Recover { id }) => {
            print_nodes(out, &client.request("POST", &format!("/v1/nodes/{id}/recover"), None)?);
        }
        Command::Node(NodeCommand::Teardowns { id }) => {
            let runs = client.list(&format!("/v1/nodes/{id}/teardowns"), &[], None)?;
            match out {
                Output::Json => print(out, &runs, &[]),
                Output::Table => {
                    for run in runs.as_array().into_iter().flatten() {
                        print!("{}", table(std::slice::from_ref(run), &TEARDOWN_COLUMNS));
                        let history = run["history"].as_array().cloned().unwrap_or_default();
                        println!("{}", table(&history, &STEP_COLUMNS));
                    }
                }
            }
        }
        Command::Node(NodeCommand::Move { id, from, to, owner, reason }) => {
            let body = json!({"from": from, "to": to, "owner": owner, "reason": reason});
            print_nodes(
                out,
                &client.request("POST", &format!("/v1/nodes/{id}/transitions"), Some(RequestBody::Json(body)))?,
            );
        }
        Command::Node(NodeCommand::Maintenance { id, mode }) => {
            patch_node(&client, out, &id, json!({"maintenance": mode == "on"}))?;
        }
        Command::Node(NodeCommand::Cordon { id, mode }) => {
            patch_node(&client, out, &id, json!({"cordoned": mode == "on"}))?;
        }
        Command::Node(NodeCommand::Set { id, labels, taints, pool }) => {
            let mut body = json!({});
            if let Some(labels) = labels {
                body["labels"] = Value::Object(key_values(&labels, "label")?);
            }
            if let Some(taints) = taints {
                body["taints"] = json!(taints.into_iter().filter(|t| !t.is_empty()).collect::<Vec<_>>());
            }
            if let Some(pool) = pool {
                body["poolId"] = json!(pool);
            }
            patch_node(&client, out, &id, body)?;
        }
        Command::Node(NodeCommand::Inventory { id }) => {
            let stored = client.request("GET", &format!("/v1/nodes/{id}/inventory"), None)?;
            match out {
                Output::Json => print(out, &stored, &[]),
                Output::Table => {
                    let disks: Vec<Value> = stored["inventory"]["disks"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|d| {
                            json!({"name": d["name"], "serial": d["identity"]["serial"], "model": d["identity"]["model"],
                                   "size": d["identity"]["sizeBytes"], "transport": d["transport"]})
                        })
                        .collect();
                    println!("node {id}: reported {}, tests passed: {}", stored["reportedAt"], stored["passed"]);
                    print(out, &Value::Array(disks), &DISK_COLUMNS);
                }
            }
        }
        Command::Node(NodeCommand::WipeReports { id }) => {
            let reports = client.list(&format!("/v1/nodes/{id}/wipe-reports"), &[], None)?;
            print(out, &reports, &WIPE_COLUMNS);
        }
        Command::Node(NodeCommand::DeployPlan { id, file }) => {
            let text = read_input(&file)?;
            let plan: Value = serde_json::from_str(&text)
                .map_err(|e| ClientError::Config(format!("{}: not JSON: {e}", file.display())))?;
            client.request("PUT", &format!("/v1/nodes/{id}/deploy-plan"), Some(RequestBody::Json(plan)))?;
            println!("deploy plan of {id} set");
        }
        Command::Bmc(command) => bmc::run(&client, out, command)?,
        Command::Lease(command) => lease::run(&client, out, command)?,
        Command::Image(command) => image::run_image(&client, out, command)?,
        Command::Host(command) => host::run_host(&client, out, command)?,
        Command::Switch(command) => switch::run(&client, out, command)?,
        Command::Attest(command) => attest::run(&client, out, command)?,
        Command::Profile(command) => image::run_profile(&client, out, command)?,
        Command::Provision { profile, count } => image::run_provision(&client, out, &profile, count)?,
        Command::Tenant(TenantCommand::List) => {
            print(out, &client.list("/v1/tenants", &[], None)?, &[("ID", "id"), ("NAME", "name")])
        }
        Command::Tenant(TenantCommand::Delete { id }) => {
            print(out, &client.request("DELETE", &format!("/v1/tenants/{id}"), None)?, &TENANT_DELETED_COLUMNS);
        }
        Command::Tenant(TenantCommand::SshKeys { id, set }) => {
            let path = format!("/v1/tenants/{id}/ssh-keys");
            let keys = match set {
                Some(file) => {
                    let text = read_input(&file)?;
                    let lines: Vec<&str> =
                        text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect();
                    client.request("PUT", &path, Some(RequestBody::Json(json!({"keys": lines}))))?
                }
                None => client.request("GET", &path, None)?,
            };
            match out {
                Output::Json => print(out, &keys, &[]),
                Output::Table => keys["keys"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .for_each(|k| println!("{k}")),
            }
        }
        Command::Tenant(TenantCommand::Create { id, name }) => {
            let tenant =
                client.request("POST", "/v1/tenants", Some(RequestBody::Json(json!({"id": id, "name": name}))))?;
            print(out, &tenant, &[("ID", "id"), ("NAME", "name")]);
        }
        Command::Credential(CredentialCommand::Create { role, tenant, name }) => {
            let body = json!({"role": role, "tenantId": tenant, "name": name});
            let created = client.request("POST", "/v1/credentials", Some(RequestBody::Json(body)))?;
            print(
                out,
                &created,
                &[("ID", "id"), ("ROLE", "role"), ("TENANT", "tenantId"), ("TOKEN (shown once)", "token")],
            );
        }
        Command::Credential(CredentialCommand::List) => print(
            out,
            &client.list("/v1/credentials", &[], None)?,
            &[("ID", "id"), ("ROLE", "role"), ("TENANT", "tenantId"), ("NAME", "name"), ("REVOKED", "revoked")],
        ),
        Command::Credential(CredentialCommand::Revoke { id }) => {
            client.request("DELETE", &format!("/v1/credentials/{id}"), None)?;
            println!("revoked {id}");
        }
        Command::Pool(PoolCommand::List) => print(out, &client.list("/v1/pools", &[], None)?, &POOL_COLUMNS),
        Command::Pool(PoolCommand::Create { file }) => {
            let body: Value = serde_json::from_str(&read_input(&file)?)
                .map_err(|e| ClientError::Config(format!("{}: not JSON: {e}", file.display())))?;
            print(out, &client.request("POST", "/v1/pools", Some(RequestBody::Json(body)))?, &POOL_COLUMNS);
        }
        Command::Pool(PoolCommand::Offer { pool, tenant }) => {
            let body = json!({"tenantId": tenant});
            print(
                out,
                &client.request("POST", &format!("/v1/pools/{pool}/offers"), Some(RequestBody::Json(body)))?,
                &POOL_COLUMNS,
            );
        }
        Command::Reservation(ReservationCommand::List) => {
            print(out, &client.list("/v1/reservations", &[], None)?, &RESERVATION_COLUMNS)
        }
        Command::Reservation(ReservationCommand::Show { id }) => {
            print(out, &client.request("GET", &format!("/v1/reservations/{id}"), None)?, &RESERVATION_COLUMNS)
        }
        Command::Reservation(ReservationCommand::Create {
            tenant,
            pool,
            devices,
            duration,
            start,
            node_profile,
            gang,
            architecture,
            idempotency_key,
        }) => {
            let devices: Vec<Value> = key_values(&devices, "devices")?
                .into_iter()
                .map(|(class, count)| {
                    let count: u32 = count
                        .as_str()
                        .unwrap_or("")
                        .parse()
                        .map_err(|_| ClientError::Config(format!("devices {class}: count is not a number")))?;
                    Ok(json!({"class": class, "count": count}))
                })
                .collect::<Result<_, ClientError>>()?;
            let mut body = json!({"tenantId": tenant, "poolId": pool, "devices": devices, "duration": duration, "start": start,
                                  "architecture": architecture, "idempotencyKey": idempotency_key});
            if let Some(profile) = node_profile {
                let (id, version) = profile
                    .split_once(':')
                    .ok_or_else(|| ClientError::Config("--node-profile is PROFILE:VERSION".into()))?;
                let version: u32 = version
                    .parse()
                    .map_err(|_| ClientError::Config("--node-profile version is not a number".into()))?;
                body["binding"] = json!("node");
                body["node"] = json!({"profileId": id, "profileVersion": version});
            }
            if let Some(gang) = gang {
                let (count, key) = gang.split_once(':').ok_or_else(|| ClientError::Config("--gang is N:KEY".into()))?;
                let count: u32 =
                    count.parse().map_err(|_| ClientError::Config("--gang count is not a number".into()))?;
                body["gang"] = json!({"count": count, "topologyKey": key});
            }
            print(
                out,
                &client.request("POST", "/v1/reservations", Some(RequestBody::Json(body)))?,
                &RESERVATION_COLUMNS,
            );
        }
        Command::Reservation(ReservationCommand::Cancel { id }) => {
            print(out, &client.request("POST", &format!("/v1/reservations/{id}/cancel"), None)?, &RESERVATION_COLUMNS)
        }
        Command::Reservation(ReservationCommand::Release { id }) => {
            print(out, &client.request("POST", &format!("/v1/reservations/{id}/release"), None)?, &RESERVATION_COLUMNS)
        }
        Command::Usage { tenant, from, to } => {
            let filters = [("tenantId", tenant), ("from", from), ("to", to)];
            let query: Vec<(&str, String)> =
                filters.into_iter().filter_map(|(name, value)| value.map(|v| (name, v))).collect();
            // Every page's records under the first page's totals (each page carries them all).
            let mut usage = Value::Null;
            client.pages("/v1/usage", &query, |page| {
                match usage["records"].as_array_mut() {
                    Some(records) => records.extend(page["records"].as_array().cloned().unwrap_or_default()),
                    None => usage = page,
                }
                Ok(true)
            })?;
            match out {
                Output::Json => print(out, &usage, &[]),
                Output::Table => {
                    let records: Vec<Value> = usage["records"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|r| {
                            let mut r = r.clone();
                            if let Some(q) = r["quantity"].as_f64() {
                                r["quantity"] = json!(hours(q));
                            }
                            r
                        })
                        .collect();
                    print!(
                        "{}",
                        table(
                            &records,
                            &[
                                ("WINDOW", "windowStart"),
                                ("METER", "meter"),
                                ("QUANTITY", "quantity"),
                                ("RESERVATION", "reservationId")
                            ]
                        )
                    );
                    for (meter, total) in usage["totals"].as_object().into_iter().flatten() {
                        println!("total {meter}: {}", total.as_f64().map_or_else(|| total.to_string(), hours));
                    }
                }
            }
        }
        Command::Events { mut after, follow } => loop {
            let wait = if follow { 30 } else { 0 };
            let page = client.request("GET", &format!("/v1/events?after={after}&wait={wait}"), None)?;
            let events = page["events"].as_array().cloned().unwrap_or_default();
            match out {
                Output::Json => events.iter().for_each(|e| println!("{e}")),
                Output::Table => events.iter().for_each(|e| {
                    println!(
                        "{:>6}  {}  {:<24} {:<16} {}",
                        e["seq"],
                        e["at"].as_str().unwrap_or(""),
                        e["kind"].as_str().unwrap_or(""),
                        e["subject"].as_str().unwrap_or(""),
                        e["data"]
                    )
                }),
            }
            after = page["next"].as_i64().unwrap_or(after);
            if !follow {
                break;
            }
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn hours_read_as_people_read_them() {
        assert_eq!(super::hours(0.002_266_388_888_888_889), "0.0023");
        assert_eq!(super::hours(2.75), "2.75");
        assert_eq!(super::hours(1.0), "1");
        assert_eq!(super::hours(0.0), "0");
    }
}
