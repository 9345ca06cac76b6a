//! `metalctl host`: the deployed OSes that joined as hosts, each node's join log, and the
//! joining of machines that already run an OS (over SSH, or with an offline bundle).

use std::path::PathBuf;

use clap::Subcommand;
use metalctl::client::{Client, ClientError};
use metalctl::host_add::{self, AddOptions, Target};
use serde_json::{Value, json};

use metalctl::output::{Output, print, read_input};

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
    /// Join machines that already run an OS, over SSH with your key: enrols each node
    /// (creating it when unknown), fetches the join script and metal-agent from the boot
    /// listener over the pinned site CA, checks their digests here and there, and runs the
    /// join (USER is root, or has passwordless sudo; the machine must reach the boot
    /// listener). A machine that fails is reported and the rest go on; the exit status is
    /// non-zero if any failed.
    Add {
        /// USER@HOST[:PORT] of one machine.
        #[arg(required_unless_present = "file", conflicts_with = "file")]
        target: Option<String>,
        /// The node it is [default: the host name's first label].
        #[arg(long, requires = "target")]
        node: Option<String>,
        /// A file of machines, one per line: USER@HOST[:PORT] [NODE] (# starts a comment).
        #[arg(long)]
        file: Option<PathBuf>,
        /// How many machines to join at once.
        #[arg(long, default_value_t = 4)]
        parallel: usize,
        /// The SSH private key [default: ssh's own].
        #[arg(long)]
        ssh_key: Option<PathBuf>,
        /// An extra ssh option (-o), e.g. StrictHostKeyChecking=accept-new; repeatable.
        #[arg(long = "ssh-option")]
        ssh_options: Vec<String>,
        /// The host setup, a JSON file ({"networks": [...], "storagePools": [...]}); - is stdin.
        #[arg(long)]
        setup: Option<PathBuf>,
        /// Where this machine reaches the boot listener [default: the controller URL the
        /// enrolment names, where the hosts reach it].
        #[arg(long)]
        boot_url: Option<String>,
    },
    /// Enrol a machine that already runs an OS for the offline bundle: prints the
    /// single-use token once (give it to `install --token-file`), with the URL to join.
    Enrol {
        /// The node (created, state new, when unknown).
        node: String,
        /// The host setup, a JSON file; - is stdin.
        #[arg(long)]
        setup: Option<PathBuf>,
        /// How long the token stays usable (30m, 2h, 1d).
        #[arg(long)]
        ttl: Option<String>,
        /// Write the token to this file (mode 0600) instead of printing it.
        #[arg(long)]
        token_out: Option<PathBuf>,
    },
    /// Write the offline bundle for air-gapped machines: one tarball with metal-agent, the
    /// join script and the site CA; run it there as
    /// `metal-join/install --join URL --token-file FILE`.
    Bundle {
        /// The tarball to write.
        #[arg(long)]
        out: PathBuf,
        /// Where this machine reaches the boot listener [default: the controller URL].
        #[arg(long)]
        boot_url: Option<String>,
    },
}

fn setup_of(file: Option<&PathBuf>) -> Result<Value, ClientError> {
    match file {
        Some(path) => serde_json::from_str(&read_input(path)?)
            .map_err(|e| ClientError::Config(format!("{}: not JSON: {e}", path.display()))),
        None => Ok(json!({})),
    }
}

/// Runs a `metalctl host` command.
pub fn run_host(client: &Client, out: Output, command: HostCommand) -> Result<(), ClientError> {
    match command {
        HostCommand::List => print(out, &client.list("/v1/hosts", &[], None)?, &HOST_COLUMNS),
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
            print(out, &client.list(&format!("/v1/hosts/{id}/join-log"), &[], None)?, &LOG_COLUMNS)
        }
        HostCommand::Add { target, node, file, parallel, ssh_key, ssh_options, setup, boot_url } => {
            let targets = match (&target, &file) {
                (Some(target), _) => vec![Target::parse(target, node.as_deref()).map_err(ClientError::Config)?],
                (None, Some(file)) => Target::parse_file(&read_input(file)?).map_err(ClientError::Config)?,
                (None, None) => return Err(ClientError::Config("name a USER@HOST or --file".into())),
            };
            let options = AddOptions { ssh_key, ssh_options, setup: setup_of(setup.as_ref())?, boot_url };
            let results = host_add::add_all(client, &targets, &options, parallel);
            let failed = results.iter().filter(|(_, r)| r.is_err()).count();
            for (target, result) in &results {
                match result {
                    Ok(text) => {
                        let joined = text
                            .lines()
                            .find(|l| l.starts_with("joined as") || l.starts_with("already joined"))
                            .unwrap_or("joined");
                        println!("{}: {joined}", target.node);
                    }
                    Err(e) => eprintln!("{}: {e}", target.node),
                }
            }
            if failed > 0 {
                return Err(ClientError::Config(format!("{failed} of {} machines did not join", results.len())));
            }
        }
        HostCommand::Enrol { node, setup, ttl, token_out } => {
            let enrolment = host_add::enrol(client, &node, &setup_of(setup.as_ref())?, ttl.as_deref())
                .map_err(ClientError::Config)?;
            let token = enrolment["token"].as_str().unwrap_or_default();
            let url = enrolment["controllerUrl"].as_str().unwrap_or_default();
            let expires = enrolment["expiresAt"].as_str().unwrap_or_default();
            match token_out {
                Some(path) => {
                    use std::io::Write as _;
                    use std::os::unix::fs::OpenOptionsExt as _;
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&path)
                        .map_err(|e| ClientError::Config(format!("{}: {e}", path.display())))?;
                    writeln!(f, "{token}").map_err(|e| ClientError::Config(format!("{}: {e}", path.display())))?;
                    println!(
                        "enrolment {} of {node}: token in {} (single use, until {expires})",
                        enrolment["id"].as_str().unwrap_or_default(),
                        path.display()
                    );
                }
                None => println!(
                    "enrolment {} of {node} (single use, until {expires})\ntoken: {token}",
                    enrolment["id"].as_str().unwrap_or_default()
                ),
            }
            println!("join with: metal-join/install --join {url} --token-file FILE");
        }
        HostCommand::Bundle { out: path, boot_url } => {
            let files = host_add::fetch_files(client, boot_url.as_deref()).map_err(ClientError::Config)?;
            host_add::bundle(&files, &path).map_err(ClientError::Config)?;
            println!("wrote {} (metal-join/install --join URL --token-file FILE)", path.display());
        }
    }
    Ok(())
}
