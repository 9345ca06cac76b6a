//! `metalctl bmc`: a node's BMC settings, power, boot override, virtual media, readings,
//! password rotation, and discovery. Passwords come from a file, stdin or
//! METAL_BMC_PASSWORD, never from the command line.

use std::path::PathBuf;

use clap::Subcommand;
use metalctl::client::{Client, ClientError, RequestBody};
use serde_json::{Value, json};

use metalctl::output::{Output, READING_COLUMNS, print, read_input, reading_rows};

/// How to trust a Redfish BMC's certificate (one of them for https).
#[derive(clap::Args, Debug)]
pub struct TlsArgs {
    /// Trust exactly the certificate with this SHA-256 fingerprint (hex, colons allowed).
    #[arg(long, conflicts_with_all = ["tls_ca", "tls_insecure"])]
    tls_fingerprint: Option<String>,
    /// Trust certificates from this CA (PEM file); the host name is checked.
    #[arg(long, conflicts_with = "tls_insecure")]
    tls_ca: Option<PathBuf>,
    /// Verify nothing (only for BMCs you cannot pin).
    #[arg(long)]
    tls_insecure: bool,
}

impl TlsArgs {
    fn json(&self) -> Result<Option<Value>, ClientError> {
        Ok(match (&self.tls_fingerprint, &self.tls_ca, self.tls_insecure) {
            (Some(f), _, _) => Some(json!({"mode": "fingerprint", "value": f})),
            (_, Some(ca), _) => Some(json!({"mode": "ca", "value": read_input(ca)?})),
            (_, _, true) => Some(json!({"mode": "insecure"})),
            _ => None,
        })
    }
}

#[derive(Subcommand, Debug)]
pub enum BmcCommand {
    /// Set how to reach a node's BMC. The password is read from --password-file, else from
    /// METAL_BMC_PASSWORD, else from stdin.
    Set {
        node: String,
        /// redfish or ipmi.
        #[arg(long, value_parser = ["redfish", "ipmi"])]
        protocol: String,
        /// Redfish: https://host[:port]; IPMI: host[:port].
        #[arg(long)]
        address: String,
        #[arg(long)]
        username: String,
        /// File holding the password (- is stdin).
        #[arg(long)]
        password_file: Option<PathBuf>,
        #[command(flatten)]
        tls: TlsArgs,
        /// Redfish system Id or UUID when the BMC has several.
        #[arg(long)]
        system: Option<String>,
        /// IPMI session privilege: administrator, operator or user.
        #[arg(long)]
        privilege: Option<String>,
    },
    /// Show a node's BMC settings (never the password).
    Show { node: String },
    /// Power: on, off, reset, cycle (answers once the BMC reports the result), or status.
    Power {
        node: String,
        #[arg(value_parser = ["on", "off", "reset", "cycle", "status"])]
        action: String,
    },
    /// Boot override: pxe, disk, cd or bios, for the next boot or (--persistent) all.
    Boot {
        node: String,
        #[arg(value_parser = ["pxe", "disk", "cd", "bios"])]
        target: String,
        #[arg(long)]
        persistent: bool,
    },
    /// Virtual CD: insert URL, eject, or status.
    Media {
        node: String,
        #[arg(value_parser = ["insert", "eject", "status"])]
        action: String,
        /// ISO URL (for insert).
        url: Option<String>,
    },
    /// Everything the BMC reports (identity, health, power, temperatures, firmware, logs).
    Readings { node: String },
    /// Rotate the BMC password the scheduler uses (read like `set`'s).
    Rotate {
        node: String,
        #[arg(long)]
        password_file: Option<PathBuf>,
    },
    /// Scan a private range (at most 512 addresses) for Redfish BMCs.
    Discover {
        /// IPv4 CIDR, e.g. 10.0.0.0/24.
        range: String,
        /// Up to three credentials, JSON [{"username", "password"}] or lines user:password.
        #[arg(long)]
        credentials_file: PathBuf,
        #[arg(long)]
        port: Option<u16>,
        /// https (default) or http (loopback emulators).
        #[arg(long)]
        scheme: Option<String>,
        #[command(flatten)]
        tls: TlsArgs,
        /// Enrol each BMC a credential opened as a node.
        #[arg(long)]
        register: bool,
        /// Pool for enrolled nodes.
        #[arg(long)]
        pool: Option<String>,
    },
}

/// The password from a file, METAL_BMC_PASSWORD, or stdin, without a trailing newline.
fn password(file: Option<&PathBuf>) -> Result<String, ClientError> {
    let text = match (file, std::env::var("METAL_BMC_PASSWORD")) {
        (Some(f), _) => read_input(f)?,
        (None, Ok(p)) => p,
        (None, Err(_)) => read_input(&PathBuf::from("-"))?,
    };
    let password = text.trim_end_matches(['\n', '\r']).to_owned();
    if password.is_empty() {
        return Err(ClientError::Config("no BMC password (use --password-file, METAL_BMC_PASSWORD or stdin)".into()));
    }
    Ok(password)
}

fn credentials(file: &std::path::Path) -> Result<Value, ClientError> {
    let text = read_input(file)?;
    if let Ok(list @ Value::Array(_)) = serde_json::from_str(&text) {
        return Ok(list);
    }
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            l.split_once(':')
                .map(|(u, p)| json!({"username": u, "password": p}))
                .ok_or_else(|| ClientError::Config(format!("{}: each line must be user:password", file.display())))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Value::Array)
}

const BMC_COLUMNS: [(&str, &str); 6] = [
    ("NODE", "nodeId"),
    ("PROTOCOL", "protocol"),
    ("ADDRESS", "address"),
    ("USER", "username"),
    ("SEALED", "credentialSealed"),
    ("HEALTH", "health"),
];

/// Power `node` (`status` reads it): `bmc power` for an admin, `lease power` for a lessee.
pub fn power(client: &Client, out: Output, node: &str, action: &str) -> Result<(), ClientError> {
    let path = format!("/v1/nodes/{node}/power");
    if action == "status" {
        print(out, &client.request("GET", &path, None)?, &[("POWER", "power")]);
    } else {
        let result = client.request("POST", &path, Some(RequestBody::Json(json!({"action": action}))))?;
        print(out, &result, &[("BEFORE", "before"), ("AFTER", "after"), ("SENT", "sent")]);
    }
    Ok(())
}

/// Runs a `bmc` command.
pub fn run(client: &Client, out: Output, command: BmcCommand) -> Result<(), ClientError> {
    let body = |v: Value| Some(RequestBody::Json(v));
    match command {
        BmcCommand::Set { node, protocol, address, username, password_file, tls, system, privilege } => {
            let mut spec = json!({"protocol": protocol, "address": address, "username": username,
                                  "password": password(password_file.as_ref())?});
            if let Some(tls) = tls.json()? {
                spec["tls"] = tls;
            }
            if let Some(system) = system {
                spec["systemId"] = json!(system);
            }
            if let Some(privilege) = privilege {
                spec["privilege"] = json!(privilege);
            }
            let info = client.request("PUT", &format!("/v1/nodes/{node}/bmc"), body(spec))?;
            print(out, &info, &BMC_COLUMNS);
            if info["credentialSealed"] == false {
                eprintln!(
                    "metalctl: warning: the scheduler stored this BMC password unsealed; start it with \
                     METAL_MASTER_KEY set (64 hex digits) to seal BMC passwords at rest"
                );
            }
        }
        BmcCommand::Show { node } => {
            print(out, &client.request("GET", &format!("/v1/nodes/{node}/bmc"), None)?, &BMC_COLUMNS)
        }
        BmcCommand::Power { node, action } => power(client, out, &node, &action)?,
        BmcCommand::Boot { node, target, persistent } => {
            client.request(
                "POST",
                &format!("/v1/nodes/{node}/boot"),
                body(json!({"target": target, "persistent": persistent})),
            )?;
            if out == Output::Table {
                println!("{node} boots from {target} {}", if persistent { "from now on" } else { "next time" });
            }
        }
        BmcCommand::Media { node, action, url } => {
            let path = format!("/v1/nodes/{node}/media");
            let result = match (action.as_str(), url) {
                ("insert", Some(url)) => client.request("POST", &path, body(json!({"url": url})))?,
                ("insert", None) => return Err(ClientError::Config("media insert needs the ISO URL".into())),
                ("eject", _) => client.request("DELETE", &path, None)?,
                _ => client.request("GET", &path, None)?,
            };
            print(out, &result, &[("INSERTED", "inserted"), ("IMAGE", "image")]);
        }
        BmcCommand::Readings { node } => {
            let readings = client.request("GET", &format!("/v1/nodes/{node}/bmc/readings"), None)?;
            match out {
                Output::Json => print(out, &readings, &[]),
                Output::Table => print(out, &Value::Array(reading_rows(&readings)), &READING_COLUMNS),
            }
        }
        BmcCommand::Rotate { node, password_file } => {
            let new = json!({"password": password(password_file.as_ref())?});
            print(out, &client.request("POST", &format!("/v1/nodes/{node}/bmc/rotate"), body(new))?, &BMC_COLUMNS);
        }
        BmcCommand::Discover { range, credentials_file, port, scheme, tls, register, pool } => {
            let tls = tls.json()?.ok_or_else(|| {
                ClientError::Config("say how to trust the BMCs: --tls-ca, --tls-fingerprint or --tls-insecure".into())
            })?;
            let request = json!({"range": range, "credentials": credentials(&credentials_file)?, "port": port,
                                 "scheme": scheme, "tls": tls, "register": register, "poolId": pool});
            let result = client.request("POST", "/v1/bmcs/discover", body(request))?;
            match out {
                Output::Json => print(out, &result, &[]),
                Output::Table => {
                    println!("scanned {} addresses", result["scanned"]);
                    let rows = result["found"].as_array().cloned().unwrap_or_default();
                    print(
                        out,
                        &Value::Array(rows),
                        &[
                            ("ADDRESS", "address"),
                            ("USER", "authenticatedAs"),
                            ("SERIAL", "serial"),
                            ("NODE", "registeredNode"),
                            ("NOTE", "note"),
                        ],
                    );
                }
            }
        }
    }
    Ok(())
}
